"""Worker plugins. Each has a stable ``name`` and is idempotent: setting it up twice is harmless."""

from __future__ import annotations

import asyncio
import functools
import importlib
import logging
import os
import sys
import threading
import time
import warnings
import weakref

from distributed import WorkerPlugin
from distributed.core import Status

from dask_gpu import internals
from dask_gpu.array import start as arrays
from dask_gpu.dataframe import start as dataframes
from dask_gpu.imports import cancel, when_imported
from dask_gpu.kernel_cache import use_kernel_cache

logger = logging.getLogger("dask_gpu")


class GPUWorker(WorkerPlugin):
    """Prepares a GPU worker before its first task and remembers what it was given.

    Pins the process to the cores nearest its GPU, sets up the device allocator with
    spilling on allocation failure, imports ``pre_import`` modules, gets dask.array and CuPy
    ready (:mod:`dask_gpu.array.start`: the imports and, on a real device, the CUDA context),
    warms cuDF where the worker will hold cuDF dataframes (``warm_cudf``), exports the device
    memory metrics, and answers :meth:`info` for ``dask gpu config``.

    The warm-up runs in a thread beside the worker's registration. Its imports, and cuDF's first calls where it
    warms cuDF, are done before the worker reads its first message (:class:`WarmFirst`): Python gives one of two
    threads that import a package's modules at once a half-made module (a worker whose first task imported
    ``dask.array.creation`` while the warm-up imported ``dask.array`` failed on ``arange``).
    """

    name = "dask-gpu"
    READY_LIMIT = 120.0  # seconds a worker's event loop waits for its warm-up's first part, at most

    def __init__(self, device: dict, device_memory_limit: int, cpu_affinity=(), pre_import=(), allocator=None,
                 cudf_spill=(False, 0), warm_cudf=False):
        self.device = dict(device)
        self.device_memory_limit = device_memory_limit
        self.cpu_affinity = tuple(cpu_affinity)
        self.pre_import = tuple(pre_import)
        self.allocator = allocator
        self.cudf_spill = tuple(cudf_spill)  # (on, statistics level)
        self.warm_cudf = warm_cudf
        self.warmed_seconds = None  # what getting arrays (and cuDF, where warmed) ready took, once done
        self.warming = None  # the thread that gets them ready
        self.ready = None  # an event, set once the worker may read its messages (see WarmFirst)

    async def setup(self, worker):
        from dask_gpu.memory import stats

        if self.cpu_affinity:
            pin_threads(self.cpu_affinity)
        use_kernel_cache()  # gpu.kernel-cache, given as CUPY_CACHE_DIR, even where CuPy came first
        if self.allocator is not None and not self.device.get("simulated"):
            self._prepare_allocator(worker)
        if self.cudf_spill[0]:
            spill_cudf(*self.cudf_spill)
        import_modules(self.pre_import, worker)
        self._start_warming(worker, with_arrays=True)
        stats.export(worker)
        if hasattr(worker.data, "on_lost"):  # the device tier's store: a lost spill file is recomputed
            worker.data.on_lost = functools.partial(worker.loop.add_callback, forget_lost_key, worker)
        await WarmFirst.give(worker)

    def warm_cudf_now(self, worker) -> None:
        """Warm cuDF on a worker that started without (the ``gpu`` backend was set after): in a thread, as at the
        start, returning once cuDF's first calls are made (:meth:`wait_ready`). The caller runs in the worker's
        event loop, which reads no task meanwhile."""
        self.warm_cudf = True
        self._start_warming(worker, with_arrays=False)
        self.wait_ready(worker)

    def wait_ready(self, worker) -> None:
        """Wait until the warm-up says the worker may read its messages; past ``READY_LIMIT`` seconds, say so
        and go on: the warm-up goes on beside."""
        if self.ready is not None and not self.ready.wait(self.READY_LIMIT):
            logger.warning("worker %s reads its messages before its warm-up is ready", worker.name)

    def _start_warming(self, worker, with_arrays: bool) -> None:
        self.ready = threading.Event()
        name = arrays.WARMING if with_arrays else dataframes.WARMING
        self.warming = threading.Thread(target=self._warm, args=(worker, with_arrays), name=name, daemon=True)
        self.warming.start()

    def _warm(self, worker, with_arrays: bool):
        """dask.array and CuPy ready (:mod:`dask_gpu.array.start`) where asked, and cuDF where it warms cuDF;
        ``ready`` set once the imports, and cuDF's first calls, are done, ``warmed_seconds`` added to once all is."""
        try:
            seconds = 0.0
            if with_arrays:
                simulated = bool(self.device.get("simulated"))
                seconds += arrays.warm(simulated, on_context=lambda: self._prepare_rmm(worker))
            if self.warm_cudf:
                seconds += dataframes.warm_worker(worker, ready=self.ready.set)
            self.warmed_seconds = (self.warmed_seconds or 0.0) + seconds  # shown by dask gpu bench
        except Exception as e:  # noqa: BLE001  a task that needs it raises it, where the user looks
            logger.warning("worker %s did not finish its warm-up: %r", worker.name, e)
        finally:
            self.ready.set()

    def _prepare_allocator(self, worker):
        """The allocator, with spilling on allocation failure, before the first allocation.

        CuPy's default pool is prepared when CuPy is first imported, so that a worker that never uses it never pays
        for importing it, and RMM for cuDF once the warm-up has made the CUDA context (:meth:`_prepare_rmm`); an
        RMM allocator, which serves both, is set up now.
        """
        from dask_gpu.memory.allocator import setup_allocator

        if self.allocator.lazy:
            when_imported("cupy", lambda _: setup_allocator(self.allocator, *self._spill(worker)))
        else:
            setup_allocator(self.allocator, *self._spill(worker))

    def _prepare_rmm(self, worker):
        """RMM for cuDF, where the allocator serves CuPy alone: once RMM is imported (distributed imports it where
        installed). Its resource makes the CUDA context where there is none, holding the GIL for 0.2 s, so the
        warm-up calls this once it has made the context beside its imports."""
        if self.allocator is None or not self.allocator.lazy or self.device.get("simulated"):
            return
        from dask_gpu.memory.allocator import setup_rmm_for_libraries

        ipc = worker.address.startswith("ucx")  # ucx:// and ucxx://: CUDA IPC over NVLink
        when_imported("rmm", lambda _: setup_rmm_for_libraries(self.allocator, self._spill(worker)[0], ipc))

    @staticmethod
    def _spill(worker):
        """What frees the worker's device memory, and what says what it holds there."""
        return (getattr(worker.data, "spill", lambda nbytes: 0),
                getattr(worker.data, "describe", lambda: "no device tier (device_memory_limit=0)"))

    def info(self) -> dict:
        return {
            "device": self.device,
            "device_memory_limit": self.device_memory_limit,
            "cpu_affinity": self.cpu_affinity,
            "pre_import": self.pre_import,
            "allocator": self.allocator.describe() if self.allocator is not None else None,
            "cudf_spill": self.cudf_spill[0],
        }


