"""Device allocators: validate the choice in the parent, set it up in the worker, spill on OOM.

:func:`resolve_allocator` runs where the cluster is configured and never touches CUDA;
:func:`setup_allocator` runs once in each worker process, before its first task, and is
the only place that imports cupy, rmm or torch. When an allocation fails, the worker's
store is asked to move device data to host (``spill``) and the allocation is retried;
only when nothing is left to spill does the task see :class:`DeviceMemoryError`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.util import find_spec

from dask.utils import format_bytes

from dask_gpu.parse import choice, flag, in_bytes, names_among, own_device_token, size_or_fraction

logger = logging.getLogger(__name__)

ALLOCATORS = ("pool", "async", "managed", "rmm")
RMM_LIBRARIES = ("cupy", "torch")  # libraries that can allocate through RMM (rmm_allocator_external_lib_list)
_ALIGNMENT = 256  # RMM's pool and async resources take sizes in multiples of 256 bytes
_CUDA_ERROR_MEMORY_ALLOCATION = 2  # cudaErrorMemoryAllocation
_torch_routed = False  # PyTorch's allocator can be swapped once per process
IPC_POOL_SHARE = 16  # the first pool of a worker that talks UCX: this share of the device


class DeviceMemoryError(MemoryError):
    """A device allocation failed and nothing more could be spilled to host memory."""


@dataclass(frozen=True)
class AllocatorOptions:
    allocator: str = "pool"  # one of ALLOCATORS
    device_memory: int = 0  # bytes on the device the fractions were taken of
    pool_size: int | None = None  # RMM: initial pool size (async: initial size of the CUDA pool)
    maximum_pool_size: int | None = None  # RMM: the pool never grows past this
    managed_memory: bool = False  # RMM: allocate CUDA managed memory
    use_async: bool = False  # RMM: cudaMallocAsync (CudaAsyncMemoryResource)
    release_threshold: int | None = None  # async (CuPy or RMM): bytes the CUDA pool keeps when trimmed
    log_directory: str | None = None  # RMM: write a per-process allocation log here
    track_allocations: bool = False  # RMM: TrackingResourceAdaptor
    external_libs: tuple[str, ...] | None = None  # RMM: the libraries that allocate through it; None: all installed

    @property
    def lazy(self) -> bool:
        """Only CuPy is configured, so setup may wait until the worker first imports CuPy."""
        return self.allocator != "rmm"

    def describe(self) -> dict:
        """The settings in force, for ``dask gpu config`` (JSON)."""
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False}


def resolve_allocator(allocator=None, rmm_pool_size=None, rmm_maximum_pool_size=None, rmm_managed_memory=None,
                      rmm_async=None, rmm_release_threshold=None, rmm_log_directory=None,
                      rmm_track_allocations=None, rmm_allocator_external_lib_list=None, *,
                      device_memory: int, installed: bool = True) -> AllocatorOptions:
    """Check the allocator keywords (dask-cuda's ``rmm_*`` names) for a device of ``device_memory`` bytes.

    Any ``rmm_*`` keyword implies ``allocator="rmm"``; ``rmm_release_threshold`` also goes with
    ``allocator="async"``. Sizes are bytes, "16GB", or a fraction 0-1 of the device.
    ``rmm_allocator_external_lib_list`` ("cupy,torch" or a list) names the libraries that allocate
    through RMM; by default every one installed does. ``installed=False`` leaves out the check that RMM is
    installed in this process (a client that sends the options to workers that have it).
    """
    if isinstance(device_memory, bool) or not isinstance(device_memory, int) or device_memory <= 0:
        raise ValueError(f"device_memory must be the device's size in bytes, not {device_memory!r}")
    name = choice(allocator, ALLOCATORS, "allocator")
    managed = _flag(rmm_managed_memory, "rmm_managed_memory")
    use_async = _flag(rmm_async, "rmm_async")
    track = _flag(rmm_track_allocations, "rmm_track_allocations")
    rmm_keywords = dict(rmm_pool_size=rmm_pool_size, rmm_maximum_pool_size=rmm_maximum_pool_size,
                        rmm_managed_memory=rmm_managed_memory, rmm_async=rmm_async,
                        rmm_log_directory=rmm_log_directory, rmm_track_allocations=rmm_track_allocations,
                        rmm_allocator_external_lib_list=rmm_allocator_external_lib_list)
    libraries = names_among(rmm_allocator_external_lib_list, RMM_LIBRARIES, "rmm_allocator_external_lib_list",
                            "libraries")
    given = {k: v for k, v in rmm_keywords.items() if v is not None and v is not False}  # the CLI sends False
    if libraries == ():  # an empty list routes no library: it asks for nothing
        del given["rmm_allocator_external_lib_list"]
    if (use_async or name == "async") and (managed or name == "managed"):
        raise ValueError(f"allocator={allocator!r}, rmm_async={rmm_async!r}, rmm_managed_memory="
                         f"{rmm_managed_memory!r}: cudaMallocAsync cannot allocate managed memory; choose one")
    if name not in (None, "rmm") and given:
        keywords = ", ".join(f"{k}={v!r}" for k, v in given.items())
        raise ValueError(f"{keywords} configure RMM, but allocator={allocator!r}: drop them or use allocator='rmm'")
    if name is None:
        name = "rmm" if given or rmm_release_threshold is not None else "pool"
    if rmm_release_threshold is not None and not (name == "async" or use_async):
        raise ValueError(f"rmm_release_threshold={rmm_release_threshold!r} only applies to cudaMallocAsync: "
                         "add rmm_async=True (RMM) or use allocator='async' (CuPy)")
    pool, maximum = _pool_sizes(rmm_pool_size, rmm_maximum_pool_size, device_memory, managed, use_async)
    threshold = _size(rmm_release_threshold, "rmm_release_threshold", device_memory)
    log_directory = _log_directory(rmm_log_directory)
    if installed and name == "rmm" and find_spec("rmm") is None:  # the values first: a bad one is wrong with RMM too
        what = ", ".join(f"{k}={v!r}" for k, v in given.items()) or f"allocator={allocator!r}"
        raise ValueError(f"{what} needs RMM, but the rmm package is not installed: pip install rmm-cu12 (or "
                         "rmm-cu13), or use allocator='pool', 'async' or 'managed' (CuPy's own)")
    return AllocatorOptions(
        allocator=name, device_memory=device_memory, pool_size=pool, maximum_pool_size=maximum,
        managed_memory=managed, use_async=use_async, release_threshold=threshold,
        log_directory=log_directory, track_allocations=track, external_libs=libraries,
    )


def _pool_sizes(initial, maximum, device_memory: int, managed: bool, use_async: bool) -> tuple:
    """RMM's initial and maximum pool sizes in bytes (None where not given), checked against each other."""
    # Managed memory may oversubscribe the device: only device memory is bounded by the device's size.
    pool = _size(initial, "rmm_pool_size", device_memory, bounded=not managed)
    most = _size(maximum, "rmm_maximum_pool_size", device_memory, bounded=not managed)
    if most is not None:
        if most == 0:
            raise ValueError(f"rmm_maximum_pool_size={maximum!r} must be at least 256 bytes")
        if pool is None and not use_async:
            raise ValueError(f"rmm_maximum_pool_size={maximum!r} needs rmm_pool_size (its initial size)")
        if pool is not None and most < pool:
            raise ValueError(f"rmm_maximum_pool_size={maximum!r} ({most} bytes) is smaller than "
                             f"rmm_pool_size={initial!r} ({pool} bytes)")
    return pool, most


def _flag(value, what: str) -> bool:
    return False if value is None else flag(value, what)


def _size(value, what: str, device_memory: int, bounded: bool = True) -> int | None:
    if value is None:
        return None
    size = in_bytes(size_or_fraction(value, what), device_memory)
    if bounded and size > device_memory:
        raise ValueError(f"{what}={value!r} is {size} bytes, larger than the device ({device_memory} bytes): "
                         "give a smaller size or a fraction such as 0.9")
    return size - size % _ALIGNMENT


def _log_directory(value) -> str | None:
    if value is None:
        return None
    text = os.fspath(value) if isinstance(value, (str, os.PathLike)) else ""
    path = os.path.abspath(text) if str(text).strip() else None  # "" is not "here"
    if path is None or not os.path.isdir(path):
        raise ValueError(f"rmm_log_directory={value!r} is not an existing directory")
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"rmm_log_directory={value!r} is not writable")
    return path


