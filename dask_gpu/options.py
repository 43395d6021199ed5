"""Worker options: one frozen dataclass, resolved defaults < dask config < keywords/CLI.

Every value is parsed and checked here, once, with errors that name the bad value;
the spec builder, the cluster and the CLI only read the result.
"""

from __future__ import annotations

import difflib
import inspect
import importlib.util
import math
import os
import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import dask
from dask.utils import byte_sizes

from dask_gpu import config
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
        transports = {UCX_TRANSPORTS[k]: parse_flag(v, k) for k, v in chosen.items()}
        asked = parse_protocol(config.get("protocol", protocol))
        ucx = parse_ucx(asked, transports)
        protocol = usable_protocol(asked)
        check_allocator_keywords(allocator, ucx)
        if extra.get("data") is not None and device_memory_limit not in (None, 0):
            warnings.warn(f"device_memory_limit={device_memory_limit!r} has no effect: the workers keep their data "
                          "in the data= given, which replaces dask-gpu's device tier", UserWarning, stacklevel=3)
        return cls(
            nthreads=parse_nthreads(config.get("nthreads", nthreads)),
            memory_limit=parse_memory_limit(config.get("memory_limit", memory_limit)),
            device_memory_limit=parse_device_memory_limit(config.get("device_memory_limit", device_memory_limit)),
            resources=MappingProxyType(parse_resources(config.get("resources", resources))),
            local_directory=parse_local_directory(config.get("local_directory", local_directory)),
            pre_import=parse_pre_import(config.get("pre_import", pre_import)),
            protocol=protocol,
            ucx=MappingProxyType(ucx if protocol in (None, *UCX_PROTOCOLS) else {}),  # none where it fell back to TCP
            cpu_affinity=parse_flag(config.get("cpu_affinity", cpu_affinity), "cpu_affinity"),
            allocator=MappingProxyType(allocator),
            cudf_spill=parse_flag(config.get("cudf_spill", enable_cudf_spill), "enable_cudf_spill"),
            cudf_spill_stats=parse_count(config.get("cudf_spill_stats", cudf_spill_stats), "cudf_spill_stats"),
            log_spilling=parse_flag(config.get("log_spilling", log_spilling), "log_spilling"),
            worker_class=parse_worker_class(worker_class),
            extra=MappingProxyType({k: v for k, v in extra.items() if v is not None}),
        )


# Every keyword WorkerOptions.resolve reads itself; the others go to each Nanny and Worker.
KEYWORDS = frozenset(
    {*inspect.signature(WorkerOptions.resolve).parameters, *ALLOCATOR_KEYS, *UCX_TRANSPORTS} - {"cls", "extra"})


def parse_nthreads(value) -> int:
    return parse_count(value, "threads per worker", minimum=1)


def parse_count(value, what: str, minimum: int = 0) -> int:
    """A whole number >= minimum, from an int or a string of digits."""
    number = value if isinstance(value, int) and not isinstance(value, bool) else _int_text(value)
    if number is None:
        raise ValueError(f"{what} must be a whole number >= {minimum}, not {value!r}")
    if number < minimum:
        raise ValueError(f"{what} must be >= {minimum}, not {value!r}")
    return number


def keyword_limit(value):
    """A memory limit as LocalCUDACluster and CUDAWorker take it, with dask-cuda's meaning.

    "default" (their default) leaves it to the ``gpu.*`` configuration; None or False mean
    no limit, as 0 does: no device tier, or no spilling to disk.
    """
    if isinstance(value, str) and value.strip().lower() == "default":
        return None
    return 0 if value is None or value is False else value


def check_allocator_keywords(allocator: Mapping, ucx: Mapping) -> None:
    """dask-cuda's warning and error on allocator keywords that go badly together."""
    if allocator["rmm_async"] is True and allocator["rmm_pool_size"] is not None:
        warnings.warn("'rmm_pool_size' is not needed when 'rmm_async' is enabled and will raise an exception in "
                      "the future (as in dask-cuda): drop rmm_pool_size to silence this warning",
                      FutureWarning, stacklevel=4)
    if ucx.get("nvlink") and allocator["rmm_managed_memory"] is True:
        raise ValueError("rmm_managed_memory=True and enable_nvlink=True: CUDA managed memory cannot move "
                         "over NVLink; choose one")


