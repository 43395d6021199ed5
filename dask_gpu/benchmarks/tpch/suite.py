"""The TPC-H suite of ``dask gpu bench``: the 22 queries on each engine, every answer checked against DuckDB's.

Columns, in one run: DuckDB and Polars on every core, pandas partitions on a ``LocalCluster`` of every core,
dask-gpu on 1..N GPUs, and, where they are installed, dask-cuda and cudf-polars on the GPU. Each query reads its
tables from the parquet files (:mod:`.data`) every time it runs; its clock runs from the call that builds it to
the answer in the column's process. Each column runs in a fresh process of its own, so that no engine's imports,
threads and caches reach another's first runs. Each query runs once on a fresh engine (``first_seconds``), then
``repeat`` times (the best is ``seconds``). dask-gpu's columns also record where a query's time goes in one more
run (``phases``): building the collection, optimizing it, the graph's tasks, and the computation on the cluster;
that run computes the collection optimized first (``optimize()``, then compute), and its answer is checked too.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import tempfile
import time
from contextlib import ExitStack, contextmanager
from importlib.util import find_spec
from typing import ClassVar

import dask

from dask_gpu.benchmarks.common import (TIMEOUT, available_gpus, check_options, compute, data_directory,
                                        default_protocol, engine_kinds, error_text, gpu_client, gpu_columns,
                                        gpu_counts, gpu_notes, run_columns, runs_table, sent, shuffle_seconds, spread,
                                        startup_lines)
from dask_gpu.benchmarks import common
from dask_gpu.benchmarks.common import plot as bar_chart
from dask_gpu.benchmarks.tpch import data
from dask_gpu.report import machine_dict

SIZES = {"small": 0.01, "full": 10.0}
MAX_SCALE = 10_000  # the largest scale factor dbgen makes
GPU_LIBRARIES = ("cupy", "cudf")
WORKLOADS = {f"q{n}": f"TPC-H query {n}" for n in data.QUERIES}
ENGINES = {"duckdb": "duckdb", "polars": "polars", "pandas": "cpu", "dask-gpu": "gpu", "dask-cuda": "dask-cuda",
           "cudf-polars": "cudf-polars"}  # name -> the kind of its columns


@dataclasses.dataclass(frozen=True)
class Plan(common.Plan):
    scale: float
    path: str
    layout: str = "suite"
    isolated: bool = True  # each column in a process of its own
    references: ClassVar[int] = 1


def plan(size="small", scale=None, path=None, workloads=None, compare=None, gpus=None, protocol=None, repeat=1,
         timeout=None, engines=None, layout="suite") -> Plan:
    """Checks every argument (a ``ValueError`` that names the bad one) and settles the columns."""
    if size not in SIZES:
        raise ValueError(f"--size {size}: the tpch suite has {' and '.join(SIZES)}")
    scale = SIZES[size] if scale is None else float(scale)
    if not 0 < scale <= MAX_SCALE:
        raise ValueError(f"--scale must be a scale factor above 0 and at most {MAX_SCALE:,} (1 is about 1 GB of data), "
                         f"not {scale:g}")
    data.check_layout(layout)
    path = path or os.path.join(tempfile.gettempdir(), f"dask-gpu-tpch-sf{scale:g}"
                                + ("" if layout == "suite" else f"-{layout}"))
    if data.stale(path, scale, layout):  # data to write: there, now
        data_directory(path)
    names, timeout = tuple(workloads or WORKLOADS), timeout or TIMEOUT
    kinds = engine_kinds(engines, ENGINES)
    if kinds and "dask-cuda" in kinds:
        compare = "dask-cuda"
    cols = columns(compare, gpus)
    protocol = protocol or default_protocol(cols)
    check_options(names, WORKLOADS, compare, protocol, repeat, timeout)
    data.connect()  # DuckDB and its TPC-H extension make the data and the answers: say now if they are missing
    cols, notes = gpu_notes(cols, compare, GPU_LIBRARIES, find_spec)
    for library, kind in (("polars", "polars"), ("cudf_polars", "cudf-polars")):
        if find_spec(library) is None and (engines is None or kind in kinds):
            notes.append(f"{library.replace('_', '-')} is not installed: no {kind} column")
    cols = [col for col in cols if kinds is None or col[1] in kinds]
    return Plan(size=size, workloads=names, columns=tuple(cols), notes=tuple(notes), protocol=protocol,
                repeat=int(repeat), timeout=timeout, scale=scale, path=path, layout=layout)


def planned(options) -> Plan:
    """The bench command's options (:class:`~dask_gpu.benchmarks.common.Options`) as this suite's plan."""
    return plan(options.size, options.scale, options.data, options.workloads, options.compare, options.gpus,
                options.protocol, options.repeat, options.timeout, options.engines, options.layout or "suite")


def data_lines(plan: Plan) -> int:
    """The lines :func:`write_data` logs, 0 where the data is there already."""
    return data.log_lines(plan.scale) if data.stale(plan.path, plan.scale, plan.layout) else 0


def write_data(plan: Plan, log=None) -> None:
    data.generate(plan.path, plan.scale, log=log, layout=plan.layout)


def columns(compare=None, gpus=None) -> list[tuple[str, str, int]]:
    """(label, kind, count): DuckDB and Polars, pandas partitions, the GPU clusters, cudf-polars; those installed."""
    cores = os.cpu_count() or 1
    counts = gpu_counts(gpus, available_gpus(GPU_LIBRARIES, find_spec))
    cols = [(f"DuckDB, {cores} cores", "duckdb", cores)]
    if find_spec("polars"):
        cols.append((f"Polars, {cores} cores", "polars", cores))
    cols += [(f"pandas, {cores} cores", "cpu", cores), *gpu_columns(counts, compare, "dask-gpu, ")]
    if counts and find_spec("cudf_polars"):
        cols.append(("cudf-polars, 1 GPU", "cudf-polars", 1))
    return cols


def references(plan: Plan) -> dict:
    """DuckDB's answer to each query (pandas frames), computed once, untimed."""
    found = data.answers(plan.path, plan.scale, [int(name[1:]) for name in plan.workloads])
    return {f"q{n}": answer for n, answer in found.items()}


