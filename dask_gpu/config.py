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
    return dask.config.get(f"gpu.{key.replace('_', '-')}")
