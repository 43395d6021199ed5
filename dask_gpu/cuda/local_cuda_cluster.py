"""``dask_cuda.local_cuda_cluster``: LocalCUDACluster is dask-gpu's (dask_gpu.cluster)."""

from dask_gpu.cluster import LocalCUDACluster
from dask_gpu.cuda._absent import absent

__all__ = ["LocalCUDACluster"]

_why = "log_spilling=True logs every spill from the workers' store, whatever their worker_class"
__getattr__ = absent("local_cuda_cluster", {"LoggedWorker": _why, "LoggedNanny": _why})
