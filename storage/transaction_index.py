"""The aborted-transaction index, ``<base>.txnindex`` (Kafka's ``TransactionIndex`` and
``AbortedTxn``).

The file is a flat array of 34-byte big-endian entries with no header, append-only and never
preallocated; it is created on the first append, so most segments have none. Each entry is an
aborted transaction whose ABORT marker lies in this segment (its first offset may lie in an
earlier one)::

    0 version int16 (0) | 2 producerId int64 | 10 firstOffset int64
    18 lastOffset int64 (the marker's offset) | 26 lastStableOffset int64 (LSO when written)

Entries have strictly increasing lastOffset. A trailing partial entry (a torn write) is ignored.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from storage import disk_calls
from storage.errors import CorruptIndexError, ReadOnlyLogError
from storage.log_files import TXN_INDEX_SUFFIX, offset_from_file_name
from storage.segment_source import SegmentSource, read_local_index

__all__ = ["AbortedTxn", "TxnIndexSearchResult", "TransactionIndex", "TXN_INDEX_SUFFIX"]

CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")


class AbortedTxn(NamedTuple):
    """One ``.txnindex`` entry (``AbortedTxn``): offsets are Kafka offsets, ``last_offset`` is
    the ABORT marker's and ``last_stable_offset`` the partition's LSO when it was written (the
    first offset of the oldest other open transaction, else ``last_offset + 1``).

    ``version`` is what the file holds; Kafka reads only the high byte of the int16 (offset 0),
    so a version is its first byte. kafka-dump-log prints an entry as
    ``version: 0 producerId: 1000 firstOffset: 10 lastOffset: 20 lastStableOffset: 21``.
    """

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int
    version: int = CURRENT_VERSION

    SIZE = _ENTRY.size  # 34

    def to_bytes(self) -> bytes:
        """The 34-byte entry. Raises ValueError for a field out of range."""
        try:
            return _ENTRY.pack(self.version, self.producer_id, self.first_offset,
                               self.last_offset, self.last_stable_offset)
        except struct.error as exc:
            raise ValueError(f"aborted transaction field out of range: {exc}") from None

    @classmethod
    def from_bytes(cls, buf, pos: int = 0) -> AbortedTxn:
        """Parse the entry at ``buf[pos:pos + 34]``; the version is the byte at ``pos``, as
        Kafka reads it. Raises struct.error when fewer than 34 bytes remain."""
        _, producer_id, first, last, lso = _ENTRY.unpack_from(buf, pos)
        return cls(producer_id, first, last, lso, buf[pos])


class TxnIndexSearchResult(NamedTuple):
    """What :meth:`TransactionIndex.collect_aborted_txns` found (``TxnIndexSearchResult``):
    ``is_complete`` is True when later segments' indexes need not be searched."""

    aborted_txns: list[AbortedTxn]
    is_complete: bool


