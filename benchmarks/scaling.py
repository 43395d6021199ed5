"""Where the time of a multi-GPU run goes: the bench's workloads on 1 and all GPUs, timed by phase.

For each run: wall time; the time before the first task starts (graph building, optimizing,
sending); the span of the tasks; for each worker, its compute and transfer time, and the part
of the span in which it computed nothing. Writes JSON with the machine's description.

    python benchmarks/scaling.py [--size full] [--workloads sum,transpose] [--repeat 3] [--protocol tcp] [--gpus 1,8]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict

import dask.array as da
from distributed import Client, get_task_stream

from dask_gpu import LocalCUDACluster, devices
from dask_gpu.benchmarks.seed import WORKLOADS, gpu_counts, resolve_size, warm_up
from dask_gpu.report import machine_dict


def phases(stream: list[dict], submitted: float, finished: float) -> dict:
    busy = defaultdict(lambda: defaultdict(float))
    tasks = defaultdict(int)
    starts, stops = defaultdict(list), defaultdict(list)
    for task in stream:
        worker = task["worker"]
        tasks[worker] += 1
        for part in task["startstops"]:
            busy[worker][part["action"]] += part["stop"] - part["start"]
            starts[worker].append(part["start"])
            stops[worker].append(part["stop"])
    first, last = min(map(min, starts.values())), max(map(max, stops.values()))
    span = last - first
    return {
        "wall": finished - submitted,
        "before_first_task": first - submitted,
        "after_last_task": finished - last,
        "span": span,
        # first and last: when the worker's first task began and its last ended, from the submission
        "workers": {w: {"tasks": tasks[w], **dict(b), "idle": span - b["compute"], "first": min(starts[w]) - submitted,
                        "last": max(stops[w]) - submitted} for w, b in busy.items()},
    }


def graph_phases(client, submitted: float) -> dict:
    """When the scheduler got the last graph, and how long it took to make tasks of it (materializing and
    optimizing, ordering, task states), from the scheduler's own update-graph event."""
    events = [e for _, e in client.get_events("scheduler") if e.get("action") == "update-graph" and "metrics" in e]
    metrics = events[-1]["metrics"]
    return {"to_scheduler": metrics["start_timestamp_seconds"] - submitted,
            "materialize": metrics["materialization_duration_seconds"], "total": metrics["duration_seconds"]}


def run(count, names, n, c, repeat, protocol, threads, saturation) -> list[dict]:
    import cupy

    rows = []
    cluster = LocalCUDACluster(n_workers=count, protocol=protocol, threads_per_worker=threads,
                               worker_saturation=saturation, dashboard_address=":0")
    with cluster, Client(cluster) as client:
        rs = da.random.RandomState(RandomState=cupy.random.RandomState)
        for name in names:
            warm_up(client, WORKLOADS[name][1], rs, c)
            for _ in range(repeat):
                problem = WORKLOADS[name][1](rs, n, c, float("inf"))
                with get_task_stream() as stream:
                    submitted = time.time()
                    value = problem.expr.compute()
                    finished = time.time()
                row = {"gpus": count, "threads": threads, "workload": name,
                       "value": float(value), "correct": bool(problem.check(value))}
                row.update(phases(stream.data, submitted, finished))
                row["graph"] = graph_phases(client, submitted)
                rows.append(row)
                idle = ", ".join(f"{w['idle']:.2f} ({w['first']:.2f}-{w['last']:.2f})" for w in row["workers"].values())
                print(f"{count} GPU(s) x {threads} thread(s) {name}: {row['wall']:.2f} s, "
                      f"first task after {row['before_first_task']:.2f} s (to the scheduler "
                      f"{row['graph']['to_scheduler']:.2f}, graph {row['graph']['total']:.2f}), "
                      f"span {row['span']:.2f} s, idle (first-last task) {idle}", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="full")
    parser.add_argument("--workloads", default="sum,transpose")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--protocol", default="tcp")
    parser.add_argument("--threads", type=int, default=1, help="threads per worker")
    parser.add_argument("--saturation", help="root tasks sent ahead per worker thread [gpu.worker-saturation]")
    parser.add_argument("--gpus", help="GPU counts, comma-separated [default: 1 and all]")
    parser.add_argument("--out", default="benchmarks/results/scaling.json")
    args = parser.parse_args()
    n, c = resolve_size(args.size)
    counts = gpu_counts(args.gpus, len(devices.discover().devices))
    names = args.workloads.split(",")
    result = {"machine": machine_dict(), "shape": n, "chunks": c, "protocol": args.protocol,
              "saturation": args.saturation, "runs": []}
    for count in counts:
        result["runs"] += run(count, names, n, c, args.repeat, args.protocol, args.threads, args.saturation)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
