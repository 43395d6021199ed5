"""``dask_cuda.cuda_worker``: CUDAWorker is dask-gpu's (dask_gpu.launch), which ``dask gpu worker`` runs."""

from dask_gpu.launch import CUDAWorker

__all__ = ["CUDAWorker"]
