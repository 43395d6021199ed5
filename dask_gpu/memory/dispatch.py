"""Device objects: which values hold GPU memory, how much, and exact copies to host memory and back.

One :class:`dask.utils.Dispatch` maps a type (through its MRO) to a small record of callables.
CuPy, cupyx sparse matrices, cuDF and PyTorch are registered lazily, the first time an object of
theirs is looked up, so importing this module imports none of them. Lists, tuples and dicts are
walked by the public functions, not registered, so that any container of device leaves works.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import numpy as np
from dask.sizeof import sizeof
from dask.utils import Dispatch

from dask_gpu import internals

__all__ = ["HostCopy", "device_buffers", "device_nbytes", "is_device", "pinned_pool", "register_device_type",
           "spills_itself", "to_device", "to_host"]

Buffers = list[tuple[Hashable, int]]


class HostCopy:
    """A device object moved to host memory: ``to_device()`` rebuilds it, bit for bit.

    ``payload`` is host data (NumPy arrays, CPU tensors, headers) and ``rebuild`` a module-level
    function of it, so that a HostCopy pickles as data plus a reference: the host tier can write it
    to disk, and what comes back (pageable memory where it was pinned) still rebuilds.
    """

    __slots__ = ("payload", "rebuild", "nbytes")

    def __init__(self, payload: Any, rebuild: Callable[[Any], Any], nbytes: int | None = None):
        self.payload = payload
        self.rebuild = rebuild
        self.nbytes = int(sizeof(payload) if nbytes is None else nbytes)  # host bytes held

    def to_device(self) -> Any:
        return self.rebuild(self.payload)

    def __reduce__(self):
        return HostCopy, (self.payload, self.rebuild, self.nbytes)

    def __repr__(self) -> str:
        return f"<HostCopy {type(self.payload).__name__}, {self.nbytes} bytes, rebuild={self.rebuild.__name__}>"


sizeof.register(HostCopy)(lambda x: x.nbytes)


class _DeviceType(NamedTuple):
    buffers: Callable[[Any], Buffers]
    to_host: Callable[[Any], HostCopy]
    applies: Callable[[Any], bool] | None = None  # per object: a CPU torch.Tensor is no device object
    spills_itself: Callable[[], bool] | None = None  # its library moves it (cuDF with its spilling on)


# No default for ``object``: Dispatch caches what it finds for a subclass, and a cached "not a device
# type" would hide a base class registered later. A miss costs one MRO walk.
_types = Dispatch("device_type")


def register_device_type(cls: type | tuple[type, ...], *, buffers: Callable[[Any], Buffers],
                         to_host: Callable[[Any], HostCopy]) -> None:
    """Declare ``cls`` (and its subclasses) a device type.

    ``buffers(obj)`` lists the device allocations obj keeps alive as ``(allocation id, size in bytes)``,
    the same id for every view of one allocation; ``to_host(obj)`` returns a :class:`HostCopy`.
    """
    _types.register(cls, _DeviceType(buffers, to_host))


def _device_type(obj) -> _DeviceType | None:
    try:
        kind = _types.dispatch(type(obj))
    except TypeError:  # not registered
        return None
    return kind if kind.applies is None or kind.applies(obj) else None


def _leaves(obj):
    if type(obj) is dict:
        for v in obj.values():
            yield from _leaves(v)
    elif type(obj) is list or isinstance(obj, tuple):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def _map(fn: Callable[[Any], Any], obj):
    """``fn`` on every leaf of nested lists, tuples (named ones too) and dicts; a container in which
    nothing changed is returned itself, so that host-only values keep their identity."""
    if type(obj) is dict:
        out = {k: _map(fn, v) for k, v in obj.items()}
        return obj if all(out[k] is v for k, v in obj.items()) else out
    if type(obj) is list or isinstance(obj, tuple):
        items = [_map(fn, v) for v in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        if type(obj) is list:
            return items
        return type(obj)._make(items) if hasattr(obj, "_fields") else type(obj)(items)
    return fn(obj)


def is_device(obj) -> bool:
    """Whether obj, or any leaf of a list/tuple/dict, is a registered device object."""
    return any(_device_type(leaf) is not None for leaf in _leaves(obj))


def spills_itself(obj) -> bool:
    """Whether a device leaf of obj is moved by its own library, which the tiers must then leave alone."""
    return any((kind := _device_type(leaf)) is not None and kind.spills_itself is not None and kind.spills_itself()
               for leaf in _leaves(obj))


def device_buffers(obj) -> Buffers:
    """The distinct device allocations that obj (recursively) keeps alive; [] for host objects."""
    found: dict[Hashable, int] = {}
    for leaf in _leaves(obj):
        kind = _device_type(leaf)
        if kind is not None:
            for key, size in kind.buffers(leaf):
                found.setdefault(key, int(size))
    return list(found.items())


def device_nbytes(obj) -> int:
    """Device bytes obj keeps alive, each allocation counted once however many views share it."""
    return sum(size for _, size in device_buffers(obj))


def to_host(obj):
    """Device leaves -> :class:`HostCopy`; containers rebuilt around them; host leaves unchanged."""
    return _map(lambda x: x if (kind := _device_type(x)) is None else kind.to_host(x), obj)


def to_device(obj):
    """The inverse of :func:`to_host`: every HostCopy leaf rebuilt on the current device."""
    return _map(lambda x: x.to_device() if isinstance(x, HostCopy) else x, obj)


# --- CuPy: pinned host memory, one DMA on a per-thread stream -------------------------------------

_pool = None
_pool_lock = threading.Lock()
_local = threading.local()


def pinned_pool():
    """The ``cupy.cuda.PinnedMemoryPool`` that host copies draw from. Blocks freed by dropped copies are
    reused by copies of the same size; ``pinned_pool().free_all_blocks()`` gives the cached ones back."""
    global _pool
    if _pool is None:
        with _pool_lock:
            if _pool is None:
                import cupy

                _pool = cupy.cuda.PinnedMemoryPool()
    return _pool


def release_pinned() -> None:
    """Give the pinned blocks that no host copy uses back to the OS (none if no copy was ever made)."""
    if _pool is not None:
        _pool.free_all_blocks()


def _pinned_block(nbytes: int):
    """A pooled pinned block of at least nbytes. The pool reuses a freed block only for a request of the
    same size, so sizes are rounded up to one of 16 per power of two (at most 1/16 more): arrays that
    differ by a few rows share blocks instead of paying a cudaHostAlloc (~0.4 s per GB) each."""
    unit = max(512, 1 << max(0, nbytes.bit_length() - 5))
    return pinned_pool().malloc(-(-nbytes // unit) * unit)


def _copy_stream(cupy):
    """This thread's non-blocking copy stream on the current device, made to wait for the work already
    queued on the current stream (which made the source, or last used the destination's pooled memory).
    Copies from several threads overlap, and none waits for unrelated kernels on the legacy default stream."""
    streams = _local.__dict__.setdefault("streams", {})
    device = cupy.cuda.runtime.getDevice()
    stream = streams.get(device)
    if stream is None:
        stream = streams[device] = cupy.cuda.Stream(non_blocking=True)
    stream.wait_event(cupy.cuda.get_current_stream().record())
    return stream


def to_pinned(x) -> np.ndarray:
    """A CuPy array's values in a NumPy array over pinned memory (one DMA), in x's layout where x is
    C- or F-contiguous."""
    import cupy

    rt = cupy.cuda.runtime
    with x.device:
        order = "F" if x.flags.f_contiguous and not x.flags.c_contiguous else "C"
        if not (x.flags.c_contiguous or x.flags.f_contiguous):
            x = cupy.ascontiguousarray(x)  # one copy on the device beats a strided copy over PCIe
        if x.nbytes == 0:
            return np.empty(x.shape, x.dtype, order=order)
        host = np.ndarray(x.shape, x.dtype, buffer=_pinned_block(x.nbytes), order=order)
        stream = _copy_stream(cupy)
        rt.memcpyAsync(host.ctypes.data, x.data.ptr, x.nbytes, rt.memcpyDeviceToHost, stream.ptr)
        stream.synchronize()
    return host


def from_pinned(host: np.ndarray):
    """A NumPy array's values in a new CuPy array on the current device (one DMA from pinned memory)."""
    import cupy

    rt = cupy.cuda.runtime
    if not (host.flags.c_contiguous or host.flags.f_contiguous):
        host = host.copy()
    order = "F" if host.flags.f_contiguous and not host.flags.c_contiguous else "C"
    out = cupy.empty(host.shape, host.dtype, order=order)
    if out.nbytes:  # from pinned memory one DMA; from pageable memory (back from disk) the driver stages it
        stream = _copy_stream(cupy)
        rt.memcpyAsync(out.data.ptr, host.ctypes.data, out.nbytes, rt.memcpyHostToDevice, stream.ptr)
        stream.synchronize()
    return out


def _cupy_buffers(x) -> Buffers:
    mem = x.data.mem  # the base allocation: every view and slice of it has the same one
    return [(mem.ptr, mem.size)]


@_types.register_lazy("cupy")
def _register_cupy():
    import cupy

    def to_host(x) -> HostCopy:
        host = to_pinned(x)
        return HostCopy(host, from_pinned, host.nbytes)

    register_device_type(cupy.ndarray, buffers=_cupy_buffers, to_host=to_host)


# --- cupyx.scipy.sparse: the component arrays, each through the CuPy path ----------------------------

def _sparse_parts(m) -> dict:
    names = ("data", "row", "col") if m.format == "coo" else ("data", "indices", "indptr")
    return {name: getattr(m, name) for name in names}


def _sparse_to_host(m) -> HostCopy:
    parts = {name: to_pinned(a) for name, a in _sparse_parts(m).items()}
    flags = {"has_canonical_format": m.has_canonical_format} if m.format == "coo" else {}
    return HostCopy((type(m), m.shape, parts, flags), _sparse_from_host, sum(a.nbytes for a in parts.values()))


def _sparse_from_host(payload):
    cls, shape, parts, flags = payload
    p = {name: from_pinned(a) for name, a in parts.items()}
    if "row" in p:
        m = cls((p["data"], (p["row"], p["col"])), shape=shape)
    else:
        m = cls((p["data"], p["indices"], p["indptr"]), shape=shape)
    for name, a in p.items():  # the constructors may narrow index dtypes: put the originals back
        setattr(m, name, a)
    for name, value in flags.items():
        setattr(m, name, value)
    return m


@_types.register_lazy("cupyx")
def _register_cupyx():
    import cupyx.scipy.sparse as sparse

    for name in ("csr_matrix", "csc_matrix", "coo_matrix"):
        register_device_type(getattr(sparse, name), to_host=_sparse_to_host,
                             buffers=lambda m: [b for a in _sparse_parts(m).values() for b in _cupy_buffers(a)])


# --- PyTorch: CUDA tensors only, through PyTorch's own (cached) pinned memory ------------------------

def _torch_to_host(t) -> HostCopy:
    import torch

    src = t.detach()
    host = torch.empty(src.shape, dtype=src.dtype, pin_memory=True)
    host.copy_(src)  # blocking: waits for the producing stream, then one DMA (after a device gather if strided)
    return HostCopy((host, t.device.index, t.requires_grad), _torch_from_host, host.numel() * host.element_size())


def _torch_from_host(payload):
    import torch

    host, index, requires_grad = payload
    return host.to(torch.device("cuda", index)).requires_grad_(requires_grad)


@_types.register_lazy("torch")
def _register_torch():
    import torch

    def on_device(t) -> bool:  # CPU, meta and sparse tensors are left alone
        return t.is_cuda and t.layout == torch.strided

    def buffers(t) -> Buffers:  # the storage: views share it
        storage = t.untyped_storage()
        return [(storage.data_ptr(), storage.nbytes())]

    _types.register(torch.Tensor, _DeviceType(buffers, _torch_to_host, on_device))


# --- cuDF: its own serialisation, each device frame through the pinned CuPy path ------------------

def _cudf_buffers(obj) -> Buffers:
    """The allocations under obj's columns (index included), each counted once: slices and frames that
    share columns share allocations. A RangeIndex holds none."""
    found: dict[Hashable, int] = {}
    for column in _cudf_columns(obj):
        _column_buffers(internals.as_pylibcudf(column), found)
    return list(found.items())


def _cudf_columns(obj) -> list:
    import cudf

    if isinstance(obj, cudf.RangeIndex):
        return []  # its columns would make one
    index = getattr(obj, "index", None)
    own = [] if index is None or isinstance(index, cudf.RangeIndex) else list(internals.cudf_columns(index))
    return [*own, *internals.cudf_columns(obj)]


def _column_buffers(column, found: dict) -> None:
    """A pylibcudf column's data and mask allocations, and its children's."""
    for buffer in (column.data(), column.null_mask()):
        if buffer is not None:
            owner, size = internals.allocation(buffer)
            found.setdefault(("cudf", id(owner)), size)
    for child in column.children():
        _column_buffers(child, found)


def _cudf_to_host(obj) -> HostCopy:
    header, frames = obj.device_serialize()
    host = [to_pinned(as_bytes(f)) if cuda else np.array(f) for cuda, f in zip(header["is-cuda"], frames)]
    return HostCopy((type(obj), header, host), _cudf_from_host, sum(f.nbytes for f in host))


def _cudf_from_host(payload):
    cls, header, host = payload
    frames = [from_pinned(f) if cuda else memoryview(f) for cuda, f in zip(header["is-cuda"], host)]
    return cls.device_deserialize(header, frames)


def as_bytes(buffer):
    """Bytes of device memory as a CuPy uint8 array (no copy)."""
    import cupy

    return cupy.asarray(buffer).view(cupy.uint8).reshape(-1)


def cudf_spills_itself() -> bool:
    """Whether cuDF's own spilling is on in this process: its objects then move themselves."""
    if "cudf" not in sys.modules:
        return False
    return internals.cudf_spill_manager() is not None


@_types.register_lazy("cudf")
def _register_cudf():
    import cudf

    for name in ("DataFrame", "Series", "Index", "RangeIndex", "MultiIndex"):
        if hasattr(cudf, name):
            _types.register(getattr(cudf, name), _DeviceType(_cudf_buffers, _cudf_to_host, None, cudf_spills_itself))
