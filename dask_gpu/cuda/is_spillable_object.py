"""``dask_cuda.is_spillable_object``: dask_gpu.memory.dispatch.spills_itself (a value whose library moves it
itself: cuDF with its own spilling on), and cuDF's spilling state."""

from dask_gpu.memory.dispatch import cudf_spills_itself as cudf_spilling_status
from dask_gpu.memory.dispatch import spills_itself as is_spillable_object

__all__ = ["cudf_spilling_status", "is_spillable_object"]
