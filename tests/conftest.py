import gc
import os
import subprocess
import sys
import time
from importlib.util import find_spec

import dask
import pytest


def real_gpu() -> bool:
    """A real GPU with CuPy, whatever gpu.simulate says."""
    from dask_gpu import devices

    return find_spec("cupy") is not None and devices.nvml_system().state is devices.State.AVAILABLE


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if gpu_items and not real_gpu():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU, its driver and CuPy")
        for item in gpu_items:
            item.add_marker(skip)
    if find_spec("cudf") is None or find_spec("dask_cudf") is None:
        skip = pytest.mark.skip(reason="needs cuDF and dask-cudf")
        for item in items:
            if "cudf" in item.keywords:
                item.add_marker(skip)


@pytest.fixture
def simulate():
    """``simulate(n)``: n simulated devices for the rest of the test."""
    with dask.config.set({"gpu.simulate": 0}):

        def set_(value):
            dask.config.set({"gpu.simulate": value})

        yield set_


@pytest.fixture
def pandas_reader(monkeypatch):
    """The ``gpu`` dataframe backend making pandas partitions: its planned reads with pandas' reader, and
    dask's pandas reader standing in for dask-cudf's where it gives the read to dask-cudf; the list of the
    reads given to dask-cudf."""
    import types

    import dask.dataframe as dd

    from dask_gpu.dataframe import backend

    given = []

    def read_parquet(*args, blocksize=None, **kwargs):
        given.append(args)
        with dask.config.set({"dataframe.backend": "pandas"}):
            return dd.read_parquet(*args, **kwargs)

    monkeypatch.setattr(backend, "cudf_backend", lambda: types.SimpleNamespace(read_parquet=read_parquet))
    monkeypatch.setattr(backend, "ENGINE", "pandas")
    return given


@pytest.fixture
def planned_pandas():
    """dask-gpu's collections for pandas frames, series and indexes, and for scalars (as the ``gpu`` backend has
    them for cuDF's), for the rest of the test; dask's own afterwards."""
    import dask.dataframe as dd
    import pandas as pd
    from dask.dataframe import get_collection_type

    from dask_gpu.dataframe import collections

    pairs = ((pd.DataFrame, dd.DataFrame), (pd.Series, dd.Series), (pd.Index, dd.Index))
    dasks = {frame: get_collection_type.dispatch(frame) for frame, _ in pairs + ((object, None),)}
    for frame, collection in pairs:
        ours = collections.collection_of(collection)
        get_collection_type.register(frame, lambda _, ours=ours: ours)
    collections.register_scalars()
    yield
    for frame, theirs in dasks.items():
        get_collection_type.register(frame, theirs)


@pytest.fixture
def no_gpu(monkeypatch):
    """A machine without NVML, whatever this one has."""
    from dask_gpu import devices

    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    devices.nvml_system.cache_clear()
    with dask.config.set({"gpu.simulate": 0}):
        yield
    devices.nvml_system.cache_clear()


def wait_for_file(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


@pytest.fixture
def scheduler(tmp_path):
    """A real ``dask scheduler`` on free ports; yields its scheduler file."""
    path = str(tmp_path / "scheduler.json")
    proc = subprocess.Popen(
        [sys.executable, "-m", "dask", "scheduler", "--port", "0", "--dashboard-address", ":0", "--host", "127.0.0.1",
         "--scheduler-file", path],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_file(path)
        yield path
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.fixture(autouse=True)
def array_optimization():
    """dask-gpu's array optimization, as importing dask_gpu installs it (some tests refresh dask's config)."""
    from dask_gpu.array import install

    install()


@pytest.fixture(autouse=True)
def no_kept_plans():
    """Each test plans its queries anew: a plan kept by another (its files named alike) is not this one's."""
    yield
    planner = sys.modules.get("dask_gpu.dataframe.planner")
    if planner is not None:
        planner._plans.clear()


@pytest.fixture
def collector_on():
    """Python's cycle collector on for the test, as it was afterwards."""
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()