class WarmFirst(WorkerPlugin):
    """Holds a new GPU worker's first message until its warm-up thread says it is ready (:class:`GPUWorker`): its
    imports are done, and cuDF's first calls where it warms cuDF.

    The scheduler sets it up on each worker as the worker registers, before the worker reads its first task
    or call: its setup waits in the worker's event loop, which then reads nothing. A GPU worker asks its
    scheduler for it as it starts (:meth:`give`); other workers have nothing to wait for.
    """

    name = "dask-gpu-warm-first"

    def setup(self, worker):
        plugin = worker.plugins.get(GPUWorker.name)
        if plugin is not None:
            plugin.wait_ready(worker)

    @classmethod
    async def give(cls, worker, timeout: float = 5.0):
        """Ask ``worker``'s scheduler to set this up on each worker as it registers; where it does not answer,
        the worker starts without it (its first task may then import beside the warm-up)."""
        try:
            await asyncio.wait_for(internals.register_worker_plugin(worker, cls(), cls.name), timeout)
        except Exception as e:  # noqa: BLE001
            logger.info("worker %s: the scheduler did not take %s: %r", worker.name, cls.name, e)


class QuietClose(WorkerPlugin):
    """Keeps a closing worker's failed heartbeat out of the log; every worker, GPU or CPU, has it.

    A heartbeat under way as the worker closes fails when the worker closes its connections, and
    distributed logs that with a trace of 40 lines: a cluster of many workers on few cores, which
    close slowly, printed one per worker. A heartbeat that fails while the worker runs still shows.
    The filter stays until the process ends: the worker closes its connections after its plugins.
    """

    name = "dask-gpu-quiet-close"

    def setup(self, worker):
        _CLOSING_HEARTBEATS.workers.add(worker)
        log = logging.getLogger("distributed.worker")
        if _CLOSING_HEARTBEATS not in log.filters:
            log.addFilter(_CLOSING_HEARTBEATS)


