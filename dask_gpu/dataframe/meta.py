"""The client's share of a query: what dask's optimizer asks of cuDF metas, each kind computed once.

dask's optimizer works on each expression's meta, an empty frame of its partitions' type, and with cuDF
partitions each question to a meta is some cuDF Python. The questions asked most are kept by the kind of
their inputs, not computed anew:

- A merge's meta. dask finds it by merging non-empty stand-ins of its inputs, and an optimization makes
  several merges of each join as it moves filters and columns: the 22 TPC-H queries ask for 314 merge metas
  of 87 kinds. It depends only on its inputs' columns, dtypes and index, and on its keywords. Of cuDF inputs
  it is made of their empty columns where the keys are columns of one dtype (:func:`_merged_columns`), and
  computed on the empty metas themselves otherwise (:func:`_on_empties`), as is an ``isin``'s; a filter's is its
  frame's.
- The metas of reductions and group-bys, and of their chunks. dask finds them by reducing non-empty stand-ins
  of their inputs, which with cuDF runs GPU kernels; the 22 queries ask for 140 of them, of 81 kinds. Each is a
  function of the expression's type (dask's, for a collection's root, a twin of it that computes fused) and its
  operands, the expressions among them through their metas alone, and a series reduced to a scalar through its
  dtype alone. Operands with no kind here (a closure, an object of its own type) leave the meta computed as dask
  does. Group-bys are computed on the empty metas of cuDF inputs.
- The metas of blockwise expressions (selections, filters, arithmetic, new columns), kept the same way: each is
  one call on an empty frame, which with cuDF is its Python and, for some, kernels.
- A cuDF frame's ``dtypes`` and ``columns``. Each is a pandas object made anew at each call (a Series, about
  a millisecond; an Index, half that), and dask asks for them at every column selection it plans
  (``is_dataframe_like`` looks for ``dtypes``): 2,300 and 1,500 calls over the 22 queries, a tenth of the
  client's time. They depend only on the columns' labels and dtypes; each call gets a copy, which a user may
  change. ``dtypes`` is made of the kept ``columns``, and this module tells a frame from a series by its class
  (:func:`_form`), not by asking it for its ``dtypes``.
- An expression's list of column labels, which dask makes anew from its meta at each call (3,000 calls over the
  22 queries), kept for each meta object; each call gets a list of its own.

Kept metas are shared by the expressions of one kind, as dask shares an expression's meta with every user of
it (a sort's meta is its input's): a cuDF frame's shallow copy cost about a millisecond. An operand's kind is
kept for its meta object, and hashed once. With these, a round of the 22 queries' building and optimization took
1.92 s against 3.06 s with dask's metas, with pandas metas, from empty caches (``benchmarks/tpch_plans.py``).
"""

from __future__ import annotations

import contextvars
import datetime
import enum
import functools
import sys
import threading
import types

import numpy as np
import pandas as pd
from dask.dataframe.dispatch import make_meta, meta_nonempty
from dask.utils import is_dataframe_like, is_index_like, is_series_like, methodcaller

from dask_gpu import internals

LIMIT = 4096  # kinds kept in each cache; past it, the cache starts again
_merged: dict = {}  # kind -> a merge's meta
_computed: dict = {}  # (expression type, attribute, operands' kinds) -> a reduction's or group-by's meta
_labels: dict = {}  # (attribute, kind) -> a cuDF frame's dtypes Series or columns Index
_kinds: dict = {}  # id of a meta -> (the meta, its kind)
_column_lists: dict = {}  # id of a meta -> (the meta, the column labels that dask's expressions list from it)

# dask's blockwise expressions whose metas install(blockwise=True) keeps: the base class, and those of its
# subclasses that compute their own (a group-by's chunk and a string or date accessor's call, each on a non-empty
# stand-in: with cuDF, kernels)
BLOCKWISE = ("Blockwise", "Projection", "Assign", "Isin", "AsType", "Index", "GroupByChunk", "FunctionMap")

# dask's reductions that compute their own metas, on non-empty stand-ins, and dask-cudf's group-bys (there is
# cuDF)
REDUCTIONS = ("Mean", "DropDuplicates")
CUDF_GROUPBYS = ("CudfGroupbyAgg", "DecomposableCudfGroupbyAgg")

# the operands that the metas of these expressions take, where not all of them: an isin's meta is its frame's
# shape in booleans, whatever the values (held in a delayed object, which has no kind)
META_OPERANDS = {"Isin": ("frame",)}

