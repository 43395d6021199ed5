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
    import dask.array  # noqa: F401  imported here, where its own optional imports look for CuPy

    looked = []
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: looked.append(name))
    assert start.warm(simulated=True) >= 0 and "dask.array" in sys.modules
    assert looked == []  # the warm-up does not even look for CuPy


def test_a_real_device_without_cupy_is_left_alone(monkeypatch):
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: None)
    assert start.warm(simulated=False) >= 0


@pytest.fixture
def stand_in_cupy(monkeypatch):
    """A CuPy whose context, first allocation and serializers say when they come, in ``calls``: the context from a
    thread of its own."""
    import threading
    import types

    calls = []
    made = threading.Event()

    def free(pointer):
        made.wait(10)  # until the test lets the driver finish
        calls.append(("context", threading.current_thread().name))

    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(free=free))
    cupy.empty = lambda n: calls.append("allocation")
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "distributed.protocol.cupy", types.ModuleType("distributed.protocol.cupy"))
    monkeypatch.setattr(start.importlib.util, "find_spec", lambda name: object())
    return calls, made


def test_the_context_is_made_beside_the_imports_and_what_needs_it_runs_before_the_first_allocation(stand_in_cupy):
    calls, made = stand_in_cupy

    def on_context():
        calls.append("on context")

    import threading

    threading.Timer(0.2, made.set).start()  # the driver takes a while; the imports do not wait for it
    assert start.warm(simulated=False, on_context=on_context) >= 0.2
    assert calls == [("context", start.CONTEXT), "on context", "allocation"]


def test_what_needs_the_context_runs_even_where_the_imports_fail(stand_in_cupy, monkeypatch):
    calls, made = stand_in_cupy
    made.set()
    monkeypatch.setitem(sys.modules, "dask.array", None)  # import dask.array raises
    with pytest.raises(ImportError):
        start.warm(simulated=False, on_context=lambda: calls.append("on context"))
    assert calls == [("context", start.CONTEXT), "on context"]


STAND_IN_CUPY = textwrap.dedent("""
    import types

    cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(free=lambda pointer: None))


    def empty(n):
        return None
""")


def test_what_waits_for_cupy_s_import_runs_when_the_warm_up_imports_it(tmp_path, monkeypatch):
    """The warm-up asks whether CuPy is installed before it imports it: the preparations waiting for CuPy's import
    (its allocator, what it compiles) run all the same (a worker whose warm-up lost them compiled CUB's kernels in
    its first group-by, 19 s)."""
    import types

    from dask_gpu.imports import cancel, when_imported

    (tmp_path / "cupy.py").write_text(STAND_IN_CUPY)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "cupy", raising=False)  # the real one, where installed, comes back after
    monkeypatch.setitem(sys.modules, "distributed.protocol.cupy", types.ModuleType("distributed.protocol.cupy"))
    prepared = []

    def prepare(module):
        prepared.append(module.__file__)

    when_imported("cupy", prepare)
    try:
        start.warm(simulated=False)
    finally:
        cancel(prepare)
    assert prepared == [str(tmp_path / "cupy.py")]


def test_a_context_that_fails_is_left_to_the_first_allocation(monkeypatch):
    import threading
    import types

    def free(pointer):
        raise RuntimeError("cudaErrorNoDevice")

    traces = []
    monkeypatch.setattr(threading, "excepthook", traces.append)
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(free=free)))
    thread = start.make_context(cupy)
    thread.join(10)
    assert not thread.is_alive() and traces == []  # no trace printed from the thread


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

    def slow_warm(simulated, on_context=None):
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


CONTEXT_WITHOUT_THE_GIL = textwrap.dedent("""
    import time
    import cupy
    from dask_gpu.array import start

    began = time.perf_counter()
    thread = start.make_context(cupy)
    last, held = began, 0.0
    while thread.is_alive():  # a pause longer than a few switch intervals: the other thread held the GIL
        now = time.perf_counter()
        held += now - last if now - last > 0.002 else 0.0
        last = now
    took = time.perf_counter() - began
    cupy.empty(1)
    print(took, held)
""")


@pytest.mark.gpu
def test_the_driver_makes_the_context_while_this_thread_goes_on(tmp_path):
    """A new process, whose context is not made yet: a thread beside the context's is held up for a small part of
    the time the context takes."""
    (tmp_path / "context.py").write_text(CONTEXT_WITHOUT_THE_GIL)
    done = subprocess.run([sys.executable, str(tmp_path / "context.py")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    took, held = map(float, done.stdout.split())
    assert took > 0.02 and held < 0.25 * took, (took, held)  # a thread that holds it: 0.5 or more


@pytest.mark.gpu
def test_a_gpu_worker_makes_its_cuda_context_as_it_starts():
    import cupy

    assert start.warm(simulated=False) > 0
    assert cupy.cuda.runtime.getDevice() == 0 and cupy.cuda.Device(0).compute_capability


FIRST_TASK = textwrap.dedent("""
    import time
    from dask_gpu.array import start

    def slow_warm(simulated, on_context=None):  # set in each worker too: its process runs this script's top again
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
