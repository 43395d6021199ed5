"""The ``gpu`` array backend and its random numbers."""

import importlib.metadata

import dask
import dask.array as da
import numpy as np
import pytest

from dask_gpu import random
from dask_gpu.array import backend


def test_backend_is_registered_with_dask():
    points = importlib.metadata.entry_points(group="dask.array.backends")
    assert {p.name: p.value for p in points}["gpu"] == "dask_gpu.array.backend:GPUBackendEntrypoint"


def test_without_cupy_the_backend_says_what_to_install(monkeypatch):
    monkeypatch.setattr(backend, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="needs CuPy: pip install 'dask-gpu\\[cuda12\\]'"):
        backend.GPUBackendEntrypoint()


gpu = pytest.mark.gpu


def cupy_chunks(x):
    import cupy

    return isinstance(x._meta, cupy.ndarray) and isinstance(x.blocks[0, 0].compute(), cupy.ndarray)


@gpu
def test_creation_functions_make_cupy_chunks():
    with dask.config.set({"array.backend": "gpu"}):
        arrays = [da.ones((4, 4), chunks=2), da.zeros((4, 4), chunks=2), da.full((4, 4), 3.0, chunks=2)]
        arrays.append(da.arange(16, chunks=4).reshape(4, 4))
    assert all(cupy_chunks(x) for x in arrays)
    assert float(arrays[2].sum().compute()) == 48.0


@gpu
def test_default_rng_normal_and_the_seed_workload():
    with dask.config.set({"array.backend": "gpu"}):
        rng = da.random.default_rng(0)
        x = rng.normal(10, 1, size=(4000, 4000), chunks=1000)
        again = da.random.default_rng(0).normal(10, 1, size=(4000, 4000), chunks=1000)
        other = da.random.default_rng(1).normal(10, 1, size=(4000, 4000), chunks=1000)
    assert cupy_chunks(x)
    assert bool((x == again).all().compute()) and not bool((x == other).all().compute())
    mean, std = float(x.mean().compute()), float(x.std().compute())
    assert abs(mean - 10) < 5e-3 and abs(std - 1) < 5e-3
    assert abs(float((x + 1)[::2, ::2].mean().compute()) - 11) < 1e-2  # the seed's mean variant


MOMENTS = {  # method: (args, expected mean, expected variance)
    "normal": ((2.0, 3.0), 2.0, 9.0),
    "lognormal": ((0.0, 0.5), np.exp(0.125), (np.exp(0.25) - 1) * np.exp(0.25)),
    "standard_exponential": ((), 1.0, 1.0),
    "exponential": ((2.0,), 2.0, 4.0),
    "laplace": ((1.0, 2.0), 1.0, 8.0),
    "logistic": ((1.0, 2.0), 1.0, np.pi**2 * 4 / 3),
    "gumbel": ((1.0, 2.0), 1.0 + 2.0 * np.euler_gamma, np.pi**2 * 4 / 6),
    "rayleigh": ((2.0,), 2.0 * np.sqrt(np.pi / 2), (4 - np.pi) / 2 * 4),
}


@gpu
@pytest.mark.parametrize("method", sorted(MOMENTS))
def test_filled_in_distributions(method):
    import cupy

    args, mean, var = MOMENTS[method]
    values = getattr(random.default_rng(random.Philox(7)), method)(*args, size=2_000_000)  # one block's
    assert isinstance(values, cupy.ndarray) and values.shape == (2_000_000,)
    # five standard errors of the mean, and a loose bound on the variance
    assert abs(float(values.mean()) - mean) < 5 * np.sqrt(var / values.size)
    assert abs(float(values.var()) / var - 1) < 0.05
    with dask.config.set({"array.backend": "gpu"}):
        x = getattr(da.random.default_rng(3), method)(*args, size=(1000, 1000), chunks=500)
    assert cupy_chunks(x)
