"""A hash join larger than the device limit: a billion rows against a hundred million, on one GPU.

The left table (``--rows``, default 1e9, keys ``k`` uniform in [0, right rows), values ``x``) and
the right one (``k`` = 0..n-1 once each, ``w = (k % 1000) / 4``) are made on the worker by cuDF,
``--partitions`` pieces each; ``left.merge(right, on="k", broadcast=False)`` shuffles both sides
through the device shuffle under ``--limit`` of device memory (default 16GB), and sums ``w`` and
``x``. Every ``w`` is a multiple of 1/4 and the sum stays under 2**53, so it is exact: it must
equal the same sum made without the join, from each left key alone. The JSON has the machine,
the time, the answer, and the worker's spill traffic.

    python benchmarks/join_1b.py [--rows 1e9] [--right-rows 1e8] [--partitions 100] [--limit 16GB] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time


def left_part(i: int, rows: int, keys: int):
    import cudf
    import cupy

    rng = cupy.random.default_rng(i)
    return cudf.DataFrame({"k": rng.integers(0, keys, rows, dtype="int64"), "x": rng.standard_normal(rows)})


def right_part(i: int, rows: int):
    import cudf
    import cupy

    k = cupy.arange(i * rows, (i + 1) * rows, dtype="int64")
    return cudf.DataFrame({"k": k, "w": (k % 1000) / 4})


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=float, default=1e9)
    parser.add_argument("--right-rows", type=float, default=1e8)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--limit", default="16GB")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    rows, right_rows, parts = int(args.rows), int(args.right_rows), args.partitions

    import dask
    import dask.dataframe as dd
    from distributed import Client

    from dask_gpu import LocalCUDACluster
    from dask_gpu.memory.stats import memory_stats
    from dask_gpu.report import machine_dict

    result = {"rows": rows, "right_rows": right_rows, "partitions": parts, "device_memory_limit": args.limit,
              "machine": machine_dict()}
    with dask.config.set({"dataframe.backend": "cudf"}), \
            LocalCUDACluster(n_workers=1, device_memory_limit=args.limit, dashboard_address=False) as cluster, \
            Client(cluster) as client:
        right_parts = max(1, parts // 10)
        left = dd.from_map(left_part, range(parts), rows=rows // parts, keys=right_rows, meta=left_part(0, 0, 1))
        right = dd.from_map(right_part, range(right_parts), rows=right_rows // right_parts, meta=right_part(0, 0))
        start = time.perf_counter()
        joined = left.merge(right, on="k", broadcast=False)
        w, x, n = dask.compute(joined.w.sum(), joined.x.sum(), joined.k.count())
        result["seconds"] = time.perf_counter() - start
        reference_w, reference_x = dask.compute(((left.k % 1000) / 4).sum(), left.x.sum())  # the join's, without it
        result.update(sum_w=float(w), sum_x=float(x), rows_joined=int(n), expected_w=float(reference_w),
                      expected_x=float(reference_x))
        result["correct"] = (float(w) == float(reference_w) and int(n) == rows // parts * parts
                             and abs(float(x) - float(reference_x)) <= 1e-6 * abs(float(reference_x)) + 1e-3)
        result["memory"] = memory_stats(client)
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=1))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
    return result


if __name__ == "__main__":
    main()
