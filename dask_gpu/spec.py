"""The one worker-spec builder: device + options -> distributed's ``{"cls", "options"}``.

LocalCUDACluster and ``dask gpu worker`` both call it, so a worker started either
way has the same environment, name, resources, limits and plugins.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence

import dask
from dask.system import CPU_COUNT
from distributed import Nanny
from distributed.system import MEMORY_LIMIT

from dask_gpu.dataframe import start
from dask_gpu.devices import Device, rotate
from dask_gpu.kernel_cache import kernel_cache_env
from dask_gpu.memory.allocator import resolve_allocator
from dask_gpu.memory.store import DeviceHostDiskStore
from dask_gpu.options import WorkerOptions
from dask_gpu.parse import device_memory_bytes, fraction_bytes
from dask_gpu.plugins import GPUWorker, QuietClose

logger = logging.getLogger("dask_gpu")


IO_THREADS = 8  # the fewest threads a GPU worker's file reads get: 8, 16 and 32 read alike, faster than KvikIO's own


def worker_env(devices: Sequence[tuple[str, Device]], position: int) -> dict:
    """The environment of the GPU worker for ``devices[position]``: its ``CUDA_VISIBLE_DEVICES`` lists
    every device, rotated so that its own comes first (CUDA's device 0 is its GPU, and peers stay
    reachable)."""
    env = {"CUDA_VISIBLE_DEVICES": rotate([token for token, _ in devices], position)}
    near = usable_cores(devices[position][1].cpu_affinity)
    defaults = {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # integer indices mean what NVML means by them
        "RAPIDS_NO_INITIALIZE": "True",  # cuDF's import skips its device checks: the first task needs none
        # cuDF reads files through KvikIO's threads: with a thread a core, parquet reads take 8% less time
        "KVIKIO_NTHREADS": str(max(IO_THREADS, len(near))),
    }
    env.update({name: value for name, value in defaults.items() if name not in os.environ})
    return {**env, **kernel_cache_env()}


def gpu_worker_spec(
    devices: Sequence[tuple[str, Device]],
    position: int,
    options: WorkerOptions,
    n_workers: int,
    name_prefix: str | None = None,
) -> dict:
    """Spec of the worker for ``devices[position]``, among the (token, device) pairs in use, in the
    environment of :func:`worker_env`.
    """
    device = devices[position][1]
    env = worker_env(devices, position)
    own_data = options.extra.get("data") is not None  # the user's store replaces the device tier
    device_limit = 0 if own_data else device_memory_bytes(options.device_memory_limit, device.memory_total)
    plugin = GPUWorker(
        device=device.describe(),
        device_memory_limit=device_limit,
        cpu_affinity=usable_cores(device.cpu_affinity) if options.cpu_affinity else (),
        pre_import=options.pre_import,
        allocator=_allocator(options, device),
        cudf_spill=(options.cudf_spill, options.cudf_spill_stats),
        warm_cudf=start.wanted(device.simulated),
    )
    name = f"{name_prefix}-{device.label}" if name_prefix else device.label
    spec = _nanny(options, n_workers, name, options.nthreads, {"GPU": 1, **options.resources}, env, plugin)
    if device_limit:  # 0: no device tier, distributed's own data store (or the user's data=)
        host_limit = spec["options"]["memory_limit"]
        store = {"device_memory_limit": device_limit, "memory_limit": host_limit}
        if options.log_spilling:
            store["log_spilling"] = True
        spec["options"]["data"] = (DeviceHostDiskStore, store)
    if device.simulated:  # distributed's own GPU monitor must not look for a device that isn't there
        spec["options"]["config"] = {**spec["options"].get("config", {}), "distributed.diagnostics.nvml": False}
    return spec


def _allocator(options: WorkerOptions, device: Device):
    """The device's allocator options; a simulated device needs no RMM, and sets none up: RMM's keywords are
    checked, not refused where RMM is missing (dask-cuda code tried first on a laptop)."""
    resolved = resolve_allocator(**options.allocator, device_memory=device.memory_total, installed=not device.simulated)
    if device.simulated and resolved.allocator == "rmm":
        _say_once("RMM's keywords are checked and ignored on simulated devices (gpu.simulate): no RMM is set up")
    return resolved


@functools.cache
def _say_once(line: str) -> None:
    logger.warning(line)


def cpu_worker_spec(index: int, options: WorkerOptions, n_workers: int, nthreads: int) -> dict:
    """Spec of a CPU-only worker: no GPU visible, no GPU resource, so GPU-tagged tasks avoid it."""
    env = {"CUDA_VISIBLE_DEVICES": ""}
    resources = {k: v for k, v in options.resources.items() if k != "GPU"}
    return _nanny(options, n_workers, f"cpu-{index}", nthreads, resources, env, None)


def cpu_worker_threads(n_gpu_workers: int, options: WorkerOptions, n_cpu_workers: int) -> int:
    """Threads for each CPU worker: the cores the GPU workers leave, shared out."""
    if n_cpu_workers <= 0:
        return 0
    return max(1, (CPU_COUNT - n_gpu_workers * options.nthreads) // n_cpu_workers)


MIN_WORKER_MEMORY = 256 * 2**20  # below it a worker's own imports pass the limit: its nanny restarts it forever


def host_memory_limit(limit, n_workers: int) -> int:
    """Host memory per worker: "auto" splits the machine's memory evenly; a fraction is of the machine; 0 is
    no limit. A limit below what a worker needs to start is an error here."""
    if limit == "auto":
        nbytes = MEMORY_LIMIT // max(n_workers, 1)
    elif isinstance(limit, float):
        nbytes = fraction_bytes(limit, MEMORY_LIMIT, f"memory_limit={limit!r}")
    else:
        nbytes = int(limit)
    terminate = dask.config.get("distributed.worker.memory.terminate")
    if terminate and 0 < nbytes * terminate < MIN_WORKER_MEMORY:  # its nanny would restart it as it starts
        given = f"{limit} bytes" if isinstance(limit, int) else f"{limit!r} ({nbytes} bytes a worker)"
        raise ValueError(f"memory_limit={given} is less than a worker needs to start ({MIN_WORKER_MEMORY // 2**20} "
                         "MiB): give more, 0 for no limit, or turn distributed.worker.memory.terminate off")
    return nbytes


def usable_cores(cores: Sequence[int]) -> tuple[int, ...]:
    """The device's nearby cores that this process may run on (a container may allow fewer)."""
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(cores)
    return tuple(c for c in cores if c in allowed)


