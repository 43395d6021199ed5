import dataclasses
import importlib.util
import re

import dask
import pytest

from dask_gpu import machine, options, parse
from dask_gpu.options import WorkerOptions


def named(value) -> str:
    return re.escape(repr(value))


# -- device memory limit -------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, 0),
        (None, 0),
        ("0", 0),
        ("auto", "auto"),
        (" AUTO ", "auto"),
        (0.8, 0.8),
        (1.0, 1.0),
        (0.01, 0.01),
        ("50%", 0.5),
        ("100%", 1.0),
        (" 80% ", 0.8),
        ("0.25", 0.25),
        ("16GB", 16_000_000_000),
        ("16 GiB", 16 * 2**30),
        ("1.5GB", 1_500_000_000),
        (2**30, 2**30),
        (1e9, 1_000_000_000),
        ("1e9", 1_000_000_000),
        (1, 1),  # an int is bytes, as dask-cuda reads it; 1.0 is the whole device
        ("1", 1),
        ("1.0", 1.0),
    ],
)
def test_parse_device_memory_limit(value, expected):
    result = parse.device_memory_limit(value)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(
    "value, pattern",
    [
        (-1, named(-1)),
        ("-1GB", named("-1gb")),
        (1.5, named(1.5)),
        (-0.5, named(-0.5)),
        ("abc", named("abc")),
        ("150%", named("150%")),
        ("150%", re.escape("between 0 and 1")),
        ("x%", named("x")),
        (True, named(True)),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        ("nan", "nan"),
        ([1], re.escape("[1]")),
        ({}, re.escape("{}")),
    ],
)
def test_parse_device_memory_limit_bad(value, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse.device_memory_limit(value)


@pytest.mark.parametrize("value", ["200%", "300%"])
def test_parse_device_memory_limit_percent_over_100(value):
    with pytest.raises(ValueError, match=re.escape(value)):
        parse.device_memory_limit(value)


@pytest.mark.parametrize(
    "limit, total, expected",
    [
        (0.5, 1000, 500),
        (1.0, 1000, 1000),
        (0.8, 16 * 2**30, int(0.8 * 16 * 2**30)),
        ("auto", 1000, 1000),  # the whole device, as in dask-cuda
        (0, 1000, 0),
        (600, 1000, 600),
        (1000, 1000, 1000),
    ],
)
def test_device_memory_bytes(limit, total, expected):
    result = parse.device_memory_bytes(limit, total)
    assert result == expected
    assert type(result) is int


def test_device_memory_bytes_auto_fraction():
    assert parse.device_memory_bytes("auto", 1000, auto=0.5) == 500


@pytest.mark.parametrize("limit, total", [(1001, 1000), (32_000_000_000, 16 * 2**30)])
def test_device_memory_bytes_larger_than_device(limit, total):
    too_large = rf"device_memory_limit={limit} bytes is larger than the device \({total} bytes\)"
    with pytest.raises(ValueError, match=too_large):
        parse.device_memory_bytes(limit, total)


# -- host memory limit -----------------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("auto", "auto"),
        (" Auto ", "auto"),
        ("4GB", 4_000_000_000),
        ("4GiB", 4 * 2**30),
        (2**30, 2**30),
        (0, 0),
        ("0", 0),
        (None, 0),
        ("none", 0),
    ],
)
def test_parse_memory_limit(value, expected):
    assert parse.memory_limit(value) == expected


