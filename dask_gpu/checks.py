"""Checks of what dask-gpu hands on to distributed unchanged, made in this process before anything starts.

The cluster's scheduler port, host, interface, dashboard address, log level and scheduler keywords, and
each Nanny's and Worker's timeouts, flags, preloads, environment, ports and directory, are read by
distributed only in the scheduler or in each worker process, where a wrong one is a trace per worker
("Nanny failed to start"). Here it is one ValueError (TypeError for an unknown keyword) naming the
keyword, its valid forms and, where there is one, the closest valid value.
"""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Mapping
from importlib.util import find_spec

from dask.utils import parse_timedelta

from dask_gpu.keywords import named_parameters

_HOSTNAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*\.?")
PROTOCOLS = ("tcp", "tls", "ucx", "ucxx", "inproc", "ws", "wss")


def close(value, choices) -> str:
    """"; did you mean 'x'?" for the closest of ``choices``, or ""."""
    found = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
    return f"; did you mean {found[0]!r}?" if found else ""


# -- values ------------------------------------------------------------------------------------


def seconds(value, what: str, zero: bool = False) -> float:
    """A duration: seconds (a number) or dask's text ("60s", "1 minute"); > 0, or >= 0 with ``zero``."""
    try:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError
        number = float(parse_timedelta(value, default="seconds"))
    except (TypeError, ValueError, KeyError, IndexError, OverflowError):
        number = float("nan")
    if not (0 <= number < float("inf") if zero else 0 < number < float("inf")):
        raise ValueError(f"{what}={value!r} is not a duration: give seconds {'>= 0' if zero else '> 0'} "
                         "(60) or a duration like '60s' or '1 minute'")
    return number


def flag(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be True or False, not {value!r}")
    return value


def port(value, what: str) -> int:
    """A port, 0 (any free one) to 65535: an int or a string of digits."""
    text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else ""
    if not text.isascii() or not text.isdigit() or len(text) > 5 or int(text) > 65535:
        raise ValueError(f"{what}={value!r} is not a port: give a number from 0 (any free port) to 65535")
    return int(text)


def host(value, what: str = "host") -> str:
    """An IP address or a host name, as the scheduler and workers bind to it."""
    if isinstance(value, str) and value.strip():
        text = value.strip().strip("[]")
        try:
            ipaddress.ip_address(text)
            return value
        except ValueError:
            if len(text) <= 253 and _HOSTNAME.fullmatch(text):
                return value
    raise ValueError(f"{what}={value!r} is not a host: give an IP address or a host name, e.g. '127.0.0.1' "
                     "(this machine only) or '0.0.0.0' (every interface)")


def interface(value, what: str = "interface") -> str:
    """A network interface of this machine, as psutil lists them."""
    import psutil

    names = sorted(psutil.net_if_addrs())
    if not isinstance(value, str) or value not in names:
        raise ValueError(f"{what}={value!r} is not a network interface of this machine: it has "
                         f"{', '.join(names)}{close(value, names)}")
    return value


def address(value, what: str, default_port: int | None = None) -> str:
    """An address like tcp://host:8786 (the scheme may be left out: tcp)."""
    from distributed.comm.addressing import parse_address, parse_host_port

    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what}={value!r} is not an address: give one like tcp://10.0.0.1:8786")
    scheme, location = parse_address(value.strip(), strict=False)
    if scheme not in PROTOCOLS:
        raise ValueError(f"{what}={value!r}: {scheme!r} is not a protocol of distributed: give "
                         f"{', '.join(p + '://' for p in PROTOCOLS)}{close(scheme, PROTOCOLS)}")
    if scheme in ("tcp", "tls", "ucx", "ucxx", "ws", "wss"):
        try:
            name, number = parse_host_port(location, default_port)
        except ValueError:
            raise ValueError(f"{what}={value!r} names no port: give one like {scheme}://10.0.0.1:8786") from None
        try:
            host(name)
        except ValueError:
            raise ValueError(f"{what}={value!r}: {name!r} is not a host: give an IP address or a host name, "
                             f"e.g. {scheme}://10.0.0.1:8786") from None
        port(number, f"{what} {value!r}: port")
    return value


