"""Counter-based random arrays: the same numbers for any chunking, on the CPU and on the GPU.

>>> rng = dask_gpu.random.default_rng(42)
>>> x = rng.normal(10, 1, size=(500_000, 500_000), chunks=10_000)

Each value depends only on the seed, the call (each call of a Generator method is a new
stream) and its index in the whole array, so:

- the array is the same for every ``chunks``;
- NumPy chunks (``array.backend="numpy"``) and CuPy chunks (``"gpu"`` or ``"cupy"``) hold
  bit-identical values;
- slicing commutes with drawing: ``x[::2, ::2]`` draws only the values it keeps, and a
  reduction over it runs as one GPU kernel that never stores them (see
  :mod:`dask_gpu.array.optimization`).

The ``gpu`` array backend's ``da.random.default_rng()`` uses the same generator for each
of its blocks (:class:`Philox` is its bit generator); dask.array seeds those blocks one by
one, so there the values depend on the chunking. Distributions this module does not have
are drawn by CuPy's Generator there.
"""

from __future__ import annotations

import inspect
import itertools
import math
import sys
import warnings
from numbers import Number

import numpy as np

from dask_gpu import internals
from dask_gpu.array.distributions import DISTRIBUTIONS, INTEGER, Draw, whole
from dask_gpu.array.plan import sample

POSITIVE = {"scale", "sigma", "a"}  # parameters that must be > 0 (scale and sigma may be 0)


def default_rng(seed=None):
    """A counter-based :class:`Generator` of dask arrays.

    ``seed``: None (fresh entropy), an int, a sequence of ints or a ``numpy.random.SeedSequence``.
    Given a :class:`Philox` bit generator (as dask.array does for each block under the
    ``gpu`` backend), returns that block's in-memory generator instead.
    """
    if isinstance(seed, Philox):
        return BlockGenerator(seed)
    return Generator(seed)


def _seed_sequence(seed) -> np.random.SeedSequence:
    return seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)


def _key(seed_seq: np.random.SeedSequence) -> tuple[int, int]:
    return tuple(int(k) for k in seed_seq.generate_state(2, np.uint32))


def _library() -> str:
    import dask

    if dask.config.get("array.backend") in ("cupy", "gpu"):
        return "cupy"
    if _gpu_cluster():
        warnings.warn("dask_gpu.random makes NumPy chunks, which GPU workers draw on their CPU cores: "
                      "dask.config.set({'array.backend': 'gpu'}) makes CuPy chunks", UserWarning, stacklevel=4)
    return "numpy"


def _gpu_cluster() -> bool:
    """Whether this process's distributed client is connected to GPU workers."""
    if "distributed" not in sys.modules:  # no client can exist
        return False
    from distributed import default_client

    try:
        workers = internals.scheduler_identity(default_client())["workers"]
    except ValueError:  # no client
        return False
    return any("GPU" in worker.get("resources", {}) for worker in workers.values())


def _shape(size) -> tuple[int, ...]:
    if size is None:
        return ()
    shape = (size,) if isinstance(size, Number) else tuple(size)
    if not all(isinstance(n, (int, np.integer)) and n >= 0 for n in shape):
        raise ValueError(f"size must be a non-negative int or a tuple of them, not {size!r}")
    return tuple(int(n) for n in shape)


def _params(method: str, args: tuple, kwargs: dict) -> tuple[float, ...]:
    """Bind a NumPy-style call's parameters, with NumPy's defaults and checks."""
    transform, defaults = DISTRIBUTIONS[method]
    names = list(inspect.signature(transform).parameters)[3:]
    bound = dict(zip(names, defaults or ()))
    if len(args) > len(names):
        raise TypeError(f"{method}() takes {len(names)} parameters ({', '.join(names)}), got {len(args)}")
    bound.update(zip(names, args))
    unknown = set(kwargs) - set(names)
    if unknown:
        raise TypeError(f"{method}() got unexpected keyword arguments {sorted(unknown)}")
    bound.update(kwargs)
    missing = [n for n in names if n not in bound]
    if missing:
        raise TypeError(f"{method}() missing required parameters {missing}")
    for name, value in bound.items():
        if not isinstance(value, Number) or isinstance(value, complex):
            raise TypeError(f"{method}(): {name} must be a real number, not {type(value).__name__}")
        if name in POSITIVE and (value < 0 or (name == "a" and value <= 0)) or not math.isfinite(value):
            raise ValueError(f"{method}(): {name} = {value} is out of range")
    return tuple(float(bound[n]) for n in names)