# Spill-on-OOM counters, updated from every task thread of the worker (and RMM's callback).
_metrics_lock = threading.Lock()
_metrics = {"oom_retries": 0, "oom_spilled_bytes": 0, "oom_failures": 0}


def _count(retries=0, spilled=0, failures=0):
    with _metrics_lock:
        _metrics["oom_retries"] += retries
        _metrics["oom_spilled_bytes"] += spilled
        _metrics["oom_failures"] += failures


def allocator_metrics() -> dict[str, int]:
    """Retries after an allocation failure, device bytes spilled for them, and DeviceMemoryErrors raised."""
    with _metrics_lock:
        return dict(_metrics)


def allocate_with_spill(malloc, nbytes: int, *, free_cached=None, spill=None, describe, oom_errors):
    """``malloc(nbytes)``; on an error in ``oom_errors``, free the allocator's cache and retry, then
    ``spill(nbytes)`` and retry while it releases bytes, then raise :class:`DeviceMemoryError`."""
    result = _try(malloc, nbytes, oom_errors)
    if not isinstance(result, BaseException):
        return result
    error = result
    if free_cached is not None:  # cached but unused blocks: nothing has to move
        free_cached()
        _count(retries=1)
        result = _try(malloc, nbytes, oom_errors)
        if not isinstance(result, BaseException):
            return result
    while spill is not None and (released := spill(nbytes)) > 0:
        _count(retries=1, spilled=released)
        result = _try(malloc, nbytes, oom_errors)
        if not isinstance(result, BaseException):
            return result
    _count(failures=1)
    raise DeviceMemoryError(_oom_message(nbytes, describe)) from error


