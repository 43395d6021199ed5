"""Worker options: one frozen dataclass, resolved defaults < dask config < keywords/CLI.

Every value is parsed and checked here, once, by :mod:`dask_gpu.parse`, with errors that name the bad value;
the spec builder, the cluster and the CLI only read the result.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import dask

from dask_gpu import config, parse
from dask_gpu.keywords import parse_worker_class
from dask_gpu.ucx import UCX_PROTOCOLS, UCX_TRANSPORTS, parse_protocol, parse_ucx, usable_protocol

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
    nthreads: int = 1
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
        asked = parse_protocol(config.get("protocol", protocol))
        ucx = parse_ucx(asked, transports)
        protocol = usable_protocol(asked)
        check_allocator_keywords(allocator, ucx)
        if extra.get("data") is not None and device_memory_limit not in (None, 0):
            warnings.warn(f"device_memory_limit={device_memory_limit!r} has no effect: the workers keep their data "
                          "in the data= given, which replaces dask-gpu's device tier", UserWarning, stacklevel=3)
        return cls(
            nthreads=parse.nthreads(config.get("nthreads", nthreads)),
            memory_limit=parse.memory_limit(config.get("memory_limit", memory_limit)),
            device_memory_limit=parse.device_memory_limit(config.get("device_memory_limit", device_memory_limit)),
            resources=MappingProxyType(parse.resources(config.get("resources", resources))),
            local_directory=parse.local_directory(config.get("local_directory", local_directory)),
            pre_import=parse.pre_import(config.get("pre_import", pre_import)),
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
    given = dask.config.get("gpu", {})
    if not isinstance(given, Mapping):
        raise ValueError(f"the gpu configuration must map gpu.* keys to values, not {given!r}")
    for key in given:
        name = str(key).replace("_", "-")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"did you mean gpu.{close[0]}?" if close else f"the keys are {', '.join(known)}"
            raise ValueError(f"unknown configuration key gpu.{key}: {hint}")


