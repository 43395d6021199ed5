"""The seed's 2 TB workload on one machine's GPUs, side by side, with the hardware's limit.

In one run, each timed from building the array to the result (``--repeat`` times, best kept):

- ``seed``: the seed's code as written (CuPy's ``RandomState``), on dask-gpu's cluster;
- ``dask_gpu_random``: the same workload drawing from ``dask_gpu.random``;
- ``limit_seed`` and ``limit_dask_gpu_random``: the same values, no Dask: a plain loop over
  the chunks of CuPy's RandomState and the fused kernel, or of the fused kernel alone (the
  values drawn where they are summed); ``one_kernel_dask_gpu_random``: one kernel over the
  whole array;
- ``dask_cuda_seed``: the seed's code on dask-cuda's cluster, without dask-gpu's graph
  optimization, when dask-cuda is installed.

    python benchmarks/seed_2tb.py [--size 500000] [--chunks 10000] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import time

import cupy
import dask
import dask.array as da
import numpy as np
from distributed import Client

from dask_gpu import LocalCUDACluster
from dask_gpu import random as gpu_random
from dask_gpu.array import distributions, fused
from dask_gpu.array.plan import Call, DrawLeaf, Index, Leaf, Plan
from dask_gpu.report import machine_dict


def seed(size, chunks):
    rs = da.random.RandomState(RandomState=cupy.random.RandomState)  # the seed's code, as written
    x = rs.normal(10, 1, size=(size, size), chunks=(chunks, chunks))
    return float((x + 1)[::2, ::2].sum().compute())


def dask_gpu_random(size, chunks):
    with dask.config.set({"array.backend": "gpu"}):
        x = gpu_random.default_rng(0).normal(10, 1, size=(size, size), chunks=(chunks, chunks))
    return float((x + 1)[::2, ::2].sum().compute())


SUM = Plan(Index((slice(None, None, 2),) * 2, Call(np.add, (Leaf(0), 1))), "sum", np.sum, (), ("value",))
DRAWN_SUM = Plan(Index((slice(None, None, 2),) * 2, Call(np.add, (DrawLeaf(0), 1))), "sum", np.sum, (), ("draw",))


def limit_seed(size, chunks):
    """CuPy's RandomState per chunk and the fused kernel, in a plain loop: the seed's values, no Dask."""
    total, generator = cupy.zeros((1, 1)), cupy.random.RandomState()
    for i in range((size // chunks) ** 2):
        generator.seed(i)
        block = generator.normal(10, 1, size=(chunks, chunks))
        total += fused.reduce(SUM, (block,))
        del block
    return float(total.get()[0, 0])


def _draw(size):
    return distributions.Draw((1, 2), 0, "normal", (10.0, 1.0), (size, size), np.dtype("f8"), "cupy")


def limit_dask_gpu_random(size, chunks):
    """The fused kernel of each chunk in a plain loop: each kept value drawn and summed in registers."""
    draw, total = _draw(size), cupy.zeros((1, 1))
    for i in range(0, size, chunks):
        for j in range(0, size, chunks):
            total += fused.reduce(DRAWN_SUM, ((draw, (range(i, i + chunks), range(j, j + chunks))),))
    return float(total.get()[0, 0])


def one_kernel_dask_gpu_random(size, chunks):
    """One fused kernel over the whole array."""
    draw = _draw(size)
    return float(fused.reduce(DRAWN_SUM, ((draw, distributions.whole(draw.shape)),)).get()[0, 0])


def timed(run, size, chunks, repeat) -> dict:
    times, answer = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        answer = run(size, chunks)
        cupy.cuda.Device().synchronize()
        times.append(time.perf_counter() - start)
    kept = (size // 2 + size % 2) ** 2
    return {"seconds": min(times), "all_seconds": times, "mean_of_kept": answer / kept}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=500_000)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/seed-2tb.json")
    args = parser.parse_args()
    shape = {"size": args.size, "chunks": args.chunks, "repeat": args.repeat}
    results = {"machine": machine_dict(), "workload": "(x + 1)[::2, ::2].sum(), x normal(10, 1)", **shape}
    runs = {}
    limits = [limit_dask_gpu_random, one_kernel_dask_gpu_random, limit_seed]
    for name, run in [(f.__name__, f) for f in limits]:
        run(args.chunks * 2, args.chunks)  # compiles the kernel
        runs[name] = timed(run, args.size, args.chunks, args.repeat)
        print(name, runs[name], flush=True)
    with LocalCUDACluster() as cluster, Client(cluster):
        for name, run in [("dask_gpu_random", dask_gpu_random), ("seed", seed)]:
            run(args.chunks * 2, args.chunks)  # warms the workers: imports, kernels
            runs[name] = timed(run, args.size, args.chunks, args.repeat)
            print(name, runs[name], flush=True)
    try:
        import dask_cuda
    except ImportError:
        dask_cuda = None
    if dask_cuda is not None:
        with dask.config.set({"gpu.array-optimize": False}):
            with dask_cuda.LocalCUDACluster() as cluster, Client(cluster):
                seed(args.chunks * 2, args.chunks)
                runs["dask_cuda_seed"] = timed(seed, args.size, args.chunks, 1)
                print("dask_cuda_seed", runs["dask_cuda_seed"], flush=True)
    seconds = {name: r["seconds"] for name, r in runs.items()}
    results["runs"] = runs
    results["ratios"] = {
        "seed_to_its_limit": seconds["seed"] / seconds["limit_seed"],
        "dask_gpu_random_to_its_limit": seconds["dask_gpu_random"] / seconds["limit_dask_gpu_random"],
    }
    if "dask_cuda_seed" in seconds:
        results["ratios"]["seed_dask_cuda_to_dask_gpu"] = seconds["dask_cuda_seed"] / seconds["seed"]
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    print(json.dumps(results["ratios"], indent=1))


if __name__ == "__main__":
    main()
