"""The device -> host -> disk store, with a stand-in device type registered through the public API."""

import os
import threading

import numpy as np
import pytest
import standin_device
from distributed import Client

from dask_gpu import LocalCUDACluster, internals
from dask_gpu.memory.dispatch import HostCopy
from dask_gpu.memory.stats import memory_stats
from dask_gpu.memory.store import DeviceHostDiskStore
from standin_device import StandInArray, make, total


@pytest.fixture
def store(tmp_path):
    s = DeviceHostDiskStore(device_memory_limit=1000, memory_limit=0, worker_local_directory=str(tmp_path))
    yield s
    s.close()


def test_least_recently_used_device_data_moves_to_host(store):
    store["a"], store["b"] = make(400, 1), make(400, 2)
    assert set(store.device) == {"a", "b"} and store.device_bytes == 800
    store["c"] = make(400, 3)  # over the limit: "a" is the oldest
    assert set(store.device) == {"b", "c"} and isinstance(store.host["a"], HostCopy)
    assert store.device_bytes == 800
    store["b"]  # now "c" is the oldest
    store["d"] = make(400, 4)
    assert set(store.device) == {"b", "d"} and set(store.host) == {"a", "c"}
    assert set(store) == {"a", "b", "c", "d"} and len(store) == 4


def test_reading_spilled_data_brings_it_back_exactly(store):
    store["a"] = StandInArray(np.arange(100, dtype="float64"))  # 800 bytes
    store["b"] = make(800)
    assert "a" in store.host
    a = store["a"]
    assert isinstance(a, StandInArray) and a.values.dtype == np.float64
    np.testing.assert_array_equal(a.values, np.arange(100))
    assert set(store.device) == {"a"} and "b" in store.host  # the limit still holds
    assert store.metrics()["host-to-device-count"] == 1


def test_host_objects_skip_the_device_tier(store):
    store["n"] = np.ones(10_000)
    store["i"] = 5
    assert store.device_bytes == 0 and not store.device
    assert store["i"] == 5 and set(store.host) == {"n", "i"}


def test_views_of_one_allocation_count_once(store):
    base = make(600)
    store["v1"], store["v2"] = base.view(slice(0, 100)), base.view(slice(100, 300))
    assert store.device_bytes == 600
    del store["v1"]
    assert store.device_bytes == 600  # v2 still keeps the allocation alive
    del store["v2"]
    assert store.device_bytes == 0


def test_evicting_a_view_releases_nothing_while_another_holds_the_allocation(tmp_path):
    store = DeviceHostDiskStore(1500, worker_local_directory=str(tmp_path))
    base = make(1000)
    store["v1"], store["v2"] = base.view(slice(0, 10)), base.view(slice(10, 20))
    store["c"] = make(600)  # 1600 > 1500: v1 goes, releasing nothing, then v2 releases 1000
    assert set(store.device) == {"c"} and set(store.host) == {"v1", "v2"}
    assert store.device_bytes == 600
    assert store.metrics()["device-to-host-bytes"] == 1000
    np.testing.assert_array_equal(store["v2"].values, np.ones(10))


def test_spill_for_an_allocation(store):
    store["a"], store["b"] = make(300), make(300)
    assert store.spill(1) == 300 and set(store.device) == {"b"}
    assert store.spill(10**9) == 300 and not store.device
    assert store.spill(1) == 0  # nothing left: the allocator gives up
    assert "the worker" not in store.describe() and "0 key(s) in its device tier" in store.describe()


def test_describe_names_what_is_held(store):
    store["small"], store["big"] = make(100), make(700)
    text = store.describe()
    assert "800 B in 2 key(s)" in text and text.index("'big'") < text.index("'small'")


def test_host_spills_to_disk_and_back(tmp_path):
    store = DeviceHostDiskStore(500, memory_limit=2000, worker_local_directory=str(tmp_path))
    for i in range(6):
        store[f"d{i}"] = make(400, i)  # each evicts the one before it to the host tier
    store["h"] = np.arange(500, dtype="uint8")
    assert store.disk  # the host tier passed memory_limit * target and wrote files
    assert os.listdir(os.path.join(str(tmp_path), "storage"))
    for i in range(6):
        np.testing.assert_array_equal(store[f"d{i}"].values, np.full(400, i, dtype="uint8"))
    np.testing.assert_array_equal(store["h"], np.arange(500, dtype="uint8"))
    store.close()
    assert not os.path.exists(os.path.join(str(tmp_path), "storage"))


def test_evict_moves_host_data_to_disk(store):
    assert store.evict() == -1  # nothing to evict
    store["h"] = np.ones(100)
    assert store.evict() > 0 and "h" in store.disk and "h" not in store.host
    assert store.fast is store.host


def test_a_value_that_cannot_move_stays_on_the_device(store):
    stuck = make(600)
    stuck.fail_to_host = True
    store["stuck"] = stuck
    store["next"] = make(600)  # would need "stuck" to move; it cannot
    assert set(store.device) == {"stuck", "next"} and store.device_bytes == 1200
    assert store.spill(600) == 600 and set(store.device) == {"stuck"}  # the next-oldest goes instead


