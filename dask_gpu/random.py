"""Random numbers on the GPU: CuPy's Generator with what it lacks filled in.

``dask.array``'s ``default_rng`` makes each block's generator with
``<library of the bit generator>.random.default_rng(bit_generator)``. The ``gpu`` array
backend's bit generator (:class:`XORWOW`) lives here, so blocks get :func:`default_rng`'s
Generator, which has NumPy's methods that CuPy's lacks (``normal`` among them). CuPy is
imported only when a block is generated.
"""

from __future__ import annotations

import functools

import numpy as np


def default_rng(seed=None):
    """A CuPy Generator (XORWOW) with NumPy's common distributions.

    ``seed``: None, an int, a ``numpy.random.SeedSequence``, an :class:`XORWOW` seed
    or a CuPy bit generator.
    """
    import cupy

    if not isinstance(seed, cupy.random.BitGenerator):
        seed = cupy.random.XORWOW(seed._seed_seq if isinstance(seed, XORWOW) else seed)
    return _generator_class()(seed)


class XORWOW:
    """The ``gpu`` backend's bit generator: only a seed until a block is generated.

    dask.array makes one bit generator per block where the graph is built; holding just a
    ``SeedSequence`` keeps that cheap and off the GPU. Each block's CuPy XORWOW is made
    by :func:`default_rng` in the worker that generates it.
    """

    def __init__(self, seed=None):
        self._seed_seq = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)

    def __dask_tokenize__(self):
        return (type(self).__qualname__, self._seed_seq.entropy, self._seed_seq.spawn_key)

    def __repr__(self) -> str:
        return f"XORWOW(entropy={self._seed_seq.entropy}, spawn_key={self._seed_seq.spawn_key})"


def _normal(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
    import cupy

    if size is None:
        size = np.broadcast_shapes(np.shape(loc), np.shape(scale))
    return cupy.asarray(loc, dtype) + cupy.asarray(scale, dtype) * self.standard_normal(size, dtype=dtype)


def _lognormal(self, mean=0.0, sigma=1.0, size=None, dtype=np.float64):
    import cupy

    return cupy.exp(_normal(self, mean, sigma, size, dtype))


def _standard_exponential(self, size=None, dtype=np.float64):
    import cupy

    return -cupy.log1p(-self.random(size, dtype=dtype))  # 1 - U is in (0, 1]: never log(0)


def _exponential(self, scale=1.0, size=None, dtype=np.float64):
    import cupy

    if size is None:
        size = np.shape(scale)
    return cupy.asarray(scale, dtype) * _standard_exponential(self, size, dtype)


def _laplace(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
    import cupy

    if size is None:
        size = np.broadcast_shapes(np.shape(loc), np.shape(scale))
    u = self.random(size, dtype=dtype) - 0.5
    return cupy.asarray(loc, dtype) - cupy.asarray(scale, dtype) * cupy.sign(u) * cupy.log1p(-2 * cupy.abs(u))


def _logistic(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
    import cupy

    if size is None:
        size = np.broadcast_shapes(np.shape(loc), np.shape(scale))
    u = self.random(size, dtype=dtype)
    return cupy.asarray(loc, dtype) + cupy.asarray(scale, dtype) * (cupy.log(u) - cupy.log1p(-u))


def _gumbel(self, loc=0.0, scale=1.0, size=None, dtype=np.float64):
    import cupy

    if size is None:
        size = np.broadcast_shapes(np.shape(loc), np.shape(scale))
    return cupy.asarray(loc, dtype) - cupy.asarray(scale, dtype) * cupy.log(_standard_exponential(self, size, dtype))


def _rayleigh(self, scale=1.0, size=None, dtype=np.float64):
    import cupy

    if size is None:
        size = np.shape(scale)
    return cupy.asarray(scale, dtype) * cupy.sqrt(2 * _standard_exponential(self, size, dtype))


# NumPy Generator methods written from CuPy's primitives; added only where CuPy has none.
FILLED = {
    "normal": _normal,
    "lognormal": _lognormal,
    "standard_exponential": _standard_exponential,
    "exponential": _exponential,
    "laplace": _laplace,
    "logistic": _logistic,
    "gumbel": _gumbel,
    "rayleigh": _rayleigh,
}


@functools.cache
def _generator_class():
    import cupy

    missing = {name: fn for name, fn in FILLED.items() if not hasattr(cupy.random.Generator, name)}
    return type("Generator", (cupy.random.Generator,), {"__module__": __name__, **missing})
