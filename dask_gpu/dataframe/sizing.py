"""What a partition of the ``gpu`` dataframe backend holds, and the GPU workers it is sized for.

A partition holds about ``gpu.partition-size`` of the smallest GPU worker's memory (default 1/32, cuDF's
guidance of 1/32 to 1/16): large enough that each task keeps the GPU busy, small enough that a join or a sort of
it fits beside the data. :mod:`.parquet` plans its reads in such partitions, as many as a multiple of the GPU
workers where there are several.
"""

from __future__ import annotations

from dask_gpu import config
from dask_gpu.parse import in_bytes, size_or_fraction


def partition_bytes(device_memory: int, size=None) -> int:
    return max(1, in_bytes(partition_size(size), device_memory))


def partition_size(size=None) -> int | float:
    """``size`` or ``gpu.partition-size``, checked: bytes, or a fraction of the device."""
    value = size_or_fraction(config.get("partition_size", size), "gpu.partition-size")
    if not value:
        raise ValueError(f"gpu.partition-size must be more than 0 (bytes, or a fraction of the GPU), not {value!r}")
    return value


def gpu_workers(client=None) -> list[int]:
    """The device memory of each GPU worker of ``client``'s cluster (of this machine's GPUs without one); asked of
    the workers again only when what the client last heard of its workers (their count, threads and memory, which
    it hears every few seconds) has changed: each read of the backend plans with these, and a question to the
    cluster is a round trip."""
    from distributed import get_client

    from dask_gpu import devices, internals

    if client is None:
        try:
            client = get_client()
        except ValueError:  # no cluster: the GPUs of this machine
            return [d.memory_total for d in devices.discover().devices]
    heard = internals.heard_identity(client)
    key = (client.id, *(heard.get(k) for k in ("id", "n_workers", "total_threads", "total_memory")))
    if not heard.get("n_workers") or key not in _asked:
        sizes = [size for size in client.run(_device_memory).values() if size]
        if not heard.get("n_workers"):
            return sizes
        _asked.clear()
        _asked[key] = sizes
    return _asked[key]


_asked: dict = {}  # (client, its workers) -> their GPUs' memory


def _device_memory(dask_worker) -> int | None:
    plugin = dask_worker.plugins.get("dask-gpu")
    return plugin.device.get("memory_total") if plugin is not None else None
