"""The ``gpu`` array backend: ``dask.config.set({"array.backend": "gpu"})``.

Dask's own CuPy backend with its gaps filled: creation functions make CuPy chunks, and
``da.random.default_rng()`` draws each block with :mod:`dask_gpu.random`'s counter-based
generator (``normal`` included, which CuPy's Generator lacks); nothing touches the GPU
until a worker makes a block.
"""

from __future__ import annotations

from importlib.util import find_spec

from dask.array.cupy_entry_point import CupyBackendEntrypoint

from dask_gpu.array import random


class GPUBackendEntrypoint(CupyBackendEntrypoint):
    def __init__(self):
        if find_spec("cupy") is None:
            raise ImportError(
                "the 'gpu' array backend needs CuPy: pip install 'dask-gpu[cuda12]' or 'dask-gpu[cuda13]'"
            )
        super().__init__()

    @property
    def default_bit_generator(self):
        return random.Philox
