import gc
import importlib.machinery
import os
import pickle
import subprocess
import sys
import threading
import types
from dataclasses import FrozenInstanceError
from importlib.util import find_spec

import pytest

from dask_gpu.memory import allocator as allocator_module
from dask_gpu.memory.allocator import (
    AllocatorOptions,
    DeviceMemoryError,
    SpillingAllocator,
    allocate_with_spill,
    allocator_metrics,
    resolve_allocator,
    setup_allocator,
)

GiB = 2**30
DEVICE = 80 * GiB  # an H100's worth, for the parent-side checks


@pytest.fixture
def rmm_installed(monkeypatch):
    """resolve_allocator believes the rmm package is installed (it is not, on CPU CI)."""
    real = allocator_module.find_spec
    monkeypatch.setattr(allocator_module, "find_spec", lambda name, *a: object() if name == "rmm" else real(name, *a))


def delta(before: dict) -> dict:
    after = allocator_metrics()
    return {k: after[k] - before[k] for k in after}


# ---------------------------------------------------------------- resolve_allocator (parent side, no CUDA)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({}, dict(allocator="pool")),
        ({"allocator": "async"}, dict(allocator="async")),
        ({"allocator": " Managed "}, dict(allocator="managed")),
        ({"allocator": "async", "rmm_release_threshold": "1GB"}, dict(allocator="async", release_threshold=10**9)),
        ({"allocator": "async", "rmm_release_threshold": 0.5}, dict(allocator="async", release_threshold=40 * GiB)),
        # The CLI sends False for flags left off: that is "not set", not "use RMM".
        ({"rmm_managed_memory": False, "rmm_async": False, "rmm_track_allocations": False}, dict(allocator="pool")),
        ({"allocator": "pool", "rmm_async": False}, dict(allocator="pool")),
    ],
)
def test_resolve_cupy_allocators(kwargs, expected):
    options = resolve_allocator(**kwargs, device_memory=DEVICE)
    assert options == AllocatorOptions(device_memory=DEVICE, **expected)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        ({"allocator": "rmm"}, dict()),
        ({"allocator": "RMM", "rmm_pool_size": "16GB"}, dict(pool_size=16 * 10**9)),
        ({"rmm_pool_size": "16GB"}, dict(pool_size=16 * 10**9)),
        ({"rmm_pool_size": 0.5}, dict(pool_size=40 * GiB)),
        ({"rmm_pool_size": "50%", "rmm_maximum_pool_size": 0.9},
         dict(pool_size=40 * GiB, maximum_pool_size=int(DEVICE * 0.9) // 256 * 256)),
        ({"rmm_pool_size": 1000}, dict(pool_size=768)),  # RMM wants multiples of 256 bytes
        ({"rmm_pool_size": "1e9", "rmm_maximum_pool_size": 10**9 + 300},
         dict(pool_size=10**9, maximum_pool_size=10**9 + 256)),
        ({"rmm_pool_size": 1.0}, dict(pool_size=DEVICE)),  # 1 is a fraction: the whole device
        ({"rmm_async": True}, dict(use_async=True)),
        ({"rmm_async": True, "rmm_release_threshold": "2GB"}, dict(use_async=True, release_threshold=2 * 10**9)),
        ({"rmm_async": True, "rmm_pool_size": "1GB", "rmm_maximum_pool_size": "4GB"},
         dict(use_async=True, pool_size=10**9, maximum_pool_size=4 * 10**9)),
        ({"rmm_async": True, "rmm_maximum_pool_size": "4GB"}, dict(use_async=True, maximum_pool_size=4 * 10**9)),
        ({"rmm_managed_memory": True}, dict(managed_memory=True)),
        # managed memory may oversubscribe the device
        ({"rmm_managed_memory": True, "rmm_pool_size": 2 * DEVICE}, dict(managed_memory=True, pool_size=2 * DEVICE)),
        ({"rmm_track_allocations": True}, dict(track_allocations=True)),
    ],
)
def test_resolve_rmm(rmm_installed, kwargs, expected):
    options = resolve_allocator(**kwargs, device_memory=DEVICE)
    assert options == AllocatorOptions(allocator="rmm", device_memory=DEVICE, **expected)


