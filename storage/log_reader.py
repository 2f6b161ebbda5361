"""Every read of a partition's log (the read half of Kafka's ``UnifiedLog``/``LocalLog``):
records by offset and by time, runs of records and Arrow columns over offset ranges, and the
positioned blocks of whole batches the mount's text streams render, each as a reader at an
``IsolationLevel`` sees them (Kafka's ``FetchIsolation``).

A reader works on a snapshot of the segments (``storage.log_segments``) and never looks past
the visible end published after an append completes, so reads need no lock. Every byte comes
through a segment's source (``storage.segment_source``), local files or elsewhere alike.
Offsets are Kafka offsets; timestamps epoch ms; positions bytes of a segment's ``.log``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Protocol

from crc32c import crc32c

from storage.damage import LogDamage, next_intact_batch
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.isolation import IsolationLevel
from storage.read_committed import AbortedTxnFilter, collect_aborted_txns
from storage.record_cache import RecordCache, records_cost
from storage.records import Record, iter_batches
from storage.records.framing import LOG_OVERHEAD, base_offset_at
from storage.segment import Batch, BatchBlocks, LogSegment, SegmentScan
from storage.transaction_index import AbortedTxn

if TYPE_CHECKING:
    import pyarrow as pa

    from storage.log import Log

READ_UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
_MAX_COLUMN_BYTES = 64 << 20  # keys and values held in one Arrow batch of read_columns
# bytes of a .log decoded into columns per call: 2 MiB measured best with the next block read
# ahead (benchmarks/bench_library.py: 1 MiB 0.75x the engine's decode, 2 MiB 0.83x, 4 MiB 0.85x
# with a wider spread, 8 MiB worse)
_COLUMN_BLOCK = 1 << 21
# Decoded records of recently read batches kept, of all the logs of one directory together
# (the LogManager's, see decoded_batch_cache): a process reading many partitions (a mount)
# keeps at most this much, not as much per partition read.
DECODED_BATCHES_KEPT = 1024
DECODED_BYTES_KEPT = 32 << 20


def decoded_batch_cache() -> RecordCache:
    """A cache of decoded batches for the readers of many logs (a log directory's), bounded by
    DECODED_BATCHES_KEPT batches and DECODED_BYTES_KEPT bytes of records in all; keys are
    (reader, segment, position), so each reader drops its own."""
    return RecordCache(DECODED_BATCHES_KEPT, DECODED_BYTES_KEPT, records_cost)


class RecordSink(Protocol):
    """What :meth:`LogReader.decode_range` decodes into (``storage.records.RecordColumns``):
    ``add_block`` takes the records with offsets in [start, end) of the whole batches at the
    front of a block of ``.log`` bytes, leaving out control batches and the transactional
    ones ``skip(producer_id, base_offset)`` names; returns (bytes consumed, whether a batch
    reached ``end``), (0, False) for bytes that are not a batch."""

    def add_block(self, block, start: int, end: int,
                  skip: Callable[[int, int], bool] | None) -> tuple[int, bool]: ...


def _named(e: CorruptRecordError | InvalidRecordError, segment: LogSegment, position: int):
    """``e`` again, naming the segment's .log (its file or object) and the position read from:
    a reader of many partitions, or of an object store, says which."""
    return type(e)(f"{segment.source.name}, from byte {position}: {e}")


class LogReader:
    """The reads of ``log``: a ``storage.log.Log``, or anything with its offsets
    (``log_start_offset``, ``log_end_offset``, ``last_stable_offset``) and its ``segments``
    (``storage.remote``'s read-only logs). Raises CorruptRecordError for a batch whose
    CRC or layout is bad, InvalidRecordError for one breaking a format rule, OSError from the
    segments' source; v0/v1 entries an old broker wrote are read as Kafka reads them.
    ``cache`` (:func:`decoded_batch_cache`) keeps recently decoded batches, shared by the logs
    of a directory (its ``LogManager``'s); None: one of the reader's own."""

    def __init__(self, log: Log, cache: RecordCache | None = None) -> None:
        self._log = log
        self.segments = log.segments
        # keys: (the reader, the segment, a batch's position)
        self._cache = decoded_batch_cache() if cache is None else cache

    def clear_cache(self) -> None:
        """Forget decoded batches: segments or the log start offset changed under them."""
        self._cache.drop(lambda key: key[0] is self)

    # -- where a reader's records end --------------------------------------------------------

    def visible_end(self, isolation: IsolationLevel = READ_UNCOMMITTED) -> int:
        """Where a reader's records end, exclusive: the last stable offset for read_committed,
        else the log end offset (the high watermark, with one replica). Kafka's
        ``FetchIsolation``."""
        log = self._log
        return log.last_stable_offset if isolation.read_committed else log.log_end_offset

    def collect_aborted_transactions(self, offset: int, upper: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [offset, upper), from the transaction indexes
        of the segment holding ``offset`` and later ones
        (``UnifiedLog.collectAbortedTransactions``)."""
        return collect_aborted_txns((s.txn_index for s in self.segments.from_offset(offset)),
                                    offset, upper)

    def aborted_transactions(self, offset: int, upper: int) -> AbortedTxnFilter:
        """:meth:`collect_aborted_transactions` as a filter: ``is_aborted(batch)`` tells a
        read_committed reader to skip a batch."""
        return AbortedTxnFilter(self.collect_aborted_transactions(offset, upper))

    def _bounds(self, start: int, end: int | None, isolation: IsolationLevel) -> tuple[int, int]:
        """[start, end) clipped to the log start offset and the visible end."""
        visible = self.visible_end(isolation)
        return max(start, self._log.log_start_offset), visible if end is None else min(end, visible)

    # -- one record --------------------------------------------------------------------------

    def read(self, offset: int, isolation: IsolationLevel = READ_UNCOMMITTED,
             nowait: bool = False) -> Record | None:
        """The record at ``offset``, or None when there is none: below the log start offset, at
        or past the visible end, a gap left by compaction, a control record, or with
        read_committed a record of an aborted transaction. ``nowait=True`` (for event loops)
        raises BlockingIOError instead of waiting for the disk."""
        end = self.visible_end(isolation)
        if offset < self._log.log_start_offset or offset >= end:
            return None
        segment = self.segments.floor(offset)
        found = segment.find_batch(offset, nowait) if segment else None
        if found is None or found[1].is_control_batch:
            return None
        if isolation.read_committed and found[1].is_transactional and \
                self.aborted_transactions(found[1].base_offset, end).is_aborted(found[1]):
            return None
        records = self._cache.get((self, segment, found[0]))
        if records is None:  # decode just this record; listing fills the cache
            return segment.read_batch(*found, nowait).record_at(offset)
        i = bisect.bisect_left(records, offset, key=lambda r: r.offset)
        return records[i] if i < len(records) and records[i].offset == offset else None

    def find_offset_by_timestamp(self, timestamp: int, isolation: IsolationLevel = READ_UNCOMMITTED,
                                 nowait: bool = False) -> Record | None:
        """The first record with timestamp >= ``timestamp`` (epoch ms), as Kafka's ListOffsets
        answers (``UnifiedLog.fetchOffsetByTimestamp``): the first segment whose largest
        timestamp reaches the target, then its time index, offset index and a scan. None when
        no record qualifies or ``timestamp`` is negative. With read_committed the first such
        record a read_committed consumer sees. ``nowait`` as in :meth:`read`."""
        if timestamp < 0:
            return None
        start, leo = self._log.log_start_offset, self._log.log_end_offset
        for segment in self.segments.all():
            if segment.base_offset >= leo:
                break
            if segment.largest_timestamp >= timestamp:
                record = segment.find_offset_by_timestamp(timestamp, start, nowait)
                if record is not None and record.offset < leo:
                    if isolation.read_committed:
                        return self._first_committed_from(record.offset, timestamp)
                    return record
        return None

    def _first_committed_from(self, offset: int, timestamp: int) -> Record | None:
        """The first visible read_committed record at or after ``offset`` stamped >= ``timestamp``
        (records before ``offset`` are all earlier: ListOffsets found it)."""
        while True:
            records = self.records_from(offset, 1024, IsolationLevel.READ_COMMITTED)
            if not records:
                return None
            for record in records:
                if record.timestamp >= timestamp:
                    return record
            offset = records[-1].offset + 1

    # -- runs of records ---------------------------------------------------------------------

    def records_from(self, offset: int, limit: int,
                     isolation: IsolationLevel = READ_UNCOMMITTED) -> list[Record]:
        """Up to ``limit`` data records with offsets >= ``offset``, in offset order (as
        :meth:`record_lists`)."""
        out: list[Record] = []
        if limit <= 0:
            return out
        for records in self.record_lists(offset, isolation=isolation):
            out.extend(records)
            if len(out) >= limit:
                return out[:limit]
        return out

    def record_lists(self, start: int, end: int | None = None,
                     isolation: IsolationLevel = READ_UNCOMMITTED,
                     cache: bool = True) -> Iterator[list[Record]]:
        """The data records with offsets in [start, end), one list per batch, in offset order
        (the batches of :meth:`visible_batches`). ``cache=False`` (bulk readers) leaves the
        decoded-batch cache alone."""
        start = max(start, self._log.log_start_offset)
        for segment, pos, header, last in self.visible_batches(start, end, isolation):
            try:
                if last:  # never cached: the batch may not be wholly published yet
                    end = self.visible_end(isolation) if end is None else end
                    records = [r for r in segment.read_records(pos, header)
                               if start <= r.offset < end]
                else:
                    records = (self._batch_records(segment, pos, header) if cache
                               else segment.read_records(pos, header))
            except (CorruptRecordError, InvalidRecordError) as e:
                raise _named(e, segment, pos) from e
            if records and records[0].offset < start:
                records = [r for r in records if r.offset >= start]
            if records:
                yield records

    def _batch_records(self, segment: LogSegment, position: int, header: Batch) -> list[Record]:
        # by the segment itself, not its base offset: a cleaner's swap puts a new segment at
        # the same base, and a reader that was decoding the old one stores its batch after
        # the swap's clear_cache
        key = (self, segment, position)
        records = self._cache.get(key)
        if records is None:
            records = segment.read_records(position, header)
            self._cache.put(key, records)
        return records

    def readable_record_lists(self, start: int, isolation: IsolationLevel = READ_UNCOMMITTED
                              ) -> Iterator[list[Record] | LogDamage]:
        """:meth:`record_lists` from offset ``start``, stepping over what cannot be read: a
        ``storage.damage.LogDamage`` comes in its place and the records go on after it, from
        the next batch when the damaged one's header can be walked over, else from the next
        segment."""
        end = self.visible_end(isolation)
        bases, segments = self.segments.view
        start = max(start, self._log.log_start_offset)
        for k in range(max(bisect.bisect_right(bases, start) - 1, 0), len(segments)):
            stop = min(bases[k + 1], end) if k + 1 < len(bases) else end
            start = max(start, bases[k])
            try:
                for segment, position, header, _ in self.visible_batches(start, stop, isolation):
                    try:
                        records = segment.read_records(position, header)
                    except (CorruptRecordError, InvalidRecordError) as e:
                        yield LogDamage(segment.log_path.name, position,
                                        max(header.base_offset, start), str(e), header.last_offset)
                    else:
                        records = [r for r in records if start <= r.offset < stop]
                        if records:
                            yield records
                    start = header.last_offset + 1
            except (CorruptRecordError, InvalidRecordError) as e:  # headers cannot be walked on
                yield LogDamage(segments[k].log_path.name, None, start, str(e))

    def visible_batches(self, start: int, end: int | None = None,
                        isolation: IsolationLevel = READ_UNCOMMITTED
                        ) -> Iterator[tuple[LogSegment, int, Batch, bool]]:
        """(segment, position, header, is_last) of each batch holding data records with
        offsets in [start, end), in offset order: the offset index finds the first, then
        batches follow; control batches are skipped, and with read_committed aborted ones
        and everything at or past the last stable offset. ``end`` defaults to, and is bounded
        by, the visible end. ``is_last`` marks a batch reaching ``end``, the last one."""
        visible = self.visible_end(isolation)
        end = visible if end is None else min(end, visible)
        if start >= end:
            return
        aborted = self.aborted_transactions(start, end) if isolation.read_committed else None
        for segment in self.segments.from_offset(start):
            if segment.base_offset >= end:
                return  # (or rolled by an append still in flight)
            position = segment.offset_index.lookup(start)[1] if segment.base_offset <= start else 0
            for pos, header in segment.scan_batches(position):
                if header.last_offset < start or header.is_control_batch or \
                        aborted is not None and aborted.is_aborted(header):
                    continue
                last = header.last_offset >= end
                yield segment, pos, header, last
                if last:
                    return

    def read_columns(self, start: int, end: int | None = None,
                     isolation: IsolationLevel = READ_UNCOMMITTED, headers: bool = False,
                     max_rows: int = 32768, read_ahead: bool = False) -> Iterator[pa.RecordBatch]:
        """The data records with offsets in [start, end) as Arrow record batches of about
        ``max_rows`` rows (columns of ``storage.records.RecordColumns``), decoded by
        :meth:`decode_range` (``read_ahead`` as there). Same records as :meth:`record_lists`."""
        from storage.records.columns import RecordColumns  # pyarrow: only for column readers

        columns = RecordColumns(headers)
        for _ in self.decode_range(columns, start, end, isolation, read_ahead=read_ahead):
            if columns.num_rows >= max_rows or columns.data_bytes >= _MAX_COLUMN_BYTES:
                yield columns.to_arrow()
        if columns.num_rows:
            yield columns.to_arrow()

    def decode_range(self, sink: RecordSink, start: int, end: int | None = None,
                     isolation: IsolationLevel = READ_UNCOMMITTED, *,
                     segment: LogSegment | None = None, position: int = 0,
                     stop: int | None = None, buffer=None,
                     read_ahead: bool = False) -> Iterator[tuple[int, int]]:
        """The one decode of a range of the log, for every bulk reader: the data records with
        offsets in [start, end) go into ``sink`` (a :class:`RecordSink`: Arrow columns for
        Spark, a text stream's renderer, the columns a coordinator topic's schemas decode),
        as a reader at ``isolation`` sees them: control batches, and with read_committed
        aborted transactions' batches, left out here and nowhere else (the compiled codec
        skips them; CRC-checked). Blocks of whole batches (``BatchBlocks``) are read into
        ``buffer`` (reused; default one of _COLUMN_BLOCK bytes). ``read_ahead``: the next block
        read by a thread of its own while this one decodes (``BatchBlocks``): for a reader that
        has a core to spare (the library's one stream), not for one of a core's worth of
        readers (Spark's tasks), whose extra threads would wait for a core.

        Without ``segment``: [start, end) is clipped to the log start offset and the visible
        end, the offset index finds the first batch and the segments are read on, each no
        further than the batches below ``end`` reach (an object store's segment is told so, and
        reads ahead that far at once). With ``segment``: just the batches starting in its
        ``.log`` bytes [position, stop) (a stream's chunk; ``stop`` defaults to its size),
        ``start`` and ``end`` as given (records below the log start offset are there too: the
        stream positions its readers past them).

        Yields (base offset of the first batch met, .log bytes consumed) after each block,
        where a caller may take what the sink holds; stops at the first batch reaching ``end``.
        Raises CorruptRecordError / InvalidRecordError naming the segment and position, OSError
        from the segments' source."""
        if segment is None:
            start, end = self._bounds(start, end, isolation)
            ranges = self._ranges(start, end)
        else:
            end = self.visible_end(isolation) if end is None else end
            ranges = iter([(segment, position, segment.size if stop is None else stop)])
        if start >= end:
            return
        buffer = bytearray(_COLUMN_BLOCK) if buffer is None else buffer  # (copied out of)
        first, skip = -1, None
        for segment, position, stop in ranges:
            blocks = BatchBlocks(segment, position, stop, buffer=buffer, read_ahead=read_ahead)
            for block in blocks:
                if first < 0:  # the aborted transactions from where the batches start
                    first = base_offset_at(block)
                    skip = self.skip_aborted(max(start, first), end, isolation)
                try:
                    consumed, reached_end = sink.add_block(block, start, end, skip)
                except (CorruptRecordError, InvalidRecordError) as e:
                    raise _named(e, segment, blocks.position) from e
                blocks.advance(consumed)
                yield first, consumed
                if reached_end:
                    return

    def _ranges(self, start: int, end: int) -> Iterator[tuple[LogSegment, int, int]]:
        """(segment, .log position, .log stop) of each segment holding offsets in [start, end),
        each read ahead (``read_ahead_until``) when it is reached."""
        segments = self.segments.from_offset(start)
        for i, segment in enumerate(segments):
            if segment.base_offset >= end:
                return
            # Read no further than the batches below ``end`` reach, and say so: an object
            # store's segment reads ahead that far at once, and no further.
            whole = i + 1 < len(segments) and segments[i + 1].base_offset <= end
            stop = segment.size if whole else self.position_after(segment, end)
            segment.source.read_ahead_until(stop)
            yield segment, self.position_of(segment, start), stop

    # -- positioned blocks (the columnar readers: Arrow columns, the mount's text) -----------

    def skip_aborted(self, start: int, end: int, isolation: IsolationLevel):
        """What the compiled column builders skip for a reader at ``isolation`` over offsets
        [start, end): ``is_aborted_at(base_offset, producer_id)`` of the aborted transactions
        there with read_committed, else None (nothing is skipped)."""
        if not isolation.read_committed:
            return None
        return self.aborted_transactions(start, end).is_aborted_at

    @staticmethod
    def position_of(segment: LogSegment, offset: int) -> int:
        """Where in ``segment``'s ``.log`` a scan for ``offset`` starts: its offset index's
        floor entry (0 for an offset below the segment)."""
        return segment.offset_index.lookup(offset)[1] if segment.base_offset <= offset else 0

    @staticmethod
    def position_after(segment: LogSegment, offset: int) -> int:
        """A position in ``segment``'s ``.log`` that no batch of an offset below ``offset``
        reaches past (:meth:`OffsetIndex.position_after`), else the segment's size."""
        position = segment.offset_index.position_after(offset)
        return segment.size if position is None else position

    @staticmethod
    def blocks(segment: LogSegment, position: int, end: int | None = None,
               block_size: int = _COLUMN_BLOCK, buffer=None) -> BatchBlocks:
        """The whole batches of ``segment`` starting in [position, end) as blocks for the
        compiled walkers (``storage.segment.BatchBlocks``), read ``block_size`` bytes at a
        time into ``buffer`` (reused)."""
        return BatchBlocks(segment, position, end, block_size=block_size, buffer=buffer)

    @staticmethod
    def whole_batches(segment, position: int, end: int, block_size: int = _COLUMN_BLOCK,
                      buffer=None) -> Iterator[Batch]:
        """The whole batches of ``segment`` (a LogSegment, or a ``FileRecords``) that start in
        [position, end), any magic, parsed from blocks read ``block_size`` bytes at a time
        into ``buffer`` (reused; a batch is valid until the next one is asked for). Stops at
        a torn batch; raises CorruptRecordError / InvalidRecordError for bytes that are not
        batches."""
        blocks = BatchBlocks(segment, position, end, block_size=block_size, buffer=buffer)
        for block in blocks:
            consumed = 0
            for batch in iter_batches(block):
                yield batch
                consumed += batch.size_in_bytes
            blocks.advance(consumed)

    @staticmethod
    def intact_end(segment: LogSegment, position: int) -> tuple[int, str | None]:
        """(end of the intact batches of ``segment`` from ``position``, what is wrong right
        after them, or None when nothing is): the checks of Kafka's ``LogSegment.recover``
        (whole, CRC, offsets following on), from the offset the batch at ``position`` names."""
        expected = base_offset_at(segment.read_at(position, LOG_OVERHEAD))
        scan = SegmentScan(segment.base_offset, crc32c, expected, stop_at_problem=True)
        segment.scan_whole_batches(scan, position)
        end = scan.valid_end if scan.valid_end > position else position
        return end, scan.problems[0][1] if scan.problems else None

    @staticmethod
    def damaged_run(segment: LogSegment, position: int, low_offset: int, problem: str
                    ) -> tuple[LogDamage, int, int | None]:
        """The damage at ``position`` of ``segment`` (the first byte that is not an intact
        batch; ``low_offset`` the offset the batches before it reached, ``problem`` what is
        wrong there): (the damage, the position of the next intact batch or the segment's
        size, the base offset of that batch or None when none follows)."""
        expected = base_offset_at(segment.read_at(position, LOG_OVERHEAD))
        resume = next_intact_batch(segment, position + 1, low_offset)
        after = None if resume is None else base_offset_at(segment.read_at(resume, LOG_OVERHEAD))
        # the first offset lost: the damaged header's, when it is believable
        lost = expected if low_offset <= expected <= (after if after is not None else expected) \
            else low_offset
        damage = LogDamage(segment.log_path.name, position, lost, problem,
                           None if after is None else after - 1)
        return damage, segment.size if resume is None else resume, after
