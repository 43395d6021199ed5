"""The machine's kernel cache (gpu.kernel-cache) and ``dask gpu warmup``."""

from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import textwrap
import threading
import time
import types

import dask
import pytest
from click.testing import CliRunner
from distributed import Client

from dask_gpu import LocalCUDACluster, internals
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


# -- CUB's block reductions, which CuPy would compile at first use -------------------------------

FAKE_CUPY = {  # a cupy package with CuPy's accelerator switches, as CuPy reads CUPY_ACCELERATORS, and an array
    # type for dask.array, which registers CuPy's where it finds it installed
    "__init__.py": "from cupy import _core, cuda\nclass ndarray:\n    pass\n",
    "cuda/__init__.py": "from cupy.cuda import compiler\n",
    "cuda/compiler.py": "import os\n_use_pch = os.environ.get('CUPY_NVRTC_USE_PCH') == '1'\n",
    "_core/__init__.py": "from cupy._core import _accelerator\n",
    "_core/_accelerator.py": (
        "import os\n"
        "ACCELERATOR_CUB, ACCELERATOR_CUTENSOR = 1, 2\n"
        "_names = {'cub': 1, 'cutensor': 2}\n"
        "_on = [_names[n] for n in os.environ.get('CUPY_ACCELERATORS', 'cub,cutensor').split(',') if n]\n"
        "reduction, routine = list(_on), list(_on)\n"
        "def get_reduction_accelerators(): return reduction\n"
        "def get_routine_accelerators(): return routine\n"
        "def set_reduction_accelerators(a):\n"
        "    global reduction\n"
        "    reduction = [_names.get(x, x) for x in a]\n"),
}


