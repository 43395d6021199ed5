"""dask-gpu's dataframe collections: dask-cudf's, with the planner's joins and sorts (:mod:`.planner`, put in
place as dask makes the collection of each operation), ``optimize()`` that a later compute keeps as it is, and
computing that fuses tasks as ``optimize()`` does.

dask (2026.8) computes a collection (``compute()``, ``dask.compute``, a client's ``compute``) as the expression's
``finalize_compute`` makes it, optimized without fusion: each selection, filter and arithmetic on a partition is a
task of its own, which the scheduler and the worker pass one by one (the plain TPC-H query 1 is 23 tasks, fused 3;
the 22 queries at scale factor 10 took 8.77 s on an H200, fused 6.92 s). ``optimize()`` and ``persist()`` fuse.
The expression at the root of each of these collections is :class:`Fusing`: computing it optimizes it with fusion
first.

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
import importlib
import weakref

from dask_gpu import internals
from dask_gpu.dataframe import planner


class Optimized(internals.FrameExpr):
    """An optimized expression, with its name, meta, partitions and graph, that optimizing leaves as it is: the
    optimizer rewrites an expression's operands that are expressions, and this one's is held out of its reach."""

    _parameters = ["held"]

    @property
    def optimized(self):
        return self.operand("held").inner

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


class _Held(planner.Held):
    """An optimized expression held as an operand. Pickled (as a client sends what it computes to the scheduler), a
    small one is its graph: a graph of a few tasks unpickles in a tenth of the time of the expressions it was made
    of, each of which is made and tokenized anew (3 to 6 ms a TPC-H query); a large one stays expressions, as dask
    sends them to spare the client the graph's making."""

    __slots__ = ()

    def __reduce__(self):
        optimized = self.inner
        if sum(expr.npartitions for expr in optimized.walk()) > GRAPH_TASKS:  # more tasks than that, at most
            return _Held, (optimized,)
        graph = dict(optimized.__dask_graph__())
        return _Held, (_Graph(optimized._name, optimized._meta, optimized.divisions, graph),)


GRAPH_TASKS = 1000  # the most tasks of an optimized expression that is pickled as its graph


class _Graph:
    """What :class:`Optimized` takes of an optimized expression that was pickled as its graph."""

    __slots__ = ("_name", "_meta", "divisions", "graph")

    def __init__(self, name: str, meta, divisions: tuple, graph: dict):
        self._name, self._meta, self.divisions, self.graph = name, meta, divisions, graph

    def __dask_graph__(self) -> dict:
        return self.graph

    def __reduce__(self):
        return _Graph, (self._name, self._meta, self.divisions, self.graph)


class Fusing:
    """An expression that is computed fused: its ``finalize_compute``, which dask calls on what it computes,
    optimizes it with fusion, and what dask then does leaves the result as it is (:class:`Optimized`). Pickled, it
    is an expression of dask's own class again, under the same name: whoever unpickles it needs none of this."""

    def finalize_compute(self):
        return Optimized(_Held(planner.optimize(self))).finalize_compute()

    def __reduce__(self):
        return internals.expression_as(self, self._dask_class).__reduce__()


@functools.cache
def fusing(cls: type) -> type:
    """``cls``, an expression class, with what :class:`Fusing` adds, and a registry of instances of its own (dask
    shares one instance among equal expressions by name, and the twins of the two classes have one name).

    The class is pickled by its name in this module, which :func:`__getattr__` makes again in any process: dask
    tokenizes a class by pickling it, and a task may hold a method of the class."""
    name = ":".join(("Fusing", cls.__module__, cls.__qualname__)).replace(".", ":")
    made = _fusing[name] = type(cls.__name__, (Fusing, cls), {
        "__module__": __name__, "__qualname__": name, "_dask_class": cls, "_instances": weakref.WeakValueDictionary()})
    return made


_fusing: dict = {}  # name -> a class that fusing() made


def __getattr__(name: str):
    """The class :func:`fusing` names ``name``, made for its dask class."""
    if name in _fusing:
        return _fusing[name]
    kind, *path = name.split(":")
    if kind != "Fusing" or len(path) < 2:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for split in range(len(path) - 1, 0, -1):  # the longest module that imports, then the class within it
        try:
            found = importlib.import_module(".".join(path[:split]))
        except ImportError:
            continue
        for attribute in path[split:]:
            found = getattr(found, attribute)
        return fusing(found)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def fused_when_computed(expr):
    """``expr``, the root of a collection, as a :class:`Fusing` expression (one already optimized is left)."""
    if isinstance(expr, (Fusing, Optimized)):
        return expr
    return internals.expression_as(expr, fusing(type(expr)))


class Planned:
    """What dask-gpu's collections add to dask-cudf's: the planner's rules for the joins and sorts they are made
    of (dask makes a collection of each operation's expression), ``optimize()``, and computing fused."""

    def __init__(self, expr, *args, **kwargs):
        super().__init__(fused_when_computed(planner.planned(expr)), *args, **kwargs)

    def optimize(self, fuse: bool = True):
        from dask.dataframe.dask_expr import new_collection

        if isinstance(self.expr, Optimized):
            return self
        return new_collection(Optimized(_Held(planner.optimize(self.expr, fuse))))


def register() -> None:
    """dask-gpu's collections for cuDF frames, series and indexes, and for dataframes' scalars (idempotent)."""
    import cudf
    import dask_cudf
    from dask.dataframe import get_collection_type

    for frame, collection in ((cudf.DataFrame, dask_cudf.DataFrame), (cudf.Series, dask_cudf.Series),
                              (cudf.Index, dask_cudf.Index)):
        ours = collection_of(collection)
        get_collection_type.register(frame, lambda _, ours=ours: ours)
    register_scalars()


def register_scalars() -> None:
    """dask-gpu's collection for the scalars of dataframe expressions (a reduction's), whatever their partitions'
    library; dask's for the rest (idempotent). A scalar's meta is a NumPy or Python scalar, which dask's
    ``get_collection_type`` takes as ``object``."""
    import dask.dataframe as dd
    from dask.dataframe import get_collection_type

    theirs = get_collection_type.dispatch(object)
    if getattr(theirs, "ours", False):
        return
    ours = collection_of(dd.Scalar)

    def scalar_collection(meta):
        make = theirs(meta)
        return lambda expr: ours(expr) if isinstance(expr, internals.FrameExpr) else make(expr)

    scalar_collection.ours = True
    get_collection_type.register(object, scalar_collection)


@functools.cache
def collection_of(base: type) -> type:
    """``base``, a dask collection class, with what :class:`Planned` adds."""
    return type(base.__name__, (Planned, base), {"__module__": __name__, "__doc__": base.__doc__})
