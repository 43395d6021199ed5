"""A worker's data in three tiers: device -> host -> disk.

Device objects (see :mod:`dask_gpu.memory.dispatch`) live in the device tier up to
``device_memory_limit`` bytes, counted per underlying allocation, so that views and
objects sharing memory are counted once. Past the limit, the least recently used ones
move to the host tier: distributed's own ``SpillBuffer`` (a zict buffer), which keeps up
to ``memory_limit`` bytes in memory and spills the rest to disk files under the worker's
local directory, compressed as ``distributed.worker.memory.spill-compression`` says.
Reading a spilled device object moves it back to the device.

Each spill file carries a checksum (:mod:`dask_gpu.memory.checksum`): a file changed or removed
on disk is an error naming the key and the file, never a wrong value. Where the disk refuses a
write, values stay in host memory up to ``memory_limit``; past it, the value being stored is
refused with an error naming the spill directory, and the worker keeps everything it held. Values
already on disk are read from their files meanwhile, and left there.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from types import MappingProxyType

import dask
from dask.utils import format_bytes, parse_bytes
from distributed.spill import SpillBuffer

from dask_gpu.memory import checksum, dispatch
from dask_gpu.memory.checksum import SpillFileError

logger = logging.getLogger("dask_gpu.memory")
spill_logger = logging.getLogger("distributed.worker")  # log_spilling: where client.get_worker_logs() reads


PAUSE_MARGIN = 0.9  # refuse below distributed's pause, which its memory monitor checks every 100 ms


@dataclass(frozen=True)
class Hidden:
    """A key of a :meth:`DeviceHostDiskStore.space`: equal to no task's key, left out of the store's own keys."""

    space: Hashable
    key: Hashable


class DeviceHostDiskStore(MutableMapping):
    """Worker data with device, host and disk tiers; ``Worker(data=(DeviceHostDiskStore, kwargs))``.

    Thread-safe: tasks that fail to allocate call :meth:`spill` from their own threads.
    Values whose library moves them itself (cuDF with its own spilling on) are kept aside,
    counted in no tier, so that no byte is counted or moved twice.
    """

    def __init__(self, device_memory_limit: int, memory_limit: int = 0, worker_local_directory: str | None = None,
                 log_spilling: bool = False):
        self.device_memory_limit = int(device_memory_limit) or sys.maxsize
        self.log_spilling = log_spilling  # each move between the device and host tiers, at INFO
        self._lock = threading.RLock()
        self._device: OrderedDict[Hashable, object] = OrderedDict()  # least recently used first
        self._held: dict[Hashable, list[Hashable]] = {}  # key -> the allocations it keeps alive
        self._allocations: dict[Hashable, list[int]] = {}  # allocation id -> [bytes, number of keys]
        self.device_bytes = 0
        self._spilled: set[Hashable] = set()  # keys whose host-tier value is a device object's host copy
        self._aside: dict[Hashable, object] = {}  # values that spill themselves
        self._hidden = 0  # Hidden keys held, in any tier
        self.counters = {
            f"{direction}-{unit}": 0
            for direction in ("device-to-host", "host-to-device")
            for unit in ("count", "bytes", "seconds")
        }

        root = worker_local_directory or tempfile.mkdtemp(prefix="dask-gpu-")
        self._directory = _private_directory(os.path.join(root, "storage"))
        fraction = dask.config.get("distributed.worker.memory.target") or dask.config.get(
            "distributed.worker.memory.spill"
        )
        target = int(memory_limit * fraction) if memory_limit and fraction else sys.maxsize
        max_spill = dask.config.get("distributed.worker.memory.max-spill")
        self._host = SpillBuffer(self._directory, target=target, max_spill=max_spill and parse_bytes(max_spill))
        self._files = checksum.install(self._host)
        self.memory_limit = int(memory_limit or 0)
        self.on_lost = None  # called with a key whose spilled value was lost (the GPU worker plugin sets it)

    # -- the views -----------------------------------------------------------------

    @property
    def device(self) -> Mapping:
        """Keys held in device memory (read-only)."""
        return MappingProxyType(self._device)

    @property
    def host(self) -> Mapping:
        """Keys held in host memory, spilled device objects as host copies (read-only)."""
        return self._host.fast

    @property
    def disk(self) -> Mapping:
        """Keys spilled to disk (read-only)."""
        return self._host.slow

    def space(self, name: Hashable) -> MutableMapping:
        """A mapping of its own over these tiers (a shuffle's pieces, say): it shares the device limit
        and the spilling order with the task data, and its keys are not among the store's keys."""
        return _Space(self, name)

    # -- MutableMapping -------------------------------------------------------------

    def __setitem__(self, key, value) -> None:
        with self._lock:
            if key in self:
                del self[key]
            self._hidden += isinstance(key, Hidden)
            failures = self._files.failures
            moved = []
            if dispatch.spills_itself(value):
                self._aside[key] = value
            elif dispatch.is_device(value):
                moved = self._keep_on_device(key, value)
            else:
                self._host[key] = value
            if self._files.failures > failures:
                self._refuse_if_stranded(key, moved)

    def _refuse_if_stranded(self, key, moved) -> None:
        """The disk refused a spill just now: past ``memory_limit`` of host memory, or near where distributed
        pauses the worker (a paused worker whose disk refuses would wait forever, and its tasks with it),
        ``key`` is refused (its task fails with the error, distributed's way for a store), so that the worker
        neither grows nor loses what it holds: the device objects that ``key`` pushed to host memory
        (``moved``) go back to the device, where it made room for them again. Below, the values wait in host
        memory for room on the disk."""
        held = self._host.fast.total_weight
        if not self.memory_limit or (held <= self.memory_limit and not self._near_pause()):
            return
        del self[key]
        for pushed in moved:
            if pushed in self._host.fast and pushed in self._spilled:
                self[pushed]  # reading a spilled device object moves it back to the device
        error = self._files.last_error
        raise SpillFileError(f"{key!r} is not stored: the worker holds {format_bytes(held)} in host memory, at or "
                             f"near its memory_limit of {format_bytes(self.memory_limit)}, because spilling to disk "
                             f"failed: {error}. Free space there, or give the worker a local_directory on a "
                             "disk with room (local_directory=, --local-directory)") from error

    def _near_pause(self) -> bool:
        """Whether this process uses 90% of the memory at which distributed pauses its worker."""
        pause = dask.config.get("distributed.worker.memory.pause")
        if not pause:
            return False
        import psutil

        return psutil.Process().memory_info().rss >= PAUSE_MARGIN * pause * self.memory_limit

    def __getitem__(self, key):
        with self._lock:
            if key in self._device:
                self._device.move_to_end(key)
                return self._device[key]
            if key in self._aside:
                return self._aside[key]
            stay = self._files.failing and key in self._host.slow  # no room can be made for it: it stays on disk
            if key not in self._spilled:
                return self._from_host(key, stay)
            start = time.perf_counter()
            value = dispatch.to_device(self._from_host(key, stay))
            self._count("host-to-device", dispatch.device_nbytes(value), start, key)
            if stay:
                return value
            del self._host[key]
            self._spilled.discard(key)
            self._keep_on_device(key, value)
            return value

    def _from_host(self, key, stay: bool = False):
        """The host tier's value; where its spill file was changed or lost, the key is forgotten (no tier holds
        its value any more), ``on_lost(key)`` is told, and the SpillFileError naming the file is raised.

        Reading a value back from disk makes room for it in host memory by spilling older ones. While the disk
        refuses writes (``stay``), a value is read from its file and left there, so that reading does not grow
        host memory; where the disk refuses those writes first during this read, the value was read all the
        same, and it is returned, the others kept in memory."""
        failures = self._files.failures
        try:
            return self._host.slow[key] if stay else self._host[key]
        except SpillFileError as e:
            if self._files.failures > failures:  # a write to make room failed, after the read went right
                logger.error("%s; keeping data in memory", e)
                return self._host.fast[key] if key in self._host.fast else self._host.slow[key]
            logger.error("%s; the worker forgets the key, to be computed again where it is still wanted", e)
            del self[key]
            if self.on_lost is not None:
                self.on_lost(key)
            raise

    def __delitem__(self, key) -> None:
        with self._lock:
            if key in self._device:
                del self._device[key]
                self._release(key)
            elif key in self._aside:
                del self._aside[key]
            else:
                del self._host[key]
                self._spilled.discard(key)
            self._hidden -= isinstance(key, Hidden)

    def __contains__(self, key) -> bool:
        return key in self._device or key in self._aside or key in self._host

    def __iter__(self) -> Iterator:
        with self._lock:
            keys = [*self._device, *self._aside, *self._host]
        return iter([k for k in keys if not isinstance(k, Hidden)] if self._hidden else keys)

    def __len__(self) -> int:
        return len(self._device) + len(self._aside) + len(self._host) - self._hidden

    # -- spilling -------------------------------------------------------------------

    def _keep_on_device(self, key, value) -> list:
        """``value`` in the device tier, most recently used; the least recently used leave past the limit (the
        keys that left, returned)."""
        self._device[key] = value
        self._hold(key, dispatch.device_buffers(value))
        return self._shrink(self.device_memory_limit)

    def spill(self, nbytes: int) -> int:
        """Move least recently used device data to the host until ``nbytes`` of device
        memory are released or the device tier is empty; the bytes released.

        Called when an allocation fails: memory that a running task still references is
        counted as released here but comes back only when the task lets it go.
        """
        with self._lock:
            before = self.device_bytes
            self._shrink(max(self.device_bytes - int(nbytes), 0))
            return before - self.device_bytes

    def evict(self) -> int:
        """For distributed's memory manager: move one host-tier key to disk; its size, or -1."""
        with self._lock:
            weight = self._host.evict() if self._host.fast else -1
        dispatch.release_pinned()  # host memory is short: cached pinned blocks are the first to go
        return weight

    @property
    def fast(self):
        """What the memory manager may evict (see :meth:`evict`)."""
        return self._host.fast

    def _shrink(self, limit: int) -> list:
        """Move least recently used device objects to the host tier until ``limit``; the keys moved."""
        moved = []
        while self.device_bytes > limit and self._device:
            key, value = next(iter(self._device.items()))
            start = time.perf_counter()
            try:
                host = dispatch.to_host(value)
            except Exception:  # e.g. no device memory left to make a strided array contiguous
                logger.exception("could not move %r to host memory; it stays on the device", key)
                self._device.move_to_end(key)
                return moved
            del self._device[key]
            released = self._release(key)
            self._host[key] = host
            self._spilled.add(key)
            self._count("device-to-host", released, start, key)
            moved.append(key)
        return moved

    def _hold(self, key, buffers) -> None:
        buffers = dict(buffers)  # distinct allocations
        self._held[key] = list(buffers)
        for ident, nbytes in buffers.items():
            entry = self._allocations.setdefault(ident, [nbytes, 0])
            if entry[1] == 0:
                self.device_bytes += nbytes
            entry[1] += 1

    def _release(self, key) -> int:
        """Forget the allocations ``key`` kept alive; the bytes no other key holds."""
        released = 0
        for ident in self._held.pop(key, ()):
            entry = self._allocations[ident]
            entry[1] -= 1
            if entry[1] == 0:
                released += entry[0]
                del self._allocations[ident]
        self.device_bytes -= released
        return released

    def _count(self, direction: str, nbytes: int, start: float, key) -> None:
        seconds = time.perf_counter() - start
        self.counters[f"{direction}-count"] += 1
        self.counters[f"{direction}-bytes"] += nbytes
        self.counters[f"{direction}-seconds"] += seconds
        if self.log_spilling:
            source, target = direction.split("-to-")
            verb = "Spilled" if source == "device" else "Unspilled"
            spill_logger.info("%s key %r with %d bytes from %s to %s in %.6f seconds",
                              verb, key, nbytes, source, target, seconds)

    # -- reporting --------------------------------------------------------------------

    def describe(self) -> str:
        """One line on what the device tier holds, for out-of-memory errors."""
        with self._lock:
            sizes = {k: sum(self._allocations[i][0] for i in self._held[k]) for k in self._device}
            largest = sorted(sizes, key=sizes.get, reverse=True)[:3]
            named = ", ".join(f"{k!r} ({format_bytes(sizes[k])})" for k in largest)
            return (
                f"{format_bytes(self.device_bytes)} in {len(self._device)} key(s) in its device tier"
                + (f" (largest {named})" if named else "")
                + f" and {len(self._spilled)} key(s) already spilled to host or disk"
            )

    def metrics(self) -> dict:
        """Bytes and keys per tier, and the spill traffic so far."""
        with self._lock:
            memory, disk = self._host.spilled_total
            return {
                "device-bytes": self.device_bytes,
                "device-keys": len(self._device),
                "device-limit": self.device_memory_limit,
                "host-bytes": self._host.fast.total_weight,
                "host-keys": len(self._host.fast),
                "disk-bytes": disk,
                "disk-keys": len(self._host.slow),
                "disk-write-errors": self._files.failures,
                "self-spilling-keys": len(self._aside),
                **{k: v for k, v in self.counters.items()},
                **{f"host-{label}-{unit}": v for (label, unit), v in self._host.cumulative_metrics.items()},
            }

    def close(self) -> None:
        """Drop every key and remove the spill files."""
        with self._lock:
            self._device.clear()
            self._held.clear()
            self._allocations.clear()
            self.device_bytes = 0
            self._aside.clear()
            self._hidden = 0
            self._spilled.clear()
            for key in list(self._host):  # not clear(): it reads each value back from disk before it drops it
                del self._host[key]
            shutil.rmtree(self._directory, ignore_errors=True)



class _Space(MutableMapping):
    """The keys of one :meth:`DeviceHostDiskStore.space`, stored as :class:`Hidden` keys."""

    def __init__(self, store: DeviceHostDiskStore, name: Hashable):
        self.store, self.name = store, name

    def __setitem__(self, key, value) -> None:
        self.store[Hidden(self.name, key)] = value

    def __getitem__(self, key):
        return self.store[Hidden(self.name, key)]

    def __delitem__(self, key) -> None:
        del self.store[Hidden(self.name, key)]

    def __contains__(self, key) -> bool:
        return Hidden(self.name, key) in self.store

    def __iter__(self) -> Iterator:
        with self.store._lock:
            keys = [*self.store._device, *self.store._aside, *self.store._host]
        return iter([k.key for k in keys if isinstance(k, Hidden) and k.space == self.name])

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _private_directory(path: str) -> str:
    """``path``, created if need be, that only this user may enter: spill files hold the user's data."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
    except OSError as e:
        advice = "give the worker a writable local directory (local_directory=, --local-directory)"
        raise OSError(e.errno, f"cannot make the spill directory {path!r} ({e.strerror}): {advice}") from e
    return path