@pytest.mark.parametrize(
    "kwargs, names",
    [
        ({"allocator": "cuda"}, ["'cuda'"]),
        ({"allocator": 3}, ["allocator=3"]),
        ({"allocator": ""}, ["allocator=''"]),
        ({"allocator": "async", "rmm_managed_memory": True}, ["'async'", "managed"]),
        ({"allocator": "managed", "rmm_async": True}, ["'managed'", "rmm_async=True"]),
        ({"rmm_async": True, "rmm_managed_memory": True}, ["rmm_async=True", "rmm_managed_memory=True"]),
        ({"allocator": "pool", "rmm_pool_size": "1GB"}, ["rmm_pool_size='1GB'", "allocator='pool'"]),
        ({"allocator": "async", "rmm_track_allocations": True}, ["rmm_track_allocations=True", "'async'"]),
        ({"allocator": "managed", "rmm_managed_memory": True}, ["rmm_managed_memory=True", "'managed'"]),
        ({"rmm_release_threshold": "1GB"}, ["rmm_release_threshold='1GB'", "async"]),
        ({"allocator": "pool", "rmm_release_threshold": "1GB"}, ["rmm_release_threshold='1GB'"]),
        ({"allocator": "rmm", "rmm_release_threshold": "1GB"}, ["rmm_release_threshold='1GB'"]),
        ({"rmm_pool_size": "100GB"}, ["rmm_pool_size='100GB'", "larger than the device"]),
        ({"rmm_pool_size": "1GB", "rmm_maximum_pool_size": "100GB"}, ["rmm_maximum_pool_size='100GB'", "larger"]),
        ({"rmm_async": True, "rmm_release_threshold": "100GB"}, ["rmm_release_threshold='100GB'", "larger"]),
        ({"rmm_pool_size": "4GB", "rmm_maximum_pool_size": "2GB"}, ["rmm_maximum_pool_size='2GB'", "smaller"]),
        ({"rmm_maximum_pool_size": "4GB"}, ["rmm_maximum_pool_size='4GB'", "rmm_pool_size"]),
        ({"rmm_pool_size": 0, "rmm_maximum_pool_size": 100}, ["rmm_maximum_pool_size=100"]),
        ({"rmm_pool_size": -1}, ["rmm_pool_size=-1", "negative"]),
        ({"rmm_pool_size": "-5gb"}, ["rmm_pool_size='-5gb'", "negative"]),
        ({"rmm_pool_size": "lots"}, ["rmm_pool_size='lots'"]),
        ({"rmm_pool_size": True}, ["rmm_pool_size=True"]),
        ({"rmm_pool_size": [1]}, ["rmm_pool_size=[1]"]),
        ({"rmm_pool_size": float("nan")}, ["rmm_pool_size=nan"]),
        ({"rmm_pool_size": 1.5}, ["rmm_pool_size=1.5"]),
        ({"allocator": "async", "rmm_release_threshold": -1}, ["rmm_release_threshold=-1"]),
        ({"rmm_managed_memory": "yes"}, ["rmm_managed_memory", "'yes'"]),
        ({"rmm_async": 1}, ["rmm_async", "1"]),
        ({"rmm_log_directory": 42}, ["rmm_log_directory=42"]),
    ],
)
def test_resolve_rejects(rmm_installed, kwargs, names):
    with pytest.raises(ValueError) as info:
        resolve_allocator(**kwargs, device_memory=DEVICE)
    for name in names:
        assert name in str(info.value)


@pytest.mark.parametrize("device_memory", [0, -1, "80GB", 8.0e10, True, None])
def test_resolve_needs_device_size(device_memory):
    with pytest.raises(ValueError, match="device_memory"):
        resolve_allocator(device_memory=device_memory)


@pytest.mark.skipif(find_spec("rmm") is not None, reason="rmm is installed here")
@pytest.mark.parametrize(
    "kwargs, name",
    [({"allocator": "rmm"}, "allocator='rmm'"), ({"rmm_pool_size": "1GB"}, "rmm_pool_size='1GB'"),
     ({"rmm_async": True}, "rmm_async=True")],
)
def test_resolve_rmm_not_installed(kwargs, name):
    with pytest.raises(ValueError, match="rmm package is not installed") as info:
        resolve_allocator(**kwargs, device_memory=DEVICE)
    assert name in str(info.value)


def test_resolve_log_directory(rmm_installed, tmp_path, monkeypatch):
    options = resolve_allocator(rmm_log_directory=tmp_path, device_memory=DEVICE)
    assert options.allocator == "rmm" and options.log_directory == str(tmp_path)
    assert resolve_allocator(rmm_log_directory=str(tmp_path), device_memory=DEVICE) == options

    missing, afile = tmp_path / "missing", tmp_path / "file"
    afile.write_text("")
    for path in (missing, afile, "", " "):  # an empty name is not "here"
        with pytest.raises(ValueError, match="not an existing directory") as info:
            resolve_allocator(rmm_log_directory=str(path), device_memory=DEVICE)
        assert str(path) in str(info.value)

    monkeypatch.setattr(allocator_module.os, "access", lambda *a, **k: False)  # root can write anywhere
    with pytest.raises(ValueError, match="not writable") as info:
        resolve_allocator(rmm_log_directory=str(tmp_path), device_memory=DEVICE)
    assert str(tmp_path) in str(info.value)


def test_options_picklable_and_frozen(rmm_installed, tmp_path):
    options = resolve_allocator(rmm_pool_size="1GB", rmm_maximum_pool_size=0.5, rmm_track_allocations=True,
                                rmm_log_directory=tmp_path, device_memory=DEVICE)
    assert pickle.loads(pickle.dumps(options)) == options
    with pytest.raises(FrozenInstanceError):
        options.pool_size = 1