def _int_text(value) -> int | None:
    """The int a string of ASCII digits (an optional sign, spaces around) spells, else None."""
    text = value.strip() if isinstance(value, str) else ""
    return int(text) if re.fullmatch(r"[+-]?[0-9]{1,100}", text) else None


def parse_saturation(value) -> float | None:
    """Root tasks sent ahead to a worker per thread: a number > 0, "inf", or None (distributed's own)."""
    if value is None:
        return None
    try:
        number = float(value) if isinstance(value, (int, float, str)) else math.nan
    except (ValueError, OverflowError):
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
    """Bytes (int or "16GB"), a fraction of the device (0 < f <= 1, or "80%"), "auto" (all of it), or 0 (none).

    The fraction stays a fraction here: each device's own size turns it into bytes
    (:func:`device_memory_bytes`).
    """
    if value in (None, 0, "0") and not isinstance(value, bool):
        return 0
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return _size_or_fraction(value, "device_memory_limit")


def _size_or_fraction(value, what: str) -> int | float:
    """A fraction 0 < f <= 1 (a float, "0.5" or "50%") or a whole number of bytes (an int, 1e9, "16GB"): as
    dask-cuda reads them, 1 and "1" are one byte, 1.0 and "1.0" the whole device."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{what}={value!r} is not a size (bytes or '16GB') or a fraction between 0 and 1")
    text = value.strip().lower() if isinstance(value, str) else ""
    if text.endswith("%"):
        return _percent(text, what, value)
    if text and not _is_number(text):
        return _bytes(text, what)
    exact = value if isinstance(value, int) else _int_text(value)  # bytes beyond 2**53 stay exact
    if exact is not None and exact >= 0:
        return exact
    number = exact if exact is not None else _number(value, f"{what}={value!r}")
    if 0 < number <= 1:
        return float(number)
    if number < 0:
        raise ValueError(f"{what}={value!r} must not be negative")
    if number != int(number):
        raise ValueError(f"{what}={value!r}: a fraction must be between 0 and 1, a size a whole number of bytes")
    return int(number)


def _percent(text: str, what: str, value) -> float:
    fraction = _number(text[:-1], f"{what}={value!r}") / 100
    if not 0 < fraction <= 1:  # 5e-324% is 0.0: no limit
        raise ValueError(f"{what}={value!r}: a percentage must be between 0 and 100")
    return fraction


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


_SIZE = re.compile(r"(?P<number>\S+?)\s*(?P<unit>[a-z]*)")


def parse_size(value) -> int:
    """Bytes from an int, a whole float (1e9) or a string with an optional unit ("16GB", "1.5 GiB", "1e9").

    Stricter than dask's parse_bytes: a unit alone ("GB", or "" for a variable left empty)
    is not a size, nor is "1 2GB", and a positive size below one byte is refused rather than
    rounded down to 0, which means "no limit". Negative sizes are returned for the caller to refuse.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{value!r} is not a number of bytes")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        number = _number(value, "a size in bytes")
        if number != int(number):
            raise ValueError(f"{value!r} is not a whole number of bytes")
        return int(number)
    match = _SIZE.fullmatch(value.strip().lower())
    if not match or match["unit"] not in byte_sizes or not _is_number(match["number"]):
        raise ValueError(f"{value!r} is not a size: write a number and a unit, e.g. '16GB' or '1.5 GiB'")
    exact = _int_text(match["number"])  # bytes beyond 2**53 stay exact
    size = (exact if exact is not None else float(match["number"])) * byte_sizes[match["unit"]]
    if not math.isfinite(size):
        raise ValueError(f"{value!r} is not a finite size")
    if 0 < abs(size) < 1:  # int() would make it 0: no limit
        raise ValueError(f"{value!r} is less than one byte")
    return int(size)


