"""What a GPU worker does for arrays as it starts, so that its first array task costs what its second does.
A fresh worker's first dask.array task paid for importing dask.array (half a second on two cores: a first
``da.ones(10).sum()`` on a new cluster took 0.65 s, its second 0.02 s), on a GPU for importing CuPy and making
the device's CUDA context, and for its first CuPy array sent to another process, for distributed's CuPy
serializers, which import RMM (0.9 s on an H100 machine). A worker now does that in a thread of its own as it
registers with the scheduler, beside the other workers, and reads its first task once the thread is through
(:class:`dask_gpu.plugins.WarmFirst`). The driver makes the CUDA context beside dask.array's import, in a thread
that does not hold the GIL (:func:`make_context`). The client's process makes its own CuPy serializers ready the same
way while its cluster's workers start (:func:`client_warm_up`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import threading
import time

logger = logging.getLogger("dask_gpu")
WARMING = "dask-gpu-warm-arrays"  # the name of a thread that gets arrays ready
CONTEXT = "dask-gpu-cuda-context"  # the name of a thread that makes the device's CUDA context


def warm(simulated: bool, on_context=None) -> float:
    """Import dask.array, and on a real GPU with CuPy installed, CuPy with the device's context and distributed's
    CuPy serializers; returns the seconds. ``on_context()`` runs once the context is made (or where none is made,
    once dask.array is imported), before the first allocation, whatever fails."""
    start = time.perf_counter()
    with_cupy = not simulated and importlib.util.find_spec("cupy") is not None
    context = None
    try:
        if with_cupy:
            import cupy

            context = make_context(cupy)
        import dask.array  # noqa: F401
    finally:
        if context is not None:
            context.join()
        if on_context is not None:
            on_context()
    if with_cupy:
        cupy.empty(1)  # the first allocation, through the allocator set up for CuPy
        import distributed.protocol.cupy  # noqa: F401
    seconds = time.perf_counter() - start
    logger.info("dask.array%s ready in %.2f s", " and CuPy" if with_cupy else "", seconds)
    return seconds


def make_context(cupy) -> threading.Thread:
    """The device's CUDA context, made in a thread of its own and returned: CuPy's ``cudaFree(0)`` lets go of the
    GIL while the driver makes it (0.1-0.3 s), so that imports go on beside it. An error is left to the first
    allocation, which meets it again."""

    def make():
        try:
            cupy.cuda.runtime.free(0)
        except Exception:  # noqa: BLE001  see above
            pass

    thread = threading.Thread(target=make, name=CONTEXT, daemon=True)
    thread.start()
    return thread


def client_warm_up():
    """What the client's first CuPy result pays otherwise, for a cluster to run in this process while its workers
    start: distributed's CuPy serializers imported. None where CuPy is not installed."""
    if importlib.util.find_spec("cupy") is None:
        return None
    return functools.partial(importlib.import_module, "distributed.protocol.cupy")
