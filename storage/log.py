"""The partition log: append, roll, truncate, retention and the log's offsets (Kafka's
``UnifiedLog`` and ``LocalLog``, for one partition directory), over its ordered segments
(``storage.log_segments``); every read goes through its reader (``storage.log_reader``).

Thread safety: appends, rolls and truncation hold the log's lock; reads work on a snapshot of
the segment list and never look past the log end offset published after an append completes.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from pathlib import Path

from crc32c import crc32c

from storage import log_loader
from storage.batch_planning import max_batch_bytes, plan_batches, record_sections
from storage.checkpoint import fsync_directory
from storage.clock import SYSTEM_CLOCK, Clock
from storage.config import LogConfig
from storage.errors import (
    CorruptRecordError,
    DamagedLogError,
    InvalidRecordError,
    InvalidTimestampError,
    LogCleaningAbortedError,
    KeylessRecordError,
    KeySeparatorMissingError,
    OfflineLogError,
    ReadOnlyLogError,
    RecordTooLargeError,
)
from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.log_files import SWAP_SUFFIX, log_file, offset_index_file, time_index_file
from storage.log_reader import LogReader
from storage.record_cache import RecordCache
from storage.log_retention import retention_plan
from storage.log_segments import LogSegments
from storage.open_files import FilePool
from storage.producer_state import (
    AppendOrigin,
    OpenTransaction,
    ProducerStateManager,
)
from storage.records import (
    RecordBatch,
    TimestampType,
    assign_offsets,
    compress,
    encode_line_batches,
    encode_records,
    iter_batches,
    seal_batch,
    set_log_append_time,
)
from storage.records.control import ControlRecordType, build_control_batch
from storage.records.framing import CURRENT_MAGIC, RECORD_BATCH_OVERHEAD, last_offset_delta_at
from storage.segment import LogSegment

log = logging.getLogger(__name__)

MAX_PRODUCER_EPOCH = 32767  # Short.MAX_VALUE: an exhausted epoch is not bumped further


class Log:
    """The log of one partition directory ``<topic>-<N>/``.

    Opening loads the directory with :mod:`storage.log_loader`: the last segment is the active
    one, whose indexes are re-expanded to ``segment.index.bytes``. ``had_clean_shutdown=False``
    revalidates every segment from the one holding ``recovery_point`` (from
    ``recovery-point-offset-checkpoint``); ``log_start_offset`` comes from
    ``log-start-offset-checkpoint``. ``writable=False`` never changes a byte. ``quarantine``
    (a ``storage.quarantine.Quarantine``) keeps what recovery cuts while intact data follows.
    A log whose end cannot be read opens up to it: ``damage`` (a ``storage.damage.LogDamage``)
    says where, and appends raise DamagedLogError. ``salvage=True``: recovery that would cut
    intact batches after damage raises ``log_loader.IntactDataAfterDamageError`` instead
    (see ``LogManager``). ``salvaged`` says what opening took out (empty: none): each cut of
    recovery, and of a salvage at open.
    ``clock`` (``storage.clock``, Kafka's ``Time``) is every time the log reads: rolls, retention,
    flushes, producer expiry. ``files`` (``storage.open_files.FilePool``) bounds the ``.log``
    descriptors it keeps open: its ``LogManager``'s, shared by the directory's logs (None: a
    pool of its own, for a log opened alone). ``segments`` (``storage.log_segments.LogSegments``)
    are its ordered segments; ``reader`` (``storage.log_reader.LogReader``) is every read of it,
    its recently decoded batches kept in ``decoded_batches`` (the ``LogManager``'s cache, shared
    by the logs of a directory; None: a bounded one of the log's own).
    """

    def __init__(self, directory: Path, topic: str, partition: int, config: LogConfig,
                 writable: bool = True, *, had_clean_shutdown: bool = True,
                 recovery_point: int = 0, log_start_offset: int = 0, quarantine=None,
                 salvage: bool = False, clock: Clock = SYSTEM_CLOCK,
                 files: FilePool | None = None,
                 decoded_batches: RecordCache | None = None):
        self.dir = Path(directory)
        self.clock = clock
        self.files = FilePool() if files is None else files
        self.topic = topic
        self.partition = partition
        self.config = config
        self.writable = writable
        self._lock = threading.RLock()
        self.epochs = LeaderEpochFileCache(self.dir, writable)
        self.producer_state = ProducerStateManager(self.dir, writable=writable, clock=clock)
        loaded = log_loader.load(self.dir, config, writable, had_clean_shutdown=had_clean_shutdown,
                                 recovery_point=recovery_point, log_start_offset=log_start_offset,
                                 epochs=self.epochs, producer_state=self.producer_state,
                                 quarantine=quarantine, salvage=salvage, clock=clock,
                                 files=self.files)
        # a LogDamage when the log's end could not be read: served up to it, appends refused
        self.damage = loaded.damage
        # why an I/O error took the log offline for writes (None: online); see go_offline
        self.offline: str | None = None
        # what opening cut, one line each: recovery's cuts, a salvage before it (LogManager)
        self.salvaged: list[str] = list(loaded.cuts)
        self.segments = LogSegments(self.dir, config, clock, loaded.segments, self.files)
        # every read of the log; decoded batches in the cache of the log's directory (the
        # LogManager's), or in one of its own
        self.reader = LogReader(self, decoded_batches)
        self._log_start_offset = loaded.log_start_offset
        self._leo = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self._last_flush_ms = self.clock.milliseconds()
        self._pending_deletes: list[tuple[int, list[Path]]] = []  # (due epoch ms, files)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    # -- state ------------------------------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        """The first offset a reader may ask for; retention moves it to the base offset of the
        first segment it keeps (``UnifiedLog.logStartOffset``)."""
        return self._log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The read_committed limit: the first offset of a transaction still open, else the
        log end offset (``UnifiedLog.lastStableOffset``; the high watermark is the log end
        offset with one replica)."""
        return self.producer_state.last_stable_offset(self._leo, self._log_start_offset)

    @property
    def leader_epoch(self) -> int:
        """The partition leader epoch kfs stamps on its appends: the latest in the log, or 0."""
        return max(self.epochs.latest_epoch, 0)

    @property
    def log_end_offset(self) -> int:
        """The offset the next appended record gets (one past the last batch's last offset)."""
        return self._leo

    # -- appending --------------------------------------------------------------------------

    def append(self, values: Sequence[bytes | None], keys: Sequence[bytes | None] | None = None,
               headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
               timestamps: Sequence[int | None] | None = None) -> int:
        """Append one record per value, all-or-nothing, as a producer would: cut into batches
        where Kafka's producer cuts them at ``batch.size`` (``storage.batch_planning``), at the
        topic's ``compression.type``.

        One entry per record: ``values`` bytes or None (a null value: a tombstone on a
        compacted topic); ``keys`` None (null keys) or one key (bytes or None) per value;
        ``headers`` None (none) or per record None or a sequence of ``(str, bytes | None)``
        pairs; ``timestamps`` None (every record stamped now) or per record epoch ms >= 0
        (its CreateTime, as a producer's ``ProducerRecord`` timestamp) or None for now. With
        ``message.timestamp.type=LogAppendTime`` the batches are stamped now whatever the
        records say, as a broker does. Returns the offset of the first record. Raises
        ValueError for columns of other lengths or a negative timestamp; ReadOnlyLogError;
        KeylessRecordError on a compacted topic for a null key; RecordTooLargeError when a
        record's batch would exceed ``max.message.bytes`` (nothing is written); OSError from
        the disk (the log is truncated back to where it was)."""
        self._check_writable()
        for name, column in (("keys", keys), ("headers", headers), ("timestamps", timestamps)):
            if column is not None and len(column) != len(values):
                raise ValueError(f"{name} and values differ in length")
        if self.config.compact and (keys is None or any(k is None for k in keys)):
            self._refuse_keyless()
        if not values:
            return self._leo
        now = self.clock.milliseconds()
        if timestamps is not None and self.config.timestamp_type == TimestampType.CREATE_TIME:
            for line, ts in enumerate(timestamps, 1):
                if ts is not None:
                    _check_timestamp(self.config, ts, now, f"record {line} of the append")
        if headers is None and timestamps is None and None not in values:
            sections = [(encode_records(values[start:end],
                                        None if keys is None else keys[start:end]),
                         end - start, now, now)
                        for start, end in plan_batches(values, keys, self.config)]
        else:
            sections = record_sections(values, keys, headers, timestamps, now, self.config)
        return self._append_sections(sections, now)

    def append_lines(self, lines, key_separator: bytes | None = None, nowait: bool = False) -> int:
        """Append one record per ``\\n``-terminated line of ``lines`` (bytes-like; the newline is
        not stored), as ``kafka-console-producer`` does, otherwise as :meth:`append`. With
        ``key_separator`` each line is ``key<separator>value``, split at the first separator
        (``parse.key=true``). The whole write becomes sealed batches in one call of the compiled
        codec, straight from ``lines``. Returns the offsets assigned, one per line, as a
        ``range`` (``.start`` the first; ``len`` the lines stored). Raises ValueError when
        ``lines`` does not end with a newline; KeySeparatorMissingError (nothing written) for a
        keyed line without the separator; otherwise as :meth:`append`."""
        self._check_writable()
        if not lines:
            return range(self._leo, self._leo)
        if self.config.compact and key_separator is None:
            self._refuse_keyless()
        if lines[-1] != 0x0A:
            raise ValueError("lines must end with a newline")
        config = self.config
        limit = max_batch_bytes(self.config)
        codec, level = config.codec, config.compression_level
        compress_section = (lambda records: compress(codec, records, level)) if codec else None
        timestamp = self.clock.milliseconds()
        if not self._lock.acquire(blocking=not nowait):
            raise BlockingIOError(errno.EAGAIN, f"{self.name} is busy")
        try:
            first = self._leo
            batches, counts, largest = encode_line_batches(
                lines, max(min(config.batch_size, limit) - RECORD_BATCH_OVERHEAD, 1), first,
                timestamp, config.timestamp_type == TimestampType.LOG_APPEND_TIME,
                self.leader_epoch, crc32c, key_separator, compress_section, codec,
                limit - RECORD_BATCH_OVERHEAD)
            if batches is None:  # (the codec names the line: a batch stops before it)
                raise KeySeparatorMissingError(
                    f"no key separator {bytes(key_separator)!r} in line {largest}", largest)
            if largest + RECORD_BATCH_OVERHEAD > limit:  # only a record alone gets here
                raise RecordTooLargeError(
                    f"a line is {largest + RECORD_BATCH_OVERHEAD} bytes as a batch, more than"
                    f" max.message.bytes={config.max_message_bytes}"
                    f" (segment.bytes={config.segment_bytes})")
            appends, offset = [], first
            for batch, count in zip(batches, counts):
                offset += count
                appends.append((batch, offset - 1, timestamp, offset - 1))
            self._append_sealed(appends, first, nowait)
            return range(first, offset)
        finally:
            self._lock.release()

    def _check_writable(self) -> None:
        if self.offline is not None:
            raise OfflineLogError(f"{self.name} is offline for writes after an I/O error "
                                  f"({self.offline}) until the next mount recovers it")
        if self.damage is not None:
            raise DamagedLogError(f"{self.name} is damaged ({self.damage}): appends are refused "
                                  "until `kfs verify --repair`")
        if not self.writable:
            raise ReadOnlyLogError(f"{self.name} is read-only")

    def _refuse_keyless(self) -> None:
        raise KeylessRecordError(f"Compacted topic cannot accept message without key in topic "
                                 f"partition {self.name}.")

    def _append_sections(self, sections: list[tuple[bytes, int, int, int]], now: int) -> int:
        """Seal encoded records sections ``(records, count, first timestamp, max timestamp)``
        (offset deltas 0..count-1, timestamp deltas from the first) into batches and append
        them, all-or-nothing; a LogAppendTime topic's batches are stamped ``now``. Returns
        the first offset."""
        limit, records_before = max_batch_bytes(self.config), 0
        for records, count, _, _ in sections:
            if len(records) + RECORD_BATCH_OVERHEAD > limit:  # only a record alone gets here
                raise RecordTooLargeError(
                    f"the record at line {records_before + 1} is "
                    f"{len(records) + RECORD_BATCH_OVERHEAD} bytes as a batch, more than"
                    f" max.message.bytes={self.config.max_message_bytes}"
                    f" (segment.bytes={self.config.segment_bytes})")
            records_before += count
        config = self.config
        log_append = config.timestamp_type == TimestampType.LOG_APPEND_TIME
        codec, level = config.codec, config.compression_level
        with self._lock:
            first = offset = self._leo
            appends = []
            for records, count, first_ts, max_ts in sections:
                last = offset + count - 1
                max_ts = now if log_append else max_ts
                appends.append((seal_batch(records, count, offset, first_ts, max_ts, count - 1,
                                           codec=codec, level=level, log_append=log_append,
                                           partition_leader_epoch=self.leader_epoch),
                                last, max_ts, last))
                offset = last + 1
            return self._append_sealed(appends, first)

    def _append_sealed(self, appends: list[tuple[bytes, int, int, int]], first: int,
                       nowait: bool = False) -> int:
        """Append sealed batches ``(data, last offset, max timestamp, its offset)`` starting at
        ``first`` (the log end offset; the lock held), all or nothing, and publish them.
        ``nowait``: BlockingIOError, nothing changed, when a roll or a flush would follow."""
        end = appends[-1][1] + 1
        if nowait and end - self.recovery_point >= self.config.flush_messages:
            raise BlockingIOError(errno.EAGAIN, f"{self.name} would flush")
        with self._all_or_nothing(first):
            self._append_each(appends, nowait)
            self._after_append(first, end)
        return first

    @contextmanager
    def _all_or_nothing(self, first: int):
        """Take an append that raises back to ``first`` (the log end offset before it; the
        lock held): bytes may be on disk before an index, companion file or fsync failed. An
        OSError (the disk's EIO, ENOSPC...) also takes the log offline for writes (Kafka's
        ``LogDirFailureChannel``; PostgreSQL likewise stops trusting a file whose fsync
        failed): whatever the failed call left behind, no later append builds on it."""
        try:
            yield
        except BlockingIOError:
            raise  # nothing written
        except OSError as exc:
            self.go_offline(exc)
            try:
                self.truncate_to(first)
            except OSError as again:  # the .log is cut first: what stays is the log's own
                log.error("%s: taking the failed append back: %s", self.name, again)
            raise
        except BaseException:
            self.truncate_to(first)
            raise

    def go_offline(self, exc: OSError) -> None:
        """Refuse every later write (OfflineLogError, EIO) after ``exc``, said once in the log
        (Kafka's ``LogDirFailureChannel.maybeAddOfflineLogDir``); reads go on. The next open
        recovers the log from its recovery point (no clean-shutdown marker is written)."""
        if self.offline is None:
            self.offline = str(exc)
            log.error("%s is offline for writes until the next mount recovers it (reads go "
                      "on): %s", self.name, exc)

    def _append_each(self, appends: list[tuple[bytes, int, int, int]],
                     nowait: bool = False) -> None:
        """Append producer-sized batches as so many leader appends (one batch each, as Kafka's
        ``UnifiedLog.appendAsLeader``), their bytes written together while they fit the active
        segment: one roll check for the whole write, per-batch checks when it would roll.
        ``nowait``: BlockingIOError, nothing written, instead of rolling."""
        total = sum(len(a[0]) for a in appends)
        segment = self.segments.active
        max_ts = max(a[2] for a in appends)  # a batch rolls by time only if the latest would
        if total <= self.config.segment_bytes and segment.index_room() >= len(appends) and \
                not segment.should_roll(total, max_ts, appends[-1][1], self.clock.milliseconds()):
            segment.append_each(appends)
            return
        if nowait:
            raise BlockingIOError(errno.EAGAIN, f"{self.name} would roll")
        for data, last, timestamp, shallow in appends:
            self._append_chunk(data, last - _records_in(data) + 1, last, timestamp, shallow)

    def append_batches(self, data: bytes) -> int:
        """Append already-built v2 batches with their offsets as they are, as a follower does
        (one ``LogSegment.append`` for the whole chunk). The first offset must be >= the log
        end offset. Returns the new log end offset. Raises CorruptRecordError for a bad batch or
        offsets that do not increase; InvalidRecordError for v0/v1 entries (Kafka 4 writes only
        v2); ValueError for offsets below the log end offset."""
        self._check_writable()
        first = last = max_ts = shallow = None
        consumed = 0
        epochs: list[tuple[int, int]] = []
        for batch in iter_batches(data):
            if batch.magic != CURRENT_MAGIC:
                raise InvalidRecordError(
                    f"magic v{batch.magic} entry at offset {batch.last_offset}: "
                    f"only magic {CURRENT_MAGIC} batches are appended")
            batch.ensure_valid()
            if last is not None and batch.base_offset <= last:
                raise CorruptRecordError(
                    f"batch at offset {batch.base_offset} does not follow offset {last}")
            first = batch.base_offset if first is None else first
            last = batch.last_offset
            epochs.append((batch.partition_leader_epoch, batch.base_offset))
            if max_ts is None or batch.max_timestamp > max_ts:
                max_ts, shallow = batch.max_timestamp, batch.last_offset
            consumed += batch.size_in_bytes
        if consumed != len(data):
            raise CorruptRecordError(f"{len(data) - consumed} bytes of a partial batch at the end")
        if first is None:
            return self._leo
        with self._lock:
            if first < self._leo:
                raise ValueError(f"offset {first} is below the log end offset {self._leo}")
            producers = self.producer_state.analyze(iter_batches(data), AppendOrigin.REPLICATION)
            self._append_whole(bytes(data), first, last, max_ts, shallow, epochs, producers)
            return self._leo

    def append_as_leader(self, data: bytes, sync: bool = False) -> tuple[int, int]:
        """Append producer-built v2 batches as a partition leader does
        (``UnifiedLog.appendAsLeader`` with ``LogValidator``): each batch is CRC-checked and
        limited to ``max.message.bytes``; offsets are assigned from the log end offset (the
        batches' own base offsets are ignored) and stamped with :attr:`leader_epoch`; with
        ``message.timestamp.type=LogAppendTime`` each batch gets now as its timestamp.
        Transactional and control batches (COMMIT/ABORT markers) are accepted as they are.

        A ``bytearray`` is stamped in place (offsets, epoch), anything else copied first.
        All-or-nothing. Returns (first offset, last offset): for a producer's retry of a batch
        it still retains (same epoch and sequence range), the offsets it got then, and nothing
        is stored. Raises ReadOnlyLogError;
        CorruptRecordError for bad bytes or a partial batch; InvalidRecordError for a batch
        that is not magic 2; RecordTooLargeError; the producer-state errors of
        ``storage.errors`` (OutOfOrderSequenceError, InvalidProducerEpochError,
        InvalidTxnStateError) as a broker answers a producer; OSError from the disk (nothing
        stays). ``sync``: flushed before it returns, as with ``flush.messages=1`` (a writer
        whose caller is told of success only then: a failed fsync takes the append back)."""
        self._check_writable()
        buf = data if isinstance(data, bytearray) else bytearray(data)  # stamped in place
        batches = self._validate_produced(buf)
        if not batches:
            raise CorruptRecordError("no record batch in the data")
        log_append = self.config.timestamp_type == TimestampType.LOG_APPEND_TIME
        with self._lock:
            first = offset = self._leo
            epoch, now = self.leader_epoch, self.clock.milliseconds()
            max_ts = shallow = -1
            for pos, count in batches:
                assign_offsets(buf, pos, offset, epoch)
                if log_append:
                    set_log_append_time(buf, pos, now)
                batch = RecordBatch(buf, pos)
                offset += count
                if batch.max_timestamp > max_ts:
                    max_ts, shallow = batch.max_timestamp, offset - 1
            headers = [RecordBatch(buf, pos) for pos, _ in batches]
            controls = sum(b.is_control_batch for b in headers)
            if 0 < controls < len(headers):  # Kafka: markers come from the coordinator alone
                raise InvalidRecordError("transaction markers and data batches in one append")
            origin = AppendOrigin.COORDINATOR if controls else AppendOrigin.CLIENT
            duplicate = None if controls else self.producer_state.find_duplicate(headers)
            if duplicate is not None:
                log.info("%s: a producer retried the batch at offsets %d-%d; not stored twice",
                         self.name, duplicate.first_offset, duplicate.last_offset)
                return duplicate.first_offset, duplicate.last_offset
            producers = self.producer_state.analyze(headers, origin)
            if len(headers) > 1 and (len(buf) > self.config.segment_bytes or
                                     self.segments.active.should_roll(len(buf), max_ts,
                                                                     offset - 1, now)):
                self._append_as_requests(buf, headers, origin, first, sync)
            else:
                self._append_whole(buf, first, offset - 1, max_ts, shallow, None, producers,
                                   sync)
            return first, offset - 1

    def _append_as_requests(self, buf: bytearray, headers: list[RecordBatch],
                            origin: AppendOrigin, first: int, sync: bool = False) -> None:
        """Several stamped batches whose append rolls the segment, appended one by one as a
        broker gets them (Kafka 4 takes one batch per partition in a produce request): each has
        its own roll check, so the segments break between batches where the broker's do, and
        the producer snapshot of a roll holds the batches before it. Published once, all or
        nothing (the log is truncated back to ``first`` on error)."""
        with self._all_or_nothing(first):  # (truncate_to reloads the producer state too)
            for batch in headers:
                last, end = batch.last_offset, batch.position + batch.size_in_bytes
                self._append_chunk(memoryview(buf)[batch.position:end], batch.base_offset, last,
                                   batch.max_timestamp, last)
                self.producer_state.apply(self.producer_state.analyze([batch], origin),
                                          self.segments.active.txn_index)
            self._after_append(first, headers[-1].last_offset + 1, sync=sync)

    def _validate_produced(self, buf: bytearray) -> list[tuple[int, int]]:
        """(position, offset count) of each batch in ``buf``, checked as LogValidator does."""
        out, consumed = [], 0
        for batch in iter_batches(buf):
            if batch.magic != CURRENT_MAGIC:
                raise InvalidRecordError(f"magic v{batch.magic} entry: producers append magic 2")
            batch.ensure_valid()
            if batch.records_count <= 0 or batch.last_offset_delta != batch.records_count - 1:
                raise InvalidRecordError(
                    f"batch of {batch.records_count} records with lastOffsetDelta "
                    f"{batch.last_offset_delta}: a producer's batch numbers its records 0..n-1")
            if batch.producer_id >= 0 and batch.base_sequence < 0 and not batch.is_control_batch:
                raise InvalidRecordError(f"producer {batch.producer_id} sent a batch without a "
                                         "sequence number")
            if self.config.compact and not batch.is_control_batch and \
                    any(r.key is None for r in batch.records()):
                self._refuse_keyless()
            if batch.size_in_bytes > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"a {batch.size_in_bytes}-byte record batch exceeds"
                    f" max.message.bytes={self.config.max_message_bytes}")
            if not batch.is_control_batch and \
                    self.config.timestamp_type == TimestampType.CREATE_TIME:
                self._check_batch_timestamps(batch)
            out.append((batch.position, batch.last_offset_delta + 1))
            consumed = batch.position + batch.size_in_bytes
        if consumed != len(buf):
            raise CorruptRecordError(f"{len(buf) - consumed} bytes of a partial batch at the end")
        return out

    def _check_batch_timestamps(self, batch) -> None:
        """A producer's batch checked as ``LogValidator`` checks CreateTime records: its
        maxTimestamp against ``message.timestamp.after.max.ms``, and each record's against
        ``message.timestamp.before.max.ms`` when that is set (its default lets every past
        timestamp pass, so the records are not decoded for it)."""
        now, config = self.clock.milliseconds(), self.config
        _check_timestamp(config, batch.max_timestamp, now,
                         f"the batch with base sequence {batch.base_sequence}")
        if config.message_timestamp_before_max_ms < 2**63 - 1:
            for record in batch.records():
                _check_timestamp(config, record.timestamp, now,
                                 f"the record at offset delta "
                                 f"{record.offset - batch.base_offset}")

    def _append_whole(self, data: bytes, first: int, last: int, max_ts: int, shallow: int,
                      epochs: list[tuple[int, int]] | None = None, producers=None,
                      sync: bool = False) -> None:
        """One segment append of whole batches, rolled back on failure; then the producer
        state and the transaction index of aborted transactions, then publish."""
        with self._all_or_nothing(self._leo):  # (truncate_to reloads the producer state too)
            self._append_chunk(data, first, last, max_ts, shallow)
            if producers is not None:  # may write a .txnindex entry: part of the append
                self.producer_state.apply(producers, self.segments.active.txn_index)
            self._after_append(first, last + 1, epochs, sync)

    def _after_append(self, first: int, next_offset: int,
                      epochs: list[tuple[int, int]] | None = None, sync: bool = False) -> None:
        """Learn the leader epochs (the batches' own for a follower append, else
        :attr:`leader_epoch`), flush when ``flush.messages`` records are unflushed, then
        publish the new log end offset (readers see a whole append or none of it). What can
        fail comes before the publication: an append taken back was never served."""
        for epoch, start in epochs or [(self.leader_epoch, first)]:
            if epoch > self.epochs.latest_epoch:
                self.epochs.assign(epoch, start)
        if sync or next_offset - self.recovery_point >= self.config.flush_messages:
            self._flush(next_offset)
        self._leo = next_offset
        self.producer_state.update_map_end_offset(next_offset)
        self.producer_state.on_high_watermark_updated(next_offset)

    def _append_chunk(self, data: bytes, first_offset: int, last_offset: int,
                      max_timestamp: int, shallow_offset: int) -> None:
        if len(data) > self.config.segment_bytes:
            raise RecordTooLargeError(
                f"a {len(data)}-byte append exceeds segment.bytes={self.config.segment_bytes}"
            )
        segment = self._maybe_roll(len(data), max_timestamp, first_offset, last_offset)
        segment.append(last_offset, max_timestamp, shallow_offset, data)

    def _maybe_roll(self, size: int, max_timestamp: int, first_offset: int, last_offset: int) -> LogSegment:
        """Roll when the active segment says so (``UnifiedLog.maybeRoll``); the new base offset
        is max(first offset of the append, log end offset), i.e. the first offset: appends
        start at or past the log end offset."""
        segment = self.segments.active
        if segment.should_roll(size, max_timestamp, last_offset, self.clock.milliseconds()):
            segment = self.roll(first_offset)
        return segment

    def roll(self, new_base: int | None = None) -> LogSegment:
        """Close the active segment for appends and start a new one at ``new_base`` (default:
        the log end offset) (``UnifiedLog.roll``)."""
        with self._lock:
            new_base = self._leo if new_base is None else new_base
            active = self.segments.active
            if active.base_offset == new_base and active.size == 0:
                return active  # Kafka reuses an empty active segment with the same base
            active.on_become_inactive()
            for file in (log_file, offset_index_file, time_index_file):
                leftover = file(self.dir, new_base)
                if leftover.exists():  # e.g. from a rolled-back append before a crash
                    log.warning("deleting leftover %s before rolling to it", leftover)
                    leftover.unlink()
            segment = LogSegment(self.dir, new_base, self.config, True, self.clock,
                                 files=self.files)
            self.segments.set(self.segments.all() + [segment])
            self.producer_state.update_map_end_offset(new_base)
            self.producer_state.take_snapshot()  # Kafka: a producer snapshot at every roll
            log.info("rolled %s to a new segment at offset %d", self.name, new_base)
            return segment

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (whole batches) and every segment whose
        base offset is larger (``LocalLog.truncateTo``)."""
        with self._lock:
            segments = self.segments.all()
            keep = [s for s in segments if s.base_offset <= offset] or segments[:1]
            for segment in segments[len(keep):]:
                segment.delete()
            self.segments.set(keep)
            self.segments.active.truncate_to(offset)
            self.reader.clear_cache()
            self._leo = self.segments.active.read_next_offset()
            self.recovery_point = min(self.recovery_point, self._leo)
            self.epochs.truncate_from_end(self._leo)
            log_loader.rebuild_producer_state(self.producer_state, self.segments.all(),
                                              self._log_start_offset, self._leo)

    # -- retention ----------------------------------------------------------------------------

    def delete_old_segments(self, now: int | None = None) -> int:
        """Apply retention (``UnifiedLog.deleteOldSegments``): segments wholly below the log start
        offset, then the oldest while the log exceeds ``retention.bytes``, then those whose
        largest record timestamp is more than ``retention.ms`` before ``now`` (epoch ms; the
        .log mtime when no record has a timestamp). The walk stops at the first segment kept.
        Only the first rule applies without ``delete`` in ``cleanup.policy``.
        When every segment goes, the log rolls first, so an empty active segment always remains.
        The log start offset moves to the first kept segment; files are renamed ``.deleted`` and
        removed ``file.delete.delay.ms`` later by :meth:`delete_due_files`. Returns the number of
        segments deleted."""
        if not self.writable:
            raise ReadOnlyLogError(f"{self.name} is read-only")
        with self._lock:
            if self.offline is not None:
                self._check_writable()
            try:
                return self._delete_segments([s for s, _ in self.retention_plan(now)])
            except OSError as exc:  # a pass half done: no later write builds on it
                self.go_offline(exc)
                raise

    def retention_plan(self, now: int | None = None) -> list[tuple[LogSegment, str]]:
        """What :meth:`delete_old_segments` would delete now, oldest first, each with the rule
        that deletes it (``below the log start offset``, ``retention.bytes=N``,
        ``retention.ms=N``); nothing is changed."""
        now = self.clock.milliseconds() if now is None else now
        with self._lock:
            return retention_plan(self.segments.all(), self.config, self._log_start_offset, now)

    def remove_expired_producers(self, now: int | None = None) -> None:
        """Forget producers idle for ``producer.id.expiration.ms`` with no open transaction
        (the broker's ``producer.id.expiration.check.interval.ms`` job)."""
        with self._lock:
            self.producer_state.remove_expired_producers(self.clock.milliseconds() if now is None else now)

    def open_transactions(self) -> list[OpenTransaction]:
        """The transactions with data and no marker yet, by first offset."""
        with self._lock:
            return self.producer_state.open_transactions()

    def abort_transaction(self, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int = 0) -> int:
        """Append an ABORT marker for ``producer_id`` as a transaction coordinator writes it
        (WriteTxnMarkers; ``kafka-transactions.sh abort``) with the given epochs; a higher
        ``producer_epoch`` than the producer's fences it (its later batches raise
        InvalidProducerEpochError). Returns the marker's offset. Raises as
        :meth:`append_as_leader` (InvalidProducerEpochError for a lower epoch,
        TransactionCoordinatorFencedError for a lower coordinator epoch)."""
        marker = build_control_batch(0, producer_id, producer_epoch, ControlRecordType.ABORT,
                                     coordinator_epoch, timestamp_ms=self.clock.milliseconds())
        return self.append_as_leader(marker)[0]

    def abort_timed_out_transactions(self, timeout_ms: int, now: int | None = None
                                     ) -> list[OpenTransaction]:
        """Abort every transaction open for more than ``timeout_ms`` at ``now`` (epoch ms),
        as Kafka's coordinator does every
        ``transaction.abort.timed.out.transaction.cleanup.interval.ms``: the producer's epoch
        is bumped (``prepareFenceProducerEpoch``), so a zombie that goes on writing is
        refused. Returns the transactions aborted (with their epochs from before)."""
        now = self.clock.milliseconds() if now is None else now
        aborted = []
        with self._lock:
            for txn in self.producer_state.open_transactions():
                if now - txn.start_ms > timeout_ms:
                    self.abort_transaction(txn.producer_id,
                                           min(txn.producer_epoch + 1, MAX_PRODUCER_EPOCH),
                                           max(txn.coordinator_epoch, 0))
                    aborted.append(txn)
        return aborted

    def _delete_segments(self, doomed: list[LogSegment]) -> int:
        if not doomed:
            return 0
        if len(doomed) == len(self.segments):
            self.roll()
        kept = self.segments.all()[len(doomed):]
        self._log_start_offset = max(self._log_start_offset, kept[0].base_offset)
        self.epochs.truncate_from_start(self._log_start_offset)
        self.producer_state.on_log_start_offset_incremented(self._log_start_offset)
        self.producer_state.delete_snapshots_before(self._log_start_offset)
        self.segments.set(kept)
        self.reader.clear_cache()
        due = self.clock.milliseconds() + self.config.file_delete_delay_ms
        for segment in doomed:
            log.info("deleting segment %s of %s by retention", segment.base_offset, self.name)
            segment.rename_to_deleted()
            self._pending_deletes.append((due, segment))
        self.delete_due_files()
        return len(doomed)

    # -- compaction (the cleaner's side of UnifiedLog) ----------------------------------------

    def last_records_of_active_producers(self) -> dict[int, tuple[int | None, int]]:
        """{producer id: (last data offset or None, producer epoch)} of the producers still
        active (``UnifiedLog.lastRecordsOfActiveProducers``): the cleaner keeps the batch of
        each one's last data offset, so their sequence numbers survive."""
        with self._lock:
            return {pid: (e.last_data_offset if e.last_data_offset >= 0 else None,
                          e.producer_epoch)
                    for pid, e in self.producer_state.active_producers.items()}

    def replace_segments(self, cleaned, old: list[LogSegment],
                         step: Callable[[str], None] = lambda _: None) -> LogSegment:
        """Swap ``cleaned`` (the cleaner's LogSegment, its files ``.cleaned``) in
        for the consecutive segments ``old`` (``UnifiedLog.replaceSegments``): rename it
        ``.swap``, rename the old files ``.deleted`` (removed ``file.delete.delay.ms`` later,
        with their producer snapshots), rename ``.swap`` to the final names, then publish the
        new segment list at once under the log's lock: readers see the old segments or the new
        one, never a mix, and a crash between renames loads as one or the other. ``step(name)``
        is called after each rename. Raises LogCleaningAbortedError when ``old`` is no longer
        in the log (retention or truncation got there first); OSError."""
        with self._lock:
            segments = self.segments.all()
            at = next((i for i, s in enumerate(segments) if s is old[0]), None)
            if at is None or segments[at:at + len(old)] != old:
                raise LogCleaningAbortedError(f"{self.name} changed while it was cleaned")
            cleaned.change_file_suffixes(SWAP_SUFFIX, step)
            due = self.clock.milliseconds() + self.config.file_delete_delay_ms
            for segment in old:
                segment.rename_to_deleted()
                self._pending_deletes.append((due, segment))
                step(f"renamed segment {segment.base_offset} to .deleted")
            cleaned.change_file_suffixes("", step)
            new = cleaned
            self.segments.set(segments[:at] + [new] + segments[at + len(old):])
            self.reader.clear_cache()
            for segment in old:  # their producer snapshots go now: a loader would keep a
                if segment.base_offset != new.base_offset:  # .snapshot.deleted after a crash
                    snapshot = self.producer_state.remove_and_mark_snapshot_for_deletion(
                        segment.base_offset)
                    if snapshot is not None:
                        snapshot.unlink(missing_ok=True)
            fsync_directory(self.dir)
            step("swapped in")
            return new

    def delete_due_files(self, now: int | None = None) -> None:
        """Remove the ``.deleted`` files whose ``file.delete.delay.ms`` has passed."""
        now = self.clock.milliseconds() if now is None else now
        with self._lock:
            due = [s for t, s in self._pending_deletes if t <= now]
            self._pending_deletes = [(t, s) for t, s in self._pending_deletes if t > now]
        for segment in due:
            segment.delete()

    # -- following another writer (a read-only log of a running broker's directory) ---------

    def catch_up(self, log_start_offset: int = 0) -> bool:
        """Bring a read-only log up to date with the files another process (a running broker)
        writes in its directory, as a reader of Kafka's files must: the whole batches appended
        to the active segment since (a torn last batch waits), and the segments rolled,
        deleted, cut back or swapped in (``LogSegments.follow_files``; the log start offset
        moves past deleted ones). ``log_start_offset`` is the broker's checkpointed one
        (DeleteRecords moves it inside a segment). Returns whether anything changed. What a
        call costs: a ``stat`` of the directory and an ``fstat`` of the active ``.log``; the
        directory is listed only when it may have changed; new bytes are the only ones read.
        A writable log (kfs is the writer) never changes here. Raises nothing for a directory
        that is gone (the manager drops the partition)."""
        if self.writable:
            return False
        with self._lock:
            version = self.segments.version
            try:
                self.segments.follow_files()
                next_offset = self.segments.follow_active()
            except FileNotFoundError:  # a segment or the directory vanished meanwhile
                return False
            except (CorruptRecordError, InvalidRecordError) as exc:
                log.warning("%s: new bytes that are not whole batches: %s", self.name, exc)
                return False
            changed = self.segments.version != version
            if changed:
                self._took_in_segments()
            elif next_offset is not None:
                self._leo = max(self._leo, next_offset)
                changed = True
            if changed:  # the producer state (the last stable offset) after new batches
                log_loader.replay_producer_batches(self.producer_state, self.segments.all(),
                                                   self._leo)
            if log_start_offset > self._log_start_offset:
                self._log_start_offset = min(log_start_offset, self._leo)
                self.reader.clear_cache()
                changed = True
            self.segments.close_retired()
            return changed

    def _took_in_segments(self) -> None:
        """The log's offsets after following took in segments another writer changed."""
        self.reader.clear_cache()
        bases, segments = self.segments.view
        self._log_start_offset = max(self._log_start_offset, bases[0])
        leo = max(segments[-1].read_next_offset(), self._log_start_offset)
        if leo < self._leo:  # truncated: the producer state is rebuilt from the log
            self.producer_state.truncate_and_reload(self._log_start_offset, leo)
        self._leo = leo
        log.info("%s follows its directory: segments %s..%s, offsets %d..%d", self.name,
                 bases[0], bases[-1], self._log_start_offset, self._leo)

    # -- lifecycle --------------------------------------------------------------------------

    def flush(self) -> None:
        """fsync every segment holding offsets at or past the recovery point, and the
        directory when one of them was created since (its name must survive a power loss too),
        then move the recovery point to the log end offset (``UnifiedLog.flush``,
        ``LocalLog.flush``): a crash keeps everything below it without revalidation. A failed
        fsync takes the log offline (see :meth:`go_offline`: the data it should have made durable
        cannot be trusted); an offline log raises OfflineLogError."""
        with self._lock:
            if self.offline is not None:
                self._check_writable()
            try:
                self._flush(self._leo)
            except OSError as exc:
                self.go_offline(exc)
                raise

    def _flush(self, leo: int) -> None:
        """:meth:`flush` up to ``leo`` (the lock held; an append flushes before it publishes)."""
        if not self.writable or leo <= self.recovery_point:
            return
        for segment in self.segments.from_offset(self.recovery_point):
            segment.flush()
        if self.segments.active.base_offset >= self.recovery_point:
            fsync_directory(self.dir)
        self.recovery_point = leo
        self._last_flush_ms = self.clock.milliseconds()

    def flush_if_due(self, now: int) -> None:
        """Flush when ``flush.ms`` has passed since the last flush and data is unflushed (the
        broker's ``log.flush.scheduler.interval.ms`` check)."""
        if self._leo > self.recovery_point and now - self._last_flush_ms >= self.config.flush_ms \
                and self.offline is None:
            self.flush()

    def close(self) -> None:
        """Flush and close every segment; the active one gets its final time-index entry and
        trimmed indexes, so the directory is what Kafka expects after a clean shutdown.
        Every segment is closed even when a step fails (e.g. ENOSPC); the first OSError is
        raised after that."""
        with self._lock:
            errors = []
            if self.writable and len(self.segments) and self.damage is None and \
                    self.offline is None:
                try:
                    self.flush()
                    self.producer_state.take_snapshot()  # Kafka: a producer snapshot at close
                    self.producer_state.remove_snapshots_a_load_deletes(  # a broker adopting
                        self.segments.view[0], self._log_start_offset, self._leo)  # it deletes none
                except OSError as e:
                    errors.append(e)
            for segment in self.segments.all():
                try:
                    segment.close()
                except OSError as e:
                    errors.append(e)
            self.segments.close_retired(everything=True)
            self.segments.set([])
            self.delete_due_files(now=2**63 - 1)  # no reader of this process is left
            if errors and self.offline is None:  # (an offline log's disk is known to fail)
                raise errors[0]


def _check_timestamp(config: LogConfig, ts: int, now: int, what: str) -> None:
    """InvalidTimestampError when CreateTime ``ts`` (epoch ms; -1, none, always passes) is more
    than ``message.timestamp.before.max.ms`` before ``now`` or ``message.timestamp.after.max.ms``
    after it (Kafka's ``LogValidator.validateTimestamp``; its words)."""
    before, after = config.message_timestamp_before_max_ms, config.message_timestamp_after_max_ms
    if ts != -1 and (now - ts > before or ts - now > after):
        raise InvalidTimestampError(
            f"Timestamp {ts} of {what} is out of range. The timestamp should be within "
            f"[{max(now - before, 0)}, {now + after}] (message.timestamp.before.max.ms={before}, "
            f"message.timestamp.after.max.ms={after})")


def _records_in(batch: bytes) -> int:
    """lastOffsetDelta + 1 of a v2 batch (offsets it spans)."""
    return last_offset_delta_at(batch) + 1
