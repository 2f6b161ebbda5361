"""Segment files opened when first needed and closed when idle, so that a directory of any
size is served within a process's descriptor limit (a workstation's default is 1,024; a
broker's directory holds tens of thousands of segments). Kafka keeps every segment's
``FileRecords`` channel open and opens indexes lazily (``LazyIndex``); kfs also closes
``.log`` descriptors nobody uses, least recently used first, once more than ``limit`` are open.

The pool is its opener's, as Kafka's ``LogManager`` owns what its logs share: a
``storage.log_manager.LogManager`` keeps one for every log it opens (``KFS_OPEN_FILES``
descriptors, default ``DEFAULT_LIMIT``); a ``Log`` or a segment opened alone (a tool, a test)
makes one of its own. Closing the logs closes their descriptors; nothing is kept per process.

A file is used inside ``with file as fd:``; a descriptor in use is never closed. Reopening
checks that the path still names the same file (same device and inode): a file that another
process deleted, renamed or replaced (a cleaner's swap puts new bytes under the old name)
raises FileNotFoundError instead of serving other bytes.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from pathlib import Path

DEFAULT_LIMIT = 512  # open .log descriptors per log directory, beside the few the rest needs
LIMIT_VARIABLE = "KFS_OPEN_FILES"  # the environment's word for another limit


class FilePool:
    """The open descriptors of every ``PooledFile`` made from it: at most ``limit`` (default:
    ``$KFS_OPEN_FILES``, else ``DEFAULT_LIMIT``) kept open while idle."""

    def __init__(self, limit: int | None = None) -> None:
        self.limit = int(os.environ.get(LIMIT_VARIABLE, DEFAULT_LIMIT)) if limit is None \
            else limit
        self._lock = threading.Lock()
        self._open: OrderedDict[int, PooledFile] = OrderedDict()  # id -> file, LRU first

    @property
    def open_count(self) -> int:
        return len(self._open)

    def _opened(self, file: PooledFile) -> None:
        """Note ``file`` as used now; close idle ones past the limit (lock held)."""
        self._open[id(file)] = file
        self._open.move_to_end(id(file))
        self._trim()

    def _trim(self) -> None:
        """Close idle descriptors, least recently used first, down to the limit (lock held);
        those in use stay open, and go when the last use ends past the limit."""
        if len(self._open) <= self.limit:
            return
        for key, idle in list(self._open.items()):
            if len(self._open) <= self.limit:
                break
            if idle.users == 0:
                del self._open[key]
                idle.close_fd()

    def _closed(self, file: PooledFile) -> None:
        self._open.pop(id(file), None)


class PooledFile:
    """``path`` opened with ``flags`` on demand, its descriptor one of ``pool``'s (None: a pool
    of its own, for a file read alone). The first open may create it (``O_CREAT`` in
    ``flags``); later ones reopen the same file only. ``close()`` closes it for good."""

    def __init__(self, path: Path, flags: int, pool: FilePool | None = None) -> None:
        self.path = Path(path)
        self._flags = flags | os.O_CLOEXEC
        self._pool = FilePool(1) if pool is None else pool
        self._fd = -1
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the first open
        self.users = 0
        self.closed = False

    def __enter__(self) -> int:
        pool = self._pool
        with pool._lock:
            if self.closed:
                raise ValueError(f"{self.path} is closed")
            if self._fd < 0:
                self._reopen()
            self.users += 1
            pool._opened(self)
            return self._fd

    def __exit__(self, *exc) -> None:
        with self._pool._lock:
            self.users -= 1
            self._pool._trim()

    def _reopen(self) -> None:
        flags = self._flags if self._identity is None else self._flags & ~os.O_CREAT
        fd = os.open(self.path, flags, 0o644)
        st = os.fstat(fd)
        identity = (st.st_dev, st.st_ino)
        if self._identity is not None and identity != self._identity:
            os.close(fd)
            raise FileNotFoundError(f"{self.path} was replaced by another file")
        self._identity = identity
        self._fd = fd

    def open_now(self) -> None:
        """Open (or create) the file at once: errors surface here, not at the first read."""
        with self:
            pass

    def is_same_file(self, path: Path) -> bool:
        """Whether ``path`` names the file this one reads."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return False
        return (st.st_dev, st.st_ino) == self._identity

    def close_fd(self) -> None:
        """Close the descriptor (idle); the next use reopens it."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def close(self) -> None:
        with self._pool._lock:
            self.closed = True
            self._pool._closed(self)
            self.close_fd()
