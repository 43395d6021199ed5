import copy
import os

import dask
import pytest
import yaml

import dask_gpu
from dask_gpu import config
from dask_gpu.options import WorkerOptions

jsonschema = pytest.importorskip("jsonschema")

HERE = os.path.dirname(dask_gpu.__file__)


def load(name):
    with open(os.path.join(HERE, name)) as f:
        return yaml.safe_load(f)


DEFAULTS = load("gpu.yaml")
SCHEMA = load("gpu-schema.yaml")


@pytest.fixture
def env(monkeypatch):
    """Set DASK_* variables; dask's config is rebuilt from the real environment afterwards."""
    for name in list(os.environ):
        if name.startswith("DASK_GPU__"):
            monkeypatch.delenv(name)
    yield monkeypatch
    monkeypatch.undo()
    dask.config.refresh()


def validator():
    cls = jsonschema.validators.validator_for(SCHEMA)
    cls.check_schema(SCHEMA)
    return cls(SCHEMA)


def test_defaults_validate():
    errors = list(validator().iter_errors(DEFAULTS))
    assert errors == []


def test_loaded_defaults_are_the_file():
    assert config.defaults == DEFAULTS
    assert dask.config.get("gpu.nthreads") == DEFAULTS["gpu"]["nthreads"]


def test_every_key_has_a_schema_and_back():
    assert set(DEFAULTS) == {"gpu"}
    assert set(DEFAULTS["gpu"]) == set(SCHEMA["properties"]["gpu"]["properties"])


@pytest.mark.parametrize("key", sorted(SCHEMA["properties"]["gpu"]["properties"]))
def test_schema_properties_described(key):
    assert SCHEMA["properties"]["gpu"]["properties"][key].get("description")


@pytest.mark.parametrize(
    "key, value",
    [
        ("nthreads", 0),
        ("nthreads", "two"),
        ("unknown-key", 1),
        ("simulate", -1),
        ("simulate", [{}]),
        ("resources", {"MEM": -1}),
        ("resources", {"MEM": "x"}),
        ("pre-import", "json"),
        ("cpu-affinity", "yes"),
        ("cpu-workers", -1),
        ("memory-limit", 1.5),
        ("dashboard-address", 8787),
    ],
)
def test_broken_copy_fails(key, value):
    broken = copy.deepcopy(DEFAULTS)
    broken["gpu"][key] = value
    errors = list(validator().iter_errors(broken))
    assert errors
    assert any(key in list(e.path) or key in e.message for e in errors)


@pytest.mark.parametrize(
    "key, value",
    [
        ("simulate", 2),
        ("simulate", ["16GB", 8000000000]),
        ("device-memory-limit", "auto"),
        ("device-memory-limit", 0.5),
        ("device-memory-limit", "16GB"),
        ("memory-limit", 4000000000),
        ("protocol", "tcp"),
        ("dashboard-address", None),
        ("resources", {"MEM": 1e9}),
        ("pre-import", ["json"]),
    ],
)
def test_good_values_validate(key, value):
    good = copy.deepcopy(DEFAULTS)
    good["gpu"][key] = value
    assert list(validator().iter_errors(good)) == []


@pytest.mark.parametrize(
    "key, value, expected",
    [
        ("nthreads", 5, 5),
        ("nthreads", None, 1),
        ("memory_limit", None, "auto"),
        ("memory_limit", "4GB", "4GB"),
        ("device_memory_limit", None, 0.8),
        ("cpu_affinity", False, False),
        ("cpu_affinity", None, True),
        ("resources", {}, {}),
        ("local_directory", None, None),
        ("simulate", 0, 0),
    ],
)
def test_get(key, value, expected):
    with dask.config.set({"gpu.nthreads": 1, "gpu.cpu-affinity": True, "gpu.device-memory-limit": 0.8}):
        assert config.get(key, value) == expected


def test_get_reads_config():
    with dask.config.set({"gpu.nthreads": 7, "gpu.local-directory": "/tmp/scratch"}):
        assert config.get("nthreads") == 7
        assert config.get("nthreads", 2) == 2
        assert config.get("local_directory") == "/tmp/scratch"


def test_get_unknown_key():
    with pytest.raises(KeyError):
        config.get("no_such_key")


@pytest.mark.parametrize(
    "name, value, field, expected",
    [
        ("DASK_GPU__NTHREADS", "4", "nthreads", 4),
        ("DASK_GPU__DEVICE_MEMORY_LIMIT", "0.5", "device_memory_limit", 0.5),
        ("DASK_GPU__DEVICE_MEMORY_LIMIT", "16GB", "device_memory_limit", 16_000_000_000),
        ("DASK_GPU__MEMORY_LIMIT", "4GB", "memory_limit", 4_000_000_000),
        ("DASK_GPU__CPU_AFFINITY", "false", "cpu_affinity", False),
        ("DASK_GPU__CPU_AFFINITY", "False", "cpu_affinity", False),
        ("DASK_GPU__PRE_IMPORT", "json,xml.dom", "pre_import", ("json", "xml.dom")),
        ("DASK_GPU__PRE_IMPORT", '["json"]', "pre_import", ("json",)),
        ("DASK_GPU__RESOURCES", '{"MEM": 1e9}', "resources", {"MEM": 1e9}),
        ("DASK_GPU__PROTOCOL", "tcp", "protocol", "tcp"),
    ],
)
def test_env_var_changes_resolve(env, name, value, field, expected):
    env.setenv(name, value)
    dask.config.refresh()
    assert getattr(WorkerOptions.resolve(), field) == expected


def test_env_var_nthreads_and_keyword(env):
    env.setenv("DASK_GPU__NTHREADS", "4")
    dask.config.refresh()
    assert dask.config.get("gpu.nthreads") == 4
    assert WorkerOptions.resolve().nthreads == 4
    assert WorkerOptions.resolve(nthreads=2).nthreads == 2


def test_env_refresh_restores():
    # runs after the env tests above: their variables are gone from dask's config
    assert dask.config.get("gpu.nthreads") == DEFAULTS["gpu"]["nthreads"]
    assert WorkerOptions.resolve().cpu_affinity is DEFAULTS["gpu"]["cpu-affinity"]
