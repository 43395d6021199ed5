"""What a GPU worker does for arrays as it starts (dask_gpu.array.start): its first array task costs its second's."""

import asyncio
import os
import subprocess
import sys
import textwrap

import pytest
from distributed import Client

from dask_gpu import LocalCUDACluster
from dask_gpu.array import start
from dask_gpu.plugins import WarmFirst


def test_a_simulated_device_imports_dask_array_and_no_cupy(monkeypatch):
    looked = []
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: looked.append(name))
    assert start.warm(simulated=True) >= 0 and "dask.array" in sys.modules
    assert looked == []  # CuPy is not even looked for


def test_a_real_device_without_cupy_is_left_alone(monkeypatch):
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: None)
    assert start.warm(simulated=False) >= 0


def warmed(dask_worker):
    plugin = dask_worker.plugins["dask-gpu"]
    plugin.warming.join(60)
    return plugin.warming.name, plugin.warmed_seconds, "dask.array" in sys.modules


def test_new_workers_get_dask_array_ready_beside_their_registration(simulate):
    simulate(1)
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        # each worker is a process of its own, which imports dask.array in a thread as it registers
        for name, seconds, imported in client.run(warmed).values():
            assert name == start.WARMING and 0 < seconds < 60 and imported


def test_a_worker_s_setup_does_not_wait_for_its_arrays(monkeypatch):
    """The worker registers, and takes tasks, while its arrays are still being got ready."""
    import threading
    import types

    from dask_gpu.plugins import GPUWorker

    release, calls = threading.Event(), []

    def slow_warm(simulated):
        calls.append(simulated)
        release.wait(30)
        return 1.5

    monkeypatch.setattr(start, "warm", slow_warm)
    plugin = GPUWorker({"index": 0, "simulated": True}, 0)
    asyncio.run(plugin.setup(types.SimpleNamespace(name="gpu-0", data={}, metrics={})))  # no scheduler to ask
    assert plugin.warming.is_alive() and plugin.warmed_seconds is None  # setup has returned
    release.set()
    plugin.warming.join(30)
    assert calls == [True] and plugin.warmed_seconds == 1.5


def test_the_client_s_warm_up_imports_cupy_s_serializers_where_cupy_is_installed(monkeypatch):
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: None)
    assert start.client_warm_up() is None
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: object())
    imported = []
    monkeypatch.setattr(start.importlib, "import_module", imported.append)
    start.client_warm_up()()
    assert imported == ["distributed.protocol.cupy"]


@pytest.mark.gpu
def test_a_gpu_worker_makes_its_cuda_context_as_it_starts():
    import cupy

    assert start.warm(simulated=False) > 0
    assert cupy.cuda.runtime.getDevice() == 0 and cupy.cuda.Device(0).compute_capability


FIRST_TASK = textwrap.dedent("""
    import time
    from dask_gpu.array import start

    def slow_warm(simulated):  # set in each worker too: its process runs this script's top again
        time.sleep(1.5)
        start.ORDER.append("imported")
        return 0.5

    start.ORDER, start.warm = [], slow_warm

    def task():
        from dask_gpu.array import start
        start.ORDER.append("task")
        return start.ORDER

    if __name__ == "__main__":
        from distributed import Client
        from dask_gpu import LocalCUDACluster
        with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
            print(client.submit(task, pure=False).result(60))
""")


def test_a_new_worker_reads_its_first_task_once_its_warm_up_has_imported(tmp_path):
    """Its warm-up imports in a thread; a task's import of the same package beside it would get half-made modules."""
    (tmp_path / "first_task.py").write_text(FIRST_TASK)
    env = {**os.environ, "DASK_GPU__SIMULATE": "1"}
    done = subprocess.run([sys.executable, str(tmp_path / "first_task.py")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "['imported', 'task']"


def test_the_scheduler_gives_the_wait_to_each_worker_and_other_workers_have_nothing_to_wait_for(simulate):
    import types

    simulate(2)
    with LocalCUDACluster(dashboard_address=False, cpu_workers=1) as cluster, Client(cluster) as client:
        names = client.run(lambda dask_worker: WarmFirst.name in dask_worker.plugins)
        assert len(names) == 3 and all(names.values())
    WarmFirst().setup(types.SimpleNamespace(plugins={}, name="cpu-0"))  # returns at once
