import gc
import math
import time

import dask
import pytest
from distributed import Client, get_worker
from distributed.diagnostics.plugin import SchedulerPlugin

from dask_gpu import LocalCUDACluster, NoGPUError, discover, internals
from dask_gpu.report import worker_dict


def wait_for(predicate, timeout=30):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def by_name(client):
    return {w["name"]: w for w in client.run(worker_dict).values()}


def test_workers_per_device_and_cpu_workers(simulate):
    simulate(["8GB", "16GB"])
    with LocalCUDACluster(
        cpu_workers=1, memory_limit="1GB", device_memory_limit=0.5, resources={"MEM": 5}, dashboard_address=":0"
    ) as cluster, Client(cluster) as client:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        workers = by_name(client)
        assert set(workers) == {"gpu-0", "gpu-1", "cpu-0"}
        gpu0, gpu1, cpu = workers["gpu-0"], workers["gpu-1"], workers["cpu-0"]
        assert gpu0["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert gpu1["CUDA_VISIBLE_DEVICES"] == "1,0"
        assert cpu["CUDA_VISIBLE_DEVICES"] == ""
        assert gpu0["resources"] == {"GPU": 1, "MEM": 5} == gpu1["resources"]
        assert "GPU" not in cpu["resources"]
        assert gpu0["nthreads"] == gpu1["nthreads"] == 2
        assert {w["memory_limit"] for w in workers.values()} == {10**9}
        assert gpu0["device_memory_limit"] == 4 * 10**9 and gpu1["device_memory_limit"] == 8 * 10**9
        assert gpu0["device"]["uuid"] == cluster.devices[0][1].uuid
        # each GPU worker runs on the cores of its (simulated) device, and they differ
        assert gpu0["cpu_affinity"] == list(cluster.devices[0][1].cpu_affinity)
        assert gpu1["cpu_affinity"] == list(cluster.devices[1][1].cpu_affinity)

        # GPU-tagged tasks run only on GPU workers
        with dask.annotate(resources={"GPU": 1}):
            tagged = dask.delayed(lambda i: get_worker().name)
            names = dask.compute(*[tagged(i, dask_key_name=f"t-{i}") for i in range(8)])
        assert set(names) <= {"gpu-0", "gpu-1"}
        assert client.submit(lambda: get_worker().name, workers=["cpu-0"]).result() == "cpu-0"


def test_scale_within_visible_devices(simulate):
    simulate(3)
    with LocalCUDACluster(n_workers=1, cpu_workers=1, dashboard_address=False) as cluster, Client(cluster) as client:
        assert set(cluster.worker_spec) == {"cpu-0", "gpu-0"}
        cluster.scale(3)
        client.wait_for_workers(4, timeout=60)
        assert set(by_name(client)) == {"cpu-0", "gpu-0", "gpu-1", "gpu-2"}
        cluster.scale(1)
        wait_for(lambda: len(internals.scheduler_identity(client)["workers"]) == 2)
        assert set(by_name(client)) == {"cpu-0", "gpu-0"}  # the CPU worker stays
        with pytest.raises(ValueError, match="3 GPU.*visible"):
            cluster.scale(4)
        assert set(cluster.worker_spec) == {"cpu-0", "gpu-0"}  # nothing changed


def test_visible_devices_rotation_and_config_fallback(simulate):
    simulate(4)
    uuid0 = discover().devices[0].uuid
    with dask.config.set({"gpu.nthreads": 2}), LocalCUDACluster(
        CUDA_VISIBLE_DEVICES=f"2,{uuid0[:12]}", n_workers=1, dashboard_address=False
    ) as cluster, Client(cluster) as client:
        workers = by_name(client)
        assert list(workers) == ["gpu-2"]
        assert workers["gpu-2"]["CUDA_VISIBLE_DEVICES"] == f"2,{uuid0[:12]}"
        assert workers["gpu-2"]["nthreads"] == 2
        cluster.scale(2)
        client.wait_for_workers(2, timeout=60)
        assert by_name(client)["gpu-0"]["CUDA_VISIBLE_DEVICES"] == f"{uuid0[:12]},2"


@pytest.mark.parametrize(
    "setting, expected",
    [({}, math.inf), ({"gpu.worker-saturation": 1.5}, 1.5), ({"gpu.worker-saturation": None}, 1.1)],
)
def test_root_tasks_are_sent_ahead_to_gpu_workers(simulate, setting, expected):
    simulate(1)
    with dask.config.set(setting), LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        assert cluster.scheduler.WORKER_SATURATION == expected
        futures = client.map(time.sleep, [0.05] * 20, pure=False)  # root tasks, one thread
        wait_for(lambda: len(cluster.scheduler.tasks) == 20)
        queued = len(cluster.scheduler.queued)  # held back on the scheduler, not sent to the worker
        assert (queued == 0) if expected == math.inf else (queued >= 15)
        client.gather(futures)
    assert dask.config.get("distributed.scheduler.worker-saturation") == 1.1  # only that scheduler's


class CollectorSeen(SchedulerPlugin):
    """Whether Python's cycle collector ran while the scheduler took each graph in."""

    def __init__(self):
        self.seen = []

    def update_graph(self, scheduler, **kwargs):
        self.seen.append(gc.isenabled())


def test_the_scheduler_takes_graphs_in_with_the_collector_paused(simulate, collector_on):
    simulate(1)
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        plugin = CollectorSeen()
        cluster.scheduler.add_plugin(plugin)
        assert client.submit(sum, [1, 2]).result() == 3
        assert client.submit(sum, [3, 4]).result() == 7
        assert plugin.seen == [False, False]
        assert gc.isenabled()


def test_pre_import_failure_is_clear(simulate):
    simulate(1)
    with pytest.raises(ValueError, match="No module named 'no_such_module_xyz'"):
        LocalCUDACluster(pre_import="json,no_such_module_xyz", dashboard_address=False)


def test_pre_import_runs_in_each_worker(simulate):
    simulate(1)
    with LocalCUDACluster(pre_import=["colorsys"], dashboard_address=False) as cluster, Client(cluster) as client:
        assert client.run(lambda: "colorsys" in __import__("sys").modules) == {
            w: True for w in internals.scheduler_identity(client)["workers"]
        }
        assert by_name(client)["gpu-0"]["pre_import"] == ["colorsys"]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n_workers": 3}, ValueError, "2 GPU"),
        ({"n_workers": -1}, ValueError, "n_workers=-1: a LocalCUDACluster runs 1 to 2 GPU workers here"),
        ({"n_workers": 0}, ValueError, "n_workers=0: .*give n_workers=0 with cpu_workers=N"),
        ({"CUDA_VISIBLE_DEVICES": "5"}, ValueError, "'5'.*indices 0-1"),
        ({"CUDA_VISIBLE_DEVICES": "0,x"}, ValueError, "'x'"),
        ({"device_memory_limit": "64GB"}, ValueError, "larger than the device"),
        ({"device_memory_limit": 1.5}, ValueError, "between 0 and 1"),
        ({"threads_per_worker": 0}, ValueError, ">= 1"),
        ({"cpu_workers": -2}, ValueError, "cpu_workers"),
        ({"resources": "GPU"}, ValueError, "NAME=AMOUNT"),
        ({"security": "yes"}, TypeError, "security"),
        ({"worker_saturation": 0}, ValueError, "worker_saturation.*> 0"),
        ({"cpu_workers": 10**9}, ValueError, "cpu_workers=1000000000 is more than this machine's"),
        ({"worker_saturation": "all"}, ValueError, "worker_saturation.*'all'"),
    ],
)
def test_bad_arguments_fail_before_starting(simulate, kwargs, error, match):
    simulate(2)
    with pytest.raises(error, match=match):
        LocalCUDACluster(dashboard_address=False, **kwargs)


