"""One log segment: a ``.log`` of record batches plus its offset and time indexes
(Kafka's ``LogSegment``). Batches are v2 record batches or, in logs an old broker wrote,
v0/v1 log entries ("shallow" legacy batches); both are read, only v2 is appended.

Positions are byte offsets in the ``.log``; offsets are Kafka offsets; timestamps epoch ms.
The segment appends whole batches and keeps ``size`` at the end of the last whole batch, so a
concurrent reader, bounded by ``size``, never sees half a batch.
"""

from __future__ import annotations

import bisect
import logging
import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from crc32c import crc32c

from storage.clock import SYSTEM_CLOCK, Clock
from storage import disk_calls
from storage.config import LogConfig
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.log_files import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    offset_file,
)
from storage.offset_index import OffsetIndex
from storage.open_files import FilePool, PooledFile
from storage.records import LegacyRecordBatch, Record, RecordBatch, batch_at, whole_batch_at
from storage.records._c.scan import (  # this module is their owner
    SegmentScan,
    append_index_entries,
    batch_ends,
    producer_batches,
)
from storage.segment_source import LocalSegmentSource, SegmentSource
from storage.records.framing import (
    ATTRIBUTES_OFFSET,
    HEADER_SIZE_UP_TO_MAGIC,
    RECORD_BATCH_OVERHEAD,
    V2_OFFSETS_AND_MAX_TIMESTAMP,
    Framed,
    entry_size,
    next_batch,
)
from storage.time_index import TimeIndex
from storage.transaction_index import TransactionIndex

__all__ = ["Batch", "BatchBlocks", "LogSegment", "SegmentScan", "batch_ends", "producer_batches"]

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1
IOV_MAX = os.sysconf("SC_IOV_MAX")  # buffers one pwritev may take (1024 on Linux)
_SCAN_BLOCK = 32 * 1024  # bytes read at a time while walking batch headers: two default batches
_RECOVER_BLOCK = 1024 * 1024  # bytes read at a time while validating whole batches
Batch = RecordBatch | LegacyRecordBatch


class _ReadAhead(NamedTuple):
    """The next block being read while the last one is consumed (``BatchBlocks``)."""
    position: int  # where in the .log the read begins
    buffer: memoryview  # the buffer it fills, after the tail's room
    pending: object  # the pending read (``SegmentSource.start_read_into``)
    last: memoryview  # the block consumed meanwhile, whose tail goes in front


