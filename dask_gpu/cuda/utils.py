"""``dask_cuda.utils``: each name maps onto dask-gpu's devices (NVML and simulated devices, MIG, CPU affinity),
options (sizes and limits), ucx and report modules; ``wait_workers``, ``all_to_all`` and ``nvtx_annotate`` live
here. Devices are named as in ``CUDA_VISIBLE_DEVICES``: an index (0 or "0"), a ``GPU-``/``MIG-`` UUID, or a UUID
prefix."""

import contextlib
import os
from multiprocessing import cpu_count as get_cpu_count

from distributed import wait

from dask_gpu import config, devices, parse
from dask_gpu.cuda._absent import absent
from dask_gpu.report import cluster_dict as get_cluster_configuration
from dask_gpu.report import print_cluster_config
from dask_gpu.report import worker_dict as get_worker_config
from dask_gpu.ucx import get_ucx_config

__all__ = [
    "_all_to_all", "all_to_all", "cuda_visible_devices", "get_cluster_configuration", "get_cpu_affinity",
    "get_cpu_count", "get_device_total_memory", "get_gpu_count", "get_gpu_count_mig", "get_gpu_uuid", "get_n_gpus",
    "get_gpu_handle", "get_preload_options", "get_ucx_config", "get_worker_config", "has_device_memory_resource",
    "nvml_device_index", "nvtx_annotate",
    "parse_cuda_visible_device", "parse_device_bytes", "parse_device_memory_limit", "print_cluster_config",
    "unpack_bitmask", "wait_workers",
]


def get_n_gpus() -> int:
    """The devices a cluster here would use: CUDA_VISIBLE_DEVICES's, else every GPU (MIG instances each count)."""
    return len(devices.select(devices.discover()))


def get_gpu_count() -> int:
    """The GPUs of this machine (NVML, or gpu.simulate)."""
    return len(devices.discover().require().devices)


def get_gpu_count_mig(return_uuids=False):
    """The MIG instances of this machine's GPUs, and their UUIDs with ``return_uuids=True``."""
    uuids = [m.uuid for d in devices.discover().require().devices for m in d.mig]
    return (len(uuids), uuids) if return_uuids else len(uuids)


def get_device_total_memory(device_index=0) -> int:
    """Bytes of memory of a device (of the MIG instance itself, for a MIG UUID)."""
    return devices.find(device_index).memory_total


def has_device_memory_resource(device_index=0) -> bool:
    return devices.find(device_index).memory_total > 0


def get_gpu_uuid(device_index=0) -> str:
    return devices.find(device_index).uuid


def get_gpu_handle(device_id=0):
    """NVML's handle of a device, named by index or by (MIG) UUID, for code that asks NVML itself."""
    import pynvml

    device = devices.find(device_id)
    if device.simulated:
        raise ValueError(f"device {device_id!r} is simulated (gpu.simulate): NVML has no handle for it")
    pynvml.nvmlInit()
    return pynvml.nvmlDeviceGetHandleByUUID(device.uuid)


def get_preload_options(protocol=None, create_cuda_context=None, enable_tcp_over_ucx=None, enable_infiniband=None,
                        enable_nvlink=None, enable_rdmacm=None) -> dict:
    """``preload`` and ``preload_argv`` for a process that should make a CUDA context as it starts: the
    ``dask_gpu.cuda.initialize`` hook. The UCX transports are not its to set: ``initialize`` (or the cluster's
    keywords) sets them in distributed-ucxx's configuration, where every connection reads them."""
    return {"preload": ["dask_gpu.cuda.initialize"], "preload_argv": ["--create-cuda-context"] if create_cuda_context
            else []}


def get_cpu_affinity(device_index=None) -> list[int]:
    """The CPU cores nearest a device; every core this process may use where NVML does not say."""
    return list(devices.find(0 if device_index is None else device_index).cpu_affinity) or sorted(
        os.sched_getaffinity(0))


def unpack_bitmask(x, mask_bits=64) -> list[int]:
    return devices.unpack_bitmask(x, mask_bits)


def parse_cuda_visible_device(dev):
    """One CUDA_VISIBLE_DEVICES entry: an index as an int, a UUID as a string; as dask-cuda's, a TypeError for
    what is neither an int nor a string, a ValueError for a string that names no device."""
    if isinstance(dev, bool) or not isinstance(dev, (int, str)):
        raise TypeError(f"a CUDA_VISIBLE_DEVICES entry is a GPU index or a UUID, not {dev!r}")
    return _index(devices.parse_visible_devices([dev])[0])


