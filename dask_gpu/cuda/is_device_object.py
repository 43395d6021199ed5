"""``dask_cuda.is_device_object``: dask_gpu.memory.dispatch.is_device, True for values (or lists, tuples and
dicts of them) of the device types the workers' store moves: CuPy, cupyx sparse, cuDF, PyTorch CUDA tensors,
and those given to ``dask_gpu.register_device_type``."""

from dask_gpu.memory.dispatch import is_device as is_device_object

__all__ = ["is_device_object"]
