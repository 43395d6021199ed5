"""The seed's 2 TB workload, (x + 1)[::2, ::2].sum() on a normal random array, on this machine's GPUs.

    python examples/seed_2tb.py [--size 500000] [--chunks 10000] [--mean] [--rng seed|gpu|counter]

--rng seed runs the seed's code as written (CuPy's legacy RandomState); --rng gpu draws from
the ``gpu`` array backend's ``da.random.default_rng``; --rng counter from ``dask_gpu.random``,
whose values are drawn inside the fused kernel. --mean runs the seed's mean variant.

Without a GPU and CuPy it runs anyway, on simulated GPU workers (DASK_GPU__SIMULATE=N chooses how many)
with NumPy chunks, at a small size unless --size says otherwise, and says so.
"""

import argparse
import math
import time
import warnings
from importlib.util import find_spec

import dask
import dask.array as da
from distributed import Client

import dask_gpu
import dask_gpu.random
from dask_gpu import LocalCUDACluster


def on_gpus() -> bool:
    """Whether chunks can be CuPy arrays; where they cannot, simulated GPUs stand in, and a line says so."""
    if find_spec("cupy") is not None and dask_gpu.discover().state is dask_gpu.State.AVAILABLE:
        return True
    if not dask_gpu.discover().usable:
        dask.config.set({"gpu.simulate": 2})
    print(f"no GPU with CuPy here: {len(dask_gpu.discover().devices)} simulated GPU workers, NumPy chunks")
    warnings.filterwarnings("ignore", "dask_gpu.random makes NumPy chunks")  # the line above says so
    return False


def array(rng: str, size: int, chunks: int, gpu: bool):
    if rng == "seed":
        if gpu:
            import cupy

            return da.random.RandomState(RandomState=cupy.random.RandomState).normal(
                10, 1, size=(size, size), chunks=(chunks, chunks))  # the seed's code
        return da.random.RandomState().normal(10, 1, size=(size, size), chunks=(chunks, chunks))
    with dask.config.set({"array.backend": "gpu" if gpu else "numpy"}):
        generator = da.random.default_rng() if rng == "gpu" else dask_gpu.random.default_rng()
        return generator.normal(10, 1, size=(size, size), chunks=chunks)


if __name__ == "__main__":  # the workers are processes of their own: this guard keeps them from running it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, help="side of the square array [500000 on GPUs, else 10000]")
    parser.add_argument("--chunks", type=int, help="side of a chunk [10000 on GPUs, else 1000]")
    parser.add_argument("--mean", action="store_true")
    parser.add_argument("--rng", choices=["seed", "gpu", "counter"], default="seed")
    args = parser.parse_args()
    gpu = on_gpus()
    size = args.size or (500_000 if gpu else 10_000)
    chunks = args.chunks or min(size, 10_000 if gpu else 1_000)

    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster):
        x = array(args.rng, size, chunks, gpu)
        y = (x + 1)[::2, ::2]
        start = time.perf_counter()
        result = float((y.mean() if args.mean else y.sum()).compute())
        seconds = time.perf_counter() - start
        kept = math.ceil(size / 2) ** 2
        mean = result if args.mean else result / kept
        right = abs(mean - 11) < 6 / math.sqrt(kept)  # six standard errors of the mean of N(11, 1) values
        print(f"{x.nbytes / 1e9:.3g} GB, {len(cluster.workers)} GPU worker(s): {result!r} in {seconds:.2f} s; "
              f"mean {mean:.4f}, {'right' if right else 'WRONG'} (expected 11)")
