"""Where a segment's bytes are read from: the one door every reader of a segment goes through
(Kafka reads remote segments through such a door: ``RemoteStorageManager.fetchLogSegment``
for the ``.log`` from a position, ``fetchIndex`` for one index).

A :class:`SegmentSource` gives positioned reads of one segment's ``.log`` and the whole of
each of its index files (``.index``, ``.timeindex``, ``.txnindex``). :class:`LocalSegmentSource`
reads the local files of a partition directory; a second place where segments live (an object
store) is a second implementation, and nothing above this module knows which one it reads.
Positions and sizes are bytes of the ``.log``. Writing is not a source's business: the log
writes local files itself.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import NamedTuple

from storage.open_files import PooledFile
from storage.records._c.scan import PendingRead  # the read ahead of a scan's next block

_RWF_NOWAIT = getattr(os, "RWF_NOWAIT", 0)


class IndexContents(NamedTuple):
    """An index file as read: ``data`` its bytes up to its first hole (an active index is
    preallocated sparse, and a hole reads as no entry), ``length`` the file's length."""

    data: bytes
    length: int


EMPTY_INDEX = IndexContents(b"", 0)


class SegmentSource:
    """The bytes of one segment. ``name`` names its ``.log`` in errors and messages."""

    name: str

    def log_size(self) -> int:
        """The ``.log``'s length now (past what was read while a writer appends)."""
        raise NotImplementedError

    def modified_ms(self) -> int:
        """When the ``.log`` last changed, epoch ms."""
        raise NotImplementedError

    def read_at(self, position: int, size: int, nowait: bool = False) -> bytes:
        """``size`` bytes of the ``.log`` from ``position``, short only at its end.
        ``nowait=True`` raises BlockingIOError instead of waiting for the bytes."""
        raise NotImplementedError

    def read_into(self, view: memoryview, position: int) -> memoryview:
        """Up to ``len(view)`` bytes of the ``.log`` from ``position`` read into ``view``;
        the part of ``view`` filled."""
        raise NotImplementedError

    def start_read_into(self, view: memoryview, position: int) -> PendingLocalRead | None:
        """:meth:`read_into` begun on a thread of its own, so that a scan reads its next block
        while it decodes this one: ``wait()`` on the result gives the part of ``view`` filled
        (raising as :meth:`read_into` does). None: this source does not read ahead so (the
        default; an object store's reads ahead by request, ``read_ahead_until``)."""
        return None

    def read_index(self, path: Path) -> IndexContents:
        """The index file ``path`` of this segment (one of its ``.index``, ``.timeindex``,
        ``.txnindex``), whole; :data:`EMPTY_INDEX` when there is none."""
        raise NotImplementedError

    def read_ahead_until(self, end: int | None) -> None:
        """A hint from a reader about to read the ``.log`` on from where it reads next: it
        reads nothing at or past ``end`` (None: it does not know). A source that reads ahead
        reads ahead that far at once and no further; the default ignores it."""

    def close(self) -> None:
        """Release what reading held (descriptors, connections); reads may not follow."""


class LocalSegmentSource(SegmentSource):
    """A segment's local files: the ``.log`` through ``log_file`` (a ``PooledFile``: opened
    when used, closed when idle), the indexes read whole with ``pread``. Raises OSError."""

    def __init__(self, log_file: PooledFile) -> None:
        self._file = log_file

    @classmethod
    def of_path(cls, path: Path) -> LocalSegmentSource:
        """The segment whose ``.log`` is the file ``path``, read-only (a file as named on a
        command line, e.g. ``kfs dump``'s)."""
        return cls(PooledFile(Path(path), os.O_RDONLY))

    def close(self) -> None:
        """Close the ``.log``'s descriptor for good."""
        self._file.close()

    @property
    def name(self) -> str:
        return self._file.path.name

    def log_size(self) -> int:
        with self._file as fd:
            return os.fstat(fd).st_size

    def modified_ms(self) -> int:
        with self._file as fd:
            return os.fstat(fd).st_mtime_ns // 1_000_000

    def read_at(self, position: int, size: int, nowait: bool = False) -> bytes:
        if not nowait:
            with self._file as fd:
                return os.pread(fd, size, position)
        buf = bytearray(size)
        try:
            with self._file as fd:
                n = os.preadv(fd, [buf], position, _RWF_NOWAIT)
                end = os.fstat(fd).st_size if n < size else 0
        except FileNotFoundError:
            raise
        except OSError as e:  # EAGAIN, or a file system without RWF_NOWAIT
            raise BlockingIOError(errno.EAGAIN, f"{self._file.path}: {e.strerror}") from None
        if n < size and position + n < end:
            raise BlockingIOError(errno.EAGAIN, f"{self._file.path}: not all in the page cache")
        return bytes(memoryview(buf)[:n])

    def read_into(self, view: memoryview, position: int) -> memoryview:
        with self._file as fd:
            return view[:os.preadv(fd, [view], position)]

    def start_read_into(self, view: memoryview, position: int) -> PendingLocalRead:
        return PendingLocalRead(self._file, view, position)

    def read_index(self, path: Path) -> IndexContents:
        return read_local_index(path)


