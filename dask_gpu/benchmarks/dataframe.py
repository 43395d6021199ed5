"""The dataframe suite of ``dask gpu bench``: reads, group-bys, a join, a sort, a shuffle and two TPC-H-like
queries on parquet data it writes itself, on pandas workers, dask-gpu's and dask-cuda's GPU clusters, and
cuDF in one process (the floor).

Data: a left table of ``rows`` rows (``k`` int64 with rows/20 distinct values, ``x`` and ``y`` standard normal,
``s`` int32 in [0, 1000)) and a right table of rows/20 rows (``k`` = 0..rows/20-1, ``w`` standard normal),
drawn from fixed seeds, ~5M rows a file. It is written once per directory: a manifest says what is there.

Each answer is checked against pandas': up to ``IN_PROCESS_ROWS`` rows, the same workload run by plain pandas in
this process on the same data, once, before any column runs (the answers are kept in the data's directory);
above it, where that takes minutes, the pandas column's answers.
"""

from __future__ import annotations

import dataclasses
import gc
import glob
import importlib
import json
import math
import os
import tempfile
from contextlib import ExitStack, contextmanager
from importlib.util import find_spec
from typing import Callable, ClassVar

import dask
import numpy as np

from dask_gpu.benchmarks.common import (TIMEOUT, available_gpus, check_options, compute, data_directory,
                                        default_protocol, engine_kinds, error_text,
                                        gpu_client, gpu_columns, gpu_counts, gpu_notes, run_columns, runs_table,
                                        scaling_lines, settle, startup_lines, timed, timing)
from dask_gpu.benchmarks import common
from dask_gpu.benchmarks.common import plot as bar_chart
from dask_gpu.report import machine_dict
from dask_gpu.report import table as text_table

SIZES = {"small": 200_000, "full": 200_000_000}
SEED = 2026
ROWS_PER_FILE = 5_000_000  # the full size's 40 files; smaller tables keep 8 (4 on the right) to have partitions
RIGHT_RATIO = 20  # left rows per right row, which is also the rows per distinct k
S_VALUES = 1000
COLUMNS = {"left": ["k", "x", "y", "s"], "right": ["k", "w"]}
GPU_LIBRARIES = ("cupy", "cudf")
FLOOR = "cuDF, one process"
REFERENCES = "reference.json"
REFERENCE_FORMAT = 3  # change it when an answer's form changes, so that cached references are recomputed
IN_PROCESS_ROWS = 20_000_000  # above this, the pandas column's answers are the reference (without it, cuDF's)
ENGINES = {"pandas": "cpu", "dask-gpu": "gpu", "dask-cuda": "dask-cuda", "cudf": "cudf"}  # name -> columns' kind


