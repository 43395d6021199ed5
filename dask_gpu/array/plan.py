"""The plan a task rewritten by :mod:`dask_gpu.array.optimization` carries, and what runs it op by op.

A :class:`Plan` is a chunk's chain as a tree: elementwise calls (:class:`Call`), slices
(:class:`Index`) and leaves, the task's other arguments (:class:`Leaf`, or :class:`DrawLeaf`
for values drawn where they are read), under a reduction. :func:`evaluate` runs it as dask
would have, one operation after another; :mod:`dask_gpu.array.fused` runs it as one GPU kernel.
:func:`sample` is the task of a random block: the values of a draw, on the library it names.
"""

from __future__ import annotations

import dataclasses
import functools
import threading

import numpy as np

from dask_gpu import internals
from dask_gpu.array import codegen, distributions


@dataclasses.dataclass(frozen=True)
class Leaf:
    position: int  # which argument of the rewritten task holds its value


@dataclasses.dataclass(frozen=True)
class DrawLeaf:
    position: int  # the argument holds (Draw, region): values made where they are read


@dataclasses.dataclass(frozen=True)
class Call:
    func: object
    args: tuple


@dataclasses.dataclass(frozen=True)
class Index:
    index: tuple
    child: object

    def __hash__(self):  # a slice has a hash only from Python 3.12
        return hash((tuple((i.start, i.stop, i.step) if isinstance(i, slice) else i for i in self.index), self.child))


@dataclasses.dataclass(frozen=True)
class AsType:
    """``x.astype(dtype)`` as a function, so that a cast is one more elementwise operation."""

    dtype: np.dtype

    def __call__(self, x):
        return x.astype(self.dtype)


@dataclasses.dataclass(frozen=True)
class Plan:
    expr: object
    reduction: str  # "sum", "max", "min" or "mean"
    func: object  # dask's chunk function, for the fallback
    kwargs: tuple
    kinds: tuple  # of each leaf: "draw" (a (Draw, region) pair), "seeded" (reseeded_random's arguments) or "value"


def evaluate(plan: Plan, leaves):
    """The chain computed as dask would have: each operation on whole arrays, then the chunk step."""
    value = _value(plan.expr, leaves)
    if _is_cupy(value) and not value.flags.c_contiguous:
        value = value.copy()  # never reduce a strided CuPy view
    func = plan.func.func if isinstance(plan.func, functools.partial) else plan.func
    return func(value, **dict(plan.kwargs))


def _value(expr, leaves):
    if isinstance(expr, Leaf):
        return leaves[expr.position]
    if isinstance(expr, DrawLeaf):
        return sample(*leaves[expr.position])
    if isinstance(expr, Index):
        return _value(expr.child, leaves)[expr.index]
    if isinstance(expr, Call):
        return expr.func(*(_value(a, leaves) for a in expr.args))
    return expr  # a constant


def sample(draw: distributions.Draw, region: tuple[range, ...]):
    """The values of ``draw`` at ``region`` (global indices, one range per axis): CuPy's for a CuPy draw."""
    if draw.library == "cupy":
        return codegen.sample(draw, region)
    return distributions.numpy_values(draw, region)


_generators = threading.local()


def in_band(state):
    """A block's seed state as bytes, which pickle inside its task's message (:func:`reseeded_random`
    reads them back).

    As an array it would travel as a buffer of its own: for the seed's 2 TB array, 2500 of them
    in the messages that start the work, each a separate frame to send and receive.
    """
    if isinstance(state, np.ndarray) and state.dtype == np.uint32 and state.ndim == 1:
        return state.tobytes()
    return state


def reseeded_random(cls, method, state, size, args, kwargs):
    """dask.array's ``_apply_random`` for a CuPy ``RandomState``, with one generator per thread."""
    generators = _generators.__dict__.setdefault("by_class", {})
    if cls not in generators:
        generators[cls] = cls()
    generator = generators[cls]
    generator.seed(np.frombuffer(state, dtype=np.uint32) if isinstance(state, bytes) else state)
    return getattr(generator, method)(*args, size=size, **kwargs)


def _is_cupy(value) -> bool:
    """CuPy data, or a distributed future of it: a persisted chunk, whose type the client knows once computed,
    and the scheduler too where the graph reaches it with futures that know none."""
    kind = type(value)
    if kind.__name__ == "Future" and kind.__module__.startswith("distributed"):
        known = getattr(value, "type", None)
        if known is None:
            return _cupy_module(internals.known_type_name(value.key))
        kind = known
    return _cupy_module(kind.__module__)


@functools.cache
def _cupy_module(module) -> bool:
    return isinstance(module, str) and module.split(".")[0] in ("cupy", "cupyx")
