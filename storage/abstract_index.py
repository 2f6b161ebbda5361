"""The memory-mapped, preallocated index file shared by the offset and time indexes
(Kafka's ``AbstractIndex``).

An index file is a flat array of fixed-size big-endian entries with no header and no
terminator: every slot up to the file length counts as an entry. While its segment is active the
file is preallocated (zero-filled) to ``segment.index.bytes`` rounded down to the entry size; on
roll and close it is trimmed to ``entries × entry_size`` so that a reader can trust it.
"""

from __future__ import annotations

import mmap
import os
import threading
from pathlib import Path

from storage import disk_calls
from storage.records._c.scan import largest_lower_bound
from storage.segment_source import IndexContents, read_local_index


class AbstractIndex:
    """Base of :class:`OffsetIndex` and :class:`TimeIndex`.

    Subclasses set ``ENTRY_SIZE`` and ``KEY_FIELD`` (where the key binary searches run on lies
    in an entry).
    Mutations are serialized by the owning log; lookups may run concurrently with appends.
    """

    ENTRY_SIZE = 0
    KEY_FIELD = (0, 0)  # (byte offset in an entry, size) of the big-endian key lookups search

    def __init__(self, path: Path, base_offset: int, max_index_size: int, writable: bool,
                 contents: IndexContents | None = None):
        """``contents``: a read-only index's bytes as its segment's source read them
        (``storage.segment_source``); by default the local file ``path``, read once."""
        self.path = Path(path)
        self.base_offset = base_offset
        self.writable = writable
        self._lock = threading.Lock()
        self._mmap: mmap.mmap | bytes | None = None
        self._length = 0
        newly_created = False
        if not writable:
            contents = read_local_index(self.path) if contents is None else contents
            self._length, self._mmap = contents.length, contents.data or None
        else:
            if not self.path.exists():
                self.path.touch()
                newly_created = True
            self._length = self.path.stat().st_size
            if newly_created:
                self._set_length(self._round_down(max_index_size))
            self._remap()
        self._entries = 0 if newly_created else self._entries_in_use()
        self._allocated = self._entries * self.ENTRY_SIZE  # bytes known to have disk blocks

    def _entries_in_use(self) -> int:
        """Kafka counts every slot of an existing file as an entry; a file left untrimmed by a
        crash then ends in zero-filled slots. Relative offsets strictly increase, so a slot past
        the first with relative offset 0 is that tail (kafka-dump-log stops there too)."""
        if self._mmap is None:
            return 0
        slots = min(self._length, len(self._mmap)) // self.ENTRY_SIZE
        if slots <= 1 or self._relative_offset(slots - 1) != 0:
            return slots
        lo, hi = 1, slots - 1  # the first zero slot past slot 0 lies in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            if self._relative_offset(mid) == 0:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def _relative_offset(self, slot: int) -> int:
        raise NotImplementedError

    # -- sizing -----------------------------------------------------------------------------

    def _round_down(self, size: int) -> int:
        return size - size % self.ENTRY_SIZE

    def _set_length(self, length: int) -> None:
        disk_calls.truncate(self.path, length)
        self._length = length

    def _remap(self) -> None:
        """Map the whole file (writable indexes only). The old map is dropped, not closed: a
        concurrent reader may still hold it and only ever touches slots below ``entries``,
        which stay inside the file. A read-only index holds its bytes as read once instead
        (``storage.segment_source.read_local_index``: another process may trim the file at
        any moment); ``_length`` stays the file's length, so a bad length fails sanity_check."""
        if self._length == 0:
            self._mmap = None
            return
        with open(self.path, "r+b") as f:
            self._mmap = mmap.mmap(f.fileno(), self._length, access=mmap.ACCESS_WRITE)

    def raw_entries(self) -> bytes:
        """The entries in use as on disk (``entries * ENTRY_SIZE`` bytes)."""
        if self._mmap is None:
            return b""
        return bytes(self._mmap[:self.entries * self.ENTRY_SIZE])

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def max_entries(self) -> int:
        return self._length // self.ENTRY_SIZE

    @property
    def size_in_bytes(self) -> int:
        return self._entries * self.ENTRY_SIZE

    def is_full(self) -> bool:
        return self._entries >= self.max_entries

    def resize(self, new_size: int) -> None:
        """Set the file length to ``new_size`` rounded down to the entry size, keeping the
        entries (``AbstractIndex.resize``): used to trim on roll and to re-expand on load. No
        msync: a shared map's pages are the file's page cache, kept across the new length (as
        Kafka, which forces the map only on flush)."""
        with self._lock:
            length = self._round_down(new_size)
            if length == self._length or not self.writable:
                return
            self._set_length(max(length, self._entries * self.ENTRY_SIZE))
            self._remap()

    def trim_to_valid_size(self) -> None:
        self.resize(self._entries * self.ENTRY_SIZE)

    def reset(self, max_index_size: int) -> None:
        """Drop every entry and re-expand to the max size (``AbstractIndex.reset``)."""
        self._truncate_to_entries(0)
        self.resize(max_index_size)

    def _truncate_to_key(self, target: int, key) -> None:
        """Drop every entry whose ``key`` is >= ``target`` (the ``truncateTo`` of both index
        kinds: the largest lower-bound slot is kept unless it equals the target)."""
        slot = self._largest_lower_bound_slot(target, key)
        if slot < 0:
            self._truncate_to_entries(0)
        else:
            self._truncate_to_entries(slot if key(slot) == target else slot + 1)

    def _truncate_to_entries(self, entries: int) -> None:
        self._entries = entries
        self._allocated = min(self._allocated, entries * self.ENTRY_SIZE)

    # -- reading and writing slots ----------------------------------------------------------

    def _write_slot(self, slot: int, data: bytes) -> None:
        pos = slot * self.ENTRY_SIZE
        if pos + self.ENTRY_SIZE > self._allocated:
            self._allocate(pos + self.ENTRY_SIZE)
        self._mmap[pos : pos + self.ENTRY_SIZE] = data

    def append_entries(self, data: bytes, spare: int = 0) -> None:
        """Append entries already encoded as on disk, each above the one before (recovery's
        entries, from ``SegmentScan.index_entries``; an append's, from
        ``append_index_entries``), leaving ``spare`` slots free. Raises IndexError when they do
        not fit, ValueError when the first key is not above the last entry's (keys only rise)."""
        count = len(data) // self.ENTRY_SIZE
        if self._entries + count > self.max_entries - spare:
            raise IndexError(f"{count} entries do not fit {self.path} ({self._entries} of "
                             f"{self.max_entries} slots used)")
        start = self._entries * self.ENTRY_SIZE
        if count and self._entries:
            at, size = self.KEY_FIELD
            first = int.from_bytes(data[at:at + size], "big", signed=True)
            last = int.from_bytes(self._mmap[start - self.ENTRY_SIZE + at:
                                             start - self.ENTRY_SIZE + at + size], "big", signed=True)
            if first <= last:
                raise ValueError(f"an entry with key {first} cannot follow key {last} in "
                                 f"{self.path}: keys only rise")
        if start + len(data) > self._allocated:
            self._allocate(start + len(data))
        self._mmap[start:start + len(data)] = data
        self._entries += count

    def _allocate(self, end: int) -> None:
        """Give the preallocated (sparse) file real blocks up to ``end``, a page at a time,
        before the map writes there: a store through a map into a hole the disk cannot fill
        kills the process (SIGBUS), while fallocate fails cleanly with ENOSPC (OSError)."""
        new_end = min(-(-end // mmap.PAGESIZE) * mmap.PAGESIZE, self._length)
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            disk_calls.posix_fallocate(fd, self._allocated, new_end - self._allocated)
        finally:
            os.close(fd)
        self._allocated = new_end

    def _largest_lower_bound_slot(self, target: int, key=None) -> int:
        """The last slot whose key (``key(slot)``, by default the entry's ``KEY_FIELD``) is
        <= target, or -1 (``largestLowerBoundSlotFor``).

        Kafka searches a warm tail first to stay in the page cache; the result is the same.
        Lookups run the compiled search (a lookup per record read by the mount)."""
        if key is None:
            if not self._entries:
                return -1
            return largest_lower_bound(self._mmap, self._entries, self.ENTRY_SIZE,
                                       *self.KEY_FIELD, target)
        hi = self._entries - 1
        if hi < 0 or key(0) > target:
            return -1
        lo = 0
        while lo < hi:
            mid = (lo + hi + 1) >> 1
            if key(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def flush(self) -> None:
        if self._mmap is not None and self.writable:
            disk_calls.msync(self._mmap)

    def close(self) -> None:
        """Trim to the valid entries and release the map (``AbstractIndex.close``)."""
        self.trim_to_valid_size()
        self.flush()
        self._mmap = None

    def delete(self) -> None:
        self._mmap = None
        self.path.unlink(missing_ok=True)
