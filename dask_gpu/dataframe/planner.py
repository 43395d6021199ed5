"""The planner's rules that act where dask lowers a join or a sort, as subclasses of its expressions.

dask decides how to join and sort from partition counts, which the planned reads (:mod:`.parquet`) make
measures of size: a partition holds about ``gpu.partition-size`` of what the query keeps.

- **Joins of sorted reads** (:mod:`.partitioning`). Sides that hold the same ranges of their keys are joined
  partition by partition; a side that claims its key's partitioning from a sorted read's ranges is shuffled
  where dask would take it for hashed.
- **Broadcast joins.** Where dask would broadcast a side of several partitions (its ``BroadcastJoin``), that side
  becomes one partition first, which dask then joins with each partition of the other side. dask (2026.8) takes
  the output of its own broadcast join as partitioned by the join key, which it is not: a group-by or a join on
  that key afterwards skips its shuffle and answers wrong. The output claims the other side's partitioning only.
  A small side made of reads is read whole in each task of the other side instead, with no shuffle of either.
- **Small sorts.** A sort of at most :data:`SORT_PARTITIONS` partitions is made in one partition: no pass over
  the input to find where to split it, which dask computes while the graph is built.
- **No shuffle of one partition into one.** dask shuffles the chunks of a group-by whose ``split_out`` is its
  input's partition count (``nunique``'s default) whatever that count is, and a shuffle is a stage of tasks of its
  own (transfers and a barrier, on the GPU through the device shuffle). From one partition into one, the rows are
  where the shuffle would put them: the shuffle's input, less its partitioning column, is its output.
- **A small side read once on each GPU.** dask fuses a side of one partition into each task of the other side of
  a join, which then reads it again and again on the same GPU. A side made of reads that reads enough to matter
  (:func:`.parquet.copies`) is read in one task for each GPU worker instead, and each task of the other side
  takes its copy (:class:`Copies`): the tasks of a copy run where it is.
- **One partition for few groups.** dask shuffles a group-by's chunks into several partitions where its input has
  more than a few partitions; where a sample of its keys says its groups are few (:mod:`.groups`), they are
  reduced in dask's tree into one.
- **No tree of one partition.** dask reduces the chunks of a reduction or a group-by in a tree of tasks of its own,
  whatever their count. Of one chunk, the tree is one task applying the reduction's aggregate to it: a stage of
  its own, with a round trip through the scheduler before it and before each task after it. Applied where the
  chunk is, as a blockwise expression, it fuses with the chunk's task and with what follows it: a filtered sum of
  one partition is one task, not two.

:func:`planned` gives an expression the first three rules where it is a join or a sort; :func:`optimize`, which
optimizes the collections' expressions, gives its group-bys one partition for few groups before it is lowered and
applies the others to the lowered expression before its tasks are fused,
and keeps what it made for a query of files, which a query run again takes as it is.
"""

from __future__ import annotations

import collections
import functools
import json
import threading

import dask

from dask_gpu import internals
from dask_gpu.dataframe import groups, parquet, partitioning

SORT_PARTITIONS = 4  # the most partitions sorted in one: a few partitions of about the target size


def planned(expr):
    """``expr`` with the planner's rules where it is a join or a sort of dask's, as it is otherwise."""
    kind = _PLANNED.get(type(expr))  # dask's own classes, not subclasses of them with rules of their own
    return kind(*expr.operands) if kind is not None else expr


def optimize(expr, fuse: bool = True):
    """dask's optimization of ``expr``, with no stage of one partition into one, fused with ``fuse``; kept for a
    query of files (:func:`plan_key`)."""
    key = plan_key(expr, fuse)
    with _plans_lock:  # threads of one client may compute at once
        found = _plans.get(key) if key is not None else None
        if found is not None:
            _plans.move_to_end(key)
            return found
    lowered = without_needless_stages(groups.in_one(expr).optimize(fuse=False))
    optimized = lowered.fuse() if fuse else lowered
    if key is not None:
        with _plans_lock:
            _plans[key] = optimized
            if len(_plans) > PLANS:
                _plans.popitem(last=False)
    return optimized


PLANS = 64  # the optimized queries kept, the least recently used dropped first
_plans: collections.OrderedDict = collections.OrderedDict()  # plan_key -> an optimized expression
_plans_lock = threading.Lock()


