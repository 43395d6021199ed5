"""Which keys each partition holds, where a read of sorted files says so, and the joins that must not trust it.

A read of files in the order of a column (:attr:`.parquet.ReadParquet.key_ranges`) holds each of its values in one
partition, and says so as a shuffle on that column would (dask's ``unique_partition_mapping_columns_from_shuffle``):
a group-by or a ``drop_duplicates`` on it then aggregates each partition where it is, with no shuffle. TPC-H's
query 21 shuffled all of lineitem twice for its ``nunique`` by order, and three frames more to join them.

A join of two sides that hold the same ranges (parts of one read, as query 21's frames are) pairs partition ``i``
of one with partition ``i`` of the other (:func:`co_partitioned`). Otherwise a join trusts that claim further than
it holds: dask pairs partitions where both sides claim the join key, and hashes only a side that does not; a range
is not a hash. :func:`misread` names the sides whose claim comes from such a read, and the planner shuffles them
(:class:`Unclaimed`).

:func:`ranges` follows a read's ranges through what keeps each row, or each group, in its partition under the same
name: selections, filters, ``to_frame`` and ``reset_index``, an assignment of other columns, a group-by or a
``drop_duplicates`` aggregated in place, and a join whose other side is whole in each partition.
"""

from __future__ import annotations

from dask_gpu import internals
from dask_gpu.dataframe import parquet

# side -> the joins in which it may be whole in each partition of the other side, which keeps its partitions
BROADCAST_HOWS = {"left": ("inner", "right"), "right": ("inner", "left", "leftsemi")}


def ranges(expr, name) -> tuple | None:
    """The range of ``name`` (a column or the index) that each partition of ``expr`` holds, disjoint and ascending;
    None where that is not known."""
    if isinstance(expr, parquet.ReadParquet):
        found = expr.key_ranges
        return found[1] if found and found[0] == name else None
    if isinstance(expr, internals.Merge):
        return _merged(expr, name)
    if isinstance(expr, internals.ApplyConcatApply):
        return _aggregated(expr, name)
    below = kept_below(expr, name)
    return ranges(below, name) if below is not None else None


def kept_below(expr, name):
    """The frame under ``expr`` whose ``name`` (a column or the index) is ``expr``'s, each row's value unchanged:
    through selections, filters, ``to_frame``, ``reset_index`` and assignments of other columns; None otherwise."""
    passing = (internals.Projection, internals.Filter, internals.ToFrame, internals.ResetIndex, internals.Assign)
    if not isinstance(expr, passing) or name not in names(expr) or name not in names(expr.frame):
        return None
    if isinstance(expr, internals.Assign) and name in expr.keys:
        return None
    return expr.frame


def names(expr) -> set:
    """The columns of ``expr``, the name of a series, and its index's name."""
    meta = expr._meta
    names = set(meta.columns) if hasattr(meta, "columns") else {getattr(meta, "name", None)}
    return names | {meta.index.name}


def _aggregated(expr, name) -> tuple | None:
    """Of a group-by on ``name`` or a ``drop_duplicates`` kept in each partition: its input's ranges."""
    frame = expr.frame
    split = expr.split_out
    if not expr.should_shuffle or expr.need_to_shuffle or split not in (True, frame.npartitions):
        return None
    if isinstance(expr, internals.DropDuplicates):
        return ranges(frame, name) if name in names(expr) else None
    by = getattr(expr, "by", None)
    if isinstance(expr, internals.GroupByBase) and all(isinstance(b, str) for b in by) and name in by:
        return ranges(frame, name)
    return None


def _merged(expr, name) -> tuple | None:
    """Of a join: the ranges of the side it keeps in partitions, where the other is whole in each; of a join of
    sides of the same ranges, theirs."""
    left, right = expr.left, expr.right
    left_key, right_key = _single(expr.left_on), _single(expr.right_on)
    whole = getattr(expr, "_read_whole", None) or getattr(expr, "_concatenated", None)
    if whole is None and internals.is_single_partition_broadcast(expr):  # else dask hashes a side of one too
        whole = "right" if right.npartitions == 1 and expr.how in BROADCAST_HOWS["right"] else "left"
    if whole == "right":
        kept, key, other, other_key = left, left_key, right, right_key
    elif whole == "left":
        kept, key, other, other_key = right, right_key, left, left_key
    else:
        same = ranges(left, left_key) if left_key is not None else None
        if same is None or same != ranges(right, right_key):
            return None
        return same if name in (left_key, right_key) else None
    if name in names(kept) and name not in names(other):
        return ranges(kept, name)
    if key is not None and name == other_key:  # equal to the kept side's key in each row joined
        return ranges(kept, key)
    return None


def _single(on) -> str | None:
    """A join's key where it is one column."""
    if isinstance(on, str):
        return on
    return on[0] if isinstance(on, (list, tuple)) and len(on) == 1 and isinstance(on[0], str) else None


def co_partitioned(merge) -> bool:
    """Whether the two sides of ``merge`` hold the same ranges of their keys, partition by partition: each key in
    partition ``i`` of both, which a join can then pair, whatever rows it keeps."""
    left_key, right_key = _single(merge.left_on), _single(merge.right_on)
    if left_key is None or right_key is None or merge.left.npartitions != merge.right.npartitions:
        return False
    found = ranges(merge.left, left_key)
    return found is not None and found == ranges(merge.right, right_key)


def misread(merge) -> list:
    """The sides ("left", "right") of ``merge``, a join dask would make by hash of sides not :func:`co_partitioned`,
    whose claim to be partitioned on the join key comes from a sorted read's ranges (or may): dask would pair
    their partitions with another side's as if they were hashed."""
    keys = {"left": _single(merge.left_on), "right": _single(merge.right_on)}
    sides = {"left": merge.left, "right": merge.right}
    return [side for side, key in keys.items() if key is not None and _claims_ranges(sides[side], key)]


def _claims_ranges(expr, key) -> bool:
    """Whether ``expr`` claims to be partitioned on ``key`` with a sorted read among what it is made of."""
    claims = expr.unique_partition_mapping_columns_from_shuffle
    if key not in claims and (key,) not in claims:
        return False
    return any(isinstance(node, parquet.ReadParquet) and node.key_ranges for node in expr.walk())


def _same(frame):
    return frame


class Unclaimed(internals.Blockwise):
    """A frame as it is, claiming no partitioning: a join hashes it."""

    _parameters = ["frame"]
    operation = staticmethod(_same)
    _preserves_partitioning_information = False
