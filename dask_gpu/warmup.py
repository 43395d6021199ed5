"""Warm-ups: wait for a cluster's GPU workers, open every connection between them once, and compile the
seed workloads' kernels into the machine's kernel cache.

Benchmarks and tests call the first two so that the first timed step pays for neither a worker that has
not joined yet nor the connections (UCX endpoints, TLS handshakes) that the first transfers make.
``dask gpu warmup`` calls :func:`compile_kernels`, so that no process of the machine compiles them again.
"""

from __future__ import annotations

import time

from distributed import wait

from dask_gpu import devices
from dask_gpu.kernel_cache import cupy_cache_dir, kernel_cache_env, use_kernel_cache

# The seeds' array workloads, small: a kernel depends on the dtypes and the operations, not the sizes.
WORKLOADS = {
    "(x + 1)[::2, ::2].sum()": lambda x: (x + 1)[::2, ::2].sum(),
    "(x + 1)[::2, ::2].mean()": lambda x: (x + 1)[::2, ::2].mean(),
    "(x + x.T).sum()": lambda x: (x + x.T).sum(),
    "x.sum(), x.mean(), x.std()": lambda x: [x.sum(), x.mean(), x.std()],
    "svd(x)": lambda x: __import__("dask.array", fromlist=["linalg"]).linalg.svd(x.rechunk((x.chunks[0], -1)))[1],
}


def wait_workers(client, min_timeout=10, seconds_per_gpu=2, n_gpus=None, timeout_callback=None) -> bool:
    """Wait until ``n_gpus`` workers (default: one per visible GPU) joined; False (and
    ``timeout_callback()``) if they did not within ``max(min_timeout, seconds_per_gpu * n_gpus)`` seconds."""
    n_gpus = n_gpus or len(devices.select(devices.discover()))
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


def compile_kernels(status=None) -> dict:
    """Run each of :data:`WORKLOADS` once on this machine's GPU, on CuPy's random arrays and on
    :mod:`dask_gpu.random`'s, compiling their kernels into ``gpu.kernel-cache`` (CuPy's own cache where
    unset). ``status(line)`` after each. Returns the cache directory, its kernels before and after, and
    the seconds of each workload."""
    import os

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