# dask's reductions whose meta over a series, and their chunks', is a scalar that the series' dtype decides: their
# kind leaves out its name and index, so that the sums of a query's columns of one dtype are one kind, and one
# planned as a client warms serves them all
SCALAR_OF_SERIES = ("Sum", "Prod", "Max", "Min", "Any", "All", "Count", "Mean")

# operands that are their own kind, with their type (1, 1.0 and True are equal, and give other metas)
_VALUES = (str, bytes, int, float, complex, type(None), enum.Enum)
# operands whose repr and unit say all: NumPy scalars, dates, times and durations (pandas' among them)
_STAMPS = (np.generic, datetime.date, datetime.time, datetime.timedelta)


def install(blockwise: bool = True) -> None:
    """Merge metas, the metas of reductions and group-bys (and of blockwise expressions, with ``blockwise``), and
    cuDF frames' dtypes and columns, by kind from now on (idempotent, and one thread at a time: a client's warming
    thread and its first call may install at once; :func:`uninstall` undoes it). Imports dask's dataframe
    expressions, and cuDF where it is installed."""
    with _installing:
        for cls, attribute, kind, cache, on_empties in kept_metas(blockwise):
            keep(cls, attribute, kind, cache, on_empties)
        keep_column_lists(internals.FrameExpr)
        try:
            import cudf
        except ImportError:
            return
        keep_labels(cudf.DataFrame)
        stand_ins_may_be_empty(cudf)
        for name in CUDF_GROUPBYS:
            keep(getattr(internals, name), "_meta", functools.partial(_operands_kind, "_meta"), _computed)


def uninstall() -> None:
    """dask's and cuDF's own properties back, and the kept metas forgotten."""
    with _installing:
        internals.restore_class_attributes()
        for cls, nonempty in _stand_ins.items():
            meta_nonempty.register(cls, nonempty)
        _stand_ins.clear()
        for cache in (_merged, _computed, _labels, _kinds, _column_lists):
            cache.clear()


_installing = threading.Lock()


def kept_metas(blockwise: bool = True) -> list:
    """The expressions' cached properties that :func:`install` keeps by kind: (class, attribute, kind, cache),
    merges first; with ``blockwise``, those of blockwise expressions too (selections, filters, arithmetic, new
    columns: each one call on an empty frame, which with cuDF is cuDF's Python and kernels)."""
    by_operands = [(internals.ApplyConcatApply, "_meta"), (internals.ApplyConcatApply, "_meta_chunk"),
                   (internals.GroupByApplyConcatApply, "_meta_chunk")]
    by_operands += [(getattr(internals, name), "_meta") for name in REDUCTIONS]
    if blockwise:
        by_operands += [(getattr(internals, name), "_meta") for name in BLOCKWISE]
    return [(internals.Merge, "_meta", _merge_kind, _merged, _merged_empties)] + [
        (cls, attribute, functools.partial(_operands_kind, attribute), _computed,
         _without_stand_ins if attribute == "_meta" else None) for cls, attribute in by_operands]


def stand_ins_may_be_empty(cudf) -> None:
    """dask's stand-ins of cuDF frames and series (``meta_nonempty``, dask-cudf's) are the empty metas themselves
    while :func:`_on_empty_stand_ins` computes a meta, where they hold no categories (idempotent)."""
    for cls in (cudf.DataFrame, cudf.Series):
        if cls not in _stand_ins:
            _stand_ins[cls] = nonempty = meta_nonempty.dispatch(cls)
            meta_nonempty.register(cls, functools.partial(_stand_in, nonempty))


def _stand_in(nonempty, meta):
    return meta if _EMPTY_STAND_INS.get() and _on_empties(meta) else nonempty(meta)


def _on_empty_stand_ins(compute):
    """``compute``, dask's meta of a group-by or of its chunks, run with the empty metas as its stand-ins where its
    inputs' metas are cuDF's (:func:`_on_empties`): dask groups and aggregates non-empty stand-ins, which with cuDF
    are columns made on the device, grouped by its kernels, two or three times for each group-by. (Not a sort's: on
    cuDF's empty metas, a sort's strings come out of another dtype than its partitions'.)"""

    @functools.wraps(compute)
    def computed(expr):
        groupby = isinstance(expr, (internals.GroupByApplyConcatApply, internals.GroupByChunk))
        if not groupby or not all(_on_empties(d._meta) for d in expr.dependencies()):
            return compute(expr)  # dask's, with its inputs' metas computed as they are, outside of this
        token = _EMPTY_STAND_INS.set(True)
        try:
            found = compute(expr)
        finally:
            _EMPTY_STAND_INS.reset(token)
        return found if _frame_like(found) else compute(expr)

    return computed


