"""Where a TPC-H query's time goes on a dask-gpu cluster: the client, the scheduler, the tasks.

For each query, after a first run and a warm one: the collection's building and optimization on the client
(with a cProfile of both, summed over the queries), the graph's tasks, and the computation, split by the task
stream into the tasks' own time (by task prefix) and what is left (submission, scheduling, transfers). Also each
query computed in this process by dask's synchronous scheduler on cuDF (``local``): the same tasks with no
cluster in between. With ``--plans``, each query's building and optimization alone, with cuDF's metas and with
pandas' (what the client would cost if it planned with pandas metadata). With ``--sample``, one more round of the
queries sampled by py-spy in every thread of this process (the client and the scheduler) and of the workers: each
thread's busy seconds and where they went; with ``--sample-first``, the queries' first round as well, sampled before
anything else. With ``--timeline``, the first and the warm run of each query (as the
suite runs it: ``client.compute`` of the collection) are split by clock: the call until the futures return
(planning, the graph sent), until the first task starts, the tasks (first start to last end), until the answer is
back, and its conversion to pandas. With ``--reads``, each query's parquet reads as its plan makes them (one
cuDF call a partition, on a worker) beside cuDF alone reading the same columns of the same files in one call there.

    python benchmarks/tpch_phases.py --data DIR --scale 10 [--layout L] [--queries 1,6] [--gpus 1] [--sample]
        [--sample-first] [--timeline] [--reads] [--out F]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import re
import signal
import subprocess
import tempfile
import time
from collections import defaultdict


def tpch_arguments(description: str) -> argparse.ArgumentParser:
    """A parser of the arguments that name the TPC-H data and queries: --data, --scale, --layout, --queries."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True)
    parser.add_argument("--scale", type=float, required=True)
    parser.add_argument("--layout", default="suite", help="the files' layout (the tpch suite's --layout)")
    parser.add_argument("--queries", default=",".join(str(n) for n in range(1, 23)))
    return parser


def main(argv=None) -> dict:
    parser = tpch_arguments(__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1)
    parser.add_argument("--local", action="store_true", help="also run each query with the sync scheduler here")
    parser.add_argument("--plans", action="store_true",
                        help="also time each query's building and optimization on the client alone, with cuDF's metas "
                             "and with pandas' (dask's pandas backend over the same files)")
    parser.add_argument("--sample", action="store_true",
                        help="also sample one round of the queries with py-spy (pip install py-spy): busy seconds "
                             "by thread")
    parser.add_argument("--sample-first", action="store_true",
                        help="sample the queries' first round too, before anything else runs")
    parser.add_argument("--timeline", action="store_true",
                        help="split the first and the warm run of each query, as the suite runs it, by clock, and "
                             "its first task's way through the scheduler and the worker")
    parser.add_argument("--reads", action="store_true",
                        help="also time each query's planned reads beside cuDF alone reading the same columns")
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    import dask
    from distributed import Client

    from dask_gpu import LocalCUDACluster
    from dask_gpu.benchmarks.tpch import data
    from dask_gpu.benchmarks.tpch.suite import Dask, to_pandas
    from dask_gpu.report import machine_dict

    data.generate(args.data, args.scale, print, args.layout)
    numbers = [int(n) for n in args.queries.split(",")]
    want = data.answers(args.data, args.scale, numbers)
    result = {"scale": args.scale, "gpus": args.gpus, "machine": machine_dict(), "queries": {}}
    profile = cProfile.Profile()
    plan = type("Plan", (), {"path": args.data, "scale": args.scale, "timeout": 300})
    with dask.config.set({"dataframe.backend": "gpu"}):
        start = time.perf_counter()
        with LocalCUDACluster(n_workers=args.gpus, dashboard_address=":0") as cluster, Client(cluster) as client:
            result["cluster_seconds"] = time.perf_counter() - start
            engine = Dask(plan, client, split=True)
            if args.sample_first:
                result["sampled_first"] = _sampled(lambda: [engine.run(n) for n in numbers])
                print(json.dumps({k: v["busy"] for k, v in result["sampled_first"]["threads"].items()}, indent=1))
            for n in numbers:
                row = result["queries"][f"q{n}"] = {}
                for name in ("first", "second"):
                    if args.timeline:  # each run split by clock
                        row[f"{name}_timeline"], answer = _timeline(client, engine, n)
                        row[name] = row[f"{name}_timeline"]["total"]
                        continue
                    start = time.perf_counter()
                    answer = engine.run(n)
                    row[name] = time.perf_counter() - start
                why = data.same(answer, want[n])
                row["correct"] = why is None
                if why:
                    row["wrong"] = why
                clock = [time.perf_counter()]
                profile.enable()
                collection = engine.queries[n](engine)
                clock.append(time.perf_counter())
                optimized = collection.optimize()
                profile.disable()
                clock.append(time.perf_counter())
                graph = optimized.__dask_graph__()
                clock.append(time.perf_counter())
                called = time.time()
                with _stream(client) as tasks:
                    client.compute(optimized).result()
                answered = time.time()
                clock.append(time.perf_counter())
                steps = [b - a for a, b in zip(clock, clock[1:])]
                row.update(build=steps[0], optimize=steps[1], graph=steps[2], compute=steps[3], tasks=len(graph),
                           by_prefix=_by_prefix(tasks), task_seconds=_busy(tasks), **_ends(tasks, called, answered))
                row["outside_tasks"] = row["compute"] - row["task_seconds"]
                if args.reads:
                    row["reads"] = _reads(client, optimized)
                reads = row.get("reads", {})
                print(f"q{n}: first {row['first']:.2f} second {row['second']:.2f} | build {steps[0]:.3f} "
                      f"optimize {steps[1]:.3f} graph {steps[2]:.3f} compute {steps[3]:.3f} (tasks busy "
                      f"{row['task_seconds']:.3f}, {len(graph)} tasks; before the first "
                      f"{row.get('before_first_task', 0):.3f}, after the last {row.get('after_last_task', 0):.3f}) "
                      f"{row['correct']}" + (f" | reads {reads['planned']:.3f} cuDF alone {reads['cudf_alone']:.3f} "
                                             f"partitions {reads['partitions']}" if reads else ""), flush=True)
            if args.timeline:
                for name in ("first", "second"):
                    rows = [row[f"{name}_timeline"] for row in result["queries"].values()]
                    totals = {step: round(sum(row[step] for row in rows), 3) for step in rows[0]}
                    print(f"{name} runs split by clock, summed over the queries:", totals, flush=True)
            if args.sample:
                result["sampled"] = _sampled(lambda: [engine.run(n) for n in numbers])
                print(json.dumps({k: v["busy"] for k, v in result["sampled"]["threads"].items()}, indent=1), flush=True)
        if args.local:
            import cudf  # noqa: F401  the sync scheduler computes in this process

            for n in numbers:
                times = []
                for _ in range(2):
                    start = time.perf_counter()
                    answer = to_pandas(dask.compute(engine.queries[n](engine), scheduler="sync")[0])
                    times.append(time.perf_counter() - start)
                result["queries"][f"q{n}"]["local"] = min(times)
                print(f"q{n}: local (sync scheduler, this process) {min(times):.3f}", flush=True)
    if args.plans:
        result["plans"] = {backend: _plans(engine, numbers, backend) for backend in ("gpu", "pandas")}
        print("client seconds, build + optimize summed over the queries:",
              {k: round(sum(sum(v) for v in rows.values()), 3) for k, rows in result["plans"].items()}, flush=True)
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(40)
    stats.print_callers(r"\(dtypes\)|is_dataframe_like|\(tokenize\)|_meta_chunk")
    result["client_profile"] = text.getvalue()
    print(text.getvalue()[:12000])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