def _integers(low, high, endpoint) -> tuple[int, int]:
    low, high = (0, low) if high is None else (low, high)
    high = int(high) + bool(endpoint)
    if not high - int(low) > 0:
        raise ValueError(f"integers(): low >= high ({low} >= {high})")
    if high - int(low) >= 2**64:
        raise ValueError("integers(): the range high - low must be below 2**64")
    return int(low), high


def _float_dtype(dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    if dtype not in (np.float64, np.float32):
        raise TypeError(f"dtype must be float64 or float32, not {dtype}")
    return dtype


class Generator:
    """NumPy's ``Generator`` methods, making dask arrays of counter-based values."""

    def __init__(self, seed=None):
        self._seed_seq = _seed_sequence(seed)
        self._key = _key(self._seed_seq)
        self._streams = itertools.count()

    def __repr__(self) -> str:
        return f"dask_gpu.random.Generator(Philox4x32-10, entropy={self._seed_seq.entropy})"

    def _array(self, method, params, size, dtype, chunks):
        from dask.array.core import Array, normalize_chunks
        from dask.base import tokenize
        from dask.task_spec import Task

        shape = _shape(size)
        draw = Draw(self._key, next(self._streams), method, params, shape, np.dtype(dtype), _library())
        chunks = normalize_chunks(chunks, shape, dtype=draw.dtype)
        name = f"{method}-{tokenize(draw, chunks)}"
        starts = [np.cumsum((0,) + c) for c in chunks]
        graph = {}
        for index in itertools.product(*(range(len(c)) for c in chunks)):
            region = tuple(range(s[i], s[i + 1]) for s, i in zip(starts, index))
            graph[(name, *index)] = Task((name, *index), sample, draw, region)
        return Array(graph, name, chunks, meta=_meta(draw))

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False, chunks="auto"):
        if np.dtype(dtype).kind not in "iu":
            raise TypeError(f"integers(): dtype must be an integer type, not {np.dtype(dtype)}")
        return self._array(INTEGER, _integers(low, high, endpoint), size, dtype, chunks)


def _method(name):
    names = list(inspect.signature(DISTRIBUTIONS[name][0]).parameters)[3:]

    def method(self, *args, size=None, dtype=np.float64, chunks="auto", **kwargs):
        if len(args) == len(names) + 1 and size is None:
            *args, size = args  # as in NumPy, size follows the parameters
        return self._array(name, _params(name, tuple(args), kwargs), size, _float_dtype(dtype), chunks)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``numpy.random.Generator.{name}({', '.join(names)}, size=None)``, with ``chunks=``."
    return method


for _name in DISTRIBUTIONS:
    setattr(Generator, _name, _method(_name))


def _meta(draw: Draw):
    if draw.library == "cupy":
        import cupy

        return cupy.empty((0,) * len(draw.shape), draw.dtype)
    return np.empty((0,) * len(draw.shape), draw.dtype)


class Philox:
    """The ``gpu`` backend's bit generator: a seed, until dask.array makes a block with it."""

    def __init__(self, seed=None):
        self._seed_seq = _seed_sequence(seed)

    def __dask_tokenize__(self):
        return (type(self).__qualname__, self._seed_seq.entropy, self._seed_seq.spawn_key)

    def __repr__(self) -> str:
        return f"Philox(entropy={self._seed_seq.entropy}, spawn_key={self._seed_seq.spawn_key})"


class BlockGenerator:
    """One block's generator under the ``gpu`` backend: CuPy arrays, counters from the block's start."""

    def __init__(self, bitgen: Philox):
        self._seed_seq = bitgen._seed_seq

    def draw(self, method, args, kwargs, size) -> Draw:
        """The :class:`Draw` a call makes: what the graph optimization folds slices into."""
        if method == INTEGER:
            low, high, dtype, endpoint = _integer_call(*args, **kwargs)
            params, dtype = _integers(low, high, endpoint), np.dtype(dtype)
        else:
            dtype = _float_dtype(kwargs.pop("dtype", np.float64))
            params = _params(method, args, kwargs)
        return Draw(_key(self._seed_seq), 0, method, params, _shape(size), dtype, "cupy")

    def __getattr__(self, method):
        if method != INTEGER and method not in DISTRIBUTIONS:
            import cupy

            seed = int(self._seed_seq.generate_state(1, np.uint64)[0])
            return getattr(cupy.random.default_rng(seed), method)

        def call(*args, size=None, **kwargs):
            draw = self.draw(method, args, dict(kwargs), size)
            return sample(draw, whole(draw.shape))

        return call


def _integer_call(low, high=None, dtype=np.int64, endpoint=False):
    return low, high, dtype, endpoint