_EMPTY_STAND_INS = contextvars.ContextVar("dask_gpu_empty_stand_ins", default=False)
_stand_ins: dict = {}  # cuDF's frame and series types -> dask-cudf's meta_nonempty of them


def keep(cls, attribute: str, kind, cache: dict, on_empties=None) -> None:
    """``cls``'s cached property ``attribute`` kept in ``cache`` by ``kind`` (idempotent), computed first by
    ``on_empties(expr)`` where given and not None; subclasses that define their own keep theirs. A dask whose class
    has no such property is left as it is."""
    current = cls.__dict__.get(attribute)
    if isinstance(current, functools.cached_property) and not getattr(current.func, "by_kind", False):
        compute = _on_empty_stand_ins(current.func)
        compute = compute if on_empties is None else _first(on_empties, compute)
        replacement = functools.cached_property(by_kind(compute, kind, cache, shared=True))
        replacement.__set_name__(cls, attribute)
        internals.replace_class_attribute(cls, attribute, replacement)


def _first(on_empties, compute):
    """``compute``, dask's, where ``on_empties`` gives None."""

    @functools.wraps(compute)
    def computed(expr):
        found = on_empties(expr)
        return compute(expr) if found is None else found

    return computed


def _merged_empties(merge):
    """A merge's meta, as dask makes it (:func:`_on_empties`)."""
    left, right = merge.left._meta, merge.right._meta
    if not (_on_empties(left) and _on_empties(right)):
        return None
    keywords = dict(merge.kwargs)
    if keywords["how"] == "leftsemi":  # as dask's meta has it
        keywords["how"] = "left"
    found = _merged_columns(left, right, keywords)
    return make_meta(left.merge(right, **keywords)) if found is None else found


def _merged_columns(left, right, keywords):
    """A merge's meta made of its inputs' empty columns, with pandas' names, where it joins columns on keys of one
    dtype on each side (None otherwise): each column of the left, then each of the right but for keys of the same
    name on both sides, a suffix on the names that remain on both. The merge itself, on the empty metas, is cuDF's
    join and gathers: several milliseconds a first time."""
    how, suffixes = keywords["how"], keywords["suffixes"]
    left_on, right_on = _keys(keywords["left_on"]), _keys(keywords["right_on"])
    if (how not in ("inner", "left", "right", "outer") or keywords["left_index"] or keywords["right_index"]
            or keywords["indicator"] or not left_on or len(left_on) != len(right_on)
            or not (_form(left) == _form(right) == "frame")):
        return None
    left_names, right_names = internals.cudf_column_names(left), internals.cudf_column_names(right)
    if not (set(left_on) <= set(left_names) and set(right_on) <= set(right_names)) or any(
            internals.cudf_column(left, a).dtype != internals.cudf_column(right, b).dtype
            for a, b in zip(left_on, right_on)):
        return None  # keys of other dtypes: cuDF casts them
    shared = {a for a, b in zip(left_on, right_on) if a == b}
    kept = [name for name in right_names if name not in shared]
    both = set(left_names) & set(kept)
    ends = [suffix or "" for suffix in suffixes]
    names = [f"{n}{ends[0]}" if n in both else n for n in left_names] + [
        f"{n}{ends[1]}" if n in both else n for n in kept]
    if len(set(names)) < len(names) or not all(isinstance(n, str) for n in (*left_names, *kept)):
        return None  # pandas raises, or names of other types
    columns = [internals.cudf_column(left, n) for n in left_names] + [internals.cudf_column(right, n) for n in kept]
    return internals.cudf_frame(left, dict(zip(names, columns)))


def _keys(on) -> tuple:
    """A merge's keys as a tuple of column labels, empty where they are not labels (arrays, or none)."""
    on = [on] if isinstance(on, str) else on
    return tuple(on) if isinstance(on, (list, tuple)) and all(isinstance(k, str) for k in on) else ()


def _isin_empties(isin):
    """An ``isin``'s meta, as dask makes it (:func:`_on_empties`)."""
    frame = isin.frame._meta
    return make_meta(frame.isin(frame.iloc[:0])) if _on_empties(frame) else None


