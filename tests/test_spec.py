import asyncio
import dataclasses
import importlib.util
import os
import pickle
import sys

import dask
import distributed
import pytest
from distributed.system import MEMORY_LIMIT

from dask_gpu import devices, spec
from dask_gpu.devices import SIMULATED_MEMORY
from dask_gpu.options import WorkerOptions
from dask_gpu.plugins import GPUWorker, QuietClose, pin_threads

ALLOWED_CORES = sorted(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.delenv("RAPIDS_NO_INITIALIZE", raising=False)
    monkeypatch.delenv("KVIKIO_NTHREADS", raising=False)


@pytest.fixture
def selected():
    with dask.config.set({"gpu.simulate": 3}):
        return devices.select(devices.discover())


@pytest.fixture
def restore_affinity():
    before = os.sched_getaffinity(0)
    yield before
    pin_threads(before)
    assert os.sched_getaffinity(0) == before


def build(selected, position=0, n_workers=None, name_prefix=None, **kwargs):
    opts = WorkerOptions.resolve(**kwargs)
    return spec.gpu_worker_spec(selected, position, opts, n_workers or len(selected), name_prefix=name_prefix)


def gpu_plugin(worker_spec) -> GPUWorker:
    plugins = [p for p in worker_spec["options"]["plugins"] if isinstance(p, GPUWorker)]
    assert len(plugins) == 1
    return plugins[0]


# -- GPU workers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "position, visible, name", [(0, "0,1,2", "gpu-0"), (1, "1,2,0", "gpu-1"), (2, "2,0,1", "gpu-2")]
)
def test_gpu_worker_spec_each_position(selected, position, visible, name):
    s = build(selected, position)
    assert s["cls"] is distributed.Nanny
    opts = s["options"]
    assert opts["env"] == {
        "CUDA_VISIBLE_DEVICES": visible,
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "RAPIDS_NO_INITIALIZE": "True",  # cuDF's import checks nothing: the worker's first task is sooner
        "KVIKIO_NTHREADS": io_threads(selected[position][1]),
    }
    assert opts["config"] == {"distributed.diagnostics.nvml": False}  # simulated: distributed must not monitor them
    assert opts["name"] == name
    assert opts["resources"] == {"GPU": 1}
    assert opts["nthreads"] == 2
    plugin = gpu_plugin(s)
    device = selected[position][1]
    assert plugin.device["label"] == name
    assert plugin.device["uuid"] == device.uuid
    assert plugin.device["memory_total"] == device.memory_total


def test_gpu_worker_spec_uuid_tokens(selected):
    uuids = [d.uuid for _, d in selected]
    by_uuid = [(d.uuid, d) for _, d in selected]
    assert build(by_uuid, 1)["options"]["env"]["CUDA_VISIBLE_DEVICES"] == ",".join(uuids[1:] + uuids[:1])


def io_threads(device) -> str:
    """A core near the GPU a file-reading thread, and no fewer than cuDF's own count."""
    return str(max(spec.IO_THREADS, len(spec.usable_cores(device.cpu_affinity))))


def test_a_worker_reads_files_with_a_thread_a_core_near_its_gpu(selected, monkeypatch):
    device = selected[0][1]
    many = dataclasses.replace(device, cpu_affinity=tuple(ALLOWED_CORES) * 12)  # more cores than cuDF's 8 threads
    monkeypatch.setattr(spec, "usable_cores", lambda cores: tuple(cores))
    assert build([("0", many)], 0)["options"]["env"]["KVIKIO_NTHREADS"] == str(len(ALLOWED_CORES) * 12)
    few = dataclasses.replace(device, cpu_affinity=(0,))
    assert build([("0", few)], 0)["options"]["env"]["KVIKIO_NTHREADS"] == str(spec.IO_THREADS)


def test_cuda_device_order_and_the_other_defaults_not_overridden(selected, monkeypatch):
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.setenv("RAPIDS_NO_INITIALIZE", "0")
    monkeypatch.setenv("KVIKIO_NTHREADS", "2")
    env = build(selected, 0)["options"]["env"]
    assert not {"CUDA_DEVICE_ORDER", "RAPIDS_NO_INITIALIZE", "KVIKIO_NTHREADS"} & set(env)  # the user's, inherited
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,2"


