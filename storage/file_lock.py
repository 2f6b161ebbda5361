"""The backing directory's ``.lock`` (Kafka's ``FileLock``): one writer per directory.

The lock is an open-file-description lock (``F_OFD_SETLK``) on the whole file. It conflicts with
the POSIX ``fcntl`` lock a Kafka broker's ``FileChannel.tryLock`` takes, so neither can write a
directory the other holds, and unlike a POSIX lock it also conflicts within one process.
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from pathlib import Path

from storage.clock import SYSTEM_CLOCK, Clock
from storage.errors import LogDirLockedError
from storage.log_files import LOCK_FILE

_POLL_S = 0.05


def _flock_struct(lock_type: int) -> bytes:
    # struct flock: l_type, l_whence, l_start, l_len (0 = to the end of file), l_pid (0 for OFD)
    return struct.pack("hhqqi", lock_type, os.SEEK_SET, 0, 0, 0)


def held_elsewhere(directory: Path) -> bool:
    """Whether another writer (a kfs mount, a Kafka broker) holds ``directory/.lock`` now;
    asks without taking it and without creating the file."""
    try:
        fd = os.open(Path(directory) / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        found = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock_struct(fcntl.F_WRLCK))
        return struct.unpack("hhqqi", found)[0] != fcntl.F_UNLCK
    finally:
        os.close(fd)


def _posix_holder(fd: int) -> int | None:
    """The pid of a process holding a traditional POSIX lock on ``fd``'s file (as a Kafka
    broker's ``FileChannel.tryLock`` takes), None when there is none or the holder's lock is an
    open-file-description lock (kfs's own writers: ``F_OFD_GETLK`` reports their pid as -1)."""
    found = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, _flock_struct(fcntl.F_WRLCK))
    lock_type, _, _, _, pid = struct.unpack("hhqqi", found)
    return pid if lock_type != fcntl.F_UNLCK and pid > 0 else None


def _process_name(pid: int) -> str:
    """What ``ps`` shows for ``pid``: a Java process's main class when there is one
    (``kafka.Kafka``), else its command name."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    args = [os.fsdecode(a) for a in argv if a]
    if args and os.path.basename(args[0]) == "java":
        main = [a for a in args[1:] if not a.startswith("-") and "." in a and "/" not in a
                and ":" not in a]
        if main:
            return main[0]
    return os.path.basename(args[0]) if args else "?"


class FileLock:
    """An exclusive lock on ``directory/.lock``, held until :meth:`release` (or the process
    ends: the kernel drops it with the file description, so a crash never leaves it stale)."""

    def __init__(self, directory: Path, timeout_s: float = 0.0, clock: Clock = SYSTEM_CLOCK):
        """Take the lock, waiting up to ``timeout_s`` seconds (of ``clock``). Raises
        LogDirLockedError when another writer holds it past the timeout; OSError when the file
        cannot be opened."""
        self.path = Path(directory) / LOCK_FILE
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        deadline = clock.monotonic() + timeout_s
        try:
            while not self._try_lock():
                holder = _posix_holder(self._fd)
                if holder is not None:  # not a kfs writer: waiting for it is pointless
                    raise LogDirLockedError(
                        f"{Path(directory)} is in use by another writer: process {holder} "
                        f"({_process_name(holder)}) holds {self.path} with a POSIX lock, as a "
                        f"running Kafka broker holds its log directory's; kfs writes none of "
                        f"it while that runs (produce to the broker instead, mount it "
                        f"--read-only to read it alongside, or stop the broker)")
                if clock.monotonic() >= deadline:
                    raise LogDirLockedError(
                        f"{Path(directory)} is in use by another writer (a kfs mount, a Kafka "
                        f"broker or another process holds {self.path}); mount it --read-only to "
                        f"read it alongside, or stop the other writer")
                clock.sleep(_POLL_S)
        except BaseException:
            os.close(self._fd)
            raise

    def _try_lock(self) -> bool:
        try:
            fcntl.fcntl(self._fd, fcntl.F_OFD_SETLK, _flock_struct(fcntl.F_WRLCK))
            return True
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.EACCES):
                return False
            raise

    def release(self) -> None:
        """Drop the lock (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