def _filtered(filter_):
    """A filter's meta: its frame's, where the predicate is a boolean series, of cuDF both. The rows go, the columns,
    dtypes and index stay; on cuDF's empty metas the boolean mask is kernels and Python, 2 to 3 ms a first time."""
    frame, predicate = filter_.frame._meta, filter_.predicate._meta
    if _of_cudf(frame) and _of_cudf(predicate) and _form(predicate) == "series" and predicate.dtype == bool and (
            _form(frame) in ("frame", "series")):
        return frame
    return None


def _projected(projection):
    """A selection of columns' meta: its frame's columns of those labels, as they are, where the frame is cuDF's and
    the labels are some of its columns' names, each once. cuDF's ``frame[labels]`` makes a pandas Series of the
    labels first: five times the time."""
    frame, labels = projection.frame._meta, projection.operand("columns")
    if not (_of_cudf(frame) and _form(frame) == "frame" and isinstance(labels, list) and labels
            and all(isinstance(label, str) for label in labels)):
        return None
    names = internals.cudf_column_names(frame)
    if len(set(labels)) < len(labels) or not set(labels) <= set(names) or len(set(names)) < len(names):
        return None  # dask's, which raises or repeats
    return internals.cudf_columns_by_label(frame, labels)


# dask's class name -> its meta computed without dask's stand-ins (on empty inputs, or from their columns), where
# it can be
ON_EMPTIES = {"Isin": _isin_empties, "Filter": _filtered, "Projection": _projected}


def _without_stand_ins(expr):
    """``expr``'s meta by :data:`ON_EMPTIES`, None where it has no way there."""
    found = ON_EMPTIES.get(type(expr).__name__)
    return found(expr) if found is not None else None


def _on_empties(meta) -> bool:
    """Whether an operation's meta, which dask computes on non-empty stand-ins of its inputs' metas, is the same
    computed on the metas themselves: cuDF frames and series, whose dtypes do not follow their values, with no
    categories (whose stand-ins have categories of their own). Strings keep their inputs' dtype, as the operation
    on the partitions does, where the stand-ins have the default one. On cuDF, stand-ins are columns made on the
    device, and the operation runs kernels on them: 7 to 11 ms for a TPC-H merge's meta, about 3 on empty frames."""
    form = _form(meta)
    if not _of_cudf(meta) or form not in ("frame", "series"):
        return False
    dtypes = internals.cudf_dtypes(meta) if form == "frame" else (meta.dtype,)
    index = meta.index
    return not any(str(dtype) == "category" for dtype in (
        *dtypes, *(index.dtypes if index.nlevels > 1 else (index.dtype,))))


def keep_labels(cls) -> None:
    """``cls.dtypes`` and ``cls.columns`` kept by the frame's column labels and dtypes (idempotent); setting
    ``columns`` works as before."""
    for attribute in ("dtypes", "columns"):
        current = getattr(cls, attribute, None)
        if isinstance(current, property) and not getattr(current.fget, "by_kind", False):
            kind = functools.partial(_labels_kind, attribute)
            compute = _dtypes_from_columns(current.fget) if attribute == "dtypes" else current.fget
            kept = property(by_kind(compute, kind, _labels), current.fset, current.fdel, current.__doc__)
            internals.replace_class_attribute(cls, attribute, kept)


def _dtypes_from_columns(fget):
    """cuDF's ``dtypes`` made of the frame's ``columns`` and its columns' dtypes in order: the same Series, without
    pandas lining up a dict with those labels (a fifth of the time). In cuDF's pandas-compatible mode, cuDF's own,
    which refuses some dtypes there."""

    @functools.wraps(fget)
    def dtypes(frame):
        cudf = sys.modules.get("cudf")
        if cudf is not None and cudf.get_option("mode.pandas_compatible"):
            return fget(frame)
        return pd.Series(list(internals.cudf_dtypes(frame)), index=frame.columns, dtype="object")

    return dtypes


def keep_column_lists(cls) -> None:
    """``cls.columns``, the list of an expression's column labels that dask makes anew from its meta at each call
    (the optimizer asks for it at each projection it plans: 3,000 times over the 22 TPC-H queries, each a walk
    over a pandas Index of Arrow strings), kept for each meta object (idempotent). Each call gets a list of its
    own."""
    current = cls.__dict__.get("columns")
    if isinstance(current, property) and not getattr(current.fget, "by_kind", False):
        internals.replace_class_attribute(cls, "columns", property(_column_list(current.fget), doc=current.__doc__))