@pytest.mark.parametrize("prefix, name", [(None, "gpu-1"), ("", "gpu-1"), ("host", "host-gpu-1")])
def test_gpu_worker_name(selected, prefix, name):
    assert build(selected, 1, name_prefix=prefix)["options"]["name"] == name


@pytest.mark.parametrize(
    "resources, expected",
    [
        (None, {"GPU": 1}),
        ({"MEM": 1e9}, {"GPU": 1, "MEM": 1e9}),
        ("MEM=2 FOO=3", {"GPU": 1, "MEM": 2.0, "FOO": 3.0}),
    ],
)
def test_gpu_worker_resources(selected, resources, expected):
    assert build(selected, resources=resources)["options"]["resources"] == expected


@pytest.mark.parametrize("nthreads", [1, 4])
def test_gpu_worker_nthreads(selected, nthreads):
    assert build(selected, nthreads=nthreads)["options"]["nthreads"] == nthreads


@pytest.mark.parametrize(
    "memory_limit, n_workers, expected",
    [
        ("auto", 3, MEMORY_LIMIT // 3),
        ("auto", 1, MEMORY_LIMIT),
        (4 * 2**30, 3, 4 * 2**30),
        ("4GB", 3, 4_000_000_000),
        (0, 3, 0),
    ],
)
def test_gpu_worker_memory_limit(selected, memory_limit, n_workers, expected):
    s = build(selected, n_workers=n_workers, memory_limit=memory_limit)
    assert s["options"]["memory_limit"] == expected


@pytest.mark.parametrize(
    "limit, expected",
    [
        (None, int(0.8 * SIMULATED_MEMORY)),
        ("auto", SIMULATED_MEMORY),  # the whole device, as in dask-cuda
        (0.5, SIMULATED_MEMORY // 2),
        ("25%", SIMULATED_MEMORY // 4),
        ("8GB", 8_000_000_000),
        (0, 0),
    ],
)
def test_gpu_worker_device_memory_limit(selected, limit, expected):
    plugin = gpu_plugin(build(selected, device_memory_limit=limit))
    assert plugin.device_memory_limit == expected
    assert type(plugin.device_memory_limit) is int


def test_gpu_worker_device_memory_limit_per_device():
    with dask.config.set({"gpu.simulate": ["10GB", "20GB"]}):
        selected = devices.select(devices.discover())
    limits = [gpu_plugin(build(selected, i, device_memory_limit=0.5)).device_memory_limit for i in range(2)]
    assert limits == [5_000_000_000, 10_000_000_000]


def test_gpu_worker_device_memory_limit_larger_than_device(selected):
    with pytest.raises(ValueError, match="larger than the device"):
        build(selected, device_memory_limit="32GB")


@pytest.mark.parametrize("position", [0, 1, 2])
def test_gpu_worker_cpu_affinity(selected, position):
    device = selected[position][1]
    assert device.cpu_affinity
    assert gpu_plugin(build(selected, position)).cpu_affinity == device.cpu_affinity


def test_gpu_worker_cpu_affinity_off(selected):
    assert gpu_plugin(build(selected, cpu_affinity=False)).cpu_affinity == ()


def test_gpu_worker_cpu_affinity_only_allowed_cores():
    device = devices.Device(0, "A", "GPU-a", 2**30, cpu_affinity=(ALLOWED_CORES[0], 10**6))
    plugin = gpu_plugin(spec.gpu_worker_spec([("0", device)], 0, WorkerOptions.resolve(), 1))
    assert plugin.cpu_affinity == (ALLOWED_CORES[0],)


def test_rmm_keywords_on_simulated_devices_are_checked_then_ignored_where_rmm_is_missing(selected, monkeypatch,
                                                                                           caplog):
    from dask_gpu.memory import allocator

    monkeypatch.setattr(allocator, "find_spec", lambda name, *a: None)  # no RMM here, as on a laptop
    spec._say_once.cache_clear()
    with caplog.at_level("WARNING", logger="dask_gpu"):
        assert gpu_plugin(build(selected, rmm_pool_size="1GB")).allocator.allocator == "rmm"
    assert "RMM's keywords are checked and ignored on simulated devices" in caplog.text
    with pytest.raises(ValueError, match="rmm_pool_size='lots' is not a size"):
        build(selected, rmm_pool_size="lots")  # checked all the same
    real = [("0", devices.Device(0, "A", "GPU-a", 2**34))]
    with pytest.raises(ValueError, match="rmm package is not installed"):
        spec.gpu_worker_spec(real, 0, WorkerOptions.resolve(rmm_pool_size="1GB"), 1)  # a real GPU needs it


def test_gpu_worker_pre_import(selected):
    assert gpu_plugin(build(selected, pre_import="json")).pre_import == ("json",)


def test_gpu_worker_extra_env_and_plugins_merged(selected):
    other = distributed.WorkerPlugin()
    s = build(selected, 2, env={"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "9"}, plugins=[other], death_timeout=30)
    opts = s["options"]
    assert opts["env"] == {
        "OMP_NUM_THREADS": "1",
        "CUDA_VISIBLE_DEVICES": "2,0,1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "RAPIDS_NO_INITIALIZE": "True",
        "KVIKIO_NTHREADS": io_threads(selected[2][1]),
    }
    assert opts["plugins"][0] is other
    assert len(opts["plugins"]) == 3
    assert isinstance(opts["plugins"][1], GPUWorker) and isinstance(opts["plugins"][2], QuietClose)
    assert opts["death_timeout"] == 30


def test_gpu_worker_extra_not_consumed(selected):
    opts = WorkerOptions.resolve(env={"A": "1"}, plugins=[distributed.WorkerPlugin()])
    first = spec.gpu_worker_spec(selected, 0, opts, 3)
    second = spec.gpu_worker_spec(selected, 1, opts, 3)
    assert first["options"]["env"]["A"] == second["options"]["env"]["A"] == "1"
    assert len(first["options"]["plugins"]) == len(second["options"]["plugins"]) == 3
    assert set(opts.extra) == {"env", "plugins"}


@pytest.mark.parametrize(
    "kwargs, present",
    [
        ({}, {}),
        ({"local_directory": "/tmp/scratch"}, {"local_directory": "/tmp/scratch"}),
        ({"protocol": "tcp://"}, {"protocol": "tcp"}),
        ({"local_directory": "/tmp/x", "protocol": "tls"}, {"local_directory": "/tmp/x", "protocol": "tls"}),
    ],
)
def test_optional_keys_only_when_set(selected, kwargs, present):
    opts = build(selected, **kwargs)["options"]
    for key in ("local_directory", "protocol"):
        if key in present:
            assert opts[key] == present[key]
        else:
            assert key not in opts


# -- CPU workers ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "resources, expected",
    [(None, {}), ({"GPU": 1, "MEM": 1e9}, {"MEM": 1e9}), ("GPU=1", {})],
)
def test_cpu_worker_spec(resources, expected):
    opts = WorkerOptions.resolve(resources=resources, env={"A": "1"})
    s = spec.cpu_worker_spec(0, opts, 4, nthreads=3)
    assert s["cls"] is distributed.Nanny
    assert s["options"]["name"] == "cpu-0"
    assert s["options"]["nthreads"] == 3
    assert s["options"]["env"] == {"A": "1", "CUDA_VISIBLE_DEVICES": ""}
    assert s["options"]["resources"] == expected
    assert s["options"]["memory_limit"] == MEMORY_LIMIT // 4
    assert not any(isinstance(p, GPUWorker) for p in s["options"]["plugins"])
    assert any(isinstance(p, QuietClose) for p in s["options"]["plugins"])


def test_cpu_worker_name_index():
    assert spec.cpu_worker_spec(2, WorkerOptions.resolve(), 3, nthreads=1)["options"]["name"] == "cpu-2"


@pytest.mark.parametrize(
    "cores, n_gpu, nthreads, n_cpu, expected",
    [
        (16, 2, 2, 3, 4),  # (16 - 4) // 3
        (16, 4, 1, 1, 12),
        (4, 4, 2, 2, 1),  # no cores left: still one thread
        (16, 2, 1, 0, 0),
        (16, 2, 1, -1, 0),
    ],
)
def test_cpu_worker_threads(monkeypatch, cores, n_gpu, nthreads, n_cpu, expected):
    monkeypatch.setattr(spec, "CPU_COUNT", cores)
    assert spec.cpu_worker_threads(n_gpu, WorkerOptions.resolve(nthreads=nthreads), n_cpu) == expected


@pytest.mark.parametrize(
    "limit, n_workers, expected",
    [("auto", 2, MEMORY_LIMIT // 2), ("auto", 0, MEMORY_LIMIT), (0, 2, 0), (2**30, 4, 2**30)],
)
def test_host_memory_limit(limit, n_workers, expected):
    assert spec.host_memory_limit(limit, n_workers) == expected


def test_a_host_memory_fraction_below_one_byte_is_refused_not_no_limit():
    with pytest.raises(ValueError, match="memory_limit=1e-300 .* less than one byte"):
        spec.host_memory_limit(1e-300, 1)


# -- GPUWorker plugin ----------------------------------------------------------------------


def plugin(**kwargs) -> GPUWorker:
    device = {"label": "gpu-0", "index": 0, "mig_index": None, "name": "Simulated GPU", "uuid": "GPU-a",
              "memory_total": 1, "simulated": True}
    return GPUWorker(device=device, device_memory_limit=kwargs.pop("device_memory_limit", 123), **kwargs)


class FakeWorker:
    """What the plugin's setup reads of a worker; weakly referable and hashable, as the /metrics collector
    (where prometheus_client is installed) keeps workers in a WeakSet."""

    def __init__(self, name):
        self.name, self.data, self.metrics = name, {}, {}


def fake_worker(name="gpu-0"):
    return FakeWorker(name)


def set_up(p, worker):
    """The plugin's setup, as a worker awaits it (with no scheduler to ask for WarmFirst)."""
    asyncio.run(p.setup(worker))


def test_plugin_name_and_info():
    p = plugin(cpu_affinity=[0], pre_import=["json"])
    assert p.name == "dask-gpu"
    assert p.info() == {
        "device": p.device,
        "device_memory_limit": 123,
        "cpu_affinity": (0,),
        "pre_import": ("json",),
        "allocator": None,
        "cudf_spill": False,
    }


def test_plugin_pickle_round_trip():
    p = plugin(cpu_affinity=(0, 1), pre_import=("json",))
    q = pickle.loads(pickle.dumps(p))
    assert q is not p
    assert isinstance(q, GPUWorker)
    assert q.info() == p.info()


def test_plugin_from_spec_pickles(selected):
    p = gpu_plugin(build(selected, 1))
    assert pickle.loads(pickle.dumps(p)).info() == p.info()


def test_plugin_setup_missing_module():
    p = plugin(pre_import=("json", "dask_gpu_no_such_module"))
    with pytest.raises(ImportError, match=r"worker gpu-3 could not import 'dask_gpu_no_such_module'"):
        set_up(p, fake_worker("gpu-3"))


def test_plugin_setup_imports(monkeypatch):
    monkeypatch.delitem(sys.modules, "colorsys", raising=False)
    set_up(plugin(pre_import=("colorsys",)), fake_worker())
    assert "colorsys" in sys.modules


@pytest.mark.parametrize("cores", [ALLOWED_CORES, ALLOWED_CORES[:1]])
def test_plugin_setup_pins(restore_affinity, cores):
    p = plugin(cpu_affinity=cores)
    set_up(p, fake_worker())
    assert os.sched_getaffinity(0) == set(cores)
    set_up(p, fake_worker())  # idempotent
    assert os.sched_getaffinity(0) == set(cores)


def test_plugin_setup_without_affinity_leaves_cores(restore_affinity):
    set_up(plugin(cpu_affinity=()), fake_worker())
    assert os.sched_getaffinity(0) == restore_affinity


def test_pin_threads_impossible_core(restore_affinity):
    with pytest.warns(RuntimeWarning, match=r"could not pin the worker to CPU cores \[1000000\]"):
        assert pin_threads([10**6]) is False
    assert os.sched_getaffinity(0) == restore_affinity


def test_pin_threads_ok(restore_affinity):
    assert pin_threads(ALLOWED_CORES[-1:]) is True
    assert os.sched_getaffinity(0) == {ALLOWED_CORES[-1]}


def test_ucx_transports_reach_each_worker_process(selected, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())  # as if distributed-ucxx
    nanny = build(selected, protocol="ucx", enable_nvlink=True, enable_infiniband=False)["options"]
    assert nanny["protocol"] == "ucx"
    assert nanny["config"]["distributed-ucxx"] == {"nvlink": True, "infiniband": False, "cuda-copy": True}
    assert "distributed-ucxx" not in build(selected, protocol="tcp")["options"].get("config", {})
