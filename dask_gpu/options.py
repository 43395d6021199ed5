"""Worker options: one frozen dataclass, resolved defaults < dask config < keywords/CLI.

Every value is parsed and checked here, once, with errors that name the bad value;
the spec builder, the cluster and the CLI only read the result.
"""

from __future__ import annotations

import importlib.util
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from dask.utils import parse_bytes

from dask_gpu import config

ALLOCATOR_KEYS = (
    "allocator",
    "rmm_pool_size",
    "rmm_maximum_pool_size",
    "rmm_managed_memory",
    "rmm_async",
    "rmm_release_threshold",
    "rmm_log_directory",
    "rmm_track_allocations",
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
    # UCX transports chosen by hand (distributed-ucxx config keys); empty: UCX picks them.
    ucx: Mapping[str, bool] = field(default_factory=dict)
    cpu_affinity: bool = True
    # Allocator keywords (ALLOCATOR_KEYS), checked per device by memory.allocator.resolve_allocator.
    allocator: Mapping[str, object] = field(default_factory=dict)
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
        **extra,
    ) -> WorkerOptions:
        """Build options from keywords, falling back to ``gpu.*`` config for each left as None."""
        allocator = {key: config.get(key, extra.pop(key, None)) for key in ALLOCATOR_KEYS}
        transports = {UCX_TRANSPORTS[k]: bool(v) for k in UCX_TRANSPORTS if (v := extra.pop(k, None)) is not None}
        protocol = parse_protocol(config.get("protocol", protocol))
        ucx = parse_ucx(protocol, transports)
        return cls(
            nthreads=parse_nthreads(config.get("nthreads", nthreads)),
            memory_limit=parse_memory_limit(config.get("memory_limit", memory_limit)),
            device_memory_limit=parse_device_memory_limit(config.get("device_memory_limit", device_memory_limit)),
            resources=MappingProxyType(parse_resources(config.get("resources", resources))),
            local_directory=config.get("local_directory", local_directory),
            pre_import=parse_pre_import(config.get("pre_import", pre_import)),
            protocol=usable_protocol(protocol),
            ucx=MappingProxyType(ucx),
            cpu_affinity=bool(config.get("cpu_affinity", cpu_affinity)),
            allocator=MappingProxyType(allocator),
            extra=MappingProxyType({k: v for k, v in extra.items() if v is not None}),
        )


def parse_nthreads(value) -> int:
    return parse_count(value, "threads per worker", minimum=1)


def parse_count(value, what: str, minimum: int = 0) -> int:
    """A whole number >= minimum, from an int or a string of digits."""
    text = str(value).strip()
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not text.lstrip("-").isdigit():
        raise ValueError(f"{what} must be a whole number >= {minimum}, not {value!r}")
    if int(text) < minimum:
        raise ValueError(f"{what} must be >= {minimum}, not {value!r}")
    return int(text)


def parse_saturation(value) -> float | None:
    """Root tasks sent ahead to a worker per thread: a number > 0, "inf", or None (distributed's own)."""
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = math.nan
    if isinstance(value, bool) or not number > 0:
        raise ValueError(f"worker_saturation must be a number > 0 or 'inf', not {value!r}")
    return number


def parse_memory_limit(value) -> int | float | str:
    """Host memory per worker: bytes (int or "16GB"), a fraction of the machine (0-1, "50%"),
    or "auto" (the machine's memory split evenly); 0 or None means no limit."""
    if value in (None, 0, "0", "none", "None") and not isinstance(value, bool):
        return 0
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return _size_or_fraction(value, "memory_limit")


def parse_device_memory_limit(value) -> int | float | str:
    """Bytes (int or "16GB"), a fraction of the device (0 < f <= 1, or "80%"), "auto", or 0 (none).

    The fraction stays a fraction here: each device's own size turns it into bytes
    (:func:`device_memory_bytes`).
    """
    if value in (None, 0, "0") and not isinstance(value, bool):
        return 0
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return _size_or_fraction(value, "device_memory_limit")


