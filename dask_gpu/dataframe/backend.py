"""The ``gpu`` dataframe backend: ``dask.config.set({"dataframe.backend": "gpu"})``.

dask-cudf's backend (cuDF partitions; ``to_backend("gpu")``, ``read_csv`` and the rest as ``"cudf"``
has them), with parquet read in partitions planned for the GPU workers that will hold them
(:mod:`.parquet`): about ``gpu.partition-size`` of the smallest GPU of what the query keeps of the files,
each read in one cuDF call, as many as a multiple of the GPU workers where there are several.
``blocksize=``, ``filters=`` and the reader's other options ask for dask-cudf's reader instead.
dask-cudf is imported at the first call, not with this module.
"""

from __future__ import annotations

import functools

from dask.dataframe.backends import DataFrameBackendEntrypoint

from dask_gpu.dataframe import collections, meta, parquet, sizing, start, tokens

ENGINE = "cudf"  # the library of the partitions that this backend's parquet reads make


@functools.cache  # a failed import is not kept: it is tried again
def cudf_backend():
    """dask-cudf's backend, with dask-gpu's metas, tokens and collections for cuDF in place (imported at the first
    call)."""
    try:
        from dask_cudf.backends import CudfBackendEntrypoint
    except ImportError as e:
        raise ImportError(f"the 'gpu' dataframe backend needs cuDF and dask-cudf: pip install dask-cudf-cu12 "
                          f"or dask-cudf-cu13 ({e})") from e
    meta.install()
    tokens.register()
    collections.register()
    return CudfBackendEntrypoint


def _planned(path, columns=None, storage_options=None):
    """The read of :mod:`.parquet`, sized for the GPU workers; None where it does not take these files or
    where there is no GPU to size for."""
    gpus = sizing.gpu_workers()
    if not gpus:
        return None
    return parquet.read_parquet(path, columns, engine=ENGINE, partition_bytes=sizing.partition_bytes(min(gpus)),
                                gpus=len(gpus), storage_options=storage_options)


def _dask_cudf():
    """dask-cudf's backend, for a call of the user's: the client's workers warm cuDF, where they did not yet."""
    found = cudf_backend()
    start.warm_workers()
    return found


class GPUBackendEntrypoint(DataFrameBackendEntrypoint):
    @staticmethod
    def read_parquet(path, *args, blocksize="default", **kwargs):
        read = _dask_cudf().read_parquet
        if blocksize == "default" and not args and set(kwargs) <= {"columns", "storage_options"}:
            df = _planned(path, **kwargs)
            if df is not None:
                return df
        return read(path, *args, blocksize=blocksize, **kwargs)  # dask-cudf's own sizing unless given

    @staticmethod
    def to_backend(data, **kwargs):
        return _dask_cudf().to_backend(data, **kwargs)

    @staticmethod
    def from_dict(data, npartitions, **kwargs):
        return _dask_cudf().from_dict(data, npartitions, **kwargs)

    @staticmethod
    def read_csv(*args, **kwargs):
        return _dask_cudf().read_csv(*args, **kwargs)

    @staticmethod
    def read_json(*args, **kwargs):
        return _dask_cudf().read_json(*args, **kwargs)

    @staticmethod
    def read_orc(*args, **kwargs):
        return _dask_cudf().read_orc(*args, **kwargs)
