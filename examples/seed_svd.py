"""The seed's SVD example: a tall-and-skinny random matrix on the GPUs of this machine.

    python examples/seed_svd.py
"""

import cupy
import dask
import dask.array
from distributed import Client

from dask_gpu import LocalCUDACluster

if __name__ == "__main__":
    with LocalCUDACluster() as cluster, Client(cluster):
        dask.config.set({"array.backend": "cupy"})
        rs = dask.array.random.RandomState(RandomState=cupy.random.RandomState)
        x = rs.random((10000, 1000), chunks=(1000, 1000))
        u, s, v = dask.array.linalg.svd(x)
        x, u, s, v = dask.compute(x, u, s, v)
        error = float(cupy.linalg.norm(x - (u * s) @ v) / cupy.linalg.norm(x))
        print(f"u {u.shape}, s {s.shape}, v {v.shape}; relative reconstruction error {error:.1e}")