def nvml_device_index(i, CUDA_VISIBLE_DEVICES):
    """The i-th entry of CUDA_VISIBLE_DEVICES (a "0,1" string or a list): an int index, or a UUID."""
    if not isinstance(CUDA_VISIBLE_DEVICES, (str, list)):
        raise ValueError("`CUDA_VISIBLE_DEVICES` must be `str` or `list`")
    return _index(devices.parse_visible_devices(CUDA_VISIBLE_DEVICES)[i])


def cuda_visible_devices(i, visible=None) -> str:
    """CUDA_VISIBLE_DEVICES of the i-th worker: ``visible`` (default: the devices in use) rotated to start at i."""
    tokens = ([t for t, _ in devices.select(devices.discover())] if visible is None
              else devices.parse_visible_devices(list(visible)))
    return devices.rotate(tokens, i)


def parse_device_memory_limit(device_memory_limit, device_index=0, alignment_size=1):
    """A device memory limit in bytes for that device, as LocalCUDACluster reads it; None for no limit.

    "default" is the gpu.device-memory-limit configuration (0.8), "auto" the whole device, None or 0 no limit.
    """
    value = config.get("device_memory_limit", parse.keyword_limit(device_memory_limit))
    return _device_bytes(parse.device_memory_limit(value), device_index, alignment_size)


def parse_device_bytes(device_bytes, device_index=0, alignment_size=1):
    """Bytes, "16GB" or a fraction of that device, in bytes; None for None or 0."""
    return _device_bytes(parse.device_memory_limit(device_bytes), device_index, alignment_size)


def _device_bytes(limit, device_index, alignment_size):
    size = parse.device_memory_bytes(limit, devices.find(device_index).memory_total)
    return size // alignment_size * alignment_size or None


def _index(token: str):
    return int(token) if token.isdigit() else token


def nvtx_annotate(message=None, color="blue", domain=None):
    """NVTX's ``annotate`` (a range in Nsight's timeline, as a decorator or a ``with`` block) where the nvtx
    package is installed; one that marks nothing where it is not."""
    try:
        from nvtx import annotate
    except ImportError:
        return _Unmarked() if message is None or isinstance(message, str) else message  # @nvtx_annotate bare
    return annotate(message, color=color, domain=domain)


class _Unmarked(contextlib.ContextDecorator):
    """A ``with`` block or a decorator that does nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


__getattr__ = absent("utils", {
    "get_rmm_log_file_name": "dask-gpu names RMM logs rmm-<host>-<pid>.csv in rmm_log_directory",
    "get_scheduler_configuration": "dask_gpu.report.cluster_dict(client) (get_cluster_configuration here)",
    "get_rmm_device_memory_usage": "dask_gpu.memory_stats(client) reports each worker's device bytes",
    "CommaSeparatedChoice": "a click type of dask-cuda's command line",
    **dict.fromkeys(("pretty_print", "pretty_print_str", "pretty_print_dict"), "print_cluster_config prints the "
                    "table; dask_gpu.report.cluster_text formats it"),
})


def wait_workers(client, min_timeout=10, seconds_per_gpu=2, n_gpus=None, timeout_callback=None) -> bool:
    """Wait until ``n_gpus`` workers (default: one per visible GPU) joined; False (and
    ``timeout_callback()``) if they did not within ``max(min_timeout, seconds_per_gpu * n_gpus)`` seconds."""
    n_gpus = n_gpus or get_n_gpus()
    try:
        client.wait_for_workers(n_gpus, timeout=max(min_timeout, seconds_per_gpu * n_gpus))
    except TimeoutError:
        if callable(timeout_callback):
            timeout_callback()
        return False
    return True


def all_to_all(client) -> None:
    """Make every worker fetch a byte from every worker, so that each pair has connected once."""
    return client.sync(_all_to_all, client)


async def _all_to_all(client) -> None:
    workers = list((await client.scheduler.identity(n_workers=-1))["workers"])
    pieces = [client.submit(bytes, 1, workers=[w], allow_other_workers=False, pure=False) for w in workers]
    await wait(pieces)
    reads = [client.submit(len, piece, workers=[w], allow_other_workers=False, pure=False)
             for w in workers for piece in pieces]
    await wait(reads)
