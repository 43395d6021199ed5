"""How many groups a group-by makes, told from a sample of its keys where each is a column of a parquet read.

dask chooses a group-by's output partitions (``split_out``) from its input's partition count alone: past 15
partitions of one key, or 10 of two, it shuffles the chunks' results into several. A GPU's partitions are
gigabytes, as many as a multiple of the GPU workers, and TPC-H's query 1 (four groups) would be shuffled between
four GPUs. Where the keys' sample says the groups are few (:data:`FEW`), the planner reduces them in dask's tree
into one partition instead (:func:`in_one`); where it cannot tell, dask chooses.
"""

from __future__ import annotations

from dask_gpu import internals
from dask_gpu.dataframe import footers, parquet, partitioning

FEW = 1_000_000  # groups that one partition holds: a combine of a tree's chunks' results is a few times that


def in_one(expr):
    """``expr`` with each group-by whose output partitions dask would choose, and make several of, made into one
    partition where its groups are few; simplified first where it has such a group-by (one partition given before
    dask simplifies TPC-H's query 15 makes it filter the sums by a predicate on another index)."""
    if not any(_several(node) for node in expr.walk()):
        return expr
    expr = expr.simplify()
    for node in list(expr.walk()):
        if _several(node) and (found := estimate(node)) is not None and found <= FEW:
            expr = expr.substitute(node, node.substitute_parameters({"split_out": 1}))
    return expr


def _several(node) -> bool:
    """Whether ``node`` is a group-by whose output partitions dask would choose, and make more than one."""
    if not isinstance(node, internals.GroupByBase) or "split_out" not in node._parameters:
        return False
    if node.operand("split_out") is not None or not all(isinstance(b, str) for b in node.by):
        return False
    return internals.adjust_split_out_for_group_keys(node.frame.npartitions, node.by) > 1


def estimate(groupby) -> float | None:
    """About how many groups ``groupby`` makes, at most, where each of its keys is a column of a parquet read
    under it (the product of each read's distinct keys); None otherwise."""
    keys: dict = {}
    for name in groupby.by:
        read = origin(groupby.frame, name)
        if read is None:
            return None
        keys.setdefault(read._name, (read, []))[1].append(name)
    found = 1.0
    for read, names in keys.values():
        found *= footers.distinct(read._fs, read._kept_rows[0], names)
    return found


def origin(expr, name):
    """The parquet read whose column ``name`` of ``expr`` is, through what keeps a column's values under its name:
    selections, filters, assignments of other columns, ``to_frame``, ``reset_index``, and joins where one side has
    it or both join on it (the side whose rows the join keeps); None where it is made or renamed."""
    if isinstance(expr, parquet.ReadParquet):
        return expr if name in expr.columns else None
    if isinstance(expr, internals.Merge):
        sides = [side for side in (expr.left, expr.right) if name in partitioning.names(side)]
        if len(sides) == 2 and name in _keys(expr.left_on) and _keys(expr.left_on) == _keys(expr.right_on):
            sides = [expr.right] if expr.how == "right" else [expr.left] if expr.how != "outer" else []
        return origin(sides[0], name) if len(sides) == 1 else None
    below = partitioning.kept_below(expr, name)
    return origin(below, name) if below is not None else None


def _keys(on) -> list:
    return [on] if isinstance(on, str) else list(on or ())
