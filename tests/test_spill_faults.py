"""Faults of the spill disk: files changed, swapped or removed under a worker, a disk that fills or turns
read-only in the middle of a spilling workload, and a worker killed with values on its disk. Each is detected and
reported, naming the key, the file or the directory; no answer is ever wrong; the worker stays up (or, killed,
comes back), and a lost value is computed again where it is wanted.

On CPU: simulated devices and the stand-in device type (``standin_device``), through the same store code.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import time

import dask
import numpy as np
import pytest
import standin_device
import zict.file
from distributed import Client, wait

from dask_gpu import LocalCUDACluster
from dask_gpu.memory import checksum
from dask_gpu.memory.checksum import SpillFileError
from dask_gpu.memory.stats import memory_stats
from dask_gpu.memory.store import DeviceHostDiskStore

NBYTES = 200_000  # each stand-in value; a worker below keeps 5 on its device, 10 in host memory, the rest on disk
SPILLING = {"distributed.worker.memory.target": 0.5, "distributed.worker.memory.spill": False,
            "distributed.worker.memory.pause": False, "distributed.worker.memory.terminate": False}


# --- the store, in this process ----------------------------------------------------------------------------


def path_of(store, key) -> str:
    files = store._files
    return os.path.join(files.directory, files.filenames[key])


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ 0x01]))


def flip_in_value(path, value):
    """A bit flipped in the middle of ``value``'s own bytes in its spill file (``disk_store`` writes them
    uncompressed)."""
    with open(path, "rb") as f:
        offset = f.read().index(value.tobytes())
    flip(path, offset + value.nbytes // 2)


def grow(path):
    with open(path, "ab") as f:
        f.write(b"x")


X0 = np.arange(100, dtype="int32")  # the value of x0 below

DAMAGE = {
    "a bit flipped in the data": (lambda path, other: flip_in_value(path, X0), "does not match its checksum"),
    "a bit flipped in the checksum": (lambda path, other: flip(path, os.path.getsize(path) - 12),
                                      "does not match its checksum"),
    "the tag overwritten": (lambda path, other: flip(path, os.path.getsize(path) - 1), "does not end in its checksum"),
    "cut short": (lambda path, other: os.truncate(path, os.path.getsize(path) - 1), "does not end in its checksum"),
    "emptied": (lambda path, other: os.truncate(path, 0), "holds 0 bytes, less than its checksum"),
    "grown": (lambda path, other: grow(path), "does not end in its checksum"),
    "another key's file in its place": (lambda path, other: os.replace(other, path), "does not match its checksum"),
    "removed": (lambda path, other: os.remove(path), "was removed while the worker held the value there"),
}


@pytest.fixture(params=[checksum._XXH3, checksum._CRC32], ids=["XXH3-64", "CRC-32"])
def disk_store(request, tmp_path, monkeypatch):
    """A store whose host tier keeps 600 bytes in memory and spills the rest to disk, uncompressed, with either
    checksum."""
    if request.param == checksum._XXH3:
        pytest.importorskip("xxhash")
    monkeypatch.setattr(checksum, "_writer_tag", lambda: request.param)
    with dask.config.set({"distributed.worker.memory.spill-compression": False}):  # the values' bytes as they are
        store = DeviceHostDiskStore(device_memory_limit=10**6, memory_limit=1000, worker_local_directory=str(tmp_path))
    lost = []
    store.on_lost = lost.append
    yield store, lost
    store.close()


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_spill_file_is_an_error_naming_key_and_file_never_a_value(disk_store, damage):
    store, lost = disk_store
    values = {f"x{i}": X0 + i for i in range(5)}  # 400 bytes each: x0 to x3 on disk
    for key, value in values.items():
        store[key] = value.copy()  # the store's values alone: a value still alive elsewhere is read from memory
    assert {"x0", "x1"} <= set(store.disk)
    assert "x0" not in store._host.slow.cache  # so reading x0 reads its file
    path = path_of(store, "x0")
    harm, problem = DAMAGE[damage]
    harm(path, path_of(store, "x1"))
    with pytest.raises(SpillFileError) as info:
        store["x0"]
    message = str(info.value)
    assert re.search(f"the spill file of 'x0', {re.escape(path)}, {problem}|the spill file of 'x0' is gone: "
                     f"{re.escape(path)} {problem}", message), message
    assert "x0" not in store and lost == ["x0"]  # forgotten, and the worker told so
    for key in ("x2", "x3", "x4") if damage == "another key's file in its place" else ("x1", "x2", "x3", "x4"):
        assert np.array_equal(store[key], values[key])  # the others read back right


def test_checksums_are_kept_with_each_file_and_checked_on_read(disk_store):
    pytest.importorskip("xxhash")  # the two checksums side by side
    store, _ = disk_store
    for i in range(4):
        store[f"x{i}"] = np.full(400, i, dtype="uint8")
    size = os.path.getsize(path_of(store, "x0"))
    store._files.tag = checksum._CRC32 if store._files.tag == checksum._XXH3 else checksum._XXH3
    store["y"] = np.full(400, 9, dtype="uint8")  # written with the other checksum: each file names its own
    assert all(np.array_equal(store[f"x{i}"], np.full(400, i, dtype="uint8")) for i in range(4))
    assert size - 20 > 400  # the trailer is 20 bytes on top of distributed's serialized value


# --- a cluster: damaged and removed files in a worker --------------------------------------------------------


def make(i):
    return standin_device.make(NBYTES, i)


def spill_files(dask_worker) -> dict:
    return {key: path_of(dask_worker.data, key) for key in dask_worker.data.disk}


def damage_files(dask_worker, corrupt, remove):
    flip(path_of(dask_worker.data, corrupt), 1000)
    os.remove(path_of(dask_worker.data, remove))


@pytest.fixture
def spilling_cluster(simulate):
    """One simulated GPU worker: 1 MB of device tier, 2 MB of host memory before disk, a 4 MB host limit."""
    simulate(1)
    with dask.config.set(SPILLING), LocalCUDACluster(n_workers=1, device_memory_limit="1MB", memory_limit="4MB",
                                                     dashboard_address=False) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("standin_device"))
        yield cluster, client


def test_damaged_and_removed_spill_files_in_a_worker_are_reported_and_recomputed(spilling_cluster):
    cluster, client = spilling_cluster
    (pid,) = client.run(os.getpid).values()
    values = client.map(make, range(20), pure=False)
    wait(values)
    (files,) = client.run(spill_files).values()
    by_key = {f.key: f for f in values}
    corrupt, remove = (by_key[key] for key in sorted(files, key=lambda k: list(by_key).index(k))[:2])
    client.run(damage_files, corrupt=corrupt.key, remove=remove.key)

    for victim, problem in [(corrupt, "does not match its checksum"), (remove, "is gone")]:
        with pytest.raises(SpillFileError, match=f"spill file of '{re.escape(victim.key)}'.*{problem}") as info:
            client.submit(standin_device.total, victim).result(timeout=60)  # the task that read it fails, loudly
        assert files[victim.key] in str(info.value)  # naming the file
    # the lost values are computed again where they are wanted: the client gets them, right
    want = {f.key: NBYTES * (i % 256) for i, f in enumerate(values)}
    for victim in (corrupt, remove):
        assert standin_device.total(victim.result(timeout=60)) == want[victim.key]
    assert client.gather(client.map(standin_device.total, values, pure=False)) == list(want.values())
    assert list(client.run(os.getpid).values()) == [pid]  # the same worker throughout


class FullDisk:
    """A spill file that is created, then refused part way through its write: the disk filled up."""

    def __init__(self, path, mode, *args):
        self.file = open(path, mode, *args)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self.file.__exit__(*exc)

    def write(self, data):
        self.file.write(bytes(memoryview(data)[:1]))  # a byte, then no room
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def writelines(self, lines):
        for line in lines:
            self.write(line)


def test_a_write_the_full_disk_refuses_leaves_no_file_behind(disk_store, monkeypatch):
    store, _ = disk_store
    monkeypatch.setattr(zict.file, "open", FullDisk, raising=False)
    for i in range(10):  # 400 bytes each, 600 kept in memory: every one past that is a write that fails
        try:
            store[f"x{i}"] = np.arange(100, dtype="int32")
        except SpillFileError:
            pass
    files = store._files
    assert files.failures > 0 and len(store.disk) == 0
    assert os.listdir(files.directory) == []  # no empty or cut-short file, however often the disk refused
    monkeypatch.undo()
    assert [int(store[f"x{i}"].sum()) for i in range(10) if f"x{i}" in store] == [4950] * len(store)


def device_value(kind: str, fill: int, nbytes: int = 400):
    return make_cupy(fill) if kind == "cupy" else standin_device.make(nbytes, fill)


def as_numpy(value) -> np.ndarray:
    return value.get() if hasattr(value, "get") else getattr(value, "values", value)


@pytest.mark.parametrize("kind", [pytest.param("stand-in", id="stand-in device"),
                                  pytest.param("cupy", marks=pytest.mark.gpu, id="cupy")])
@pytest.mark.parametrize("fault", ["disk full", "directory gone"])
def test_device_data_over_a_failing_disk_stays_in_memory_to_the_limit_then_is_refused_by_name(tmp_path, kind, fault,
                                                                                              monkeypatch):
    """Values go device -> host -> disk, and the disk fails: what the host tier can hold stays there, what it
    cannot is refused naming the directory, within seconds; every accepted value reads back whole, no
    half-written file stays, and spilling resumes once the disk works."""
    nbytes = NBYTES if kind == "cupy" else 400
    with dask.config.set({"distributed.worker.memory.pause": False}):  # this process is far past the limit
        store = DeviceHostDiskStore(device_memory_limit=2 * nbytes, memory_limit=5 * nbytes // 2,
                                    worker_local_directory=str(tmp_path))
    if fault == "disk full":
        monkeypatch.setattr(zict.file, "open", FullDisk, raising=False)
    else:  # the directory was removed and something else took its name
        os.rmdir(store._directory)
        open(store._directory, "w").close()
    began, kept, refused = time.monotonic(), {}, []
    for i in range(8):
        try:
            store[f"x{i}"] = device_value(kind, i, nbytes)
            kept[f"x{i}"] = i
        except SpillFileError as e:
            refused.append(str(e))
    assert time.monotonic() - began < 30
    assert refused and all(f"under {store._directory}" in why for why in refused), refused
    assert len(kept) >= 2 and not store.disk and store.metrics()["disk-write-errors"] >= 1
    for key, fill in kept.items():
        assert np.array_equal(as_numpy(store[key]), np.full(nbytes, fill, dtype="uint8")), key
    if fault == "disk full":
        assert not os.listdir(store._directory)  # each half-written file was removed as its write failed
        monkeypatch.undo()
        for key in list(kept)[:2]:
            del store[key]
        for i in range(8, 12):
            store[f"x{i}"] = device_value(kind, i, nbytes)
        assert store.disk and np.array_equal(as_numpy(store["x11"]), np.full(nbytes, 11, dtype="uint8"))
    store.close()


# --- a cluster: the disk fills or turns read-only while it spills --------------------------------------------


class FailingDisk:
    """A spill file opened for writing on a disk that refuses: full, or remounted read-only."""

    code = errno.ENOSPC

    def __init__(self, path, mode, *args):
        if "w" in mode or "a" in mode:
            raise OSError(self.code, os.strerror(self.code), path)
        self.file = open(path, mode, *args)

    def __getattr__(self, name):
        return getattr(self.file, name)

    def __enter__(self):
        return self.file.__enter__()

    def __exit__(self, *exc):
        return self.file.__exit__(*exc)


def break_disk(code):
    FailingDisk.code = code
    zict.file.open = FailingDisk


def mend_disk():
    del zict.file.open  # the builtin again


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["disk full", "read-only"])
def test_a_disk_that_fails_during_a_spilling_workload_fails_tasks_naming_it_and_loses_nothing(spilling_cluster, code):
    cluster, client = spilling_cluster
    disk_fails_during_a_spilling_workload(client, code, make, standin_device.total)


def make_cupy(i):
    import cupy

    return cupy.full(NBYTES, i % 256, dtype="uint8")


def total_cupy(x) -> int:
    return int(x.sum(dtype="int64"))


@pytest.mark.gpu
@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["disk full", "read-only"])
def test_a_disk_that_fails_under_cupy_data_fails_tasks_naming_it_and_loses_nothing(code):
    """The same, with CuPy arrays on a real GPU: they move device -> host -> disk as the stand-ins do."""
    with dask.config.set(SPILLING), LocalCUDACluster(n_workers=1, device_memory_limit="1MB", memory_limit="4MB",
                                                     dashboard_address=False) as cluster, Client(cluster) as client:
        disk_fails_during_a_spilling_workload(client, code, make_cupy, total_cupy)


def disk_fails_during_a_spilling_workload(client, code, make, total):
    (pid,) = client.run(os.getpid).values()
    before = client.map(make, range(20), pure=False)  # 4 MB: 1 on the device, 2 in host memory, 1 on disk
    wait(before)
    ((address, directory),) = client.run(lambda dask_worker: dask_worker.data._files.directory).items()
    assert memory_stats(client)["gpu-0"]["disk-keys"] >= 5  # CuPy's allocations are rounded up: a few more

    client.run(break_disk, code)
    during = client.map(make, range(20, 40), pure=False)  # host memory fills to its 4 MB limit, then refuses
    wait(during)
    failed = [f for f in during if f.status == "error"]
    stored = [f for f in during if f.status == "finished"]
    assert failed and stored, [f.status for f in during]
    for future in failed:
        error = future.exception()
        assert isinstance(error, SpillFileError), error
        assert re.search(rf"'{re.escape(future.key)}' is not stored: the worker holds .* at or near its "
                         rf"memory_limit of 3.81 MiB, because spilling to disk failed: cannot write the spill file "
                         rf"of .* under {re.escape(directory)} \({re.escape(os.strerror(code))}\)",
                         str(error)), str(error)
    assert memory_stats(client)["gpu-0"]["disk-write-errors"] > 0
    assert list(client.run(os.getpid).values()) == [pid]  # the worker stays up

    def totals(futures):
        return client.gather(client.map(total, futures, pure=False))

    values = {f.key: i for i, f in enumerate([*before, *during])}
    ok = [*before, *stored]
    want = [NBYTES * (values[f.key] % 256) for f in ok]
    # everything stored reads back right, the disk still refusing: read where it lies, the worker's host memory
    # stays at its limit (a new result would be refused there)
    assert [total(x) for x in client.gather(ok)] == want
    assert memory_stats(client)["gpu-0"]["host-bytes"] <= 4_000_000
    client.run(mend_disk)
    del during, failed  # room again: the refused ones run again and spill as they should
    again = client.map(make, range(20, 40), pure=False)
    assert totals(again) == [NBYTES * (i % 256) for i in range(20, 40)]
    assert totals(ok) == want
    assert list(client.run(os.getpid).values()) == [pid]


def big(i):
    return np.full(16 * 2**20, i % 256, dtype="uint8")  # 16 MiB in host memory


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS], ids=["disk full", "read-only"])
def test_a_disk_that_refuses_every_spill_under_distributed_s_pause_ends_in_named_errors_not_a_wait(simulate, code):
    # distributed's own thresholds: spill past 40% of the limit, pause at 95%. The worker pauses on its process's
    # memory; without a refusal below that, the tasks queued on it wait forever.
    simulate(1)
    thresholds = {"distributed.worker.memory.target": 0.4, "distributed.worker.memory.spill": 0.9,
                  "distributed.worker.memory.pause": 0.95, "distributed.worker.memory.terminate": False}
    with dask.config.set(thresholds), LocalCUDACluster(n_workers=1, memory_limit="1GB", dashboard_address=False) \
            as cluster, Client(cluster) as client:
        before = client.map(big, range(30), pure=False)  # 480 MiB: past 40% of 1 GB, some of it on disk
        wait(before, timeout=60)
        ((directory),) = client.run(lambda dask_worker: dask_worker.data._files.directory).values()
        client.run(break_disk, code)
        after = client.map(big, range(30, 80), pure=False)  # 800 MiB more, which no disk takes
        wait(after, timeout=60)  # every one ends: stored in memory, or refused by name
        refused = [f for f in after if f.status == "error"]
        assert refused and all(f.status in ("finished", "error") for f in after)
        for future in refused:
            assert isinstance(future.exception(), SpillFileError)
            assert f"under {directory} ({os.strerror(code)})" in str(future.exception())
        kept = {i: f for i, f in enumerate([*before, *after]) if f.status == "finished"}
        # room on the disk first: the worker's memory is at its limit, and a read-back's results are new values to
        # store, which it would refuse as long as the disk does (how many depends on the worker's timing)
        client.run(mend_disk)
        firsts = client.gather(client.map(lambda a: int(a[0]), list(kept.values()), pure=False))
        assert firsts == [i % 256 for i in kept]  # what was kept reads back right, from memory or from disk


# --- a cluster: a worker holding spilled values is killed ----------------------------------------------------


def test_a_worker_killed_while_holding_spilled_values_comes_back_and_the_result_is_right(simulate):
    simulate(2)
    with dask.config.set(SPILLING), LocalCUDACluster(device_memory_limit="1MB", memory_limit="4MB",
                                                     dashboard_address=False) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("standin_device"))
        pids = dict(client.run(lambda dask_worker: (dask_worker.name, os.getpid())).values())
        values = client.map(make, range(40), pure=False)  # 8 MB over two workers: 1 MB a device, 2 in memory
        wait(values)
        stats = memory_stats(client)
        victim = max(stats, key=lambda name: stats[name]["disk-keys"])
        assert stats[victim]["disk-keys"] > 0, stats
        address = cluster.workers[victim].worker_address
        (on_disk,) = client.run(spill_files, workers=[address]).values()  # the only copies: lost with the worker

        os.kill(pids[victim], signal.SIGKILL)
        want = sum(NBYTES * (i % 256) for i in range(40))
        total = client.submit(sum, client.map(standin_device.total, values, pure=False))
        assert total.result(timeout=120) == want  # the killed worker's values were computed again
        client.wait_for_workers(2, timeout=60)
        after = dict(client.run(lambda dask_worker: (dask_worker.name, os.getpid())).values())
        assert after.keys() == pids.keys() and after[victim] != pids[victim]
        assert all(after[name] == pid for name, pid in pids.items() if name != victim)
        holders = client.who_has([f for f in values if f.key in on_disk])
        assert len(holders) == len(on_disk) and all(h and address not in h for h in holders.values()), holders
