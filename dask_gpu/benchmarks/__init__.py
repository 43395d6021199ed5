"""The suites of ``dask gpu bench``: the seeds' array workloads (:mod:`.seed`), the dataframe ones
(:mod:`.dataframe`), the 22 TPC-H queries (:mod:`.tpch`) and hyper-parameter searches (:mod:`.ml`), with what they
share (:mod:`.common`). The repository's ``benchmarks/`` scripts are the development measurements (spilling,
transfers, scaling, start-up, first calls), run beside dask-cuda where it is installed; the suites here are what
users run.

Each suite's module fills in one interface, which the command finds by the suite's name (:func:`suite`):

- ``WORKLOADS``, by name;
- ``planned(options)``: the command's :class:`~.common.Options` checked and settled as the suite's
  :class:`~.common.Plan` (a ``ValueError`` or ``ImportError`` that names what is wrong, before anything runs);
- ``data_lines(plan)`` and ``write_data(plan, log)``, where the suite writes its data first: the lines that
  writing logs (0: the data is there) and the writing;
- ``run(plan, progress, checkpoint, status)``: the result, a dict that the JSON holds;
- ``table(result)`` and ``plot(result, path)``.
"""

from __future__ import annotations

import importlib

SUITES = {"array": "seed", "dataframe": "dataframe", "tpch": "tpch.suite", "ml": "ml"}  # name -> module here

# the options that belong to some suites only, with those suites
OPTIONS = {"--shape": ("array",), "--chunks": ("array",), "--cpu-budget": ("array",), "--rows": ("dataframe",),
           "--scale": ("tpch",), "--engines": ("dataframe", "tpch"), "--layout": ("tpch",),
           "--data": ("dataframe", "tpch")}


def suite(name: str):
    """The module of the suite ``name``."""
    return importlib.import_module(f"{__name__}.{SUITES[name]}")
