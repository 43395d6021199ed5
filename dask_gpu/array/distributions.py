"""Counter-based random numbers: each value is a function of the key, the stream and its index.

A value at flat index ``n`` (C order in the whole array) comes from one Philox4x32-10 block
with counter ``(n mod 2**32, n >> 32, stream mod 2**32, stream >> 32)``: its first two words
make a 64-bit integer, whose top 53 bits make a uniform double. Distributions are the
inverse of their CDF applied to that one uniform, written here once against a small set of
operations (``ops``): NumPy evaluates them on the CPU, and :mod:`dask_gpu.array.codegen`
traces the same functions into CUDA C. Only +, -, *, /, sqrt, floor, frexp and ldexp
are used (log and exp are written from them), all exact or correctly rounded in IEEE
arithmetic, so the CPU and the GPU give the same bits.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
MASK32 = 0xFFFFFFFF


@dataclasses.dataclass(frozen=True)
class Draw:
    """One random array: what to draw, from which key and stream, in a whole array of ``shape``."""

    key: tuple[int, int]
    stream: int
    method: str
    params: tuple
    shape: tuple[int, ...]
    dtype: np.dtype
    library: str = "numpy"  # "numpy" or "cupy": where the values are made

    def strides(self) -> tuple[int, ...]:
        """C-order strides of the whole array, in elements: how an index becomes a counter."""
        return tuple(math.prod(self.shape[k + 1 :]) for k in range(len(self.shape)))


def whole(shape) -> tuple[range, ...]:
    return tuple(range(n) for n in shape)


def compose(region: tuple[range, ...], index) -> tuple[range, ...] | None:
    """``region`` indexed by a tuple of slices, or None where ``index`` is anything else."""
    if not isinstance(index, tuple):
        index = (index,)
    if len(index) > len(region) or not all(isinstance(i, slice) for i in index):
        return None
    return tuple(r[i] for r, i in zip(region, index)) + region[len(index) :]


# --- Philox4x32-10 on NumPy ----------------------------------------------------------------


def philox_u64(n: np.ndarray, stream: int, key: tuple[int, int]) -> np.ndarray:
    """Words 0 and 1 of Philox4x32-10 at counters ``(n, stream)``, as one uint64 (word 0 high).

    Each 32-bit word is held in a uint64, so that a product keeps its high half; every step
    writes into the arrays it has (no temporaries).
    """
    m0, m1 = np.uint64(PHILOX_M[0]), np.uint64(PHILOX_M[1])
    mask, shift = np.uint64(MASK32), np.uint64(32)
    c0, c1 = n & mask, n >> shift
    c2, c3 = np.full_like(n, stream & MASK32), np.full_like(n, stream >> 32)
    p0, p1 = np.empty_like(n), np.empty_like(n)
    k0, k1 = key
    for r in range(10):
        if r:
            k0, k1 = (k0 + PHILOX_W[0]) & MASK32, (k1 + PHILOX_W[1]) & MASK32
        np.multiply(c0, m0, out=p0)
        np.multiply(c2, m1, out=p1)
        # (c0, c1, c2, c3) <- (hi(p1) ^ c1 ^ k0, lo(p1), hi(p0) ^ c3 ^ k1, lo(p0))
        np.right_shift(p1, shift, out=c0)
        np.bitwise_xor(c0, c1, out=c0)
        np.bitwise_xor(c0, np.uint64(k0), out=c0)
        np.bitwise_and(p1, mask, out=c1)
        np.right_shift(p0, shift, out=c2)
        np.bitwise_xor(c2, c3, out=c2)
        np.bitwise_xor(c2, np.uint64(k1), out=c2)
        np.bitwise_and(p0, mask, out=c3)
    np.left_shift(c0, shift, out=c0)
    return np.bitwise_or(c0, c1, out=c0)


def counters(draw: Draw, region: tuple[range, ...]) -> np.ndarray:
    """The flat index in the whole array of every element of ``region``, as uint64."""
    n = np.zeros((1,) * len(region), dtype=np.uint64)
    for axis, (r, stride) in enumerate(zip(region, draw.strides())):
        shape = [1] * len(region)
        shape[axis] = len(r)
        n = n + (np.arange(r.start, r.stop, r.step, dtype=np.uint64) * np.uint64(stride)).reshape(shape)
    return n


# --- the operations a distribution is written with ------------------------------------------


class NumpyOps:
    """``ops`` evaluated on float64 NumPy arrays."""

    sqrt = staticmethod(np.sqrt)
    floor = staticmethod(np.floor)

    @staticmethod
    def frexp(x):
        m, e = np.frexp(x)
        return m, e.astype(np.float64)

    @staticmethod
    def ldexp(m, e):
        return np.ldexp(m, e.astype(np.int32))

    @staticmethod
    def where(cond, then, otherwise, x):
        """``then(x)`` where ``cond``, else ``otherwise(x)``.

        The branch that holds most elements runs on all of them (cheaper than selecting them),
        the other only on its own: the values are the same either way, element by element.
        """
        if 2 * np.count_nonzero(cond) >= cond.size:
            most, few, select = then, otherwise, ~cond
        else:
            most, few, select = otherwise, then, cond
        out = np.asarray(most(x))
        if out is x or out.shape != x.shape:
            out = np.broadcast_to(out, x.shape).copy()
        if select.any():
            out[select] = few(x[select])
        return out


LN2_HI = 6.93147180369123816490e-01  # ln 2 in two parts: e * LN2_HI is exact for |e| < 2**20
LN2_LO = 1.90821492927058770002e-10
SQRT_HALF = 0.7071067811865476


def log(ops, x):
    """Natural log of positive finite ``x``: x = m 2**e, then 2 atanh((m - 1) / (m + 1))."""
    m, e = ops.frexp(x)
    low = m < SQRT_HALF
    m = ops.where(low, lambda v: v * 2.0, lambda v: v, m)
    e = ops.where(low, lambda v: v - 1.0, lambda v: v, e)
    f = m - 1.0
    s = f / (m + 1.0)
    z = s * s
    series = 1.0 / 23.0
    for k in range(21, 0, -2):
        series = 1.0 / k + z * series
    return e * LN2_HI + (e * LN2_LO + 2.0 * s * series)


def exp(ops, x):
    """e**x for finite ``x``: 2**k e**r with |r| <= ln2 / 2, Taylor to degree 14."""
    k = ops.floor(x * (1.0 / math.log(2.0)) + 0.5)
    r = (x - k * LN2_HI) - k * LN2_LO
    p = 1.0 / math.factorial(14)
    for i in range(13, -1, -1):
        p = 1.0 / math.factorial(i) + r * p
    return ops.ldexp(p, k)


# Wichura (1988), algorithm AS 241 (PPND16): the normal quantile to about 1e-16.
_A = (3.3871328727963666080e0, 1.3314166789178437745e2, 1.9715909503065514427e3, 1.3731693765509461125e4,
      4.5921953931549871457e4, 6.7265770927008700853e4, 3.3430575583588128105e4, 2.5090809287301226727e3)
_B = (1.0, 4.2313330701600911252e1, 6.8718700749205790830e2, 5.3941960214247511077e3,
      2.1213794301586595867e4, 3.9307895800092710610e4, 2.8729085735721942674e4, 5.2264952788528545610e3)
_C = (1.42343711074968357734e0, 4.63033784615654529590e0, 5.76949722146069140550e0, 3.64784832476320460504e0,
      1.27045825245236838258e0, 2.41780725177450611770e-1, 2.27238449892691845833e-2, 7.74545014278341407640e-4)
_D = (1.0, 2.05319162663775882187e0, 1.67638483018380384940e0, 6.89767334985100004550e-1,
      1.48103976427480074590e-1, 1.51986665636164571966e-2, 5.47593808499534494600e-4, 1.05075007164441684324e-9)
_E = (6.65790464350110377720e0, 5.46378491116411436990e0, 1.78482653991729133580e0, 2.96560571828504891230e-1,
      2.65321895265761230930e-2, 1.24266094738807843860e-3, 2.71155556874348757815e-5, 2.01033439929228813265e-7)
_F = (1.0, 5.99832206555887937690e-1, 1.36929880922735805310e-1, 1.48753612908506148525e-2,
      7.86869131145613259100e-4, 1.84631831751005468180e-5, 1.42151175831644588870e-7, 2.04426310338993978564e-15)


def _poly(coefficients, x):
    result = coefficients[-1]
    for c in coefficients[-2::-1]:
        result = c + x * result
    return result


def ndtri(ops, p):
    """The standard normal quantile of ``p`` in (0, 1)."""

    def central(p):
        q = p - 0.5
        r = 0.180625 - q * q
        return q * _poly(_A, r) / _poly(_B, r)

    def tail(p):
        r = ops.sqrt(-log(ops, ops.where(p < 0.5, lambda v: v, lambda v: 1.0 - v, p)))
        def near(r):
            return _poly(_C, r - 1.6) / _poly(_D, r - 1.6)

        def far(r):
            return _poly(_E, r - 5.0) / _poly(_F, r - 5.0)

        near = ops.where(r <= 5.0, near, far, r)
        return ops.where(p < 0.5, lambda v: -v, lambda v: v, near)

    return ops.where(abs_(ops, p - 0.5) <= 0.425, central, tail, p)


def abs_(ops, x):
    return ops.where(x < 0.0, lambda v: -v, lambda v: v, x)


# --- distributions: (uniform in [0, 1), uniform in (0, 1)) -> value ---------------------------
# Each takes ``ops``, the half-open uniform ``u``, the open uniform ``v`` and its parameters.


def _exponential(ops, v):
    return -log(ops, v)


DISTRIBUTIONS = {
    "random": (lambda ops, u, v: u, ()),
    "uniform": (lambda ops, u, v, low, high: low + (high - low) * u, (0.0, 1.0)),
    "standard_normal": (lambda ops, u, v: ndtri(ops, v), ()),
    "normal": (lambda ops, u, v, loc, scale: loc + scale * ndtri(ops, v), (0.0, 1.0)),
    "lognormal": (lambda ops, u, v, mean, sigma: exp(ops, mean + sigma * ndtri(ops, v)), (0.0, 1.0)),
    "standard_exponential": (lambda ops, u, v: _exponential(ops, v), ()),
    "exponential": (lambda ops, u, v, scale: scale * _exponential(ops, v), (1.0,)),
    "gumbel": (lambda ops, u, v, loc, scale: loc - scale * log(ops, _exponential(ops, v)), (0.0, 1.0)),
    "logistic": (lambda ops, u, v, loc, scale: loc + scale * log(ops, v / (1.0 - v)), (0.0, 1.0)),
    "laplace": (
        lambda ops, u, v, loc, scale: loc
        + scale * ops.where(v < 0.5, lambda w: log(ops, 2.0 * w), lambda w: -log(ops, 2.0 * (1.0 - w)), v),
        (0.0, 1.0),
    ),
    "rayleigh": (lambda ops, u, v, scale: scale * ops.sqrt(2.0 * _exponential(ops, v)), (1.0,)),
    "weibull": (lambda ops, u, v, a: exp(ops, log(ops, _exponential(ops, v)) / a), None),
    "pareto": (lambda ops, u, v, a: exp(ops, _exponential(ops, v) / a) - 1.0, None),
    "power": (lambda ops, u, v, a: exp(ops, log(ops, v) / a), None),
}
INTEGER = "integers"  # low + floor(u64 * (high - low) / 2**64): written in both languages by hand


def uniforms(ops, bits):
    """From the top 53 random bits (a float64 integer): a uniform in [0, 1) and one in (0, 1)."""
    return bits * 2.0**-53, (ops.floor(bits * 0.5) + 0.5) * 2.0**-52


def _sample_numpy(draw: Draw, n: np.ndarray) -> np.ndarray:
    bits = philox_u64(n, draw.stream, draw.key)
    if draw.method == INTEGER:
        low, high = draw.params
        return (np.int64(low) + _mulhi64(bits, high - low).astype(np.int64)).astype(draw.dtype)
    transform = DISTRIBUTIONS[draw.method][0]
    u, v = uniforms(NumpyOps, (bits >> np.uint64(11)).astype(np.float64))
    with np.errstate(all="ignore"):
        return transform(NumpyOps, u, v, *draw.params).astype(draw.dtype, copy=False)


def _mulhi64(a: np.ndarray, b: int) -> np.ndarray:
    """(a * b) >> 64 for uint64 ``a`` and 0 <= b < 2**64, through 32-bit halves."""
    mask, shift = np.uint64(MASK32), np.uint64(32)
    b_lo, b_hi = np.uint64(b & MASK32), np.uint64(b >> 32)
    a_lo, a_hi = a & mask, a >> shift
    lo_lo, hi_lo, lo_hi, hi_hi = a_lo * b_lo, a_hi * b_lo, a_lo * b_hi, a_hi * b_hi
    middle = (lo_lo >> shift) + (hi_lo & mask) + (lo_hi & mask)
    return hi_hi + (hi_lo >> shift) + (lo_hi >> shift) + (middle >> shift)


SLAB = 1 << 16  # elements per NumPy pass: keeps the temporaries in cache


def numpy_values(draw: Draw, region: tuple[range, ...]) -> np.ndarray:
    """The values of ``draw`` at ``region`` (global indices, one range per axis), drawn by NumPy."""
    out = np.empty(tuple(len(r) for r in region), dtype=draw.dtype)
    if out.size == 0:
        return out
    rows = max(1, SLAB // max(1, math.prod(out.shape[1:])))
    for start in range(0, out.shape[0] if out.ndim else 1, rows):
        part = (region[0][start : start + rows],) + region[1:] if out.ndim else region
        out[start : start + rows] = _sample_numpy(draw, counters(draw, part))
    return out
