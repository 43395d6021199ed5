"""Warm-ups: wait for a cluster's GPU workers, open every connection between them once, and compile the
seed workloads' kernels, and those of cuDF's first group-by, into the machine's kernel cache.

Benchmarks and tests call the first two so that the first timed step pays for neither a worker that has
not joined yet nor the connections (UCX endpoints, TLS handshakes) that the first transfers make.
``dask gpu warmup`` calls :func:`compile_kernels`, so that no process of the machine compiles them again;
LocalCUDACluster and ``dask gpu worker`` start :func:`compile_cudf_kernels` as their workers start.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import subprocess
import sys
import threading
import time
from importlib.util import find_spec

from distributed import wait

from dask_gpu import devices
from dask_gpu.kernel_cache import cupy_cache_dir, kernel_cache_env, use_kernel_cache
from dask_gpu.spec import worker_env

# The seeds' array workloads, small: a kernel depends on the dtypes and the operations, not the sizes.
WORKLOADS = {
    "(x + 1)[::2, ::2].sum()": lambda x: (x + 1)[::2, ::2].sum(),
    "(x + 1)[::2, ::2].mean()": lambda x: (x + 1)[::2, ::2].mean(),
    "(x + x.T).sum()": lambda x: (x + x.T).sum(),
    "x.sum(), x.mean(), x.std()": lambda x: [x.sum(), x.mean(), x.std()],
    "svd(x)": lambda x: __import__("dask.array", fromlist=["linalg"]).linalg.svd(x.rechunk((x.chunks[0], -1)))[1],
}


# cuDF's column division, and so dask-cudf's group-by mean (sum / count), checks the divisor with cupy.all
# and the quotient with cupy.any. From 128 elements on, CuPy runs these as CUB block reductions, one per
# block size (a quarter of the length rounded up to a power of two, 32 to 512 threads), which NVRTC compiles
# in about 4 s each, one at a time in a process: a first group-by of 1000 groups waited 12 s for three.
CUDF_REDUCTIONS = tuple(f"cupy.{op}(cupy.zeros({n}, dtype=bool))"
                        for op in ("all", "any") for n in (1024, 2048, 512, 256, 128))
_STALE = 600  # seconds after which a compile under way elsewhere is taken for dead
_MARKS = "dask-gpu-"  # how the files this module leaves in a kernel cache begin: no kernels


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


def compile_kernels(status=None, selected=()) -> dict:
    """Run each of :data:`WORKLOADS` once on this machine's GPU, on CuPy's random arrays and on
    :mod:`dask_gpu.random`'s, compiling their kernels into ``gpu.kernel-cache`` (CuPy's own cache where
    unset), and meanwhile :func:`compile_cudf_kernels` for the ``selected`` GPUs. ``status(line)``
    after each. Returns the cache directory, its kernels before and after, and the seconds of each
    workload."""
    import cupy
    import dask
    import dask.array as da

    from dask_gpu.random import default_rng

    use_kernel_cache(kernel_cache_env().get("CUPY_CACHE_DIR"))
    directory = cupy_cache_dir()

    def kernels() -> int:
        names = os.listdir(directory) if os.path.isdir(directory) else []
        return sum(not name.startswith(_MARKS) for name in names)

    before, seconds, began = kernels(), {}, time.perf_counter()
    cudf = compile_cudf_kernels(selected)
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
    if cudf is not None:
        cudf.join()
        took = seconds["cuDF's division (cupy.all, cupy.any)"] = time.perf_counter() - began
        if status:
            status(f"cuDF's division (cupy.all, cupy.any), in processes of their own: {took:.2f} s")
    return {"directory": directory, "before": before, "after": kernels(), "seconds": seconds}


def compile_cudf_kernels(selected) -> Compile | None:
    """Start :func:`compile_cudf_reductions` for the first of the ``selected`` GPUs ((token, Device) pairs,
    as ``devices.select`` gives them), in its worker's environment, where cuDF is installed and the GPU
    is real. LocalCUDACluster and ``dask gpu worker`` call it as their workers start, so that it runs
    beside their start and the first task's read."""
    if not selected or selected[0][1].simulated or not (find_spec("cudf") and find_spec("cupy")):
        return None
    return compile_cudf_reductions(selected[0][1].describe(), worker_env(selected, 0))


def compile_cudf_reductions(device: dict, env: dict, processes: int | None = None) -> Compile | None:
    """Compile :data:`CUDF_REDUCTIONS` for ``device`` (its ``name`` and ``memory_total``; CUDA's device
    0 in ``env``) into the kernel cache of ``env``, in the background, in ``processes`` of their own
    (default: :func:`compile_processes`), as CuPy compiles one kernel at a time in a process. Once a
    machine: None if done before, under way elsewhere, or where the cache cannot be written (a head
    start, never a reason for a cluster not to start)."""
    env = {**os.environ, **env}
    directory = cupy_cache_dir(env)
    key = hashlib.sha1(f"{_cupy_version()} {device.get('name')}".encode()).hexdigest()[:16]
    done, lock = (os.path.join(directory, f"{_MARKS}cudf-{key}.{end}") for end in ("done", "lock"))
    try:
        os.makedirs(directory, exist_ok=True)
        if os.path.exists(done) or not _take(lock):
            return None
    except OSError:
        return None
    count = min(len(CUDF_REDUCTIONS), processes or compile_processes(device))
    return Compile([subprocess.Popen([sys.executable, "-c", "import cupy; " + "; ".join(CUDF_REDUCTIONS[i::count])],
                                     env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL) for i in range(count)], done, lock)


def compile_processes(device: dict) -> int:
    """Processes for :func:`compile_cudf_reductions`: a block size each (its all and its any), where
    there are the cores (one each) and the device memory (a CUDA context each, for seconds)."""
    return max(1, min(len(CUDF_REDUCTIONS) // 2, (os.cpu_count() or 2) // 2,
                      int(device.get("memory_total") or 0) // 8_000_000_000))


class Compile:
    """Processes compiling kernels, and the thread that waits for them: ``done`` is made once all
    succeeded, and ``lock`` removed whatever happened."""

    def __init__(self, processes, done: str, lock: str):
        self.processes, self.done, self.lock = processes, done, lock
        self.thread = threading.Thread(target=self._finish, name="dask-gpu-compile", daemon=True)
        self.thread.start()

    def join(self, timeout=None) -> None:
        self.thread.join(timeout)

    def stop(self) -> None:
        """End the processes (a cluster that closes leaves none behind); the next start compiles again."""
        for process in self.processes:
            process.kill()
        self.join()

    def _finish(self) -> None:
        try:
            ok = True
            for process in self.processes:
                try:
                    ok = process.wait(timeout=_STALE) == 0 and ok
                except subprocess.TimeoutExpired:
                    process.kill()
                    ok = False
            if ok:
                open(self.done, "w").close()
        finally:
            try:
                os.unlink(self.lock)
            except FileNotFoundError:
                pass


def _cupy_version() -> str:
    for name in ("cupy-cuda13x", "cupy-cuda12x", "cupy"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return "unknown"


def _take(lock: str) -> bool:
    """Whether this process now holds ``lock`` (made here, or left by a compile that died)."""
    try:
        os.close(os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        return True
    except FileExistsError:
        try:
            if time.time() - os.path.getmtime(lock) < _STALE:
                return False
            os.utime(lock)
            return True
        except FileNotFoundError:  # released meanwhile: done, or to try again at the next start
            return False