def plan_key(expr, fuse: bool) -> tuple | None:
    """What an optimized query depends on, where it reads only parquet files: its name (which names each file with
    its size and time), the settings, and the shuffle dask picks (its default depends on whether there is a
    client). A query run again (a notebook's cell, a dashboard's refresh) is then optimized once: dask's optimizer
    takes 10 to 50 ms a TPC-H query, warm, and each new kind of operation asks cuDF for its meta. A query of data
    in memory is not kept, so that this never holds its data. None where the query is not kept."""
    nodes = list(expr.walk())
    values = {node.operand("values")._name for node in nodes
              if isinstance(node, internals.Isin) and internals.isin_given_values(node)}
    if not all(node.dependencies() or isinstance(node, parquet.ReadParquet) or node._name in values for node in nodes):
        return None
    try:
        settings = json.dumps(dask.config.config, sort_keys=True, default=repr)
    except TypeError:  # labels that do not sort
        return None
    return expr._name, fuse, settings, internals.get_default_shuffle_method()


def without_needless_stages(expr):
    """``expr``, lowered, with each shuffle of one partition into one replaced by its input, and each tree
    reduction of one partition by its aggregate where the partition is."""
    replaced, stack, seen = {}, [expr], set()
    while stack:
        node = stack.pop()
        if node._name in seen:
            continue
        seen.add(node._name)
        replacement = _unshuffled(node)
        if replacement is None:
            replacement = _aggregated_in_place(node)
        if replacement is None:
            replacement = _side_read_once(node)
        if replacement is not None:
            replaced[node._name] = node, replacement
        stack.extend((replacement if replacement is not None else node).dependencies())
    for node, replacement in replaced.values():
        expr = expr.substitute(node, replacement)
    return expr


def _unshuffled(node):
    """What ``node`` is without a shuffle of one partition into one: the shuffle's input (a selection of columns
    dropping the partitioning column selects them from the input the column was added to); None where there is
    no such shuffle."""
    shuffle = node.frame if isinstance(node, internals.Projection) else node
    if not (isinstance(shuffle, internals.SimpleShuffle) and shuffle.npartitions_out == 1
            and shuffle.frame.npartitions == 1):
        return None
    if shuffle is node:
        return shuffle.frame
    indexed = shuffle.frame
    if isinstance(indexed, internals.AssignPartitioningIndex):
        columns = node.operand("columns")
        kept = [columns] if not isinstance(columns, list) else columns
        if indexed.operand("index_name") not in kept:
            return internals.Projection(indexed.frame, columns)
    return internals.Projection(indexed, node.operand("columns"))


def _aggregated_in_place(node):
    """What ``node`` is without a tree reduction of one partition: its aggregate, applied to the partition where it
    is; None where there is no such tree."""
    if not (isinstance(node, internals.TreeReduce) and node.frame.npartitions == 1):
        return None
    return AggregatedPartition(node.frame, node.aggregate, node.aggregate_kwargs, node._meta)


def _side_read_once(node):
    """What ``node`` is with its side of one partition read once on each GPU worker (:func:`.parquet.copies`),
    where it is a join of several partitions with such a side; None where it is not."""
    if not isinstance(node, internals.BlockwiseMerge):
        return None
    for name, side, other in (("right", node.right, node.left), ("left", node.left, node.right)):
        if side.npartitions == 1 and other.npartitions > 1:
            count = parquet.copies(side, other.npartitions)
            if count:
                copies = Stage(Held(parquet.whole(side, count)))
                return node.substitute_parameters({name: Copies(copies, other.npartitions)})
    return None


def aggregate_one(partition, aggregate, kwargs):
    """A tree reduction's last task, of one chunk."""
    return aggregate([partition], **(kwargs or {}))


class AggregatedPartition(internals.Blockwise):
    """The aggregate of a tree reduction of one partition, applied where the partition is: a blockwise expression,
    which fuses with the tasks before and after it."""

    _parameters = ["frame", "aggregate", "aggregate_kwargs", "meta"]
    operation = staticmethod(aggregate_one)

    @functools.cached_property
    def _meta(self):
        return self.operand("meta")

    @property
    def _args(self) -> list:
        return [self.frame, self.aggregate, self.aggregate_kwargs]  # the meta is the plan's, not the task's

    def _divisions(self):
        return (None, None)  # an aggregate's index is not its input's


