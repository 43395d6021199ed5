"""The machine's kernel cache (gpu.kernel-cache) and ``dask gpu warmup``."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
import textwrap
import time
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


# -- cuDF's reductions, compiled in processes of their own ---------------------------------------

FAKE_CUPY = """
import os, time
time.sleep(float(os.environ.get("FAKE_CUPY_SLEEP", 0)))
def zeros(n, dtype):
    return n
def _record(op, n):
    with open(os.path.join(os.environ["FAKE_CUPY_LOG"], f"{os.getpid()}-{op}-{n}"), "w") as f:
        f.write(" ".join(os.environ.get(k, "-") for k in ("CUDA_VISIBLE_DEVICES", "CUPY_NVRTC_USE_PCH")))
    if os.environ.get("FAKE_CUPY_FAIL"):
        raise RuntimeError("no device")
all = lambda n: _record("all", n)
any = lambda n: _record("any", n)
"""


@pytest.fixture
def fake_cupy(tmp_path, monkeypatch):
    """A ``cupy`` that the compiling processes import, recording each reduction as a file in the log."""
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "cupy.py").write_text(FAKE_CUPY)
    (tmp_path / "log").mkdir()
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("FAKE_CUPY_LOG", str(tmp_path / "log"))
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delitem(sys.modules, "cupy.cuda.compiler", raising=False)
    return tmp_path / "log"


GPU = {"name": "NVIDIA H100 80GB HBM3", "memory_total": 80 * 10**9}


def start(device=GPU):
    from dask_gpu.warmup import compile_cudf_reductions

    return compile_cudf_reductions(device, {})


def test_cudf_reductions_compile_at_once_and_once_a_machine(fake_cupy, tmp_path):
    from dask_gpu.warmup import CUDF_REDUCTIONS, compile_processes

    start().join(timeout=60)
    ran = [name.split("-", 1) for name in os.listdir(fake_cupy)]
    asked = ["-".join(re.match(r"cupy\.(\w+)\(cupy\.zeros\((\d+)", r).groups()) for r in CUDF_REDUCTIONS]
    assert sorted(op for _, op in ran) == sorted(asked) and len(asked) == 10  # each once
    assert len({pid for pid, _ in ran}) == compile_processes(GPU) == min(5, max(1, (os.cpu_count() or 2) // 2))
    assert start() is None  # done on this machine
    start({**GPU, "name": "NVIDIA A100"}).join(timeout=60)  # another GPU: its own
    assert not [name for name in os.listdir(tmp_path / "cache") if name.endswith(".lock")]


def test_a_small_gpu_compiles_in_fewer_processes(fake_cupy):
    from dask_gpu.warmup import CUDF_REDUCTIONS

    start({"name": "small", "memory_total": 8 * 10**9}).join(timeout=60)
    assert len({name.split("-")[0] for name in os.listdir(fake_cupy)}) == 1  # one context on an 8 GB device
    assert len(os.listdir(fake_cupy)) == len(CUDF_REDUCTIONS)


def test_a_failed_compile_is_tried_again_at_the_next_start(fake_cupy, monkeypatch):
    monkeypatch.setenv("FAKE_CUPY_FAIL", "1")
    start().join(timeout=60)
    monkeypatch.delenv("FAKE_CUPY_FAIL")
    start().join(timeout=60)


def test_a_compile_under_way_elsewhere_is_left_to_it_unless_it_died(fake_cupy, tmp_path):
    from dask_gpu import warmup

    first = start()
    assert start() is None  # under way: the lock is held
    first.join(timeout=60)
    (done,) = [tmp_path / "cache" / name for name in os.listdir(tmp_path / "cache") if name.endswith(".done")]
    lock = done.with_suffix(".lock")
    done.rename(lock)
    old = time.time() - warmup._STALE - 1
    os.utime(lock, (old, old))  # left by a worker that died
    start().join(timeout=60)
    assert done.exists() and not lock.exists()


def test_a_cache_that_cannot_be_written_starts_nothing_and_stops_nothing(fake_cupy, tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("CUPY_CACHE_DIR", str(tmp_path / "file" / "cache"))
    assert start() is None and not os.listdir(fake_cupy)


def test_a_compile_stopped_leaves_no_process_and_is_done_again_later(fake_cupy, monkeypatch):
    monkeypatch.setenv("FAKE_CUPY_SLEEP", "60")
    compile = start()
    began = time.perf_counter()
    compile.stop()  # as the cluster closes
    assert time.perf_counter() - began < 30
    assert all(process.poll() is not None for process in compile.processes)
    monkeypatch.delenv("FAKE_CUPY_SLEEP")
    start().join(timeout=60)  # not done: compiled at the next start
    assert start() is None


def test_they_compile_in_the_first_gpu_workers_environment(fake_cupy, monkeypatch):
    from dask_gpu import warmup
    from dask_gpu.devices import Device

    gpus = [(str(i), Device(index=i, name="NVIDIA H100", uuid=f"GPU-{i}", memory_total=80 * 10**9)) for i in (2, 3)]
    real = importlib.util.find_spec
    monkeypatch.setattr(warmup, "find_spec", lambda name: object() if name in ("cudf", "cupy") else real(name))
    monkeypatch.delenv("CUPY_NVRTC_USE_PCH", raising=False)
    warmup.compile_cudf_kernels(gpus).join(timeout=60)
    assert {(fake_cupy / name).read_text() for name in os.listdir(fake_cupy)} == {"2,3 1"}  # its GPU first; PCH
    assert warmup.compile_cudf_kernels([(t, Device(**{**vars(d), "simulated": True})) for t, d in gpus]) is None
    monkeypatch.setattr(warmup, "find_spec", lambda name: None if name == "cudf" else real(name))
    assert warmup.compile_cudf_kernels(gpus[::-1]) is None  # no cuDF: nothing to compile for


def test_a_cluster_starts_them_as_its_workers_start_and_stops_them_as_it_closes(simulate, monkeypatch):
    from dask_gpu import cluster

    started = []

    def compile_cudf_kernels(selected):
        started.append(types.SimpleNamespace(selected=list(selected), stopped=False))
        started[-1].stop = lambda: setattr(started[-1], "stopped", True)
        return started[-1]

    monkeypatch.setattr(cluster, "compile_cudf_kernels", compile_cudf_kernels)
    simulate(2)
    with LocalCUDACluster(dashboard_address=False) as c:
        assert [label for _, d in started[0].selected for label in [d.label]] == ["gpu-0", "gpu-1"]
        assert not started[0].stopped and len(c.workers) == 2
    assert started[0].stopped
    with LocalCUDACluster(n_workers=0, cpu_workers=1, dashboard_address=False):
        assert started[1].selected == []  # no GPU worker: nothing to compile for


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
    ours = {name for name in kernels if name.startswith("dask-gpu-")}  # cuDF's kernels, done (with cuDF)
    assert kernels and f"{len(kernels - ours)} kernels in {cache}" in warm.output
    script = tmp_path / "seed.py"
    script.write_text(SEED)
    env = {**os.environ, "DASK_GPU__KERNEL_CACHE": str(cache)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(os.listdir(cache)) == kernels  # every kernel it needed was there


DIVISIONS = textwrap.dedent("""
    import dask, dask.dataframe as dd, numpy as np
    dask.config.set({"dataframe.backend": "cudf", "scheduler": "sync"})
    for groups in (100, 1000, 5000, 100_000):  # a group-by's mean: dask-cudf divides the sums by the counts
        df = dd.from_dict({"s": np.arange(8 * groups) % groups, "x": np.arange(8 * groups) * 0.5}, npartitions=4)
        df.groupby("s").agg({"x": ["sum", "mean"]}).compute()
""")


@pytest.mark.gpu
@pytest.mark.cudf
def test_after_the_background_compile_cudfs_first_group_by_compiles_no_cub_reduction(tmp_path):
    def run(code, cache):
        env = {**os.environ, "CUPY_CACHE_DIR": str(cache), "CUPY_CACHE_SAVE_CUDA_SOURCE": "1"}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    def cub_sources(cache):  # CuPy's CUB reductions, in the sources it keeps beside its kernels
        return {f.name for f in cache.glob("*") if f.suffix == ".cu" and "BlockReduce" in f.read_text()}

    cold, warm = tmp_path / "cold", tmp_path / "warm"
    run(DIVISIONS, cold)
    assert cub_sources(cold)  # what the compile saves a first group-by
    run("from dask_gpu import devices; from dask_gpu.warmup import compile_cudf_kernels; "
        "compile_cudf_kernels(devices.select(devices.discover())).join()", warm)
    before = cub_sources(warm)
    assert before >= cub_sources(cold)
    run(DIVISIONS, warm)
    assert cub_sources(warm) == before
