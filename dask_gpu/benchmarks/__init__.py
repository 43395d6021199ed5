"""The suites of ``dask gpu bench``: the seeds' array workloads (:mod:`.seed`), the dataframe ones
(:mod:`.dataframe`) and the 22 TPC-H queries (:mod:`.tpch`), with what they share (:mod:`.common`). The
repository's ``benchmarks/`` scripts are the development measurements (spilling, transfers, scaling,
start-up, first calls), run beside dask-cuda where it is installed; the suites here are what users run.
"""
