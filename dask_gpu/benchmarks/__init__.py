"""The suites of ``dask gpu bench``: the seeds' array workloads (:mod:`.seed`) and the dataframe ones
(:mod:`.dataframe`), with what they share (:mod:`.common`). The repository's ``benchmarks/`` scripts are
the development measurements (spilling, transfers, scaling, start-up, first calls), run beside
dask-cuda where it is installed; the suites here are what users run.
"""