def test_options_describe_and_lazy(rmm_installed):
    options = resolve_allocator(rmm_pool_size="1GB", device_memory=DEVICE)
    assert options.describe() == {"allocator": "rmm", "device_memory": DEVICE, "pool_size": 10**9}
    assert not options.lazy
    for name in ("pool", "async", "managed"):  # these only configure CuPy
        assert resolve_allocator(name, device_memory=DEVICE).lazy


# ---------------------------------------------------------------- allocate_with_spill with fakes


class FakeOOM(MemoryError):
    pass


class FakeDevice:
    """A device with ``free`` bytes, ``cached`` bytes in its allocator's cache, and spillable chunks."""

    def __init__(self, free=0, cached=0, spillable=()):
        self.free, self.cached, self.spillable = free, cached, list(spillable)
        self.mallocs = self.cache_frees = self.spills = 0

    def malloc(self, nbytes):
        self.mallocs += 1
        if nbytes > self.free:
            raise FakeOOM(nbytes)
        self.free -= nbytes
        return ("pointer", nbytes)

    def free_cached(self):
        self.cache_frees += 1
        self.free, self.cached = self.free + self.cached, 0

    def spill(self, nbytes):  # releases one chunk a call, to exercise the loop
        self.spills += 1
        released = self.spillable.pop() if self.spillable else 0
        self.free += released
        return released

    def allocate(self, nbytes, describe=lambda: "3 keys, 1.0 GiB on the device"):
        return allocate_with_spill(self.malloc, nbytes, free_cached=self.free_cached, spill=self.spill,
                                   describe=describe, oom_errors=(FakeOOM,))


def test_allocate_first_try():
    device, before = FakeDevice(free=100), allocator_metrics()
    assert device.allocate(60) == ("pointer", 60)
    assert (device.mallocs, device.cache_frees, device.spills) == (1, 0, 0)
    assert delta(before) == {"oom_retries": 0, "oom_spilled_bytes": 0, "oom_failures": 0}


def test_allocate_after_freeing_the_cache():
    device, before = FakeDevice(free=10, cached=100, spillable=[500]), allocator_metrics()
    assert device.allocate(60) == ("pointer", 60)
    assert (device.mallocs, device.cache_frees, device.spills) == (2, 1, 0)
    assert delta(before) == {"oom_retries": 1, "oom_spilled_bytes": 0, "oom_failures": 0}


def test_allocate_after_spilling_several_times():
    device, before = FakeDevice(free=10, spillable=[1, 100, 100, 100]), allocator_metrics()
    assert device.allocate(250) == ("pointer", 250)
    assert (device.cache_frees, device.spills, device.mallocs) == (1, 3, 5)
    assert device.spillable == [1]  # stopped spilling as soon as it fitted
    assert delta(before) == {"oom_retries": 4, "oom_spilled_bytes": 300, "oom_failures": 0}


def test_allocate_fails_when_nothing_is_left_to_spill():
    device, before = FakeDevice(free=10, spillable=[100]), allocator_metrics()
    with pytest.raises(DeviceMemoryError) as info:
        device.allocate(12345, describe=lambda: "GPU 0: 7 keys, 9.5 GiB on the device")
    message = str(info.value)
    assert "12345 bytes" in message and "12.06 kiB" in message
    assert "GPU 0: 7 keys, 9.5 GiB on the device" in message
    assert "smaller chunks" in message and "device_memory_limit" in message
    assert isinstance(info.value, MemoryError) and isinstance(info.value.__cause__, FakeOOM)
    assert device.spills == 2 and device.spillable == []
    assert delta(before) == {"oom_retries": 2, "oom_spilled_bytes": 100, "oom_failures": 1}


def test_allocate_without_cache_or_spill():
    device = FakeDevice(free=0)
    with pytest.raises(DeviceMemoryError, match="could not describe the device"):
        allocate_with_spill(device.malloc, 8, describe=lambda: 1 / 0, oom_errors=(FakeOOM,))
    assert device.mallocs == 1


def test_other_errors_pass_through():
    device = FakeDevice(free=0, spillable=[100])

    def broken(nbytes):
        raise ValueError("not an allocation problem")

    with pytest.raises(ValueError, match="not an allocation problem"):
        allocate_with_spill(broken, 8, free_cached=device.free_cached, spill=device.spill, describe=str,
                            oom_errors=(FakeOOM,))

    def nested(nbytes):  # an allocator that already gave up (e.g. a wrapped SpillingAllocator)
        raise DeviceMemoryError("already spilled")

    with pytest.raises(DeviceMemoryError, match="already spilled"):
        allocate_with_spill(nested, 8, free_cached=device.free_cached, spill=device.spill, describe=str,
                            oom_errors=(MemoryError,))
    assert device.spills == 0 and device.cache_frees == 0


def test_spilling_allocator_is_a_callable():
    device = FakeDevice(free=0, spillable=[64])
    allocate = SpillingAllocator(device.malloc, free_cached=None, spill=device.spill, describe=str,
                                 oom_errors=(FakeOOM,))
    assert allocate(64) == ("pointer", 64)


