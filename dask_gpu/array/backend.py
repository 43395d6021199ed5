"""The ``gpu`` array backend: ``dask.config.set({"array.backend": "gpu"})``.

Dask's own CuPy backend with its gaps filled: creation functions make CuPy chunks, and
``da.random.default_rng()`` draws from :mod:`dask_gpu.random`, whose Generator has the
NumPy methods CuPy's lacks (``normal`` and others), with per-block CuPy state made only
in the workers.
"""

from __future__ import annotations

from importlib.util import find_spec

from dask.array.cupy_entry_point import CupyBackendEntrypoint

from dask_gpu import random


class GPUBackendEntrypoint(CupyBackendEntrypoint):
    def __init__(self):
        if find_spec("cupy") is None:
            raise ImportError(
                "the 'gpu' array backend needs CuPy: pip install 'dask-gpu[cuda12]' or 'dask-gpu[cuda13]'"
            )
        super().__init__()

    @property
    def default_bit_generator(self):
        return random.XORWOW