def _sampled(work, rate: int = 250) -> dict:
    """``work()`` sampled by py-spy in this process and its children: the seconds it took, and for each thread that
    was busy, its busy seconds (samples in which it ran) and the frames they were spent in (inclusive, >= 50 ms)."""
    with tempfile.TemporaryDirectory() as where:
        raw = os.path.join(where, "raw.txt")
        spy = subprocess.Popen(["py-spy", "record", "--pid", str(os.getpid()), "--subprocesses", "--threads",
                                "--nonblocking", "--format", "raw", "--rate", str(rate), "-o", raw],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(2)  # py-spy attaches
        start = time.perf_counter()
        work()
        seconds = time.perf_counter() - start
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
        threads: dict = defaultdict(lambda: {"busy": 0.0, "frames": defaultdict(float)})
        with open(raw) as f:
            for line in f:
                stack, count = line.rsplit(" ", 1)
                frames = stack.split(";")
                at = next((i for i, frame in enumerate(frames) if frame.startswith("thread (")), None)
                if at is None:
                    continue
                process = "client" if f"process {os.getpid()}:" in frames[0] and at == 1 else frames[at - 1][:60]
                thread = threads[f"{process} | {re.sub(r'thread [(][0-9]+[)]: ', '', frames[at])}"]
                thread["busy"] += int(count) / rate
                for frame in set(frames[at + 1:]):
                    thread["frames"][re.sub(r" [(].*/", " (", frame)] += int(count) / rate
    out = {}
    for name, thread in sorted(threads.items(), key=lambda kv: -kv[1]["busy"]):
        if thread["busy"] >= 0.05:
            frames = sorted(thread["frames"].items(), key=lambda kv: -kv[1])
            out[name] = {"busy": round(thread["busy"], 3), "frames": {k: round(v, 3) for k, v in frames if v >= 0.05}}
    return {"seconds": seconds, "rate": rate, "threads": out}


def _plans(engine, numbers, backend) -> dict:
    """Each query's building and optimization on the client under ``backend`` (best of 3): [build, optimize]."""
    import dask

    out = {}
    with dask.config.set({"dataframe.backend": backend}):
        for n in numbers:
            runs = []
            for _ in range(3):
                start = time.perf_counter()
                collection = engine.queries[n](engine)
                built = time.perf_counter()
                collection.optimize()
                runs.append((built - start, time.perf_counter() - built))
            out[f"q{n}"] = min(runs, key=sum)
    return out


def _reads(client, optimized) -> dict:
    """The seconds of the query's planned reads (each partition in one cuDF call, one after another) and of cuDF
    alone reading the same columns of the same files in one call, on a worker, the second of two tries; and the
    reads' partitions."""
    from dask_gpu.dataframe.collections import Optimized
    from dask_gpu.dataframe.parquet import ReadParquet

    root = optimized.expr
    found, stack = {}, [root.optimized if isinstance(root, Optimized) else root]
    while stack:
        expr = stack.pop()
        if isinstance(expr, ReadParquet):
            found[expr._name] = expr
        stack.extend(expr.dependencies())
        if type(expr).__name__ == "Fused":
            stack.extend(expr.exprs)
    jobs = [([read._plan[i] for i in read._partitions], read.operand("columns"),
             [name for name, _, _ in read.operand("files")]) for read in found.values()]
    planned, alone = client.submit(_time_reads, jobs, pure=False).result()
    return {"planned": planned, "cudf_alone": alone, "partitions": [len(plans) for plans, _, _ in jobs]}


def _time_reads(jobs) -> tuple:
    import cudf

    from dask_gpu.dataframe.parquet import read_pieces

    for _ in range(2):
        start = time.perf_counter()
        for plans, columns, _ in jobs:
            for pieces in plans:
                read_pieces(pieces, columns, "cudf")
        planned = time.perf_counter() - start
        start = time.perf_counter()
        for _, columns, files in jobs:
            cudf.read_parquet(files, columns=columns)
        alone = time.perf_counter() - start
    return planned, alone


def _timeline(client, engine, number) -> tuple:
    """A run of query ``number`` as the suite runs it, split by clock (seconds), and its answer."""
    from distributed import wait

    from dask_gpu.benchmarks.tpch.suite import to_pandas

    with _stream(client) as tasks:
        clock = [time.time()]
        future = client.compute(engine.queries[number](engine))
        clock.append(time.time())
        wait(future)
        value = future.result()
        clock.append(time.time())
        answer = to_pandas(value)
        clock.append(time.time())
    spans = [(s["start"], s["stop"], task["key"]) for task in tasks.data for s in task["startstops"]
             if s["action"] == "compute"]
    first, _, first_key = min(spans)
    last = max(b for _, b, _ in spans)
    steps = {"submitted": clock[1] - clock[0], "to_first_task": first - clock[1], "tasks": last - first,
             "busy": _busy(tasks), "to_answer": clock[2] - last, "to_pandas": clock[3] - clock[2]}
    steps["total"] = clock[3] - clock[0]
    steps.update(_hops(client, first_key, clock[0], clock[1], first))
    return steps, answer


def _hops(client, key, called: float, submitted: float, started: float) -> dict:
    """The way of a computation's first task from the client's call's return to its start, by the scheduler's and
    the worker's stories of this call (a key computed before has older ones): to the scheduler's graph update,
    through it to the worker, and in the worker."""
    story = client.story(key)

    def first(events) -> float:
        return min((t for t in events if t >= called), default=float("nan"))

    received = first(float(e[-2].rsplit("-", 1)[1]) for e in story
                     if e[0] == "scheduler" and str(e[-2]).startswith("update-graph-"))
    sent = first(e[-1] for e in story if e[0] == "scheduler" and e[3] == "processing")
    on_worker = first(e[-1] for e in story if e[0] != "scheduler" and e[2] == "compute-task")
    executing = first(e[-1] for e in story if e[0] != "scheduler" and e[3] == "executing")
    return {"to_scheduler": received - submitted, "in_scheduler": sent - received, "to_worker": on_worker - sent,
            "in_worker": executing - on_worker, "to_thread": started - executing}


def _ends(ts, called: float, answered: float) -> dict:
    """The compute call's seconds before its first task started, and after its last ended."""
    spans = [(s["start"], s["stop"]) for task in ts.data for s in task["startstops"] if s["action"] == "compute"]
    if not spans:
        return {}
    first, last = min(a for a, _ in spans), max(b for _, b in spans)
    return {"before_first_task": first - called, "after_last_task": answered - last}


class _stream:
    """The task stream of what runs inside the block (distributed's ``get_task_stream``)."""

    def __init__(self, client):
        from distributed import get_task_stream

        self.inner = get_task_stream(client=client)

    def __enter__(self):
        self.ts = self.inner.__enter__()
        return self.ts

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


def _by_prefix(ts) -> dict:
    out = defaultdict(float)
    for task in ts.data:
        prefix = task["key"][0] if isinstance(task["key"], tuple) else task["key"]
        prefix = str(prefix).rsplit("-", 1)[0]
        out[prefix] += sum(s["stop"] - s["start"] for s in task["startstops"] if s["action"] == "compute")
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _busy(ts) -> float:
    """Seconds during which at least one task computed."""
    spans = sorted((s["start"], s["stop"]) for task in ts.data for s in task["startstops"] if s["action"] == "compute")
    busy, end = 0.0, None
    for a, b in spans:
        if end is None or a > end:
            busy, end = busy + b - a, b
        elif b > end:
            busy, end = busy + b - end, b
    return busy


if __name__ == "__main__":
    main()
