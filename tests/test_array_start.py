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


def test_new_workers_have_dask_array_before_their_first_task(simulate):
    simulate(1)
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        # each worker is a process of its own, which imported dask.array as it started
        assert all(client.run(lambda: "dask.array" in sys.modules).values())
        seconds = client.run(lambda dask_worker: dask_worker.plugins["dask-gpu"].warmed_seconds).values()
        assert all(0 < s < 60 for s in seconds)


@pytest.mark.gpu
def test_a_gpu_worker_makes_its_cuda_context_as_it_starts():
    import cupy

    assert start.warm(simulated=False) > 0
    assert cupy.cuda.runtime.getDevice() == 0 and cupy.cuda.Device(0).compute_capability