def accelerators(tmp_path, code: str, **env) -> list:
    """The reduction and routine accelerators after ``code``, in a new process with the fake CuPy."""
    for name, text in FAKE_CUPY.items():
        (tmp_path / "site" / "cupy" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "site" / "cupy" / name).write_text(text)
    code += ("; from cupy._core import _accelerator as a; from cupy.cuda import compiler; "
             "print(a.get_reduction_accelerators(), a.get_routine_accelerators(), compiler._use_pch)")
    environ = {k: v for k, v in os.environ.items() if k not in ("CUPY_ACCELERATORS", "CUPY_NVRTC_USE_PCH")}
    environ.update(env, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=environ, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.split("\n")[-2]


def test_importing_dask_gpu_takes_cub_out_of_cupys_reductions_only_and_precompiles_headers(tmp_path):
    assert accelerators(tmp_path, "import cupy") == "[1, 2] [1, 2] False"  # CuPy's own default
    assert accelerators(tmp_path, "import dask_gpu; import cupy") == "[2] [1, 2] True"  # CuPy imported later
    assert accelerators(tmp_path, "import cupy; import dask_gpu") == "[2] [1, 2] True"  # CuPy imported first
    off = accelerators(tmp_path, "import dask_gpu; import cupy", DASK_GPU__COMPILE_LESS="false")
    assert off == "[1, 2] [1, 2] False"  # gpu.compile-less: false leaves CuPy as it is


def test_a_compile_less_that_is_no_boolean_is_refused_as_dask_gpu_is_imported():
    done = subprocess.run([sys.executable, "-c", "import dask_gpu"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DASK_GPU__COMPILE_LESS": "[1]"})
    assert done.returncode == 1 and "gpu.compile-less must be True or False, not [1]" in done.stderr


def test_cupys_settings_chosen_by_the_user_stay(tmp_path):
    assert accelerators(tmp_path, "import dask_gpu; import cupy", CUPY_ACCELERATORS="cub") == "[1] [1] True"
    assert accelerators(tmp_path, "import dask_gpu; import cupy", CUPY_ACCELERATORS="") == "[] [] True"
    assert accelerators(tmp_path, "import dask_gpu; import cupy", CUPY_NVRTC_USE_PCH="0") == "[2] [1, 2] False"


def test_a_cupy_without_these_switches_is_left_as_it_is(tmp_path):
    for name in ("_core/_accelerator.py", "cuda/compiler.py"):
        (tmp_path / "site" / "cupy" / name).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "site" / "cupy" / "__init__.py").write_text("__version__ = '9.0'\n")
    code = "import cupy, dask_gpu; print('imported')"  # CuPy first: dask-gpu's import must not fail
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])}
    env.pop("CUPY_ACCELERATORS", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "imported", done.stderr[-2000:]


def test_a_worker_takes_cub_out_of_its_reductions(simulate, tmp_path, monkeypatch):
    accelerators(tmp_path, "pass")  # writes the fake CuPy
    monkeypatch.syspath_prepend(str(tmp_path / "site"))  # the workers' sys.path is this process's
    monkeypatch.delenv("CUPY_ACCELERATORS", raising=False)
    simulate(1)

    def reductions():
        import cupy

        return list(cupy._core._accelerator.get_reduction_accelerators())

    with LocalCUDACluster(dashboard_address=False, processes=True) as cluster, Client(cluster) as client:
        assert list(client.run(reductions).values()) == [[2]]


@pytest.mark.gpu
def test_cupys_first_reductions_compile_no_cub_block_reduction(tmp_path):
    code = ("import dask_gpu, cupy; from cupy._core import _accelerator as a; x = cupy.random.random((2000, 1500)); "
            "[r.get() for r in ((x > 0.5).sum(), x.sum(axis=0), x.var(), x.astype('int8').mean(), x.argmax())]; "
            "print(a.get_reduction_accelerators(), a.get_routine_accelerators())")
    env = {k: v for k, v in os.environ.items() if k not in ("CUPY_ACCELERATORS", "CUPY_NVRTC_USE_PCH")}
    env.update(CUPY_CACHE_DIR=str(tmp_path), CUPY_CACHE_SAVE_CUDA_SOURCE="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == ["[]", "[1]"]  # CUB's precompiled routines stay
    sources = [f for f in tmp_path.glob("*.cu")]
    assert sources and not [f.name for f in sources if "BlockReduce" in f.read_text()]


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
    warm = subprocess.run([sys.executable, "-m", "dask", "gpu", "warmup", "--kernel-cache", str(cache)],
                          capture_output=True, text=True, timeout=300)  # a process of its own, as it is run
    assert warm.returncode == 0, warm.stderr[-3000:]
    kernels = set(os.listdir(cache))
    assert kernels and f"{len(kernels)} kernels in {cache}" in warm.stdout
    script = tmp_path / "seed.py"
    script.write_text(SEED)
    env = {**os.environ, "DASK_GPU__KERNEL_CACHE": str(cache)}
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert set(os.listdir(cache)) == kernels  # every kernel it needed was there


DIVISIONS = textwrap.dedent("""
    import dask, dask.dataframe as dd, numpy as np
    import dask_gpu
    dask.config.set({"dataframe.backend": "cudf", "scheduler": "sync"})
    for groups in (100, 1000, 5000, 100_000):  # a group-by's mean: dask-cudf divides the sums by the counts
        df = dd.from_dict({"s": np.arange(8 * groups) % groups, "x": np.arange(8 * groups) * 0.5}, npartitions=4)
        df.groupby("s").agg({"x": ["sum", "mean"]}).compute()
""")


@pytest.mark.gpu
@pytest.mark.cudf
def test_cudfs_first_group_bys_compile_no_cub_block_reduction(tmp_path):
    def run(code, cache):
        env = {k: v for k, v in os.environ.items() if k not in ("CUPY_ACCELERATORS", "CUPY_NVRTC_USE_PCH")}
        env.update(CUPY_CACHE_DIR=str(cache), CUPY_CACHE_SAVE_CUDA_SOURCE="1")
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    def cub_sources(cache):  # CuPy's CUB reductions, in the sources it keeps beside its kernels
        return {f.name for f in cache.glob("*") if f.suffix == ".cu" and "BlockReduce" in f.read_text()}

    run("import cupy; cupy.all(cupy.zeros(1024, dtype=bool))", tmp_path / "cupy")
    assert cub_sources(tmp_path / "cupy")  # CuPy alone compiles one
    run(DIVISIONS, tmp_path / "dask-gpu")
    assert (tmp_path / "dask-gpu").is_dir() and not cub_sources(tmp_path / "dask-gpu")


# -- one compile of a kernel that several threads ask for at once -------------------------------

class Compiler:
    """CuPy's compiler as far as dask-gpu wraps it: a kernel compiled once lands in the cache, which a later
    call loads; ``meet`` has the compiles of two different kernels wait for each other."""

    def __init__(self):
        self.compiled, self.cache = [], set()
        self.meet = threading.Barrier(2, timeout=10)

    def _compile_module_with_cache(self, source, options=(), **kwargs):
        if (source, options) in self.cache:
            return "loaded"
        if source.startswith("pair"):
            self.meet.wait()  # fails where the two compiles cannot run at once
        time.sleep(0.05)
        self.compiled.append(source)
        self.cache.add((source, options))
        return "compiled"


def asked_at_once(compiler, sources) -> list:
    start = threading.Barrier(len(sources))

    def ask(source):
        start.wait()
        return compiler._compile_module_with_cache(source, ("-O3",), arch="90")

    with concurrent.futures.ThreadPoolExecutor(len(sources)) as pool:
        return list(pool.map(ask, sources))


def test_threads_that_ask_for_one_kernel_at_once_compile_it_once():
    fake = Compiler()
    internals.compile_each_kernel_once(types.SimpleNamespace(cuda=types.SimpleNamespace(compiler=fake)))
    assert sorted(asked_at_once(fake, ["k"] * 8)) == ["compiled"] + ["loaded"] * 7
    assert fake.compiled == ["k"]


def test_different_kernels_still_compile_side_by_side_and_the_wrapper_is_set_once():
    fake = Compiler()
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(compiler=fake))
    internals.compile_each_kernel_once(cupy)
    wrapped = fake._compile_module_with_cache
    internals.compile_each_kernel_once(cupy)
    assert fake._compile_module_with_cache is wrapped
    assert sorted(asked_at_once(fake, ["pair-a", "pair-b", "pair-a", "pair-b"])) == ["compiled"] * 2 + ["loaded"] * 2
    assert sorted(fake.compiled) == ["pair-a", "pair-b"]


@pytest.mark.gpu
def test_threads_that_ask_cupy_for_a_new_kernel_at_once_compile_it_once(tmp_path, monkeypatch):
    import cupy

    import dask_gpu  # noqa: F401  what it sets once CuPy is imported
    from cupy.cuda import compiler

    compiles = []
    nvrtc = compiler._compile_using_nvrtc_no_warning
    monkeypatch.setattr(compiler, "_compile_using_nvrtc_no_warning",
                        lambda source, *a, **k: compiles.append(source) or nvrtc(source, *a, **k))
    name = f"dask_gpu_once_{os.getpid()}_{time.time_ns()}"  # a kernel no cache holds
    kernel = cupy.ElementwiseKernel("T x", "T y", f"y = x * 3 + {time.time_ns() % 1000}", name)
    x = cupy.arange(12.0)
    start = threading.Barrier(8)

    def run(_):
        start.wait()
        return kernel(x).get()

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(8)))
    assert all((r == results[0]).all() for r in results)
    assert len([source for source in compiles if name in source]) == 1
