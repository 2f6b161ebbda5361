"""One cleaning pass over one partition log (Kafka's ``Cleaner``, with its
``CleanedTransactionMetadata``, ``CleanerStats`` and the ``.cleaned`` segment it writes).

A pass, as Kafka's ``Cleaner.doClean``:

1. **Offset map** of the dirty section ``[first dirty offset, first uncleanable offset)``: the
   latest offset of each key (MD5 of the key -> offset, :class:`SkimpyOffsetMap`), filled to
   ``log.cleaner.io.buffer.load.factor`` of its slots. Aborted transactions' records and control
   records are not mapped. When the map fills, the pass ends early at the last offset mapped.
2. **Groups**: the segments below that end, consecutive ones merged while their ``.log`` sizes
   fit ``segment.bytes``, their index sizes ``segment.index.bytes`` and their offsets a 32-bit
   relative offset.
3. **Recopy** each group into ``<first base>.log.cleaned`` (+ ``.index``, ``.timeindex``,
   ``.txnindex``) through ``MemoryRecords.filterTo``'s rules (the compiled
   ``storage.offset_map.RecordFilter``), a read buffer at a time as Kafka reads; then
   ``Log.replace_segments`` renames it ``.swap``, the old segments ``.deleted`` and the new one
   to its final name, and swaps it into the log under the log's lock.

Offsets and timestamps never change: a batch keeps its base and last offset, records keep their
offsets and timestamps (a tombstone's batch gets a delete horizon in its base timestamp, its
records' deltas rebased). Every batch read is CRC-checked; a corrupt one raises
CorruptRecordError and nothing of the group is swapped in.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

from crc32c import crc32c

from storage.clock import SYSTEM_CLOCK, Clock
from storage.errors import CorruptRecordError, InvalidRecordError, LogCleaningAbortedError
from storage.offset_map import RecordFilter, SkimpyOffsetMap, map_run, map_section
from storage.log_files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    log_file,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from storage.records import RecordBatch, batch_at, compress, decompress
from storage.records.control import ControlRecordType, decode_control_record_key
from storage.records.framing import next_batch_size
from storage.segment import LogSegment
from storage.transaction_index import AbortedTxn, TransactionIndex

log = logging.getLogger(__name__)

_INT32_MAX = 2**31 - 1


def crash_point(step: str) -> None:
    """Called at each step of writing and swapping in a cleaned segment (a no-op: the crash
    tests replace it to stop the process there)."""


# -- statistics ------------------------------------------------------------------------------


@dataclass
class CleanerStats:
    """Figures of one pass (Kafka's ``CleanerStats``): bytes and records read while mapping
    (``map_*``) and while recopying, bytes and records written, keyless records dropped, the
    map's final utilization; times are ``clock.monotonic()`` seconds."""

    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    messages_written: int = 0
    invalid_messages_read: int = 0
    buffer_utilization: float = 0.0
    clock: Clock = SYSTEM_CLOCK
    start_time: float = -1.0
    map_complete_time: float = -1.0
    end_time: float = -1.0

    def __post_init__(self) -> None:
        if self.start_time < 0:
            self.start_time = self.clock.monotonic()

    def index_done(self) -> None:
        self.map_complete_time = self.clock.monotonic()

    def all_done(self) -> None:
        self.end_time = self.clock.monotonic()

    def elapsed_secs(self) -> float:
        end = self.end_time if self.end_time >= 0 else self.clock.monotonic()
        return max(end - self.start_time, 1e-9)

    def elapsed_index_secs(self) -> float:
        return max(self.map_complete_time - self.start_time, 1e-9)


# -- transaction state while cleaning --------------------------------------------------------


class CleanedTransactionMetadata:
    """The transactions the cleaner walks through (Kafka's ``CleanedTransactionMetadata``):
    aborted ones (from the transaction indexes) whose data batches are removed, committed ones
    whose data was seen. Decides when a marker may go: an ABORT marker stays (and its original
    ``AbortedTxn`` entry is copied to the cleaned ``.txnindex``) while a batch of its
    transaction was seen in this pass; a COMMIT marker while one of its data batches was."""

    def __init__(self) -> None:
        self._aborted: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._ongoing_committed: set[int] = set()
        self._ongoing_aborted: dict[int, list] = {}  # producer id -> [txn, last batch seen]
        self._seq = 0
        self.cleaned_index: TransactionIndex | None = None

    def add_aborted_transactions(self, txns: list[AbortedTxn]) -> None:
        for txn in txns:
            heapq.heappush(self._aborted, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def consume_aborted_txns_up_to(self, offset: int) -> None:
        while self._aborted and self._aborted[0][0] <= offset:
            txn = heapq.heappop(self._aborted)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, None])

    def on_control_batch_read(self, batch: RecordBatch) -> bool:
        """True when the control batch may be discarded."""
        self.consume_aborted_txns_up_to(batch.last_offset)
        records = batch.records()
        if not records:
            return True  # an empty control batch was cleaned already
        kind = decode_control_record_key(records[0].key).type
        if kind == ControlRecordType.ABORT:
            ongoing = self._ongoing_aborted.pop(batch.producer_id, None)
            if ongoing is not None and ongoing[1] is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(ongoing[0])
                return False
            return True
        if kind == ControlRecordType.COMMIT:
            if batch.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(batch.producer_id)
                return False
            return True
        return False

    def on_batch_read(self, batch: RecordBatch) -> bool:
        """True when the data batch belongs to an aborted transaction (it may go)."""
        self.consume_aborted_txns_up_to(batch.last_offset)
        if not batch.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(batch.producer_id)
        if ongoing is not None:
            ongoing[1] = batch.last_offset
            return True
        self._ongoing_committed.add(batch.producer_id)
        return False


