"""Device memory and spilling: more data than ``device_memory_limit`` allows, moved to host memory and back.

    python examples/spilling.py [--arrays 40] [--mb 8] [--limit 64MB]

One GPU worker keeps at most --limit of device data; past it the least recently used arrays move to host
memory, and come back when a task reads them. ``dask_gpu.memory_stats(client)`` says how much moved each
way. Without a GPU and CuPy, a simulated GPU worker holds host arrays registered as a device type
(``dask_gpu.register_device_type``, the way other libraries' device types join the tiers), and a line
says so.
"""

import argparse
from importlib.util import find_spec

import dask
import numpy as np
from dask.utils import format_bytes
from distributed import Client, wait

import dask_gpu
from dask_gpu import LocalCUDACluster


class HostArray:
    """Stands in for a device array on a machine without a GPU: NumPy values, spilled as a device array is."""

    def __init__(self, values):
        self.values = values


def register_host_array():
    """Make HostArray a device type in this process (run in each worker)."""
    dask_gpu.register_device_type(HostArray, buffers=lambda x: [(id(x.values), x.values.nbytes)],
                                  to_host=lambda x: dask_gpu.HostCopy(x.values, HostArray, x.values.nbytes))


def make(i: int, nbytes: int, gpu: bool):
    if gpu:
        import cupy

        return cupy.full(nbytes, i % 256, dtype="uint8")
    return HostArray(np.full(nbytes, i % 256, dtype="uint8"))


def total(x) -> int:
    return int((x if not isinstance(x, HostArray) else x.values).sum(dtype="int64"))


if __name__ == "__main__":  # the workers are processes of their own: this guard keeps them from running it
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arrays", type=int, default=40)
    parser.add_argument("--mb", type=int, default=8, help="megabytes per array")
    parser.add_argument("--limit", default="64MB", help="device_memory_limit of the worker")
    args = parser.parse_args()
    gpu = find_spec("cupy") is not None and dask_gpu.discover().state is dask_gpu.State.AVAILABLE
    if not gpu:
        if not dask_gpu.discover().usable:
            dask.config.set({"gpu.simulate": 1})
        print("no GPU with CuPy here: a simulated GPU worker holding host arrays registered as a device type")
    nbytes = args.mb * 10**6

    with LocalCUDACluster(n_workers=1, device_memory_limit=args.limit, dashboard_address=False) as cluster, \
            Client(cluster) as client:
        if not gpu:
            client.run(register_host_array)
        arrays = client.map(make, range(args.arrays), nbytes=nbytes, gpu=gpu, pure=False)  # kept by the worker
        wait(arrays)  # all made: the first ones have moved to host memory by now
        totals = client.gather(client.map(total, arrays))  # each read brings a spilled array back to the device
        right = totals == [nbytes * (i % 256) for i in range(args.arrays)]
        (stats,) = dask_gpu.memory_stats(client).values()
        print(f"{args.arrays} arrays of {format_bytes(nbytes)} through a device_memory_limit of {args.limit}: "
              f"{format_bytes(stats['device-bytes'])} on the device, {format_bytes(stats['host-bytes'])} in host "
              f"memory; {stats['device-to-host-count']} moves to host ({format_bytes(stats['device-to-host-bytes'])}), "
              f"{stats['host-to-device-count']} back; sums {'right' if right else 'WRONG'}")