class PendingLocalRead:
    """``view`` being filled from ``file`` (a ``PooledFile``) at ``position`` by a thread
    without the GIL (the compiled ``PendingRead``): the page-cache copy of a scan's next block
    overlaps the decode of this one. The descriptor is held in use (never closed by the pool)
    and ``view`` held until :meth:`wait`, which every caller must reach."""

    def __init__(self, file: PooledFile, view: memoryview, position: int) -> None:
        self._file, self._view = file, view
        fd = file.__enter__()
        try:
            self._read = PendingRead(fd, view, position)
        except BaseException:
            file.__exit__(None, None, None)
            raise
        self._waited = False

    def wait(self) -> memoryview:
        """The part of ``view`` filled (short only at the end of the file); raises OSError as
        the read failed. Once only."""
        if self._waited:
            raise ValueError("a read is waited for once")
        self._waited = True
        try:
            return self._view[:self._read.wait()]
        finally:
            self._file.__exit__(None, None, None)


class FileRecords:
    """A ``.log``'s bytes [0, ``size``) read through ``source`` (Kafka's ``FileRecords``): what
    ``storage.segment.BatchBlocks`` walks for a reader of a bare ``.log`` with no segment
    around it (``kfs dump``). ``size`` is the ``.log``'s length when opened."""

    def __init__(self, source: SegmentSource) -> None:
        self.source = source
        self.size = source.log_size()

    def read_at(self, position: int, size: int, nowait: bool = False) -> bytes:
        return self.source.read_at(position, size, nowait)

    def read_into(self, buffer, position: int) -> memoryview:
        view = memoryview(buffer)[:max(min(len(buffer), self.size - position), 0)]
        return self.source.read_into(view, position)


def read_local_index(path: Path) -> IndexContents:
    """The local index file ``path`` read once, up to its first hole (a writer may trim it
    at any moment: a map of it would kill the reader with SIGBUS past its new end)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return EMPTY_INDEX
    try:
        length = os.fstat(fd).st_size
        try:
            data_end = os.lseek(fd, 0, os.SEEK_HOLE) if length else 0
        except OSError:  # no SEEK_HOLE here: read it all
            data_end = length
        return IndexContents(os.pread(fd, min(length, data_end), 0), length)
    finally:
        os.close(fd)


class ObjectSegmentSource(SegmentSource):
    """A segment whose files are objects of an object store (S3, GCS, HDFS, or local files
    through the same API), read with ranged requests through ``pyarrow.fs``: ``store`` (a
    ``storage.remote.object_store.ObjectStore``) gives the file system and the bounded cache
    of index objects; ``log`` is the ``.log`` object's entry (a ``pyarrow.fs.FileInfo``: path,
    size, and mtime when listed; objects never grow) and ``indexes`` the entries of its index
    objects by kind (``.index``, ``.timeindex``, ``.txnindex``; a missing one reads as empty),
    which :meth:`read_index` serves by the suffix of the path the segment asks for.
    Only the bytes asked for are fetched. ``nowait`` reads raise BlockingIOError (every read
    is a request: an event loop sends it to a worker thread). Raises OSError (pyarrow's
    errors for the store: access denied, no such object, connection lost). ``owns_store``:
    closing it closes ``store`` too (a store opened for this one object)."""

    def __init__(self, store, log, indexes: dict, owns_store: bool = False) -> None:
        self._store = store
        self._owns_store = owns_store
        self._path = log.path
        self._size = log.size
        self._mtime_ns = log.mtime_ns
        self._mtime_ms = log.mtime_ns // 1_000_000 if log.mtime_ns else 0
        self._indexes = indexes
        self._file = None  # the .log opened on first read (pyarrow's reads at are thread-safe)

    @property
    def name(self) -> str:
        return self._path

    def log_size(self) -> int:
        return self._size

    def modified_ms(self) -> int:
        return self._mtime_ms

    def _log(self):
        if self._file is None:
            self._file = self._store.open(self._path, self._size, self._mtime_ns)
        return self._file

    def read_at(self, position: int, size: int, nowait: bool = False) -> bytes:
        if nowait:
            raise BlockingIOError(errno.EAGAIN, f"{self._path}: a request to the object store")
        size = max(min(size, self._size - position), 0)
        return self._log().read_at(size, position) if size else b""

    def read_into(self, view: memoryview, position: int) -> memoryview:
        view = view[:max(min(len(view), self._size - position), 0)]
        return self._log().read_into(view, position) if len(view) else view

    def read_ahead_until(self, end: int | None) -> None:
        self._log().read_ahead_until(end)

    def read_index(self, path: Path) -> IndexContents:
        where = self._indexes.get(Path(path).suffix)
        data = None if where is None else self._store.read_small_object(where)
        return EMPTY_INDEX if data is None else IndexContents(data, len(data))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._owns_store:
            self._store.close()
