"""What a GPU worker does for arrays as it starts, so that its first array task costs what its second does.

A fresh worker's first dask.array task paid for importing dask.array (half a second on two cores: a first
``da.ones(10).sum()`` on a new cluster took 0.65 s, its second 0.02 s), and on a GPU for importing CuPy and
making the device's CUDA context. A worker now does that before it registers with the scheduler, in parallel
with the other workers.
"""

from __future__ import annotations

import importlib.util
import logging
import time

logger = logging.getLogger("dask_gpu")


def warm(simulated: bool) -> float:
    """Import dask.array, and on a real GPU with CuPy installed, CuPy with the device's context; returns the
    seconds."""
    start = time.perf_counter()
    import dask.array  # noqa: F401

    with_cupy = not simulated and importlib.util.find_spec("cupy") is not None
    if with_cupy:
        import cupy

        cupy.empty(1)  # makes the CUDA context, through the allocator set up for CuPy
    seconds = time.perf_counter() - start
    logger.info("dask.array%s ready in %.2f s", " and CuPy" if with_cupy else "", seconds)
    return seconds