def _try(malloc, nbytes, oom_errors):
    """The allocation, or the out-of-memory error it raised (returned, so no traceback is held while spilling)."""
    try:
        return malloc(nbytes)
    except oom_errors as e:
        if isinstance(e, DeviceMemoryError):
            raise
        return e


def _oom_message(nbytes: int, describe) -> str:
    try:
        context = describe()
    except Exception as e:  # a failing diagnostic must not hide the real error
        context = f"(could not describe the device: {e!r})"
    return (
        f"could not allocate {nbytes} bytes ({format_bytes(nbytes)}) of GPU memory, even after spilling "
        f"everything spillable to host; {context}. Use smaller chunks, fewer threads per worker, or a lower "
        "device_memory_limit (results spill sooner and leave room for running tasks); "
        "allocator='managed' lets the device oversubscribe into host memory"
    )


@dataclass(frozen=True)
class SpillingAllocator:
    """CuPy allocator (``cupy.cuda.set_allocator``) that spills the worker's data when ``malloc`` runs out."""

    malloc: Callable
    free_cached: Callable[[], None] | None
    spill: Callable[[int], int] | None
    describe: Callable[[], str]
    oom_errors: tuple[type[BaseException], ...]

    def __call__(self, nbytes: int):
        return allocate_with_spill(self.malloc, nbytes, free_cached=self.free_cached, spill=self.spill,
                                   describe=self.describe, oom_errors=self.oom_errors)


def setup_allocator(options: AllocatorOptions, spill: Callable[[int], int], describe: Callable[[], str]) -> None:
    """Install the allocator of ``options`` in this worker process; call it once, before the first task.

    ``spill(nbytes)`` moves at least ``nbytes`` of the worker's device data to host and returns the
    device bytes it released (0: nothing left); ``describe()`` says what the worker holds on the device.
    """
    if options.allocator == "rmm":
        _setup_rmm(options, spill, describe)
    else:
        _setup_cupy(options, spill, describe)
    logger.info("device allocator: %s", options)