def test_no_gpu_is_a_clear_error(no_gpu):
    with pytest.raises(NoGPUError, match="DASK_GPU__SIMULATE"):
        LocalCUDACluster()


def test_dashboard_attaches_in_the_background(simulate):
    import urllib.request

    pytest.importorskip("bokeh")  # in the test extra; without it the cluster shows an "install bokeh" page
    simulate(1)
    with LocalCUDACluster(dashboard_address="127.0.0.1:0") as cluster:
        assert cluster.dashboard_link.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(cluster.dashboard_link, timeout=5) as page:
                    assert page.status == 200 and b"bokeh" in page.read().lower()
                    break
            except OSError:
                assert time.monotonic() < deadline, "the dashboard never came up"
                time.sleep(0.1)


def test_no_dashboard_binds_no_fixed_port(simulate):
    simulate(1)
    with LocalCUDACluster(dashboard_address=False) as cluster:
        server = cluster.scheduler.http_server
        assert server.address == "127.0.0.1" and server.port != 8787


def test_cudf_spilling_reaches_every_gpu_worker(simulate):
    simulate(2)
    with LocalCUDACluster(enable_cudf_spill=True, cudf_spill_stats=1, dashboard_address=False) as cluster, \
            Client(cluster) as client:
        assert all(w["cudf_spill"] for w in by_name(client).values())
        assert cluster.options.cudf_spill_stats == 1


