"""What the 22 TPC-H queries' tasks read, as dask-gpu plans them for some GPUs of some memory: for each query, its
tasks, the bytes they read (decoded: the columns read of the row groups read), and the bytes read again, by tasks
that each read the same partition. Plans are made from the files' footers and computed nothing: reads are planned
with pandas partitions, and a scale factor's plan is made from smaller data with the partition size scaled down
as the data is (``--plan-scale 100`` on scale factor 10's files plans partitions of a tenth of their size, a tenth
of the row groups each, as scale factor 100 would have). Writes JSON with the machine's description.

    python benchmarks/tpch_reads.py --data DIR --scale 10 --plan-scale 100 --gpus 1 --memory 141GB [--out F]
"""

from __future__ import annotations

import argparse
import collections
import json


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--scale", type=float, required=True, help="the scale factor of the files under --data")
    parser.add_argument("--plan-scale", type=float, help="the scale factor to plan for [default: --scale]")
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--memory", default="141GB", help="each GPU's memory")
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    import dask
    import dask.dataframe as dd
    import pandas as pd
    from dask.dataframe import get_collection_type
    from dask.utils import parse_bytes

    from dask_gpu.benchmarks.tpch import dask_queries, data
    from dask_gpu.dataframe import collections as ours, parquet, planner, sizing
    from dask_gpu.report import machine_dict

    for frame, collection in ((pd.DataFrame, dd.DataFrame), (pd.Series, dd.Series), (pd.Index, dd.Index)):
        kind = ours.collection_of(collection)  # the planner's joins and sorts, as the gpu backend's collections
        get_collection_type.register(frame, lambda _, kind=kind: kind)
    shrink = (args.plan_scale or args.scale) / args.scale
    target = int(sizing.partition_bytes(parse_bytes(args.memory)) / shrink)
    tables = type("Tables", (), {"scale": args.scale, "read": lambda self, table: parquet.read_parquet(
        data.files(args.data, table), engine="pandas", partition_bytes=target, gpus=args.gpus)})()

    rows = {}
    with dask.config.set({"dataframe.shuffle.method": "tasks"}):
        for number, query in dask_queries.QUERIES.items():
            expr = query(tables).expr
            graph = dict(planner.optimize(expr).__dask_graph__())
            sizes = _partition_bytes(planner.optimize(expr, fuse=False))
            counts = collections.Counter()
            for task in graph.values():
                counts.update(set(_reads(task)))
            read = sum(sizes.get(key, 0) * count for key, count in counts.items()) * shrink
            again = sum(sizes.get(key, 0) * (count - 1) for key, count in counts.items()) * shrink
            rows[f"q{number}"] = {"tasks": len(graph), "read_bytes": read, "read_again_bytes": again}
            print(f"q{number}: {len(graph)} tasks, {read / 1e9:.1f} GB read, {again / 1e9:.1f} GB of it again")
    total = {key: sum(row[key] for row in rows.values()) for key in ("tasks", "read_bytes", "read_again_bytes")}
    print(f"all: {total['read_bytes'] / 1e9:.0f} GB read, {total['read_again_bytes'] / 1e9:.0f} GB of it again")
    result = {"what": "the bytes the 22 TPC-H queries' tasks read as dask-gpu plans them, nothing computed",
              "scale": args.scale, "plan_scale": args.plan_scale or args.scale, "gpus": args.gpus,
              "memory": args.memory, "machine": machine_dict(), "queries": rows, "total": total}
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


def _partition_bytes(expr) -> dict:
    """(read's name, partition) -> the bytes it decodes, for every read of ``expr``, those of its stages too."""
    from dask_gpu.dataframe import parquet, planner

    sizes, stack = {}, [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, parquet.ReadParquet):
            groups = {(g.path, g.index): g for footer in node._footers for g in footer.row_groups}
            columns = parquet._read_columns(node.columns, node.filters)
            for i, pieces in enumerate(node._plan):
                sizes[(node._name, i)] = sum(groups[(path, k)].nbytes(columns) for path, ks in pieces for k in ks)
        if isinstance(node, planner.Stage):
            stack.append(node.operand("held").inner)
        stack.extend(node.dependencies())
    return sizes


def _reads(task) -> list:
    """The keys of the reads a task makes, those fused into it too."""
    from dask_gpu.dataframe import parquet

    if isinstance(task, dict):
        return [key for value in task.values() for key in _reads(value)]
    found = [task.key] if getattr(task, "func", None) is parquet.read_pieces else []
    return found + [key for arg in getattr(task, "args", ()) if isinstance(arg, dict) or hasattr(arg, "func")
                    for key in _reads(arg)]


if __name__ == "__main__":
    main()
