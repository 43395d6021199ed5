"""dask-gpu: Dask on NVIDIA GPUs."""

from dask_gpu import config as _config  # noqa: F401  (registers the gpu.* defaults)
from dask_gpu.array import install as _install_array_optimization
from dask_gpu.cluster import LocalCUDACluster
from dask_gpu.devices import Device, NoGPUError, State, System, discover
from dask_gpu.kernel_cache import compile_less as _compile_less
from dask_gpu.launch import CUDAWorker
from dask_gpu.memory.allocator import DeviceMemoryError
from dask_gpu.memory.dispatch import HostCopy, register_device_type
from dask_gpu.memory.stats import memory_stats
from dask_gpu.options import WorkerOptions

__version__ = "0.1.0"

_install_array_optimization()
_compile_less()

__all__ = [
    "CUDAWorker",
    "Device",
    "DeviceMemoryError",
    "HostCopy",
    "LocalCUDACluster",
    "NoGPUError",
    "State",
    "System",
    "WorkerOptions",
    "__version__",
    "discover",
    "memory_stats",
    "register_device_type",
]
