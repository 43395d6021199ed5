"""dask-cuda 26.10 parity, on simulated GPUs: every keyword, flag and name a dask-cuda user has.

The lists below are copied from dask-cuda 26.10 (LocalCUDACluster's signature, ``dask cuda worker``'s
and ``dask cuda config``'s options, the public names of its modules) as literals, so that dask-cuda is
not needed here. Each is checked for being accepted and for doing what it says where simulated devices
show it: in the worker specs, in the workers (``client.run(worker_dict)``), or in the options.
"""

import ast
import importlib
import inspect
import os
import pathlib
import signal
import subprocess
import sys
from importlib.util import find_spec
from unittest import mock

import dask
import numpy as np
import pytest
from click.testing import CliRunner
from distributed import Client, Nanny, SpecCluster, Worker
from parity_worker import TaggedNanny, TaggedWorker

import dask_gpu
from dask_gpu import internals, report
from dask_gpu.cli import gpu
from dask_gpu.devices import SIMULATED_MEMORY
from dask_gpu.memory import allocator
from dask_gpu.memory.store import DeviceHostDiskStore
from dask_gpu.plugins import GPUWorker

TESTS = pathlib.Path(__file__).parent

# dask-cuda 26.10: LocalCUDACluster.__init__'s keywords (before **kwargs), in order.
DASK_CUDA_CLUSTER_KEYWORDS = [
    "CUDA_VISIBLE_DEVICES", "n_workers", "threads_per_worker", "memory_limit", "device_memory_limit",
    "enable_cudf_spill", "cudf_spill_stats", "local_directory", "protocol", "enable_tcp_over_ucx",
    "enable_infiniband", "enable_nvlink", "enable_rdmacm", "rmm_pool_size", "rmm_maximum_pool_size",
    "rmm_managed_memory", "rmm_async", "rmm_allocator_external_lib_list", "rmm_release_threshold",
    "rmm_log_directory", "rmm_track_allocations", "log_spilling", "pre_import",
]
# dask-cuda 26.10: `dask cuda worker` options (a flag pair as one entry).
DASK_CUDA_WORKER_OPTIONS = [
    "--host", "--worker-port", "--listen-address", "--contact-address", "--nthreads", "--name", "--memory-limit",
    "--device-memory-limit", "--enable-cudf-spill/--disable-cudf-spill", "--cudf-spill-stats", "--rmm-pool-size",
    "--rmm-maximum-pool-size", "--rmm-managed-memory/--no-rmm-managed-memory", "--rmm-async/--no-rmm-async",
    "--set-rmm-allocator-for-libs", "--rmm-release-threshold", "--rmm-log-directory",
    "--rmm-track-allocations/--no-rmm-track-allocations", "--pid-file", "--resources", "--dashboard/--no-dashboard",
    "--dashboard-address", "--local-directory", "--scheduler-file", "--protocol", "--interface", "--preload",
    "--death-timeout", "--dashboard-prefix", "--tls-ca-file", "--tls-cert", "--tls-key",
    "--enable-tcp-over-ucx/--disable-tcp-over-ucx", "--enable-infiniband/--disable-infiniband",
    "--enable-nvlink/--disable-nvlink", "--enable-rdmacm/--disable-rdmacm", "--worker-class", "--pre-import",
    "--multiprocessing-method",
]
DASK_CUDA_CONFIG_OPTIONS = ["--scheduler-file", "--tls-ca-file", "--tls-cert", "--tls-key"]
# dask-cuda 26.10's public names, by module ("" is the package), that dask_gpu.cuda maps.
DASK_CUDA_NAMES = {
    "": ["LocalCUDACluster", "CUDAWorker", "__version__"],
    "local_cuda_cluster": ["LocalCUDACluster"],
    "cuda_worker": ["CUDAWorker"],
    "initialize": ["initialize", "dask_setup"],
    "worker_spec": ["worker_spec"],
    "plugins": ["CPUAffinity", "RMMSetup", "CUDFSetup", "PreImport"],
    "device_host_file": ["DeviceHostFile", "device_to_host", "host_to_device", "DeviceSerialized"],
    "is_device_object": ["is_device_object"],
    "is_spillable_object": ["is_spillable_object", "cudf_spilling_status"],
    "utils": [
        "get_n_gpus", "get_gpu_count", "get_gpu_count_mig", "get_device_total_memory", "get_cpu_affinity",
        "get_cpu_count", "get_gpu_uuid", "has_device_memory_resource", "nvml_device_index", "cuda_visible_devices",
        "parse_device_memory_limit", "parse_device_bytes", "parse_cuda_visible_device", "unpack_bitmask",
        "get_ucx_config", "get_worker_config", "get_cluster_configuration", "print_cluster_config",
        "wait_workers", "all_to_all", "nvtx_annotate",
    ],
}
needs_rmm = pytest.mark.skipif(find_spec("rmm") is None, reason="needs the rmm package (pip install rmm-cu13)")