@dataclasses.dataclass(frozen=True)
class Data:
    """Where the two tables live and what they hold."""

    dir: str
    rows: int
    seed: int = SEED

    @property
    def right_rows(self) -> int:
        return max(1, self.rows // RIGHT_RATIO)

    @property
    def files(self) -> int:
        return max(min(8, self.rows), math.ceil(self.rows / ROWS_PER_FILE))

    @property
    def right_files(self) -> int:
        return max(min(4, self.right_rows), math.ceil(self.right_rows / (ROWS_PER_FILE / 2)))

    def path(self, table: str) -> str:
        return os.path.join(self.dir, table)

    def manifest(self) -> dict:
        return {"rows": self.rows, "files": self.files, "right_rows": self.right_rows,
                "right_files": self.right_files, "seed": self.seed, "s_values": S_VALUES}


@dataclasses.dataclass(frozen=True)
class Plan(common.Plan):
    data: Data
    reference: str = "cpu"  # the kind of the column whose answers are the reference above IN_PROCESS_ROWS
    references: ClassVar[int] = 1


def plan(size="small", rows=None, data=None, workloads=None, compare=None, gpus=None, protocol=None,
         repeat=1, timeout=None, engines=None) -> Plan:
    """Checks every argument (a ``ValueError`` that names the bad one) and settles the columns."""
    if size not in SIZES:
        raise ValueError(f"--size {size}: the dataframe suite has {' and '.join(SIZES)}")
    rows = SIZES[size] if rows is None else int(rows)
    if rows < 1:
        raise ValueError(f"--rows must be at least 1, not {rows}")
    data = data or os.path.join(tempfile.gettempdir(), f"dask-gpu-bench-{rows}")
    data_directory(data)
    kinds = engine_kinds(engines, ENGINES)
    if kinds and "dask-cuda" in kinds:
        compare = "dask-cuda"
    names, cols, timeout = tuple(workloads or WORKLOADS), columns(compare, gpus), timeout or TIMEOUT
    protocol = protocol or default_protocol(cols)
    check_options(names, WORKLOADS, compare, protocol, repeat, timeout)
    cols, notes = gpu_notes(cols, compare, GPU_LIBRARIES, find_spec)
    cols = [col for col in cols if kinds is None or col[1] in kinds]
    reference = _reference(cols, rows)
    if reference == "cudf":  # its answers first
        cols.sort(key=lambda col: col[1] != "cudf")
    return Plan(size=size, workloads=names, columns=tuple(cols), notes=tuple(notes), protocol=protocol,
                repeat=int(repeat), timeout=timeout, data=Data(data, rows), reference=reference)


def _reference(cols, rows: int) -> str:
    """The kind of the column whose answers are the reference above :data:`IN_PROCESS_ROWS`: pandas', else cuDF's
    (a ``ValueError`` where there is neither)."""
    kinds = {kind for _, kind, _ in cols}
    if rows <= IN_PROCESS_ROWS or "cpu" in kinds:
        return "cpu"
    if "cudf" in kinds:
        return "cudf"
    raise ValueError(f"--engines: above {IN_PROCESS_ROWS:,} rows the answers are checked against the pandas or the "
                     f"cudf column; name one of them")


def planned(options) -> Plan:
    """The bench command's options (:class:`~dask_gpu.benchmarks.common.Options`) as this suite's plan."""
    return plan(options.size, options.rows, options.data, options.workloads, options.compare, options.gpus,
                options.protocol, options.repeat, options.timeout, options.engines)


def data_lines(plan: Plan) -> int:
    """The lines :func:`write_data` logs, 0 where the data is there already."""
    return plan.data.files + plan.data.right_files if stale(plan.data) else 0


def write_data(plan: Plan, log=None) -> None:
    generate(plan.data, log=log)


def columns(compare=None, gpus=None) -> list[tuple[str, str, int]]:
    """(label, kind, count): pandas on every core, the GPU clusters, and the cuDF floor where there are GPUs."""
    cores = os.cpu_count() or 1
    counts = gpu_counts(gpus, available_gpus(GPU_LIBRARIES, find_spec))
    cols = [(f"pandas, {cores} cores", "cpu", cores), *gpu_columns(counts, compare, "dask-gpu, ")]
    return cols + ([(FLOOR, "cudf", 1)] if counts else [])


def stale(data: Data) -> bool:
    """Whether ``data.dir`` lacks the tables ``data`` describes (its manifest says what is there)."""
    saved, want = _read_json(os.path.join(data.dir, "manifest.json")), data.manifest()
    return {key: saved.get(key) for key in want} != want


def generate(data: Data, log=None) -> bool:
    """Writes the tables unless ``data.dir`` holds them already; True where it wrote them. ``log(line)``
    follows each file."""
    manifest, want = os.path.join(data.dir, "manifest.json"), data.manifest()
    if not stale(data):
        return False
    ours = [glob.glob(os.path.join(data.path(table), "*.parquet")) for table in ("left", "right")]
    for path in [manifest, os.path.join(data.dir, REFERENCES), *ours[0], *ours[1]]:
        if os.path.isfile(path):  # the manifest goes first: data written part way is never reused
            os.remove(path)
    gpu = available_gpus(GPU_LIBRARIES, find_spec) > 0  # the full size draws 5.6 GB: on the GPU where there is one
    xp, frames = (importlib.import_module(name) for name in (GPU_LIBRARIES if gpu else ("numpy", "pandas")))
    tables = [("left", data.rows, data.files), ("right", data.right_rows, data.right_files)]
    written, total = 0, data.files + data.right_files
    for t, (table, rows, files) in enumerate(tables):
        os.makedirs(data.path(table), exist_ok=True)
        start = 0
        for i, n in enumerate(_split(rows, files)):
            rng = xp.random.default_rng(int(np.random.SeedSequence([data.seed, t, i]).generate_state(1)[0]))
            path = os.path.join(data.path(table), f"part-{i:04d}.parquet")
            frames.DataFrame(_draw(xp, rng, table, start, n, data.right_rows)).to_parquet(path, index=False)
            start, written = start + n, written + 1
            if log:
                log(f"wrote {path} ({written}/{total}, {n:,} rows)")
    if gpu:
        xp.get_default_memory_pool().free_all_blocks()  # the GPU is the clusters' now
    with open(manifest, "w") as f:
        json.dump({**want, "generator": xp.__name__}, f, indent=2)
    return True


def _draw(xp, rng, table, start, n, distinct):
    if table == "right":
        return {"k": xp.arange(start, start + n, dtype=xp.int64), "w": rng.standard_normal(n)}
    return {"k": rng.integers(0, distinct, n, dtype=xp.int64), "x": rng.standard_normal(n),
            "y": rng.standard_normal(n), "s": rng.integers(0, S_VALUES, n, dtype=xp.int32)}


def _split(rows, parts):
    return [rows // parts + (i < rows % parts) for i in range(parts)]


def references(plan: Plan) -> dict:
    """Each workload's answer by pandas on the whole data in this process, computed once and kept beside the data."""
    path = os.path.join(plan.data.dir, REFERENCES)
    key = {**plan.data.manifest(), "format": REFERENCE_FORMAT}
    cached = _read_json(path)
    answers = cached.get("answers", {}) if cached.get("key") == key else {}
    missing = [name for name in plan.workloads if name not in answers]
    if missing:
        pandas = _Here(plan.data, "pandas").load()
        answers.update({name: WORKLOADS[name].answer(pandas, WORKLOADS[name].run(pandas)) for name in missing})
        with open(path, "w") as f:
            json.dump({"key": key, "answers": answers}, f)
    return answers


def check(got, want, rows: int) -> bool:
    """Whether an answer is the reference: counts, flags and order exactly; floats to 1e-9 of the value
    plus 1e-12 per row of the data (sums of many rows, added in another order)."""
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(check(got[k], want[k], rows) for k in want)
    if isinstance(want, (bool, int)):
        return isinstance(got, bool) == isinstance(want, bool) and got == want
    got, want = np.asarray(got, dtype=float), np.asarray(want, dtype=float)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=1e-9, atol=1e-12 * rows))


