"""Spill files that carry their checksum: a file changed or lost on disk is an error, never a wrong value.

distributed's ``SpillBuffer`` writes each spilled value to one file, through a ``zict.File``.
:class:`ChecksummedFile` takes that file mapping's place: every file ends in a 20-byte trailer (the
length of what precedes it, its checksum, a tag naming the checksum), checked when the file is read
back. The checksum covers the key's name and the bytes, so a file whose bytes or length changed, that
another key's file replaced, or that is gone, raises :class:`SpillFileError` naming the key and the
file. A write that fails raises it too, naming the directory, and is remembered (``failures``,
``last_error``, ``failing`` until a write goes through) so that the store can tell a value kept in
memory from one the disk refused. A spilled value still referenced elsewhere in the worker is read
from memory, not from its file (``SpillBuffer`` keeps a weak reference to it): that read needs no check.

The checksum is XXH3-64 where the xxhash package is installed (about 16 GB/s on one core), else
zlib's CRC-32 (about 3.5 GB/s; it releases the GIL). On a 100 MB value written to the page cache and
read back (26 ms and 103 ms without a checksum), XXH3 adds 7 ms and 6 ms, CRC-32 28 ms and 28 ms
(``benchmarks/spill_checksum.py``, ``benchmarks/results/spill-checksum-cpu.json``).
"""
from __future__ import annotations

import contextlib
import errno
import functools
import os
import struct
import zlib
from importlib.util import find_spec

from distributed.spill import AnyKeyFile
from distributed.utils import nbytes

from dask_gpu import internals

_TRAILER = struct.Struct("<QQ4s")  # length of the data, its checksum, the tag naming the checksum
_CRC32, _XXH3 = b"DGC1", b"DGX3"


class SpillFileError(OSError):
    """A spilled value that cannot be written, or read back as it was written."""


class ChecksummedFile(AnyKeyFile):
    """``zict.File`` whose files end in a checksum, checked on every read."""

    def __init__(self, directory: str):
        super().__init__(directory)
        self.failures = 0  # writes that failed, ever
        self.last_error: SpillFileError | None = None
        self.failing = False  # the last write failed: the disk refuses them, until one goes through
        self.tag = _writer_tag()  # the checksum it writes; reads check the one each file names

    def __setitem__(self, key, value) -> None:
        frames = list(value) if isinstance(value, (list, tuple)) else [value]
        digest = _digest(self.tag, [_name(key), *frames])  # the key's name too: a file moved to another key fails
        trailer = _TRAILER.pack(sum(map(nbytes, frames)), digest, self.tag)
        try:
            super().__setitem__(key, [*frames, trailer])
        except OSError as e:  # a full disk, a directory made read-only or removed
            self._remove_unfinished(key)
            self.failures += 1
            self.failing = True
            self.last_error = _error(e.errno, f"cannot write the spill file of {key!r} under {self.directory} "
                                              f"({e.strerror or e})")
            raise self.last_error from e
        self.failing = False

    def _remove_unfinished(self, key) -> None:
        """The file a failed write began, empty or cut short, which zict.File keeps no record of: a full disk
        would otherwise fill with them, one each time the worker tries to spill again."""
        prefix = internals.file_name_prefix(key)
        kept = set(self.filenames.values())
        try:
            names = os.listdir(self.directory)
        except OSError:  # the directory itself is gone
            return
        for name in names:
            if name.startswith(prefix) and name not in kept:
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self.directory, name))

    def __getitem__(self, key):
        path = os.path.join(self.directory, self.filenames[key])  # KeyError: not spilled, as zict.File says
        try:
            data = super().__getitem__(key)
        except FileNotFoundError as e:
            raise _error(errno.ENOENT, f"the spill file of {key!r} is gone: {path} was removed "
                                               "while the worker held the value there") from e
        except OSError as e:
            raise _error(e.errno, f"cannot read the spill file of {key!r}, {path} ({e.strerror or e})") from e
        problem = _problem(key, data)
        if problem:
            raise _error(errno.EIO, f"the spill file of {key!r}, {path}, {problem}: it was changed on disk "
                                            "after it was written, and its value is not used")
        del data[-_TRAILER.size:]  # in place: a bytearray, as zict.File gives it
        return data


    def __delitem__(self, key) -> None:
        try:
            super().__delitem__(key)
        except FileNotFoundError:  # removed from under it: forgotten all the same
            pass


def _error(code: int | None, message: str) -> SpillFileError:
    """The error with its errno, and a message without "[Errno N]" in front."""
    error = SpillFileError(message)
    error.errno = code
    return error


def _name(key) -> bytes:
    return str(key).encode("utf-8", "surrogatepass")


def _problem(key, data) -> str | None:
    """What is wrong with the bytes of ``key``'s file, or None where its trailer matches them."""
    if len(data) < _TRAILER.size:
        return f"holds {len(data)} bytes, less than its checksum"
    length, digest, tag = _TRAILER.unpack_from(data, len(data) - _TRAILER.size)
    if tag not in (_CRC32, _XXH3):
        return "does not end in its checksum"
    if length != len(data) - _TRAILER.size:
        return f"holds {len(data) - _TRAILER.size} bytes where {length} were written"
    with memoryview(data) as view, view[:length] as body:
        if _digest(tag, [_name(key), body]) != digest:
            return f"does not match its checksum ({'XXH3-64' if tag == _XXH3 else 'CRC-32'})"
    return None


@functools.lru_cache(maxsize=1)
def _writer_tag() -> bytes:
    return _XXH3 if find_spec("xxhash") is not None else _CRC32


def _digest(tag: bytes, frames) -> int:
    """The checksum ``tag`` names of the frames' bytes, one after another (contiguous buffers)."""
    if tag == _XXH3:
        import xxhash

        state = xxhash.xxh3_64()
        for frame in frames:
            state.update(frame)
        return state.intdigest()
    crc = 0
    for frame in frames:
        crc = zlib.crc32(frame, crc)
    return crc


def install(spill_buffer) -> ChecksummedFile:
    """Put a :class:`ChecksummedFile` in place of a new, empty ``SpillBuffer``'s file mapping."""
    slow = internals.spill_buffer_disk(spill_buffer)
    if not isinstance(slow.d, AnyKeyFile) or len(slow.d):
        raise TypeError(f"distributed's spill buffer changed: its files are kept by {type(slow.d).__name__}")
    slow.d = ChecksummedFile(slow.d.directory)
    return slow.d
