"""dask-cuda names with no dask-gpu equivalent: an AttributeError that says why, and what to use."""


def absent(module: str, reasons: dict[str, str]):
    """A module ``__getattr__`` for the dask-cuda names in ``reasons``."""

    def __getattr__(name):
        if name in reasons:
            raise AttributeError(f"dask_cuda.{module}.{name} has no dask-gpu equivalent: {reasons[name]}")
        raise AttributeError(f"module 'dask_gpu.cuda.{module}' has no attribute {name!r}")

    return __getattr__
