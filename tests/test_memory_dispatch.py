"""dask_gpu.memory.dispatch: device objects, their buffers, and exact host copies.

Without a GPU a stand-in device type, registered through the public ``register_device_type``, exercises
the dispatch and the containers; the ``gpu`` tests check the CuPy, cupyx.sparse, PyTorch and cuDF paths.
"""

import pickle
import subprocess
import sys
import threading
from collections import namedtuple

import numpy as np
import pytest
import standin_device
from dask.sizeof import sizeof
from distributed.protocol import deserialize_bytes, serialize_bytelist
from standin_device import StandInArray

from dask_gpu.memory import dispatch
from dask_gpu.memory.dispatch import (
    HostCopy,
    device_buffers,
    device_nbytes,
    is_device,
    register_device_type,
    to_device,
    to_host,
)

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128"]


# --- the stand-in device type (tests/standin_device.py), and a subclass of it ----------------------


class SubStandInArray(StandInArray):
    pass


Pair = namedtuple("Pair", "left right")


def random_array(dtype, shape, seed=0) -> np.ndarray:
    """Random bytes of every bit pattern (NaNs, infinities, subnormals); bools as 0/1."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    n = int(np.prod(shape))
    if dtype.kind == "b":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    return rng.integers(0, 256, n * dtype.itemsize, dtype=np.uint8).view(dtype).reshape(shape)


def raw(a) -> np.ndarray:
    """The bytes of a's values in C order: compares NaNs exactly."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def same(a, b) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(raw(a), raw(b))


# --- dispatch, without a GPU ---------------------------------------------------------------------

def test_is_device():
    x = StandInArray(np.arange(4))
    assert is_device(x)
    assert not any(is_device(v) for v in (np.arange(4), 1, "x", None, b"", {}, [], (), to_host(x)))
    assert is_device([1, (2, {"a": x})])
    assert not is_device([1, (2, {"a": np.ones(2)})])


def test_subclass_found_through_the_mro():
    x = SubStandInArray(np.arange(6.0))
    assert is_device(x) and device_nbytes(x) == 48
    back = to_device(to_host(x))
    assert isinstance(back, StandInArray) and same(back.values, x.values)


def test_base_registered_after_a_subclass_was_looked_up():
    """A miss is not cached: registering a base class later still reaches its subclasses."""

    class Base:
        pass

    class Child(Base):
        pass

    assert not is_device(Child())
    register_device_type(Base, buffers=lambda o: [(id(o), 1)], to_host=lambda o: HostCopy(None, type))
    assert is_device(Child()) and device_nbytes(Child()) == 1


def test_views_of_one_allocation_count_once():
    x = StandInArray(np.arange(100.0))
    views = [x, x.view(slice(None, None, 2)), x.view(slice(10, 20)), x.view(5)]
    y = StandInArray(np.zeros(3, dtype=np.int32))
    assert device_buffers(views) == [(id(x.allocation), 800)]
    assert device_nbytes(views + [y, {"again": (x.view(slice(1, None)), y)}]) == 800 + 12
    assert device_buffers(np.ones(10)) == [] and device_nbytes("abc") == 0


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(17, 5), (), (0, 3)])
def test_round_trip_exact(dtype, shape):
    a = random_array(dtype, shape)
    hc = to_host(StandInArray(a))
    assert isinstance(hc, HostCopy) and hc.nbytes == a.nbytes
    back = to_device(hc)
    assert isinstance(back, StandInArray) and same(back.values, a)