@pytest.mark.parametrize(
    "value, pattern",
    [
        ("x", named("x")),
        (-1, named(-1)),
        ([1], re.escape("[1]")),
        (True, named(True)),
    ],
)
def test_parse_memory_limit_bad(value, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse.memory_limit(value)


@pytest.mark.parametrize("value", [0.5, "0.5"])
def test_parse_memory_limit_fraction_is_not_unlimited(value):
    assert parse.memory_limit(value) == 0.5


# -- resources, threads, pre-import, protocol ---------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ({"MEM": 1e9}, {"MEM": 1e9}),
        ({"A": 1, "B": "2"}, {"A": 1.0, "B": 2.0}),
        ("A=1 B=2", {"A": 1.0, "B": 2.0}),
        ("A=1,B=2", {"A": 1.0, "B": 2.0}),
        (" A=1, B=2.5 ", {"A": 1.0, "B": 2.5}),
        ("MEM=10e9", {"MEM": 10e9}),
        ("A=0", {"A": 0.0}),
        ({}, {}),
        ("", {}),
        (None, {}),
    ],
)
def test_parse_resources(value, expected):
    result = parse.resources(value)
    assert result == expected
    assert all(type(v) is float for v in result.values())


@pytest.mark.parametrize(
    "value, pattern",
    [
        ("A", r"resource 'A' must look like NAME=AMOUNT"),
        ("=1", r"resource '=1' must look like NAME=AMOUNT"),
        ("A=1 B", r"resource 'B' must look like"),
        ("A=x", r"resource 'A' must be a number, not 'x'"),
        ("A=", r"resource 'A' must be a number, not ''"),
        ("A=-1", r"resource 'A' must be >= 0, not -1"),
        ({"A": -2}, r"resource 'A' must be >= 0"),
        ({"A": "nan"}, r"resource 'A' must be a finite number"),
        ({"A": None}, r"resource 'A' must be a number, not None"),
        ([("A", 1)], r"resources must be a mapping"),
        (5, r"resources must be a mapping.*not 5"),
    ],
)
def test_parse_resources_bad(value, pattern):
    with pytest.raises(ValueError, match=pattern):
        parse.resources(value)


@pytest.mark.parametrize("value, expected", [(1, 1), (8, 8), ("2", 2), (" 3 ", 3)])
def test_parse_nthreads(value, expected):
    assert parse.nthreads(value) == expected


@pytest.mark.parametrize("value", [0, "0", -1, "-1", "x", "", 1.5, 2.0, True, False, None, [1]])
def test_parse_nthreads_bad(value):
    with pytest.raises(ValueError, match=rf"threads per worker .*not {named(value)}"):
        parse.nthreads(value)


@pytest.mark.parametrize(
    "value, expected",
    [
        ("json", ("json",)),
        ("json,xml.dom", ("json", "xml.dom")),
        ("json xml.dom", ("json", "xml.dom")),
        (["json"], ("json",)),
        (("json", "os.path"), ("json", "os.path")),
        ("", ()),
        (None, ()),
        ([], ()),
    ],
)
def test_parse_pre_import(value, expected):
    assert parse.pre_import(value) == expected


@pytest.mark.parametrize(
    "value, bad",
    [
        ("1abc", "1abc"),
        ("a-b", "a-b"),
        ("json,a..b", "a..b"),
        ([1], 1),
        (["json", None], None),
    ],
)
def test_parse_pre_import_bad_name(value, bad):
    with pytest.raises(ValueError, match=rf"pre_import entry {named(bad)} is not a module name"):
        parse.pre_import(value)


@pytest.mark.parametrize("value", ["dask_gpu_no_such_module", "json.no_such_submodule", "no_such_pkg.sub"])
def test_parse_pre_import_missing_module(value):
    assert parse.pre_import(value) == (value,)  # a name: whether it is installed is the machine's to say
    with pytest.raises(ValueError, match=rf"ModuleNotFoundError: No module named {named(value)}"):
        machine.pre_import(value)


@pytest.mark.parametrize(
    "value, expected",
    [(None, None), ("tcp", "tcp"), ("TCP://", "tcp"), (" tls ", "tls"), ("inproc", "inproc"), ("ws://", "ws")],
)
def test_parse_protocol(value, expected):
    assert parse.protocol(value) == expected


@pytest.mark.parametrize("value", ["http", "udp://", "", "tcpx"])
def test_parse_protocol_bad(value):
    with pytest.raises(ValueError, match=rf"protocol {named(value)} is not one of"):
        parse.protocol(value)


