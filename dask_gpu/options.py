"""Worker and cluster options: frozen dataclasses, each resolved once, defaults < dask config < keywords/CLI.

The options are resolved and checked here, once, with errors that name the bad value: most values by
:mod:`dask_gpu.parse`, devices by :mod:`dask_gpu.devices`, allocators by :mod:`dask_gpu.memory.allocator`, UCX
by :mod:`dask_gpu.ucx`. The spec builder, the cluster and CUDAWorker read the result; the CLI parses its own
durations and the compat ``dask_gpu.cuda.worker_spec`` resolves its keywords its own way.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from distributed import SpecCluster
from distributed.security import Security

from dask_gpu import checks, config, keywords, machine, parse
from dask_gpu.keywords import parse_worker_class
from dask_gpu.ucx import UCX_PROTOCOLS, UCX_TRANSPORTS, implied_protocol, parse_ucx, usable_protocol

ALLOCATOR_KEYS = (
    "allocator",
    "rmm_pool_size",
    "rmm_maximum_pool_size",
    "rmm_managed_memory",
    "rmm_async",
    "rmm_release_threshold",
    "rmm_log_directory",
    "rmm_track_allocations",
    "rmm_allocator_external_lib_list",
)


@dataclass(frozen=True)
class WorkerOptions:
    nthreads: int = 2
    memory_limit: int | float | str = "auto"  # bytes, a fraction of the machine, or "auto" (split evenly)
    device_memory_limit: int | float | str = 0.8  # bytes, or a fraction of the device, or "auto"
    resources: Mapping[str, float] = field(default_factory=dict)
    local_directory: str | None = None
    pre_import: tuple[str, ...] = ()
    protocol: str | None = None
    # UCX transports chosen by hand (distributed-ucxx config keys); empty: UCX picks them, or no UCX runs.
    ucx: Mapping[str, bool] = field(default_factory=dict)
    cpu_affinity: bool = True
    # Allocator keywords (ALLOCATOR_KEYS), checked per device by memory.allocator.resolve_allocator.
    allocator: Mapping[str, object] = field(default_factory=dict)
    # cuDF's own spilling (dask-cuda's enable_cudf_spill, cudf_spill_stats): cuDF then moves its frames itself.
    cudf_spill: bool = False
    cudf_spill_stats: int = 0
    log_spilling: bool = False  # log each move between the device and host tiers (dask-cuda's log_spilling)
    worker_class: type | None = None  # a Worker subclass (run by a Nanny) or a Nanny subclass
    # Passed unchanged to each Nanny/Worker (security, preload, death_timeout, ports, ...).
    extra: Mapping[str, object] = field(default_factory=dict)

    @classmethod
    def resolve(
        cls,
        nthreads=None,
        memory_limit=None,
        device_memory_limit=None,
        resources=None,
        local_directory=None,
        pre_import=None,
        protocol=None,
        cpu_affinity=None,
        enable_cudf_spill=None,
        cudf_spill_stats=None,
        log_spilling=None,
        worker_class=None,
        **extra,
    ) -> WorkerOptions:
        """Build options from keywords, falling back to ``gpu.*`` config for each left as None."""
        check_config_keys()
        allocator = {key: config.get(key, extra.pop(key, None)) for key in ALLOCATOR_KEYS}
        chosen = {k: v for k in UCX_TRANSPORTS if (v := extra.pop(k, None)) is not None}
        transports = {UCX_TRANSPORTS[k]: parse.flag(v, k) for k, v in chosen.items()}
        asked = parse.protocol(config.get("protocol", protocol))
        ucx = parse_ucx(asked, transports)
        protocol = usable_protocol(asked)
        check_allocator_keywords(allocator, ucx)
        if extra.get("data") is not None and device_memory_limit not in (None, 0):
            warnings.warn(f"device_memory_limit={device_memory_limit!r} has no effect: the workers keep their data "
                          "in the data= given, which replaces dask-gpu's device tier", UserWarning, stacklevel=3)
        resources = parse.resources(config.get("resources", resources))
        if resources.get("GPU", 1) != 1:
            raise ValueError(f"resources: GPU={resources['GPU']:g}, but each GPU worker holds one GPU, and says "
                             "so with GPU=1 itself: drop GPU from resources")
        return cls(
            nthreads=parse.nthreads(config.get("nthreads", nthreads)),
            memory_limit=parse.memory_limit(config.get("memory_limit", memory_limit)),
            device_memory_limit=parse.device_memory_limit(config.get("device_memory_limit", device_memory_limit)),
            resources=MappingProxyType(resources),
            local_directory=parse.local_directory(config.get("local_directory", local_directory)),
            pre_import=machine.pre_import(config.get("pre_import", pre_import)),
            protocol=protocol,
            ucx=MappingProxyType(ucx if protocol in (None, *UCX_PROTOCOLS) else {}),  # none where it fell back to TCP
            cpu_affinity=parse.flag(config.get("cpu_affinity", cpu_affinity), "cpu_affinity"),
            allocator=MappingProxyType(allocator),
            cudf_spill=parse.flag(config.get("cudf_spill", enable_cudf_spill), "enable_cudf_spill"),
            cudf_spill_stats=parse.count(config.get("cudf_spill_stats", cudf_spill_stats), "cudf_spill_stats"),
            log_spilling=parse.flag(config.get("log_spilling", log_spilling), "log_spilling"),
            worker_class=parse_worker_class(worker_class),
            extra=MappingProxyType({k: v for k, v in extra.items() if v is not None}),
        )


# Every keyword WorkerOptions.resolve reads itself; the others go to each Nanny and Worker.
KEYWORDS = frozenset(
    {*inspect.signature(WorkerOptions.resolve).parameters, *ALLOCATOR_KEYS, *UCX_TRANSPORTS} - {"cls", "extra"})


# SpecCluster's own keywords (name, shutdown_on_close, ...), which a cluster takes beside its workers'
SPEC_CLUSTER_KEYWORDS = frozenset(inspect.signature(SpecCluster.__init__).parameters) - {
    "self", "workers", "scheduler", "worker"}


@dataclass(frozen=True)
class ClusterOptions:
    """A LocalCUDACluster's options: its scheduler's, SpecCluster's, and each worker's (``workers``)."""

    workers: WorkerOptions
    cpu_workers: int = 0
    host: str | None = "127.0.0.1"  # nobody else can join unless asked
    interface: str | None = None
    scheduler_port: int = 0
    dashboard_address: str | bool | None = None
    security: Security = field(default_factory=Security)
    silence_logs: object = logging.WARN
    scheduler_kwargs: Mapping[str, object] = field(default_factory=dict)
    worker_saturation: float | None = None
    spec_cluster: Mapping[str, object] = field(default_factory=dict)  # SpecCluster's own keywords

    @classmethod
    def resolve(cls, cpu_workers=None, host=None, interface=None, scheduler_port=0, dashboard_address=None,
                security=None, silence_logs=logging.WARN, scheduler_kwargs=None, worker_saturation=None,
                threads_per_worker=None, memory_limit="default", device_memory_limit="default", protocol=None,
                **worker) -> ClusterOptions:
        """LocalCUDACluster's keywords (but its devices), each left as None from the ``gpu.*`` configuration;
        the memory limits as dask-cuda reads them ("default": the configuration; None, 0, False: no limit)."""
        n_cpu = parse.count(config.get("cpu_workers", cpu_workers), "cpu_workers")
        if n_cpu > (os.cpu_count() or 1):  # each is a process: more than the cores is never what was meant
            raise ValueError(f"cpu_workers={n_cpu} is more than this machine's {os.cpu_count()} CPU cores")
        security = Security.temporary() if security is True else security or Security()
        if not isinstance(security, Security):
            raise TypeError(f"security must be a distributed.Security or True, not {type(security).__name__}")
        transports = {k: worker.get(k) for k in UCX_TRANSPORTS}
        protocol = implied_protocol(protocol, transports) or ("tls" if security.require_encryption else None)
        if host is None and not interface:
            host = "127.0.0.1"
        spec_cluster = {k: worker.pop(k) for k in list(worker) if k in SPEC_CLUSTER_KEYWORDS}
        dashboard_address = config.get("dashboard_address", dashboard_address)
        # host, interface and silence_logs go to every worker too: checked once, with the workers' keywords
        checks.cluster_keywords({"scheduler_port": scheduler_port, "dashboard_address": dashboard_address,
                                 "scheduler_kwargs": scheduler_kwargs, "processes": worker.get("processes"),
                                 **spec_cluster}, "LocalCUDACluster")
        workers = WorkerOptions.resolve(
            nthreads=threads_per_worker, memory_limit=parse.keyword_limit(memory_limit),
            device_memory_limit=parse.keyword_limit(device_memory_limit), protocol=protocol, host=host,
            interface=interface, security=security, silence_logs=silence_logs, **local_cluster_keywords(worker))
        keywords.check(workers.extra, "LocalCUDACluster", CLUSTER_KEYWORDS, workers.worker_class)
        checks.worker_keywords(workers.extra, "LocalCUDACluster")
        if workers.local_directory:
            machine.directory(workers.local_directory)
        return cls(workers=workers, cpu_workers=n_cpu, host=host, interface=interface, scheduler_port=scheduler_port,
                   dashboard_address=dashboard_address, security=security, silence_logs=silence_logs,
                   scheduler_kwargs=MappingProxyType(dict(scheduler_kwargs or {})),
                   worker_saturation=parse.saturation(config.get("worker_saturation", worker_saturation)),
                   spec_cluster=MappingProxyType(spec_cluster))


# Every keyword a LocalCUDACluster reads itself (its devices and worker count besides); others go to the workers
CLUSTER_KEYWORDS = frozenset({*inspect.signature(ClusterOptions.resolve).parameters, *KEYWORDS, *SPEC_CLUSTER_KEYWORDS,
                              "CUDA_VISIBLE_DEVICES", "n_workers", "processes", "worker_dashboard_address"}
                             - {"cls", "worker"})


def local_cluster_keywords(kwargs: dict) -> dict:
    """The worker keywords, with LocalCluster's own (that a LocalCluster user may pass) in dask-gpu's terms.

    ``processes=True`` is what dask-gpu does anyway; ``processes=False`` cannot give each worker its
    own GPU. ``worker_dashboard_address`` serves each worker's dashboard there.
    """
    worker = dict(kwargs)
    if "nthreads" in worker:  # WorkerOptions' own name for it, which would be given twice
        raise TypeError("LocalCUDACluster: 'nthreads' is the name dask gpu worker and CUDAWorker use; "
                        "LocalCUDACluster takes threads_per_worker=, as dask-cuda's and LocalCluster do")
    if not worker.pop("processes", True):
        raise ValueError("processes=False: each GPU worker needs a process of its own (its CUDA_VISIBLE_DEVICES); "
                         "drop processes=, or use distributed.LocalCluster for threads in one process")
    dashboard = worker.pop("worker_dashboard_address", None)
    worker.setdefault("dashboard", dashboard is not None)
    if dashboard is not None:
        worker["dashboard_address"] = dashboard
    return worker


def check_allocator_keywords(allocator: Mapping, ucx: Mapping) -> None:
    """dask-cuda's warning and error on allocator keywords that go badly together."""
    if allocator["rmm_async"] is True and allocator["rmm_pool_size"] is not None:
        warnings.warn("'rmm_pool_size' is not needed when 'rmm_async' is enabled and will raise an exception in "
                      "the future (as in dask-cuda): drop rmm_pool_size to silence this warning",
                      FutureWarning, stacklevel=4)
    if ucx.get("nvlink") and allocator["rmm_managed_memory"] is True:
        raise ValueError("rmm_managed_memory=True and enable_nvlink=True: CUDA managed memory cannot move "
                         "over NVLink; choose one")


def check_config_keys():
    """Refuse a ``gpu.*`` key that nothing reads: a misspelled key would be silently ignored."""
    known = sorted(config.defaults["gpu"])
    for key in config.namespace():
        name = str(key).replace("_", "-")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean gpu.{close[0]}?" if close else f"the keys are {', '.join(known)}"
            raise ValueError(f"unknown configuration key gpu.{key}: {hint}")


