"""The planner's rules that act where dask lowers a join or a sort, as subclasses of its expressions.

dask decides how to join and sort from partition counts, which the planned reads (:mod:`.parquet`) make
measures of size: a partition holds about ``gpu.partition-size`` of what the query keeps.

- **Broadcast joins.** Where dask would broadcast a side of several partitions (its ``BroadcastJoin``), that side
  becomes one partition first, which dask then joins with each partition of the other side. dask (2026.8) takes
  the output of its own broadcast join as partitioned by the join key, which it is not: a group-by or a join on
  that key afterwards skips its shuffle and answers wrong. A side of one partition keeps what each side had.
- **Small sorts.** A sort of at most :data:`SORT_PARTITIONS` partitions is made in one partition: no pass over
  the input to find where to split it, which dask computes while the graph is built.

:func:`planned` gives an expression these rules where it is a join or a sort.
"""

from __future__ import annotations

import functools

from dask_gpu import internals

SORT_PARTITIONS = 4  # the most partitions sorted in one: a few partitions of about the target size


def planned(expr):
    """``expr`` with the planner's rules where it is a join or a sort of dask's, as it is otherwise."""
    kind = _PLANNED.get(type(expr))  # dask's own classes, not subclasses of them with rules of their own
    return kind(*expr.operands) if kind is not None else expr


class PlannedMerge(internals.Merge):
    """A join whose broadcast side is one partition."""

    @functools.cached_property
    def _concatenated(self) -> str | None:
        """The side made one partition to be broadcast ("left" or "right"), where dask would broadcast one of
        several partitions."""
        if self._is_single_partition_broadcast or not super().is_broadcast_join:
            return None
        return self.broadcast_side

    @property
    def is_broadcast_join(self) -> bool:
        return False if self._concatenated else super().is_broadcast_join

    @functools.cached_property
    def unique_partition_mapping_columns_from_shuffle(self) -> set:
        if self._concatenated:  # each partition of the other side, joined with the whole of this one
            return {*self.left.unique_partition_mapping_columns_from_shuffle,
                    *self.right.unique_partition_mapping_columns_from_shuffle}
        return super().unique_partition_mapping_columns_from_shuffle

    def _lower(self):
        side = self._concatenated
        if side is None:
            return super()._lower()
        left, right = self.left, self.right
        if side == "left":
            left = internals.Repartition(left, new_partitions=1)
        else:
            right = internals.Repartition(right, new_partitions=1)
        return internals.Merge(left, right, *self.operands[2:])


class PlannedSort(internals.SortValues):
    """A sort that a few partitions make in one."""

    @functools.cached_property
    def _in_one(self) -> bool:
        return 1 < self.frame.npartitions <= SORT_PARTITIONS

    def _divisions(self):
        return (None, None) if self._in_one else super()._divisions()

    def _lower(self):
        if self._in_one:
            return type(self)(internals.Repartition(self.frame, new_partitions=1), *self.operands[1:])
        return super()._lower()


_PLANNED = {internals.Merge: PlannedMerge, internals.SortValues: PlannedSort}  # dask's class -> the planner's
