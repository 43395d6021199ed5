"""``dask_cuda.utils_test``: worker and nanny classes for tests of several devices on a machine with fewer."""

from typing import Literal

from distributed import Nanny, Worker

__all__ = ["IncreasedCloseTimeoutNanny", "MockWorker"]


class MockWorker(Worker):
    """A worker whose system monitor does not ask NVML for devices, so that ``CUDA_VISIBLE_DEVICES`` may name
    devices the machine does not have (distributed's ``distributed.diagnostics.nvml`` set to False)."""

    def __init__(self, *args, **kwargs):
        import dask

        with dask.config.set({"distributed.diagnostics.nvml": False}):
            super().__init__(*args, **kwargs)


class IncreasedCloseTimeoutNanny(Nanny):
    """A nanny that gives its worker 30 s to close (distributed's default is 5 s): for tests on a loaded machine."""

    async def close(self, timeout: float = 30.0, reason: str = "nanny-close") -> Literal["OK"]:
        return await super().close(timeout=timeout, reason=reason)