class _ClosingHeartbeats(logging.Filter):
    """Drops distributed's failed-heartbeat record while a worker of this process closes."""

    CLOSING = (Status.closing, Status.closing_gracefully, Status.closed)

    def __init__(self):
        super().__init__()
        self.workers = weakref.WeakSet()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != internals.HEARTBEAT_FAILED or not any(w.status in self.CLOSING for w in self.workers)


_CLOSING_HEARTBEATS = _ClosingHeartbeats()


def forget_lost_key(worker, key, tries: int = 100) -> None:
    """Have the scheduler forget ``worker``'s copy of ``key``, whose spill file was changed or lost, so that it is
    computed again where it is still wanted. Not while a task of the worker reads it (that task fails, naming
    the file): distributed refuses then; so every 0.1 s, ``tries`` times at most."""
    ts = worker.state.tasks.get(key)
    if ts is None or ts.state != "memory":
        return
    if any(dep.state in ("executing", "long-running") for dep in ts.dependents):
        if tries > 0:
            worker.loop.call_later(0.1, forget_lost_key, worker, key, tries - 1)
        return
    worker.handle_stimulus(internals.RemoveReplicasEvent(keys=[key], stimulus_id=f"spill-file-lost-{time.time()}"))


def import_modules(modules, worker=None) -> None:
    """Import ``modules`` (pre_import), naming the worker and the module where one fails."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as e:
            who = f"worker {worker.name}" if worker is not None else "this process"
            raise ImportError(f"pre_import: {who} could not import {module!r}: {e}") from e


# dask-cuda's worker plugins, by name and signature, for clients that register them themselves
# (client.register_plugin(PreImport("cudf"))). GPU workers already run all of them in GPUWorker.


class CPUAffinity(WorkerPlugin):
    """Pin the worker to ``cores`` (dask-cuda's CPUAffinity; a warning where the OS refuses)."""

    def __init__(self, cores):
        self.cores = list(cores)

    def setup(self, worker=None):
        pin_threads(self.cores)


class CUDFSetup(WorkerPlugin):
    """cuDF's own spilling on or off, and its statistics level, once the worker imports cuDF."""

    def __init__(self, spill, spill_stats):
        self.spill, self.spill_stats = spill, spill_stats

    def setup(self, worker=None):
        spill_cudf(self.spill, self.spill_stats)


class PreImport(WorkerPlugin):
    """Import ``libraries`` ("cudf,rmm" or a list) in the worker before its first task."""

    def __init__(self, libraries):
        from dask_gpu.parse import pre_import

        self.libraries = list(pre_import(libraries))  # the worker's Python decides

    def setup(self, worker=None):
        import_modules(self.libraries, worker)


class RMMSetup(WorkerPlugin):
    """RMM as the worker's allocator (dask-cuda's RMMSetup): dask-gpu's RMM setup, spilling on allocation failure.

    The combination is checked here; sizes (fractions of the device) and RMM's presence in the worker, against
    its own device.
    """

    def __init__(self, initial_pool_size, maximum_pool_size, managed_memory, async_alloc, release_threshold,
                 log_directory, track_allocations, external_lib_list):
        self.initial_pool_size, self.maximum_pool_size = initial_pool_size, maximum_pool_size
        self.managed_memory, self.async_alloc, self.release_threshold = managed_memory, async_alloc, release_threshold
        self.log_directory, self.rmm_track_allocations = log_directory, track_allocations
        self.external_lib_list = external_lib_list
        self._options(device_memory=2**62, installed=False)  # any device: errors in the combination now

    def _options(self, device_memory: int, installed: bool = True):
        from dask_gpu.memory.allocator import resolve_allocator

        return resolve_allocator(
            rmm_pool_size=self.initial_pool_size, rmm_maximum_pool_size=self.maximum_pool_size,
            rmm_managed_memory=self.managed_memory, rmm_async=self.async_alloc,
            rmm_release_threshold=self.release_threshold, rmm_log_directory=self.log_directory,
            rmm_track_allocations=self.rmm_track_allocations,
            rmm_allocator_external_lib_list=self.external_lib_list, device_memory=device_memory, installed=installed)

    def setup(self, worker=None):
        from dask_gpu.devices import own_device
        from dask_gpu.memory.allocator import setup_allocator

        device = own_device()
        options = self._options(device.memory_total)
        if options.allocator == "rmm" and not device.simulated:  # nothing asked of RMM: leave the allocator be
            data = getattr(worker, "data", None)
            setup_allocator(options, getattr(data, "spill", lambda nbytes: 0),
                            getattr(data, "describe", lambda: "no device tier"))


def spill_cudf(on: bool, statistics: int = 0):
    """cuDF's own spilling, set once cuDF is imported, without importing it; returns what undoes it.

    cuDF reads its options when it makes its first buffer; where that happened already (a client
    that used cuDF before it made the cluster), its spill manager is started here. A cuDF buffer
    travels with its kind: a process whose spilling is off cannot read a spillable one, so a client
    that closes its cluster turns its own back (the undo).
    """
    cudf = sys.modules.get("cudf")
    before = (cudf.get_option("spill"), cudf.get_option("spill_stats")) if cudf else None

    def configure(cudf):
        cudf.set_option("spill", on)
        cudf.set_option("spill_stats", statistics)
        if not on:  # new buffers plain again; those made spillable keep their manager, as cuDF allows
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "overwriting non-empty manager", UserWarning)
                internals.set_cudf_spill_manager(None)
        elif _global_manager() is None:
            internals.set_cudf_spill_manager(internals.new_cudf_spill_manager(
                device_memory_limit=cudf.get_option("spill_device_limit"), statistic_level=statistics))
            if cudf.get_option("spill_on_demand"):
                internals.cudf_spill_on_demand()

    def undo():
        if not cancel(configure) and "cudf" in sys.modules:  # cancelled: cuDF never came, nothing was set
            spill, stats = before or (_env_flag("CUDF_SPILL"), int(os.environ.get("CUDF_SPILL_STATS", "0") or 0))
            spill_cudf(spill, stats)

    when_imported("cudf", configure)
    return undo


def _global_manager():
    """cuDF's spill manager, which cuDF makes on first asking where its option says so; its spilling on
    demand may then find another allocation-failure callback (dask-gpu's own) registered first."""
    try:
        return internals.cudf_spill_manager()
    except ValueError:  # the manager was made and set before cuDF tried to register on-demand spilling
        return internals.cudf_spill_manager()


def _env_flag(name: str) -> bool:
    """A boolean environment variable as cuDF reads its own (its option's default)."""
    return os.environ.get(name, "").strip().lower() in ("1", "on", "true", "yes")


def pin_threads(cores) -> bool:
    """Pin every thread of this process to ``cores``; warn, don't fail, where the OS refuses.

    sched_setaffinity(0) changes only the calling thread, so the worker's threads that
    already exist are pinned one by one; threads started later inherit the mask.
    """
    try:
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setaffinity(int(tid), cores)
            except ProcessLookupError:  # the thread ended meanwhile
                pass
    except (OSError, ValueError, AttributeError) as e:  # AttributeError: no sched_setaffinity (macOS)
        message = f"could not pin the worker to CPU cores {sorted(cores)}: {e}; it runs unpinned"
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return False
    return True
