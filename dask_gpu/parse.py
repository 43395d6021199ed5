"""The value parsers that every entry point calls: the options, the cluster, the CLI and the compat layer. They
read what a value says, and ask nothing of the machine (:mod:`dask_gpu.machine` checks values against it).

Sizes (bytes, "16GB"), fractions of a device or of the machine, counts, durations, flags, resources, pre-import
module names, ``CUDA_VISIBLE_DEVICES`` and simulated devices, and what dask-gpu hands on to distributed unchanged:
the cluster's scheduler port, host, dashboard address, log level and scheduler keywords, and each Nanny's and
Worker's timeouts, environment and ports. distributed reads those only in the scheduler or in each worker process,
where a wrong one is a trace per worker ("Nanny failed to start"). Here each is one ValueError (TypeError for an
unknown keyword), in the calling process before anything starts, naming the keyword, its valid forms and, where
there is one, the closest valid value.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import os
import re
from collections.abc import Mapping

from dask.utils import byte_sizes, parse_timedelta
from distributed.comm.addressing import unparse_host_port

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


def protocol(value) -> str | None:
    """A comm protocol, as a cluster's ``protocol=`` names it ("ucx", "tcp://"); None: distributed's default."""
    if value is None:
        return None
    name = str(value).strip().lower().removesuffix("://")
    if name not in PROTOCOLS:
        raise ValueError(f"protocol {value!r} is not one of tcp, tls, ucx, inproc, ws, wss")
    return name


def choice(value, choices, what: str) -> str | None:
    """One of ``choices``, in any case; None where not given."""
    if value is None:
        return None
    name = value.strip().lower() if isinstance(value, str) else None
    if name not in choices:
        raise ValueError(f"{what}={value!r} is not one of {', '.join(map(repr, choices))}")
    return name


def name_list(value) -> tuple[str, ...] | None:
    """Names given as "a,b" (each stripped, blanks dropped) or a list; None where none is given. Whether they are
    known is the caller's to say."""
    if value is None:
        return None
    names = tuple(v.strip() for v in value.split(",") if v.strip()) if isinstance(value, str) else tuple(value)
    return names or None


def counts(value, what: str, kind: str = "whole numbers") -> list[int]:
    """Whole numbers (of ``kind``) given as "1,2,4" or one, sorted, each once."""
    try:
        return sorted({int(part) for part in str(value).split(",")})
    except ValueError:
        raise ValueError(f"{what} takes {kind} separated by commas, such as 1,2,4, not {value!r}") from None


def names_among(value, choices, what: str, kind: str = "names") -> tuple[str, ...] | None:
    """Names among ``choices`` (of ``kind``), as "a,b" or a list, each once; None where not given."""
    if value is None:
        return None
    names = list(name_list(value) or ()) if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and n in choices for n in names):
        raise ValueError(f"{what}={value!r} must name {kind} among {', '.join(choices)}, as "
                         f"{','.join(reversed(choices))!r} or {list(reversed(choices))!r}")
    return tuple(dict.fromkeys(names))


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


def on_host(address, host: str | None):
    """A dashboard address that names only a port (":8788", 8788), on ``host``.

    distributed reads a bare port as every interface: a cluster or worker kept on 127.0.0.1
    must not show its dashboard to the network because a port was chosen.
    """
    port = str(address).removeprefix(":")
    return unparse_host_port(host, int(port)) if host and port.isdigit() else address


def log_level(value, what: str = "silence_logs"):
    """False or None (leave the logs alone), a level (logging.WARN, 30) or its name ("warning")."""
    if value is None or isinstance(value, bool) or (isinstance(value, int) and value >= 0):
        return value
    names = ["critical", "error", "warning", "warn", "info", "debug"]
    if isinstance(value, str) and value.strip().lower() in names:
        return value
    raise ValueError(f"{what}={value!r} is not a log level: give one of {', '.join(names)}, a number, or False"
                     f"{close(str(value).lower(), names)}")


def environment(value, what: str = "env") -> Mapping:
    """Environment variables for the worker processes: names to values (written as text)."""
    if not isinstance(value, Mapping):
        raise ValueError(f"{what} must be a mapping of variable names to values, like {{'OMP_NUM_THREADS': '1'}}, "
                         f"not {value!r}")
    for name in value:
        if not isinstance(name, str) or not name or "=" in name or "\0" in name:
            raise ValueError(f"{what}: {name!r} is not an environment variable name")
    return value


# -- sizes, counts, modules -------------------------------------------------------------------


def nthreads(value) -> int:
    return count(value, "threads per worker", minimum=1)


def count(value, what: str, minimum: int = 0) -> int:
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


def _int_text(value) -> int | None:
    """The int a string of ASCII digits (an optional sign, spaces around) spells, else None."""
    text = value.strip() if isinstance(value, str) else ""
    return int(text) if re.fullmatch(r"[+-]?[0-9]{1,100}", text) else None


def saturation(value) -> float | None:
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


def memory_limit(value) -> int | float | str:
    """Host memory per worker: bytes (int or "16GB"), a fraction of the machine (0-1, "50%"),
    or "auto" (the machine's memory split evenly); 0 or None means no limit."""
    if value in (None, 0, "0", "none", "None") and not isinstance(value, bool):
        return 0
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return size_or_fraction(value, "memory_limit")


def device_memory_limit(value) -> int | float | str:
    """Bytes (int or "16GB"), a fraction of the device (0 < f <= 1, or "80%"), "auto" (all of it), or 0 (none).

    The fraction stays a fraction here: each device's own size turns it into bytes
    (:func:`device_memory_bytes`).
    """
    if value in (None, 0, "0") and not isinstance(value, bool):
        return 0
    if isinstance(value, str) and value.strip().lower() == "auto":
        return "auto"
    return size_or_fraction(value, "device_memory_limit")


