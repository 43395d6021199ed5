"""``dask_cuda.plugins``: dask-cuda's worker plugins, by name and signature, from dask_gpu.plugins.

dask-gpu's GPU workers already run all four (in their GPUWorker plugin); these are for clients that
register them on workers themselves.
"""

from dask_gpu.cuda._absent import absent
from dask_gpu.plugins import CPUAffinity, CUDFSetup, PreImport, RMMSetup

__all__ = ["CPUAffinity", "CUDFSetup", "PreImport", "RMMSetup"]

__getattr__ = absent("plugins", {
    "enable_rmm_memory_for_library": "RMMSetup(..., external_lib_list=['cupy']) or the rmm_allocator_external_lib_list "
                                     "keyword (--set-rmm-allocator-for-libs) routes a library to RMM in each worker",
})
