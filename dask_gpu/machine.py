"""Values checked against this machine, where :mod:`dask_gpu.parse` reads only what a value says: an address a
server here can listen on, a network interface it has, a directory the workers can write in (made now), and
modules and files that exist."""

from __future__ import annotations

import os
import socket
from importlib.util import find_spec

from dask_gpu import parse


def local_host(value, what: str = "host") -> str:
    """A host (as :func:`dask_gpu.parse.host` reads it) that names an address of this machine: one a server here can
    listen on."""
    value = parse.host(value, what)
    try:
        family, kind, _, _, address = socket.getaddrinfo(value.strip().strip("[]"), 0, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as probe:
            probe.bind(address)
    except OSError as e:  # gaierror: no such name; EADDRNOTAVAIL: another machine's address
        raise ValueError(f"{what}={value!r} is not an address of this machine ({e.strerror or e}): give one of "
                         "its addresses, e.g. '127.0.0.1', or '0.0.0.0' for every interface") from None
    return value


def interface(value, what: str = "interface") -> str:
    """A network interface of this machine, as psutil lists them."""
    import psutil

    names = sorted(psutil.net_if_addrs())
    if not isinstance(value, str) or value not in names:
        raise ValueError(f"{what}={value!r} is not a network interface of this machine: it has "
                         f"{', '.join(names)}{parse.close(value, names)}")
    return value


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
        elif not all(part.isidentifier() for part in item.split(".")) or not installed(item):
            raise ValueError(f"{what}: {item!r} is not an installed module (nor a .py file or a URL)")
    return list(items)


def installed(name: str) -> bool:
    """Whether module ``name`` is importable in this Python."""
    try:
        return find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package
        return False


def pre_import(value) -> tuple[str, ...]:
    """The module names of :func:`dask_gpu.parse.pre_import`, each installed: workers share this Python, so a
    missing one fails now, not in a worker."""
    names = parse.pre_import(value)
    for name in names:
        if not installed(name):
            error = PreImportError(f"pre_import: ModuleNotFoundError: No module named {name!r}: install it, or drop "
                                   "it from pre_import")
            error.name = name
            raise error
    return names


class PreImportError(ValueError, ModuleNotFoundError):
    """A pre_import module that is not installed: a ValueError, and the ModuleNotFoundError a worker would raise."""