def dashboard_address(value, what: str = "dashboard_address"):
    """False or None (no dashboard), a port (8787, ":8787") or host:port."""
    if value is None or value is False:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        port(value, what)
        return value
    if isinstance(value, str):
        text = value.strip()
        name, sep, number = text.rpartition(":")
        if not sep:
            name, number = "", text
        try:
            if name:
                host(name, what)
            port(number, what)
            return value
        except ValueError:
            pass
    raise ValueError(f"{what}={value!r} is not a dashboard address: give ':8787', 'host:8787', a port, or False "
                     "for none")


def log_level(value, what: str = "silence_logs"):
    """False or None (leave the logs alone), a level (logging.WARN, 30) or its name ("warning")."""
    if value is None or isinstance(value, bool) or (isinstance(value, int) and value >= 0):
        return value
    names = ["critical", "error", "warning", "warn", "info", "debug"]
    if isinstance(value, str) and value.strip().lower() in names:
        return value
    raise ValueError(f"{what}={value!r} is not a log level: give one of {', '.join(names)}, a number, or False"
                     f"{close(str(value).lower(), names)}")


def directory(value, what: str = "local_directory") -> str:
    """A directory the workers can write in: made here now (distributed would make it in each worker)."""
    try:
        os.makedirs(value, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{what}={value!r} cannot be made ({e.strerror}): give a directory the workers can "
                         "write in") from None
    if not os.access(value, os.W_OK | os.X_OK):
        raise ValueError(f"{what}={value!r} is not writable: give a directory the workers can write in")
    return value


def preloads(value, what: str) -> list:
    """Module names, .py files or URLs, as distributed's preload takes them; modules and files must exist."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(v, str) and v.strip() for v in items):
        raise ValueError(f"{what}={value!r} must be a module name, a .py file or a URL, or a list of them")
    for item in items:
        if "://" in item:
            continue
        if item.endswith(".py") or os.sep in item:
            if not os.path.isfile(item):
                raise ValueError(f"{what}: the file {item!r} does not exist")
        elif not all(part.isidentifier() for part in item.split(".")) or _find(item) is None:
            raise ValueError(f"{what}: {item!r} is not an installed module (nor a .py file or a URL)")
    return list(items)


def environment(value, what: str = "env") -> Mapping:
    """Environment variables for the worker processes: names to values (written as text)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a mapping of variable names to values, like {{'OMP_NUM_THREADS': '1'}}, "
                         f"not {value!r}")
    for name in value:
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"{what}: {name!r} is not an environment variable name")
    return value


def _find(name: str):
    try:
        return find_spec(name)
    except (ImportError, ValueError):  # a missing parent package
        return None


# -- keywords ---------------------------------------------------------------------------------------


def _strings(value, what):
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what} must be a list of strings, not {value!r}")


def _mapping(value, what):
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a mapping, not {value!r}")


def _positive_count(value, what):
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} must be a whole number >= 1, not {value!r}")


def port_range(spec, flag: str) -> range:
    """A port (9000) or a range ("9000:9010") as ports, checked before any is listed: 1:10**12 is an error."""
    text = str(spec) if isinstance(spec, (int, str)) and not isinstance(spec, bool) else ""
    match = re.fullmatch(r"\s*([0-9]{1,20})\s*(?::\s*([0-9]{1,20})\s*)?", text)
    if not match:
        raise ValueError(f"{flag} {spec!r} is not a port or a range like 9000:9010")
    first, last = int(match[1]), int(match[2] or match[1])
    bad = [p for p in (first, last) if not 0 < p < 65536]
    if bad:
        raise ValueError(f"{flag} {spec!r}: port {bad[0]} is outside 1-65535")
    if last < first:
        raise ValueError(f"{flag} {spec!r}: a range's last port must be above its first, e.g. 9000:9010")
    return range(first, last + 1)


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
    "host": host,
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


_CLUSTER_CHECKS = {
    "host": host,
    "interface": interface,
    "scheduler_port": port,
    "dashboard_address": dashboard_address,
    "silence_logs": log_level,
    **dict.fromkeys(["asynchronous", "shutdown_on_close", "shutdown_scheduler", "processes"], flag),
    "scheduler_sync_interval": seconds,
    "scheduler_kwargs": _scheduler_kwargs,
}


def cluster_keywords(given: Mapping, owner: str) -> None:
    """The keywords of a cluster that its scheduler and SpecCluster read, checked."""
    _each(given, _CLUSTER_CHECKS, owner)
