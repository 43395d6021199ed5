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
    fail_to_host = False  # set on one to stand for a value that cannot move (no memory to make it contiguous)

    def __init__(self, values, allocation=None):
        self.values = np.asarray(values)
        self.allocation = allocation or Allocation(self.values.nbytes)

    def view(self, index):
        """A view: part of the values, the same allocation."""
        return StandInArray(self.values[index], self.allocation)


def rebuild(values):
    return StandInArray(values)


def to_host(x):
    if x.fail_to_host:
        raise MemoryError("no room to make it contiguous")
    return HostCopy(x.values.copy(), rebuild, x.values.nbytes)


def register():
    register_device_type(StandInArray, buffers=lambda x: [(id(x.allocation), x.allocation.nbytes)], to_host=to_host)


register()


def make(nbytes: int, fill: int = 1) -> StandInArray:
    """``nbytes`` of device data, every byte ``fill``."""
    return StandInArray(np.full(nbytes, fill % 256, dtype="uint8"))


def total(x: StandInArray) -> int:
    return int(x.values.sum(dtype="int64"))
