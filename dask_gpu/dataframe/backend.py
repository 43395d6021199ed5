"""The ``gpu`` dataframe backend: ``dask.config.set({"dataframe.backend": "gpu"})``.

dask-cudf's backend (cuDF partitions; ``to_backend("gpu")`` and the rest as ``"cudf"`` has them),
with parquet partitions sized for the GPU workers that will hold them (:mod:`.sizing`): each file
is read on its own and the files are joined into even partitions of about ``gpu.partition-size``
of the smallest GPU. ``blocksize=`` asks for dask-cudf's own sizing instead.
"""

from __future__ import annotations

from dask_cudf.backends import CudfBackendEntrypoint

from dask_gpu.dataframe import sizing


class GPUBackendEntrypoint(CudfBackendEntrypoint):
    @staticmethod
    def read_parquet(path, *args, blocksize="default", **kwargs):
        read = CudfBackendEntrypoint.read_parquet
        if blocksize != "default":
            return read(path, *args, blocksize=blocksize, **kwargs)
        df = read(path, *args, blocksize=None, **kwargs)  # a partition per file
        gpus = sizing.gpu_workers()
        if not gpus:
            return df
        stored = sizing.stored_bytes(path, kwargs.get("storage_options"))
        count = sizing.partition_count(stored, df.npartitions, min(gpus), len(gpus))
        return df.repartition(npartitions=count) if count < df.npartitions else df
