"""Record batches, magic v2 (Kafka's ``DefaultRecordBatch``, ``DefaultRecord`` and
``MemoryRecordsBuilder``), sans-IO: functions take and return bytes/memoryviews.

Layout (all integers big-endian)::

    0 baseOffset int64 | 8 batchLength int32 (= size - 12) | 12 partitionLeaderEpoch int32
    16 magic int8 = 2 | 17 crc uint32: CRC-32C of bytes [21, size) | 21 attributes int16
    23 lastOffsetDelta int32 | 27 baseTimestamp int64 | 35 maxTimestamp int64
    43 producerId int64 | 51 producerEpoch int16 | 53 baseSequence int32 | 57 recordsCount int32
    61 records, or one compressed stream of them

Each record: length varint (bytes after it), attributes int8 (0), timestampDelta varlong,
offsetDelta varint, key (varint length, -1 = null, then bytes), value (same), header count
varint, then per header a key (varint length >= 0, UTF-8) and a value (varint length, -1 = null).
"""

from __future__ import annotations

import struct
from typing import Iterator, Sequence

from crc32c import crc32c

from storage.clock import now_ms
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.records._c import records as _c
from storage.records._c.records import (  # this module is their owner
    decode_records,
    encode_arrow,
    encode_line_batches,
    encode_lines,
    encode_records,
    seal_in_place,
)
from storage.records.compression import CompressionType, compress, decompress
from storage.records.framing import (  # the header's names: import them from there
    ATTRIBUTES_OFFSET,
    COMPRESSION_CODEC_MASK,
    CONTROL_FLAG_MASK,
    CRC_OFFSET,
    CURRENT_MAGIC,
    DELETE_HORIZON_FLAG_MASK,
    HEADER_SIZE_UP_TO_MAGIC,
    HEADER_STRUCT,
    LEGACY_RECORD_OVERHEAD_V0,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    PARTITION_LEADER_EPOCH_OFFSET,
    RECORD_BATCH_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_FLAG_MASK,
    Framed,
    batch_crc_at,
    next_batch,
)
from storage.records.legacy import LegacyRecordBatch
from storage.records.record import BatchSpan, Record, TimestampType

__all__ = [
    "RecordBatch",
    "batch_at",
    "whole_batch_at",
    "iter_batches",
    "build_batch",
    "seal_batch",
    "assign_offsets",
    "set_log_append_time",
    "decode_records",
    "encode_arrow",
    "encode_line_batches",
    "encode_lines",
    "encode_records",
    "seal_in_place",
]

NO_TIMESTAMP = -1
_INT32_MAX = 0x7FFFFFFF

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")


