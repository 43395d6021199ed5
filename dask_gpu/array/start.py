"""What a GPU worker does for arrays as it starts, so that its first array task costs what its second does.
A fresh worker's first dask.array task paid for importing dask.array (half a second on two cores: a first
``da.ones(10).sum()`` on a new cluster took 0.65 s, its second 0.02 s), on a GPU for importing CuPy and making
the device's CUDA context, and for its first CuPy array sent to another process, for distributed's CuPy
serializers, which import RMM (0.9 s on an H100 machine). A worker now does that in a thread of its own as it
registers with the scheduler, beside the other workers, and reads its first task once the thread is through
(:class:`dask_gpu.plugins.WarmFirst`). The client's process makes its own CuPy serializers ready the same
way while its cluster's workers start (:func:`client_warm_up`).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
import time

logger = logging.getLogger("dask_gpu")
WARMING = "dask-gpu-warm-arrays"  # the name of a thread that gets arrays ready


def warm(simulated: bool) -> float:
    """Import dask.array, and on a real GPU with CuPy installed, CuPy with the device's context and distributed's
    CuPy serializers; returns the seconds."""
    start = time.perf_counter()
    import dask.array  # noqa: F401

    with_cupy = not simulated and importlib.util.find_spec("cupy") is not None
    if with_cupy:
        import cupy

        cupy.empty(1)  # makes the CUDA context, through the allocator set up for CuPy
        import distributed.protocol.cupy  # noqa: F401
    seconds = time.perf_counter() - start
    logger.info("dask.array%s ready in %.2f s", " and CuPy" if with_cupy else "", seconds)
    return seconds


def client_warm_up():
    """What the client's first CuPy result pays otherwise, for a cluster to run in this process while its workers
    start: distributed's CuPy serializers imported. None where CuPy is not installed."""
    if importlib.util.find_spec("cupy") is None:
        return None
    return functools.partial(importlib.import_module, "distributed.protocol.cupy")