def run(plan: Plan, progress=None, checkpoint=None, log=None, status=None) -> dict:
    """Every workload in every column; ``progress(label)`` before the references and each run, ``status(text)``
    before its warm-up and its timed runs, ``checkpoint(result)`` after each column."""
    from dask_gpu.dataframe.scheduler import quiet_shuffle_logs

    quiet_shuffle_logs()  # P2P shuffles log a WARNING each on the scheduler, which runs in this process
    generate(plan.data, log)
    if progress:
        progress("reference answers (pandas)")
    answers = references(plan) if plan.data.rows <= IN_PROCESS_ROWS else {}
    result = {"suite": "dataframe", "size": plan.size, "data": plan.data.dir, **plan.data.manifest(),
              "protocol": plan.protocol, "repeat": plan.repeat, "timeout": plan.timeout,
              "workloads": {name: WORKLOADS[name].text for name in plan.workloads}, "machine": machine_dict(),
              "columns": [label for label, _, _ in plan.columns], "runs": [], "notes": list(plan.notes)}
    if not answers:
        whose = "pandas" if plan.reference == "cpu" else "cuDF"
        result["notes"].append(f"above {IN_PROCESS_ROWS:,} rows, answers are checked against the {whose} column's")

    def measure(engine, name, count):
        row = _measure(engine, name, plan.repeat, status)
        if "answer" in row:
            answer = row.pop("answer")
            if name not in answers and engine.kind == plan.reference:
                answers[name] = answer  # the reference
            row["correct"] = name in answers and check(answer, answers[name], plan.data.rows)
        return row

    def keep(result):
        result["ratios"] = ratios(result["runs"], plan.columns)
        if checkpoint:
            checkpoint(result)

    return run_columns(result, list(plan.columns), list(plan.workloads),
                       lambda kind, count: _column(kind, count, plan), measure, progress, keep)


def _measure(engine, name, repeat, status=None) -> dict:
    """A warm-up run, then ``repeat`` timed ones, and the last one's answer."""
    workload = WORKLOADS[name]

    def prepare():  # the previous run's memory goes first; dask collections sit in reference cycles, so only a
        gc.collect()  # collection frees their keys, which an identical run would find still computed
        settle(getattr(engine, "client", None))

    try:
        result, times = timed(lambda: workload.run(engine), repeat, status, prepare)
        answer = workload.answer(engine, result)
    except Exception as e:  # a failing workload is a result, not the end of the table
        return {"error": error_text(e)}
    return {**timing(times), "answer": answer}