def fraction_bytes(fraction: float, total: int, what: str) -> int:
    """``fraction`` of ``total`` bytes; an error where that is under one byte, since 0 means no limit."""
    size = int(total * fraction)
    if fraction > 0 and size == 0:
        raise ValueError(f"{what} ({fraction!r} of {total} bytes) is less than one byte: "
                         "give a larger fraction, or 0 for no limit")
    return size


def device_memory_bytes(limit, total: int, auto: float = 1.0) -> int:
    """The device memory limit in bytes for a device of ``total`` bytes; 0 means no limit.

    "auto" is the whole device, as in dask-cuda: data stays on the device until an allocation
    fails, and then spills.
    """
    fraction = auto if limit == "auto" else limit
    if isinstance(fraction, float):
        return fraction_bytes(fraction, total, f"device_memory_limit={limit!r}")
    if limit > total:
        raise ValueError(
            f"device_memory_limit={limit} bytes is larger than the device ({total} bytes): "
            "give a smaller size or a fraction such as 0.8"
        )
    return int(limit)


def parse_resources(value) -> dict[str, float]:
    """``{"MEM": 1e9}`` or the CLI's ``"MEM=1e9 FOO=2"`` (commas work too)."""
    if value is None:
        return {}
    if isinstance(value, str):
        value = _resource_pairs(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"resources must be a mapping like {{'MEM': 10e9}}, not {value!r}")
    return {_resource_name(name): _resource_amount(name, amount) for name, amount in value.items()}


def _resource_pairs(text: str) -> dict[str, str]:
    pairs = {}
    for item in text.replace(",", " ").split():
        name, sep, amount = item.partition("=")
        if not sep or not name:
            raise ValueError(f"resource {item!r} must look like NAME=AMOUNT, e.g. GPU=1 or MEM=10e9")
        if name in pairs:
            raise ValueError(f"resource {name!r} is given twice in {text!r}: give each once")
        pairs[name] = amount
    return pairs


def _resource_name(name) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"resource name {name!r} must be a non-empty string, e.g. 'MEM'")
    return name


def _resource_amount(name: str, amount) -> float:
    number = _number(amount, f"resource {name!r}")
    if number < 0:
        raise ValueError(f"resource {name!r} must be >= 0, not {amount}")
    return number


def parse_pre_import(value, check_installed: bool = True) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        names = value.replace(",", " ").split()
    elif isinstance(value, (list, tuple)):
        names = list(value)
    else:
        raise ValueError(f"pre_import must be module names ('json,numpy' or a list), not {value!r}")
    for name in names:
        if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
            raise ValueError(f"pre_import entry {name!r} is not a module name")
        if check_installed and _find_module(name) is None:  # workers share this Python: fail now, not in a worker
            error = PreImportError(f"pre_import: ModuleNotFoundError: No module named {name!r}: install it, or drop "
                                   "it from pre_import")
            error.name = name
            raise error
    return tuple(names)


class PreImportError(ValueError, ModuleNotFoundError):
    """A pre_import module that is not installed: a ValueError, and the ModuleNotFoundError a worker would raise."""


def parse_flag(value, what: str) -> bool:
    """True or False, not a string like "no" that bool() would read as True."""
    if not isinstance(value, bool):
        raise ValueError(f"{what} must be True or False, not {value!r}")
    return value


def parse_local_directory(value) -> str | None:
    """None (distributed's default) or a directory path."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if path is not None and (not isinstance(path, str) or not path.strip()):
        raise ValueError(f"local_directory must be a directory path, not {value!r}")
    return path


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


def _find_module(name: str):
    try:
        return importlib.util.find_spec(name)
    except ImportError:  # a missing parent package
        return None


def _number(value, what: str) -> float:
    try:
        if isinstance(value, (bool, bytes, bytearray)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, not {value!r}") from None
    except OverflowError:  # an int too large for a float
        number = math.inf
    if not math.isfinite(number):
        raise ValueError(f"{what} must be a finite number, not {value!r}")
    return number


def _bytes(text: str, what: str) -> int:
    try:
        size = parse_size(text)
    except ValueError as e:  # e names the text: "'gb' is not a size: ..."
        raise ValueError(f"{what}={e}") from None
    if size < 0:
        raise ValueError(f"{what}={text!r} must not be negative")
    return size
