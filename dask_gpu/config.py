"""The ``gpu`` namespace of dask's configuration: defaults from gpu.yaml, resolution of keywords."""

from __future__ import annotations

import os

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
    namespace = dask.config.get("gpu", {})
    if not isinstance(namespace, dict):  # {"gpu": 5}: say so, not "'int' object is not subscriptable"
        raise ValueError(f"the gpu configuration must map gpu.* keys to values, not {namespace!r}")
    return dask.config.get(f"gpu.{key.replace('_', '-')}")
