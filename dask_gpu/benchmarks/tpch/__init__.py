"""The TPC-H suite: DuckDB's data and answers (:mod:`.data`), the queries written for Dask DataFrame
(:mod:`.dask_queries`) and for Polars (:mod:`.polars_queries`), and the run over every engine (:mod:`.suite`)."""
