"""The seed's SVD example: a tall-and-skinny random matrix on the GPUs of this machine.

    python examples/seed_svd.py [--rows 10000] [--cols 1000] [--chunks 1000]

Without a GPU and CuPy it runs anyway, on simulated GPU workers with NumPy chunks, and says so.
"""

import argparse
import warnings
from importlib.util import find_spec

import dask
import dask.array as da
import numpy as np
from distributed import Client

import dask_gpu
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
    parser.add_argument("--rows", type=int, default=10_000)
    parser.add_argument("--cols", type=int, default=1_000)
    parser.add_argument("--chunks", type=int, default=1_000, help="rows per chunk")
    args = parser.parse_args()
    gpu = on_gpus()

    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster):
        if gpu:
            import cupy

            rs = da.random.RandomState(RandomState=cupy.random.RandomState)  # the seed's code
        else:
            rs = da.random.RandomState()
        x = rs.random((args.rows, args.cols), chunks=(args.chunks, args.cols))
        u, s, v = da.linalg.svd(x)
        x, u, s, v = dask.compute(x, u, s, v)
        norm = cupy.linalg.norm if gpu else np.linalg.norm
        error = float(norm(x - (u * s) @ v) / norm(x))
        print(f"u {u.shape}, s {s.shape}, v {v.shape}; relative reconstruction error {error:.1e}, "
              f"{'right' if error < 1e-6 else 'WRONG'}")
