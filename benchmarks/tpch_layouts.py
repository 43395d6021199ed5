"""The TPC-H suite's data written again in another layout: the same rows, in the same order, in about ``--files``
files a table (whole row groups of DuckDB's size, 122,880 rows, a file) or in one file a table (``--files 1``).
The manifest comes along, so that ``dask gpu bench --suite tpch --data OUT`` takes the files as they are.

    python benchmarks/tpch_layouts.py --data /tmp/tpch10 --files 64 --out /tmp/tpch10-64
"""

from __future__ import annotations

import argparse
import glob
import math
import os
import shutil
import time


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="the suite's data")
    parser.add_argument("--files", type=int, required=True, help="files a table (at most: whole row groups a file)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)

    import pyarrow.parquet as pq

    from dask_gpu.benchmarks.tpch import data

    con = data.connect()
    for table in data.TABLES:
        start = time.perf_counter()
        source = data.files(args.data, table)
        folder = os.path.join(args.out, table)
        shutil.rmtree(folder, ignore_errors=True)
        os.makedirs(folder)
        groups = sum(pq.ParquetFile(f).metadata.num_row_groups for f in glob.glob(source))
        per_file = max(1, math.ceil(groups / args.files))
        options = "FORMAT parquet" + (f", ROW_GROUPS_PER_FILE {per_file}" if args.files > 1 else "")
        target = folder if args.files > 1 else os.path.join(folder, "0.parquet")
        con.execute(f"COPY (SELECT * FROM read_parquet('{source}')) TO '{target}' ({options})")
        print(f"{table}: {len(os.listdir(folder))} files in {time.perf_counter() - start:.1f} s", flush=True)
    shutil.copy(os.path.join(args.data, "manifest.json"), os.path.join(args.out, "manifest.json"))


if __name__ == "__main__":
    main()