def _nanny(options: WorkerOptions, n_workers, name, nthreads, resources, env, plugin) -> dict:
    extra = dict(options.extra)
    opts = {
        "name": name,
        "nthreads": nthreads,
        "memory_limit": host_memory_limit(options.memory_limit, n_workers),
        "resources": resources,
        "env": {**extra.pop("env", {}), **env},
        "plugins": (*extra.pop("plugins", ()), *([plugin] if plugin else []), QuietClose()),
        **extra,
    }
    if options.local_directory:
        opts["local_directory"] = options.local_directory
    if options.protocol:
        opts["protocol"] = options.protocol
    if options.ucx:
        opts["config"] = {**opts.get("config", {}), "distributed-ucxx": dict(options.ucx)}
    cls = options.worker_class
    if cls is not None and not issubclass(cls, Nanny):
        opts["worker_class"] = cls  # a Worker subclass, run by each Nanny
    return {"cls": cls if cls is not None and issubclass(cls, Nanny) else Nanny, "options": opts}


def worker_specs(selected: Sequence[tuple[str, Device]], options: WorkerOptions, name_prefix: str | None = None,
                 ) -> dict:
    """Name -> spec of one worker per selected device (``dask gpu worker``, dask-cuda's ``worker_spec``)."""
    specs = (gpu_worker_spec(selected, i, options, len(selected), name_prefix) for i in range(len(selected)))
    return {spec["options"]["name"]: spec for spec in specs}