def fake_cudf(monkeypatch):
    """cuDF's options and global spill manager, as far as dask-gpu sets them."""
    import sys
    import types

    manager = types.SimpleNamespace(value=None)
    spill_manager = types.SimpleNamespace(
        get_global_manager=lambda: manager.value, set_global_manager=lambda m: setattr(manager, "value", m),
        SpillManager=lambda **kwargs: ("manager", kwargs), set_spill_on_demand_globally=lambda: None)
    options = {"spill": False, "spill_stats": 0, "spill_device_limit": None, "spill_on_demand": False}
    cudf = types.SimpleNamespace(get_option=options.__getitem__, set_option=options.__setitem__, manager=manager)
    for name, module in {"cudf": cudf, "cudf.core.buffer": types.SimpleNamespace(spill_manager=spill_manager),
                         "cudf.core": types.SimpleNamespace()}.items():
        monkeypatch.setitem(sys.modules, name, module)
    return cudf


def test_a_closed_cluster_gives_the_client_its_cudf_spilling_back(simulate, monkeypatch):
    """A spillable cuDF buffer that a client sends to workers whose spilling is off kills them: the client of a
    cluster with enable_cudf_spill spills as long as the cluster lives, and no longer."""
    simulate(1)
    cudf = fake_cudf(monkeypatch)
    with LocalCUDACluster(enable_cudf_spill=True, cudf_spill_stats=1, dashboard_address=False, n_workers=0,
                          cpu_workers=1):
        assert cudf.get_option("spill") and cudf.get_option("spill_stats") == 1 and cudf.manager.value
    assert not cudf.get_option("spill") and cudf.get_option("spill_stats") == 0 and cudf.manager.value is None


def test_a_cluster_closed_before_cudf_came_leaves_nothing_pending(simulate):
    import sys

    from dask_gpu.imports import _AfterImport

    def pending():  # hooks waiting for cuDF (a plugin set up in this process by another test may leave one)
        return sum(isinstance(f, _AfterImport) and f.name == "cudf" for f in sys.meta_path)

    simulate(1)
    assert "cudf" not in sys.modules
    before = pending()
    with LocalCUDACluster(enable_cudf_spill=True, dashboard_address=False, n_workers=0, cpu_workers=1):
        assert pending() == before + 1
    assert pending() == before


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"enable_cudf_spill": "yes"}, "enable_cudf_spill must be True or False, not 'yes'"),
    ({"cudf_spill_stats": -1}, "cudf_spill_stats must be >= 0, not -1"),
])
def test_bad_cudf_spilling_keywords_are_refused(simulate, kwargs, match):
    simulate(1)
    with pytest.raises(ValueError, match=match):
        LocalCUDACluster(**kwargs)


def test_spill_cudf_sets_cudf_options_and_starts_a_manager_it_lacks(monkeypatch):
    import sys
    import types

    from dask_gpu.plugins import spill_cudf

    options, calls = {"spill_device_limit": None, "spill_on_demand": True}, []
    manager = types.SimpleNamespace(
        get_global_manager=lambda: None,  # cuDF made buffers before spilling was asked for
        SpillManager=lambda **kw: ("manager", kw),
        set_global_manager=calls.append,
        set_spill_on_demand_globally=lambda: calls.append("on demand"),
    )
    fake = types.ModuleType("cudf")
    fake.set_option, fake.get_option = options.__setitem__, options.get
    buffer = types.ModuleType("cudf.core.buffer")
    buffer.spill_manager = manager
    for name, module in {"cudf": fake, "cudf.core": types.ModuleType("cudf.core"), "cudf.core.buffer": buffer}.items():
        monkeypatch.setitem(sys.modules, name, module)
    spill_cudf(True, 2)
    assert options["spill"] is True and options["spill_stats"] == 2
    assert calls == [("manager", {"device_memory_limit": None, "statistic_level": 2}), "on demand"]