def size_or_fraction(value, what: str) -> int | float:
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


def size(value) -> int:
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
    nbytes = (exact if exact is not None else float(match["number"])) * byte_sizes[match["unit"]]
    if not math.isfinite(nbytes):
        raise ValueError(f"{value!r} is not a finite size")
    if 0 < abs(nbytes) < 1:  # int() would make it 0: no limit
        raise ValueError(f"{value!r} is less than one byte")
    return int(nbytes)


def in_bytes(size, total: int) -> int:
    """A size as :func:`size_or_fraction` gives one, in bytes: a fraction (a float) of ``total``, or bytes."""
    return int(size * total) if isinstance(size, float) else size


def fraction_bytes(fraction: float, total: int, what: str) -> int:
    """``fraction`` of ``total`` bytes; an error where that is under one byte, since 0 means no limit."""
    nbytes = in_bytes(float(fraction), total)
    if fraction > 0 and nbytes == 0:
        raise ValueError(f"{what} ({fraction!r} of {total} bytes) is less than one byte: "
                         "give a larger fraction, or 0 for no limit")
    return nbytes


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


def resources(value) -> dict[str, float]:
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


def pre_import(value) -> tuple[str, ...]:
    """Module names, from ``"json,numpy"`` or a list (whether they are installed is
    :func:`dask_gpu.machine.pre_import`'s to say)."""
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
    return tuple(names)


def local_directory(value) -> str | None:
    """None (distributed's default) or a directory path."""
    path = os.fspath(value) if isinstance(value, os.PathLike) else value
    if path is not None and (not isinstance(path, str) or not path.strip()):
        raise ValueError(f"local_directory must be a directory path, not {value!r}")
    return path



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
        value = size(text)
    except ValueError as e:  # e names the text: "'gb' is not a size: ..."
        raise ValueError(f"{what}={e}") from None
    if value < 0:
        raise ValueError(f"{what}={text!r} must not be negative")
    return value


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


# --- devices -------------------------------------------------------------------------------------

def own_device_token(value: str | None) -> str | None:
    """The first entry of ``CUDA_VISIBLE_DEVICES`` (``value``; a worker's own GPU, which its cluster puts first),
    stripped; None where it is unset or names none."""
    first = (value or "").split(",")[0].strip()
    return first or None


def visible_devices(value) -> tuple[str, ...] | None:
    """``CUDA_VISIBLE_DEVICES`` as tokens: ints, ``GPU-`` and ``MIG-`` UUIDs (or their prefixes).

    Accepts "0,1", "GPU-8a3f", [0, 1] or None (None: not set). Raises ValueError naming a bad entry.
    """
    if value is None:
        return None
    given = value
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, str):
        value = value.split(",") if value.strip() else []
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f"CUDA_VISIBLE_DEVICES must be a string like '0,1', a device index or a list of them, not {value!r}"
        )
    tokens = []
    for raw in value:
        token = str(raw).strip()
        if isinstance(raw, bool) or not _device_token(token):
            raise ValueError(
                f"CUDA_VISIBLE_DEVICES entry {raw!r} (of {given!r}) is not a device: use a GPU index (0, 1, ...), "
                "a GPU UUID ('GPU-...') or a MIG UUID ('MIG-...'), separated by commas"
            )
        if token in tokens:
            raise ValueError(f"CUDA_VISIBLE_DEVICES names device {token!r} twice")
        tokens.append(token)
    return tuple(tokens)


def is_index(token: str) -> bool:
    """ASCII digits only: CUDA reads no other digits, though str.isdigit() takes "²" and int() "٣"."""
    return token.isascii() and token.isdigit()


def _device_token(token: str) -> bool:
    if is_index(token):
        return True
    prefix, _, rest = token.partition("-")
    return prefix.upper() in ("GPU", "MIG") and bool(rest)


def simulated_sizes(spec, memory: int, most: int) -> list[int]:
    """``gpu.simulate``'s devices' memory sizes: a count (4, "4", 4.0) of devices of ``memory`` bytes, or a list of
    sizes (["16GB", 8e9] or "16GB,8GB"); at most ``most`` devices."""
    given = spec
    if isinstance(spec, str):
        text = spec.strip()
        spec = [t.strip() for t in text.split(",") if t.strip()]
        if is_index(text):
            spec = int(text) if len(text) <= 9 else most + 1  # int() refuses 4300 digits
    if isinstance(spec, float) and spec.is_integer():
        spec = int(spec)
    if isinstance(spec, bool) or not isinstance(spec, (int, list, tuple)):
        raise ValueError(f"gpu.simulate must be a count or a list of memory sizes, not {given!r}")
    count = spec if isinstance(spec, int) else len(spec)
    if count < 0:
        raise ValueError(f"gpu.simulate must be a count >= 0, not {given!r}")
    if count > most:
        raise ValueError(
            f"gpu.simulate={given!r} asks for more than {most} devices: for one device of "
            "a memory size, give the size with a unit, e.g. '16GiB'"
        )
    if isinstance(spec, int):
        return [memory] * spec
    return [_simulated_size(s) for s in spec]


def _simulated_size(value) -> int:
    try:
        found = size(value)
    except ValueError:
        raise ValueError(
            f"gpu.simulate entry {value!r} is not a memory size (e.g. '16GB' or 17179869184)"
        ) from None
    if found <= 0:
        raise ValueError(f"gpu.simulate entry {value!r} must be a positive memory size")
    return found
