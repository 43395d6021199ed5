"""The TPC-H suite's data written again in another layout (``dask_gpu.benchmarks.tpch.data.LAYOUTS``): the same
rows, read in the files' order, with the manifest, so that ``dask gpu bench --suite tpch --data OUT --layout L``
takes the files as they are. Faster than making the data again with dbgen in that layout (``--layout`` of the
suite itself); each layout's files are described as they are written.

    python benchmarks/tpch_layouts.py --data /tmp/tpch10 --layout duckdb-threads --out /tmp/tpch10-duckdb-threads
"""

from __future__ import annotations

import argparse
import glob
import time


def main(argv=None) -> None:
    from dask_gpu.benchmarks.tpch import data

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the suite's data")
    parser.add_argument("--layout", required=True, choices=list(data.LAYOUTS))
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    start = time.perf_counter()
    data.relayout(args.data, args.out, args.layout)
    print(f"{args.layout} ({data.LAYOUTS[args.layout]}) in {time.perf_counter() - start:.1f} s", flush=True)
    for table in data.TABLES:
        found = sorted(glob.glob(data.files(args.out, table)))
        groups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in found)
        print(f"  {table}: {len(found)} files, {groups} row groups", flush=True)


if __name__ == "__main__":
    main()