def run(plan: Plan, progress=None, checkpoint=None, log=None, status=None) -> dict:
    """Every query in every column; ``progress(label)`` before the references and each query, ``status(text)``
    before each of its runs, ``checkpoint(result)`` after each column."""
    from dask_gpu.dataframe.scheduler import quiet_shuffle_logs

    quiet_shuffle_logs()
    data.generate(plan.path, plan.scale, log, plan.layout)
    if progress:
        progress("reference answers (DuckDB)")
    answers = references(plan)
    result = {"suite": "tpch", "size": plan.size, "scale": plan.scale, "data": plan.path, "layout": plan.layout,
              "protocol": plan.protocol, "repeat": plan.repeat, "timeout": plan.timeout,
              "workloads": {n: WORKLOADS[n] for n in plan.workloads},
              "machine": machine_dict(), "columns": [label for label, _, _ in plan.columns], "runs": [],
              "notes": list(plan.notes)}

    def measure(engine, name, count):
        row = engine.measure(name, status)
        for key, answer in (("correct", row.pop("answer", None)), ("optimized_correct", row.pop("optimized", None))):
            if answer is not None:
                why = data.same(answer, answers[name])
                row[key] = why is None
                if why:
                    row[key.replace("correct", "wrong")] = why
        return row

    def keep(result):
        result["totals"] = totals(result)
        if checkpoint:
            checkpoint(result)

    opened = _own_process if plan.isolated else _here
    return run_columns(result, list(plan.columns), list(plan.workloads),
                       lambda kind, count: opened(kind, count, plan), measure, progress, keep)


@contextmanager
def _here(kind, count, plan):
    """One column's engine in this process."""
    with _column(kind, count, plan) as engine:
        yield _Here(engine, plan.repeat)


@dataclasses.dataclass
class _Here:
    engine: object
    repeat: int

    @property
    def client(self):  # what run_columns asks of a column's GPU workers
        return getattr(self.engine, "client", None)

    def measure(self, name, status=None) -> dict:
        return _measure(self.engine, name, self.repeat, status)


