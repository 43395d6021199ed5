"""dask-gpu's dataframe collections: dask-cudf's, with the planner's joins and sorts (:mod:`.planner`, put in
place as dask makes the collection of each operation) and ``optimize()`` that a later compute keeps as it is.

dask (2026.8) optimizes a collection again when it is computed, and its optimizer is not idempotent on a fused
expression: an expression that is optimized already has its column projections pushed once more, which renames
expressions that the fused tasks still name (``df.optimize().compute()`` of TPC-H's query 21 fails with "lost
dependencies"; of query 7, it compares strings with NaN). ``optimize()`` here returns the optimized expression
under :class:`Optimized`, which the optimizer leaves alone and whose graph is the optimized one's.

:func:`register` makes these the collections of cuDF frames, through dask's ``get_collection_type`` dispatch,
as dask-cudf registers its own; it imports dask-cudf.
"""

from __future__ import annotations

import functools

from dask_gpu import internals
from dask_gpu.dataframe import planner


class Optimized(internals.FrameExpr):
    """An optimized expression, with its name, meta, partitions and graph, that optimizing leaves as it is: the
    optimizer rewrites an expression's operands that are expressions, and this one's is held out of its reach."""

    _parameters = ["held"]

    @property
    def optimized(self):
        return self.operand("held").optimized

    @functools.cached_property
    def _name(self) -> str:
        return self.optimized._name

    @functools.cached_property
    def _meta(self):
        return self.optimized._meta

    def _divisions(self):
        return self.optimized.divisions

    def _layer(self) -> dict:
        return dict(self.optimized.__dask_graph__())

    def _tree_repr_lines(self, indent=0, recursive=True):
        return self.optimized._tree_repr_lines(indent, recursive)


class _Held:
    """An expression as an operand that is not one (dask takes an operand's ``expr`` as the operand): tokenized by
    its name."""

    __slots__ = ("optimized",)

    def __init__(self, optimized):
        self.optimized = optimized

    def __dask_tokenize__(self):
        return self.optimized._name


class Planned:
    """What dask-gpu's collections add to dask-cudf's: the planner's rules for the joins and sorts they are made
    of (dask makes a collection of each operation's expression), and ``optimize()``."""

    def __init__(self, expr, *args, **kwargs):
        super().__init__(planner.planned(expr), *args, **kwargs)

    def optimize(self, fuse: bool = True):
        from dask.dataframe.dask_expr import new_collection

        if isinstance(self.expr, Optimized):
            return self
        return new_collection(Optimized(_Held(self.expr.optimize(fuse=fuse))))


def register() -> None:
    """dask-gpu's collections for cuDF frames, series and indexes (idempotent)."""
    import cudf
    import dask_cudf
    from dask.dataframe import get_collection_type

    for frame, collection in ((cudf.DataFrame, dask_cudf.DataFrame), (cudf.Series, dask_cudf.Series),
                              (cudf.Index, dask_cudf.Index)):
        ours = collection_of(collection)
        get_collection_type.register(frame, lambda _, ours=ours: ours)


@functools.cache
def collection_of(base: type) -> type:
    """``base``, a dask collection class, with what :class:`Planned` adds."""
    return type(base.__name__, (Planned, base), {"__module__": __name__, "__doc__": base.__doc__})
