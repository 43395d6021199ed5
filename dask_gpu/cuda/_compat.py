"""``dask_cuda._compat``: which versions of the libraries around it are installed."""

import functools
import importlib.metadata

from packaging.version import Version

__all__ = ["CUDA_CORE_0_5_0"]


@functools.cache
def CUDA_CORE_0_5_0() -> bool:
    """Whether cuda-core 0.5 or later is installed."""
    try:
        return Version(importlib.metadata.version("cuda-core")) >= Version("0.5.0")
    except importlib.metadata.PackageNotFoundError:
        return False
