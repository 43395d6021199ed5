"""dask-gpu: Dask on NVIDIA GPUs."""

from dask_gpu import config as _config  # noqa: F401  (registers the gpu.* defaults)
from dask_gpu.cluster import LocalCUDACluster
from dask_gpu.devices import Device, NoGPUError, State, System, discover
from dask_gpu.options import WorkerOptions

__version__ = "0.1.0"

__all__ = ["Device", "LocalCUDACluster", "NoGPUError", "State", "System", "WorkerOptions", "discover", "__version__"]
