"""``dask_cuda.device_host_file``: DeviceHostFile is dask-gpu's store, DeviceHostDiskStore
(dask_gpu.memory.store), device -> host -> disk; device_to_host, host_to_device and DeviceSerialized are
dask_gpu.memory.dispatch's to_host, to_device and HostCopy."""

from dask_gpu.cuda._absent import absent
from dask_gpu.memory.dispatch import HostCopy as DeviceSerialized
from dask_gpu.memory.dispatch import to_device as host_to_device
from dask_gpu.memory.dispatch import to_host as device_to_host
from dask_gpu.memory.store import DeviceHostDiskStore

__all__ = ["DeviceHostFile", "DeviceSerialized", "device_to_host", "host_to_device"]


class DeviceHostFile(DeviceHostDiskStore):
    """DeviceHostDiskStore with dask-cuda's signature: a limit of None or 0 is no limit."""

    def __init__(self, worker_local_directory=None, *, device_memory_limit=None, memory_limit=None,
                 log_spilling=False):
        super().__init__(device_memory_limit or 0, memory_limit or 0, worker_local_directory, log_spilling)

    @property
    def others(self) -> dict:
        """dask-cuda's tier for values it could not spill; every value here is in the device, host or disk tier."""
        return {}


__getattr__ = absent("device_host_file", {"LoggedBuffer": "log_spilling=True logs the store's moves"})