def test_containers():
    x, y = StandInArray(np.arange(3)), StandInArray(np.ones((2, 2)))
    host_leaf = np.zeros(4)
    obj = {"a": [x, 1, "s"], ("k", 1): (y, host_leaf), "c": {"d": (x,)}, "p": Pair(x, 2.5)}
    h = to_host(obj)
    assert type(h) is dict and list(h) == list(obj)
    assert type(h["a"]) is list and isinstance(h["a"][0], HostCopy) and h["a"][1:] == [1, "s"]
    assert type(h[("k", 1)]) is tuple and h[("k", 1)][1] is host_leaf
    assert type(h["c"]["d"]) is tuple and isinstance(h["c"]["d"][0], HostCopy)
    assert type(h["p"]) is Pair and isinstance(h["p"].left, HostCopy) and h["p"].right == 2.5
    assert not is_device(h)
    assert sizeof(h) >= x.values.nbytes * 3 + y.values.nbytes

    back = to_device(h)
    assert type(back["a"]) is list and type(back[("k", 1)]) is tuple and type(back["p"]) is Pair
    assert same(back["a"][0].values, x.values) and same(back[("k", 1)][0].values, y.values)
    assert same(back["c"]["d"][0].values, x.values) and back[("k", 1)][1] is host_leaf


def test_host_objects_untouched():
    a = np.arange(5)
    for obj in (a, 3, "s", None, [a, (1, 2)], {"a": [a]}, Pair(1, a)):
        assert to_host(obj) is obj and to_device(obj) is obj
    assert to_host([]) == [] and to_device({}) == {}


@pytest.mark.parametrize("protocol", [4, 5])
def test_host_copy_pickles(protocol):
    a = random_array("float64", (50, 3), seed=1)
    hc = to_host(StandInArray(a))
    again = pickle.loads(pickle.dumps(hc, protocol=protocol))
    assert isinstance(again, HostCopy) and again.nbytes == hc.nbytes
    assert same(to_device(again).values, a)


def test_host_copy_through_distributed_spill_serialisation():
    """The host tier writes values to disk with distributed's serialize_bytelist/deserialize_bytes."""
    a = random_array("complex64", (20, 7), seed=2)
    value = {"x": to_host(StandInArray(a)), "n": 3}
    frames = serialize_bytelist(value, on_error="raise")
    again = deserialize_bytes(b"".join(bytes(f) for f in frames))
    assert again["n"] == 3 and same(to_device(again["x"]).values, a)


def test_sizeof_host_copy():
    a = np.ones((100, 10), dtype=np.float32)
    hc = to_host(StandInArray(a))
    assert sizeof(hc) == hc.nbytes == 4000
    assert HostCopy(a, standin_device.rebuild).nbytes == sizeof(a) == 4000
    assert HostCopy(a, standin_device.rebuild, nbytes=7).nbytes == 7


def test_concurrent_use():
    arrays = [random_array("float32", (64, 64), seed=i) for i in range(16)]
    results = [None] * len(arrays)

    def work(i):
        results[i] = to_device(pickle.loads(pickle.dumps(to_host([StandInArray(arrays[i])]))))[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(same(r.values, a) for r, a in zip(results, arrays))


def test_import_loads_no_gpu_library():
    """Importing the module (past what dask_gpu and distributed import) neither imports nor looks for
    cupy, cupyx, cudf or torch, and neither does using it on host objects."""
    code = (
        "import sys, distributed, dask_gpu\n"
        "GPU = {'cupy', 'cupyx', 'cudf', 'torch'}\n"
        "def loaded(): return sorted(m for m in sys.modules if m.partition('.')[0] in GPU)\n"
        "before, seen = loaded(), []\n"
        "class Watch:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.partition('.')[0] in GPU: seen.append(name)\n"
        "sys.meta_path.insert(0, Watch())\n"
        "import dask_gpu.memory.dispatch as d\n"
        "d.is_device([1, {'a': 2.0}]); d.to_host([1]); d.device_nbytes((3,))\n"
        "print(seen, loaded() == before)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] True"


def test_cpu_torch_tensor_left_alone():
    torch = pytest.importorskip("torch")
    t = torch.arange(6.0).reshape(2, 3)
    assert not is_device(t) and not is_device([t]) and device_buffers(t) == []
    assert to_host(t) is t and to_device(t) is t


# --- the real thing, on a GPU --------------------------------------------------------------------

@pytest.fixture
def cupy():
    return pytest.importorskip("cupy")


def check_cupy_round_trip(cupy, x):
    expected = cupy.asnumpy(x)
    hc = to_host(x)
    assert isinstance(hc, HostCopy) and hc.nbytes == x.nbytes
    back = to_device(hc)
    assert isinstance(back, cupy.ndarray) and back.device.id == cupy.cuda.Device().id
    assert same(cupy.asnumpy(back), expected)
    return hc, back


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1000, 7), (), (0, 3), (3,)])
def test_cupy_round_trip_exact(cupy, dtype, shape):
    x = cupy.asarray(random_array(dtype, shape, seed=3))
    assert is_device(x)
    check_cupy_round_trip(cupy, x)


