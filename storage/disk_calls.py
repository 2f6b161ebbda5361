"""The engine's calls that change bytes on disk, in one place, so that a test can fail any of
them (SQLite's I/O-error tests, LevelDB's ``FaultInjectionEnv``, Kafka's log-dir failure
tests): ``write``, ``pwrite``, ``pwritev``, ``fsync``, ``fdatasync``, ``dir_fsync`` (of a
directory), ``msync`` (an index map's flush), ``rename``, ``replace``, ``ftruncate``,
``truncate`` and ``posix_fallocate``, each with the signature of its ``os`` (or ``mmap``)
namesake. Engine code calls them as ``disk_calls.pwritev(...)``.

Off (the default) every name *is* the ``os`` function: a call costs one module attribute
lookup, as ``os.pwritev`` does. :func:`inject` (tests, ``benchmarks/fault_sweep.py``) swaps in
wrappers that count the calls and fail the Nth with ``EIO`` or ``ENOSPC``, once or from then
on; ``KFS_FAULTS=[CALL:]N:ERRNO[:persist]`` (e.g. ``7:EIO``, ``3:ENOSPC:persist``,
``fsync:1:EIO``: the first fsync) arms the same in a process at import, e.g. a mount's serving
process. ``ENOSPC`` never fails a truncate (making a
file shorter or sparse needs no space; the kernel says the same), so a workload can still take
its bytes back when the disk is full.
"""

from __future__ import annotations

import errno as _errno
import logging
import mmap
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

write = os.write
pwrite = os.pwrite
pwritev = os.pwritev
fsync = os.fsync
fdatasync = os.fdatasync
dir_fsync = os.fsync
msync = mmap.mmap.flush
rename = os.rename
replace = os.replace
ftruncate = os.ftruncate
truncate = os.truncate
posix_fallocate = os.posix_fallocate

CALLS = ("write", "pwrite", "pwritev", "fsync", "fdatasync", "dir_fsync", "msync", "rename",
         "replace", "ftruncate", "truncate", "posix_fallocate")
_TRUNCATES = frozenset({"ftruncate", "truncate"})
_ORIGINAL = {name: globals()[name] for name in CALLS}


def fsync_directory(directory: Path) -> None:
    """fsync a directory, making the names created or renamed in it durable
    (Kafka's ``Utils.flushDir``)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        dir_fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data) -> None:
    """``write`` until every byte of ``data`` is written (a short write continues)."""
    view = memoryview(data)
    while view:
        view = view[write(fd, view):]


@dataclass
class Faults:
    """A fault plan and what it saw. ``nth``: the call to fail, counted from 1 over every call
    of this module (None: count only); ``error``: its errno; ``persist``: every later call
    fails too (a dead disk, a full one), not only the Nth; ``call``: N counts the calls of
    that name only. ``calls`` names each call made, in order; ``failed`` the (number, name)
    of each call failed (numbered over every call)."""

    nth: int | None = None
    error: int = _errno.EIO
    persist: bool = False
    call: str | None = None
    calls: list[str] = field(default_factory=list)
    failed: list[tuple[int, str]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def _should_fail(self, name: str) -> int:
        """Count a call of ``name``; its number when it is to fail, else 0."""
        with self._lock:
            self.calls.append(name)
            n = len(self.calls)
            k = n if self.call is None else self.calls.count(self.call)
            if self.nth is None or (self.call is not None and name != self.call) or \
                    k < self.nth or (k > self.nth and not self.persist):
                return 0
            if self.error == _errno.ENOSPC and name in _TRUNCATES:
                return 0
            self.failed.append((n, name))
            return n


_active: Faults | None = None


def inject(faults: Faults) -> None:
    """Route every call of this module through ``faults`` until :func:`remove`."""
    global _active
    _active = faults
    for name in CALLS:
        globals()[name] = _wrapped(name, _ORIGINAL[name])


def remove() -> None:
    """Back to the plain ``os`` functions."""
    global _active
    _active = None
    globals().update(_ORIGINAL)


def active() -> Faults | None:
    return _active


def _wrapped(name: str, call):
    def faulty(*args):
        faults = _active
        n = faults._should_fail(name) if faults is not None else 0
        if n:
            log.warning("injected fault: %s (call %d) fails with %s", name, n,
                        _errno.errorcode[faults.error])
            raise OSError(faults.error, f"{os.strerror(faults.error)} (injected: {name} call {n})")
        return call(*args)
    faulty.__name__ = name
    return faulty


def parse(spec: str) -> Faults:
    """``[CALL:]N:ERRNO[:persist]`` as :class:`Faults` (ValueError when it is not that)."""
    parts = spec.split(":")
    call = parts.pop(0) if parts and parts[0] in CALLS else None
    if len(parts) not in (2, 3) or not parts[0].isdigit() or \
            parts[1] not in ("EIO", "ENOSPC") or parts[2:] not in ([], ["persist"]):
        raise ValueError(f"KFS_FAULTS={spec!r}: expected [CALL:]N:EIO or [CALL:]N:ENOSPC, "
                         "optionally :persist")
    return Faults(int(parts[0]), getattr(_errno, parts[1]), parts[2:] == ["persist"], call)


if os.environ.get("KFS_FAULTS"):
    inject(parse(os.environ["KFS_FAULTS"]))
