"""Worker plugins. Each has a stable ``name`` and is idempotent: setting it up twice is harmless."""

from __future__ import annotations

import importlib
import os
import warnings

from distributed import WorkerPlugin

class GPUWorker(WorkerPlugin):
    """Prepares a GPU worker before its first task and remembers what it was given.

    Pins the process to the cores nearest its GPU, imports ``pre_import`` modules,
    and answers :meth:`info` for ``dask gpu config``. It never touches CUDA: the
    CUDA context is made by the first task that needs it.
    """

    name = "dask-gpu"

    def __init__(self, device: dict, device_memory_limit: int, cpu_affinity=(), pre_import=()):
        self.device = dict(device)
        self.device_memory_limit = device_memory_limit
        self.cpu_affinity = tuple(cpu_affinity)
        self.pre_import = tuple(pre_import)

    def setup(self, worker):
        if self.cpu_affinity:
            pin_threads(self.cpu_affinity)
        for module in self.pre_import:
            try:
                importlib.import_module(module)
            except ImportError as e:
                raise ImportError(f"pre_import: worker {worker.name} could not import {module!r}: {e}") from e

    def info(self) -> dict:
        return {
            "device": self.device,
            "device_memory_limit": self.device_memory_limit,
            "cpu_affinity": self.cpu_affinity,
            "pre_import": self.pre_import,
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
        warnings.warn(f"could not pin the worker to CPU cores {sorted(cores)}: {e}; it runs unpinned", RuntimeWarning, stacklevel=2)
        return False
    return True
