"""``dask gpu warmup``: compile the seed workloads' kernels into the machine's kernel cache, once.

A first call compiles only what it has not found in the cache (:mod:`dask_gpu.kernel_cache`), each kernel
in a fraction of a second; after this, a new cluster's first seed workload compiles nothing.
"""

from __future__ import annotations

import os
import time

from dask_gpu.kernel_cache import cupy_cache_dir, kernel_cache_env, use_kernel_cache

# The seeds' array workloads, small: a kernel depends on the dtypes and the operations, not the sizes.
WORKLOADS = {
    "(x + 1)[::2, ::2].sum()": lambda x: (x + 1)[::2, ::2].sum(),
    "(x + 1)[::2, ::2].mean()": lambda x: (x + 1)[::2, ::2].mean(),
    "(x + x.T).sum()": lambda x: (x + x.T).sum(),
    "x.sum(), x.mean(), x.std()": lambda x: [x.sum(), x.mean(), x.std()],
    "svd(x)": lambda x: __import__("dask.array", fromlist=["linalg"]).linalg.svd(x.rechunk((x.chunks[0], -1)))[1],
}


def compile_kernels(status=None) -> dict:
    """Run each of :data:`WORKLOADS` once on this machine's GPU, on CuPy's random arrays and on
    :mod:`dask_gpu.random`'s, compiling their kernels into ``gpu.kernel-cache`` (CuPy's own cache where
    unset). ``status(line)`` after each. Returns the cache directory, its kernels before and after, and
    the seconds of each workload."""
    import cupy
    import dask
    import dask.array as da

    from dask_gpu.random import default_rng

    use_kernel_cache(kernel_cache_env().get("CUPY_CACHE_DIR"))
    directory = cupy_cache_dir()

    def kernels() -> int:
        return len(os.listdir(directory)) if os.path.isdir(directory) else 0

    before, seconds = kernels(), {}
    with dask.config.set({"array.backend": "gpu"}):  # dask_gpu.random's draws on the GPU
        gpu_draws = default_rng(0).standard_normal((64, 64), chunks=32)
    sources = {"CuPy RandomState": da.random.RandomState(RandomState=cupy.random.RandomState).normal(
        10, 1, size=(64, 64), chunks=32), "dask_gpu.random": gpu_draws}
    for source, x in sources.items():
        for name, workload in WORKLOADS.items():
            start = time.perf_counter()
            dask.compute(workload(x), scheduler="sync")
            took = seconds[f"{name} ({source})"] = time.perf_counter() - start
            if status:
                status(f"{name} on {source}: {took:.2f} s")
    return {"directory": directory, "before": before, "after": kernels(), "seconds": seconds}
