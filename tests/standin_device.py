"""A stand-in device type for worker processes without a GPU: host values plus the allocation they hold.

Importing this module registers it through the public ``register_device_type``, so a worker that
preloads it (``--preload standin_device``) or imports it in a task spills these objects as it would
CuPy arrays.
"""

import numpy as np

from dask_gpu.memory.dispatch import HostCopy, register_device_type


class Allocation:
    def __init__(self, nbytes):
        self.nbytes = nbytes


class StandInArray:
    def __init__(self, values):
        self.values = np.asarray(values)
        self.allocation = Allocation(self.values.nbytes)


def rebuild(values):
    return StandInArray(values)


def to_host(x):
    return HostCopy(x.values.copy(), rebuild, x.values.nbytes)


register_device_type(StandInArray, buffers=lambda x: [(id(x.allocation), x.allocation.nbytes)], to_host=to_host)


def make(nbytes: int, fill: int) -> StandInArray:
    """``nbytes`` of device data, every byte ``fill``."""
    return StandInArray(np.full(nbytes, fill % 256, dtype="uint8"))


def total(x: StandInArray) -> int:
    return int(x.values.sum(dtype="int64"))
