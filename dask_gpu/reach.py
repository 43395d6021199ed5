"""Reaching a running scheduler before any worker starts: its address from a scheduler file, then one
connection, each within a bound.

distributed's Nanny reads a scheduler file in its constructor, waiting for it without end unless given a
death timeout, and blocking the event loop meanwhile; an address it cannot reach fails after the connect
timeout as "Nanny failed to start", one trace per worker, naming neither the address nor the timeout.
Here each is one :class:`SchedulerError` line that names the file or the address and the time waited.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time

import dask

from dask_gpu import parse

logger = logging.getLogger("dask_gpu")
POLL = 0.1  # seconds between looks at a scheduler file that is not there yet
# seconds a scheduler file may stay there and unreadable as a scheduler's before it is reported, whatever the
# time allowed: longer than a scheduler takes to write one
SETTLE = 1.0


class SchedulerError(RuntimeError):
    """The scheduler's file or address leads nowhere, in the time allowed."""


def check_file_can_appear(path: str) -> None:
    """A ValueError now where the scheduler file's directory does not exist: the file can never appear."""
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise ValueError(f"scheduler_file={path!r} is not a file path")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"scheduler file {str(path)!r}: its directory {folder!r} does not exist, so no scheduler "
                         "can write it there; give the path that dask scheduler --scheduler-file writes")
    if os.path.isdir(path):
        raise ValueError(f"scheduler file {str(path)!r} is a directory: give the file that dask scheduler "
                         "--scheduler-file writes")


def bound(death_timeout=None) -> tuple[float, str]:
    """How long to wait for the scheduler, and what set it: --death-timeout, else the connect timeout."""
    if death_timeout is not None:
        return parse.seconds(death_timeout, "death_timeout"), "--death-timeout"
    key = "distributed.comm.timeouts.connect"
    return parse.seconds(dask.config.get(key), key), f"{key}; --death-timeout waits longer"


async def address_from_file(path: str, timeout: float, why: str) -> str:
    """The address in the scheduler file at ``path``, waiting up to ``timeout`` s for it to appear and hold one."""
    start = time.monotonic()
    deadline, wrong_since, said = start + timeout, None, False
    while True:
        problem, address = _read(path)
        if address:
            return address
        now = time.monotonic()
        wrong_since = None if problem == "does not exist" else (wrong_since or now)
        if wrong_since is not None and now - wrong_since >= min(SETTLE, timeout):
            raise SchedulerError(f"no scheduler: the scheduler file {path} {problem} after {now - start:.0f} s: it "
                                 f"is there, and is no file that dask scheduler --scheduler-file {path} writes")
        if now >= deadline:
            raise SchedulerError(f"no scheduler: the scheduler file {path} {problem} after {timeout:g} s ({why}); "
                                 f"start the scheduler with dask scheduler --scheduler-file {path}")
        if not said:
            logger.info("waiting up to %g s for the scheduler file %s (%s)", timeout, path, problem)
            said = True
        await asyncio.sleep(min(POLL, max(deadline - time.monotonic(), 0)))


def _read(path: str) -> tuple[str, str | None]:
    """(what is wrong, None) or ("", the address) for a scheduler file."""
    try:
        with open(path) as f:
            content = json.load(f)
    except FileNotFoundError:
        return "does not exist", None
    except OSError as e:
        return f"cannot be read ({e.strerror})", None
    except ValueError:
        return "is not JSON (a file that dask scheduler --scheduler-file writes)", None
    address = content.get("address") if isinstance(content, dict) else None
    if not isinstance(address, str) or not address:
        return "holds no scheduler address", None
    return "", address


async def reach(address: str, timeout: float, why: str, connection_args: dict) -> None:
    """One connection to ``address`` (retried until ``timeout``), closed at once; a SchedulerError if none."""
    from distributed.comm import connect

    if no_tls(address, connection_args):
        raise SchedulerError(no_tls(address, connection_args))
    try:
        comm = await connect(address, timeout=timeout, **connection_args)
    except (OSError, asyncio.TimeoutError) as e:
        cause = e.__cause__ or e
        detail = f"{type(cause).__name__}: {cause}" if str(cause) else "no answer"
        raise SchedulerError(f"cannot reach the scheduler at {address} within {timeout:g} s ({why}): "
                             f"{detail}") from None
    except Exception as e:  # something listens there, and its first bytes are no dask handshake
        raise SchedulerError(f"something at {address} answers, but not as a dask scheduler ({type(e).__name__}: "
                             f"{e}): check the address and port") from None
    await comm.close()


async def names_taken(address: str, names, timeout: float, connection_args: dict) -> list:
    """Those of ``names`` that workers of the scheduler at ``address`` have already."""
    from distributed.core import rpc

    async with rpc(address, timeout=timeout, connection_args=connection_args) as scheduler:
        identity = await scheduler.identity(n_workers=-1)
    have = {str(worker.get("name")) for worker in identity.get("workers", {}).values()}
    return [name for name in names if str(name) in have]


def no_tls(address: str, connection_args: dict) -> str | None:
    """What to give where a TLS scheduler is to be reached without TLS credentials; else None."""
    if str(address).startswith("tls://") and connection_args.get("ssl_context") is None:
        return (f"the scheduler at {address} takes TLS connections only: give --tls-ca-file, --tls-cert and "
                "--tls-key (security= in Python, or the distributed.comm.tls configuration)")
    return None
