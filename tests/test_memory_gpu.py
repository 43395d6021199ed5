"""On a real GPU: device memory limits hold, allocation failures spill, restarts free memory."""

import time

import dask.array as da
import pytest
from distributed import Client, wait

from dask_gpu import LocalCUDACluster, discover
from dask_gpu.memory.stats import memory_stats

pytestmark = pytest.mark.gpu


def only(stats: dict) -> dict:
    (worker,) = stats.values()
    return worker


def test_three_times_the_device_limit_finishes_right():
    import cupy

    limit = 10**9
    with LocalCUDACluster(n_workers=1, device_memory_limit=limit, dashboard_address=False) as cluster, Client(
        cluster
    ) as client:
        rs = da.random.RandomState(RandomState=cupy.random.RandomState, seed=0)
        x = rs.random((20000, 20000), chunks=2500).persist()  # 3.2 GB of data, 3.2 x the limit
        wait(x)
        total = float((x.T @ x).sum().compute())
        reference = float((x.sum(axis=1) ** 2).sum().compute())
        assert abs(total - reference) / reference < 1e-9
        stats = only(memory_stats(client))
        assert stats["device-to-host-count"] > 0 and stats["host-to-device-count"] > 0
        assert stats["device-bytes"] <= limit


def test_a_task_larger_than_free_memory_succeeds_after_spilling():
    device = discover().devices[0]
    held = int(device.memory_total * 0.1) // 8  # float64 elements in a tenth of the device
    big = int(device.memory_total * 0.5) // 8
    with LocalCUDACluster(n_workers=1, device_memory_limit=0.95, dashboard_address=False) as cluster, Client(
        cluster
    ) as client:

        def fill(i, n=held):
            import cupy

            return cupy.full(n, float(i))

        def allocate(n):
            import cupy

            return float(cupy.ones(n).sum())

        futures = [client.submit(fill, i, pure=False) for i in range(7)]  # 70% of the device, under the limit
        wait(futures)
        assert only(memory_stats(client))["device-to-host-count"] == 0
        assert client.submit(allocate, big, pure=False).result() == big  # only fits once data is spilled
        stats = only(memory_stats(client))
        assert stats["oom_retries"] >= 1 and stats["device-to-host-count"] >= 1
        # the spilled data comes back intact
        firsts = client.gather([client.submit(lambda a: (float(a[0]), float(a[-1])), f, pure=False) for f in futures])
        assert firsts == [(float(i), float(i)) for i in range(7)]


def test_nothing_left_to_spill_is_a_clear_error_and_the_worker_lives_on():
    device = discover().devices[0]
    with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:

        def allocate(n):
            import cupy

            return float(cupy.ones(n, dtype="uint8").sum())

        with pytest.raises(MemoryError, match=str(2 * device.memory_total)):
            client.submit(allocate, 2 * device.memory_total, pure=False).result()
        assert client.submit(allocate, 1000, pure=False).result() == 1000
        assert only(memory_stats(client))["oom_failures"] >= 1


def test_restart_returns_device_memory():
    import pynvml

    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)

        def used():
            return pynvml.nvmlDeviceGetMemoryInfo(handle).used

        with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
            baseline = used()

            def fill():
                import cupy

                return cupy.ones(2 * 10**9, dtype="uint8")

            data = client.submit(fill, pure=False)
            wait(data)
            assert used() >= baseline + 2 * 10**9
            del data
            client.restart()
            deadline = time.monotonic() + 30
            while used() > baseline + 10**9:
                assert time.monotonic() < deadline, "device memory was not returned"
                time.sleep(0.2)
    finally:
        pynvml.nvmlShutdown()
