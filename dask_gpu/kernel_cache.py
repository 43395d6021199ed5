"""The machine's cache of compiled GPU kernels: ``gpu.kernel-cache``, as CuPy's disk cache.

CuPy keeps every kernel it compiles, dask-gpu's fused ones included, in one file per kernel
named by a hash of the source, the compile options, the architecture, NVRTC's version and
CuPy's headers, and writes each file whole (a temporary file, then a rename) behind a hash of
its contents: every process of a machine can share one directory, and a file cut short is
compiled again rather than loaded. A second process, or a second worker, finds there what the
first compiled.

What is compiled at all matters more. CuPy's reductions run, by default, as CUB block reductions, which
NVRTC compiles with CUB's headers at their first use: 4 to 12 s for each dtype and block size, 45 s for a
first ``(x > 0.5).sum()``. :func:`compile_less` has CuPy use its own reduction kernels instead, which
compile in a fraction of a second, and NVRTC parse CuPy's headers once a process rather than once a kernel
(its precompiled headers), and threads that ask for the same kernel at once compile it once, where CuPy
compiles it in each (a first ``x.var()`` on dask's threaded scheduler, 16 threads on an H100 machine, made
51 compiles, 43 of them of a kernel another thread was compiling, in 1.1 s). This holds in every process
that imports dask-gpu: the client with dask's local schedulers, and every worker. CUB's device-wide
reductions, precompiled in CuPy's wheel, stay; ``CUPY_ACCELERATORS`` and ``CUPY_NVRTC_USE_PCH``, where set,
are left as chosen, and ``gpu.compile-less: false``, as dask-gpu is imported, leaves CuPy as it is.
"""

from __future__ import annotations

import logging
import os

from dask_gpu import config, internals, machine, parse
from dask_gpu.imports import when_imported


def kernel_cache_env() -> dict:
    """``CUPY_CACHE_DIR`` for ``gpu.kernel-cache``, made now; {} where unset (CuPy's own cache then:
    ``CUPY_CACHE_DIR``, else ``~/.cupy/kernel_cache``)."""
    cache = config.get("kernel_cache")
    if not cache:
        return {}
    if not isinstance(cache, str):
        raise ValueError(f"gpu.kernel-cache must be a directory path or null, not {cache!r}")
    return {"CUPY_CACHE_DIR": machine.directory(os.path.abspath(os.path.expanduser(str(cache))), "gpu.kernel-cache")}


def cupy_cache_dir(env: dict | None = None) -> str:
    """The directory CuPy compiles into: in this process (its disk cache backend's, from CuPy 14 on), or
    in a new one with the environment ``env``."""
    if env is None:
        directory = internals.cupy_kernel_cache_dir()
        if directory:
            return directory
        env = os.environ
    return env.get("CUPY_CACHE_DIR") or os.path.expanduser("~/.cupy/kernel_cache")


def use_kernel_cache(directory: str | None = None) -> None:
    """Make CuPy in this process compile into ``directory`` (default: ``CUPY_CACHE_DIR``).

    CuPy 14 reads ``CUPY_CACHE_DIR`` once, when it is imported, and ``import dask.array`` imports
    it: a worker whose script imports dask.array at its top has CuPy before the worker's
    environment is set. Its disk cache is made again here, for the directory now asked for.
    """
    directory = directory or os.environ.get("CUPY_CACHE_DIR")
    if not directory:
        return
    os.environ["CUPY_CACHE_DIR"] = directory
    internals.set_cupy_kernel_cache_dir(directory)


def compile_less() -> None:
    """Once CuPy is imported in this process (now, if it is), :func:`_compile_less`, unless ``gpu.compile-less``
    is false (read now: a value that is no boolean is an error as dask-gpu is imported)."""
    if parse.flag(config.get("compile_less"), "gpu.compile-less"):
        when_imported("cupy", _compile_less)


def _compile_less(cupy) -> None:
    try:
        if "CUPY_ACCELERATORS" not in os.environ:
            internals.drop_cub_block_reductions(cupy)
        if "CUPY_NVRTC_USE_PCH" not in os.environ:
            internals.use_nvrtc_pch(cupy)
        internals.compile_each_kernel_once(cupy)
    except AttributeError as e:  # a CuPy without these switches: it compiles as it always did
        logging.getLogger("dask_gpu").info("CuPy %s keeps its own compile settings (%s)",
                                           getattr(cupy, "__version__", "?"), e)
