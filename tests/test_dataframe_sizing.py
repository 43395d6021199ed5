"""Partition sizing of the gpu dataframe backend, on the CPU."""

import dask
import pytest
from distributed import Client

from dask_gpu import LocalCUDACluster
from dask_gpu.dataframe import sizing

GB = 10**9


def test_partition_size_in_bytes_or_a_fraction():
    assert sizing.partition_bytes(80 * GB) == 80 * GB // 32
    assert sizing.partition_bytes(80 * GB, "1GB") == GB
    with dask.config.set({"gpu.partition-size": 0.0625}):
        assert sizing.partition_bytes(80 * GB) == 5 * GB
    for bad, match in [(0, "more than 0"), (-1, "must not be negative"), ("x", "not a size"), (1.5, "a fraction")]:
        with pytest.raises(ValueError, match=match):
            sizing.partition_size(bad)


def test_the_gpu_workers_and_their_memory(simulate):
    simulate(["16GB", "80GB"])
    with LocalCUDACluster(cpu_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        assert sorted(sizing.gpu_workers(client)) == [16 * GB, 80 * GB]  # the CPU worker is no GPU
        assert sorted(sizing.gpu_workers()) == [16 * GB, 80 * GB]


def test_the_workers_are_asked_again_only_when_the_client_hears_of_a_change(simulate, monkeypatch):
    from dask_gpu import internals

    simulate(["16GB"])
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        assert sizing.gpu_workers(client) == [16 * GB]
        trips, sync = [], client.sync
        monkeypatch.setattr(client, "sync", lambda *args, **kwargs: trips.append(args) or sync(*args, **kwargs))
        assert sizing.gpu_workers(client) == [16 * GB]
        assert trips == []  # each read plans with these: no round trip to the cluster for each
        heard = dict(internals.heard_identity(client), n_workers=2)  # as the client hears of a second worker
        monkeypatch.setattr(internals, "heard_identity", lambda _: heard)
        assert sizing.gpu_workers(client) == [16 * GB]
        assert trips  # asked again


def test_without_a_cluster_the_gpus_of_this_machine(simulate):
    simulate(["8GB"])
    assert sizing.gpu_workers() == [8 * GB]


def test_the_gpu_backend_is_known_and_says_what_it_needs(monkeypatch):
    import sys

    import dask.dataframe as dd
    from dask.dataframe.dask_expr._backends import dataframe_creation_dispatch

    from dask_gpu.dataframe.backend import GPUBackendEntrypoint

    from dask_gpu.dataframe import backend

    assert isinstance(dataframe_creation_dispatch.dispatch("gpu"), GPUBackendEntrypoint)
    for name in ("dask_cudf", "dask_cudf.backends"):  # not installed (though a GPU machine may have imported it)
        monkeypatch.setitem(sys.modules, name, None)
    backend.cudf_backend.cache_clear()
    with dask.config.set({"dataframe.backend": "gpu"}):
        with pytest.raises(ImportError, match="the 'gpu' dataframe backend needs cuDF and dask-cudf"):
            dd.from_dict({"a": [1, 2]}, npartitions=1)