@contextmanager
def _column(kind, count, plan):
    """The engine of one column, with both tables read and held: a cluster started once, or cuDF here."""
    with ExitStack() as stack:
        if kind == "cudf":
            yield _Here(plan.data, "cudf").load()
            return
        from distributed import Client, LocalCluster
        from distributed.deploy.utils import nprocesses_nthreads

        backend = {"cpu": "pandas", "gpu": "gpu"}.get(kind, "cudf")  # dask-gpu's own backend; dask-cuda with cuDF's
        stack.enter_context(dask.config.set({"dataframe.backend": backend}))
        if kind == "cpu":
            workers, threads = nprocesses_nthreads(count)  # processes: pandas holds the GIL in places
            cluster = LocalCluster(n_workers=workers, threads_per_worker=threads, dashboard_address=":0")
            client = stack.enter_context(Client(stack.enter_context(cluster)))
        else:
            client = gpu_client(stack, kind, count, plan.protocol)
        yield _Cluster(client, plan.data, plan.timeout, kind).load()


class _Engine:
    """What the workloads need from where they run; they are written once, in pandas' API."""

    split: dict = {}  # groupby keywords
    join: dict = {}  # merge keywords

    def load(self):
        # Columns named: other keys than the `read` workload's, which would find its answer held already.
        self.left, self.right = (self.keep(self.read(table, COLUMNS[table])) for table in ("left", "right"))
        return self


class _Cluster(_Engine):
    """Dask collections on a cluster, results awaited with a timeout."""

    split, join = {"split_out": True}, {"broadcast": False}

    def __init__(self, client, data, timeout, kind):
        self.client, self.data, self.timeout, self.kind = client, data, timeout, kind
        self.library = "pandas" if kind == "cpu" else "cudf"

    def read(self, table, columns=None):
        import dask.dataframe as dd

        return dd.read_parquet(self.data.path(table), columns=columns)

    def keep(self, df):
        return compute(df, self.client, self.timeout, persist=True)

    def done(self, expr):
        return compute(expr, self.client, self.timeout)

    def shuffle(self, df):
        return df.shuffle("k")

    def parts(self, df, summary):
        return self.done([dask.delayed(summary)(part) for part in df.to_delayed()])


class _Here(_Engine):
    """The whole data in this process: cuDF, the floor (the GPU synchronized before the clock is read; no
    timeout, as there is nothing to cancel), or pandas, the reference."""

    def __init__(self, data, library):
        self.data, self.library, self.kind, self.module = data, library, library, importlib.import_module(library)
        self.sync = importlib.import_module("cupy").cuda.runtime.deviceSynchronize if library == "cudf" else None

    def read(self, table, columns=None):
        files = sorted(glob.glob(os.path.join(self.data.path(table), "*.parquet")))
        return self.module.read_parquet(files, columns=columns)

    def keep(self, df):
        if self.sync:
            self.sync()
        return df

    done = keep

    def shuffle(self, df):
        if self.sync:
            return df.partition_by_hash(["k"], self.data.files)
        return [part for _, part in df.groupby(df.k % self.data.files)]  # pandas has no hash partitioning

    def parts(self, df, summary):
        return [summary(part) for part in (df if isinstance(df, list) else [df])]


# The workloads' expressions, the same for dask, cuDF and pandas.
def _groupby_low(df):
    return df.groupby("s").agg({"x": ["sum", "mean"]})


def _q1(df):
    f = df[df.x < 1.5]
    f = f.assign(a=f.s % 4, b=f.s % 3, disc=f.x * (1 - f.y.abs() / 10))
    out = f.groupby(["a", "b"]).agg({"x": "sum", "disc": "sum", "y": "mean", "s": "count"})
    return out.reset_index().sort_values(["a", "b"])


def _q3(df, right, **join):
    m = df.merge(right, on="k", **join)
    m = m[(m.w > 0) & (m.y < 0)]
    m = m.assign(g=m.k % 1000, revenue=(m.x.abs() + 1) * m.w)
    return m.groupby("g").revenue.sum().nlargest(10)


# Per-partition summaries (run where the partitions are), then the answers they add up to.
def _stats(p):
    return {"rows": len(p), "x": float(p.x.sum()), "y": float(p.y.sum()), "k": int(p.k.nunique())}


def _groups(p):  # a group-by's rows are its groups, k its index
    return {"rows": len(p), "x": float(p.x.sum()), "y": float(p.y.sum())}


def _sorted(p):
    return {"rows": len(p), "x": float(p.x.sum()), "min": float(p.x.min()), "max": float(p.x.max()),
            "sorted": bool(p.x.is_monotonic_increasing)}


def _sums(parts, *keys):
    return {key: sum(p[key] for p in parts) for key in keys}


def _host(value):
    return value.to_pandas() if hasattr(value, "to_pandas") else value  # cuDF to pandas


