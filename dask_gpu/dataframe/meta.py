"""The client's share of a query: each kind of merge's meta computed once.

dask's optimizer asks every merge expression for the empty frame it makes (its meta), and finds it by
merging non-empty stand-ins of its inputs. An optimization makes several merges of each join as it moves
filters and columns: the 22 TPC-H queries ask for 314 merge metas of 87 kinds. With cuDF partitions each
one is a cuDF merge on the client, some milliseconds of Python. A merge's meta depends only on its inputs'
columns, dtypes and index, and on its keywords, so it is kept by those and computed once per kind.
"""

from __future__ import annotations

import functools

from dask_gpu import internals

LIMIT = 4096  # kinds kept; past it, the cache starts again
_merged: dict = {}  # kind -> meta


def install() -> None:
    """Merge metas by kind from now on (idempotent). Imports dask's dataframe expressions."""
    from dask_gpu.internals import Merge

    current = Merge.__dict__["_meta"]
    if getattr(current.func, "by_kind", False):
        return

    def _meta(self, compute=current.func):
        try:
            key = (signature(self.left._meta), signature(self.right._meta),
                   tuple((name, repr(value)) for name, value in sorted(self.kwargs.items())))
            hash(key)
        except (AttributeError, TypeError):  # a meta without columns, or a dtype that cannot be a key
            return compute(self)
        meta = _merged.get(key)
        if meta is None:
            if len(_merged) >= LIMIT:
                _merged.clear()
            meta = _merged[key] = compute(self)
        return meta.copy(deep=False)  # a frame of its own: callers may rename or add to it

    _meta.by_kind = True
    replacement = functools.cached_property(_meta)
    replacement.__set_name__(Merge, "_meta")
    Merge._meta = replacement


def signature(frame) -> tuple:
    """What a merge's result takes from ``frame``: its type, columns, dtypes and index. A cuDF frame's
    ``dtypes`` is a pandas Series made anew, a millisecond each: its columns' dtypes are read instead."""
    index = frame.index
    if type(frame).__module__.split(".")[0] == "cudf":
        names, dtypes = tuple(internals.cudf_column_names(frame)), internals.cudf_dtypes(frame)
    else:
        names, dtypes = tuple(frame.columns), tuple(frame.dtypes)
    return (type(frame), names, dtypes, type(index), index.name, index.dtype)
