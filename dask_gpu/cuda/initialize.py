"""``dask_cuda.initialize``: dask_gpu.ucx's ``initialize`` (distributed-ucxx settings for this process, and a
CUDA context where asked) and ``dask_setup``, so ``--preload dask_gpu.cuda.initialize --create-cuda-context``
works where ``dask_cuda.initialize`` did."""

from dask_gpu.ucx import dask_setup, initialize

__all__ = ["dask_setup", "initialize"]