@pytest.fixture(autouse=True)
def two_gpus(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with dask.config.set({"gpu.simulate": 2}):
        yield


@pytest.fixture
def rmm_found(monkeypatch):
    """As if rmm were installed: with simulated devices the allocator is only checked, never set up."""
    real = allocator.find_spec
    monkeypatch.setattr(allocator, "find_spec", lambda name, *a: object() if name == "rmm" else real(name, *a))


@pytest.fixture
def ucxx_found(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "distributed_ucxx" else real(n, *a))


class Started(Exception):
    """The cluster passed its checks: SpecCluster.__init__ would start the scheduler."""


def specs(**kwargs):
    """LocalCUDACluster(**kwargs) up to the start: (worker specs by name, the scheduler's spec, the options)."""
    seen = {}

    def stop(self, workers, scheduler, **rest):
        seen.update(workers=workers, scheduler=scheduler, options=self.options)
        raise Started

    with mock.patch.object(SpecCluster, "__init__", stop), pytest.raises(Started):
        dask_gpu.LocalCUDACluster(dashboard_address=False, **kwargs)
    return seen["workers"], seen["scheduler"], seen["options"]


def gpu0(**kwargs) -> dict:
    return specs(**kwargs)[0]["gpu-0"]


def plugin(spec) -> GPUWorker:
    return next(p for p in spec["options"]["plugins"] if isinstance(p, GPUWorker))


def store(spec) -> dict:
    cls, kwargs = spec["options"]["data"]
    assert cls is DeviceHostDiskStore
    return kwargs


# -- LocalCUDACluster: every keyword of dask-cuda 26.10 ------------------------------------------------


def test_every_dask_cuda_keyword_is_a_keyword_of_local_cuda_cluster():
    params = list(inspect.signature(dask_gpu.LocalCUDACluster).parameters)
    assert params[: len(DASK_CUDA_CLUSTER_KEYWORDS)] == DASK_CUDA_CLUSTER_KEYWORDS  # same order: positional calls work


KEYWORD_EFFECTS = {
    "CUDA_VISIBLE_DEVICES": ({"CUDA_VISIBLE_DEVICES": "1"}, lambda w, s, o: list(w) == ["gpu-1"]
                             and w["gpu-1"]["options"]["env"]["CUDA_VISIBLE_DEVICES"] == "1"),
    "n_workers": ({"n_workers": 1}, lambda w, s, o: list(w) == ["gpu-0"]),
    "threads_per_worker": ({"threads_per_worker": 3}, lambda w, s, o: w["gpu-0"]["options"]["nthreads"] == 3),
    "memory_limit": ({"memory_limit": "1GB"}, lambda w, s, o: w["gpu-0"]["options"]["memory_limit"] == 10**9),
    "device_memory_limit": ({"device_memory_limit": "1GB"},
                            lambda w, s, o: store(w["gpu-0"])["device_memory_limit"] == 10**9),
    "enable_cudf_spill": ({"enable_cudf_spill": True}, lambda w, s, o: plugin(w["gpu-0"]).cudf_spill == (True, 0)),
    "cudf_spill_stats": ({"enable_cudf_spill": True, "cudf_spill_stats": 1},
                         lambda w, s, o: plugin(w["gpu-0"]).cudf_spill == (True, 1)),
    "local_directory": ({"local_directory": "/tmp/parity"},
                        lambda w, s, o: w["gpu-0"]["options"]["local_directory"] == "/tmp/parity"),
    "protocol": ({"protocol": "tcp"},
                 lambda w, s, o: w["gpu-0"]["options"]["protocol"] == s["options"]["protocol"] == "tcp"),
    # a transport turned on with no protocol named means UCX, as in dask-cuda; GPU buffers need cuda-copy
    "enable_tcp_over_ucx": ({"enable_tcp_over_ucx": True}, lambda w, s, o: o.protocol == "ucx" and dict(o.ucx) == {
        "tcp": True, "cuda-copy": True}),
    "enable_infiniband": ({"enable_infiniband": True}, lambda w, s, o: w["gpu-0"]["options"]["config"][
        "distributed-ucxx"] == {"infiniband": True, "cuda-copy": True}),
    "enable_nvlink": ({"enable_nvlink": True}, lambda w, s, o: s["options"]["protocol"] == "ucx" and o.ucx["nvlink"]),
    "enable_rdmacm": ({"protocol": "ucx", "enable_infiniband": True, "enable_rdmacm": True},
                      lambda w, s, o: o.ucx["rdmacm"] is True),
    "rmm_pool_size": ({"rmm_pool_size": "1GB"}, lambda w, s, o: plugin(w["gpu-0"]).allocator.pool_size == 10**9),
    "rmm_maximum_pool_size": ({"rmm_pool_size": "1GB", "rmm_maximum_pool_size": 0.5},
                              lambda w, s, o: plugin(w["gpu-0"]).allocator.maximum_pool_size == SIMULATED_MEMORY // 2),
    "rmm_managed_memory": ({"rmm_managed_memory": True}, lambda w, s, o: plugin(w["gpu-0"]).allocator.managed_memory),
    "rmm_async": ({"rmm_async": True}, lambda w, s, o: plugin(w["gpu-0"]).allocator.use_async),
    "rmm_allocator_external_lib_list": ({"rmm_allocator_external_lib_list": "torch, cupy"}, lambda w, s, o: plugin(
        w["gpu-0"]).allocator.external_libs == ("torch", "cupy")),
    "rmm_release_threshold": ({"rmm_async": True, "rmm_release_threshold": "1GB"},
                              lambda w, s, o: plugin(w["gpu-0"]).allocator.release_threshold == 10**9),
    "rmm_log_directory": ({"rmm_log_directory": "/tmp"},
                          lambda w, s, o: plugin(w["gpu-0"]).allocator.log_directory == "/tmp"),
    "rmm_track_allocations": ({"rmm_track_allocations": True},
                              lambda w, s, o: plugin(w["gpu-0"]).allocator.track_allocations),
    "log_spilling": ({"log_spilling": True}, lambda w, s, o: store(w["gpu-0"])["log_spilling"] is True),
    "pre_import": ({"pre_import": "json,colorsys"},
                   lambda w, s, o: plugin(w["gpu-0"]).pre_import == ("json", "colorsys")),
}


@pytest.mark.filterwarnings("ignore:protocol=.* needs the distributed-ucxx package:UserWarning")
@pytest.mark.parametrize("keyword", DASK_CUDA_CLUSTER_KEYWORDS)
def test_each_dask_cuda_keyword_does_what_it_says(keyword, rmm_found, ucxx_found):
    kwargs, effect = KEYWORD_EFFECTS[keyword]
    assert effect(*specs(**kwargs)), kwargs


@pytest.mark.parametrize("kwargs, effect", [
    ({"worker_class": TaggedWorker}, lambda s: s["cls"] is Nanny and s["options"]["worker_class"] is TaggedWorker),
    ({"worker_class": "parity_worker.TaggedWorker"}, lambda s: s["options"]["worker_class"] is TaggedWorker),
    ({"worker_class": TaggedNanny}, lambda s: s["cls"] is TaggedNanny and "worker_class" not in s["options"]),
    ({"data": dict}, lambda s: s["options"]["data"] is dict and plugin(s).device_memory_limit == 0),
    ({"processes": True}, lambda s: "processes" not in s["options"]),
    ({"death_timeout": 5}, lambda s: s["options"]["death_timeout"] == 5),
    ({"worker_dashboard_address": ":0"},
     lambda s: s["options"]["dashboard"] and s["options"]["dashboard_address"] == ":0"),
    ({"lifetime": "1 hour"}, lambda s: s["options"]["lifetime"] == "1 hour"),
])
def test_local_cluster_and_worker_keywords_reach_the_workers(kwargs, effect):
    assert effect(gpu0(**kwargs))


# -- item 2: what a dask-cuda user would notice ----------------------------------------------------


@pytest.mark.parametrize("value", [None, 0, False])
def test_no_device_memory_limit_means_no_device_tier(value):
    spec = gpu0(device_memory_limit=value)
    assert "data" not in spec["options"] and plugin(spec).device_memory_limit == 0


@pytest.mark.parametrize("value", [None, 0, False])
def test_no_memory_limit_means_no_host_limit(value):
    spec = gpu0(memory_limit=value)
    assert spec["options"]["memory_limit"] == 0 and store(spec)["memory_limit"] == 0


@pytest.mark.parametrize("value, expected", [("default", SIMULATED_MEMORY // 2), ("auto", SIMULATED_MEMORY)])
def test_default_is_the_configuration_and_auto_the_whole_device(value, expected):
    with dask.config.set({"gpu.device-memory-limit": 0.5}):
        assert store(gpu0(device_memory_limit=value))["device_memory_limit"] == expected


def test_workers_are_named_by_device_label():  # dask-cuda names them 0, 1: a documented difference
    assert list(specs()[0]) == ["gpu-0", "gpu-1"]


@needs_rmm
def test_rmm_pool_size_with_rmm_async_warns_as_dask_cuda_does():
    with pytest.warns(FutureWarning, match="'rmm_pool_size' is not needed when 'rmm_async' is enabled"):
        gpu0(rmm_async=True, rmm_pool_size="1GB")


def test_data_given_is_used_and_a_device_limit_beside_it_warns():
    with pytest.warns(UserWarning, match="device_memory_limit='1GB' has no effect"):
        spec = gpu0(data=dict, device_memory_limit="1GB")
    assert spec["options"]["data"] is dict


@pytest.mark.parametrize("kwargs, match", [
    ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, "entry '2' is not a GPU on this machine"),
    ({"CUDA_VISIBLE_DEVICES": [0, 5]}, "entry '5' is not a GPU"),
    ({"n_workers": 3}, "cannot run 3 GPU workers: 2 GPU"),
])
def test_more_devices_than_exist_is_an_error_before_anything_starts(kwargs, match):
    with mock.patch.object(SpecCluster, "__init__", side_effect=AssertionError("started")), \
            pytest.raises(ValueError, match=match):
        dask_gpu.LocalCUDACluster(dashboard_address=False, **kwargs)


def test_a_missing_pre_import_module_is_the_import_error_a_worker_would_raise():
    with pytest.raises(ModuleNotFoundError, match="No module named 'no_such_module_xyz'") as info:
        dask_gpu.LocalCUDACluster(pre_import="json,no_such_module_xyz", dashboard_address=False)
    assert isinstance(info.value, ValueError) and info.value.name == "no_such_module_xyz"


# -- item 3: keywords dask-gpu does not take: one line, in this process ------------------------------


@pytest.mark.parametrize("kwargs, error, match", [
    ({"jit_unspill": True}, TypeError, "'jit_unspill' is not a keyword of dask-gpu: dask-cuda's JIT-unspilling"),
    ({"shared_filesystem": True}, TypeError, "'shared_filesystem' is not a keyword .* JIT-unspilling"),
    ({"ucx_net_devices": "eth0"}, TypeError, "'ucx_net_devices' .* UCX_NET_DEVICES"),
    ({"ip": "127.0.0.1"}, TypeError, "'ip' .* use host="),
    ({"processes": False}, ValueError, "processes=False: each GPU worker needs a process of its own"),
    ({"device_memory_limt": "1GB"}, TypeError,
     "unknown keyword 'device_memory_limt'.*did you mean 'device_memory_limit'"),
    ({"memory_target_fraction": 0.5}, TypeError, "neither LocalCUDACluster nor distributed's Nanny and Worker"),
    ({"threads_per_workers": 2}, TypeError, "did you mean 'threads_per_worker'"),
    ({"cuda_visible_devices": "0"}, TypeError, "did you mean 'CUDA_VISIBLE_DEVICES'"),
    ({"rmm_pool_sise": "1GB"}, TypeError, "did you mean 'rmm_pool_size'"),
    ({"worker_dashboard_adress": ":0"}, TypeError, "did you mean 'worker_dashboard_address'"),
])
def test_unknown_keywords_are_one_error_line_before_anything_starts(kwargs, error, match):
    with mock.patch.object(SpecCluster, "__init__", side_effect=AssertionError("started")), \
            pytest.raises(error, match=match) as info:
        dask_gpu.LocalCUDACluster(dashboard_address=False, **kwargs)
    assert "\n" not in str(info.value)


def test_a_worker_class_s_own_keywords_are_accepted():
    class Picky(Worker):
        def __init__(self, *args, colour="red", **kwargs):
            super().__init__(*args, **kwargs)

    assert gpu0(worker_class=Picky, colour="blue")["options"]["colour"] == "blue"
    with pytest.raises(TypeError, match="unknown keyword 'colour'"):
        gpu0(colour="blue")


def test_cuda_worker_refuses_unknown_keywords_too():
    with pytest.raises(TypeError, match="CUDAWorker: unknown keyword 'nthread'.*did you mean 'nthreads'"):
        dask_gpu.CUDAWorker("tcp://127.0.0.1:1", nthread=2)


# -- dask gpu worker: every `dask cuda worker` option ---------------------------------------------------


def run_worker(*args, scheduler=("tcp://127.0.0.1:1",)):
    """``dask gpu worker`` with its serving replaced: (exit code, output, the CUDAWorker, the config it ran in)."""
    seen = {}

    async def no_serving(worker):
        seen.update(worker=worker, method=dask.config.get("distributed.worker.multiprocessing-method"))
        return 0

    with mock.patch("dask_gpu.launch.serve", no_serving):
        result = CliRunner().invoke(gpu, ["worker", *scheduler, *args], catch_exceptions=False)
    return result.exit_code, result.output, seen.get("worker"), seen.get("method")


def test_every_dask_cuda_worker_option_is_an_option_of_dask_gpu_worker():
    flags = {"/".join((*p.opts, *p.secondary_opts)) for p in gpu.commands["worker"].params}
    assert [o for o in DASK_CUDA_WORKER_OPTIONS if o not in flags] == []
    config_flags = {f for p in gpu.commands["config"].params for f in p.opts}
    assert [o for o in DASK_CUDA_CONFIG_OPTIONS if o not in config_flags] == []


def opts(worker, i=0):
    return worker.specs[i]["options"]


WORKER_OPTION_EFFECTS = [
    (["--host", "127.0.0.1"], lambda w: opts(w)["host"] == "127.0.0.1"),
    (["--worker-port", "9000:9001"], lambda w: [p["worker_port"] for p in w.ports] == [[9000], [9001]]),
    (["--cuda-visible-devices", "1", "--listen-address", "tcp://127.0.0.1:9000", "--contact-address",
      "tcp://10.0.0.1:9000"], lambda w: w.extra == {"listen_address": "tcp://127.0.0.1:9000",
                                                     "contact_address": "tcp://10.0.0.1:9000"}),
    (["--nthreads", "2"], lambda w: opts(w)["nthreads"] == 2),
    (["--name", "node"], lambda w: [opts(w, i)["name"] for i in (0, 1)] == ["node-gpu-0", "node-gpu-1"]),
    (["--memory-limit", "1GB"], lambda w: opts(w)["memory_limit"] == 10**9),
    (["--memory-limit", "0"], lambda w: opts(w)["memory_limit"] == 0),
    (["--device-memory-limit", "1GB"], lambda w: store(w.specs[0])["device_memory_limit"] == 10**9),
    (["--device-memory-limit", "0"], lambda w: "data" not in opts(w)),
    (["--enable-cudf-spill"], lambda w: plugin(w.specs[0]).cudf_spill == (True, 0)),
    (["--disable-cudf-spill"], lambda w: plugin(w.specs[0]).cudf_spill == (False, 0)),
    (["--enable-cudf-spill", "--cudf-spill-stats", "2"], lambda w: plugin(w.specs[0]).cudf_spill == (True, 2)),
    (["--rmm-pool-size", "1GB", "--rmm-maximum-pool-size", "2GB"],
     lambda w: (plugin(w.specs[0]).allocator.pool_size, plugin(w.specs[0]).allocator.maximum_pool_size) == (
         10**9, 2 * 10**9)),
    (["--rmm-managed-memory"], lambda w: plugin(w.specs[0]).allocator.managed_memory),
    (["--no-rmm-managed-memory"], lambda w: plugin(w.specs[0]).allocator.allocator == "pool"),
    (["--rmm-async", "--rmm-release-threshold", "1GB"],
     lambda w: plugin(w.specs[0]).allocator.release_threshold == 10**9 and plugin(w.specs[0]).allocator.use_async),
    (["--no-rmm-async"], lambda w: not plugin(w.specs[0]).allocator.use_async),
    (["--set-rmm-allocator-for-libs", "cupy"], lambda w: plugin(w.specs[0]).allocator.external_libs == ("cupy",)),
    (["--rmm-log-directory", "/tmp"], lambda w: plugin(w.specs[0]).allocator.log_directory == "/tmp"),
    (["--rmm-track-allocations"], lambda w: plugin(w.specs[0]).allocator.track_allocations),
    (["--resources", "MEM=1 FOO=2"], lambda w: opts(w)["resources"] == {"GPU": 1, "MEM": 1, "FOO": 2}),
    (["--no-dashboard"], lambda w: opts(w)["dashboard"] is False),
    (["--dashboard-address", ":8799"], lambda w: opts(w)["dashboard"] and opts(w)["dashboard_address"] == ":8799"),
    (["--dashboard-prefix", "/w"], lambda w: opts(w)["http_prefix"] == "/w"),
    (["--local-directory", "/tmp/scratch"], lambda w: opts(w)["local_directory"] == "/tmp/scratch"),
    (["--protocol", "tcp"], lambda w: opts(w)["protocol"] == "tcp"),
    (["--interface", "lo"], lambda w: opts(w)["interface"] == "lo"),
    (["--preload", "json"], lambda w: opts(w)["preload"] == ["json"]),
    (["--death-timeout", "1 minute"], lambda w: opts(w)["death_timeout"] == 60),
    (["--tls-ca-file", "{pem}/ca.pem", "--tls-cert", "{pem}/cert.pem", "--tls-key", "{pem}/key.pem"],
     lambda w: opts(w)["security"].tls_worker_cert.endswith("cert.pem")),
    (["--protocol", "ucx", "--enable-tcp-over-ucx", "--disable-infiniband", "--enable-nvlink", "--enable-rdmacm"],
     lambda w: opts(w)["config"]["distributed-ucxx"] == {"tcp": True, "infiniband": False, "nvlink": True,
                                                         "rdmacm": True, "cuda-copy": True}),
    (["--protocol", "ucx", "--disable-tcp-over-ucx", "--disable-nvlink", "--disable-rdmacm"],
     lambda w: opts(w)["config"]["distributed-ucxx"] == {"tcp": False, "nvlink": False, "infiniband": True,
                                                         "rdmacm": False, "cuda-copy": True}),
    (["--worker-class", "parity_worker.TaggedWorker"], lambda w: opts(w)["worker_class"] is TaggedWorker),
    (["--pre-import", "json,colorsys"], lambda w: plugin(w.specs[0]).pre_import == ("json", "colorsys")),
]


@pytest.mark.parametrize("args, effect", WORKER_OPTION_EFFECTS,
                         ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_each_dask_cuda_worker_option_does_what_it_says(args, effect, rmm_found, ucxx_found, tmp_path):
    if any("{pem}" in a for a in args):  # credentials that load: the worker's TLS context is made before it starts
        credentials = pytest.importorskip("distributed").Security.temporary()
        for name, field in [("ca", "tls_ca_file"), ("cert", "tls_worker_cert"), ("key", "tls_worker_key")]:
            (tmp_path / f"{name}.pem").write_text(getattr(credentials, field))
    code, output, worker, _ = run_worker(*(a.replace("{pem}", str(tmp_path)) for a in args))
    assert code == 0, output
    assert effect(worker)


def test_pid_file_and_scheduler_file_and_multiprocessing_method(tmp_path):
    pid_file, scheduler_file = tmp_path / "pid", tmp_path / "scheduler.json"
    code, output, worker, method = run_worker("--scheduler-file", str(scheduler_file), "--pid-file", str(pid_file),
                                              "--multiprocessing-method", "fork", scheduler=())
    assert code == 0, output
    assert worker.scheduler_file == str(scheduler_file) and method == "fork"
    assert pid_file.read_text() == str(os.getpid())
    worker._remove_pid_file()
    assert not pid_file.exists()


@pytest.mark.parametrize("args, match", [
    (["--device-memory-limt", "1GB"], "No such option '--device-memory-limt'. Did you mean '--device-memory-limit'?"),
    (["--enable-jit-unspill"], "--enable-jit-unspill is a flag of older dask-cuda versions: JIT-unspilling is gone"),
    (["--net-devices", "eth0"], "--net-devices is a flag of older dask-cuda versions: UCX picks"),
    (["--set-rmm-allocator-for-libs", "jax"], "'jax' must name libraries among cupy, torch"),
    (["--multiprocessing-method", "thread"], "'thread' is not one of 'spawn', 'fork', 'forkserver'"),
    (["--worker-class", "parity_worker.Nope"], "worker_class 'parity_worker.Nope' cannot be imported"),
    (["--death-timeout", "soon"], "death_timeout='soon' is not a duration"),
])
def test_bad_worker_options_are_one_usage_error(args, match):
    code, output, worker, _ = run_worker(*args)
    assert code == 2 and match in " ".join(output.split()), output
    assert worker is None  # nothing started


def test_a_death_timeout_that_expires_exits_with_code_1(tmp_path):
    # dask-cuda exits 0 here; dask-gpu, as `dask worker`, 1: the workers never joined (a documented difference)
    env = {**os.environ, "DASK_GPU__SIMULATE": "1"}
    done = subprocess.run([sys.executable, "-m", "dask", "gpu", "worker", "tcp://127.0.0.1:9", "--death-timeout", "1",
                           "--no-dashboard"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert "cannot reach the scheduler at tcp://127.0.0.1:9 within 1 s (--death-timeout)" in done.stderr


def test_a_worker_name_taken_says_to_give_another():
    from dask_gpu import launch

    taken = ValueError("Unexpected response from register: {'status': 'error', 'message': 'name taken, node-gpu-0'}")
    line = launch.failure(RuntimeError("Nanny failed to start"), "tcp://127.0.0.1:1")
    assert line == "workers failed: RuntimeError: Nanny failed to start"
    error = RuntimeError("Nanny failed to start")
    error.__cause__ = taken
    line = launch.failure(error, "tcp://127.0.0.1:1")
    assert "name taken, node-gpu-0" in line and line.endswith("another worker has that name; give these another --name")


def test_a_worker_name_taken_is_one_line_before_any_nanny_starts():
    """A second ``dask gpu worker --name node`` beside a first: refused before its nannies start, in one line,
    with no trace (the scheduler would refuse each of them, with its traces)."""
    from distributed import Client, LocalCluster

    env = {**os.environ, "DASK_GPU__SIMULATE": "1"}
    with LocalCluster(n_workers=0, dashboard_address=":0") as cluster, Client(cluster) as client:
        argv = [sys.executable, "-m", "dask", "gpu", "worker", cluster.scheduler_address, "--name", "node",
                "--no-dashboard"]
        first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            client.wait_for_workers(1, timeout=60)
            second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
        finally:
            first.send_signal(signal.SIGTERM)
            first.wait(30)
    assert second.returncode == 1, second.stderr
    assert f"the scheduler at {cluster.scheduler_address} has workers named node-gpu-0 already; give these " \
           "another --name" in second.stderr
    assert "Traceback" not in second.stderr and len(second.stderr.strip().splitlines()) <= 3, second.stderr


def test_an_address_that_answers_but_not_as_a_scheduler_is_named_so():
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer():  # every connection gets bytes that no dask handshake begins with
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" * 64)

    threading.Thread(target=answer, daemon=True).start()
    try:
        env = {**os.environ, "DASK_GPU__SIMULATE": "1"}
        done = subprocess.run([sys.executable, "-m", "dask", "gpu", "worker", f"tcp://127.0.0.1:{port}",
                               "--death-timeout", "5", "--no-dashboard"], env=env, capture_output=True, text=True,
                              timeout=60)
    finally:
        server.close()
    assert done.returncode == 1
    assert f"something at tcp://127.0.0.1:{port} answers, but not as a dask scheduler" in done.stderr, done.stderr
    assert "Nanny" not in done.stderr  # found before any nanny started


def test_dask_scheduler_with_dask_gpu_worker_worker_class_and_cudf_spill(scheduler, tmp_path):
    env = {**os.environ, "DASK_GPU__SIMULATE": "2", "PYTHONPATH": os.pathsep.join([str(TESTS), os.getcwd()])}
    with open(tmp_path / "worker.log", "w") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "dask", "gpu", "worker", "--scheduler-file", scheduler, "--name", "node",
             "--worker-class", "parity_worker.TaggedWorker", "--enable-cudf-spill", "--death-timeout", "60s",
             "--dashboard-prefix", "/w", "--multiprocessing-method", "spawn"],
            env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            with Client(scheduler_file=scheduler, timeout="20s") as client:
                client.wait_for_workers(2, timeout=60)
                rows = report.workers_rows(client)
                assert [r["name"] for r in rows] == ["node-gpu-0", "node-gpu-1"]
                assert {r["worker_class"] for r in rows} == {"parity_worker.TaggedWorker"}
                assert all(r["cudf_spill"] and r["data"] == "DeviceHostDiskStore" for r in rows)
                prefixes = client.run(lambda dask_worker: dask_worker._http_prefix)  # --dashboard-prefix
                assert set(prefixes.values()) == {"/w"}
                worker.send_signal(signal.SIGTERM)
                assert worker.wait(30) == 0
        finally:
            if worker.poll() is None:
                worker.kill()
                worker.wait()


@pytest.mark.parametrize("args", [[], ["--host", "127.0.0.1"]])
def test_dask_gpu_worker_listens_where_it_reaches_its_scheduler_dashboards_too(scheduler, args):
    env = {**os.environ, "DASK_GPU__SIMULATE": "1"}
    worker = subprocess.Popen([sys.executable, "-m", "dask", "gpu", "worker", "--scheduler-file", scheduler,
                               "--death-timeout", "60s", *args], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        with Client(scheduler_file=scheduler, timeout="20s") as client:
            client.wait_for_workers(1, timeout=60)
            hosts = client.run(lambda dask_worker: {dask_worker.address.split("://")[1].rsplit(":", 1)[0], *(
                s.getsockname()[0] for s in dask_worker.http_server._sockets.values())})  # comm port, dashboard
            assert list(hosts.values()) == [{"127.0.0.1"}]  # the scheduler is on loopback: so is every listener
            workers = internals.scheduler_identity(client)["workers"].values()
            assert {w["nanny"].split("://")[1].rsplit(":", 1)[0] for w in workers} == {"127.0.0.1"}
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(30)


# -- dask_gpu.cuda: dask-cuda's names --------------------------------------------------------------------


@pytest.mark.parametrize("module, name", [(m, n) for m, names in DASK_CUDA_NAMES.items() for n in names])
def test_every_dask_cuda_name_imports_from_dask_gpu_cuda(module, name):
    path = "dask_gpu.cuda" + (f".{module}" if module else "")
    assert getattr(importlib.import_module(path), name) is not None


def test_the_compat_names_are_dask_gpu_s_own():
    from dask_gpu import cuda
    from dask_gpu.cuda import device_host_file, initialize, plugins, utils

    assert cuda.LocalCUDACluster is dask_gpu.LocalCUDACluster and cuda.CUDAWorker is dask_gpu.CUDAWorker
    assert plugins.PreImport is dask_gpu.plugins.PreImport and initialize.initialize is dask_gpu.ucx.initialize
    assert issubclass(device_host_file.DeviceHostFile, DeviceHostDiskStore)
    assert utils.print_cluster_config is report.print_cluster_config
    with pytest.raises(AttributeError, match="get_rmm_log_file_name has no dask-gpu equivalent: dask-gpu names"):
        utils.get_rmm_log_file_name  # noqa: B018


def test_nvtx_annotate_marks_nothing_without_nvtx_and_keeps_the_code_running(monkeypatch):
    monkeypatch.setitem(sys.modules, "nvtx", None)
    from dask_gpu.cuda.utils import nvtx_annotate

    @nvtx_annotate("step", color="green")
    def step(x):
        return x + 1

    @nvtx_annotate
    def bare(x):
        return x * 2

    with nvtx_annotate("block"):
        assert step(1) == 2 and bare(2) == 4


def test_explicit_comms_says_what_to_write_instead():
    sys.modules.pop("dask_gpu.cuda.explicit_comms", None)
    with pytest.raises(ImportError, match=r"dask_cuda.explicit_comms has no dask-gpu equivalent: .*write "
                                          r"df.shuffle\(on=...\) where dask-cuda code calls explicit_comms' shuffle"):
        import dask_gpu.cuda.explicit_comms  # noqa: F401


def test_import_dask_gpu_cuda_without_optional_libraries():
    blocked = "('cupy', 'rmm', 'cudf', 'pynvml', 'ucxx', 'distributed_ucxx', 'torch')"
    code = (f"import sys\nfor m in {blocked}: sys.modules[m] = None\nimport dask_gpu, dask_gpu.cuda\n"
            f"for m in {[m for m in DASK_CUDA_NAMES if m]}: __import__('dask_gpu.cuda.' + m)\nprint('ok')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "ok", done.stderr


def test_nothing_in_dask_gpu_imports_the_compat_package():
    root = pathlib.Path(dask_gpu.__file__).parent
    importers = []
    for path in root.rglob("*.py"):
        if "cuda" in path.relative_to(root).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            importers += [str(path) for n in names if n == "dask_gpu.cuda" or n.startswith("dask_gpu.cuda.")]
    assert importers == []


def test_utils_devices_and_limits():
    from dask_gpu.cuda import utils

    assert utils.get_n_gpus() == utils.get_gpu_count() == 2 and utils.get_gpu_count_mig(return_uuids=True) == (0, [])
    assert utils.get_device_total_memory(0) == SIMULATED_MEMORY and utils.has_device_memory_resource(1)
    uuid = utils.get_gpu_uuid(1)
    assert uuid.startswith("GPU-") and utils.get_device_total_memory(uuid[:12]) == SIMULATED_MEMORY
    assert utils.get_cpu_affinity(0) == list(dask_gpu.discover().devices[0].cpu_affinity)
    assert utils.parse_device_memory_limit(None) is None and utils.parse_device_memory_limit(0) is None
    assert utils.parse_device_memory_limit("0 MiB") is None and utils.parse_device_bytes(None) is None
    assert utils.parse_device_memory_limit("default") == int(0.8 * SIMULATED_MEMORY)
    assert utils.parse_device_memory_limit("auto") == utils.parse_device_memory_limit(1.0) == SIMULATED_MEMORY
    assert utils.parse_device_memory_limit("1GB") == 10**9
    assert utils.parse_device_memory_limit(1) == utils.parse_device_bytes("1") == 1  # an int is bytes
    assert utils.parse_device_bytes(0.3, alignment_size=256) % 256 == 0
    assert utils.cuda_visible_devices(3, range(8)) == "3,4,5,6,7,0,1,2" and utils.cuda_visible_devices(1) == "1,0"
    for wrong in (None, [], True):
        with pytest.raises(TypeError, match="a CUDA_VISIBLE_DEVICES entry is a GPU index or a UUID"):
            utils.parse_cuda_visible_device(wrong)
    assert utils.nvml_device_index(1, "1,2,3,0") == 2 and utils.nvml_device_index(1, [1, 2, 3, 0]) == 2
    assert utils.nvml_device_index(1, ["GPU-a", "MIG-b"]) == "MIG-b"
    assert utils.parse_cuda_visible_device("2") == 2 and utils.parse_cuda_visible_device("GPU-9b") == "GPU-9b"
    with pytest.raises(ValueError, match="'Foo'"):
        utils.parse_cuda_visible_device("Foo")
    with pytest.raises(ValueError, match="must be `str` or `list`"):
        utils.nvml_device_index(1, 2)
    assert utils.unpack_bitmask([1 + 2 + 16, 2 + 4], mask_bits=32) == [0, 1, 4, 33, 34]


def test_get_ucx_config_and_initialize(monkeypatch, ucxx_found):
    from dask_gpu.cuda import initialize, utils

    config = utils.get_ucx_config(enable_nvlink=False)  # off, and nothing on: the others on (dask-cuda's rule)
    keys = ("tcp", "infiniband", "nvlink", "rdmacm", "cuda-copy", "create-cuda-context")
    assert [config[k] for k in keys] == [True, True, False, None, True, True]
    with dask.config.set({}):
        initialize.initialize(create_cuda_context=False, enable_tcp_over_ucx=True)
        assert dask.config.get("distributed-ucxx.tcp") is True and dask.config.get("distributed-ucxx.cuda-copy")
    monkeypatch.undo()
    assert utils.get_ucx_config() is None or find_spec("distributed_ucxx") is not None


def test_worker_spec_is_dask_gpu_s_spec():
    from dask_gpu.cuda.worker_spec import worker_spec

    spec = worker_spec(CUDA_VISIBLE_DEVICES=[1, 0], threads_per_worker=2, device_memory_limit="1GB")
    assert list(spec) == ["gpu-1", "gpu-0"] and spec["gpu-1"]["cls"] is Nanny
    assert spec["gpu-1"]["options"]["env"]["CUDA_VISIBLE_DEVICES"] == "1,0"
    assert spec["gpu-1"]["options"]["nthreads"] == 2
    assert store(spec["gpu-0"])["device_memory_limit"] == 10**9
    for protocol in ("tcp", None):  # as dask-cuda: a TypeError, and no protocol is not UCX either
        with pytest.raises(TypeError, match="Enabling InfiniBand or NVLink requires protocol='ucx'"):
            worker_spec(protocol=protocol, enable_nvlink=True)
    spec = worker_spec(CUDA_VISIBLE_DEVICES=[0], cls=Nanny, interface=None, dashboard_address=None)
    assert {k: spec["gpu-0"]["options"][k] for k in ("interface", "protocol", "dashboard_address", "silence_logs")} \
        == {"interface": None, "protocol": None, "dashboard_address": None, "silence_logs": True}
    # as dask-cuda's: a spec names an interface whether or not the machine making it has it; a name it must be
    assert worker_spec(CUDA_VISIBLE_DEVICES=[0], interface="no-such-nic")["gpu-0"]["options"]["interface"] == \
        "no-such-nic"
    with pytest.raises(ValueError, match="worker_spec: interface=3 is not a network interface"):
        worker_spec(CUDA_VISIBLE_DEVICES=[0], interface=3)


@pytest.mark.parametrize("limit", [None, 0, False, "default", 0.5, "1GB"])
def test_worker_spec_reads_the_memory_limits_as_the_cluster_does(limit):
    """None, 0 and False: no device tier and no host limit; "default": the configuration; else the amount."""
    from dask_gpu.cuda.worker_spec import worker_spec
    from dask_gpu.options import ClusterOptions
    from dask_gpu.spec import worker_specs

    ours = worker_spec(CUDA_VISIBLE_DEVICES=[0], device_memory_limit=limit, memory_limit=limit)["gpu-0"]
    options = ClusterOptions.resolve(device_memory_limit=limit, memory_limit=limit).workers
    cluster = worker_specs(dask_gpu.devices.select(dask_gpu.devices.discover(), [0]), options)["gpu-0"]
    assert ours["options"]["memory_limit"] == cluster["options"]["memory_limit"]
    assert ours["options"].get("data") == cluster["options"].get("data")
    assert (limit in (None, 0, False)) is ("data" not in ours["options"])


def test_the_cluster_worker_spec_and_the_cli_refuse_a_bad_duration_in_the_same_words():
    from click.testing import CliRunner

    from dask_gpu.cuda.worker_spec import worker_spec

    with pytest.raises(ValueError) as cluster:
        dask_gpu.LocalCUDACluster(death_timeout="1 fortnight", dashboard_address=False)
    with pytest.raises(ValueError) as spec:
        worker_spec(death_timeout="1 fortnight")
    cli = CliRunner().invoke(gpu, ["worker", "tcp://127.0.0.1:9", "--death-timeout", "1 fortnight"])
    words = ("death_timeout='1 fortnight' is not a duration: give seconds > 0 (60) or a duration like '60s' or "
             "'1 minute'")
    assert str(cluster.value) == f"LocalCUDACluster: {words}" and str(spec.value) == f"worker_spec: {words}"
    assert cli.exit_code == 2 and f"'--death-timeout': {words}" in " ".join(cli.output.split())


def test_device_host_file_and_device_objects(tmp_path, caplog):
    import standin_device

    from dask_gpu.cuda.device_host_file import DeviceHostFile, device_to_host, host_to_device
    from dask_gpu.cuda.is_device_object import is_device_object
    from dask_gpu.cuda.is_spillable_object import is_spillable_object

    data = DeviceHostFile(str(tmp_path), device_memory_limit=1000, memory_limit=None, log_spilling=True)
    with caplog.at_level("INFO", logger="distributed.worker"):
        data["a"], data["b"] = standin_device.make(800, 1), standin_device.make(800, 2)  # b pushes a to host
        assert list(data.device) == ["b"] and "a" in data.host
        assert standin_device.total(data["a"]) == 800  # a comes back, b goes
    assert data.others == {}  # dask-cuda's tier for what it could not spill: none here
    assert [r.getMessage().split(" in ")[0] for r in caplog.records] == [
        "Spilled key 'a' with 800 bytes from device to host", "Unspilled key 'a' with 800 bytes from host to device",
        "Spilled key 'b' with 800 bytes from device to host"]
    assert is_device_object([np.ones(1), standin_device.make(8)]) and not is_device_object(np.ones(1))
    assert not is_spillable_object(standin_device.make(8))
    assert standin_device.total(host_to_device(device_to_host(standin_device.make(8, 3)))) == 24


def test_preload_hook_and_its_options(monkeypatch):
    from dask_gpu.cuda import initialize
    from dask_gpu.cuda.utils import get_preload_options

    assert get_preload_options() == {"preload": ["dask_gpu.cuda.initialize"], "preload_argv": []}
    # the hook takes what dask-cuda's takes; UCX transports are distributed-ucxx's configuration
    assert get_preload_options("ucx", True, enable_nvlink=True)["preload_argv"] == ["--create-cuda-context"]
    made = []
    monkeypatch.setattr(initialize, "_create_cuda_context", lambda: made.append(True))  # found by its dask-cuda name
    initialize.dask_setup.callback(worker=None, create_cuda_context=False)
    assert made == []
    initialize.dask_setup.callback(worker=None, create_cuda_context=True)
    assert made == [True]
    with pytest.raises(SystemExit):  # click's usage error: dask-cuda's hook takes no transports either
        initialize.dask_setup.main(["--enable-nvlink"], standalone_mode=True)


def test_rmm_setup_is_made_where_rmm_is_not_installed(monkeypatch):
    from dask_gpu.cuda.plugins import RMMSetup

    monkeypatch.setattr(allocator, "find_spec", lambda name, *a: None)  # no RMM in this process: the workers' to have
    plugin = RMMSetup(None, "2 GB", False, True, None, None, False, None)
    assert (plugin.maximum_pool_size, plugin.async_alloc) == ("2 GB", True)
    with pytest.raises(ValueError, match="rmm package is not installed"):
        plugin._options(device_memory=2**34)  # what its setup checks in a worker


def test_plugins_with_dask_cuda_s_signatures(rmm_found):
    from dask_gpu.cuda.plugins import CPUAffinity, CUDFSetup, PreImport, RMMSetup

    assert PreImport("json,colorsys").libraries == ["json", "colorsys"] and PreImport(None).libraries == []
    PreImport(["colorsys"]).setup()
    assert CUDFSetup(spill=True, spill_stats=1).spill_stats == 1
    with pytest.raises(ValueError, match="cudaMallocAsync cannot allocate managed memory"):
        RMMSetup(None, None, True, True, None, None, False, None)
    with pytest.raises(ValueError, match="rmm_release_threshold='1GB' only applies to cudaMallocAsync"):
        RMMSetup(None, None, False, False, "1GB", None, False, None)
    RMMSetup("1GB", None, False, False, None, None, False, ["cupy"]).setup()  # a simulated device: nothing to set up
    before = os.sched_getaffinity(0)
    try:
        CPUAffinity([min(before)]).setup()
        assert os.sched_getaffinity(0) == {min(before)}
    finally:
        os.sched_setaffinity(0, before)


# -- a dask-cuda user's script, with only the import changed ---------------------------------------------


@needs_rmm
def test_a_dask_cuda_script_with_only_the_import_changed(capsys):
    from dask_gpu.cuda import LocalCUDACluster  # was: from dask_cuda import LocalCUDACluster
    from dask_gpu.cuda.plugins import PreImport
    from dask_gpu.cuda.utils import all_to_all, get_worker_config, print_cluster_config, wait_workers

    with LocalCUDACluster(device_memory_limit="4GB", rmm_pool_size="1GB", enable_cudf_spill=True,
                          worker_class=TaggedWorker, pre_import="colorsys", dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        assert wait_workers(client, n_gpus=2)
        all_to_all(client)
        assert client.submit(sum, [1, 2]).result() == 3
        client.register_plugin(PreImport(["json"]))
        rows = report.workers_rows(client)
        assert [r["name"] for r in rows] == ["gpu-0", "gpu-1"]
        assert {r["worker_class"] for r in rows} == {"parity_worker.TaggedWorker"}
        assert all(r["device_memory_limit"] == 4 * 10**9 and r["data"] == "DeviceHostDiskStore" for r in rows)
        assert all(r["allocator"]["pool_size"] == 10**9 and r["cudf_spill"] for r in rows)
        assert all(r["pre_import"] == ["colorsys"] for r in rows)
        assert all(client.run(lambda: {"colorsys", "json"} <= set(sys.modules)).values())
        assert {c["name"] for c in client.run(get_worker_config).values()} == {"gpu-0", "gpu-1"}
        print_cluster_config(client)
        assert "2 worker(s)" in capsys.readouterr().out
        called = []
        assert not wait_workers(client, min_timeout=0.2, seconds_per_gpu=0.01, n_gpus=3,
                                timeout_callback=lambda: called.append(1))
        assert called == [1]


def test_no_limits_cluster_keeps_data_in_a_plain_dict():
    with dask_gpu.LocalCUDACluster(n_workers=1, memory_limit=None, device_memory_limit=None,
                                   dashboard_address=False) as cluster, Client(cluster) as client:
        rows = report.workers_rows(client)
        assert [(r["data"], r["memory_limit"], r["device_memory_limit"]) for r in rows] == [("dict", None, 0)]
