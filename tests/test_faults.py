"""Faults a GPU cluster meets: killed workers, device memory exhausted, a full or broken spill disk,
a scheduler that goes away, SIGTERM while spilling, many clients at once. Nothing is lost and nothing hangs.

Without a GPU, simulated devices and a stand-in device type (``standin_device``) exercise the same
worker, store and allocator code; the ``gpu`` tests repeat what needs real device memory.
"""

import asyncio
import errno
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import types
from concurrent.futures import ThreadPoolExecutor

import dask
import numpy as np
import psutil
import pytest
import standin_device
from conftest import wait_for_file
from distributed import Client, KilledWorker, get_worker, wait

from dask_gpu import LocalCUDACluster, internals
from dask_gpu.memory.allocator import DeviceMemoryError, allocate_with_spill
from dask_gpu.memory.checksum import SpillFileError
from dask_gpu.memory.store import DeviceHostDiskStore

HERE = os.path.dirname(__file__)


def wait_for(predicate, timeout=60, what="condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def pids_by_name(client) -> dict:
    return {name: pid for name, pid in client.run(lambda dask_worker: (dask_worker.name, os.getpid())).values()}


def slow_square(i):
    time.sleep(0.05)
    return i * i


# --- a worker killed mid-computation --------------------------------------------------------------


def test_a_gpu_worker_killed_mid_computation_comes_back_and_the_result_is_right(simulate):
    simulate(2)
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        before = pids_by_name(client)
        spill_dirs = dict(client.run(lambda dask_worker: (dask_worker.name, dask_worker.data._directory)).values())
        squares = client.map(slow_square, range(80), resources={"GPU": 1}, pure=False)
        total = client.submit(sum, squares)
        wait_for(lambda: sum(f.done() for f in squares) >= 10, what="some tasks to finish")
        os.kill(before["gpu-1"], signal.SIGKILL)  # its results so far are lost with it
        assert total.result(timeout=120) == sum(i * i for i in range(80))
        client.wait_for_workers(2, timeout=60)
        after = pids_by_name(client)
        assert after["gpu-0"] == before["gpu-0"] and after["gpu-1"] != before["gpu-1"]
        assert not psutil.pid_exists(before["gpu-1"])
        assert not os.path.exists(spill_dirs["gpu-1"])  # the new worker cleared the killed one's directory
        visible = client.run(lambda dask_worker: (dask_worker.name, os.environ["CUDA_VISIBLE_DEVICES"]))
        assert sorted(visible.values()) == [("gpu-0", "0,1"), ("gpu-1", "1,0")]  # the new one on its GPU


# --- device memory exhausted, nothing left to spill -----------------------------------------------


class StandInOOM(MemoryError):
    """What a device allocator raises when it is out of memory."""


def allocate_on_a_full_device(nbytes):
    """A task whose allocation fails however much the worker spills: the device is full of others' data."""
    store = get_worker().data

    def malloc(n):
        raise StandInOOM(n)

    return allocate_with_spill(malloc, nbytes, spill=store.spill, describe=store.describe, oom_errors=(StandInOOM,))


def test_device_out_of_memory_fails_that_task_and_the_worker_serves_the_next(simulate):
    simulate(1)
    with LocalCUDACluster(device_memory_limit="1GB", dashboard_address=False) as cluster, Client(cluster) as client:
        client.run(lambda: __import__("standin_device"))
        (pid,) = client.run(os.getpid).values()
        held = client.submit(standin_device.make, 10**6, 7)
        wait(held)
        doomed = client.submit(allocate_on_a_full_device, 3 * 10**12)
        with pytest.raises(DeviceMemoryError) as info:
            doomed.result(timeout=60)
        message = str(info.value)
        assert "3000000000000 bytes" in message and "smaller chunks" in message
        assert "already spilled to host or disk" in message  # what the worker held, in the error
        # the worker spilled what it could for the task, kept it, and goes on
        assert client.submit(standin_device.total, held).result(timeout=30) == 7 * 10**6
        assert client.submit(slow_square, 12).result(timeout=30) == 144
        assert client.run(os.getpid) == {cluster.workers["gpu-0"].worker_address: pid}


@pytest.mark.gpu
def test_gpu_device_out_of_memory_fails_that_task_and_the_worker_serves_the_next():
    import cupy

    def too_much():
        return cupy.empty(2**44, dtype="uint8")  # 16 TiB: refused at once

    with LocalCUDACluster(n_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        (pid,) = client.run(os.getpid).values()
        kept = client.submit(cupy.arange, 10**6)
        with pytest.raises(MemoryError, match=str(2**44)):
            client.submit(too_much).result(timeout=60)
        assert client.submit(lambda x: int(x.sum()), kept).result(timeout=30) == (10**6 - 1) * 10**6 // 2
        assert list(client.run(os.getpid).values()) == [pid]


# --- host memory exhausted: the nanny restarts the worker -----------------------------------------


def hold_600_mb():
    held = np.ones(600 * 10**6 // 8)
    time.sleep(5)  # the nanny restarts the worker meanwhile
    return held.sum()


def test_a_task_whose_workers_exceed_their_memory_limit_says_so(simulate):
    simulate(2)
    with dask.config.set({"distributed.scheduler.allowed-failures": 1}), \
            LocalCUDACluster(memory_limit="300MiB", dashboard_address=False) as cluster, Client(cluster) as client:
        direct = client.submit(hold_600_mb, pure=False)
        dependent = client.submit(slow_square, client.submit(hold_600_mb, pure=False))
        for future in (direct, dependent):
            with pytest.raises(KilledWorker) as info:
                future.result(timeout=60)
            message = "".join(traceback.format_exception_only(info.value))
            assert "all 2 workers running it were restarted for exceeding their memory limit " \
                   "(memory_limit=300.00 MiB): give workers more memory" in message
            assert len(message.splitlines()) <= 5
        assert client.submit(slow_square, 4).result(timeout=30) == 16  # the restarted workers serve the next


# --- closing many workers ------------------------------------------------------------------------


def slow_heartbeats(scheduler, seconds):
    """The scheduler answers each heartbeat after ``seconds`` (``seconds=None``: with an OSError): as on a busy
    machine, every worker has one under way."""
    answer = scheduler.handlers["heartbeat_worker"]

    async def slow(*args, **kwargs):
        if seconds is None:
            raise OSError("no answer")
        await asyncio.sleep(seconds)
        return answer(*args, **kwargs)

    scheduler.handlers["heartbeat_worker"] = slow


def test_closing_many_workers_logs_no_heartbeat_trace_and_a_failing_heartbeat_still_shows(simulate, capfd):
    simulate(12)
    with LocalCUDACluster(memory_limit="1GB", dashboard_address=False) as cluster, Client(cluster) as client:
        assert sum(client.gather(client.map(slow_square, range(24)))) == sum(i * i for i in range(24))
        slow_heartbeats(cluster.scheduler, None)
        wait_for(lambda: "Failed to communicate with scheduler during heartbeat" in capfd.readouterr().err,
                 timeout=30, what="a failing heartbeat in the log")
        slow_heartbeats(cluster.scheduler, 60)
        time.sleep(1.5)  # each worker's next heartbeat (every second) is under way, with no answer
        capfd.readouterr()
    closing = capfd.readouterr().err
    assert "Traceback" not in closing and "heartbeat" not in closing, closing


# --- a full or broken spill disk ----------------------------------------------------------------


@pytest.fixture
def host_spilling_store(tmp_path):
    """A store whose host tier keeps 600 bytes in memory and spills the rest to disk. distributed's pause is
    off: this process uses far more than the store's 1000 bytes, where a worker would pause at once."""
    with dask.config.set({"distributed.worker.memory.pause": False}):
        store = DeviceHostDiskStore(device_memory_limit=10**6, memory_limit=1000, worker_local_directory=str(tmp_path))
        yield store
    store.close()


class DiskFullAfterHalf:
    """A file that takes half of what is written to it, then fails as a full disk does."""

    def __init__(self, path, mode):
        self.file = open(path, mode)

    def write(self, data):
        data = memoryview(data).cast("B")
        self.file.write(data[: len(data) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def writelines(self, chunks):
        for chunk in chunks:
            self.write(chunk)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.file.close()


def files_in(directory) -> list:
    return [os.path.join(d, f) for d, _, names in os.walk(directory) for f in names]


@pytest.mark.parametrize("fault", ["disk full", "directory gone"])
def test_a_full_or_broken_spill_disk_keeps_the_data_in_memory_up_to_the_limit(host_spilling_store, fault,
                                                                              monkeypatch):
    import zict.file

    store = host_spilling_store
    if fault == "disk full":
        monkeypatch.setattr(zict.file, "open", DiskFullAfterHalf, raising=False)
    else:  # the directory was removed and something else took its name
        os.rmdir(store._directory)
        open(store._directory, "w").close()
    values = {f"x{i}": np.full(400, i, dtype="uint8") for i in range(2)}
    for key, value in values.items():
        store[key] = value  # past 600 bytes the host tier tries the disk, which fails: kept in memory
    with pytest.raises(SpillFileError, match=f"'x2' is not stored: .* at or near its memory_limit .*spilling to disk "
                                             f"failed: cannot write the spill file of 'x0' under {store._directory}"):
        store["x2"] = np.full(400, 2, dtype="uint8")  # past the 1000-byte limit: refused, loudly
    assert "x2" not in store and not store.disk  # nothing is taken for spilled that is not whole on disk
    assert store.metrics()["disk-write-errors"] >= 2
    for key, value in values.items():
        assert np.array_equal(store[key], value)
    if fault == "disk full":
        assert not files_in(store._directory)  # each half-written file was removed as its write failed
        monkeypatch.undo()  # room again: spilling to disk works from the next value on
        store["y"] = np.full(400, 9, dtype="uint8")
        assert store.disk and np.array_equal(store["x0"], values["x0"])


def test_spill_files_are_for_the_workers_user_only(host_spilling_store):
    store = host_spilling_store
    for i in range(5):
        store[f"x{i}"] = np.full(400, i, dtype="uint8")
    assert store.disk
    assert os.stat(store._directory).st_mode & 0o777 == 0o700  # others cannot list or open its files


def test_an_unusable_spill_directory_is_a_clear_error(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(OSError, match="cannot make the spill directory .*--local-directory"):
        DeviceHostDiskStore(device_memory_limit=1000, worker_local_directory=str(blocker))


# --- the scheduler goes away; SIGTERM while spilling ------------------------------------------------


def start(args, log, env=None) -> subprocess.Popen:
    """``python -m dask ARGS``, its output in the file ``log``; this directory importable (the stand-in)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([HERE, os.environ.get("PYTHONPATH", "")]), **(env or {})}
    with open(log, "w") as out:
        return subprocess.Popen([sys.executable, "-m", "dask", *args], env=env, stdout=out, stderr=subprocess.STDOUT)


def stop(*procs):
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)


def start_scheduler(tmp_path):
    path = str(tmp_path / "scheduler.json")
    proc = start(["scheduler", "--port", "0", "--dashboard-address", ":0", "--host", "127.0.0.1",
                  "--scheduler-file", path], tmp_path / "scheduler.log")
    wait_for_file(path)
    return proc, path


def wait_for_workers(client, n, proc, log):
    """Until ``n`` workers have joined; fails at once if the process that starts them has died."""
    def joined():
        assert proc.poll() is None, f"the worker process exited with {proc.returncode}: {open(log).read()[-2000:]}"
        return len(internals.scheduler_identity(client)["workers"]) >= n

    wait_for(joined, what=f"{n} workers")


def test_gpu_workers_exit_after_death_timeout_when_the_scheduler_goes_away(tmp_path):
    scheduler, path = start_scheduler(tmp_path)
    worker = start(["gpu", "worker", "--scheduler-file", path, "--death-timeout", "3", "--no-dashboard"],
                   tmp_path / "worker.log", env={"DASK_GPU__SIMULATE": "2"})
    try:
        with Client(scheduler_file=path, timeout=30) as client:
            wait_for_workers(client, 2, worker, tmp_path / "worker.log")
            children = psutil.Process(worker.pid).children(recursive=True)
        assert len(children) >= 2
        scheduler.kill()
        scheduler.wait(30)
        start_time = time.monotonic()
        worker.wait(60)  # raises if it hangs
        assert time.monotonic() - start_time < 60
        gone = psutil.wait_procs(children, timeout=10)[1]
        assert not gone, f"processes left behind: {gone}"  # the workers, and so their GPUs, are released
    finally:
        stop(worker, scheduler)


def test_a_worker_whose_start_outlasts_its_death_timeout_says_so_and_exits(tmp_path):
    """A start past --death-timeout (a busy machine's, here a preload that takes its time) ends in one line that
    names the timeout, not in what closing the other workers left (once: "AssertionError: Status.starting")."""
    (tmp_path / "slow_start.py").write_text("import time\n\ndef dask_setup(worker):\n    time.sleep(30)\n")
    scheduler, path = start_scheduler(tmp_path)
    env = {"DASK_GPU__SIMULATE": "2", "PYTHONPATH": os.pathsep.join([str(tmp_path), HERE])}
    worker = start(["gpu", "worker", "--scheduler-file", path, "--death-timeout", "2", "--no-dashboard",
                    "--preload", "slow_start"], tmp_path / "worker.log", env=env)
    try:
        assert worker.wait(60) == 1
        with open(tmp_path / "worker.log") as log:
            lines = [line for line in log if line.startswith("dask gpu worker:")]
        assert len(lines) == 1 and "did not start within --death-timeout 2" in lines[0], lines
    finally:
        stop(worker, scheduler)


def make_and_keep(i):
    return standin_device.make(200_000, i)


def test_sigterm_while_spilling_leaves_no_spill_files_or_processes(tmp_path):
    scheduler, path = start_scheduler(tmp_path)
    local = tmp_path / "local"
    worker = start(["gpu", "worker", "--scheduler-file", path, "--no-dashboard", "--preload", "standin_device",
                    "--device-memory-limit", "1MB", "--memory-limit", "4MB", "--local-directory", str(local)],
                   tmp_path / "worker.log", env={"DASK_GPU__SIMULATE": "1",
                                                 "DASK_DISTRIBUTED__WORKER__MEMORY__PAUSE": "False",
                                                 "DASK_DISTRIBUTED__WORKER__MEMORY__TERMINATE": "False"})
    try:
        with Client(scheduler_file=path, timeout=30) as client:
            wait_for_workers(client, 1, worker, tmp_path / "worker.log")
            children = psutil.Process(worker.pid).children(recursive=True)
            kept = client.map(make_and_keep, range(100))  # 20 MB through a 1 MB device tier and 4 MB of host
            wait_for(lambda: any("storage" in f for f in files_in(local)), what="spill files")
            worker.send_signal(signal.SIGTERM)  # while the worker is still spilling
            worker.wait(60)
            del kept
        gone = psutil.wait_procs(children, timeout=10)[1]
        assert not gone, f"processes left behind: {gone}"
        assert not [f for f in files_in(local) if "storage" in f], "spill files left behind"
    finally:
        stop(worker, scheduler)


# --- many clients at once ---------------------------------------------------------------------------


def square(i):
    return i * i


def one_clients_work(address, i, everyone):
    """A client of its own: a few tasks whose answer depends on ``i``, once all the clients are connected."""
    with Client(address, timeout="60s", set_as_default=False) as client:
        everyone.wait(timeout=60)
        parts = client.map(square, [i, i + 1, i + 2], pure=False)
        total = client.submit(sum, parts, pure=False)
        result = total.result(timeout=60)
    return result, client.status


def test_200_clients_at_once_each_get_their_own_right_answer_and_close(simulate):
    n = 200
    simulate(2)
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        everyone = threading.Barrier(n)
        with ThreadPoolExecutor(n) as pool:
            futures = [pool.submit(one_clients_work, cluster.scheduler_address, i, everyone) for i in range(n)]
            results = [f.result(timeout=120) for f in futures]
        assert results == [(i * i + (i + 1) ** 2 + (i + 2) ** 2, "closed") for i in range(n)]
        # the scheduler let each one go; only this test's own client is left
        wait_for(lambda: set(cluster.scheduler.clients) <= {client.id, "fire-and-forget"}, timeout=30,
                 what="the clients to leave the scheduler")
        assert client.submit(slow_square, 3).result(timeout=30) == 9


@pytest.mark.parametrize("event_first", [True, False], ids=["event, then removal", "removal, then event"])
def test_a_memory_restart_counts_whether_its_event_comes_before_or_after_the_removal(event_first):
    from dask_gpu import internals
    from dask_gpu.scheduler import MemoryDeaths

    plugin = MemoryDeaths()
    task = types.SimpleNamespace(state="processing")
    plugin.scheduler = types.SimpleNamespace(workers={"tcp://w1": types.SimpleNamespace(address="tcp://w1",
                                                                                           memory_limit=2**28)},
                                             tasks={"x": task, "y": task})
    event = (internals.MEMORY_RESTART_EVENT, {"worker": "tcp://w1"})
    removal = ("all", {"action": "remove-worker", "worker": "tcp://w1", "processing-tasks": ["x", "gone-key"]})
    for topic, msg in (event, removal) if event_first else (removal, event):
        if topic == "all":
            plugin.scheduler.workers.pop("tcp://w1")
        plugin.log_event(topic, msg)
    assert plugin.deaths == {"x": 1} and not plugin.gone