@pytest.mark.parametrize("value", ["ucx", "UCXX://"])
def test_ucx_without_distributed_ucxx_warns_and_runs_over_tcp(value, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.warns(UserWarning, match="needs the distributed-ucxx package .* running over TCP instead"):
        opts = WorkerOptions.resolve(protocol=value, enable_nvlink=True)
    assert opts.protocol == "tcp" and dict(opts.ucx) == {}  # no UCX settings for workers that run over TCP


def test_ucx_transports_become_distributed_ucxx_config(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    opts = WorkerOptions.resolve(protocol="ucx", enable_nvlink=True, enable_infiniband=False, enable_tcp_over_ucx=True)
    assert opts.protocol == "ucx"
    assert dict(opts.ucx) == {"nvlink": True, "infiniband": False, "tcp": True, "cuda-copy": True}
    assert not opts.extra  # not passed on to the workers as unknown keywords
    auto = WorkerOptions.resolve(protocol="ucx")
    assert dict(auto.ucx) == {}


@pytest.mark.parametrize("protocol", ["tcp", "tls"])  # None: a worker takes its scheduler's, which may be UCX
def test_ucx_transports_need_ucx(protocol):
    with pytest.raises(ValueError, match="enable_nvlink choose UCX transports: they need protocol='ucx'"):
        WorkerOptions.resolve(protocol=protocol, enable_nvlink=True)


# -- WorkerOptions ---------------------------------------------------------------------


def test_resolve_defaults():
    opts = WorkerOptions.resolve()
    assert opts.nthreads == 2
    assert opts.memory_limit == "auto"
    assert opts.device_memory_limit == 0.8
    assert dict(opts.resources) == {}
    assert opts.local_directory is None
    assert opts.pre_import == ()
    assert opts.protocol is None
    assert opts.cpu_affinity is True
    assert dict(opts.extra) == {}


def test_resolve_keywords_win_over_config():
    with dask.config.set(
        {
            "gpu.nthreads": 3,
            "gpu.memory-limit": "8GB",
            "gpu.device-memory-limit": "50%",
            "gpu.resources": {"MEM": 1e9},
            "gpu.pre-import": ["json"],
            "gpu.protocol": "tcp",
            "gpu.cpu-affinity": False,
            "gpu.local-directory": "/tmp/from-config",
        }
    ):
        from_config = WorkerOptions.resolve()
        given = WorkerOptions.resolve(
            nthreads=2,
            memory_limit=0,
            device_memory_limit="auto",
            resources="FOO=2",
            pre_import="xml.dom",
            protocol="tls",
            cpu_affinity=True,
            local_directory="/tmp/given",
        )
    assert from_config == WorkerOptions(
        nthreads=3,
        memory_limit=8_000_000_000,
        device_memory_limit=0.5,
        resources={"MEM": 1e9},
        local_directory="/tmp/from-config",
        pre_import=("json",),
        protocol="tcp",
        cpu_affinity=False,
        allocator=DEFAULT_ALLOCATOR,
        extra={},
    )
    assert given == WorkerOptions(
        nthreads=2,
        memory_limit=0,
        device_memory_limit="auto",
        resources={"FOO": 2.0},
        local_directory="/tmp/given",
        pre_import=("xml.dom",),
        protocol="tls",
        cpu_affinity=True,
        allocator=DEFAULT_ALLOCATOR,
        extra={},
    )


DEFAULT_ALLOCATOR = {
    "allocator": None,
    "rmm_pool_size": None,
    "rmm_maximum_pool_size": None,
    "rmm_managed_memory": False,
    "rmm_async": False,
    "rmm_release_threshold": None,
    "rmm_log_directory": None,
    "rmm_track_allocations": False,
    "rmm_allocator_external_lib_list": None,
}


def test_allocator_keywords_collected_with_config_fallback():
    with dask.config.set({"gpu.rmm-pool-size": "2GB"}), pytest.warns(FutureWarning, match="rmm_pool_size"):
        options = WorkerOptions.resolve(rmm_async=True)  # dask-cuda warns that the pool size is not needed
    assert options.allocator == {**DEFAULT_ALLOCATOR, "rmm_pool_size": "2GB", "rmm_async": True}
    assert not set(options.allocator) & set(options.extra)  # not passed on to the workers as such


def test_resolve_none_falls_back_to_config():
    with dask.config.set({"gpu.nthreads": 3}):
        assert WorkerOptions.resolve(nthreads=None).nthreads == 3
        assert WorkerOptions.resolve(nthreads=5).nthreads == 5


def test_resolve_false_cpu_affinity_is_kept():
    with dask.config.set({"gpu.cpu-affinity": True}):
        assert WorkerOptions.resolve(cpu_affinity=False).cpu_affinity is False


def test_resolve_extra():
    opts = WorkerOptions.resolve(death_timeout=None, preload=["x.py"], env={"A": "1"}, worker_port=None)
    assert dict(opts.extra) == {"preload": ["x.py"], "env": {"A": "1"}}


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"nthreads": 0}, "threads per worker"),
        ({"memory_limit": "x"}, "memory_limit='x'"),
        ({"device_memory_limit": 2.5}, "device_memory_limit=2.5"),
        ({"resources": "A"}, "resource 'A'"),
        ({"pre_import": "a-b"}, "pre_import entry 'a-b'"),
        ({"protocol": "http"}, "protocol 'http'"),
    ],
)
def test_resolve_checks_values(kwargs, pattern):
    with pytest.raises(ValueError, match=re.escape(pattern)):
        WorkerOptions.resolve(**kwargs)