# -- the segment being written ---------------------------------------------------------------


def cleaned_segment(log_, base_offset: int) -> LogSegment:
    """The segment a pass writes: a LogSegment of ``log_``'s directory at ``base_offset`` with
    the ``.cleaned`` suffix (``LogCleaner.createNewCleanedSegment``), renamed ``.swap`` and to
    the final names by ``Log.replace_segments``. Leftover files of an earlier attempt are
    replaced. Raises OSError (e.g. ENOSPC)."""
    for file in (log_file, offset_index_file, time_index_file, transaction_index_file):
        file(log_.dir, base_offset, CLEANED_SUFFIX).unlink(missing_ok=True)
    return LogSegment(log_.dir, base_offset, log_.config, True, log_.clock,
                      file_suffix=CLEANED_SUFFIX, files=log_.files)


def _finish(cleaned: LogSegment, last_modified_ns: int) -> None:
    """``onBecomeInactiveSegment``, flush, and the source segments' last modification time
    (retention by time falls back on it)."""
    cleaned.on_become_inactive()
    cleaned.flush()
    for path in (cleaned.log_path, cleaned.offset_index.path, cleaned.time_index.path):
        os.utime(path, ns=(last_modified_ns, last_modified_ns))


@contextlib.contextmanager
def _ctrl_c_after():
    """Hold SIGINT back while the block runs (its handler, in the main thread, raises
    KeyboardInterrupt): a Ctrl-C during a swap's renames takes effect once the swap is whole,
    so an interrupted ``kfs compact`` leaves the segments before the swap or after it, never a
    ``.swap`` half-way. Outside the main thread (a mount's cleaner) a no-op."""
    previous = signal.getsignal(signal.SIGINT)
    if threading.current_thread() is not threading.main_thread() or previous is None:
        yield
        return
    caught: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, _frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if caught:
            signal.raise_signal(signal.SIGINT)  # now, through the handler it held back


# -- throttling ------------------------------------------------------------------------------


class Throttler:
    """Keeps the cleaner's I/O at ``log.cleaner.io.max.bytes.per.second`` (Kafka's
    ``Throttler``: checked every 300 ms, sleeping off any excess)."""

    CHECK_INTERVAL_S = 0.3

    def __init__(self, bytes_per_second: float, clock: Clock = SYSTEM_CLOCK):
        self.rate = bytes_per_second
        self._clock = clock
        self._start = clock.monotonic()
        self._observed = 0.0

    def maybe_throttle(self, observed: int) -> None:
        if self.rate >= 1.7e308:
            return
        self._observed += observed
        elapsed = self._clock.monotonic() - self._start
        if elapsed >= self.CHECK_INTERVAL_S:
            ahead = self._observed / self.rate - elapsed
            if ahead > 0:
                self._clock.sleep(ahead)
            self._start, self._observed = self._clock.monotonic(), 0.0