def _column_list(compute):
    """``compute(expr)``, a list of labels that depends on ``expr``'s meta alone, kept for each meta object."""

    @functools.wraps(compute)
    def kept(expr) -> list:
        try:
            meta = expr._meta
        except Exception:  # no meta: dask's own answer, or its error
            return compute(expr)
        return list(_for_meta(_column_lists, meta, lambda: tuple(compute(expr))))

    kept.by_kind = True
    return kept


def by_kind(compute, kind, cache: dict, shared: bool = False):
    """``compute(self)``, kept in ``cache`` by ``kind(self)``. With ``shared``, each caller gets the kept value, as
    dask's expressions share metas (a sort's meta is its input's, and every user of an expression gets its one
    cached meta). Without, each gets a result of its own: a shallow copy of a frame, a series or an index, which
    a caller may change; scalars as they are."""

    @functools.wraps(compute)
    def kept(self):
        try:
            key = kind(self)
            found = cache.get(key)
        except (AttributeError, TypeError):  # no kind to be had, or one that cannot be a key
            return compute(self)
        if found is None:
            found = compute(self)
            if not (_frame_like(found) or isinstance(found, _STAMPS + _VALUES)):
                return found  # neither a frame nor a scalar: not kept
            if len(cache) >= LIMIT:
                cache.clear()
            cache[key] = found
        return found if shared or not _frame_like(found) else found.copy(deep=False)

    kept.by_kind = True
    return kept


def _merge_kind(merge) -> tuple:
    return (expression_kind(merge.left), expression_kind(merge.right),
            tuple((name, repr(value)) for name, value in sorted(merge.kwargs.items())))


def expression_kind(expr) -> tuple:
    """:func:`meta_kind` of ``expr``'s meta, kept for each meta object while it is in the cache (metas kept by
    kind are shared, and the optimizer asks for the kind of one as each of its users is made)."""
    try:
        meta = expr._meta
    except NotImplementedError:  # an expression of no frame (a delayed object's): no kind
        raise TypeError(f"no kind for an operand of type {type(expr).__name__}") from None
    scalar = isinstance(meta, np.generic)  # a reduction's: it stands for its type, its value is a stand-in's
    return _for_meta(_kinds, meta, lambda: _Kind((type(meta), meta.dtype)) if scalar else meta_kind(meta))


def _for_meta(cache: dict, meta, compute):
    """``compute()``, kept in ``cache`` for the object ``meta`` while it is there."""
    found = cache.get(id(meta))
    if found is None or found[0] is not meta:
        if len(cache) >= LIMIT:
            cache.clear()
        found = cache[id(meta)] = meta, compute()  # the meta held: its id stays its own
    return found[1]


def _of_cudf(value) -> bool:
    return type(value).__module__.split(".")[0] == "cudf"


def _frame_like(value) -> bool:
    return _form(value) is not None


def _form(value) -> str | None:
    """``"frame"``, ``"series"``, ``"index"`` or None, as dask's ``is_dataframe_like``, ``is_series_like`` and
    ``is_index_like`` tell; for cuDF's and pandas' classes, asked once for each class: dask asks a frame for its
    ``dtypes`` and ``columns``, which cuDF makes as pandas objects."""
    cls = type(value)
    found = _forms.get(cls, False)
    if found is False:
        found = ("frame" if is_dataframe_like(value) else "series" if is_series_like(value)
                 else "index" if is_index_like(value) else None)
        if cls.__module__.split(".")[0] in ("cudf", "pandas"):
            _forms[cls] = found
    return found


_forms: dict = {}  # a cuDF or pandas class -> the form its objects take (:func:`_form`)


def _operands_kind(attribute: str, expr) -> tuple:
    names = META_OPERANDS.get(type(expr).__name__)
    operands = expr.operands if names is None else [expr.operand(name) for name in names]
    kinds = [_operand_kind(operand) for operand in operands]
    if _scalar_of_series(expr):
        kinds[0] = "series", type(expr.frame._meta), expr.frame._meta.dtype  # the first of a reduction's operands
    return _dask_class(expr), attribute, tuple(kinds)


