"""The ``gpu`` dataframe backend: ``dask.config.set({"dataframe.backend": "gpu"})``.

dask-cudf's backend (cuDF partitions; ``to_backend("gpu")``, ``read_csv`` and the rest as ``"cudf"``
has them), with parquet partitions sized for the GPU workers that will hold them (:mod:`.sizing`):
files are read several in one call and joined into partitions of about ``gpu.partition-size`` of the
smallest GPU, as many as a multiple of the GPU workers. ``blocksize=`` asks for dask-cudf's sizing instead.
A read of files that have not changed since the same read before takes that read's expression again: the
client then finds the dataset's footers, schema and partitioning, which dask computes on every read, already
there.
dask-cudf is imported at the first call, not with this module.
"""

from __future__ import annotations

from dask.base import tokenize
from dask.dataframe.backends import DataFrameBackendEntrypoint
from dask.dataframe.dask_expr import new_collection

from dask_gpu.dataframe import meta, sizing


def _cudf():
    try:
        from dask_cudf.backends import CudfBackendEntrypoint
    except ImportError as e:
        raise ImportError(f"the 'gpu' dataframe backend needs cuDF and dask-cudf: pip install dask-cudf-cu12 "
                          f"or dask-cudf-cu13 ({e})") from e
    meta.install()
    return CudfBackendEntrypoint


READS = 256  # reads kept; past it, they are made again
_reads: dict = {}  # (arguments, the files' listing, the GPUs) -> the read's expression


def _read(read, path, args, kwargs, gpus, stored):
    if not gpus:
        return read(path, *args, blocksize=None, **kwargs)  # a partition per file
    # dask-cudf reads several files in one call (faster than one call per file) once the graph is
    # optimized. The repartition on top gives a multiple of the GPUs, and a partition count that the
    # optimization does not change: a bare fused read, persisted with Client.persist, keeps the count
    # of before it and names partitions that were never made.
    df = read(path, *args, blocksize=sizing.partition_bytes(min(gpus)), **kwargs)
    return df.repartition(npartitions=sizing.partition_count(stored, df.npartitions, min(gpus), len(gpus)))


class GPUBackendEntrypoint(DataFrameBackendEntrypoint):
    @staticmethod
    def read_parquet(path, *args, blocksize="default", **kwargs):
        read = _cudf().read_parquet
        if blocksize != "default":
            return read(path, *args, blocksize=blocksize, **kwargs)
        gpus = sizing.gpu_workers()
        stored, files = sizing.listing(path, kwargs.get("storage_options"))
        key = (tokenize(path, args, kwargs), files, tuple(gpus), sizing.partition_size())
        if key not in _reads:
            if len(_reads) >= READS:
                _reads.clear()
            _reads[key] = _read(read, path, args, kwargs, gpus, stored).expr
        return new_collection(_reads[key])  # a collection of its own over the same expression

    @staticmethod
    def to_backend(data, **kwargs):
        return _cudf().to_backend(data, **kwargs)

    @staticmethod
    def from_dict(data, npartitions, **kwargs):
        return _cudf().from_dict(data, npartitions, **kwargs)

    @staticmethod
    def read_csv(*args, **kwargs):
        return _cudf().read_csv(*args, **kwargs)

    @staticmethod
    def read_json(*args, **kwargs):
        return _cudf().read_json(*args, **kwargs)

    @staticmethod
    def read_orc(*args, **kwargs):
        return _cudf().read_orc(*args, **kwargs)