@pytest.mark.gpu
def test_cupy_views_non_contiguous_and_shared_buffers(cupy):
    x = cupy.asarray(random_array("float64", (64, 90), seed=4))
    views = {"strided": x[::2, 1::3], "transposed": x.T, "reversed": x[::-1], "column": x[:, 5], "scalar": x[3, 4]}
    for name, v in views.items():
        hc, back = check_cupy_round_trip(cupy, v)
        assert device_buffers(v) == device_buffers(x), name
    assert device_nbytes([x, *views.values()]) == x.data.mem.size >= x.nbytes
    # an F-contiguous array keeps its layout and costs no device copy
    assert to_host(x.T).payload.flags.f_contiguous and to_device(to_host(x.T)).flags.f_contiguous


@pytest.mark.gpu
def test_cupy_host_copy_is_pinned_and_pooled(cupy):
    x = cupy.arange(1 << 20, dtype=cupy.float32)
    hc = to_host(x)
    attrs = cupy.cuda.runtime.pointerGetAttributes(hc.payload.ctypes.data)
    assert attrs.type == getattr(cupy.cuda.runtime, "memoryTypeHost", 1)
    pool = dispatch.pinned_pool()
    free = pool.n_free_blocks()
    del hc
    assert pool.n_free_blocks() == free + 1  # back in the pool, reused by the next copy of that size
    again = to_host(x)
    assert pool.n_free_blocks() == free and again.nbytes == x.nbytes
    del again
    slightly_smaller = to_host(x[:-3])  # rounded up to the same block size: no new cudaHostAlloc
    assert pool.n_free_blocks() == free and slightly_smaller.nbytes == x.nbytes - 12


@pytest.mark.gpu
def test_cupy_through_pickle_and_disk_serialisation(cupy):
    x = cupy.asarray(random_array("float16", (300, 11), seed=5))[:, ::2]
    hc = to_host(x)
    for again in (pickle.loads(pickle.dumps(hc, protocol=5)),
                  deserialize_bytes(b"".join(bytes(f) for f in serialize_bytelist(hc, on_error="raise")))):
        assert again.nbytes == hc.nbytes
        assert same(cupy.asnumpy(to_device(again)), cupy.asnumpy(x))


@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["C", "F"])
def test_cupy_large_copy_back_from_pageable_memory(cupy, layout):
    """Back from disk a copy is in pageable memory; F order survives the trip."""
    x = cupy.asarray(random_array("float64", (6298, 1000), seed=6))
    x = x if layout == "C" else cupy.asfortranarray(x)  # (may canonicalise NaNs: compare with x itself)
    again = pickle.loads(pickle.dumps(to_host(x), protocol=5))
    attrs = cupy.cuda.runtime.pointerGetAttributes(again.payload.ctypes.data)
    assert attrs.type != getattr(cupy.cuda.runtime, "memoryTypeHost", 1)  # pageable
    back = to_device(again)
    assert back.flags.f_contiguous == (layout == "F") and same(cupy.asnumpy(back), cupy.asnumpy(x))


