"""What a GPU worker does for arrays as it starts (dask_gpu.array.start): its first array task costs its second's."""

import sys

import pytest
from distributed import Client

from dask_gpu import LocalCUDACluster
from dask_gpu.array import start


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
    plugin.setup(types.SimpleNamespace(name="gpu-0", data={}, metrics={}))
    assert plugin.warming.is_alive() and plugin.warmed_seconds is None  # setup has returned
    release.set()
    plugin.warming.join(30)
    assert calls == [True] and plugin.warmed_seconds == 1.5


def test_the_client_gets_cupy_s_serializers_in_a_thread_where_cupy_is_installed(monkeypatch):
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: None)
    assert start.warm_client() is None
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setitem(sys.modules, "distributed.protocol.cupy", None)  # importing it raises: logged, not raised
    thread = start.warm_client()
    thread.join(10)
    assert thread.name == start.WARMING and not thread.is_alive()


@pytest.mark.gpu
def test_a_gpu_worker_makes_its_cuda_context_as_it_starts():
    import cupy

    assert start.warm(simulated=False) > 0
    assert cupy.cuda.runtime.getDevice() == 0 and cupy.cuda.Device(0).compute_capability