def _dask_class(expr) -> type:
    """``expr``'s class, or dask's where it is a twin of a dask class (a collection's root that computes fused,
    :mod:`.collections`): the twins' metas are their dask class's."""
    cls = type(expr)
    return getattr(cls, "_dask_class", cls)


def _scalar_of_series(expr) -> bool:
    """Whether ``expr`` is one of dask's :data:`SCALAR_OF_SERIES` reductions of a series (its group-bys have classes
    of the same names, whose metas are series named as their input)."""
    cls = _dask_class(expr)
    return (cls.__name__ in SCALAR_OF_SERIES and cls.__module__ == internals.ApplyConcatApply.__module__
            and _form(expr.frame._meta) == "series")


def _operand_kind(operand):
    """What an expression's meta takes from one of its operands: an expression's meta's kind, a value with its
    type, a function or a class's method itself (equal only to itself, and kept alive by the key), the name of
    dask's method caller, a partial's parts, an empty frame's kind. TypeError where there is none."""
    if isinstance(operand, internals.Expr):
        return expression_kind(operand)
    if isinstance(operand, _VALUES):
        return type(operand), operand
    if isinstance(operand, (list, tuple)):
        return type(operand), tuple(_operand_kind(item) for item in operand)
    if isinstance(operand, dict):
        return dict, tuple((_operand_kind(k), _operand_kind(v)) for k, v in operand.items())
    if isinstance(operand, slice):
        return slice, _operand_kind(operand.start), _operand_kind(operand.stop), _operand_kind(operand.step)
    if isinstance(operand, _STAMPS):
        return type(operand), repr(operand), getattr(operand, "unit", None)
    if isinstance(operand, (types.FunctionType, types.BuiltinFunctionType, type)) and not getattr(
            operand, "__closure__", None):
        return operand
    if isinstance(operand, types.MethodType) and isinstance(operand.__self__, type):  # a classmethod, bound
        return types.MethodType, operand.__func__, operand.__self__
    if isinstance(operand, methodcaller):  # dask's M.name
        return methodcaller, operand.method
    if isinstance(operand, functools.partial):
        return (functools.partial, _operand_kind(operand.func), _operand_kind(operand.args),
                _operand_kind(operand.keywords))
    if _frame_like(operand) and len(operand) == 0:  # a meta given as an operand (a shuffle's)
        return "empty", meta_kind(operand)
    raise TypeError(f"no kind for an operand of type {type(operand).__name__}")


def meta_kind(meta) -> tuple:
    """What an operation's meta takes from an input's meta: its type, its columns and dtypes or its name and
    dtype, and its index. TypeError for a scalar or an array."""
    form = _form(meta)
    if form == "frame":
        return _Kind(signature(meta))
    if form == "series":
        return _Kind((type(meta), (type(meta.name), meta.name), meta.dtype, index_kind(meta.index)))
    if form == "index":
        return _Kind(index_kind(meta))
    raise TypeError(f"no kind for a meta of type {type(meta).__name__}")


class _Kind(tuple):
    """A meta's kind, hashed once: kinds hold pandas' string dtypes, whose hash is Python, and the optimizer looks up
    the kind of one meta object many times."""

    def __hash__(self):
        found = self.__dict__.get("hash")
        if found is None:
            found = self.__dict__["hash"] = tuple.__hash__(self)
        return found


def index_kind(index) -> tuple:
    """An index's type, level names and dtypes."""
    dtypes = tuple(index.dtypes) if index.nlevels > 1 else index.dtype
    return type(index), tuple((type(name), name) for name in index.names), dtypes


def _labels_kind(attribute: str, frame) -> tuple:
    return attribute, *_cudf_columns_kind(frame)


def _cudf_columns_kind(frame) -> tuple:
    """A cuDF frame's type, column names, dtypes and what shapes its labels, read from its columns without the
    pandas objects that ``dtypes`` and ``columns`` make."""
    return (type(frame), tuple(internals.cudf_column_names(frame)), internals.cudf_dtypes(frame),
            internals.cudf_column_labels(frame))


def signature(frame) -> tuple:
    """What a merge's result takes from ``frame``: its type, columns (their labels, and what shapes them) and
    dtypes, and its index."""
    if _of_cudf(frame):
        columns_kind = _cudf_columns_kind(frame)
    else:
        columns = frame.columns
        labels = type(columns), tuple(columns.names), columns.dtype
        columns_kind = type(frame), tuple(columns), tuple(frame.dtypes), labels
    return *columns_kind, index_kind(frame.index)