class BatchBlocks:
    """The batches of a segment's ``.log`` that start in [``position``, ``end``) (``end``
    defaults to the segment's size), as blocks for the compiled walkers (Kafka's
    ``FileLogInputStream``, a block at a time): each block is read into one reused buffer
    (``buffer``, or ``block_size`` bytes), starts at a batch and holds that batch or legacy
    entry whole, even one larger than the block or crossing ``end``. The consumer walks a
    block and says how far with :meth:`advance`; iteration ends at ``end``, at a torn batch
    (not yet wholly written, or cut) and at a block not advanced (bytes that are not batches,
    or the consumer's stop). ``segment`` is anything with ``size``, ``read_into`` and
    ``read_at`` as :class:`LogSegment` has them (and, to read ahead, ``start_read_into``).

    ``read_ahead=True`` (a bulk reader: its consumer decodes each block whole): while a block
    is consumed the next one is read into a second buffer by a thread of its own
    (``start_read_into``, where the segment's source reads so), the tail of the batch the
    consumer stopped before copied in front of it. A block stays valid until the next is asked
    for, either way."""

    def __init__(self, segment, position: int, end: int | None = None,
                 block_size: int = _RECOVER_BLOCK, buffer=None, read_ahead: bool = False) -> None:
        self.segment = segment
        self.position = position
        self.end = segment.size if end is None else end
        self._buffer = memoryview(bytearray(block_size) if buffer is None else buffer)
        self._read_ahead = read_ahead
        self._spare: memoryview | None = None  # the second buffer, made when first read into

    def __iter__(self) -> Iterator[memoryview | bytes]:
        segment = self.segment
        ahead: _ReadAhead | None = None
        try:
            # (17 bytes or fewer left in the file: a torn entry, nothing more to read)
            while self.position < self.end and \
                    self.position + HEADER_SIZE_UP_TO_MAGIC < segment.size:
                start = self.position
                block, into = self._block_read_ahead(ahead, start) if ahead else (None, None)
                ahead = None
                if block is None:
                    block, into = segment.read_into(self._buffer[:self.end - start], start), \
                        self._buffer
                whole = block
                if len(block) < RECORD_BATCH_OVERHEAD and start + len(block) < segment.size:
                    # cut by ``end`` before a whole header: the header from the file
                    block = segment.read_at(start, min(RECORD_BATCH_OVERHEAD, segment.size - start))
                framed, size = next_batch(block)
                if framed in (Framed.PARTIAL, Framed.LEGACY) and size > len(block):
                    if start + size > segment.size:
                        return
                    block = segment.read_at(start, size)
                if self._read_ahead and block is whole:
                    ahead = self._start_next(block, into, start + len(block))
                yield block
                if self.position == start:
                    return
        finally:
            if ahead:  # (the thread must be done with the buffer before anyone else uses it)
                try:
                    ahead.pending.wait()
                except OSError:
                    pass  # bytes nobody asked for

    def advance(self, consumed: int) -> None:
        """The consumer took ``consumed`` bytes of the last block."""
        self.position += consumed

    # a block read ahead starts this far into its buffer: room for the tail of the block
    # before it (the batch the consumer stopped before), copied in front when it is taken
    _TAIL_ROOM_SHARE = 8

    def _start_next(self, block: memoryview, into: memoryview, position: int
                    ) -> _ReadAhead | None:
        """The read of the bytes after ``block`` (in the buffer ``into``, ending at
        ``position``), started into the other buffer after the tail's room; None when there is
        nothing after it or the segment's source does not read ahead."""
        stop = min(self.end, self.segment.size)
        if position >= stop:
            return None
        if self._spare is None:
            self._spare = memoryview(bytearray(len(self._buffer)))
        target = self._spare if into is self._buffer else self._buffer
        room = len(target) // self._TAIL_ROOM_SHARE
        pending = self.segment.start_read_into(target[room:room + stop - position], position)
        if pending is None:
            self._read_ahead = False  # (its source reads as it is asked)
            return None
        return _ReadAhead(position, target, pending, block)

    def _block_read_ahead(self, ahead: _ReadAhead, start: int
                          ) -> tuple[memoryview | None, memoryview]:
        """(the block from ``start``, its buffer): the tail of the last block (from ``start``
        to where the read ahead begins) copied in front of the bytes read ahead; None when the
        tail does not fit its room (the block is then read whole from ``start``)."""
        position, target, pending, last = ahead
        read = pending.wait()
        room = len(target) // self._TAIL_ROOM_SHARE
        tail = position - start
        if not 0 <= tail <= room:
            return None, target
        target[room - tail:room] = last[len(last) - tail:]
        return target[room - tail:room + len(read)], target


