import importlib.metadata
import json
import sys

import pytest
from dask.utils import format_bytes

from dask_gpu import devices, report
from dask_gpu.devices import Device, State, System


@pytest.mark.parametrize(
    "cores, text",
    [
        ([], "-"),
        ((), "-"),
        ([3], "3"),
        ([0, 1, 2, 5], "0-2,5"),
        ([5, 2, 0, 1], "0-2,5"),
        ([1, 1, 0, 0, 2], "0-2"),
        ([0, 2, 4], "0,2,4"),
        ([1, 2], "1-2"),
        (range(64), "0-63"),
        ([0, 1, 3, 64, 65, 66, 127], "0-1,3,64-66,127"),
    ],
)
def test_cores_text(cores, text):
    assert report.cores_text(cores) == text


def test_table_alignment():
    rows = [("#", "name", "memory"), ("10", "A", "1 GiB"), ("2", "longer name", "")]
    lines = report.table(rows).split("\n")
    assert lines == [
        "#   name         memory",
        "10  A            1 GiB",
        "2   longer name",
    ]
    assert lines[0].index("name") == lines[1].index("A") == lines[2].index("longer") == 4
    assert lines[0].index("memory") == lines[1].index("1 GiB")


def test_table_single_column():
    assert report.table([("a",), ("bbb",)]) == "a\nbbb"


def mig_system() -> System:
    mig = (
        Device(0, "MIG 3g.40gb", "MIG-aaaa0000", 40 * 2**30, cpu_affinity=(0, 1), mig_index=0),
        Device(0, "MIG 2g.20gb", "MIG-aaaa0002", 20 * 2**30, cpu_affinity=(0, 1), mig_index=1),
    )
    return System(
        State.AVAILABLE,
        (
            Device(0, "NVIDIA H100", "GPU-aaaa", 80 * 2**30, cpu_affinity=(0, 1), mig=mig),
            Device(1, "NVIDIA H100", "GPU-bbbb", 80 * 2**30, cpu_affinity=(2, 3, 5)),
        ),
        "2 GPU(s) found through NVML.",
        driver_version="550.54.15",
        cuda_version="12.4",
    )


def test_system_text_simulated():
    system = devices.simulated_system(3)
    text = report.system_text(system)
    lines = text.split("\n")
    assert lines[0] == f"NVIDIA driver simulated, CUDA simulated: {system.message}"
    assert lines[1].split() == ["#", "name", "memory", "CPU", "cores", "UUID"]
    for i, d in enumerate(system.devices):
        row = lines[2 + i]
        assert row.startswith(f"{i} ")
        assert d.uuid in row
        assert format_bytes(d.memory_total) in row
        assert report.cores_text(d.cpu_affinity) in row
    assert "No GPU" not in text


def test_system_text_mig():
    text = report.system_text(mig_system())
    assert "NVIDIA driver 550.54.15, CUDA 12.4" in text
    rows = {line.split()[0]: line for line in text.split("\n")[2:6]}
    assert set(rows) == {"0", "0.0", "0.1", "1"}
    assert "MIG-aaaa0000" in rows["0.0"] and "40.00 GiB" in rows["0.0"]
    assert "MIG-aaaa0002" in rows["0.1"]
    assert "2-3,5" in rows["1"]
    assert "0-1" in rows["0"]


@pytest.mark.parametrize(
    "system",
    [
        System(State.NO_GPU, message="the NVIDIA driver sees no GPU."),
        System(State.NO_DRIVER, message="NVML could not start (Driver Not Loaded)."),
        System(State.NO_NVML, message="the NVML bindings are missing."),
        devices.simulated_system(0),
    ],
)
def test_system_text_no_gpu(system):
    text = report.system_text(system)
    assert text.startswith(f"No GPU: {system.message}")
    assert "DASK_GPU__SIMULATE" in text
    assert "UUID" not in text


@pytest.mark.parametrize(
    "libs, hint",
    [({"dask": "1"}, True), ({"dask": "1", "cupy-cuda12x": "13.0"}, False), ({"cupy": "13"}, False)],
)
def test_system_text_installed(monkeypatch, libs, hint):
    monkeypatch.setattr(report, "installed", lambda: libs)
    text = report.system_text(devices.simulated_system(1))
    assert "Installed: " + ", ".join(f"{k} {v}" for k, v in libs.items()) in text
    assert ("CuPy is not installed" in text) is hint


@pytest.mark.parametrize(
    "system, n",
    [(devices.simulated_system(3), 3), (mig_system(), 2), (System(State.NO_GPU, message="none"), 0)],
)
def test_system_dict(system, n):
    d = report.system_dict(system)
    back = json.loads(json.dumps(d))
    assert back == d
    assert len(d["devices"]) == n
    assert d["state"] == system.state.value
    assert d["message"] == system.message
    assert [x["uuid"] for x in d["devices"]] == [x.uuid for x in system.devices]
    assert [x["cpu_affinity"] for x in d["devices"]] == [list(x.cpu_affinity) for x in system.devices]
    assert {"dask", "distributed"} <= set(d["installed"])


def test_system_dict_mig():
    d = report.system_dict(mig_system())
    assert [m["uuid"] for m in d["devices"][0]["mig"]] == ["MIG-aaaa0000", "MIG-aaaa0002"]
    assert d["devices"][1]["mig"] == []
    assert d["driver_version"] == "550.54.15"
    assert d["cuda_version"] == "12.4"


def test_installed():
    had_cupy = "cupy" in sys.modules
    libs = report.installed()
    assert libs["dask"] == importlib.metadata.version("dask")
    assert libs["distributed"] == importlib.metadata.version("distributed")
    assert list(libs) == sorted(libs)
    for name in libs:
        assert name == name.lower()
        assert name in report.LIBRARIES or any(name.startswith(p + "-cu") for p in report.LIBRARIES)
    assert "dask-gpu" not in libs
    if not had_cupy:
        assert "cupy" not in sys.modules


def test_workers_text():
    rows = [
        {
            "name": "gpu-0",
            "device": {"name": "Simulated GPU"},
            "nthreads": 1,
            "memory_limit": 2**30,
            "device_memory_limit": 2**31,
            "CUDA_VISIBLE_DEVICES": "0,1",
            "cpu_affinity": [0, 1, 2],
            "resources": {"GPU": 1.0, "MEM": 1e9},
        },
        {
            "name": "cpu-0",
            "device": None,
            "nthreads": 4,
            "memory_limit": 0,
            "device_memory_limit": None,
            "CUDA_VISIBLE_DEVICES": None,
            "cpu_affinity": None,
            "resources": {},
        },
    ]
    _, gpu, cpu = (line.split("  ") for line in report.workers_text(rows).split("\n"))
    gpu = [c.strip() for c in gpu if c.strip()]
    cpu = [c.strip() for c in cpu if c.strip()]
    assert gpu == ["gpu-0", "Simulated GPU", "1", "1.00 GiB", "2.00 GiB", "0,1", "0-2", "GPU=1 MEM=1e+09"]
    assert cpu == ["cpu-0", "-", "4", "unlimited", "-", "(unset)", "-", "-"]