def test_metrics_are_thread_safe():
    def always_fails(nbytes):
        raise FakeOOM(nbytes)

    def fits_after_one_spill():
        device = FakeDevice(free=0, spillable=[3])
        return allocate_with_spill(device.malloc, 3, spill=device.spill, describe=str, oom_errors=(FakeOOM,))

    def work():
        for _ in range(200):
            with pytest.raises(DeviceMemoryError):
                allocate_with_spill(always_fails, 8, free_cached=lambda: None, spill=lambda n: 0, describe=str,
                                    oom_errors=(FakeOOM,))
            assert fits_after_one_spill() == ("pointer", 3)

    before = allocator_metrics()
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert delta(before) == {"oom_retries": 8 * 200 * 2, "oom_spilled_bytes": 8 * 200 * 3,
                             "oom_failures": 8 * 200}


# ---------------------------------------------------------------- setup_allocator wiring, with fake modules


def fake_module(monkeypatch, name, **attrs):
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(attrs)
    monkeypatch.setitem(sys.modules, name, module)
    return module


class FakeCupyOOM(MemoryError):
    pass


class FakeCUDARuntimeError(RuntimeError):
    def __init__(self, status):
        super().__init__(f"CUDA error {status}")
        self.status = status


class FakePool:
    def __init__(self, allocator=None):
        self.allocator, self.fail, self.frees = allocator, 0, 0

    def malloc(self, nbytes):
        if self.fail:
            self.fail -= 1
            raise FakeCupyOOM(nbytes)
        return ("pooled", nbytes)

    def free_all_blocks(self):
        self.frees += 1

    def total_bytes(self):
        return 3 * GiB

    def used_bytes(self):
        return 2 * GiB


@pytest.fixture
def fake_cupy(monkeypatch):
    state = types.SimpleNamespace(allocator=None, attrs={}, current_pool={}, syncs=0, trims=[], async_fail=[])

    def malloc_async(nbytes):
        if state.async_fail:
            raise FakeCUDARuntimeError(state.async_fail.pop())
        return ("async", nbytes)

    runtime = types.SimpleNamespace(
        getDevice=lambda: 0, deviceGetDefaultMemPool=lambda device: 1000 + device,
        deviceSetMemPool=state.current_pool.__setitem__, memGetInfo=lambda: (GiB, 80 * GiB),
        memPoolSetAttribute=lambda pool, attr, value: state.attrs.__setitem__((pool, attr), value),
        memPoolGetAttribute=lambda pool, attr: state.attrs.get((pool, attr), 0),
        memPoolTrimTo=lambda pool, size: state.trims.append((pool, size)),
        cudaMemPoolAttrReleaseThreshold="threshold", cudaMemPoolAttrUsedMemCurrent="used",
        cudaMemPoolAttrReservedMemCurrent="reserved", CUDARuntimeError=FakeCUDARuntimeError,
    )

    def synchronize():
        state.syncs += 1

    cuda = types.SimpleNamespace(
        runtime=runtime, memory=types.SimpleNamespace(OutOfMemoryError=FakeCupyOOM, malloc_async=malloc_async),
        set_allocator=lambda allocator: setattr(state, "allocator", allocator), MemoryPool=FakePool,
        malloc_managed="malloc_managed", Device=lambda: types.SimpleNamespace(synchronize=synchronize),
    )
    state.default_pool = FakePool()
    fake_module(monkeypatch, "cupy", cuda=cuda, get_default_memory_pool=lambda: state.default_pool)
    return state


def test_setup_pool(fake_cupy):
    setup_allocator(resolve_allocator(device_memory=DEVICE), spill=lambda n: 0, describe=lambda: "2 keys")
    allocate = fake_cupy.allocator
    assert isinstance(allocate, SpillingAllocator) and allocate.malloc == fake_cupy.default_pool.malloc
    assert allocate(10) == ("pooled", 10)

    fake_cupy.default_pool.fail = 10
    with pytest.raises(DeviceMemoryError) as info:
        allocate(4096)
    message = str(info.value)
    assert "4096 bytes" in message and "2 keys" in message
    assert "GPU" in message and "the CuPy pool holds 3.00 GiB (2.00 GiB in use)" in message
    assert fake_cupy.default_pool.frees == 1


def test_setup_pool_spills(fake_cupy):
    spilled = []

    def spill(nbytes):
        spilled.append(nbytes)
        fake_cupy.default_pool.fail = 0
        return nbytes

    setup_allocator(resolve_allocator("pool", device_memory=DEVICE), spill=spill, describe=str)
    fake_cupy.default_pool.fail = 2  # the first try and the one after freeing the cache
    assert fake_cupy.allocator(512) == ("pooled", 512)
    assert spilled == [512]


def test_setup_managed(fake_cupy):
    setup_allocator(resolve_allocator("managed", device_memory=DEVICE), spill=lambda n: 0, describe=str)
    pool = fake_cupy.allocator.malloc.__self__
    assert isinstance(pool, FakePool) and pool is not fake_cupy.default_pool
    assert pool.allocator == "malloc_managed"


