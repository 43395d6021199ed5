"""The 22 TPC-H queries on several dask-gpu workers that share one GPU: the paths between GPU workers on one device.

A scheduler (distributed's ``LocalCluster`` with no workers of its own) and ``--workers`` processes of
``dask gpu worker --cuda-visible-devices 0``, each with ``--device-memory-limit`` of the device. Tables are read in
a multiple of the workers' partitions, so that every shuffle, hash join and broadcast moves device partitions
between workers. Each query's answer is checked against DuckDB's; the task stream says which workers computed and
how many transfers there were between them.

    python benchmarks/tpch_shared_gpu.py --data DIR --scale 10 [--workers 2] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--scale", type=float, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device-memory-limit", default="30GB")
    parser.add_argument("--queries", default=",".join(str(n) for n in range(1, 23)))
    parser.add_argument("--backend", default="gpu", help="dask's dataframe backend (pandas: a run without cuDF)")
    parser.add_argument("--out")
    args = parser.parse_args(argv)

    import dask
    from distributed import Client, LocalCluster, get_task_stream

    from dask_gpu.benchmarks.tpch import data
    from dask_gpu.benchmarks.tpch.suite import Dask
    from dask_gpu.report import machine_dict

    data.generate(args.data, args.scale, print)
    numbers = [int(n) for n in args.queries.split(",")]
    want = data.answers(args.data, args.scale, numbers)
    result = {"scale": args.scale, "workers": args.workers, "device_memory_limit": args.device_memory_limit,
              "machine": machine_dict(), "queries": {}}
    plan = type("Plan", (), {"path": args.data, "scale": args.scale, "timeout": 600})
    with dask.config.set({"dataframe.backend": args.backend}), \
            LocalCluster(n_workers=0, dashboard_address=":0") as cluster, Client(cluster) as client:
        workers = [subprocess.Popen([sys.executable, "-m", "dask", "gpu", "worker", cluster.scheduler_address,
                                     "--cuda-visible-devices", "0", "--name", f"shared-{i}", "--no-dashboard",
                                     "--device-memory-limit", args.device_memory_limit]) for i in range(args.workers)]
        try:
            client.wait_for_workers(args.workers, timeout=180)
            engine = Dask(plan, client, split=False)
            for n in numbers:
                row = result["queries"][f"q{n}"] = {}
                times = []
                with get_task_stream(client=client) as stream:
                    for _ in range(3):
                        start = time.perf_counter()
                        answer = engine.run(n)
                        times.append(time.perf_counter() - start)
                why = data.same(answer, want[n])
                row.update(first=times[0], best=min(times[1:]), correct=why is None,
                           workers_computing=len({task["worker"] for task in stream.data}),
                           transfers=sum(s["action"] == "transfer" for task in stream.data
                                         for s in task["startstops"]))
                if why:
                    row["wrong"] = why
                print(f"q{n}: first {row['first']:.2f} best {row['best']:.2f} right {row['correct']} "
                      f"workers {row['workers_computing']} transfers {row['transfers']}", flush=True)
        finally:
            client.retire_workers(close_workers=True)
            for worker in workers:
                worker.wait(timeout=60)
    rows = result["queries"].values()
    result["right"] = sum(r["correct"] for r in rows)
    result["seconds"] = sum(r["best"] for r in rows)
    print(f"{result['right']} of {len(rows)} right; {result['seconds']:.2f} s (best of 2 after a first run)")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
