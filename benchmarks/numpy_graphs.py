"""NumPy-chunked dask arrays with dask-gpu imported against plain dask: no slower.

dask-gpu installs its array optimization for every dask array; on graphs with no GPU data it
must change nothing and cost nothing noticeable. In one run, alternating the two, this times
whole computations at a size that fits the machine, and the optimization alone on a graph of
many chunks. Writes JSON with the machine's description.

    python benchmarks/numpy_graphs.py [--size 8000] [--repeat 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time

import dask
import dask.array as da
from dask.array.optimization import optimize as dask_optimize

import dask_gpu  # noqa: F401  (installs dask-gpu's array optimization)
from dask_gpu.array.optimization import optimize as gpu_optimize
from dask_gpu.report import machine_dict

WORKLOADS = {
    "seed: (x + 1)[::2, ::2].sum()": lambda x: (x + 1)[::2, ::2].sum(),
    "seed mean: (x + 1)[::2, ::2].mean()": lambda x: (x + 1)[::2, ::2].mean(),
    "centred std: (x - x.mean(axis=0)).std()": lambda x: (x - x.mean(axis=0)).std(),
    "strided max: x[::3].max(axis=1).sum()": lambda x: x[::3].max(axis=1).sum(),
    "matmul: (x @ x.T)[:100].sum()": lambda x: (x @ x.T)[:100].sum(),
}
OPTIMIZERS = {"dask": dask_optimize, "dask-gpu": gpu_optimize}


def timed(optimizer, make, workload) -> tuple[float, float]:
    with dask.config.set({"array_optimize": OPTIMIZERS[optimizer]}):
        gc.collect()  # the previous run's garbage is not this run's cost
        start = time.perf_counter()
        value = float(workload(make()).compute())
        return time.perf_counter() - start, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=8000)
    parser.add_argument("--chunks", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", default="benchmarks/results/numpy-graphs.json")
    args = parser.parse_args()

    def make():
        return da.random.RandomState(0).normal(10, 1, size=(args.size, args.size), chunks=args.chunks)

    results = {"machine": machine_dict(), "size": args.size, "chunks": args.chunks, "repeat": args.repeat}
    rows = {}
    for name, workload in WORKLOADS.items():
        times = {o: [] for o in OPTIMIZERS}
        values = set()
        for _ in range(args.repeat):
            for optimizer in OPTIMIZERS:
                seconds, value = timed(optimizer, make, workload)
                times[optimizer].append(seconds)
                values.add(value)
        median = {o: statistics.median(t) for o, t in times.items()}
        rows[name] = {**median, "ratio": median["dask-gpu"] / median["dask"], "same_answer": len(values) == 1}
        print(f"{name:45s} dask {median['dask']:.3f} s  dask-gpu {median['dask-gpu']:.3f} s  "
              f"ratio {rows[name]['ratio']:.3f}  same answer {len(values) == 1}", flush=True)
    results["workloads"] = rows

    # The optimization alone, on a graph of 40,000 chunks, fused by dask (its local schedulers)
    # or not (distributed's client).
    x = da.random.RandomState(0).normal(size=(200_000, 200_000), chunks=1000)
    y = (x + 1)[::2, ::2].sum()
    graph, keys = y.__dask_graph__(), y.__dask_keys__()
    for fused in (True, False):
        optimize_seconds = {o: [] for o in OPTIMIZERS}
        with dask.config.set({"optimization.fuse.active": fused}):
            for _ in range(args.repeat):
                for name, optimizer in OPTIMIZERS.items():
                    gc.collect()
                    start = time.perf_counter()
                    optimizer(graph, keys)
                    optimize_seconds[name].append(time.perf_counter() - start)
        median = {o: statistics.median(t) for o, t in optimize_seconds.items()}
        label = f"optimize_40000_chunks{'' if fused else '_unfused'}"
        results[label] = {**median, "ratio": median["dask-gpu"] / median["dask"]}
        print(f"{label}: dask {median['dask']:.3f} s  dask-gpu {median['dask-gpu']:.3f} s  "
              f"ratio {median['dask-gpu'] / median['dask']:.3f}")
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