def _setup_cupy(options, spill, describe):
    import cupy

    rt = cupy.cuda.runtime
    if options.allocator == "async":
        # Not MemoryAsyncPool: it selects a pool on every visible device (a CUDA context on each GPU)
        # and caps allocations at the release threshold, which only says what to keep when trimming.
        device = rt.getDevice()
        handle = rt.deviceGetDefaultMemPool(device)
        rt.deviceSetMemPool(device, handle)
        # CUDA's default threshold, 0, hands memory back to the driver at every synchronisation.
        threshold = options.release_threshold if options.release_threshold is not None else 2**64 - 1
        rt.memPoolSetAttribute(handle, rt.cudaMemPoolAttrReleaseThreshold, threshold)

        def free_cached():
            cupy.cuda.Device().synchronize()
            rt.memPoolTrimTo(handle, 0)

        def held():
            used = rt.memPoolGetAttribute(handle, rt.cudaMemPoolAttrUsedMemCurrent)
            reserved = rt.memPoolGetAttribute(handle, rt.cudaMemPoolAttrReservedMemCurrent)
            return f"the CUDA async pool holds {format_bytes(reserved)} ({format_bytes(used)} in use)"

        malloc = _async_malloc(cupy)
    else:
        pool = cupy.get_default_memory_pool() if options.allocator == "pool" else (
            cupy.cuda.MemoryPool(cupy.cuda.malloc_managed))
        malloc, free_cached = pool.malloc, pool.free_all_blocks

        def held():
            return f"the CuPy pool holds {format_bytes(pool.total_bytes())} ({format_bytes(pool.used_bytes())} in use)"

    cupy.cuda.set_allocator(SpillingAllocator(
        malloc, free_cached=free_cached, spill=spill, describe=_describer(cupy, held, describe),
        oom_errors=(cupy.cuda.memory.OutOfMemoryError,),
    ))


def _async_malloc(cupy):
    """cudaMallocAsync from the device's current pool; out of memory is CuPy's OutOfMemoryError."""
    rt, memory = cupy.cuda.runtime, cupy.cuda.memory

    def malloc(nbytes):
        for attempt in range(2):
            try:
                return memory.malloc_async(nbytes)
            except rt.CUDARuntimeError as e:
                if e.status != _CUDA_ERROR_MEMORY_ALLOCATION:
                    raise
            if attempt == 0:  # memory freed on other streams is reusable once their work is done
                cupy.cuda.Device().synchronize()
        raise memory.OutOfMemoryError(nbytes, -1, 0)

    return malloc


def _setup_rmm(options, spill, describe):
    import rmm

    if options.use_async:
        mr = rmm.mr.CudaAsyncMemoryResource(initial_pool_size=options.pool_size,
                                            release_threshold=options.release_threshold)
        if options.maximum_pool_size is not None:
            mr = rmm.mr.LimitingResourceAdaptor(mr, allocation_limit=options.maximum_pool_size)
    else:
        mr = rmm.mr.ManagedMemoryResource() if options.managed_memory else rmm.mr.CudaMemoryResource()
        if options.pool_size is not None:
            mr = rmm.mr.PoolMemoryResource(mr, initial_pool_size=options.pool_size,
                                           maximum_pool_size=options.maximum_pool_size)
    pool = mr if options.pool_size is not None and not options.use_async else None
    if options.track_allocations:
        mr = rmm.mr.TrackingResourceAdaptor(mr)
    if options.log_directory is not None:
        name = f"rmm-{socket.gethostname()}-{os.getpid()}.csv"  # one file per worker process
        mr = rmm.mr.LoggingResourceAdaptor(mr, log_file_name=os.path.join(options.log_directory, name))

    rmm.mr.set_current_device_resource(rmm.mr.FailureCallbackResourceAdaptor(mr, _retry_after_spilling(spill)))

    def held():
        return f"the RMM pool holds {format_bytes(pool.pool_size())}" if pool is not None else ""

    if find_spec("cupy") is not None and options.external_libs is not None and "cupy" not in options.external_libs:
        _setup_cupy(AllocatorOptions(), spill, describe)  # CuPy keeps its own pool, as that list asks
    elif find_spec("cupy") is not None:
        import cupy
        from rmm.allocators.cupy import rmm_cupy_allocator

        # RMM has already spilled by the time it raises: only turn its MemoryError into ours.
        cupy.cuda.set_allocator(SpillingAllocator(
            rmm_cupy_allocator, free_cached=None, spill=None, describe=_describer(cupy, held, describe),
            oom_errors=(MemoryError,),
        ))
    if options.external_libs is None or "torch" in options.external_libs:
        _route_torch()