# -- the pass --------------------------------------------------------------------------------


def log_segments(segments: list[LogSegment], start: int, end: int) -> list[LogSegment]:
    """The segments holding offsets in [start, end) (``LogSegments.values(from, to)``): from
    the one containing ``start`` to the last whose base offset is below ``end``."""
    if start == end:
        return []
    first = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= start:
            first = i
    return [s for s in segments[first:] if s.base_offset < end]


def _mtime_ns(segment: LogSegment) -> int:
    return os.stat(segment.log_path).st_mtime_ns


def _decompress(codec: int, view) -> bytes:
    return decompress(codec, view)


def _compress(codec: int, data: bytes) -> bytes:
    return compress(codec, data)  # Kafka's default level, as MemoryRecordsBuilder


class Cleaner:
    """The cleaning logic (Kafka's ``Cleaner``): an offset map of
    ``log.cleaner.dedupe.buffer.size`` bytes, read and write buffers of ``io_buffer_size``
    bytes each (grown up to ``max_io_buffer_size`` for a larger batch), the map filled to
    ``dup_buffer_load_factor``. ``check_done()`` is called between reads (it may raise
    LogCleaningAbortedError)."""

    def __init__(self, offset_map: SkimpyOffsetMap, io_buffer_size: int, max_io_buffer_size: int,
                 dup_buffer_load_factor: float, throttler: Throttler | None = None,
                 check_done: Callable[[], None] = lambda: None,
                 progress: Callable[[int], None] = lambda n: None):
        if offset_map.slots * dup_buffer_load_factor <= 1:
            raise ValueError("offset map is too small to fit in even a single message, so log "
                             "cleaning will never make progress. You can increase "
                             "log.cleaner.dedupe.buffer.size")
        self.offset_map = offset_map
        self.io_buffer_size = io_buffer_size
        self.max_io_buffer_size = max_io_buffer_size
        self.dup_buffer_load_factor = dup_buffer_load_factor
        self.throttler = throttler or Throttler(float("inf"))
        self.check_done = check_done
        self.progress = progress
        self._read_buffer = bytearray(io_buffer_size)
        self._write_capacity = io_buffer_size

    # ---- doClean

    def clean(self, log_, first_dirty_offset: int, first_uncleanable_offset: int,
              now: int) -> tuple[int, CleanerStats]:
        """Clean ``log_`` (a ``storage.log.Log``) up to ``first_uncleanable_offset`` (a
        segment base) with the clock at ``now`` (epoch ms: delete horizons, tombstone expiry).
        Returns (the first offset not cleaned, the pass's figures). Raises CorruptRecordError /
        InvalidRecordError for bad data, OSError, LogCleaningAbortedError."""
        log.info("Beginning cleaning of log %s", log_.name)
        stats = CleanerStats(clock=log_.clock)
        log.info("Building offset map for %s...", log_.name)
        self.build_offset_map(log_, first_dirty_offset, first_uncleanable_offset, stats)
        end_offset = self.offset_map.latest_offset + 1
        stats.index_done()
        txn_metadata = CleanedTransactionMetadata()
        segments = log_.segments.all()
        groups = self.group_segments_by_size(
            log_segments(segments, 0, end_offset), log_.config.segment_bytes,
            log_.config.segment_index_bytes, first_uncleanable_offset)
        log.info("Cleaning log %s (cleaning prior to offset %d, %d group(s))...", log_.name,
                 end_offset, len(groups))
        for group in groups:
            self.clean_segments(log_, group, now, stats, txn_metadata, first_uncleanable_offset)
        stats.buffer_utilization = self.offset_map.utilization
        stats.all_done()
        return end_offset, stats

    # ---- the offset map

    def build_offset_map(self, log_, start: int, end: int, stats: CleanerStats) -> None:
        """Map the keys of [start, end) (``buildOffsetMap``), segment by segment until the map
        is full."""
        m = self.offset_map
        m.clear()
        dirty = log_segments(log_.segments.all(), start, end)
        log.info("Building offset map for log %s for %d segments in offset range [%d, %d).",
                 log_.name, len(dirty), start, end)
        txn_metadata = CleanedTransactionMetadata()
        txn_metadata.add_aborted_transactions(log_.reader.collect_aborted_transactions(start, end))
        ends = [s.base_offset for s in dirty[1:]] + [end]
        for segment, next_start in zip(dirty, ends):
            self.check_done()
            if self._map_segment(log_, segment, start, next_start, txn_metadata, stats):
                log.debug("Offset map is full; segment %d is partially mapped",
                          segment.base_offset)
                break

    def _map_segment(self, log_, segment: LogSegment, start: int, next_start: int,
                     txn_metadata: CleanedTransactionMetadata, stats: CleanerStats) -> bool:
        """``buildOffsetMapForSegment``: True when the map filled up in this segment."""
        max_entries = int(self.offset_map.slots * self.dup_buffer_load_factor)
        position = segment.offset_index.lookup(start)[1]
        while position < segment.size:
            self.check_done()
            chunk = segment.read_into(self._read_buffer, position)
            self.throttler.maybe_throttle(len(chunk))
            consumed, full = self._map_chunk(chunk, start, max_entries, txn_metadata, stats)
            if full:
                return True
            position += consumed
            stats.map_bytes_read += consumed
            self.progress(consumed)
            if consumed == 0:
                self._grow_buffers_or_fail(segment, position, log_.config.max_message_bytes,
                                           chunk)
        self._restore_buffers()
        self.offset_map.update_latest_offset(next_start - 1)  # offset gaps: the segment's end
        return False

    def _map_chunk(self, chunk, start: int, max_entries: int,
                   txn_metadata: CleanedTransactionMetadata, stats) -> tuple[int, bool]:
        pos = 0
        while True:
            consumed, read, stop = map_run(self.offset_map, chunk, pos, start, max_entries,
                                           crc32c, _decompress)
            pos += consumed
            stats.map_messages_read += read
            if stop == 2:
                return pos, True
            if stop == 0:
                return pos, False
            batch = _whole_v2_batch(chunk, pos)
            if self._map_batch(batch, start, max_entries, txn_metadata, stats):
                return pos, True
            pos += batch.size_in_bytes

    def _map_batch(self, batch: RecordBatch, start: int, max_entries: int,
                   txn_metadata: CleanedTransactionMetadata, stats) -> bool:
        """A control or transactional batch of the map pass; True when the map filled."""
        batch.ensure_valid()
        if batch.is_control_batch:
            txn_metadata.on_control_batch_read(batch)
            stats.map_messages_read += 1
        elif txn_metadata.on_batch_read(batch):
            stats.map_messages_read += max(batch.records_count, 0)  # aborted: not mapped
        elif batch.records_count:
            read, full = map_section(self.offset_map, batch.records_section(),
                                     batch.records_count, batch.base_offset, start, max_entries)
            stats.map_messages_read += read
            if full:
                return True
        if batch.last_offset >= start:
            self.offset_map.update_latest_offset(batch.last_offset)
        return False

    # ---- grouping

    @staticmethod
    def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_size: int,
                               first_uncleanable_offset: int) -> list[list[LogSegment]]:
        """Consecutive segments grouped while the summed .log sizes stay within ``max_size``,
        the summed offset and time index sizes within ``max_index_size``, and the group's
        offsets within a 32-bit relative offset (``groupSegmentsBySize``)."""
        groups, rest = [], list(segments)
        while rest:
            group = [rest.pop(0)]
            log_size = group[0].size
            index_size = group[0].offset_index.size_in_bytes
            time_index_size = group[0].time_index.size_in_bytes
            while rest and (log_size + rest[0].size <= max_size
                            and index_size + rest[0].offset_index.size_in_bytes <= max_index_size
                            and time_index_size + rest[0].time_index.size_in_bytes
                            <= max_index_size
                            and (rest[0].size == 0 or _last_offset_estimate(
                                rest, first_uncleanable_offset) - group[0].base_offset
                                <= _INT32_MAX)):
                log_size += rest[0].size
                index_size += rest[0].offset_index.size_in_bytes
                time_index_size += rest[0].time_index.size_in_bytes
                group.append(rest.pop(0))
            groups.append(group)
        return groups

    # ---- recopying

    def clean_segments(self, log_, group: list[LogSegment], now: int, stats: CleanerStats,
                       txn_metadata: CleanedTransactionMetadata, upper_bound: int) -> None:
        """Recopy ``group`` into one ``.cleaned`` segment and swap it in (``cleanSegments``).
        On any failure the ``.cleaned`` files are removed and the log keeps ``group``."""
        cleaned = cleaned_segment(log_, group[0].base_offset)
        txn_metadata.cleaned_index = cleaned.txn_index
        try:
            producers = log_.last_records_of_active_producers()
            flt = RecordFilter(self.offset_map, now, log_.config.delete_retention_ms, upper_bound,
                               {pid: last for pid, (last, _) in producers.items()
                                if last is not None}, crc32c, _decompress, _compress)
            for i, segment in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else \
                    segment.read_next_offset()
                txn_metadata.add_aborted_transactions(
                    log_.reader.collect_aborted_transactions(segment.base_offset, upper))
                log.info("Cleaning %s of log %s into %d", segment.log_path.name, log_.name,
                         cleaned.base_offset)
                self._clean_into(log_, segment, cleaned, flt, txn_metadata, producers, now,
                                 upper_bound, stats)
            stats.invalid_messages_read += flt.invalid_messages
            _finish(cleaned, _mtime_ns(group[-1]))
            crash_point("cleaned segment written")
            log.info("Swapping in cleaned segment %d for segment(s) %s in log %s",
                     cleaned.base_offset, [s.base_offset for s in group], log_.name)
            with _ctrl_c_after():
                log_.replace_segments(cleaned, group, crash_point)
        except BaseException:
            # Before the swap renamed any old segment, the log is as it was: the new files go
            # (.cleaned, or .swap). After, they are the only copy of the group's records: they
            # stay, and the loader finishes the swap as after a crash.
            if not any(s.log_path.name.endswith(DELETED_SUFFIX) for s in group):
                cleaned.delete()
            raise

    def _clean_into(self, log_, source: LogSegment, dest: LogSegment, flt: RecordFilter,
                    txn_metadata: CleanedTransactionMetadata, producers: dict, now: int,
                    upper_bound: int, stats: CleanerStats) -> None:
        """Recopy one segment into ``dest`` a read buffer at a time (``cleanInto``)."""
        position = 0
        while position < source.size:
            self.check_done()
            chunk = source.read_into(self._read_buffer, position)
            self.throttler.maybe_throttle(len(chunk))
            flt.reset()
            out = bytearray()
            consumed = self._filter_chunk(chunk, flt, out, txn_metadata, producers, now,
                                          upper_bound)
            stats.messages_read += flt.messages_read
            stats.bytes_read += consumed
            stats.messages_written += flt.messages_retained
            stats.bytes_written += len(out)
            position += consumed
            self.progress(consumed)
            if out:
                if not dest.offset_index.can_append_offset(flt.max_offset):
                    raise LogCleaningAbortedError(f"offset {flt.max_offset} does not fit segment "
                                                  f"{dest.base_offset}")
                dest.append(flt.max_offset, flt.max_timestamp,
                            flt.shallow_offset_of_max_timestamp, out)
                crash_point("cleaned segment appended")
                self.throttler.maybe_throttle(len(out))
            if consumed == 0:
                self._grow_buffers_or_fail(source, position, log_.config.max_message_bytes,
                                           chunk)
        self._restore_buffers()

    def _filter_chunk(self, chunk, flt: RecordFilter, out: bytearray,
                      txn_metadata: CleanedTransactionMetadata, producers: dict, now: int,
                      upper_bound: int) -> int:
        """``MemoryRecords.filterTo`` over the whole batches of one read; bytes consumed."""
        pos = 0
        while True:
            consumed, stop = flt.run(chunk, pos, out, self._write_capacity)
            pos += consumed
            if stop != 1:
                return pos
            batch = _whole_v2_batch(chunk, pos)
            txn_metadata.consume_aborted_txns_up_to(batch.last_offset)
            retention = _batch_retention(batch, txn_metadata, producers, now, upper_bound)
            if retention is not None:
                flt.filter_batch(chunk, pos, *retention, out)
            pos += batch.size_in_bytes
            if len(out) > self._write_capacity:
                return pos  # Kafka's write buffer was outgrown: the read ends here

    # ---- buffers

    def _grow_buffers_or_fail(self, segment: LogSegment, position: int, max_message_size: int,
                              chunk) -> None:
        """No whole batch fitted the read buffer (``growBuffersOrFail``)."""
        if len(self._read_buffer) >= max_message_size:
            next_size = next_batch_size(chunk)  # (MemoryRecords.firstBatchSize)
            if next_size is None:
                raise CorruptRecordError(f"Could not determine next batch size for log segment "
                                         f"{segment.log_path} at position {position}")
            if next_size > segment.size - position:
                raise CorruptRecordError(
                    f"Log segment may be corrupt, batch size {next_size} > "
                    f"{segment.size - position} bytes left in segment for log segment "
                    f"{segment.log_path} at position {position}")
            if next_size <= len(self._read_buffer):
                raise CorruptRecordError(f"Batch size {next_size} < buffer size "
                                         f"{len(self._read_buffer)}, but not processed for log "
                                         f"segment {segment.log_path} at position {position}")
            max_size = next_size
        else:
            max_size = max_message_size
        limit = max(max_size, self.max_io_buffer_size)
        if len(self._read_buffer) >= limit:
            raise CorruptRecordError(f"This log contains a message larger than maximum "
                                     f"allowable size of {limit}.")
        new_size = min(len(self._read_buffer) * 2, limit)
        log.info("Growing cleaner I/O buffers from %d bytes to %d bytes.",
                 len(self._read_buffer), new_size)
        self._read_buffer = bytearray(new_size)
        self._write_capacity = new_size

    def _restore_buffers(self) -> None:
        if len(self._read_buffer) > self.io_buffer_size:
            self._read_buffer = bytearray(self.io_buffer_size)
            self._write_capacity = self.io_buffer_size


