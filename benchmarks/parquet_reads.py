"""How fast one GPU reads each TPC-H query's parquet partitions: one after another, or several at once.

Each query is planned as the ``gpu`` backend plans it, here, without a cluster, and its reads' partitions are
read in these ways:

- ``cudf``: one after another, each in one ``cudf.read_parquet`` call, as the planned reads make them;
- ``plc``: one after another, each in one pylibcudf call;
- ``threadsK``: K at a time, each in a thread of its own on a CUDA stream of its own (pylibcudf);
- ``cudf-threadsK``: K at a time, each in a thread of its own through ``cudf.read_parquet`` (the default stream);
- ``arrow``: one after another, each decoded on the host by pyarrow's threads, then copied to the GPU;
- with ``POLARS=1`` in the environment, each read alone as cudf-polars scans it (the maximum of each column),
  with its in-memory and its streaming executor.

Each figure is the second of two runs. Run it with ``KVIKIO_NTHREADS`` set to compare kvikio's thread pools.
(One partition cut into runs of row groups read at once, 2, 4 or 8 threads on streams of their own, took 1.3, 2.0
and 3.8 times as long as one call, over the 22 queries at scale factor 10 on one H200.) Writes JSON with the
machine's description.

    python benchmarks/parquet_reads.py --data DIR --scale 10 [--queries 1,9] [--ways cudf,plc] [--out FILE]
"""

from __future__ import annotations

import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

THREADS = (2, 4)


def main(argv=None) -> dict:
    from tpch_phases import tpch_arguments

    parser = tpch_arguments(__doc__.splitlines()[0])
    parser.add_argument("--ways", help="only these ways, comma-separated (cudf,plc,...)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    only = set(args.ways.split(",")) if args.ways else None

    import dask
    import dask.dataframe as dd

    from dask_gpu.benchmarks.tpch import dask_queries, data
    from dask_gpu.report import machine_dict

    data.generate(args.data, args.scale, print, args.layout)
    tables = type("Tables", (), {"scale": args.scale,
                                 "read": lambda self, table: dd.read_parquet(data.files(args.data, table))})()
    result = {"scale": args.scale, "kvikio_nthreads": os.environ.get("KVIKIO_NTHREADS"), "machine": machine_dict(),
              "queries": {}}
    with dask.config.set({"dataframe.backend": "gpu"}):
        for n in (int(q) for q in args.queries.split(",")):
            reads = _planned_reads(dask_queries.QUERIES[n](tables))
            row = result["queries"][f"q{n}"] = {way: _second(read) for way, read in _ways(reads).items()
                                                if only is None or way in only}
            print(f"q{n}: " + " ".join(f"{way} {seconds:.3f}" for way, seconds in row.items()), flush=True)
    rows = result["queries"].values()
    ways = dict.fromkeys(way for row in rows for way in row)
    # each way's seconds over the queries it was tried on, and one cuDF call after another over the same
    result["totals"] = {way: [sum(row[way] for row in rows if way in row), sum(row["cudf"] for row in rows
                                                                              if way in row)] for way in ways}
    print("totals (each way, cudf on the same queries):",
          {way: [round(t, 3) for t in totals] for way, totals in result["totals"].items()}, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


def _planned_reads(collection) -> list:
    """(pieces, columns) of each partition of each read in ``collection``'s optimized plan."""
    from dask_gpu.dataframe.parquet import ReadParquet

    found, stack = {}, [collection.expr.optimize(fuse=False)]
    while stack:
        expr = stack.pop()
        if isinstance(expr, ReadParquet):
            found[expr._name] = expr
        stack.extend(expr.dependencies())
    return [(read._plan[i], read.operand("columns")) for read in found.values() for i in read._partitions]


def _ways(reads) -> dict:
    from dask_gpu.dataframe.parquet import read_pieces

    def each(read):
        return lambda: [read(pieces, columns) for pieces, columns in reads]

    def at_once(read, k):
        def run():
            with ThreadPoolExecutor(k) as pool:
                return list(pool.map(lambda job: read(*job), reads))
        return run

    ways = {"cudf": each(lambda pieces, columns: read_pieces(pieces, columns, "cudf")), "plc": each(_plc_on_stream),
            "arrow": each(_arrow)}
    for k in THREADS:
        if len(reads) >= k:
            ways[f"threads{k}"] = at_once(_plc_on_stream, k)
            ways[f"cudf-threads{k}"] = at_once(lambda pieces, columns: read_pieces(pieces, columns, "cudf"), k)
    if os.environ.get("POLARS"):
        ways.update({f"polars-{e}": each(lambda pieces, columns, e=e: _polars(pieces, columns, e))
                     for e in ("in-memory", "streaming")})
    return ways


def _second(read) -> float:
    import cupy

    for _ in range(2):
        start = time.perf_counter()
        read()
        cupy.cuda.runtime.deviceSynchronize()
        seconds = time.perf_counter() - start
    return seconds


def _plc(pieces, columns, stream=None):
    import cudf
    import pylibcudf as plc

    options = plc.io.parquet.ParquetReaderOptions.builder(
        plc.io.SourceInfo([path for path, _ in pieces])).use_pandas_metadata(False).build()
    if columns is not None:
        options.set_column_names(columns)
    options.set_row_groups([list(indices) for _, indices in pieces])
    table = plc.io.parquet.read_parquet(options, stream=stream)
    return cudf.DataFrame.from_pylibcudf(table)


def _arrow(pieces, columns):
    """A read decoded on the host by pyarrow (a thread a column chunk), then copied to the GPU."""
    import cudf
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.ParquetFile(path).read_row_groups(list(indices), columns=columns, use_threads=True,
                                                  use_pandas_metadata=False) for path, indices in pieces]
    return cudf.DataFrame.from_arrow(pa.concat_tables(tables))


def _polars(pieces, columns, executor):
    import polars as pl

    frame = pl.scan_parquet([path for path, _ in pieces])
    frame = frame.select(columns) if columns else frame
    return frame.select(pl.all().max()).collect(engine=pl.GPUEngine(executor=executor, raise_on_fail=True))


def _plc_on_stream(pieces, columns):
    """A read with pylibcudf on a CUDA stream of its own, waited for."""
    from rmm.pylibrmm.stream import Stream

    stream = Stream()
    frame = _plc(pieces, columns, stream)
    stream.synchronize()
    return frame


if __name__ == "__main__":
    main()