class TransactionIndex:
    """The ``.txnindex`` of the segment starting at ``start_offset`` (None = parsed from the
    file name, as ``UnifiedLog.offsetFromFile``).

    Nothing is created on disk until the first :meth:`append`; a missing file reads as empty.
    ``writable=False`` never changes a byte (mutations raise ReadOnlyLogError). The file is read
    whole on each query: indexes hold one entry per aborted transaction and stay small.
    Mutations are serialized by the owning log; queries may run concurrently with appends.

    To print kafka-dump-log's ``.txnindex`` output: for each entry of :meth:`all_aborted_txns`,
    ``f"version: {t.version} producerId: {t.producer_id} firstOffset: {t.first_offset} "
    f"lastOffset: {t.last_offset} lastStableOffset: {t.last_stable_offset}"``.
    """

    def __init__(self, path: Path, start_offset: int | None = None, writable: bool = True,
                 source: SegmentSource | None = None):
        self.path = Path(path)
        self._source = source  # where a read-only index is read (default: the local file)
        self.start_offset = (offset_from_file_name(self.path.name) if start_offset is None
                             else start_offset)
        self.writable = writable
        self._fd: int | None = None
        self._last_offset: int | None = None
        self._last_offset_known = False  # loaded from the file on the first append
        self._lock = threading.Lock()

    # -- file handling ------------------------------------------------------------------------

    def _open(self, create: bool) -> int | None:
        """The open fd, opening the file first if needed; None when it does not exist."""
        if self._fd is None:
            flags = os.O_RDWR if self.writable else os.O_RDONLY
            if create:
                flags |= os.O_CREAT
            try:
                self._fd = os.open(self.path, flags | os.O_CLOEXEC, 0o644)
            except FileNotFoundError:
                return None
        return self._fd

    def _contents(self) -> bytes:
        if not self.writable:  # read whole each time: keep no descriptor per segment
            if self._source is None:
                return read_local_index(self.path).data
            return self._source.read_index(self.path).data
        with self._lock:
            fd = self._open(create=False)
            if fd is None:
                return b""
            return os.pread(fd, os.fstat(fd).st_size, 0)

    def _check_writable(self) -> None:
        if not self.writable:
            raise ReadOnlyLogError(f"transaction index {self.path} is read-only")

    def _iter_with_position(self) -> Iterator[tuple[AbortedTxn, int]]:
        data = self._contents()
        whole = len(data) - len(data) % AbortedTxn.SIZE
        for pos in range(0, whole, AbortedTxn.SIZE):
            txn = AbortedTxn.from_bytes(data, pos)
            if txn.version > CURRENT_VERSION:
                raise CorruptIndexError(
                    f"Unexpected aborted transaction version {txn.version} in transaction "
                    f"index {self.path.absolute()}, current version is {CURRENT_VERSION}")
            yield txn, pos

    # -- queries ------------------------------------------------------------------------------

    def all_aborted_txns(self) -> list[AbortedTxn]:
        """Every entry in file order (``allAbortedTxns``). Raises CorruptIndexError for an
        entry whose version is above 0; OSError when the file cannot be read."""
        return [txn for txn, _ in self._iter_with_position()]

    def collect_aborted_txns(self, fetch_offset: int, upper_bound_offset: int) -> TxnIndexSearchResult:
        """Aborted transactions overlapping the fetch range [fetch_offset, upper_bound_offset)
        (``collectAbortedTxns``): entries with ``last_offset >= fetch_offset`` and
        ``first_offset < upper_bound_offset``. The search is complete (later segments can add
        nothing) once an entry with ``last_stable_offset >= upper_bound_offset`` is seen.
        Raises as :meth:`all_aborted_txns`."""
        found = []
        for txn, _ in self._iter_with_position():
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound_offset:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound_offset:
                return TxnIndexSearchResult(found, True)
        return TxnIndexSearchResult(found, False)

    def sanity_check(self) -> None:
        """Raise CorruptIndexError if an entry's last offset lies below the segment's start
        offset, or an entry's version is unknown (``TransactionIndex.sanityCheck``)."""
        for txn, _ in self._iter_with_position():
            if txn.last_offset < self.start_offset:
                raise CorruptIndexError(
                    f"Last offset of aborted transaction {txn} in index "
                    f"{self.path.absolute()} is less than start offset {self.start_offset}")

    # -- mutations ----------------------------------------------------------------------------

    def append(self, aborted_txn: AbortedTxn) -> None:
        """Append one entry, creating the file on the first append (``append``).

        Raises ValueError (and writes nothing) unless ``aborted_txn.last_offset`` is above the
        last entry's; unlike Kafka, which only checks entries appended since it opened the
        file, the last entry already in the file counts too. A torn partial entry left at the
        end by a crash is overwritten. Raises ReadOnlyLogError; OSError on I/O failure.
        """
        self._check_writable()
        entry = aborted_txn.to_bytes()
        if not self._last_offset_known:
            txns = self.all_aborted_txns()
            self._last_offset = txns[-1].last_offset if txns else None
            self._last_offset_known = True
        if self._last_offset is not None and self._last_offset >= aborted_txn.last_offset:
            raise ValueError(
                "The last offset of appended transactions must increase sequentially, but "
                f"{aborted_txn.last_offset} is not greater than current last offset "
                f"{self._last_offset} of index {self.path.absolute()}")
        with self._lock:
            fd = self._open(create=True)
            size = os.fstat(fd).st_size
            end = size - size % AbortedTxn.SIZE
            written = disk_calls.pwrite(fd, entry, end)
            if written != len(entry):  # a short write: leave no partial entry behind
                disk_calls.ftruncate(fd, end)
                raise OSError(f"short write to transaction index {self.path}")
        self._last_offset = aborted_txn.last_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every entry from the first one with ``last_offset >= offset`` on
        (``truncateTo``); nothing changes when there is none. Raises ReadOnlyLogError."""
        self._check_writable()
        new_last = None
        for txn, pos in self._iter_with_position():
            if txn.last_offset >= offset:
                with self._lock:
                    disk_calls.ftruncate(self._open(create=False), pos)
                self._last_offset, self._last_offset_known = new_last, True
                return
            new_last = txn.last_offset

    def reset(self) -> None:
        """Remove every entry (``reset``): the file, if any, is truncated to 0 bytes. Raises
        ReadOnlyLogError."""
        self._check_writable()
        with self._lock:
            fd = self._open(create=False)
            if fd is not None:
                disk_calls.ftruncate(fd, 0)
        self._last_offset, self._last_offset_known = None, True

    def flush(self) -> None:
        """fsync the file if it is open for writing (``flush``)."""
        with self._lock:
            if self._fd is not None and self.writable:
                disk_calls.fsync(self._fd)

    def close(self) -> None:
        """Close the file; a later call reopens it (``close``)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def delete(self) -> bool:
        """Close and delete the file (``deleteIfExists``). True if a file was deleted.
        Raises ReadOnlyLogError."""
        self._check_writable()
        self.close()
        try:
            self.path.unlink()
        except FileNotFoundError:
            return False
        finally:
            self._last_offset, self._last_offset_known = None, True
        return True

    def rename_to(self, path: Path) -> None:
        """Rename the file to ``path`` if it exists, and use ``path`` from now on in any case
        (``renameTo``; e.g. to ``….txnindex.deleted``). Raises ReadOnlyLogError; OSError."""
        self._check_writable()
        path = Path(path)
        try:
            if self.path.exists():
                disk_calls.replace(self.path, path)
        finally:
            self.path = path

    def __repr__(self) -> str:
        return f"TransactionIndex({str(self.path)!r}, start_offset={self.start_offset})"