def _retry_after_spilling(spill):
    """RMM's failure callback: spill the worker's device data; RMM retries the allocation while it returns True."""

    def on_failure(nbytes: int) -> bool:
        released = spill(nbytes)
        if released > 0:
            _count(retries=1, spilled=released)
        return released > 0

    return on_failure


def setup_rmm_for_libraries(options: AllocatorOptions, spill: Callable[[int], int], ipc: bool = False) -> None:
    """RMM, where the allocator chosen serves CuPy alone, for the libraries that allocate through it (cuDF):
    cudaMallocAsync, keeping what it frees for the next allocation (RMM's default, cudaMalloc and
    cudaFree, waits for the device at each), or managed memory with ``allocator="managed"``; and, as
    for CuPy, spilling the worker's data when an allocation fails.

    With ``ipc`` (a worker whose transfers go over UCX), a pool of cudaMalloc's memory instead, as CuPy's pool
    is: UCX maps another process's cudaMalloc memory over NVLink (CUDA IPC), but not cudaMallocAsync's, whose
    bytes it copies through staging buffers (a cuDF frame between two H200s: 0.3 GB/s from cudaMallocAsync,
    135 GB/s from the pool). The pool starts at a sixteenth of the device, and doubles as it needs to.

    cuDF and cuML point CuPy at RMM as they are imported (``rmm_cupy_allocator``), so that from then on
    this one resource serves CuPy, cuDF and cuML."""
    import rmm

    if options.allocator == "managed":
        mr = rmm.mr.ManagedMemoryResource()
    elif ipc:
        initial = _size(1 / IPC_POOL_SHARE, "the first pool", options.device_memory)
        mr = rmm.mr.PoolMemoryResource(rmm.mr.CudaMemoryResource(), initial_pool_size=initial or None)
    else:
        mr = rmm.mr.CudaAsyncMemoryResource(release_threshold=options.device_memory or None)
    rmm.mr.set_current_device_resource(rmm.mr.FailureCallbackResourceAdaptor(mr, _retry_after_spilling(spill)))


def _route_torch():
    global _torch_routed
    if _torch_routed or find_spec("torch") is None:
        return
    from rmm.allocators.torch import rmm_torch_allocator  # imports torch; None where torch has no CUDA

    if rmm_torch_allocator is None:
        return
    import torch

    try:
        torch.cuda.memory.change_current_allocator(rmm_torch_allocator)
        _torch_routed = True
    except RuntimeError as e:  # torch allocated on the GPU before this worker set RMM up
        warnings.warn(
            f"PyTorch keeps its own CUDA allocator, outside RMM and spilling ({e}); "
            "make sure nothing uses torch on the GPU before the worker starts",
            UserWarning, stacklevel=2,
        )


def _describer(cupy, held, describe):
    """describe() for error messages: the device, its free memory, the allocator's and the worker's holdings."""

    def text() -> str:
        parts = []
        try:
            rt = cupy.cuda.runtime
            free, total = rt.memGetInfo()
            token = own_device_token(os.environ.get("CUDA_VISIBLE_DEVICES"))  # the worker's own GPU
            where = f"GPU {token} (CUDA device {rt.getDevice()})" if token else f"CUDA device {rt.getDevice()}"
            parts += [f"{where} has {format_bytes(free)} free of {format_bytes(total)}", held()]
        except Exception as e:  # only diagnostics: never hide the allocation error
            parts.append(f"(device query failed: {e!r})")
        parts.append(f"the worker holds {describe()}")
        return "; ".join(p for p in parts if p)

    return text