def test_resolve_checks_config_values():
    with dask.config.set({"gpu.nthreads": 0}):
        with pytest.raises(ValueError, match="threads per worker"):
            WorkerOptions.resolve()


@pytest.mark.parametrize("field, value", [("nthreads", 4), ("memory_limit", 0), ("extra", {})])
def test_worker_options_frozen(field, value):
    opts = WorkerOptions.resolve(preload=["x.py"])
    before = getattr(opts, field)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(opts, field, value)
    assert getattr(opts, field) is before


@pytest.mark.parametrize("field", ["resources", "extra"])
def test_worker_options_mappings_read_only(field):
    opts = WorkerOptions.resolve(resources={"A": 1}, preload=["x.py"])
    with pytest.raises(TypeError):
        getattr(opts, field)["new"] = 1
    assert "new" not in getattr(opts, field)


def test_cluster_options_are_resolved_once_from_keywords_and_configuration():
    with dask.config.set({"gpu.cpu-workers": 1, "gpu.dashboard-address": ":8799", "gpu.worker-saturation": "inf"}):
        resolved = options.ClusterOptions.resolve(threads_per_worker=2, memory_limit=None, name="mine",
                                                   shutdown_on_close=False, death_timeout="30s")
    assert (resolved.cpu_workers, resolved.host, resolved.dashboard_address) == (1, "127.0.0.1", ":8799")
    assert resolved.worker_saturation == float("inf") and resolved.security.require_encryption is False
    assert dict(resolved.spec_cluster) == {"name": "mine", "shutdown_on_close": False}  # SpecCluster's own
    workers = resolved.workers
    assert (workers.nthreads, workers.memory_limit) == (2, 0)  # None: no limit, as dask-cuda reads it
    assert workers.extra["death_timeout"] == "30s" and workers.extra["host"] == "127.0.0.1"
    assert options.ClusterOptions.resolve(security=True).workers.protocol == "tls"  # temporary credentials
    assert options.ClusterOptions.resolve(interface="lo").host is None
    with pytest.raises(TypeError, match="unknown keyword 'no_such_keyword'"):
        options.ClusterOptions.resolve(no_such_keyword=1)
    with pytest.raises(ValueError, match="cpu_workers=100000 is more than"):
        options.ClusterOptions.resolve(cpu_workers=100000)
    with pytest.raises(TypeError, match="security must be a distributed.Security or True"):
        options.ClusterOptions.resolve(security="yes")
