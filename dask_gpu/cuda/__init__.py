"""dask-cuda's import path on dask-gpu: replace ``dask_cuda`` by ``dask_gpu.cuda`` in any import.

Each module here bears the name of a dask-cuda 26.10 module and maps its public names onto dask-gpu's own
implementation; what dask-gpu has no name for (``utils``' waits for workers, its all-to-all and its NVTX
annotation, dask-cuda's test helpers) is written here in a few lines on top of it. Nothing in dask-gpu imports
this package. ``docs/migrating-from-dask-cuda.md`` lists every name, its equivalent and the differences.
"""

from dask_gpu import __version__
from dask_gpu.cluster import LocalCUDACluster
from dask_gpu.launch import CUDAWorker

__all__ = ["CUDAWorker", "LocalCUDACluster", "__git_commit__", "__version__"]
__git_commit__ = ""  # dask-cuda's build stamp, empty outside its own builds; dask-gpu's carry none
