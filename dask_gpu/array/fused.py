"""Running a fused reduction plan on the GPU (see :mod:`dask_gpu.array.optimization`).

:func:`fused_reduce` is what a rewritten task runs: one kernel for CuPy inputs, the plan's
operations one by one (:func:`~dask_gpu.array.plan.evaluate`) otherwise.

Slices move to the inputs (elementwise operations commute with them): a CuPy input becomes
a strided view, a draw a smaller region. The expression over those inputs becomes one kernel
(:mod:`~dask_gpu.array.codegen`), cached by its structure, so a graph of thousands of chunks
compiles it once.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from dask_gpu.array import codegen, distributions
from dask_gpu.array.codegen import Unsupported
from dask_gpu.array.plan import Call, DrawLeaf, Index, Leaf, Plan, _is_cupy, evaluate, reseeded_random


def fused_reduce(plan: Plan, *leaves):
    """What the rewritten task runs: one kernel for CuPy inputs, the original operations otherwise."""
    leaves = tuple(reseeded_random(*leaf) if kind == "seeded" else leaf for kind, leaf in zip(plan.kinds, leaves))
    on_gpu = (leaf[0].library == "cupy" if kind == "draw" else np.isscalar(leaf) or _is_cupy(leaf)
              for kind, leaf in zip(plan.kinds, leaves))
    if all(on_gpu):
        try:
            return reduce(plan, leaves)
        except Unsupported:
            pass
    return evaluate(plan, leaves)


def reduce(plan: Plan, leaves):
    """The chunk step of ``plan`` (sum, mean, min or max over every axis), as one kernel."""
    import cupy

    inputs: dict = {}
    tree = _push_down(plan.expr, leaves, (), inputs)
    shapes = {_shape(kind, value) for kind, value in inputs.values()}
    if len(shapes) != 1:
        raise Unsupported("inputs of different shapes")
    (shape,) = shapes
    kwargs = dict(plan.kwargs)
    axis = kwargs.get("axis")
    if axis is not None and sorted(a % len(shape) for a in axis) != list(range(len(shape))) or not np.prod(shape):
        raise Unsupported("a reduction over some of the axes, or of nothing")
    kernel_inputs = tuple((kind, _code_key(kind, value)) for kind, value in inputs.values())
    reduction = "sum" if plan.reduction == "mean" else plan.reduction
    total = int(np.prod(shape))
    source, out_dtype = codegen.kernel_source(
        kernel_inputs, len(shape), Body(tree), _out_dtype(plan.reduction, kwargs.get("dtype")),
        reduction, total >= 2**31,
    )
    blocks = codegen.blocks_for(total)
    partial = cupy.empty(blocks, dtype=out_dtype)
    args = [a for kind, value in inputs.values() for a in codegen.leaf_args(kind, value)]
    codegen.launch(source, args + [np.int64(n) for n in shape], total, partial, blocks)
    result = cupy.empty((1,) * len(shape), dtype=out_dtype)
    codegen.finish(source, partial, result)
    if plan.reduction == "mean":
        from dask.array.reductions import numel

        like = cupy.broadcast_to(cupy.empty((), dtype=out_dtype), shape)
        n = numel(like, dtype=kwargs.get("dtype"), axis=kwargs.get("axis"), keepdims=True)
        return {"n": n, "total": result}
    return result


def _push_down(expr, leaves, indices, inputs):
    """The expression with slices moved into its inputs; ``inputs`` collects (kind, view or (draw, region))."""
    if isinstance(expr, Index):
        return _push_down(expr.child, leaves, (expr.index, *indices), inputs)
    if isinstance(expr, Call):
        return ("call", expr.func, tuple(_push_down(a, leaves, indices, inputs) for a in expr.args))
    if isinstance(expr, (Leaf, DrawLeaf)):
        key = (expr.position, repr(indices))
        if key not in inputs:
            inputs[key] = _sliced(expr, leaves[expr.position], indices)
        return ("input", list(inputs).index(key))
    return ("const", expr)


def _sliced(expr, value, indices):
    if isinstance(expr, DrawLeaf):
        draw, region = value
        for index in indices:
            region = distributions.compose(region, index)
            if region is None:
                raise Unsupported("an index that is not slices")
        return "draw", (draw, region)
    if np.isscalar(value):
        raise Unsupported("a scalar input")
    for index in indices:
        value = value[index]
    return "array", value


def _shape(kind, value):
    return tuple(len(r) for r in value[1]) if kind == "draw" else value.shape


def _code_key(kind, value):
    return codegen._code_key(value[0]) if kind == "draw" else value.dtype


@dataclasses.dataclass(frozen=True)
class Body:
    """The pushed-down expression, called on the kernel's input Syms; hashable, for the kernel cache."""

    tree: tuple

    def __call__(self, builder, syms):
        return _evaluate(self.tree, syms)


def _evaluate(tree, syms):
    kind = tree[0]
    if kind == "input":
        return syms[tree[1]]
    if kind == "const":
        return tree[1]
    return tree[1](*(_evaluate(a, syms) for a in tree[2]))


def _out_dtype(reduction, dtype):
    if reduction in ("max", "min"):
        return _identity
    if reduction == "mean" or dtype is not None:
        return np.dtype(dtype or "f8")
    return _sum_dtype


def _identity(dtype):
    return dtype


def _sum_dtype(dtype):
    return np.zeros(1, dtype).sum().dtype
