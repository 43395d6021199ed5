import os
import re
import sys
import types

import dask
import pytest

from dask_gpu import devices
from dask_gpu.devices import SIMULATED_MEMORY, Device, NoGPUError, State, System

ALLOWED_CORES = sorted(os.sched_getaffinity(0))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("DASK_GPU__SIMULATE", raising=False)
    devices.nvml_system.cache_clear()
    yield
    devices.nvml_system.cache_clear()


@pytest.fixture
def refresh_config(monkeypatch):
    """monkeypatch for DASK_* variables; dask's config is rebuilt from the real environment afterwards."""
    yield monkeypatch
    monkeypatch.undo()
    dask.config.refresh()


def simulated(n=3) -> System:
    with dask.config.set({"gpu.simulate": n}):
        return devices.discover()


# -- parse_visible_devices ---------------------------------------------------------


@pytest.mark.parametrize(
    "value, expected",
    [
        ("0", ("0",)),
        ("0,1", ("0", "1")),
        (" 1 , 0 ", ("1", "0")),
        ([0, 1], ("0", "1")),
        ((2,), ("2",)),
        (3, ("3",)),
        ("GPU-abc", ("GPU-abc",)),
        ("MIG-xyz", ("MIG-xyz",)),
        ("gpu-abc", ("gpu-abc",)),
        ("0,GPU-8a3f,MIG-1b", ("0", "GPU-8a3f", "MIG-1b")),
        (None, None),
        ("", ()),
        ("   ", ()),
        ([], ()),
    ],
)
def test_parse_visible_devices(value, expected):
    assert devices.parse_visible_devices(value) == expected


@pytest.mark.parametrize(
    "value, named",
    [
        ("a", "'a'"),
        ("0,,1", "''"),
        ("-1", "'-1'"),
        (-1, "-1"),
        ("1.5", "'1.5'"),
        ("GPU-", "'GPU-'"),
        ("MIG-", "'MIG-'"),
        ("XYZ-1", "'XYZ-1'"),
        ([True], "True"),
        ([0, None], "None"),
        ("0,0", "'0'"),
        (" 1, 1", "'1'"),
        ("GPU-abc,GPU-abc", "'GPU-abc'"),
    ],
)
def test_parse_visible_devices_bad(value, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        devices.parse_visible_devices(value)


def test_parse_visible_devices_duplicate_says_twice():
    with pytest.raises(ValueError, match="twice"):
        devices.parse_visible_devices("0,0")


# -- Device and System ---------------------------------------------------------------


@pytest.mark.parametrize(
    "device, label, token",
    [
        (Device(0, "A", "GPU-a", 1), "gpu-0", "0"),
        (Device(3, "A", "GPU-a", 1), "gpu-3", "3"),
        (Device(1, "A", "MIG-b", 1, mig_index=2), "gpu-1-mig-2", "MIG-b"),
    ],
)
def test_device_label_and_token(device, label, token):
    assert device.label == label
    assert device.token == token


@pytest.mark.parametrize(
    "system, usable",
    [
        (System(State.AVAILABLE, (Device(0, "A", "GPU-a", 1),)), True),
        (System(State.SIMULATED, (Device(0, "A", "GPU-a", 1),)), True),
        (System(State.SIMULATED), False),
        (System(State.NO_GPU, message="none"), False),
        (System(State.NO_DRIVER, message="none"), False),
        (System(State.NO_NVML, message="none"), False),
    ],
)
def test_system_usable_and_require(system, usable):
    assert system.usable is usable
    if usable:
        assert system.require() is system
    else:
        with pytest.raises(NoGPUError, match="DASK_GPU__SIMULATE"):
            system.require()


def test_require_names_what_and_reason():
    system = System(State.NO_DRIVER, message="NVML could not start.")
    with pytest.raises(NoGPUError, match=r"^my thing needs a GPU.*NVML could not start\."):
        system.require("my thing")
    assert issubclass(NoGPUError, RuntimeError)


# -- simulated devices -----------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, sizes",
    [
        (0, []),
        (1, [SIMULATED_MEMORY]),
        (3, [SIMULATED_MEMORY] * 3),
        ("2", [SIMULATED_MEMORY] * 2),
        (["16GB", 8e9], [16_000_000_000, 8_000_000_000]),
        ([8_000_000_000], [8_000_000_000]),
        (["1GiB", "2 GiB"], [2**30, 2 * 2**30]),
        ("16GB,8GB", [16_000_000_000, 8_000_000_000]),
        ("16GB, 8GB,", [16_000_000_000, 8_000_000_000]),
        ("16GB", [16_000_000_000]),
    ],
)
def test_simulated_sizes(spec, sizes):
    system = devices.simulated_system(spec)
    assert system.state is State.SIMULATED
    assert [d.memory_total for d in system.devices] == sizes
    assert all(type(d.memory_total) is int for d in system.devices)
    assert [d.index for d in system.devices] == list(range(len(sizes)))
    assert system.usable is bool(sizes)
    assert all(d.mig == () and d.mig_index is None for d in system.devices)


