"""The client's share of a query: what dask's optimizer asks of cuDF metas, each kind computed once.

dask's optimizer works on each expression's meta, an empty frame of its partitions' type, and with cuDF
partitions each question to a meta is some cuDF Python. Two questions are asked so often that they are kept
by the kind of their inputs, not computed anew:

- A merge's meta. dask finds it by merging non-empty stand-ins of its inputs, and an optimization makes
  several merges of each join as it moves filters and columns: the 22 TPC-H queries ask for 314 merge metas
  of 87 kinds. It depends only on its inputs' columns, dtypes and index, and on its keywords.
- A cuDF frame's ``dtypes`` and ``columns``. Each is a pandas object made anew at each call (a Series, about
  a millisecond; an Index, half that), and dask asks for them at every column selection it plans
  (``is_dataframe_like`` looks for ``dtypes``): 2,300 and 1,500 calls over the 22 queries, a tenth of the
  client's time. They depend only on the columns' labels and dtypes.
"""

from __future__ import annotations

import functools

from dask_gpu import internals

LIMIT = 4096  # kinds kept in each cache; past it, the cache starts again
_merged: dict = {}  # kind -> meta
_labels: dict = {}  # (attribute, kind) -> a cuDF frame's dtypes Series or columns Index


def install() -> None:
    """Merge metas, and cuDF frames' dtypes and columns, by kind from now on (idempotent). Imports dask's
    dataframe expressions, and cuDF where it is installed."""
    from dask_gpu.internals import Merge

    current = Merge.__dict__["_meta"]
    if not getattr(current.func, "by_kind", False):
        replacement = functools.cached_property(by_kind(current.func, _merge_kind, _merged))
        replacement.__set_name__(Merge, "_meta")
        Merge._meta = replacement
    try:
        import cudf
    except ImportError:
        return
    keep_labels(cudf.DataFrame)


def keep_labels(cls) -> None:
    """``cls.dtypes`` and ``cls.columns`` kept by the frame's column labels and dtypes (idempotent); setting
    ``columns`` works as before."""
    for attribute in ("dtypes", "columns"):
        current = getattr(cls, attribute, None)
        if isinstance(current, property) and not getattr(current.fget, "by_kind", False):
            kind = functools.partial(_labels_kind, attribute)
            setattr(cls, attribute, property(by_kind(current.fget, kind, _labels), current.fset, current.fdel,
                                             current.__doc__))


def by_kind(compute, kind, cache: dict):
    """``compute(self)``, kept in ``cache`` by ``kind(self)``; a result of its own at each call (a shallow
    copy), since callers may rename or add to it."""

    @functools.wraps(compute)
    def kept(self):
        try:
            key = kind(self)
            value = cache.get(key)
        except (AttributeError, TypeError):  # no kind to be had, or one that cannot be a key
            return compute(self)
        if value is None:
            if len(cache) >= LIMIT:
                cache.clear()
            value = cache[key] = compute(self)
        return value.copy(deep=False)

    kept.by_kind = True
    return kept


def _merge_kind(merge) -> tuple:
    return (signature(merge.left._meta), signature(merge.right._meta),
            tuple((name, repr(value)) for name, value in sorted(merge.kwargs.items())))


def _labels_kind(attribute: str, frame) -> tuple:
    return (attribute, type(frame), tuple(internals.cudf_column_names(frame)), internals.cudf_dtypes(frame),
            internals.cudf_column_labels(frame))


def signature(frame) -> tuple:
    """What a merge's result takes from ``frame``: its type, columns, dtypes and index. A cuDF frame's
    ``dtypes`` is read from its columns, without the Series."""
    index = frame.index
    if type(frame).__module__.split(".")[0] == "cudf":
        names, dtypes = tuple(internals.cudf_column_names(frame)), internals.cudf_dtypes(frame)
    else:
        names, dtypes = tuple(frame.columns), tuple(frame.dtypes)
    return (type(frame), names, dtypes, type(index), index.name, index.dtype)
