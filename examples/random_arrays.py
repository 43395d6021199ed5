"""Counter-based random arrays (``dask_gpu.random``): the same numbers for any chunking, on the CPU and the GPU.

    python examples/random_arrays.py [--size 4000]

Draws a normal array twice with different chunks and checks that every value is the same, that
``x[::2, ::2]`` equals drawing only those values' chunks, and that a few distributions have the mean
they should. On GPUs the chunks are CuPy arrays (``array.backend: gpu``); without a GPU and CuPy, NumPy
chunks on simulated GPU workers hold bit-identical values, and a line says so.
"""

import argparse
import math
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


if __name__ == "__main__":  # the workers are processes of their own: this guard keeps them from running it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4_000, help="side of the square arrays")
    args = parser.parse_args()
    n = args.size
    backend = "gpu" if on_gpus() else "numpy"

    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster), \
            dask.config.set({"array.backend": backend}):
        rng = dask_gpu.random.default_rng(42)
        coarse = rng.normal(10, 1, size=(n, n), chunks=n // 2)
        fine = dask_gpu.random.default_rng(42).normal(10, 1, size=(n, n), chunks=n // 8)
        same = bool(da.all(coarse == fine).compute())
        print(f"{n} x {n} normal(10, 1) with chunks {n // 2} and {n // 8}: every value the same: {same}")

        strided = float(coarse[::2, ::2].sum().compute())  # draws only the values it keeps
        whole = float(fine.compute()[::2, ::2].sum())
        print(f"x[::2, ::2].sum() drawn sliced {strided:.6f}, sliced after drawing {whole:.6f}: "
              f"{'equal' if math.isclose(strided, whole, rel_tol=1e-12) else 'DIFFERENT'}")

        for name, call, mean in [("uniform(0, 2)", lambda r: r.uniform(0, 2, size=n * n, chunks=n * n // 4), 1.0),
                                 ("exponential(3)", lambda r: r.exponential(3, size=n * n, chunks=n * n // 4), 3.0),
                                 ("lognormal(0, 0.5)", lambda r: r.lognormal(0, 0.5, size=n * n, chunks=n * n // 4),
                                  math.exp(0.125))]:
            got = float(call(dask_gpu.random.default_rng(7)).mean().compute())
            verdict = "right" if abs(got - mean) < 0.01 * mean else "WRONG"
            print(f"{name}: mean {got:.4f}, expected {mean:.4f}: {verdict}")
