"""Worker plugins. Each has a stable ``name`` and is idempotent: setting it up twice is harmless."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import logging
import os
import sys
import warnings

from distributed import WorkerPlugin


class GPUWorker(WorkerPlugin):
    """Prepares a GPU worker before its first task and remembers what it was given.

    Pins the process to the cores nearest its GPU, sets up the device allocator with
    spilling on allocation failure, imports ``pre_import`` modules, exports the device
    memory metrics, and answers :meth:`info` for ``dask gpu config``. It makes no CUDA
    context: the first task that needs one does.
    """

    name = "dask-gpu"

    def __init__(self, device: dict, device_memory_limit: int, cpu_affinity=(), pre_import=(), allocator=None):
        self.device = dict(device)
        self.device_memory_limit = device_memory_limit
        self.cpu_affinity = tuple(cpu_affinity)
        self.pre_import = tuple(pre_import)
        self.allocator = allocator

    def setup(self, worker):
        from dask_gpu.memory import stats

        if self.cpu_affinity:
            pin_threads(self.cpu_affinity)
        if self.allocator is not None and not self.device.get("simulated"):
            self._prepare_allocator(worker)
        for module in self.pre_import:
            try:
                importlib.import_module(module)
            except ImportError as e:
                raise ImportError(f"pre_import: worker {worker.name} could not import {module!r}: {e}") from e
        stats.export(worker)

    def _prepare_allocator(self, worker):
        """The allocator, with spilling on allocation failure, before the first allocation.

        CuPy's default pool is prepared when CuPy is first imported, so that a worker that
        never uses CuPy never pays for importing it; any other allocator is set up now.
        """
        from dask_gpu.memory.allocator import setup_allocator

        spill = getattr(worker.data, "spill", lambda nbytes: 0)
        describe = getattr(worker.data, "describe", lambda: "no device tier (device_memory_limit=0)")
        if self.allocator.lazy:
            when_imported("cupy", lambda _: setup_allocator(self.allocator, spill, describe))
        else:
            setup_allocator(self.allocator, spill, describe)

    def info(self) -> dict:
        return {
            "device": self.device,
            "device_memory_limit": self.device_memory_limit,
            "cpu_affinity": self.cpu_affinity,
            "pre_import": self.pre_import,
            "allocator": self.allocator.describe() if self.allocator is not None else None,
        }


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


def when_imported(name: str, callback) -> None:
    """Call ``callback(module)`` once module ``name`` is imported: now if it already is.

    Lets a worker prepare a library (CuPy's allocator) before its first use without
    paying for its import at start-up, when no task may ever need it.
    """
    if name in sys.modules:
        callback(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, callback))


class _AfterImport(importlib.abc.MetaPathFinder):
    def __init__(self, name: str, callback):
        self.name, self.callback = name, callback

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        sys.meta_path.remove(self)  # once; and let the other finders find the real module
        spec = importlib.util.find_spec(fullname)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            run = spec.loader.exec_module

            def exec_module(module):
                run(module)
                try:
                    self.callback(module)
                except Exception:  # never break the user's import
                    logging.getLogger("dask_gpu").exception("preparing %s after its import failed", fullname)

            spec.loader.exec_module = exec_module
        return spec