@contextmanager
def _own_process(kind, count, plan):
    """One column's engine in a fresh process of its own (spawned, with this process's dask settings), started once
    for the 22 queries: cudf-polars does not find the cuDF that dask-gpu's client loaded, nor does dask-gpu meet
    what DuckDB and Polars left. A query that outlives its timeout, or a process that dies, ends the column in
    errors."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve, args=(theirs, kind, count, plan, dask.config.config),
                              name=f"dask-gpu-bench-{kind}")
    process.start()
    theirs.close()
    column = _There(ours, process, plan.timeout * (plan.repeat + 2) + 120)
    try:
        column.ready()
        yield column
    finally:
        column.close()


def _serve(connection, kind, count, plan, config) -> None:
    """A column's process: opens its engine, says how its workers started, then measures each query it is sent
    until it is sent None."""
    dask.config.update(dask.config.config, config, priority="new")
    try:
        began = time.perf_counter()
        with _here(kind, count, plan) as column:
            connection.send(("ready", {"seconds": time.perf_counter() - began, **common.worker_startup(column)}))
            while (name := connection.recv()) is not None:
                row = column.measure(name, lambda text: connection.send(("status", text)))
                connection.send(("row", row))
    except Exception as e:  # the parent reports it, as it reports an engine that fails in its own process
        connection.send(("error", error_text(e)))
    finally:
        connection.close()


class _There:
    """The parent's side of a column in a process of its own."""

    def __init__(self, connection, process, limit: float):
        self.connection, self.process, self.limit = connection, process, limit
        self.startup: dict = {}

    def _answer(self, status=None):
        while True:
            if not self.connection.poll(self.limit):
                raise TimeoutError(f"no answer after {self.limit:g} s")
            try:
                what, value = self.connection.recv()
            except EOFError:
                raise RuntimeError(f"the column's process ended (exit code {self.process.exitcode})") from None
            if what == "error":
                raise RuntimeError(value)
            if what != "status":
                return value
            if status:
                status(value)

    def ready(self) -> None:
        self.startup = self._answer()

    def measure(self, name, status=None) -> dict:
        try:
            self.connection.send(name)
            return self._answer(status)
        except (OSError, RuntimeError, TimeoutError) as e:
            self.process.kill()
            return {"error": error_text(e)}

    def close(self) -> None:
        try:
            if self.process.is_alive():
                self.connection.send(None)
        except OSError:
            pass
        self.process.join(60)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.connection.close()


def _measure(engine, name, repeat, status=None) -> dict:
    """A first run, then ``repeat`` timed ones (the best counts), and one that splits the time where it can."""
    number, times = int(name[1:]), []
    try:
        for i in range(1 + repeat):
            if status:
                status("first run" if i == 0 else f"run {i} of {repeat}")
            start = time.perf_counter()
            answer = engine.run(number)
            times.append(time.perf_counter() - start)
        row = {"first_seconds": times[0], "seconds": min(times[1:]), "all_seconds": times[1:], "answer": answer}
        if engine.split:
            row["phases"] = engine.phases(number)
            row["optimized"] = row["phases"].pop("answer")
        return row
    except Exception as e:  # a failing query is a result, not the end of the table
        return {"error": error_text(e)}


@contextmanager
def _column(kind, count, plan):
    """The engine of one column, started once for the 22 queries."""
    if kind == "duckdb":
        yield _DuckDB(plan)
    elif kind in ("polars", "cudf-polars"):
        yield _Polars(plan, gpu=kind == "cudf-polars")
    else:
        with ExitStack() as stack:
            from distributed import Client, LocalCluster
            from distributed.deploy.utils import nprocesses_nthreads

            backend = {"cpu": "pandas", "gpu": "gpu"}.get(kind, "cudf")  # dask-cuda with dask-cudf's backend
            stack.enter_context(dask.config.set({"dataframe.backend": backend}))
            if kind == "cpu":
                workers, threads = nprocesses_nthreads(count)
                cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, dashboard_address=":0")
                client = stack.enter_context(Client(stack.enter_context(cluster)))
            else:
                client = gpu_client(stack, kind, count, plan.protocol)
            yield Dask(plan, client, split=kind == "gpu")


class _DuckDB:
    """DuckDB's own query texts over views of the parquet files."""

    split = False

    def __init__(self, plan):
        self.con = data.connect()
        data.views(self.con, plan.path)
        self.texts = {n: data.sql(self.con, n, plan.scale) for n in data.QUERIES}

    def run(self, number):
        return self.con.execute(self.texts[number]).df()


class _Polars:
    """Our Polars queries: on every core, or on the GPU through cudf-polars (nothing falls back to the CPU)."""

    split = False

    def __init__(self, plan, gpu: bool):
        import polars as pl

        from dask_gpu.benchmarks.tpch import polars_queries

        self.path, self.scale, self.queries = plan.path, plan.scale, polars_queries.QUERIES
        self.engine = pl.GPUEngine(raise_on_fail=True) if gpu else "auto"
        if gpu:  # its start, as a GPU cluster's is: cuDF imported, the device's context and memory made
            pl.LazyFrame({"a": [1]}).select(pl.col("a").sum()).collect(engine=self.engine)

    def scan(self, table):
        import polars as pl

        return pl.scan_parquet(data.files(self.path, table))

    def run(self, number):
        return self.queries[number](self).collect(engine=self.engine).to_pandas()


