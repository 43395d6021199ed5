"""The ``gpu`` namespace of dask's configuration: defaults from gpu.yaml, resolution of keywords."""

from __future__ import annotations

import os
from collections.abc import Mapping

import dask
import yaml

_here = os.path.dirname(__file__)

with open(os.path.join(_here, "gpu.yaml")) as f:
    defaults = yaml.safe_load(f)

dask.config.update_defaults(defaults)


def get(key: str, value=None):
    """``value`` when given, else ``gpu.<key>`` from dask's configuration.

    Keyword arguments default to None and fall back to configuration, so that
    ``DASK_GPU__NTHREADS=2`` or a YAML file changes every place at once.
    """
    if value is not None:
        return value
    namespace()
    return dask.config.get(f"gpu.{key.replace('_', '-')}")


def namespace() -> Mapping:
    """The ``gpu`` configuration; {"gpu": 5} is an error that says so, not "'int' object is not subscriptable"."""
    given = dask.config.get("gpu", {})
    if not isinstance(given, Mapping):
        raise ValueError(f"the gpu configuration must map gpu.* keys to values, not {given!r}")
    return given
