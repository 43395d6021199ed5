"""Under load: thousands of small GPU-tagged tasks and large ones that spill, round after round.

Every round's results are checked; after the first round (which starts thread pools and connections)
nothing may grow from round to round: each worker's threads, file descriptors, child processes, spill
files and memory come back to where they were, and its store holds nothing once the client lets go.
On CPU, simulated devices and the stand-in device type; on a GPU, CuPy arrays and real spilling.
"""

import gc
import os
import time

import dask
import psutil
import pytest
import standin_device
from distributed import Client

from dask_gpu import LocalCUDACluster
from dask_gpu.memory.stats import memory_stats

ROUNDS = int(os.environ.get("DASK_GPU_SOAK_ROUNDS", 4))  # more for a longer soak on a GPU


def usage(dask_worker) -> dict:
    gc.collect()
    me = psutil.Process()
    spill_files = sum(len(files) for _, _, files in os.walk(dask_worker.data._directory))
    return {"threads": me.num_threads(), "fds": me.num_fds(), "children": len(me.children(recursive=True)),
            "rss": me.memory_info().rss, "keys": len(dask_worker.data), "device": dask_worker.data.device_bytes,
            "spill_files": spill_files}


def inc(i):
    return i + 1


def cupy_make(nbytes, fill):
    import cupy

    return cupy.full(nbytes, fill % 256, dtype="uint8")


def cupy_total(x):
    return int(x.sum(dtype="int64"))


def one_round(client, make, total, small, large, nbytes) -> None:
    gpu = {"resources": {"GPU": 1}}
    ones = client.map(inc, range(small), pure=False, **gpu)
    arrays = client.map(make, [nbytes] * large, range(large), pure=False, **gpu)  # more than the device tier
    totals = client.map(total, arrays, pure=False, **gpu)
    assert client.submit(sum, ones).result(timeout=300) == small * (small + 1) // 2
    assert client.gather(totals) == [nbytes * (i % 256) for i in range(large)]
    # read back once more, from wherever the store put them
    assert client.gather(client.map(total, arrays[::7], pure=False)) == [nbytes * (i % 256) for i in range(0, large, 7)]


def settled(client, timeout: float = 60) -> None:
    """Returns once the scheduler and the workers hold no key: what the client lets go of reaches them in
    batches, client to scheduler to workers, after the round's futures are gone."""
    deadline = time.monotonic() + timeout
    while client.run_on_scheduler(lambda dask_scheduler: len(dask_scheduler.tasks)) or any(
            client.run(lambda dask_worker: len(dask_worker.data)).values()):
        assert time.monotonic() < deadline, "keys still held a minute after the client let go of them"
        time.sleep(0.05)


def soak(client, make, total, small, large, nbytes):
    one_round(client, make, total, small, large, nbytes)
    settled(client)
    client.run(gc.collect)
    baseline = client.run(usage)
    spilled = 0
    for _ in range(ROUNDS - 1):
        one_round(client, make, total, small, large, nbytes)
        spilled = sum(s["device-to-host-count"] for s in memory_stats(client).values())
    settled(client)
    after = client.run(usage)
    assert spilled > 0, "the large tasks never spilled: the soak did not test spilling"
    for address, was in baseline.items():
        now = after[address]
        assert now["keys"] == 0 and now["device"] == 0 and now["spill_files"] == 0, now
        assert now["children"] <= was["children"], (was, now)
        assert now["threads"] <= was["threads"] + 2, (was, now)
        assert now["fds"] <= was["fds"] + 4, (was, now)
        assert now["rss"] <= was["rss"] + 64 * 2**20, (was, now)


def test_soak_on_simulated_devices(simulate):
    simulate(2)
    config = {"distributed.worker.memory.target": 0.02}  # host tier: 2% of 400 MB, then disk
    with dask.config.set(config), LocalCUDACluster(device_memory_limit="4MB", memory_limit="400MB",
                                                   dashboard_address=False) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("standin_device"))
        soak(client, standin_device.make, standin_device.total, small=1500, large=40, nbytes=10**6)
        assert all(s["host-disk-write-count"] > 0 for s in memory_stats(client).values())  # host tier to disk too


@pytest.mark.gpu
def test_soak_on_gpus():
    with LocalCUDACluster(device_memory_limit="2GB", dashboard_address=False) as cluster, Client(cluster) as client:
        large = 30 * max(2, len(cluster.workers))  # 3 GB or more of 100 MB arrays per worker: past its 2 GB
        soak(client, cupy_make, cupy_total, small=5000, large=large, nbytes=10**8)
