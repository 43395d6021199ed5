"""The seed's 2 TB workload, (x + 1)[::2, ::2].sum() on a normal random array, on this machine's GPUs.

    python examples/seed_2tb.py [--size 500000] [--chunks 10000] [--mean] [--rng seed|gpu|counter]

--rng seed runs the seed's code as written (CuPy's legacy RandomState); --rng gpu draws from
the ``gpu`` array backend's ``da.random.default_rng``; --rng counter from ``dask_gpu.random``,
whose values are drawn inside the fused kernel. --mean runs the seed's mean variant.
"""

import argparse
import time

import cupy
import dask
import dask.array as da
from distributed import Client

import dask_gpu.random
from dask_gpu import LocalCUDACluster

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=500_000)
    parser.add_argument("--chunks", type=int, default=10_000)
    parser.add_argument("--mean", action="store_true")
    parser.add_argument("--rng", choices=["seed", "gpu", "counter"], default="seed")
    args = parser.parse_args()

    with LocalCUDACluster() as cluster, Client(cluster):
        if args.rng == "seed":
            rs = da.random.RandomState(RandomState=cupy.random.RandomState)  # the seed's code
            x = rs.normal(10, 1, size=(args.size, args.size), chunks=(args.chunks, args.chunks))
        else:
            with dask.config.set({"array.backend": "gpu"}):
                rng = da.random.default_rng() if args.rng == "gpu" else dask_gpu.random.default_rng()
                x = rng.normal(10, 1, size=(args.size, args.size), chunks=args.chunks)
        y = (x + 1)[::2, ::2]
        start = time.perf_counter()
        result = float((y.mean() if args.mean else y.sum()).compute())
        seconds = time.perf_counter() - start
        print(f"{x.nbytes / 1e9:.0f} GB, {len(cluster.workers)} GPU(s): {result!r} in {seconds:.2f} s")