class Copies(internals.Blockwise):
    """``count`` partitions of the copies of a side (``frame``, a partition for each copy): partition ``i`` is copy
    ``i * copies // count``, so that each copy serves a contiguous run of the other side's partitions. Fused into
    the tasks of the join, it is a reference to the copy, which they then depend on."""

    _parameters = ["frame", "count"]

    @functools.cached_property
    def _meta(self):
        return self.frame._meta

    def _divisions(self):
        return (None,) * (self.operand("count") + 1)

    def _task(self, name, index: int):
        from dask.task_spec import Alias

        return Alias(name, (self.frame._name, index * self.frame.npartitions // self.operand("count")))


class Stage(internals.FrameExpr):
    """The partitions of an expression (held out of the optimizer's and the fuser's reach), each one task, fused:
    dask fuses a one-partition expression into each task that uses it, and its tasks would compute it again."""

    _parameters = ["held"]

    @functools.cached_property
    def _meta(self):
        return self.operand("held").inner._meta

    def _divisions(self):
        return (None,) * (self.operand("held").inner.npartitions + 1)

    def _layer(self) -> dict:
        fused = self.operand("held").inner.fuse()
        return {(self._name, i): fused._task((self._name, i), i) for i in range(fused.npartitions)}


class Held:
    """An expression as an operand that is not one, tokenized by its name: dask walks, optimizes and fuses the
    operands that are expressions."""

    __slots__ = ("inner",)  # not "expr", which dask would take for the operand

    def __init__(self, inner):
        self.inner = inner

    def __dask_tokenize__(self):
        return self.inner._name

    def __reduce__(self):
        return Held, (self.inner,)


class PlannedMerge(internals.Merge):
    """A join whose broadcast side is one partition: read whole where each partition of the other side is, where
    it is small and made of reads; else gathered into one. Of sides that hold the same ranges of their keys
    (:mod:`.partitioning`), partition by partition; of a side whose claim to be partitioned on its key is a range
    of a sorted read, dask's hash join of it."""

    @functools.cached_property
    def _read_whole(self) -> str | None:
        """The side ("left" or "right") read whole in each task of the other, where both have several partitions
        and it keeps at most a partition's target of its reads: no shuffle of either side, and no transfer."""
        if internals.is_single_partition_broadcast(self) or self.broadcast is False:
            return None
        small = [side for side in ("right", "left") if self.how in partitioning.BROADCAST_HOWS[side]
                 and parquet.kept_whole(getattr(self, side))]
        return min(small, key=lambda side: parquet.kept_bytes(getattr(self, side)), default=None)

    @functools.cached_property
    def _concatenated(self) -> str | None:
        """The side made one partition to be broadcast ("left" or "right"), where dask would broadcast one of
        several partitions."""
        if self._read_whole or internals.is_single_partition_broadcast(self) or not super().is_broadcast_join:
            return None
        return self.broadcast_side

    @property
    def is_broadcast_join(self) -> bool:
        return False if self._concatenated or self._read_whole else super().is_broadcast_join

    @functools.cached_property
    def unique_partition_mapping_columns_from_shuffle(self) -> set:
        """Where one side is made one partition, the other side's: each of its partitions is joined with all of
        the one, whose rows are then in every partition."""
        one = self._read_whole or self._concatenated
        if one:
            kept = self.right if one == "left" else self.left
            return set(kept.unique_partition_mapping_columns_from_shuffle)
        return super().unique_partition_mapping_columns_from_shuffle

    def _lower(self):
        if self._read_whole:
            return self._joined([self._read_whole], parquet.whole)
        if self._concatenated:
            return self._joined([self._concatenated], lambda side: internals.Repartition(side, new_partitions=1))
        if partitioning.co_partitioned(self):
            return internals.BlockwiseMerge(self.left, self.right, *self.operands[2:])
        misread = partitioning.misread(self)
        return self._joined(misread, partitioning.Unclaimed) if misread else super()._lower()

    def _joined(self, names, change):
        """dask's join of the two sides, with those of ``names`` ("left", "right") changed by ``change``."""
        sides = {"left": self.left, "right": self.right}
        for name in names:
            sides[name] = change(sides[name])
        return internals.Merge(sides["left"], sides["right"], *self.operands[2:])


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
