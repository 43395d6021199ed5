"""The client's planning of the 22 TPC-H queries: building each collection and dask's optimization, with the metas
that :mod:`dask_gpu.dataframe.meta` keeps by kind and without, side by side in one process.

Rounds alternate: dask's own metas; the metas of merges, reductions and group-bys kept; those of blockwise
expressions too (both from empty caches: what a first round pays); and all of them from the caches the rounds before
left (what a later round pays). Nothing is computed. ``--backend pandas`` plans with pandas metas, anywhere;
``--backend gpu`` with cuDF's. Writes JSON with the machine's description.

    python benchmarks/tpch_plans.py --data DIR --scale 1 [--backend pandas] [--rounds 4] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--scale", type=float, default=1)
    parser.add_argument("--backend", choices=["pandas", "gpu"], default="pandas")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    import dask
    import dask.dataframe as dd

    from dask_gpu.benchmarks.tpch import dask_queries, data
    from dask_gpu.dataframe import meta
    from dask_gpu.report import machine_dict

    data.generate(args.data, args.scale, print)
    tables = type("Tables", (), {"scale": args.scale,
                                 "read": lambda self, table: dd.read_parquet(data.files(args.data, table))})()

    def kept(blockwise: bool):
        """The metas :mod:`dask_gpu.dataframe.meta` keeps (blockwise ones too with ``blockwise``), from empty
        caches."""
        def prepare():
            meta.uninstall()
            meta.install(blockwise)
        return prepare

    def plan_round() -> float:
        start = time.perf_counter()
        for query in dask_queries.QUERIES.values():
            query(tables).optimize()
        return time.perf_counter() - start

    variants = {
        "dask's metas": meta.uninstall,
        "merges, reductions and group-bys kept, from empty caches": kept(False),
        "blockwise kept too, from empty caches": kept(True),
        "blockwise kept too, caches of the rounds before": lambda: meta.install(True),
    }
    rounds: dict = {name: [] for name in variants}
    with dask.config.set({"dataframe.backend": args.backend}):
        plan_round()  # imports, and the reads' footers, which later rounds take again
        for _ in range(args.rounds):
            for name, prepare in variants.items():
                prepare()
                rounds[name].append(plan_round())
    result = {
        "what": "Building and optimizing the 22 TPC-H queries on the client (seconds a round), nothing computed, "
                "rounds alternating",
        "backend": args.backend, "scale": args.scale, "machine": machine_dict(), "rounds": rounds,
        "median": {name: statistics.median(times) for name, times in rounds.items()},
        "kinds kept": {"merges": len(meta._merged), "other expressions": len(meta._computed)},
    }
    meta.uninstall()
    print(json.dumps({k: result[k] for k in ("median", "kinds kept")}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