def _size_or_fraction(value, what: str) -> int | float:
    """A fraction 0 < f <= 1 (a number, "0.5" or "50%") or a whole number of bytes (1e9, "16GB")."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what}={value!r} is not a size (bytes or '16GB') or a fraction between 0 and 1")
    number = value
    if isinstance(value, str):
        text = value.strip().lower()
        if text.endswith("%"):
            percent = _number(text[:-1], f"{what}={value!r}")
            if not 0 < percent <= 100:
                raise ValueError(f"{what}={value!r}: a percentage must be between 0 and 100")
            return percent / 100
        try:
            number = float(text)
        except ValueError:
            return _bytes(text, what)
    number = _number(number, f"{what}={value!r}")
    if 0 < number <= 1:
        return float(number)
    if not number.is_integer():
        raise ValueError(f"{what}={value!r}: a fraction must be between 0 and 1, a size a whole number of bytes")
    return _bytes(int(number), what)


def device_memory_bytes(limit, total: int, auto: float = 0.8) -> int:
    """The device memory limit in bytes for a device of ``total`` bytes; 0 means no limit."""
    if limit == "auto":
        limit = auto
    if isinstance(limit, float):
        return int(total * limit)
    if limit > total:
        raise ValueError(
            f"device_memory_limit={limit} bytes is larger than the device ({total} bytes): "
            "give a smaller size or a fraction such as 0.8"
        )
    return int(limit)


def parse_resources(value) -> dict[str, float]:
    """``{"MEM": 1e9}`` or the CLI's ``"MEM=1e9 FOO=2"`` (commas work too)."""
    if not value:
        return {}
    if isinstance(value, str):
        pairs = []
        for item in value.replace(",", " ").split():
            name, sep, amount = item.partition("=")
            if not sep or not name:
                raise ValueError(f"resource {item!r} must look like NAME=AMOUNT, e.g. GPU=1 or MEM=10e9")
            pairs.append((name, amount))
        value = dict(pairs)
    if not isinstance(value, Mapping):
        raise ValueError(f"resources must be a mapping like {{'MEM': 10e9}}, not {value!r}")
    out = {}
    for name, amount in value.items():
        amount = _number(amount, f"resource {name!r}")
        if amount < 0:
            raise ValueError(f"resource {name!r} must be >= 0, not {amount}")
        out[str(name)] = amount
    return out


def parse_pre_import(value) -> tuple[str, ...]:
    if not value:
        return ()
    names = value.replace(",", " ").split() if isinstance(value, str) else list(value)
    for name in names:
        if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"pre_import entry {name!r} is not a module name")
        if _find_module(name) is None:  # workers share this Python: fail now, not in a worker
            raise ValueError(f"pre_import: module {name!r} is not installed")
    return tuple(names)


def _find_module(name: str):
    try:
        return importlib.util.find_spec(name)
    except ImportError:  # a missing parent package
        return None


def parse_protocol(value) -> str | None:
    if value is None:
        return None
    protocol = str(value).strip().lower().removesuffix("://")
    if protocol not in ("tcp", "tls", "ucx", "ucxx", "inproc", "ws", "wss"):
        raise ValueError(f"protocol {value!r} is not one of tcp, tls, ucx, inproc, ws, wss")
    return protocol


# dask-cuda's keywords for choosing UCX transports -> distributed-ucxx's configuration keys
UCX_TRANSPORTS = {
    "enable_tcp_over_ucx": "tcp",
    "enable_nvlink": "nvlink",
    "enable_infiniband": "infiniband",
    "enable_rdmacm": "rdmacm",
}


def parse_ucx(protocol: str | None, transports: Mapping[str, bool]) -> dict:
    """The UCX transports asked for, which only mean something with protocol='ucx'."""
    if transports and protocol not in ("ucx", "ucxx"):
        names = ", ".join(k for k, v in UCX_TRANSPORTS.items() if v in transports)
        raise ValueError(f"{names} choose UCX transports: they need protocol='ucx', not {protocol!r}")
    return dict(transports)


def usable_protocol(protocol: str | None) -> str | None:
    """``protocol``, or TCP with a warning where UCX is asked for and distributed-ucxx is missing."""
    if protocol in ("ucx", "ucxx") and importlib.util.find_spec("distributed_ucxx") is None:
        warnings.warn(
            f"protocol={protocol!r} needs the distributed-ucxx package (pip install distributed-ucxx-cu12 "
            "or distributed-ucxx-cu13); running over TCP instead",
            UserWarning,
            stacklevel=3,
        )
        return "tcp"
    return protocol


def _number(value, what: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, not {value!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise ValueError(f"{what} must be a finite number, not {value!r}")
    return number


def _bytes(value, what: str) -> int:
    try:
        size = parse_bytes(value) if isinstance(value, str) else int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{what}={value!r} is not a size: use bytes or a string like '16GB'") from None
    if size < 0:
        raise ValueError(f"{what}={value!r} must not be negative")
    return size