@pytest.mark.parametrize(
    "spec, named",
    [
        ("lots", "'lots'"),
        (["lots"], "'lots'"),
        (-1, "-1"),
        ("-1", "-1"),
        ([0], "0"),
        ([-5], "-5"),
        ([None], "None"),
        (["16GB", "big"], "'big'"),
        (True, "True"),
        (False, "False"),
    ],
)
def test_simulated_bad(spec, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        devices.simulated_system(spec)


def test_simulated_float_count():
    assert len(devices.simulated_system(2.0).devices) == 2
    with pytest.raises(ValueError, match=re.escape("2.5")):
        devices.simulated_system(2.5)


def test_simulated_through_config():
    system = simulated(3)
    assert system.state is State.SIMULATED
    assert len(system.devices) == 3
    assert system.driver_version == "simulated"
    assert system.cuda_version == "simulated"
    assert system.usable
    assert "3 simulated device(s)" in system.message


def test_simulated_argument_wins_over_config():
    with dask.config.set({"gpu.simulate": 3}):
        assert len(devices.discover(simulate=2).devices) == 2


@pytest.mark.parametrize("n", [1, 2, 5])
def test_simulated_uuids_unique(n):
    uuids = [d.uuid for d in devices.simulated_system(n).devices]
    assert len(set(uuids)) == n
    assert all(u.startswith("GPU-") for u in uuids)
    assert all(d.name == "Simulated GPU" for d in devices.simulated_system(n).devices)


@pytest.mark.parametrize("n", sorted({1, len(ALLOWED_CORES)}))
def test_simulated_affinity_disjoint_and_covering(n):
    groups = [d.cpu_affinity for d in devices.simulated_system(n).devices]
    flat = [c for g in groups for c in g]
    assert all(groups)
    assert len(flat) == len(set(flat))  # disjoint
    assert sorted(flat) == ALLOWED_CORES  # covering
    assert flat == ALLOWED_CORES  # contiguous, in order


def test_simulated_affinity_shared_when_more_devices_than_cores():
    n = len(ALLOWED_CORES) + 1
    groups = [d.cpu_affinity for d in devices.simulated_system(n).devices]
    assert groups == [tuple(ALLOWED_CORES)] * n


@pytest.mark.parametrize(
    "cores, n, groups",
    [
        (range(8), 2, [(0, 1, 2, 3), (4, 5, 6, 7)]),
        (range(8), 3, [(0, 1, 2), (3, 4, 5), (6, 7)]),
        (range(4), 4, [(0,), (1,), (2,), (3,)]),
        ([0, 2, 4, 6, 8], 2, [(0, 2, 4), (6, 8)]),
        (range(2), 3, [(0, 1)] * 3),
        (range(4), 0, []),
    ],
)
def test_split_cores(cores, n, groups):
    assert devices._split_cores(list(cores), n) == groups


@pytest.mark.parametrize(
    "env, sizes",
    [
        ("2", [SIMULATED_MEMORY] * 2),
        ('["16GB", "8GB"]', [16_000_000_000, 8_000_000_000]),
        ("16GB,8GB", [16_000_000_000, 8_000_000_000]),
        ("16GB", [16_000_000_000]),
        ("[8000000000]", [8_000_000_000]),
    ],
)
def test_simulate_env_var(refresh_config, env, sizes):
    refresh_config.setenv("DASK_GPU__SIMULATE", env)
    dask.config.refresh()
    system = devices.discover()
    assert system.state is State.SIMULATED
    assert [d.memory_total for d in system.devices] == sizes


def test_simulate_env_var_parsed_by_dask(refresh_config):
    refresh_config.setenv("DASK_GPU__SIMULATE", "2")
    dask.config.refresh()
    assert dask.config.get("gpu.simulate") == 2  # ast.literal_eval: an int, not "2"


def test_simulate_env_var_zero_means_nvml(refresh_config, monkeypatch):
    nvml = fake_nvml([])
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    refresh_config.setenv("DASK_GPU__SIMULATE", "0")
    dask.config.refresh()
    system = devices.discover()
    assert system.state is State.NO_GPU
    assert nvml.calls.count("init") == 1


# -- select ----------------------------------------------------------------------------


def test_select_default_all_devices():
    system = simulated(3)
    selected = devices.select(system)
    assert [t for t, _ in selected] == ["0", "1", "2"]
    assert [d for _, d in selected] == list(system.devices)


@pytest.mark.parametrize(
    "env, tokens, indices",
    [
        ("2,0", ["2", "0"], [2, 0]),
        ("1", ["1"], [1]),
        (" 0 , 1 ", ["0", "1"], [0, 1]),
    ],
)
def test_select_env(monkeypatch, env, tokens, indices):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    selected = devices.select(simulated(3))
    assert [t for t, _ in selected] == tokens
    assert [d.index for _, d in selected] == indices


def test_select_env_uuid(monkeypatch):
    system = simulated(3)
    uuid = system.devices[2].uuid
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", uuid)
    assert devices.select(system) == [(uuid, system.devices[2])]


def test_select_simulated_by_short_uuid_prefix():
    system = simulated(3)
    uuids = [d.uuid for d in system.devices]
    for i, uuid in enumerate(uuids):
        n = next(n for n in range(5, len(uuid) + 1) if sum(u.startswith(uuid[:n]) for u in uuids) == 1)
        assert devices.select(system, uuid[:n]) == [(uuid[:n], system.devices[i])]
        assert devices.select(system, uuid[:n].lower())[0][1] is system.devices[i]


@pytest.mark.parametrize("visible, indices", [("1", [1]), ([2, 0], [2, 0]), (0, [0])])
def test_select_argument_wins_over_env(monkeypatch, visible, indices):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    selected = devices.select(simulated(3), visible)
    assert [d.index for _, d in selected] == indices


def uuid_system() -> System:
    mig = (
        Device(2, "MIG 1g", "MIG-cafe0001", 10, mig_index=0),
        Device(2, "MIG 1g", "MIG-cafe0002", 10, mig_index=1),
    )
    return System(
        State.AVAILABLE,
        (
            Device(0, "A", "GPU-aaaa1111", 100),
            Device(1, "A", "GPU-aaaa2222", 100),
            Device(2, "B", "GPU-bbbb3333", 100, mig=mig),
        ),
    )


@pytest.mark.parametrize(
    "visible, uuids",
    [
        ("GPU-aaaa1111", ["GPU-aaaa1111"]),
        ("GPU-aaaa2", ["GPU-aaaa2222"]),
        ("GPU-b", ["GPU-bbbb3333"]),
        ("gpu-BBBB", ["GPU-bbbb3333"]),
        ("GPU-aaaa1,1", ["GPU-aaaa1111", "GPU-aaaa2222"]),
        ("MIG-cafe0002", ["MIG-cafe0002"]),
        ("mig-CAFE0001", ["MIG-cafe0001"]),
        ("MIG-cafe0002,MIG-cafe0001", ["MIG-cafe0002", "MIG-cafe0001"]),
    ],
)
def test_select_by_uuid(visible, uuids):
    selected = devices.select(uuid_system(), visible)
    assert [d.uuid for _, d in selected] == uuids
    assert [t for t, _ in selected] == visible.split(",")


def test_select_default_splits_mig():
    selected = devices.select(uuid_system())
    assert [t for t, _ in selected] == ["0", "1", "MIG-cafe0001", "MIG-cafe0002"]
    assert [d.label for _, d in selected] == ["gpu-0", "gpu-1", "gpu-2-mig-0", "gpu-2-mig-1"]


@pytest.mark.parametrize(
    "visible, pattern",
    [
        ("GPU-aaaa", r"'GPU-aaaa' is ambiguous: it starts 2 UUIDs"),
        ("GPU-", None),  # not even a token
        ("MIG-cafe", r"'MIG-cafe' is ambiguous"),
        ("GPU-zzzz", r"'GPU-zzzz' matches no device UUID \(known: GPU-aaaa1111, GPU-aaaa2222, GPU-bbbb3333\)"),
        ("MIG-dead", r"'MIG-dead' matches no device UUID \(known: MIG-cafe0001, MIG-cafe0002\)"),
        ("7", r"'7' is not a GPU on this machine \(indices 0-2 exist\)"),
        ("0,3", r"'3' is not a GPU on this machine \(indices 0-2 exist\)"),
        ("", r"CUDA_VISIBLE_DEVICES is empty"),
        ([], r"CUDA_VISIBLE_DEVICES is empty"),
        ("0,GPU-aaaa1111", r"names device GPU-aaaa1111 \(gpu-0\) twice"),
        ("GPU-bbbb,2", r"names device GPU-bbbb3333 \(gpu-2\) twice"),
        ("0,00", r"names device GPU-aaaa1111 \(gpu-0\) twice"),
    ],
)
def test_select_bad(visible, pattern):
    with pytest.raises(ValueError, match=pattern or re.escape(repr(visible))):
        devices.select(uuid_system(), visible)


def test_select_ambiguous_word():
    system = simulated(3)
    twins = System(State.SIMULATED, system.devices[:1] + (Device(1, "A", system.devices[0].uuid + "0", 1),))
    with pytest.raises(ValueError, match="ambiguous"):
        devices.select(twins, system.devices[0].uuid[:8])


def test_select_unknown_index_lists_range():
    with pytest.raises(ValueError, match=r"indices 0-2 exist"):
        devices.select(simulated(3), "5")


def test_select_empty_env_is_an_error(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(ValueError, match="empty"):
        devices.select(simulated(2))


def test_select_same_device_by_index_and_uuid():
    system = simulated(3)
    with pytest.raises(ValueError, match="twice"):
        devices.select(system, f"1,{system.devices[1].uuid}")


@pytest.mark.parametrize(
    "system",
    [
        System(State.NO_GPU, message="the NVIDIA driver sees no GPU."),
        System(State.NO_DRIVER, message="NVML could not start."),
        System(State.NO_NVML, message="the NVML bindings are missing."),
        devices.simulated_system(0),
    ],
)
def test_select_without_devices(system):
    with pytest.raises(NoGPUError, match="DASK_GPU__SIMULATE") as info:
        devices.select(system)
    assert system.message in str(info.value)


# -- NVML, through a fake pynvml -----------------------------------------------------------


class FakeNVMLError(Exception):
    pass


def gpu(name, uuid, memory, affinity=(0b1,), mig=None):
    """A fake GPU. affinity: bitmask words, or None for NVMLError.
    mig: None (mode not supported), or (current mode, max count, [instance dict or None for an empty slot])."""
    return {"name": name, "uuid": uuid, "memory": memory, "affinity": affinity, "mig": mig}


def fake_nvml(gpus, init_error=None, driver=b"550.54.15", cuda=12040, handle_error=None):
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = FakeNVMLError
    nvml.NVML_DEVICE_MIG_ENABLE = 1
    nvml.NVML_DEVICE_MIG_DISABLE = 0
    nvml.calls = []
    nvml.affinity_words = []

    def lookup(handle):
        if handle[0] == "gpu":
            return gpus[handle[1]]
        return gpus[handle[1]]["mig"][2][handle[2]]

    def nvmlInit():
        nvml.calls.append("init")
        if init_error is not None:
            raise init_error

    def nvmlShutdown():
        nvml.calls.append("shutdown")

    def nvmlDeviceGetHandleByIndex(i):
        if handle_error is not None:
            raise handle_error
        return ("gpu", i)

    def nvmlDeviceGetCpuAffinity(handle, n_words):
        nvml.affinity_words.append(n_words)
        words = lookup(handle)["affinity"]
        if words is None:
            raise FakeNVMLError("Not Supported")
        return list(words)

    def nvmlDeviceGetMigMode(handle):
        mig = lookup(handle)["mig"]
        if mig is None:
            raise FakeNVMLError("Not Supported")
        return mig[0], mig[0]

    def nvmlDeviceGetMigDeviceHandleByIndex(handle, i):
        if lookup(handle)["mig"][2][i] is None:
            raise FakeNVMLError("Not Found")
        return ("mig", handle[1], i)

    nvml.nvmlInit = nvmlInit
    nvml.nvmlShutdown = nvmlShutdown
    nvml.nvmlSystemGetDriverVersion = lambda: driver
    nvml.nvmlSystemGetCudaDriverVersion = lambda: cuda
    nvml.nvmlDeviceGetCount = lambda: len(gpus)
    nvml.nvmlDeviceGetHandleByIndex = nvmlDeviceGetHandleByIndex
    nvml.nvmlDeviceGetName = lambda h: lookup(h)["name"]
    nvml.nvmlDeviceGetUUID = lambda h: lookup(h)["uuid"]
    nvml.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=lookup(h)["memory"], free=0, used=0)
    nvml.nvmlDeviceGetCpuAffinity = nvmlDeviceGetCpuAffinity
    nvml.nvmlDeviceGetMigMode = nvmlDeviceGetMigMode
    nvml.nvmlDeviceGetMaxMigDeviceCount = lambda h: lookup(h)["mig"][1]
    nvml.nvmlDeviceGetMigDeviceHandleByIndex = nvmlDeviceGetMigDeviceHandleByIndex
    return nvml


H100 = 80 * 2**30


def two_gpus():
    return [
        gpu(b"NVIDIA H100 80GB HBM3", b"GPU-11111111-aaaa", H100, affinity=(0b1011, 1)),
        gpu("NVIDIA H100 80GB HBM3", "GPU-22222222-bbbb", H100, affinity=(0, 0b110)),
    ]


def use(monkeypatch, nvml):
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    return nvml


def test_nvml_two_gpus(monkeypatch):
    nvml = use(monkeypatch, fake_nvml(two_gpus()))
    system = devices.nvml_system()
    assert system.state is State.AVAILABLE
    assert system.usable
    assert system.driver_version == "550.54.15"
    assert system.cuda_version == "12.4"
    assert system.message == "2 GPU(s) found through NVML."
    assert [d.index for d in system.devices] == [0, 1]
    assert [d.name for d in system.devices] == ["NVIDIA H100 80GB HBM3"] * 2
    assert [d.uuid for d in system.devices] == ["GPU-11111111-aaaa", "GPU-22222222-bbbb"]
    assert [d.memory_total for d in system.devices] == [H100, H100]
    assert system.devices[0].cpu_affinity == (0, 1, 3, 64)
    assert system.devices[1].cpu_affinity == (65, 66)
    assert all(d.mig == () and d.mig_index is None for d in system.devices)
    assert nvml.calls == ["init", "shutdown"]
    assert nvml.affinity_words == [((os.cpu_count() or 1) + 63) // 64] * 2


def test_nvml_through_discover(monkeypatch):
    use(monkeypatch, fake_nvml(two_gpus()))
    with dask.config.set({"gpu.simulate": 0}):
        system = devices.discover()
    assert system.state is State.AVAILABLE
    assert [t for t, _ in devices.select(system)] == ["0", "1"]


def test_nvml_is_cached(monkeypatch):
    nvml = use(monkeypatch, fake_nvml(two_gpus()))
    assert devices.nvml_system() is devices.nvml_system()
    assert nvml.calls == ["init", "shutdown"]


@pytest.mark.parametrize(
    "cuda, version",
    [(12040, "12.4"), (11080, "11.8"), (13000, "13.0"), (12090, "12.9"), (10020, "10.2")],
)
def test_nvml_cuda_version(monkeypatch, cuda, version):
    use(monkeypatch, fake_nvml(two_gpus(), cuda=cuda))
    assert devices.nvml_system().cuda_version == version


@pytest.mark.parametrize("driver", [b"550.54.15", "550.54.15"])
def test_nvml_driver_text(monkeypatch, driver):
    use(monkeypatch, fake_nvml(two_gpus(), driver=driver))
    assert devices.nvml_system().driver_version == "550.54.15"


@pytest.mark.parametrize(
    "words, cores",
    [
        (None, ()),
        ((0,), ()),
        ((0b1011, 1), (0, 1, 3, 64)),
        ((2**63,), (63,)),
        ((0, 0, 0b1), (128,)),
        ((2**64 - 1,), tuple(range(64))),
    ],
)
def test_nvml_affinity(monkeypatch, words, cores):
    use(monkeypatch, fake_nvml([gpu("A", "GPU-a", H100, affinity=words)]))
    assert devices.nvml_system().devices[0].cpu_affinity == cores


def mig_gpu(mode=1):
    instances = [
        {"name": b"NVIDIA H100 MIG 3g.40gb", "uuid": b"MIG-aaaa0000", "memory": 40 * 2**30},
        None,  # an empty slot
        {"name": "NVIDIA H100 MIG 2g.20gb", "uuid": "MIG-aaaa0002", "memory": 20 * 2**30},
    ]
    return gpu("NVIDIA H100", "GPU-aaaa", H100, affinity=(0b11,), mig=(mode, 3, instances))


def test_nvml_mig(monkeypatch):
    use(monkeypatch, fake_nvml([mig_gpu(), gpu("NVIDIA H100", "GPU-bbbb", H100)]))
    system = devices.nvml_system()
    parent, plain = system.devices
    assert [m.mig_index for m in parent.mig] == [0, 1]
    assert [m.uuid for m in parent.mig] == ["MIG-aaaa0000", "MIG-aaaa0002"]
    assert [m.name for m in parent.mig] == ["NVIDIA H100 MIG 3g.40gb", "NVIDIA H100 MIG 2g.20gb"]
    assert [m.memory_total for m in parent.mig] == [40 * 2**30, 20 * 2**30]
    assert all(m.index == 0 and m.cpu_affinity == (0, 1) and m.mig == () for m in parent.mig)
    assert parent.mig_index is None
    assert plain.mig == ()

    selected = devices.select(system)
    assert [t for t, _ in selected] == ["MIG-aaaa0000", "MIG-aaaa0002", "1"]
    assert [d.label for _, d in selected] == ["gpu-0-mig-0", "gpu-0-mig-1", "gpu-1"]
    assert [d.uuid for _, d in devices.select(system, "MIG-aaaa0002")] == ["MIG-aaaa0002"]


@pytest.mark.parametrize("mode", [0, None])  # MIG off, or NVMLError (not supported)
def test_nvml_no_mig(monkeypatch, mode):
    g = mig_gpu(mode=0)
    if mode is None:
        g["mig"] = None
    use(monkeypatch, fake_nvml([g]))
    system = devices.nvml_system()
    assert system.devices[0].mig == ()
    assert [t for t, _ in devices.select(system)] == ["0"]


def test_nvml_init_fails(monkeypatch):
    nvml = use(monkeypatch, fake_nvml(two_gpus(), init_error=FakeNVMLError("Driver Not Loaded")))
    system = devices.nvml_system()
    assert system.state is State.NO_DRIVER
    assert "Driver Not Loaded" in system.message
    assert system.devices == ()
    assert not system.usable
    assert "shutdown" not in nvml.calls
    with pytest.raises(NoGPUError, match="Driver Not Loaded"):
        devices.select(system)


def test_nvml_no_gpu(monkeypatch):
    nvml = use(monkeypatch, fake_nvml([]))
    system = devices.nvml_system()
    assert system.state is State.NO_GPU
    assert system.devices == ()
    assert not system.usable
    assert system.driver_version == "550.54.15"
    assert system.cuda_version == "12.4"
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_missing(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    system = devices.nvml_system()
    assert system.state is State.NO_NVML
    assert "nvidia-ml-py" in system.message
    assert not system.usable


def test_nvml_shutdown_after_a_failed_read(monkeypatch):
    nvml = use(monkeypatch, fake_nvml(two_gpus(), handle_error=FakeNVMLError("GPU is lost")))
    try:
        devices.nvml_system()
    except FakeNVMLError:
        pass
    assert nvml.calls == ["init", "shutdown"]


def test_nvml_device_error_is_a_state(monkeypatch):
    use(monkeypatch, fake_nvml(two_gpus(), handle_error=FakeNVMLError("GPU is lost")))
    system = devices.nvml_system()
    assert isinstance(system, System)
    assert system.state is State.NVML_ERROR and "GPU is lost" in system.message and not system.usable


@pytest.mark.parametrize("value, token", [(None, None), ("", None), (" ", None), ("2", "2"), (" 3 ,0", "3"),
                                          ("GPU-8a3f,1", "GPU-8a3f"), (",1", None)])
def test_a_worker_s_own_device_is_the_first_visible_one(value, token):
    from dask_gpu import parse

    assert parse.own_device_token(value) == token


def test_lists_of_names_and_counts_are_parsed_in_one_place():
    from dask_gpu import parse

    assert parse.name_list(" duckdb, dask-gpu,,") == ("duckdb", "dask-gpu") and parse.name_list("") is None
    assert parse.name_list(["a", "b"]) == ("a", "b") and parse.name_list(None) is None
    assert parse.counts("4,1,2,1", "--gpus") == [1, 2, 4] and parse.counts(2, "--gpus") == [2]
    with pytest.raises(ValueError, match="--gpus takes GPU counts separated by commas, such as 1,2,4, not '1,two'"):
        parse.counts("1,two", "--gpus", "GPU counts")
