"""The seed workloads as benchmarks: ``python -m dask_gpu.benchmarks.NAME`` or ``dask gpu bench``."""