def _last_offset_estimate(rest: list[LogSegment], first_uncleanable_offset: int) -> int:
    """``lastOffsetForFirstSegment``: the next segment's base - 1, or for the last one the
    first uncleanable offset - 1."""
    return rest[1].base_offset - 1 if len(rest) > 1 else first_uncleanable_offset - 1


def _whole_v2_batch(chunk, pos: int) -> RecordBatch:
    batch = batch_at(chunk, pos)
    if not isinstance(batch, RecordBatch):
        raise InvalidRecordError(f"a v{batch.magic} message at offset {batch.last_offset}: kfs "
                                 "compacts only v2 record batches")
    return batch


def _batch_retention(batch: RecordBatch, txn_metadata: CleanedTransactionMetadata,
                     producers: dict, now: int, upper_bound: int):
    """``checkBatchRetention`` for a control or transactional batch: None to delete it whole,
    else (retain empty, discard its records, marker of an empty transaction)."""
    batch.ensure_valid()
    if batch.is_control_batch:
        can_discard = txn_metadata.on_control_batch_read(batch)
        discard_records = (can_discard and batch.has_delete_horizon
                           and batch.base_timestamp <= now)
    else:
        can_discard = discard_records = txn_metadata.on_batch_read(batch)
    last = producers.get(batch.producer_id)
    is_last_of_producer = last is not None and (
        batch.last_offset == last[0] if last[0] is not None
        else batch.is_control_batch and batch.producer_epoch == last[1])
    if (batch.producer_id >= 0 and is_last_of_producer) or batch.next_offset == upper_bound:
        return True, discard_records, can_discard and batch.is_control_batch
    if discard_records:
        return None
    return False, False, can_discard and batch.is_control_batch