@pytest.mark.gpu
def test_cupy_copies_wait_for_work_on_the_current_stream(cupy):
    n = 1 << 26
    expected = np.arange(n, dtype=np.int32) * 3
    with cupy.cuda.Stream(non_blocking=True):
        x = cupy.arange(n, dtype=cupy.int32) * 3  # queued, likely still running
        hc = to_host(x)
        assert same(hc.payload, expected)
        y = to_device(hc) + 1  # the kernel reads what the copy wrote
        assert same(cupy.asnumpy(y), expected + 1)


@pytest.mark.gpu
def test_cupy_from_several_threads(cupy):
    arrays = [random_array("int32", (512, 257), seed=i) for i in range(8)]
    results = [None] * len(arrays)

    def work(i):
        x = cupy.asarray(arrays[i])
        results[i] = cupy.asnumpy(to_device(to_host(x.T)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(arrays))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(same(r, a.T) for r, a in zip(results, arrays))


@pytest.mark.gpu
@pytest.mark.parametrize("fmt", ["csr", "csc", "coo"])
@pytest.mark.parametrize("dtype", ["float64", "complex64", "bool"])
def test_sparse_round_trip(cupy, fmt, dtype):
    scipy_sparse = pytest.importorskip("scipy.sparse")
    cpx_sparse = pytest.importorskip("cupyx.scipy.sparse")
    m = getattr(cpx_sparse, f"{fmt}_matrix")(
        scipy_sparse.random(200, 300, density=0.05, format=fmt, dtype="float64", random_state=0).astype(dtype)
    )
    parts = ("data", "row", "col") if fmt == "coo" else ("data", "indices", "indptr")
    assert is_device(m) and len(device_buffers(m)) == 3
    assert device_nbytes(m) >= sum(getattr(m, p).nbytes for p in parts)
    back = to_device(to_host(m))
    assert type(back) is type(m) and back.shape == m.shape and back.dtype == m.dtype
    for p in parts:
        assert same(cupy.asnumpy(getattr(back, p)), cupy.asnumpy(getattr(m, p))), p
    if dtype == "float64":
        assert same(cupy.asnumpy(back.toarray()), cupy.asnumpy(m.toarray()))


@pytest.mark.gpu
def test_torch_cuda_round_trip():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA device")

    def raw_t(t):
        t = t.detach().cpu().contiguous().reshape(-1)
        return (torch.view_as_real(t).reshape(-1) if t.is_complex() else t).view(torch.uint8)

    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int8,
                  torch.uint8, torch.bool, torch.complex64):
        base = torch.randint(0, 256, (64, 48), dtype=torch.uint8, device="cuda")
        t = (base % 2).bool() if dtype is torch.bool else base.view(dtype) if dtype.itemsize == 1 else \
            torch.randn(64, 48, device="cuda").to(dtype)
        for v in (t, t[::2, 1::3], t.T, t[3, 4]):
            assert is_device(v) and device_buffers(v) == device_buffers(t)
            back = to_device(to_host(v))
            assert back.is_cuda and back.dtype == v.dtype and back.shape == v.shape
            assert torch.equal(raw_t(back), raw_t(v)), dtype
    w = torch.randn(5, device="cuda", requires_grad=True)
    again = to_device(pickle.loads(pickle.dumps(to_host(w))))
    assert again.requires_grad and torch.equal(again.detach(), w.detach())


@pytest.mark.gpu
def test_cudf_round_trip():
    cudf = pytest.importorskip("cudf")
    df = cudf.DataFrame({"a": [1, None, 3], "b": ["x", "yy", None], "c": [0.5, float("nan"), -0.0]})
    for obj in (df, df["a"], df.index, cudf.Index([3, 1, 2])):
        assert is_device(obj) and device_nbytes(obj) >= 0
        back = to_device(pickle.loads(pickle.dumps(to_host(obj))))
        assert type(back) is type(obj) and back.to_pandas().equals(obj.to_pandas())
