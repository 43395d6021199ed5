"""Counter-based random arrays, the same numbers for any chunking, on the CPU and on the GPU.

The public path of :mod:`dask_gpu.array.random`: ``dask_gpu.random.default_rng(42).normal(...)``.
"""

from dask_gpu.array.random import BlockGenerator, Generator, Philox, default_rng

__all__ = ["BlockGenerator", "Generator", "Philox", "default_rng"]