GUARDED = '''from distributed import Client
from dask_gpu import LocalCUDACluster


def main():
    with LocalCUDACluster(dashboard_address=False) as cluster, Client(cluster) as client:
        print(client.submit(sum, [1, 2]).result())


if __name__ == "__main__":
    main()
'''


@pytest.mark.parametrize("script, line", [
    (GUARDED.replace('if __name__ == "__main__":\n    main()', "main()"), 10),  # a top-level call, unguarded
    (GUARDED.replace('if __name__ == "__main__":', "if True:"), 11),
    ("from dask_gpu import LocalCUDACluster\ncluster = LocalCUDACluster(dashboard_address=False)\n", 2),
    (GUARDED, None),
])
def test_a_script_that_starts_a_cluster_without_the_main_guard_is_told_so_in_one_line(tmp_path, script, line):
    import os
    import subprocess
    import sys

    path = tmp_path / "script.py"
    path.write_text(script)
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DASK_GPU__SIMULATE": "1"})
    if line is None:
        assert done.returncode == 0 and done.stdout.strip() == "3", done.stderr
        return
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last == (f'RuntimeError: {path}, line {line}, starts a LocalCUDACluster outside `if __name__ == "__main__":`'
                    "; each worker process imports the script again: put the code that starts the cluster under "
                    "that guard")
    assert "Nanny" not in done.stderr and len(done.stderr.splitlines()) < 15  # it was 198 lines, 12 tracebacks


def test_a_cluster_for_cudf_partitions_warms_the_client_once_its_first_worker_spawns_and_waits_for_it(simulate,
                                                                                                       monkeypatch):
    """The warm-up's imports held up the spawning of the workers: it starts as the first nanny asks to spawn."""
    import threading

    from dask_gpu import cluster as cluster_module
    from dask_gpu.dataframe import start
    from dask_gpu.scheduler import GPUScheduler

    events, add_nanny = [], GPUScheduler.add_nanny

    async def asked(self, comm, address):
        events.append("nanny")
        return await add_nanny(self, comm, address)

    def step(dask_cudf):
        def run():
            time.sleep(0.5)  # joined before the start returns, however long it takes
            events.append((threading.current_thread().name, dask_cudf.__name__))
        return run

    simulate(1)
    monkeypatch.setattr(GPUScheduler, "add_nanny", asked)
    monkeypatch.setattr(start, "wanted", lambda simulated: True)
    monkeypatch.setattr(start, "client_warm_up", step)
    with LocalCUDACluster(dashboard_address=False, n_workers=0, cpu_workers=2):
        warmed = (cluster_module.WARMING, "cudf_backend")
        assert events[0] == "nanny" and warmed in events  # after a nanny asked, done before the start returned
        assert events.count("nanny") == 2 and len(events) == 3  # one warm-up, for two nannies
    monkeypatch.setattr(start, "wanted", lambda simulated: False)
    with LocalCUDACluster(dashboard_address=False, n_workers=0, cpu_workers=1) as cluster:
        assert cluster._warm_ups == [] and cluster._warming is None


def test_a_failing_warm_up_step_is_logged_and_the_next_runs(caplog):
    import types

    ran = []

    def failing():
        raise ImportError("no dask-cudf here")

    cluster = types.SimpleNamespace(_warming=None, _warm_ups=[failing, lambda: ran.append("next")])
    with caplog.at_level("DEBUG", logger="dask_gpu"):
        LocalCUDACluster._warm_up(cluster)
        first = cluster._warming
        LocalCUDACluster._warm_up(cluster)  # started once
        first.join(10)
    assert cluster._warming is first and ran == ["next"] and "no dask-cudf here" in caplog.text


def test_the_cluster_s_scheduler_has_the_plugins_dask_gpu_gives_any_scheduler(simulate):
    from dask_gpu import scheduler

    simulate(1)
    with LocalCUDACluster(dashboard_address=False, n_workers=1) as cluster:
        names = set(cluster.scheduler.plugins)
    assert {plugin.name for plugin, *_ in scheduler.plugins()} | {scheduler.DeviceIndices.name} <= names