def _sort_answer(e, df):
    parts = [p for p in e.parts(df, _sorted) if p["rows"]]
    ordered = all(p["sorted"] for p in parts) and all(a["max"] <= b["min"] for a, b in zip(parts, parts[1:]))
    return {**_sums(parts, "rows", "x"), "ordered": ordered}


def _low_answer(e, frame):
    r = _host(frame).sort_index()
    return np.column_stack([r.index, r[("x", "sum")], r[("x", "mean")]]).tolist()


def _q3_answer(e, top):
    top = _host(top)
    return np.column_stack([top.index, top.to_numpy()]).tolist()


@dataclasses.dataclass(frozen=True)
class Workload:
    text: str  # what it times, for the table
    run: Callable  # engine -> result: the timed part
    answer: Callable  # (engine, result) -> a small JSON value to check, untimed


WORKLOADS = {
    "read": Workload("read_parquet, persist", lambda e: e.keep(e.read("left")),
                     lambda e, df: _sums(e.parts(df, _stats), "rows", "x", "y")),
    "groupby-low": Workload("groupby(s).agg(x: sum, mean)", lambda e: e.done(_groupby_low(e.left)), _low_answer),
    "groupby-high": Workload("groupby(k).agg(x: sum, y: mean), split_out, persist",
                             lambda e: e.keep(e.left.groupby("k").agg({"x": "sum", "y": "mean"}, **e.split)),
                             lambda e, df: _sums(e.parts(df, _groups), "rows", "x", "y")),
    "merge": Workload("merge(right, on=k)[[w, x]].sum()",
                      lambda e: e.done(e.left.merge(e.right, on="k", **e.join)[["w", "x"]].sum()),
                      lambda e, s: {key: float(_host(s)[key]) for key in ("w", "x")}),
    "sort": Workload("sort_values(x), persist", lambda e: e.keep(e.left.sort_values("x")), _sort_answer),
    "shuffle": Workload("shuffle(k), persist", lambda e: e.keep(e.shuffle(e.left)),
                        lambda e, df: _sums(e.parts(df, _stats), "rows", "x", "y", "k")),
    "q1": Workload("TPC-H Q1-like: filter, derive, groupby(s % 4, s % 3)", lambda e: e.done(_q1(e.left)),
                   lambda e, frame: _host(frame)[["a", "b", "x", "disc", "y", "s"]].to_numpy(float).tolist()),
    "q3": Workload("TPC-H Q3-like: merge, filter, groupby(k % 1000), top 10",
                   lambda e: e.done(_q3(e.left, e.right, **e.join)), _q3_answer),
}


def ratios(runs: list[dict], columns) -> list[dict]:
    """Each dask-gpu column's speed-up (other's seconds / its seconds) over pandas, over dask-cuda on as many
    GPUs, and over the cuDF floor (below 1: the floor is faster); correct runs only."""
    seconds = {(r["workload"], r["architecture"]): r["seconds"] for r in runs if r.get("correct")}
    kinds = {label: (kind, count) for label, kind, count in columns}
    rows = []
    for (name, label), mine in seconds.items():
        kind, count = kinds[label]
        if kind != "gpu":
            continue
        others = [other for other, (k, c) in kinds.items() if k in ("cpu", "cudf") or (k, c) == ("dask-cuda", count)]
        rows += [{"workload": name, "architecture": label, "against": other, "speedup": seconds[name, other] / mine}
                 for other in others if (name, other) in seconds]
    return rows


def table(result: dict) -> str:
    head = (f"{result['rows']:,} rows in {result['files']} parquet files, joined with {result['right_rows']:,} rows "
            f"({result['data']}); each time is the best of {result['repeat']} after a warm-up run")
    lines = [head, runs_table(result, ok=" ✓")]
    if result.get("ratios"):
        lines.append(_ratio_table(result))
    return "\n".join([*lines, *startup_lines(result), *scaling_lines(result), *result["notes"]])


def _ratio_table(result: dict) -> str:
    names, cells = list(result["workloads"]), {}
    for r in result["ratios"]:
        floor = r["against"] == FLOOR  # shown as time over the floor's, the others as speed-ups
        key = f"{r['architecture']}: " + (f"x the time of {FLOOR}" if floor else f"speed-up over {r['against']}")
        cells.setdefault(key, {})[r["workload"]] = f"{1 / r['speedup'] if floor else r['speedup']:.2f}x"
    return text_table([("ratios", *names), *((key, *(by.get(n, "-") for n in names)) for key, by in cells.items())])


def plot(result: dict, path: str) -> None:
    """A bar chart of the table, log scale, one group per workload (needs matplotlib)."""
    bar_chart(result, path, f"{result['rows']:,} rows, {result['files']} files")


def _read_json(path) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
