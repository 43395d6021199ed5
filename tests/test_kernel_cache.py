"""The machine's kernel cache (gpu.kernel-cache) and ``dask gpu warmup``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import dask
import pytest
from click.testing import CliRunner
from distributed import Client

from dask_gpu import LocalCUDACluster
from dask_gpu.cli import gpu
from dask_gpu.kernel_cache import cupy_cache_dir, kernel_cache_env, use_kernel_cache


def test_unset_leaves_cupy_its_own_cache():
    with dask.config.set({"gpu.kernel-cache": None}):
        assert kernel_cache_env() == {}


def test_the_directory_is_made_and_given_as_cupy_cache_dir(tmp_path):
    cache = tmp_path / "kernels" / "deep"
    with dask.config.set({"gpu.kernel-cache": str(cache)}):
        assert kernel_cache_env() == {"CUPY_CACHE_DIR": str(cache)}
    assert cache.is_dir()


def test_a_directory_that_cannot_be_made_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("")
    with dask.config.set({"gpu.kernel-cache": str(tmp_path / "file" / "kernels")}):
        with pytest.raises(ValueError, match="gpu.kernel-cache=.* cannot be made"):
            kernel_cache_env()


class Backend:
    """CuPy 14's disk cache backend, as far as dask-gpu uses it."""

    def __init__(self, cache_dir=None):
        self._cache_dir = cache_dir


@pytest.fixture
def cupy_compiler(monkeypatch):
    compiler = types.ModuleType("cupy.cuda.compiler")
    compiler._kernel_cache_backend = Backend("/home/someone/.cupy/kernel_cache")  # read when CuPy was imported
    compiler._set_kernel_cache_backend = lambda backend: setattr(compiler, "_kernel_cache_backend", backend)
    monkeypatch.setitem(sys.modules, "cupy.cuda.compiler", compiler)
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    return compiler


def test_cupy_imported_first_is_pointed_at_the_directory(cupy_compiler, tmp_path):
    use_kernel_cache(str(tmp_path))
    assert cupy_compiler._kernel_cache_backend._cache_dir == str(tmp_path) == cupy_cache_dir()
    assert os.environ["CUPY_CACHE_DIR"] == str(tmp_path)


def test_nothing_asked_changes_nothing(cupy_compiler):
    before = cupy_compiler._kernel_cache_backend
    use_kernel_cache()
    assert cupy_compiler._kernel_cache_backend is before and "CUPY_CACHE_DIR" not in os.environ


def worker_cache():
    return os.environ.get("CUPY_CACHE_DIR")


def test_every_gpu_worker_gets_the_directory(simulate, tmp_path):
    simulate(2)
    with dask.config.set({"gpu.kernel-cache": str(tmp_path / "k")}):
        with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
            assert set(client.run(worker_cache).values()) == {str(tmp_path / "k")}


def test_warmup_without_cupy_says_what_to_install(monkeypatch):
    monkeypatch.setattr("dask_gpu.cli.find_spec", lambda name: None)
    result = CliRunner().invoke(gpu, ["warmup"])
    assert result.exit_code == 1 and "CuPy is not installed: pip install" in result.output


def test_warmup_on_simulated_devices_says_it_needs_a_gpu(simulate, monkeypatch):
    simulate(1)
    monkeypatch.setattr("dask_gpu.cli.find_spec", lambda name: object())
    result = CliRunner().invoke(gpu, ["warmup"])
    assert result.exit_code == 1 and "none is usable" in result.output, result.output


SEED = textwrap.dedent("""
    import json, os, sys
    import dask.array as da
    from distributed import Client
    from dask_gpu import LocalCUDACluster

    if __name__ == "__main__":
        import cupy
        with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
            rs = da.random.RandomState(RandomState=cupy.random.RandomState)
            x = rs.normal(10, 1, size=(4000, 4000), chunks=1000)
            print(json.dumps([float((x + 1)[::2, ::2].sum().compute()), float((x + x.T).sum().compute())]))
""")


@pytest.mark.gpu
def test_after_warmup_a_new_cluster_compiles_nothing_for_the_seed_workloads(tmp_path):
    cache = tmp_path / "kernels"
    warm = CliRunner().invoke(gpu, ["warmup", "--kernel-cache", str(cache)])
    assert warm.exit_code == 0, warm.output
    kernels = set(os.listdir(cache))
    assert kernels and f"{len(kernels)} kernels in {cache}" in warm.output
    script = tmp_path / "seed.py"
    script.write_text(SEED)
    env = {**os.environ, "DASK_GPU__KERNEL_CACHE": str(cache)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(os.listdir(cache)) == kernels  # every kernel it needed was there
