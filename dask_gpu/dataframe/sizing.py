"""How many partitions a dataset gets on GPU workers: even ones, about ``gpu.partition-size`` of a GPU each.

cuDF's guidance is a partition of 1/32 to 1/16 of the device's memory: large enough that each task
keeps the GPU busy, small enough that a join or a sort of it fits beside the data. Partitions of
equal size, as many as a multiple of the GPU workers, keep every GPU equally busy.
"""

from __future__ import annotations

import math

from dask_gpu import config
from dask_gpu.parse import size_or_fraction


def partition_count(stored_bytes: int, pieces: int, device_memory: int, gpus: int, size=None) -> int:
    """Partitions for ``stored_bytes`` of data read as ``pieces`` (files), on ``gpus`` GPUs of at least
    ``device_memory`` bytes; ``size`` (bytes or a fraction of the device) defaults to ``gpu.partition-size``."""
    target = partition_bytes(device_memory, size)
    count = max(1, round(stored_bytes / target))
    count = math.ceil(count / max(gpus, 1)) * max(gpus, 1)  # the same number on every GPU
    return max(1, min(count, pieces))  # pieces are joined, never split


def partition_bytes(device_memory: int, size=None) -> int:
    value = partition_size(size)
    return max(1, int(value * device_memory) if isinstance(value, float) else value)


def partition_size(size=None) -> int | float:
    """``size`` or ``gpu.partition-size``, checked: bytes, or a fraction of the device."""
    value = size_or_fraction(config.get("partition_size", size), "gpu.partition-size")
    if not value:
        raise ValueError(f"gpu.partition-size must be more than 0 (bytes, or a fraction of the GPU), not {value!r}")
    return value


def stored_bytes(path, storage_options=None) -> int:
    """The bytes of the files under ``path`` (a file, a directory, a glob or a list of them)."""
    return listing(path, storage_options)[0]


def listing(path, storage_options=None) -> tuple[int, str]:
    """The bytes of the files under ``path``, and a token that changes when a file is added, removed or written."""
    from dask.base import tokenize
    from fsspec.core import get_fs_token_paths

    fs, _, paths = get_fs_token_paths(path, storage_options=storage_options)
    files = {}
    for p in paths:
        files.update(fs.find(p, detail=True) if fs.isdir(p) else {p: fs.info(p)})
    return sum(info.get("size") or 0 for info in files.values()), tokenize(sorted(files.items(), key=str))


def gpu_workers(client=None) -> list[int]:
    """The device memory of each GPU worker of ``client``'s cluster (of this machine's GPUs without one)."""
    from distributed import get_client

    from dask_gpu import devices

    if client is None:
        try:
            client = get_client()
        except ValueError:  # no cluster: the GPUs of this machine
            return [d.memory_total for d in devices.discover().devices]
    sizes = client.run(_device_memory).values()
    return [size for size in sizes if size]


def _device_memory(dask_worker) -> int | None:
    plugin = dask_worker.plugins.get("dask-gpu")
    return plugin.device.get("memory_total") if plugin is not None else None