class RecordBatch(BatchSpan):
    """A v2 batch header parsed from ``buf[pos:pos + 61]`` (``DefaultRecordBatch``).

    Only the 61 header bytes are needed to construct it; :meth:`ensure_valid` and
    :meth:`records` need the whole batch (``size_in_bytes`` bytes from ``pos``). ``buf`` is
    bytes, bytearray, memoryview or mmap and is kept by reference, not copied.

    Raises CorruptRecordError if fewer than 61 bytes are available or the declared size is
    below 61, InvalidRecordError if the magic is not 2 (v0/v1 entries are LegacyRecordBatch;
    :func:`batch_at` picks the class by the magic).
    """

    __slots__ = (
        "_buf", "_pos", "base_offset", "batch_length", "size_in_bytes",
        "partition_leader_epoch", "magic", "crc", "attributes", "last_offset_delta",
        "base_timestamp", "max_timestamp", "producer_id", "producer_epoch", "base_sequence",
        "records_count",
    )

    def __init__(self, buf, pos: int = 0) -> None:
        available = len(buf) - pos
        if available < RECORD_BATCH_OVERHEAD:
            # Dispatch on the magic first (pitfall 3): a short v0/v1 message is not corrupt.
            if available > MAGIC_OFFSET and buf[pos + MAGIC_OFFSET] != CURRENT_MAGIC:
                _raise_bad_magic(buf[pos + MAGIC_OFFSET], pos)
            raise CorruptRecordError(
                f"record batch header at position {pos} needs {RECORD_BATCH_OVERHEAD} bytes, "
                f"only {max(available, 0)} available")
        (self.base_offset, self.batch_length, self.partition_leader_epoch, self.magic,
         self.crc, attributes, self.last_offset_delta, self.base_timestamp,
         self.max_timestamp, self.producer_id, self.producer_epoch, self.base_sequence,
         self.records_count) = HEADER_STRUCT.unpack_from(buf, pos)
        if self.magic != CURRENT_MAGIC:
            _raise_bad_magic(self.magic, pos)
        self.size_in_bytes = self.batch_length + LOG_OVERHEAD
        if self.size_in_bytes < RECORD_BATCH_OVERHEAD:
            raise CorruptRecordError(
                f"Record batch is corrupt (the size {self.size_in_bytes} is smaller than the "
                f"minimum allowed overhead {RECORD_BATCH_OVERHEAD})")
        # Kafka reads (byte) getShort(21): only the low byte carries flags (pitfall 1).
        self.attributes = attributes & 0xFF
        self._buf = buf
        self._pos = pos

    # -- derived header fields -----------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """baseOffset + lastOffsetDelta (kept by compaction even if that record is gone)."""
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_sequence(self) -> int:
        """baseSequence + lastOffsetDelta, wrapping at 2**31; -1 without a sequence."""
        return _increment_sequence(self.base_sequence, self.last_offset_delta)

    @property
    def compression_type(self) -> CompressionType:
        """Codec of the records section. Raises InvalidRecordError for ids 5-7."""
        return CompressionType.for_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG_MASK)

    @property
    def is_control_batch(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        """True when baseTimestamp holds the cleaner's delete horizon (epoch ms)."""
        return bool(self.attributes & DELETE_HORIZON_FLAG_MASK)

    def __repr__(self) -> str:
        return (
            f"RecordBatch(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"count={self.records_count}, size={self.size_in_bytes}, "
            f"codec={self.attributes & COMPRESSION_CODEC_MASK}, attributes={self.attributes:#04x}, "
            f"base_timestamp={self.base_timestamp}, max_timestamp={self.max_timestamp}, "
            f"producer_id={self.producer_id})"
        )

    # -- whole-batch operations ----------------------------------------------------------


    def ensure_valid(self) -> None:
        """Check the size and the CRC-32C over [21, size) (``DefaultRecordBatch.ensureValid``).

        Needs the whole batch in ``buf``. Raises CorruptRecordError (with the stored and
        computed CRC on a mismatch).
        """
        self._check_complete(f"record batch at offset {self.base_offset}")
        computed = batch_crc_at(self._buf, self._pos, self.size_in_bytes)
        if computed != self.crc:
            raise CorruptRecordError(
                f"Record batch at offset {self.base_offset} is corrupt "
                f"(stored crc = {self.crc}, computed crc = {computed})")

    def records(self) -> list[Record]:
        """All records of the batch, decompressed, in order (``DefaultRecordBatch.iterator``).

        Does not check the CRC (see :meth:`ensure_valid`). An empty batch (count 0) yields
        nothing without looking at its body, as Kafka. Raises CorruptRecordError for a negative
        count, a record whose declared length is not consumed exactly, fewer records than
        declared or bytes left after the last one; InvalidRecordError for an unknown codec.
        """
        if self.records_count == 0:
            return []
        return _c.decode_records(self.records_section(), *self._decode_args())

    def record_at(self, offset: int) -> Record | None:
        """The record at ``offset``, or None when the batch has none there (outside it, or a
        gap left by compaction). Records before it are skimmed, not decoded: a random read
        costs one record's decoding. Errors as :meth:`records`."""
        if not 0 <= offset - self.base_offset <= self.last_offset_delta or self.records_count <= 0:
            return None
        return _c.record_at(self.records_section(), *self._decode_args(), offset)

    def first_record_from_time(self, timestamp: int, min_offset: int) -> Record | None:
        """The first record with timestamp >= ``timestamp`` (epoch ms) and offset >=
        ``min_offset``, or None (the inner loop of ``FileRecords.searchForTimestamp``). Only that
        record is decoded: the others are read as far as their timestamp and offset deltas."""
        if self.records_count <= 0 or self.max_timestamp < timestamp:
            return None
        return _c.first_record_from_time(self.records_section(), *self._decode_args(),
                                             timestamp, min_offset)

    def add_to(self, columns, start: int = 0, end: int = (1 << 63) - 1) -> int:
        """Decode the records with offsets in [``start``, ``end``) into ``columns`` (the
        compiled ``ColumnBuilder`` behind ``storage.records.columns.RecordColumns``); returns
        how many. Errors as :meth:`records`."""
        if self.records_count == 0:
            return 0
        return columns.add_section(self.records_section(), *self._decode_args()[:4],
                                   start, end)

    def _decode_args(self) -> tuple[int, int, int, int, int]:
        """(count, base offset, base timestamp, LogAppendTime or -1, base sequence)."""
        append_time = self.max_timestamp if self.attributes & TIMESTAMP_TYPE_MASK else -1
        return (self.records_count, self.base_offset, self.base_timestamp, append_time,
                self.base_sequence)

    def records_section(self):
        """The records section, decompressed (a view of the buffer when uncompressed).
        Raises CorruptRecordError when truncated."""
        self._check_complete(f"record batch at offset {self.base_offset}")
        start = self._pos + RECORD_BATCH_OVERHEAD
        section = memoryview(self._buf)[start:self._pos + self.size_in_bytes]
        codec = self.attributes & COMPRESSION_CODEC_MASK
        if codec:
            return decompress(CompressionType.for_id(codec), section)
        return section


_WHOLE, _LEGACY, _TOO_SMALL = Framed.WHOLE, Framed.LEGACY, Framed.TOO_SMALL


def _raise_bad_magic(magic: int, pos: int):
    raise InvalidRecordError(
        f"record batch at position {pos} has magic {magic}; only magic 2 is read here")


def _increment_sequence(sequence: int, increment: int) -> int:
    # DefaultRecordBatch.incrementSequence: wraps past Integer.MAX_VALUE to 0.
    if sequence < 0:
        return -1
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


def batch_at(buf, pos: int = 0) -> RecordBatch | LegacyRecordBatch:
    """The batch whose header starts at ``buf[pos]``, chosen by the magic byte at ``pos + 16``
    (the same place in every format), as ``FileLogInputStream.nextBatch``: a RecordBatch for
    magic 2, a LegacyRecordBatch (one v0/v1 log entry) for magic 0 and 1. Raises as the
    constructor it picks (InvalidRecordError for any other magic)."""
    if len(buf) - pos > MAGIC_OFFSET and buf[pos + MAGIC_OFFSET] < CURRENT_MAGIC:
        return LegacyRecordBatch(buf, pos)
    return RecordBatch(buf, pos)


def whole_batch_at(buf, pos: int = 0, end: int | None = None
                   ) -> RecordBatch | LegacyRecordBatch | None:
    """The whole batch at ``buf[pos:end]`` as Kafka's ``FileLogInputStream.nextBatch`` gives
    it: a RecordBatch for magic 2, a LegacyRecordBatch for a v0/v1 log entry (see
    :func:`batch_at`), None when 17 bytes or fewer are left or the batch runs past ``end``.

    ``end`` (default ``len(buf)``) may lie past the end of ``buf`` when ``buf`` is a block of a
    file (see :func:`storage.records.framing.next_batch`): the batch is then parsed from its
    header, the part in ``buf`` (``is_complete`` says whether all of it is).

    Checked in Kafka's order, the size, whether the batch is all there, then the magic: raises
    CorruptRecordError for a declared size below the smallest possible message (14), below 61
    for v2 or below the v1 overhead (22), InvalidRecordError for a magic above 2.
    """
    if end is None:
        end = len(buf)
    if end - pos <= HEADER_SIZE_UP_TO_MAGIC:
        return None
    framed, size = next_batch(buf, pos, end)
    if framed is _WHOLE:
        return RecordBatch(buf, pos)
    if framed is _TOO_SMALL:
        raise CorruptRecordError(
            f"Found record size {size - LOG_OVERHEAD} smaller than minimum record overhead "
            f"({LEGACY_RECORD_OVERHEAD_V0}) at position {pos}")
    if size > end - pos:
        return None
    if framed is _LEGACY:
        return LegacyRecordBatch(buf, pos)
    return RecordBatch(buf, pos)  # a bad magic, or smaller than its header: raises


def iter_batches(buf, pos: int = 0, end: int | None = None
                 ) -> Iterator[RecordBatch | LegacyRecordBatch]:
    """Yield each whole batch in ``buf[pos:end]`` (``FileLogInputStream``): a RecordBatch
    for magic 2, a LegacyRecordBatch for each v0/v1 log entry, up to a partial trailing batch
    (fewer than 18 bytes left, or fewer than the declared size), where it stops silently.
    Raises as :func:`whole_batch_at`.
    """
    end = len(buf) if end is None else min(end, len(buf))
    while (batch := whole_batch_at(buf, pos, end)) is not None:
        yield batch
        pos += batch.size_in_bytes


# -- encoding ---------------------------------------------------------------------------


def _check_timestamp(timestamp: int) -> None:
    if timestamp < NO_TIMESTAMP:
        raise ValueError(f"Invalid negative timestamp {timestamp}")


def build_batch(
    base_offset: int,
    values: Sequence[bytes | None],
    keys: Sequence[bytes | None] | None = None,
    timestamps: int | Sequence[int] | None = None,
    headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
    *,
    codec: int = CompressionType.NONE,
    level: int | None = None,
    timestamp_type: int = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    partition_leader_epoch: int = -1,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    offset_deltas: Sequence[int] | None = None,
    last_offset_delta: int | None = None,
    delete_horizon_ms: int | None = None,
) -> bytes:
    """Encode one v2 batch, byte for byte as Kafka's ``MemoryRecordsBuilder`` does.

    Columnar input, one entry per record: ``values`` (bytes or None); ``keys`` None (all
    null) or bytes/None per record; ``timestamps`` epoch ms, one int for every record, a
    sequence (one per record, each >= -1), or None for now; ``headers`` None or a sequence of
    ``(str, bytes | None)`` pairs per record; ``offset_deltas`` None (0..n-1) or strictly
    increasing ints >= 0 (a compacted batch keeps its gaps). lastOffsetDelta is the last
    offset delta, or ``last_offset_delta`` (>= it) when the cleaner keeps the original batch's
    last offset (``MemoryRecordsBuilder.overrideLastOffset``).

    baseTimestamp is the first record's timestamp (or ``delete_horizon_ms``, which also sets
    attribute bit 6, as the cleaner does); maxTimestamp is the largest timestamp, or
    ``log_append_time`` (required then) for ``TimestampType.LOG_APPEND_TIME``. The records
    section is compressed with ``codec`` at ``level`` (None = Kafka's default).

    Returns the batch bytes (``size = batchLength + 12``). Raises ValueError for empty
    ``values``, mismatched lengths, bad offsets or timestamps, or a field out of range;
    InvalidConfigError for a bad level; InvalidRecordError for an unknown codec.
    """
    count = len(values)
    if count == 0:
        raise ValueError("a record batch needs at least one record")
    codec = CompressionType.for_id(codec)
    timestamp_type = TimestampType(timestamp_type)
    for name, column in (("keys", keys), ("headers", headers), ("offset_deltas", offset_deltas)):
        if column is not None and len(column) != count:
            raise ValueError(f"{name} has {len(column)} entries for {count} values")

    if timestamps is None:
        timestamps = now_ms()
    if isinstance(timestamps, int):
        _check_timestamp(timestamps)
        first_timestamp = max_timestamp = timestamps
    else:
        if len(timestamps) != count:
            raise ValueError(f"timestamps has {len(timestamps)} entries for {count} values")
        first_timestamp, max_timestamp = timestamps[0], max(timestamps)
        _check_timestamp(min(timestamps))
    base_timestamp = first_timestamp if delete_horizon_ms is None else delete_horizon_ms
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("a LogAppendTime batch needs log_append_time")
        max_timestamp = log_append_time
    elif timestamp_type != TimestampType.CREATE_TIME:
        raise ValueError("TimestampType must be set for magic >= 0")

    if offset_deltas is None:
        last_record_delta = count - 1
    else:
        _check_offset_deltas(offset_deltas)
        last_record_delta = offset_deltas[-1]
    if last_offset_delta is None:
        last_offset_delta = last_record_delta
    elif last_offset_delta < last_record_delta:
        raise ValueError(
            f"last_offset_delta {last_offset_delta} is below the last record's {last_record_delta}")
    if last_offset_delta > _INT32_MAX:
        raise ValueError(f"offset delta {last_offset_delta} does not fit in an int32")

    if isinstance(timestamps, int):
        timestamp_deltas = timestamps - base_timestamp
    else:
        timestamp_deltas = [t - base_timestamp for t in timestamps]
    records = encode_records(values, keys, timestamp_deltas, headers, offset_deltas)
    return seal_batch(
        records, count, base_offset, base_timestamp, max_timestamp, last_offset_delta,
        codec=codec, level=level, log_append=timestamp_type == TimestampType.LOG_APPEND_TIME,
        partition_leader_epoch=partition_leader_epoch, producer_id=producer_id,
        producer_epoch=producer_epoch, base_sequence=base_sequence,
        is_transactional=is_transactional, is_control=is_control,
        delete_horizon=delete_horizon_ms is not None)


def seal_batch(records: bytes, count: int, base_offset: int, base_timestamp: int,
               max_timestamp: int, last_offset_delta: int, *, codec: int = CompressionType.NONE,
               level: int | None = None, log_append: bool = False,
               partition_leader_epoch: int = -1, producer_id: int = -1, producer_epoch: int = -1,
               base_sequence: int = -1, is_transactional: bool = False, is_control: bool = False,
               delete_horizon: bool = False) -> bytes:
    """A v2 batch around an encoded, uncompressed records section of ``count`` records: the
    section compressed with ``codec``, the 61-byte header, the CRC-32C
    (``MemoryRecordsBuilder.close``). Timestamps are epoch ms; ``log_append`` marks a
    LogAppendTime batch (``max_timestamp`` is then the append time). Raises ValueError for a
    header field out of range, InvalidConfigError for a bad level."""
    attributes = codec
    if log_append:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_FLAG_MASK
    if is_control:
        attributes |= CONTROL_FLAG_MASK
    if delete_horizon:
        attributes |= DELETE_HORIZON_FLAG_MASK
    if codec:
        records = compress(codec, records, level)
    try:
        return _c.seal(records, count, base_offset, base_timestamp, max_timestamp,
                           last_offset_delta, attributes, partition_leader_epoch, producer_id,
                           producer_epoch, base_sequence, crc32c)
    except OverflowError as exc:
        raise ValueError(f"batch header field out of range: {exc}") from None


def _check_offset_deltas(offset_deltas: Sequence[int]) -> None:
    previous = -1
    for delta in offset_deltas:
        if delta <= previous:
            raise ValueError(
                f"Illegal offset delta {delta} following {previous} "
                "(offsets must increase monotonically)")
        previous = delta


def assign_offsets(buf: bytearray, pos: int, base_offset: int, partition_leader_epoch: int) -> None:
    """Stamp a batch with the offsets and leader epoch a leader assigns on append
    (``DefaultRecordBatch.setLastOffset``/``setPartitionLeaderEpoch``). Neither field is covered
    by the CRC, so the batch stays valid without re-encoding."""
    _INT64.pack_into(buf, pos, base_offset)
    _INT32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_log_append_time(buf: bytearray, pos: int, timestamp: int) -> None:
    """Mark a batch LogAppendTime with maxTimestamp ``timestamp`` (epoch ms) and recompute its
    CRC (``DefaultRecordBatch.setMaxTimestamp``); records keep their bytes, readers take the
    batch's timestamp for every record."""
    batch = RecordBatch(buf, pos)
    _INT16.pack_into(buf, pos + ATTRIBUTES_OFFSET, batch.attributes | TIMESTAMP_TYPE_MASK)
    _INT64.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, timestamp)
    _UINT32.pack_into(buf, pos + CRC_OFFSET, batch_crc_at(buf, pos, batch.size_in_bytes))