class Dask:
    """Our Dask DataFrame queries on a cluster, each reading its tables with ``dd.read_parquet``."""

    def __init__(self, plan, client, split: bool):
        from dask_gpu.benchmarks.tpch import dask_queries

        self.split = split  # whether to split each query's time (phases)
        self.path, self.scale, self.client, self.timeout = plan.path, plan.scale, client, plan.timeout
        self.queries = dask_queries.QUERIES

    def read(self, table):
        import dask.dataframe as dd

        return dd.read_parquet(data.files(self.path, table))

    def run(self, number):
        return to_pandas(compute(self.queries[number](self), self.client, self.timeout))

    def phases(self, number) -> dict:
        """One more run, split: building the collection, optimizing it, its graph, and the cluster's work, with the
        bytes it sent between workers, the seconds its shuffles' pieces took (:func:`.common.sent`) and how its
        tasks were spread over the workers (:func:`.common.spread`); its answer too, which is the answer of a
        collection optimized first (``optimize()``, then computed)."""
        clock = [time.perf_counter()]
        collection = self.queries[number](self)
        clock.append(time.perf_counter())
        optimized = collection.optimize()
        clock.append(time.perf_counter())
        from distributed import get_task_stream

        tasks = len(optimized.__dask_graph__())
        clock.append(time.perf_counter())
        before = sent(self.client)
        with get_task_stream(client=self.client) as stream:  # its round trips outside the clock
            began = time.perf_counter()
            answer = compute(optimized, self.client, self.timeout)
            computed = time.perf_counter() - began
        steps = [b - a for a, b in zip(clock, clock[1:])]
        moved = {name: count - before[name] for name, count in sent(self.client).items()}
        return {"build": steps[0], "optimize": steps[1], "graph": steps[2], "compute": computed, "tasks": tasks,
                "partitions": getattr(optimized, "npartitions", 1), **moved,
                "shuffle_seconds": shuffle_seconds(stream.data), **spread(stream.data), "answer": to_pandas(answer)}


def to_pandas(value):
    """A query's answer as a pandas frame: from cuDF, from a Series, or from a scalar."""
    import pandas as pd

    if hasattr(value, "to_pandas"):
        value = value.to_pandas()
    if isinstance(value, pd.Series):
        return value.to_frame()
    return value if isinstance(value, pd.DataFrame) else pd.DataFrame({"value": [value]})


def totals(result: dict) -> dict:
    """Each column's total over the queries it answered right, and how many it answered right."""
    out = {}
    for label in result["columns"]:
        runs = [r for r in result["runs"] if r["architecture"] == label]
        right = [r for r in runs if r.get("correct")]
        out[label] = {"seconds": sum(r["seconds"] for r in right),
                      "first_seconds": sum(r["first_seconds"] for r in right), "correct": len(right),
                      "queries": len(runs)}
    return out


def table(result: dict) -> str:
    layout = result.get("layout", "suite")
    head = (f"TPC-H at scale factor {result['scale']:g} ({result['data']}"
            + ("" if layout == "suite" else f", {layout}: {data.LAYOUTS[layout]}") + "); each time is the best of "
            f"{result['repeat']} after a first run, from the call to the answer; ✓ where it equals DuckDB's")
    lines = [head, runs_table(result, ok=" ✓")]
    for label, t in result.get("totals", {}).items():
        lines.append(f"{label}: {t['seconds']:.2f} s for {t['correct']} of {t['queries']} right "
                     f"(first runs {t['first_seconds']:.2f} s)")
    return "\n".join([*lines, *shuffle_lines(result), *startup_lines(result), *result["notes"]])


def shuffle_lines(result: dict) -> list[str]:
    """For each column whose split runs shuffled between workers, the largest shuffle: the bytes its pieces took
    between workers, and at what rate."""
    lines, largest = [], {}
    for r in result["runs"]:
        phases = r.get("phases") or {}
        if phases.get("shuffle_bytes", 0) > largest.get(r["architecture"], ({}, {}))[1].get("shuffle_bytes", 0):
            largest[r["architecture"]] = (r, phases)
    for label, (r, phases) in largest.items():
        rate = phases["shuffle_bytes"] / phases["shuffle_seconds"] / 1e9 if phases["shuffle_seconds"] else 0.0
        lines.append(f"{label}: largest shuffle {r['workload']}, {phases['shuffle_bytes'] / 1e9:.2f} GB between "
                     f"workers in {phases['shuffle_seconds']:.2f} s ({rate:.1f} GB/s)")
    return lines


def plot(result: dict, path: str) -> None:
    """A bar chart of the table, log scale, one group per query (needs matplotlib)."""
    bar_chart(result, path, f"TPC-H, scale factor {result['scale']:g}")