@pytest.mark.parametrize("threshold, expected", [(None, 2**64 - 1), ("1GB", 10**9), (0, 0)])
def test_setup_async(fake_cupy, threshold, expected):
    options = resolve_allocator("async", rmm_release_threshold=threshold, device_memory=DEVICE)
    setup_allocator(options, spill=lambda n: 0, describe=str)
    assert fake_cupy.current_pool == {0: 1000}
    assert fake_cupy.attrs[(1000, "threshold")] == expected
    allocate = fake_cupy.allocator
    assert allocate(10) == ("async", 10)

    fake_cupy.async_fail[:] = [2]  # out of memory once: synchronise and retry
    assert allocate(10) == ("async", 10) and fake_cupy.syncs == 1

    fake_cupy.async_fail[:] = [2] * 4
    with pytest.raises(DeviceMemoryError, match="CUDA async pool"):
        allocate(10)
    assert fake_cupy.trims == [(1000, 0)]

    fake_cupy.async_fail[:] = [700]  # not an allocation failure: CuPy's error, untouched
    with pytest.raises(FakeCUDARuntimeError):
        allocate(10)


@pytest.fixture
def fake_rmm(monkeypatch, fake_cupy):
    state = types.SimpleNamespace(current=None)

    class Resource:
        def __init__(self, *args, **kwargs):
            self.args, self.kwargs = args, kwargs

        def pool_size(self):
            return 5 * GiB

    names = ["CudaMemoryResource", "ManagedMemoryResource", "PoolMemoryResource", "CudaAsyncMemoryResource",
             "LimitingResourceAdaptor", "TrackingResourceAdaptor", "LoggingResourceAdaptor",
             "FailureCallbackResourceAdaptor"]
    mr = fake_module(monkeypatch, "rmm.mr", **{n: type(n, (Resource,), {}) for n in names},
                     set_current_device_resource=lambda resource: setattr(state, "current", resource))

    def rmm_cupy_allocator(nbytes):
        if nbytes > GiB:
            raise MemoryError("std::bad_alloc: out_of_memory")
        return ("rmm", nbytes)

    # torch may be installed for real (it is on the GPU machines): every RMM test gets a fake one
    monkeypatch.setattr(allocator_module, "_torch_routed", False)
    state.torch_allocator, state.routed = object(), []
    state.torch_memory = types.SimpleNamespace(change_current_allocator=state.routed.append)
    fake_module(monkeypatch, "torch", cuda=types.SimpleNamespace(memory=state.torch_memory))
    cupy_allocators = fake_module(monkeypatch, "rmm.allocators.cupy", rmm_cupy_allocator=rmm_cupy_allocator)
    torch_allocators = fake_module(monkeypatch, "rmm.allocators.torch", rmm_torch_allocator=state.torch_allocator)
    allocators = fake_module(monkeypatch, "rmm.allocators", cupy=cupy_allocators, torch=torch_allocators)
    fake_module(monkeypatch, "rmm", mr=mr, allocators=allocators)
    state.cupy = fake_cupy
    return state


def chain(resource):
    """Names of the resources from the current one down to the base."""
    names = []
    while resource is not None:
        names.append(type(resource).__name__)
        resource = resource.args[0] if resource.args else None
    return names


def test_setup_rmm_pool(fake_rmm, tmp_path):
    options = resolve_allocator(rmm_pool_size="1GB", rmm_maximum_pool_size="2GB", rmm_track_allocations=True,
                                rmm_log_directory=tmp_path, device_memory=DEVICE)
    released = [7, 0]

    def spill(nbytes):
        return released.pop(0)

    before = allocator_metrics()
    setup_allocator(options, spill=spill, describe=lambda: "4 keys")
    current = fake_rmm.current
    assert chain(current) == ["FailureCallbackResourceAdaptor", "LoggingResourceAdaptor",
                              "TrackingResourceAdaptor", "PoolMemoryResource", "CudaMemoryResource"]
    logging_mr = current.args[0]
    log_file = logging_mr.kwargs["log_file_name"]
    assert os.path.dirname(log_file) == str(tmp_path) and str(os.getpid()) in os.path.basename(log_file)
    pool = logging_mr.args[0].args[0]
    assert pool.kwargs == {"initial_pool_size": 10**9, "maximum_pool_size": 2 * 10**9}

    callback = current.args[1]
    assert callback(100) is True and callback(100) is False
    assert delta(before) == {"oom_retries": 1, "oom_spilled_bytes": 7, "oom_failures": 0}

    allocate = fake_rmm.cupy.allocator
    assert isinstance(allocate, SpillingAllocator) and allocate(10) == ("rmm", 10)
    with pytest.raises(DeviceMemoryError) as info:
        allocate(2 * GiB)
    assert str(2 * GiB) in str(info.value) and "4 keys" in str(info.value)
    assert "the RMM pool holds 5.00 GiB" in str(info.value)
    assert delta(before)["oom_failures"] == 1