def test_replacing_a_key_releases_the_old_value(store):
    store["a"] = make(600)
    store["a"] = make(300)
    assert store.device_bytes == 300 and len(store) == 1


def test_threads_keep_the_accounting_exact(tmp_path):
    store = DeviceHostDiskStore(4000, worker_local_directory=str(tmp_path))

    def work(t):
        for i in range(200):
            store[(t, i % 20)] = make(100 + i % 7, t)
            if i % 3 == 0:
                store[(t, (i + 5) % 20)] if (t, (i + 5) % 20) in store else None
            if i % 11 == 0:
                store.spill(500)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = {id(v.allocation): v.allocation.nbytes for v in store.device.values()}
    assert store.device_bytes == sum(held.values()) <= 4000
    assert len(store) == 80 and set(store) == {(t, i) for t in range(4) for i in range(20)}


def test_metrics(store):
    store["a"], store["b"], store["c"] = make(400), make(400), make(400)
    store["a"]
    m = store.metrics()
    assert m["device-keys"] == 2 and m["device-bytes"] == 800 and m["device-limit"] == 1000
    assert m["device-to-host-count"] == 2 and m["host-to-device-count"] == 1
    assert m["host-keys"] == 1 and m["device-to-host-seconds"] >= 0


def test_workers_use_the_store_with_its_limit(simulate):
    simulate(1)
    with LocalCUDACluster(device_memory_limit=1000, dashboard_address=False) as cluster, Client(cluster) as client:
        client.run(standin_device.register)  # the stand-in type, in the worker process
        futures = client.map(lambda i: make(400, i), range(5))
        results = client.gather(futures)
        assert [int(r.values[0]) for r in results] == list(range(5))
        (stats,) = memory_stats(client).values()
        assert stats["device-limit"] == 1000 and stats["device-bytes"] <= 1000
        assert stats["device-to-host-count"] >= 3 and "oom_retries" in stats
        heartbeat = next(iter(internals.scheduler_identity(client)["workers"].values()))["metrics"]
        directory = client.run(lambda dask_worker: dask_worker.data._directory)
        (path,) = directory.values()
        assert path.startswith(next(iter(client.run(lambda dask_worker: dask_worker.local_directory).values())))
    assert "gpu-memory" in heartbeat
    assert not os.path.exists(path)  # the spill directory went with the worker


def test_metrics_start_at_zero(store):
    m = store.metrics()
    assert m["device-to-host-count"] == m["host-to-device-bytes"] == m["device-bytes"] == 0


def spike_once(marker):
    """Past the worker's memory limit on the first try (its nanny kills it), small on the retry."""
    import time

    if not os.path.exists(marker):
        open(marker, "w").close()
        hog = np.ones(600 * 2**20 // 8)  # 600 MiB, past a 400 MB limit
        time.sleep(30)  # the nanny's memory monitor ends this first
        return float(hog[0])
    return 42.0


def test_a_worker_killed_for_host_memory_comes_back_and_the_work_finishes(simulate, tmp_path):
    simulate(1)
    with LocalCUDACluster(memory_limit="400MB", dashboard_address=False) as cluster, Client(cluster) as client:
        first_pid = next(iter(client.run(os.getpid).values()))
        assert client.submit(spike_once, str(tmp_path / "marker"), pure=False).result(timeout=90) == 42.0
        client.wait_for_workers(1, timeout=30)
        assert next(iter(client.run(os.getpid).values())) != first_pid  # a new process replaced the killed one


def test_values_that_spill_themselves_are_kept_aside_and_counted_nowhere(store, monkeypatch):
    from dask_gpu.memory import dispatch

    aside = make(900)
    monkeypatch.setattr(dispatch, "spills_itself", lambda value: value is aside)  # as cuDF with its spilling on
    store["own"], store["a"] = aside, make(400)
    assert store.device_bytes == 400 and set(store.device) == {"a"} and "own" not in store.host
    store["b"] = make(400)  # under the limit: the value kept aside counts for nothing
    assert set(store.device) == {"a", "b"}
    assert store["own"] is aside and set(store) == {"own", "a", "b"} and len(store) == 3
    assert store.metrics()["self-spilling-keys"] == 1
    del store["own"]
    assert "own" not in store and len(store) == 2


def test_a_space_shares_the_device_limit_but_not_the_keys(store):
    space = store.space(("shuffle", "x"))
    space[3, 1] = make(400, 1)
    store["a"] = make(400, 2)
    assert (3, 1) in space and (3, 1) not in store and set(store) == {"a"} and len(store) == 1
    space[4, 0] = make(400, 3)  # over the limit: the space's oldest goes to the host
    assert store.device_bytes == 800 and len(store.device) == 2 and len(store.host) == 1
    assert total(space.pop((3, 1))) == 400 and sorted(space) == [(4, 0)] and len(space) == 1
    assert "a" in store.host  # bringing (3, 1) back moved the least recently used out
    assert store.space(("shuffle", "y")) is not space and list(store.space(("shuffle", "y"))) == []
    del space[4, 0]
    assert list(space) == [] and set(store) == {"a"} and total(store["a"]) == 800