class LogSegment:
    """A segment opened from ``directory`` at ``base_offset``.

    ``writable=False`` never changes a byte on disk (missing index files read as empty).
    ``clock`` (``storage.clock``) dates the segment's creation, what ``segment.ms`` rolls by.
    ``file_suffix`` names files ``<base>.log<suffix>`` and so on: the cleaner writes its
    segment as ``.cleaned`` and renames it (``LogSegment.open(..., fileSuffix)`` and
    :meth:`change_file_suffixes`). ``source`` is where a read-only segment's bytes are read
    (``storage.segment_source``; default: the local files in ``directory``, whose path then
    names the object store's prefix). ``files``: the pool whose descriptors the ``.log``'s is
    one of (``storage.open_files``: its log's; None: one of its own, for a segment read
    alone). Raises OSError when the files cannot be opened.
    """

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, writable: bool,
                 clock: Clock = SYSTEM_CLOCK, file_suffix: str = "",
                 source: SegmentSource | None = None, files: FilePool | None = None):
        self.base_offset = base_offset
        self.clock = clock
        self.config = config
        self.writable = writable
        self.dir = Path(directory)
        self.file_suffix = file_suffix
        flags = (os.O_RDWR | os.O_CREAT) if writable else os.O_RDONLY
        # the .log's descriptor: opened when used, closed when idle (storage.open_files); a
        # segment read through another source names its .log as that source does
        self._file = PooledFile(self._path(LOG_SUFFIX) if source is None else Path(source.name),
                                flags, files)
        # every read of the segment's bytes goes through its source (storage.segment_source)
        self.source: SegmentSource = source or LocalSegmentSource(self._file)
        self.size = self.source.log_size()
        # A writable segment's indexes are mapped now (the loader checks them); a read-only
        # one's are read when first looked up (Kafka's LazyIndex): opening a log reads no index.
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        if writable:
            self.reload_indexes()
        # created on the first aborted transaction, as Kafka's
        self.txn_index = TransactionIndex(self._path(TXN_INDEX_SUFFIX), base_offset, writable,
                                          self.source)
        self._bytes_since_last_index_entry = 0  # of the active segment: resume_appends
        self._max_ts_and_offset: tuple[int, int] | None = None  # loaded lazily, as Kafka
        # A followed segment's last whole batch taken in: (position, its bytes up to the
        # attributes: offset, length, epoch, magic and CRC), to see another writer's rewrite
        self._tail: tuple[int, bytes] | None = None
        self._rolling_based_timestamp: int | None = None
        self.created_ms = clock.milliseconds()
        jitter = min(config.segment_jitter_ms, config.segment_ms)
        self.roll_jitter_ms = random.randrange(jitter) if jitter > 0 else 0

    def _path(self, kind: str, suffix: str | None = None) -> Path:
        """The segment's file of ``kind`` (``.log``, ``.index``, ...) with ``suffix`` (default:
        the segment's own)."""
        return offset_file(self.dir, self.base_offset,
                           kind + (self.file_suffix if suffix is None else suffix))

    @property
    def log_path(self) -> Path:
        return self._file.path

    @log_path.setter
    def log_path(self, path: Path) -> None:  # (renamed .deleted: the same file, a new name)
        self._file.path = path

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self.reload_indexes()
        return self._offset_index

    @offset_index.setter
    def offset_index(self, index: OffsetIndex) -> None:
        self._offset_index = index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self.reload_indexes()
        return self._time_index

    @time_index.setter
    def time_index(self, index: TimeIndex) -> None:
        self._time_index = index

    # -- timestamps -------------------------------------------------------------------------

    @property
    def max_timestamp_and_offset_so_far(self) -> tuple[int, int]:
        """(largest timestamp, last offset of the first batch carrying it); from the last
        time-index entry until an append says more (``maxTimestampAndOffsetSoFar``)."""
        # Not cached here: readers call this unlocked and must not overwrite an append's value.
        if self._max_ts_and_offset is None:
            return self.time_index.last_entry
        return self._max_ts_and_offset

    @property
    def largest_timestamp(self) -> int:
        """The largest record timestamp, or the .log mtime when no record has one
        (``LogSegment.largestTimestamp``); epoch ms."""
        ts = self.max_timestamp_and_offset_so_far[0]
        return ts if ts >= 0 else self.modified_ms()

    def modified_ms(self) -> int:
        """The .log's mtime, epoch ms."""
        return self.source.modified_ms()

    def first_batch_timestamp(self) -> int:
        """The first batch's max timestamp, epoch ms (-1 when empty): what ``segment.ms`` rolls
        and ``max.compaction.lag.ms`` count from (Kafka 4.1's ``getFirstBatchTimestamp``)."""
        if self._rolling_based_timestamp is None:
            for _, batch in self.scan_batches(0):
                self._rolling_based_timestamp = batch.max_timestamp
                break
        return -1 if self._rolling_based_timestamp is None else self._rolling_based_timestamp

    def time_waited_for_roll(self, now: int, message_timestamp: int) -> int:
        """Record time since the first batch, or wall time since creation when the segment has
        no timestamps (``LogSegment.timeWaitedForRoll``)."""
        first = self.first_batch_timestamp()
        return message_timestamp - first if first >= 0 else now - self.created_ms

    def should_roll(self, messages_size: int, max_timestamp: int, max_offset: int, now: int) -> bool:
        """Kafka's ``LogSegment.shouldRoll``: full by size, by time (``segment.ms`` minus
        jitter), by index, or the incoming offsets do not fit a relative int32."""
        reached_roll_ms = (
            self.time_waited_for_roll(now, max_timestamp)
            > self.config.segment_ms - self.roll_jitter_ms
        )
        return (
            self.size > self.config.segment_bytes - messages_size
            or (self.size > 0 and reached_roll_ms)
            or self.offset_index.is_full()
            or self.time_index.is_full()
            or not self.offset_index.can_append_offset(max_offset)
        )

    # -- appending --------------------------------------------------------------------------

    def append(self, largest_offset: int, largest_timestamp: int,
               shallow_offset_of_max_timestamp: int, data: bytes) -> None:
        """Append whole record batches (``LogSegment.append``).

        ``data`` holds one or more v2 batches; ``largest_offset`` is the last offset in it
        (checked against the index's 32-bit range); ``largest_timestamp`` and
        ``shallow_offset_of_max_timestamp`` describe the whole append, but the indexes follow
        each batch's own header, as Kafka 4.1's ``LogSegment.append`` does: for each batch, the
        largest timestamp so far is updated from its maxTimestamp (with its last offset), and
        when more than ``index.interval.bytes`` were appended since the last entry, the offset
        index gets (the batch's last offset → its position) and the time index the largest
        timestamp so far. (Kafka at commit 1eb7644, October 2024, which wrote the older
        fixtures, made one entry per append: the append's last offset at the position of its
        first batch; 4.1.1, the pinned broker, indexes per batch.)
        Raises IndexOffsetOverflowError, ValueError (the segment would pass 2 GiB) and OSError
        (the .log is cut back to its old size first, so nothing half-written remains)."""
        self.append_each([(data, largest_offset, largest_timestamp, shallow_offset_of_max_timestamp)])

    def index_room(self) -> int:
        """Index entries either index can still take (an append adds at most one per batch)."""
        return min(self.offset_index.max_entries - self.offset_index.entries,
                   self.time_index.max_entries - self.time_index.entries - 1)

    def append_each(self, appends: list[tuple[bytes, int, int, int]]) -> None:
        """:meth:`append` of each ``(data, largest offset, largest timestamp, shallow offset of
        the max timestamp)`` in turn, index entries exactly as so many appends make them (one
        rule per batch, so the grouping changes none), with the bytes written at once. Raises as
        :meth:`append` (nothing of any stays on error)."""
        position = self.size
        total = sum(len(a[0]) for a in appends)
        if not total:
            return
        self.offset_index.relative_offset(appends[-1][1])
        if position + total > _INT32_MAX:
            raise ValueError(f"segment {self.log_path} would exceed 2 GiB")
        if position == 0:  # Kafka 4.1: the first batch's maxTimestamp (loadFirstBatchTimestamp)
            self._rolling_based_timestamp = V2_OFFSETS_AND_MAX_TIMESTAMP.unpack_from(appends[0][0])[3]
        buffers = [a[0] for a in appends]
        self._write_at(buffers, position)
        self.size = position + total
        # each batch's entries as Kafka 4.1's LogSegment.append makes them (compiled: a write
        # of 128 KiB holds ~8 producer batches, and this is per-batch work)
        offset_entries, time_entries, self._bytes_since_last_index_entry, *largest = \
            append_index_entries(buffers, self.base_offset, position,
                                 self._bytes_since_last_index_entry,
                                 self.config.index_interval_bytes,
                                 *self.max_timestamp_and_offset_so_far,
                                 self.time_index.last_entry[0])
        self._max_ts_and_offset = tuple(largest)
        self.offset_index.append_entries(offset_entries)
        self.time_index.append_entries(time_entries, spare=1)  # (TimeIndex.isFull: one early)

    def _write_at(self, buffers: list[bytes], position: int) -> None:
        """Write ``buffers`` one after the other from ``position`` (pwritev, no joined copy; at
        most IOV_MAX buffers a call, the kernel's limit: EINVAL past it); on OSError the .log
        is cut back to ``position`` first."""
        try:
            first, skip = 0, 0  # the next buffer to write, and how much of it is written
            while first < len(buffers):
                chunk = buffers[first:first + IOV_MAX]
                if skip:
                    chunk[0] = memoryview(chunk[0])[skip:]
                with self._file as fd:
                    written = disk_calls.pwritev(fd, chunk, position)
                position += written
                written += skip
                while first < len(buffers) and written >= len(buffers[first]):
                    written -= len(buffers[first])
                    first += 1
                skip = written
        except OSError:
            with self._file as fd:
                disk_calls.ftruncate(fd, self.size)
            raise

    # -- reading ----------------------------------------------------------------------------

    def read_at(self, position: int, size: int, nowait: bool = False) -> bytes:
        """``size`` bytes of the .log from ``position`` (short only at the end of the file).

        ``nowait=True`` is for callers on an event loop: it raises BlockingIOError instead of
        waiting for the disk when the bytes are not all in the page cache (``RWF_NOWAIT``)."""
        return self.source.read_at(position, size, nowait)

    def read_into(self, buffer: bytearray, position: int) -> memoryview:
        """Up to ``len(buffer)`` bytes of the .log from ``position``, up to the segment size,
        read into ``buffer`` (reused by bulk readers: fresh pages cost more than the copy)."""
        return self.source.read_into(self._up_to_size(buffer, position), position)

    def start_read_into(self, buffer, position: int):
        """:meth:`read_into` begun on a thread of its own (``SegmentSource.start_read_into``):
        a pending read whose ``wait()`` gives the part of ``buffer`` filled, or None where the
        source does not read ahead so."""
        return self.source.start_read_into(self._up_to_size(buffer, position), position)

    def _up_to_size(self, buffer, position: int) -> memoryview:
        return memoryview(buffer)[:max(min(len(buffer), self.size - position), 0)]

    def scan_batches(self, position: int, end: int | None = None,
                     nowait: bool = False) -> Iterator[tuple[int, Batch]]:
        """Yield (position, batch) for each whole batch from ``position`` up to ``end``
        (default: the segment size), stopping silently at a partial batch, as Kafka's
        ``FileLogInputStream``. A batch is a RecordBatch (magic 2) or a LegacyRecordBatch (a
        v0/v1 log entry), chosen by its magic byte. Each is parsed from a block read ahead, so
        it holds at least its header (see ``is_complete``). Raises as ``whole_batch_at`` (Kafka's
        ``FileLogInputStream.nextBatch``); BlockingIOError as :meth:`read_at` with ``nowait``."""
        end = self.size if end is None else end
        block, block_pos, block_len = b"", position, 0
        while position + HEADER_SIZE_UP_TO_MAGIC < end:
            rel = position - block_pos
            # past the block, or a header may be cut where the block (not the segment) ends
            if rel < 0 or (rel + RECORD_BATCH_OVERHEAD > block_len
                           and block_pos + block_len < end):
                size = min(_SCAN_BLOCK, end - position)
                block, block_pos, rel = self.read_at(position, size, nowait), position, 0
                block_len = len(block)
                if block_len < HEADER_SIZE_UP_TO_MAGIC:  # the file is shorter than the segment
                    return
            batch = whole_batch_at(block, rel, end - block_pos)
            if batch is None:  # torn, at end or where the file ends
                return
            yield position, batch
            position += batch.size_in_bytes

    def producer_batches(self, position: int, known: list[int] | None = None
                         ) -> Iterator[tuple[int, Batch]]:
        """(position, whole batch) of each batch from ``position`` that has a producer id or is
        a control batch (what a producer-state replay needs; the others only move the map end
        offset): at the ``known`` positions (from :meth:`recover`), else found by walking the
        headers in large blocks with the compiled codec."""
        if known is not None:
            for at in known[bisect.bisect_left(known, position):]:
                header = batch_at(self.read_at(at, RECORD_BATCH_OVERHEAD))
                yield at, batch_at(self.read_at(at, header.size_in_bytes))
            return
        blocks = BatchBlocks(self, position)
        for block in blocks:
            positions, consumed = producer_batches(block)
            for at in positions:  # copied out of the reused buffer
                yield blocks.position + at, batch_at(bytes(block[at:at + entry_size(block, at)]))
            if not consumed:  # not a batch: scan_batches raises Kafka's error for it
                next(self.scan_batches(blocks.position), None)
            blocks.advance(consumed)

    def find_batch(self, offset: int, nowait: bool = False) -> tuple[int, Batch] | None:
        """(position, batch) of the first batch whose last offset >= ``offset``, found by
        the offset index then a forward scan (``LogSegment.translateOffset``); None if none."""
        index = self.offset_index
        slot = index.slot_for(offset)  # the last entry at or below offset; -1: none
        exact = slot >= 0 and index.entry(slot)[0] == offset
        found = self._indexed_batch(slot if exact else slot + 1, offset, nowait)
        if found is not None:
            return found
        start_position = index.entry(slot)[1] if slot >= 0 else 0
        for position, batch in self.scan_batches(start_position, nowait=nowait):
            if batch.last_offset >= offset:
                return position, batch
        return None

    def _indexed_batch(self, slot: int, offset: int, nowait: bool) -> tuple[int, Batch] | None:
        """The scan's answer read alone when index entry ``slot`` (the first whose offset, a
        batch's last, is >= ``offset``) names the batch holding ``offset``: always so when
        every batch is indexed (batches of index.interval.bytes or more, the usual case), as
        offsets only grow. None to scan instead: no such entry, or batches between."""
        index = self.offset_index
        if slot >= index.entries:
            return None
        position = index.entry(slot)[1]
        end = index.entry(slot + 1)[1] if slot + 1 < index.entries else position + _SCAN_BLOCK
        end = min(end, self.size)
        if end - position <= HEADER_SIZE_UP_TO_MAGIC:
            return None
        block = self.read_at(position, end - position, nowait)
        batch = whole_batch_at(block, 0, self.size - position)
        if isinstance(batch, RecordBatch) and batch.base_offset <= offset <= batch.last_offset:
            return position, batch
        return None

    def read_batch(self, position: int, header: Batch, nowait: bool = False) -> Batch:
        """The whole batch at ``position``, CRC-checked (the scan's block is reused when it
        holds the whole batch). Raises CorruptRecordError; BlockingIOError with ``nowait``."""
        batch = header if header.is_complete else batch_at(
            self.read_at(position, header.size_in_bytes, nowait))
        batch.ensure_valid()
        return batch

    def read_records(self, position: int, header: Batch) -> list[Record]:
        """Every record of the batch at ``position``, CRC-checked and decompressed.
        Raises CorruptRecordError / InvalidRecordError."""
        return self.read_batch(position, header).records()

    def read_next_offset(self) -> int:
        """The offset after the last batch, or the base offset when empty
        (``LogSegment.readNextOffset``)."""
        next_offset = self.base_offset
        start = self.offset_index.lookup(self.offset_index.last_offset)[1]
        for _, batch in self.scan_batches(start):
            next_offset = batch.next_offset
        return next_offset

    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int,
                                 nowait: bool = False) -> Record | None:
        """The first data record with timestamp >= ``timestamp`` and offset >=
        ``starting_offset`` (``LogSegment.findOffsetByTimestamp``): time index, then offset
        index, then a scan of the batches whose max timestamp reaches the target. Control
        batches are skipped: no consumer ever sees them."""
        indexed_offset = self.time_index.lookup(timestamp)[1]
        position = self.offset_index.lookup(max(indexed_offset, starting_offset))[1]
        for pos, batch in self.scan_batches(position, nowait=nowait):
            if batch.max_timestamp >= timestamp and not batch.is_control_batch:
                record = self.read_batch(pos, batch, nowait).first_record_from_time(
                    timestamp, starting_offset)
                if record is not None:
                    return record
        return None

    # -- following another writer (read-only segments) -----------------------------------------

    def file_size(self) -> int:
        """The .log's length on disk now: past ``size`` while another process appends."""
        return self.source.log_size()

    def is_file_on_disk(self) -> bool:
        """Whether ``log_path`` still names the file this segment reads (not deleted, renamed
        ``.deleted`` or replaced by a cleaner's swap)."""
        return self._file.is_same_file(self.log_path)

    def reload_indexes(self) -> None:
        """Open the offset and time indexes (again): a read-only segment reads the entries
        another process (a broker) appended since. Call it before reading the .log's new size:
        a broker writes a batch before its index entries, so every entry read names bytes
        already there."""
        indexes = []
        for kind, suffix in ((OffsetIndex, INDEX_SUFFIX), (TimeIndex, TIME_INDEX_SUFFIX)):
            path = self._path(suffix)
            contents = None if self.writable else self.source.read_index(path)
            indexes.append(kind(path, self.base_offset, self.config.segment_index_bytes,
                                self.writable, contents))
        self._offset_index, self._time_index = indexes

    def catch_up(self) -> int | None:
        """Take in the whole batches another process appended to the .log since ``size``
        (a torn last batch waits for the next call): reread the indexes, then move ``size`` to
        the end of the last whole batch. Returns the next offset after the new batches, or
        None when nothing whole was added. Raises CorruptRecordError for bytes that are not
        batches (``size`` then stays before them)."""
        if self.file_size() <= self.size:
            return None
        self.reload_indexes()
        end, next_offset, last = self.size, None, None
        for position, batch in self.scan_batches(self.size, self.file_size()):
            end, next_offset, last = position + batch.size_in_bytes, batch.next_offset, position
        self.size = end
        if last is not None:
            self._keep_tail(last)
        return next_offset

    def _keep_tail(self, position: int) -> None:
        self._tail = (position, bytes(self.read_at(position, ATTRIBUTES_OFFSET)))

    def tail_unchanged(self) -> bool:
        """Whether the last whole batch this followed segment took in (:meth:`catch_up`,
        :meth:`last_whole_batch_end`) is still there, byte for byte up to its CRC: False once
        another writer cut the segment back and wrote other batches in its place, even past
        the size read (a broker's follower truncating to its leader, ``LocalLog.truncateTo``,
        then fetching). True when nothing was taken in yet. One read of 21 bytes."""
        if self._tail is None:
            return True
        position, header = self._tail
        return self.read_at(position, len(header)) == header

    # -- lifecycle --------------------------------------------------------------------------

    def on_become_inactive(self) -> None:
        """On roll: the final time-index entry, then trim both indexes
        (``LogSegment.onBecomeInactiveSegment``)."""
        self.time_index.maybe_append(*self.max_timestamp_and_offset_so_far, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    def last_whole_batch_end(self) -> int:
        """The position after the last whole batch, scanning from the last index entry: less
        than ``size`` when the tail is a torn batch."""
        end = self.offset_index.lookup(self.offset_index.last_offset)[1]
        last = None
        for position, batch in self.scan_batches(end):
            end, last = position + batch.size_in_bytes, position
        if last is not None and not self.writable:
            self._keep_tail(last)
        return end

    def recover(self, epochs=None, producer_positions: list[int] | None = None,
                before_cut: Callable[[int, int, str | None], None] | None = None) -> int:
        """Rebuild both indexes from the .log and cut off a torn or corrupt tail: from the first
        batch that is incomplete, fails its CRC or size checks, or whose offsets go backwards
        (``LogSegment.recover``). v2 batches are checked by the compiled ``SegmentScan`` a block
        at a time; legacy v0/v1 entries count as one shallow batch each, as in Kafka: index
        entries name the entry's offset, and v0 entries (no timestamp) add none to the time
        index. Returns the number of bytes truncated. Raises IndexOffsetOverflowError for
        offsets beyond the segment's 32-bit range (Kafka splits such legacy segments; they are
        not cut off as corrupt). ``epochs`` (a LeaderEpochFileCache) learns the leader epoch of
        every valid batch; ``producer_positions`` gets the positions of the valid batches that
        carry a producer id or are control batches (what a producer-state replay needs).
        ``before_cut(position, next offset, problem or None for a torn batch)`` is called
        before a tail is cut (e.g. to keep it); what it raises leaves the segment untouched."""
        self.size = self.file_size()
        scan = SegmentScan(self.base_offset, crc32c, self.base_offset, stop_at_problem=True)
        self.scan_whole_batches(scan)
        valid_bytes = scan.valid_end
        if scan.problems:
            log.warning("found invalid data in %s at byte %d: %s", self.log_path, valid_bytes,
                        scan.problems[0][1])
        truncated = self.size - valid_bytes
        if truncated > 0 and before_cut is not None and scan.overflow_offset < 0:
            before_cut(valid_bytes, scan.next_offset, scan.problems[0][1] if scan.problems else None)
        self.offset_index.reset(self.config.segment_index_bytes)
        self.time_index.reset(self.config.segment_index_bytes)
        self.txn_index.reset()  # the loader's producer-state replay writes it again
        self._max_ts_and_offset = None
        if scan.overflow_offset >= 0:
            self.offset_index.relative_offset(scan.overflow_offset)  # raises, as Kafka
        if truncated > 0:
            log.warning("truncating %s from %d to %d bytes", self.log_path, self.size, valid_bytes)
            with self._file as fd:
                disk_calls.ftruncate(fd, valid_bytes)
            self.size = valid_bytes
        offset_entries, time_entries = scan.index_entries(self.config.index_interval_bytes)
        self.offset_index.append_entries(offset_entries)
        self.time_index.append_entries(time_entries, spare=1)
        if epochs is not None:
            for epoch, base in scan.epoch_starts():
                if epoch > epochs.latest_epoch:
                    epochs.assign(epoch, base)
        if producer_positions is not None:
            producer_positions.extend(p for p in scan.producer_positions if p < valid_bytes)
        largest = scan.max_timestamp_and_offset()
        if largest[0] >= 0:
            self._max_ts_and_offset = largest
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(*self.max_timestamp_and_offset_so_far, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        return truncated

    def scan_whole_batches(self, scan: SegmentScan, position: int = 0) -> None:
        """Feed the .log from byte ``position`` to ``scan`` (a ``SegmentScan``) in large blocks
        until it ends, tears or stops at a problem; legacy entries are checked here, one by
        one. Afterwards ``scan.valid_end`` is the end of the last whole valid batch."""
        if scan.problems:
            return
        blocks = BatchBlocks(self, position)
        for block in blocks:
            consumed = scan.scan(block, blocks.position)
            if scan.at_legacy:
                consumed += self._recover_legacy(scan, block, consumed, blocks.position + consumed)
            blocks.advance(consumed)
            if scan.problems:
                return

    def _recover_legacy(self, scan: SegmentScan, block, rel: int, position: int) -> int:
        """Check the legacy entry at ``block[rel:]`` (the .log's ``position``) as recovery
        does and record it; its size, or 0 when it is torn or bad (with a problem)."""
        size = entry_size(block, rel)
        if position + size > self.size:
            return 0
        if rel + size > len(block):
            block, rel = self.read_at(position, size), 0
        try:
            batch = LegacyRecordBatch(block, rel)
            batch.ensure_valid()
        except (CorruptRecordError, InvalidRecordError) as e:
            scan.problems.append((position, str(e)))
            return 0
        # A legacy wrapper's first offset is only known after decompression, which recovery
        # never does (as Kafka): its own offset, the last one, is checked instead.
        scan.add(position, size, batch.last_offset, batch.last_offset, batch.max_timestamp,
                 batch.partition_leader_epoch)
        return 0 if scan.problems else size

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding offsets >= ``offset`` (whole batches) and their index
        entries (``LogSegment.truncateTo``). Returns the bytes removed."""
        found = self.find_batch(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.resize_indexes(self.config.segment_index_bytes)
        truncated = 0
        if found is not None:
            position = found[0]
            truncated = self.size - position
            with self._file as fd:
                disk_calls.ftruncate(fd, position)
            self.size = position
        if self.size == 0:  # empty, even before (Kafka): as if created now
            self.created_ms = self.clock.milliseconds()
            self._rolling_based_timestamp = None
        self.resume_appends()  # (a segment that was not the active one may become it)
        return truncated

    def resume_appends(self) -> None:
        """Make the segment's append state what the writer that appended its .log would have
        now, so the indexes come out as one uninterrupted writer's whatever the number of
        writers, restarts and recoveries (Kafka starts the count at 0 in every new LogSegment
        object and after ``truncateTo``, so each restart shifts its index points):

        * the bytes since the last index entry: from the last offset-index entry's position to
          the size (an entry names the start of the batch it was added before, and the count
          restarts there with that batch's size; all of it with no entry), as
          ``LogSegment.append`` counts them and ``recover`` measures them;
        * the time-index entries past the last offset-index entry go (every entry of an
          append is added with an offset-index entry, at an offset at most the batch's last
          offset: one past it is a final entry of a close, a roll or a recovery, which the
          next close writes again);
        * the largest timestamp so far: the last time-index entry's, then the batches from the
          last offset-index entry on (``LogSegment.loadLargestTimestamp``; ties keep the earlier).

        For the active segment of a writable log: the loader calls it, and :meth:`truncate_to`.
        Raises CorruptRecordError / InvalidRecordError when a batch after the last entry cannot
        be read."""
        index = self.offset_index
        last_offset, position = index.lookup(index.last_offset)
        self.time_index.truncate_to(last_offset + 1 if index.entries else self.base_offset)
        largest = self.time_index.last_entry
        for _, batch in self.scan_batches(position):
            if batch.max_timestamp > largest[0]:
                largest = (batch.max_timestamp, batch.last_offset)
        self._max_ts_and_offset = largest
        self._bytes_since_last_index_entry = self.size - position

    def flush(self) -> None:
        """fsync the .log and the indexes."""
        with self._file as fd:
            disk_calls.fsync(fd)
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Final time-index entry (if the max is known), trim, close (``LogSegment.close``)."""
        if self.writable:
            if self._max_ts_and_offset is not None:
                self.time_index.maybe_append(*self._max_ts_and_offset, skip_full_check=True)
            self.offset_index.close()
            self.time_index.close()
        self.txn_index.close()
        self._file.close()
        self.source.close()

    def rename_to_deleted(self) -> None:
        """Rename every file of the segment to ``<name>.deleted``: readers holding it keep
        working until the delayed delete."""
        self.change_file_suffixes(DELETED_SUFFIX)

    def change_file_suffixes(self, new_suffix: str,
                             step: Callable[[str], None] = lambda _: None) -> None:
        """Rename every file of the segment from its suffix to ``new_suffix``, the .log first
        (``LogSegment.changeFileSuffixes``; a crash between renames leaves a mix the loader
        resolves); ``step(what)`` after each rename."""
        for kind, owner, attr in ((LOG_SUFFIX, self, "log_path"),
                                  (INDEX_SUFFIX, self.offset_index, "path"),
                                  (TIME_INDEX_SUFFIX, self.time_index, "path"),
                                  (TXN_INDEX_SUFFIX, self.txn_index, "path")):
            path, renamed = getattr(owner, attr), self._path(kind, new_suffix)
            if path.exists():
                disk_calls.replace(path, renamed)
                step(f"renamed {kind}{self.file_suffix} to {kind}{new_suffix}")
            setattr(owner, attr, renamed)
        self.file_suffix = new_suffix

    def delete(self) -> None:
        """Close and remove the segment's files."""
        self._file.close()
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()
        self.log_path.unlink(missing_ok=True)
