"""The keywords dask-gpu hands on to distributed unchanged, checked by table in this process before anything
starts: each Nanny's and Worker's (``worker_keywords``, which every entry point calls) and a cluster's scheduler
and SpecCluster's (``cluster_keywords``). Each value goes through its parser: :mod:`dask_gpu.parse`'s for
sizes, durations, flags, addresses and the like, and the shape checks here for lists, mappings and counts."""

from __future__ import annotations

from collections.abc import Mapping

from dask_gpu.keywords import named_parameters
from dask_gpu.machine import interface, local_host, preloads
from dask_gpu.parse import address, close, dashboard_address, environment, flag, log_level, port, port_range, seconds


def _strings(value, what):
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings, not {value!r}")


def _mapping(value, what):
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a mapping, not {value!r}")


def _positive_count(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a whole number >= 1, not {value!r}")


def _ports(value, what):
    """A port, a range "9000:9010", or a list of ports, as a Nanny takes them."""
    if isinstance(value, (list, tuple)):
        return [port(v, what) for v in value]
    if isinstance(value, str) and ":" in value:
        return port_range(value, what)
    return port(value, what)


_WORKER_CHECKS = {
    **dict.fromkeys(["death_timeout", "lifetime", "heartbeat_interval", "timeout", "profile_cycle_interval"],
                    seconds),
    "lifetime_stagger": lambda v, what: seconds(v, what, zero=True),
    **dict.fromkeys(["lifetime_restart", "validate", "dashboard", "quiet", "reconnect", "low_level_profiler",
                     "needs_workdir"], flag),
    **dict.fromkeys(["preload", "preload_nanny"], preloads),
    **dict.fromkeys(["preload_argv", "preload_nanny_argv", "blocked_handlers"], _strings),
    "env": environment,
    "config": _mapping,
    "dashboard_address": dashboard_address,
    **dict.fromkeys(["contact_address", "listen_address"], address),
    "host": local_host,
    "interface": interface,
    **dict.fromkeys(["port", "worker_port"], _ports),
    "silence_logs": log_level,
    "connection_limit": _positive_count,
}


def worker_keywords(given: Mapping, owner: str) -> None:
    """Each keyword bound for every Nanny and Worker whose form is known, checked."""
    _each(given, _WORKER_CHECKS, owner)


def _each(given: Mapping, checks: Mapping, owner: str) -> None:
    for key, value in given.items():
        check = checks.get(key)
        if check is not None and value is not None:
            check(value, f"{owner}: {key}")


def _scheduler_kwargs(given, what: str) -> None:
    from distributed import Scheduler

    if not isinstance(given, Mapping):
        raise ValueError(f"{what} must be a mapping of Scheduler keywords, not {given!r}")
    known = named_parameters(Scheduler)
    for key in given:
        if key not in known:
            raise TypeError(f"{what}: {key!r} is not a keyword of distributed's Scheduler{close(key, sorted(known))}")


_CLUSTER_CHECKS = {  # host, interface and silence_logs are the workers' too, and checked as theirs
    "scheduler_port": port,
    "dashboard_address": dashboard_address,
    **dict.fromkeys(["asynchronous", "shutdown_on_close", "shutdown_scheduler", "processes"], flag),
    "scheduler_sync_interval": seconds,
    "scheduler_kwargs": _scheduler_kwargs,
}


def cluster_keywords(given: Mapping, owner: str) -> None:
    """The keywords of a cluster that its scheduler and SpecCluster read, checked."""
    _each(given, _CLUSTER_CHECKS, owner)