def test_setup_rmm_async(fake_rmm):
    options = resolve_allocator(rmm_async=True, rmm_pool_size="1GB", rmm_maximum_pool_size="4GB",
                                rmm_release_threshold="2GB", device_memory=DEVICE)
    setup_allocator(options, spill=lambda n: 0, describe=str)
    assert chain(fake_rmm.current) == ["FailureCallbackResourceAdaptor", "LimitingResourceAdaptor",
                                       "CudaAsyncMemoryResource"]
    limiting = fake_rmm.current.args[0]
    assert limiting.kwargs == {"allocation_limit": 4 * 10**9}
    assert limiting.args[0].kwargs == {"initial_pool_size": 10**9, "release_threshold": 2 * 10**9}


def test_setup_rmm_managed_without_pool(fake_rmm):
    setup_allocator(resolve_allocator(rmm_managed_memory=True, device_memory=DEVICE), spill=lambda n: 0,
                    describe=str)
    assert chain(fake_rmm.current) == ["FailureCallbackResourceAdaptor", "ManagedMemoryResource"]


@pytest.mark.parametrize("allocator, ipc, resources", [
    ("pool", False, ["CudaAsyncMemoryResource"]),
    ("async", True, ["PoolMemoryResource", "CudaMemoryResource"]),  # UCX maps cudaMalloc's memory, not async's
    ("managed", True, ["ManagedMemoryResource"]),
])
def test_rmm_for_cudf_beside_cupy_s_own_allocator(fake_rmm, allocator, ipc, resources):
    allocator_module.setup_rmm_for_libraries(resolve_allocator(allocator, device_memory=DEVICE), lambda n: 0, ipc)
    assert chain(fake_rmm.current) == ["FailureCallbackResourceAdaptor", *resources]
    base = fake_rmm.current.args[0]
    if resources[0] == "PoolMemoryResource":  # a sixteenth of the device to start with; it doubles from there
        assert base.kwargs == {"initial_pool_size": DEVICE // 16} and "maximum_pool_size" not in base.kwargs
    elif resources[0] == "CudaAsyncMemoryResource":
        assert base.kwargs == {"release_threshold": DEVICE}


@pytest.mark.parametrize("address, base", [("ucxx://10.0.0.1:4321", "PoolMemoryResource"),
                                           ("ucx://10.0.0.1:4321", "PoolMemoryResource"),
                                           ("tcp://10.0.0.1:4321", "CudaAsyncMemoryResource")])
def test_a_worker_that_talks_ucx_gives_cudf_memory_that_ucx_maps(fake_rmm, address, base):
    from dask_gpu.plugins import GPUWorker

    plugin = GPUWorker({"index": 0}, 0, allocator=resolve_allocator("pool", device_memory=DEVICE))
    worker = types.SimpleNamespace(address=address, data=object())
    plugin._prepare_allocator(worker)
    assert fake_rmm.current is None  # RMM waits for the warm-up's context, which it would make holding the GIL
    plugin._prepare_rmm(worker)  # RMM is imported: now
    assert chain(fake_rmm.current)[1] == base and isinstance(fake_rmm.cupy.allocator, SpillingAllocator)


def test_the_warm_up_sets_rmm_up_once_it_has_made_the_context(fake_rmm, monkeypatch):
    from dask_gpu.array import start
    from dask_gpu.plugins import GPUWorker

    seen = []

    def warm(simulated, on_context=None):
        seen.append(fake_rmm.current)  # nothing yet: the context comes first
        on_context()
        seen.append(type(fake_rmm.current).__name__)
        return 0.5

    monkeypatch.setattr(start, "warm", warm)
    plugin = GPUWorker({"index": 0}, 0, allocator=resolve_allocator("pool", device_memory=DEVICE))
    plugin.ready = threading.Event()
    plugin._warm(types.SimpleNamespace(address="tcp://10.0.0.1:4321", data=object(), name="gpu-0"), with_arrays=True)
    assert seen == [None, "FailureCallbackResourceAdaptor"] and plugin.warmed_seconds == 0.5 and plugin.ready.is_set()


def test_setup_rmm_routes_torch(fake_rmm):
    options = resolve_allocator("rmm", device_memory=DEVICE)
    setup_allocator(options, spill=lambda n: 0, describe=str)
    setup_allocator(options, spill=lambda n: 0, describe=str)  # a second setup does not swap again
    assert fake_rmm.routed == [fake_rmm.torch_allocator]


def test_setup_rmm_warns_when_torch_initialised_cuda(fake_rmm):
    def refuse(allocator):
        raise RuntimeError("Can't swap an already initialized allocator")

    fake_rmm.torch_memory.change_current_allocator = refuse
    with pytest.warns(UserWarning, match="PyTorch keeps its own CUDA allocator"):
        setup_allocator(resolve_allocator("rmm", device_memory=DEVICE), spill=lambda n: 0, describe=str)
    assert isinstance(fake_rmm.current, sys.modules["rmm.mr"].FailureCallbackResourceAdaptor)


# ---------------------------------------------------------------- on a real GPU (CuPy 14, rmm 26.x)


@pytest.fixture
def gpu():
    """The real cupy module; CuPy's allocator, pool limit, async-pool threshold and RMM's resource restored."""
    cupy = pytest.importorskip("cupy")
    rt = cupy.cuda.runtime
    pool = cupy.get_default_memory_pool()
    allocator = cupy.cuda.get_allocator()
    handle = rt.deviceGetDefaultMemPool(rt.getDevice())
    threshold = rt.memPoolGetAttribute(handle, rt.cudaMemPoolAttrReleaseThreshold)
    rmm = __import__("rmm") if find_spec("rmm") else None
    resource = rmm.mr.get_current_device_resource() if rmm else None
    try:
        yield cupy
    finally:
        gc.collect()
        cupy.cuda.Device().synchronize()
        cupy.cuda.set_allocator(allocator)
        pool.set_limit(size=0)
        pool.free_all_blocks()
        rt.memPoolSetAttribute(handle, rt.cudaMemPoolAttrReleaseThreshold, threshold)
        rt.memPoolTrimTo(handle, 0)
        if rmm:
            rmm.mr.set_current_device_resource(resource)


def device_memory(cupy) -> int:
    return int(cupy.cuda.runtime.memGetInfo()[1])


def holder(cupy, count, nbytes):
    """``count`` device arrays of ``nbytes`` each, and a spill() that drops them all."""
    held = [cupy.ones(nbytes, dtype=cupy.uint8) for _ in range(count)]

    def spill(n):
        released = sum(a.nbytes for a in held)
        held.clear()
        return released

    return held, spill


@pytest.mark.gpu
def test_gpu_pool(gpu):
    cupy = gpu
    setup_allocator(resolve_allocator("pool", device_memory=device_memory(cupy)), spill=lambda n: 0, describe=str)
    allocate = cupy.cuda.get_allocator()
    assert isinstance(allocate, SpillingAllocator)
    assert allocate.malloc == cupy.get_default_memory_pool().malloc
    assert int(cupy.arange(1000).sum()) == 999 * 1000 // 2


@pytest.mark.gpu
def test_gpu_async_threshold_is_not_a_cap(gpu):
    cupy = gpu
    rt = cupy.cuda.runtime
    options = resolve_allocator("async", rmm_release_threshold="1GiB", device_memory=device_memory(cupy))
    setup_allocator(options, spill=lambda n: 0, describe=str)
    handle = rt.deviceGetDefaultMemPool(rt.getDevice())
    assert rt.memPoolGetAttribute(handle, rt.cudaMemPoolAttrReleaseThreshold) == GiB
    x = cupy.ones(2 * GiB, dtype=cupy.uint8)  # past the threshold: it only says what to keep when trimming
    assert int(x[-10:].sum()) == 10
    assert rt.memPoolGetAttribute(handle, rt.cudaMemPoolAttrUsedMemCurrent) >= 2 * GiB


@pytest.mark.gpu
def test_gpu_managed(gpu):
    cupy = gpu
    setup_allocator(resolve_allocator("managed", device_memory=device_memory(cupy)), spill=lambda n: 0,
                    describe=str)
    x = cupy.ones(1000, dtype=cupy.float32)  # small: never ask for more managed memory than the card has
    assert float(x.sum()) == 1000.0
    assert cupy.cuda.runtime.pointerGetAttributes(x.data.ptr).type == 3  # cudaMemoryTypeManaged


@pytest.mark.gpu
def test_gpu_spill_on_oom(gpu):
    cupy = gpu
    box = {}
    setup_allocator(resolve_allocator("pool", device_memory=device_memory(cupy)),
                    spill=lambda nbytes: box["spill"](nbytes), describe=lambda: "3 arrays")
    held, box["spill"] = holder(cupy, 3, GiB // 2)  # from the pool just set up (cuDF may have left RMM's in place)
    cupy.get_default_memory_pool().free_all_blocks()  # blocks cached by earlier tests would serve the allocation
    cupy.get_default_memory_pool().set_limit(size=2 * GiB)  # a small "device", so the test stays modest
    before = allocator_metrics()
    x = cupy.ones(GiB, dtype=cupy.uint8)  # 1.5 GiB held + 1 GiB > 2 GiB: fits only after spilling
    assert int(x[:10].sum()) == 10 and held == []
    assert delta(before)["oom_retries"] >= 2 and delta(before)["oom_spilled_bytes"] == 3 * (GiB // 2)


@pytest.mark.gpu
def test_gpu_oom_with_nothing_to_spill(gpu):
    cupy = gpu
    setup_allocator(resolve_allocator("pool", device_memory=device_memory(cupy)), spill=lambda n: 0,
                    describe=lambda: "nothing-spillable-marker")
    before = allocator_metrics()
    with pytest.raises(DeviceMemoryError) as info:
        cupy.empty(2**40, dtype=cupy.uint8)  # 1 TiB: cudaMalloc refuses at once, nothing is touched
    assert not isinstance(info.value, cupy.cuda.memory.OutOfMemoryError)
    assert "nothing-spillable-marker" in str(info.value) and str(2**40) in str(info.value)
    assert delta(before)["oom_failures"] == 1


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:PyTorch keeps its own CUDA allocator:UserWarning")
def test_gpu_rmm_pool(gpu):
    cupy, rmm = gpu, pytest.importorskip("rmm")
    options = resolve_allocator(rmm_pool_size="1GiB", device_memory=device_memory(cupy))
    setup_allocator(options, spill=lambda n: 0, describe=str)
    assert isinstance(rmm.mr.get_current_device_resource(), rmm.mr.FailureCallbackResourceAdaptor)
    assert isinstance(cupy.cuda.get_allocator(), SpillingAllocator)
    x = cupy.arange(1000)
    assert int(x.sum()) == 999 * 1000 // 2


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:PyTorch keeps its own CUDA allocator:UserWarning")
def test_gpu_rmm_failure_callback_spills(gpu):
    cupy = gpu
    pytest.importorskip("rmm")
    options = resolve_allocator(rmm_pool_size="1GiB", rmm_maximum_pool_size="1GiB",
                                device_memory=device_memory(cupy))
    spilled = []

    def spill(nbytes):
        released = sum(a.nbytes for a in held)
        spilled.append(released)
        held.clear()
        return released

    setup_allocator(options, spill=spill, describe=lambda: "rmm-marker")
    held = [cupy.ones(GiB // 4, dtype=cupy.uint8) for _ in range(3)]
    before = allocator_metrics()
    x = cupy.ones(GiB // 2, dtype=cupy.uint8)  # 768 MiB held + 512 MiB > the 1 GiB pool
    assert int(x[:10].sum()) == 10 and held == [] and spilled[0] == 3 * (GiB // 4)
    assert delta(before)["oom_retries"] >= 1

    with pytest.raises(DeviceMemoryError, match="rmm-marker"):
        cupy.empty(2 * GiB, dtype=cupy.uint8)  # larger than the pool may ever grow


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:PyTorch keeps its own CUDA allocator:UserWarning")
def test_gpu_rmm_async_tracking_logging(gpu, tmp_path):
    cupy, rmm = gpu, pytest.importorskip("rmm")
    options = resolve_allocator(rmm_async=True, rmm_release_threshold="1GiB", rmm_track_allocations=True,
                                rmm_log_directory=tmp_path, device_memory=device_memory(cupy))
    setup_allocator(options, spill=lambda n: 0, describe=str)
    x = cupy.ones(10**6, dtype=cupy.uint8)
    logging_mr = rmm.mr.get_current_device_resource().get_upstream()
    tracking_mr = logging_mr.get_upstream()
    assert isinstance(logging_mr, rmm.mr.LoggingResourceAdaptor)
    assert isinstance(tracking_mr, rmm.mr.TrackingResourceAdaptor)
    assert isinstance(tracking_mr.get_upstream(), rmm.mr.CudaAsyncMemoryResource)
    assert tracking_mr.get_allocated_bytes() >= x.nbytes
    logging_mr.flush()
    (log,) = os.listdir(tmp_path)  # RMM adds the device to the name: rmm-HOST-PID.dev0.csv
    assert str(os.getpid()) in log and os.path.getsize(tmp_path / log) > 0


@pytest.mark.gpu
@pytest.mark.filterwarnings("ignore:PyTorch keeps its own CUDA allocator:UserWarning")
def test_gpu_rmm_managed_pool(gpu):
    cupy, rmm = gpu, pytest.importorskip("rmm")
    options = resolve_allocator(rmm_managed_memory=True, rmm_pool_size="256MiB", device_memory=device_memory(cupy))
    setup_allocator(options, spill=lambda n: 0, describe=str)
    pool = rmm.mr.get_current_device_resource().get_upstream()
    assert isinstance(pool, rmm.mr.PoolMemoryResource)
    assert isinstance(pool.get_upstream(), rmm.mr.ManagedMemoryResource)
    x = cupy.ones(1000, dtype=cupy.float32)  # small: never more managed memory than the card has
    assert float(x.sum()) == 1000.0
    assert cupy.cuda.runtime.pointerGetAttributes(x.data.ptr).type == 3  # cudaMemoryTypeManaged


TORCH_THROUGH_RMM = """
import cupy, rmm, torch
from dask_gpu.memory.allocator import resolve_allocator, setup_allocator
options = resolve_allocator(rmm_track_allocations=True, device_memory=cupy.cuda.runtime.memGetInfo()[1])
setup_allocator(options, spill=lambda n: 0, describe=str)
tracking = rmm.mr.get_current_device_resource().get_upstream()
before = tracking.get_allocated_bytes()
t = torch.ones(10**6, dtype=torch.uint8, device="cuda")
print(tracking.get_allocated_bytes() - before)
"""


@pytest.mark.gpu
def test_gpu_rmm_routes_torch():
    """In a fresh process, as in a worker: PyTorch must not have touched CUDA before the setup."""
    pytest.importorskip("rmm")
    if find_spec("torch") is None:
        pytest.skip("torch is not installed")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-c", TORCH_THROUGH_RMM], env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert "PyTorch keeps its own CUDA allocator" not in out.stderr
    assert int(out.stdout.split()[-1]) >= 10**6
