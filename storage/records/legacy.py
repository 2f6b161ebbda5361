"""Legacy message formats, magic v0 and v1 (Kafka's ``LegacyRecord`` and
``AbstractLegacyRecordBatch``), sans-IO and read-only: Kafka 4 reads them but never writes them.

One "log entry" (all integers big-endian)::

    0 offset int64 | 8 messageSize int32 (= size - 12) | 12 crc uint32: CRC-32 (zlib's, not
    CRC-32C) of bytes [16, size) | 16 magic int8 (0 or 1) | 17 attributes int8 (bits 0-2 codec,
    bit 3 timestamp type, v1 only) | v1: 18 timestamp int64 | key (int32 length, -1 = null,
    bytes) | value (int32 length, -1 = null, bytes)

A compressed entry is a *wrapper*: a null key and, as value, the compressed bytes of inner
entries in the same layout (each uncompressed). The wrapper's offset is the last inner offset.
Inner offsets are absolute in v0 and relative (0..n-1) in v1, where inner record i has the
absolute offset ``wrapper offset - last relative offset + relative offset i``. A v1 wrapper's
timestamp is the largest inner timestamp (CreateTime) or the broker's append time, which then
replaces every inner timestamp (LogAppendTime). v0 has no timestamps (-1, NoTimestampType).
"""

from __future__ import annotations

import bisect
import struct
import zlib

from storage.errors import CorruptRecordError, InvalidRecordError
from storage.records.compression import CompressionType, decompress
from storage.records.framing import LEGACY_RECORD_OVERHEAD_V0, LOG_OVERHEAD, MAGIC_OFFSET
from storage.records.record import BatchSpan, Record, TimestampType

__all__ = ["LegacyRecordBatch", "RECORD_OVERHEAD_V0", "RECORD_OVERHEAD_V1"]

# (LOG_OVERHEAD, offset + messageSize, and MAGIC_OFFSET are the framer's: every format's)
# crc + magic + attributes (+ timestamp) + key length + value length (LegacyRecord)
RECORD_OVERHEAD_V0 = LEGACY_RECORD_OVERHEAD_V0  # 14
RECORD_OVERHEAD_V1 = 22
# Where the key length starts in a message (bytes [12, size) of an entry, crc first).
KEY_SIZE_OFFSET_V0 = 6
KEY_SIZE_OFFSET_V1 = 14
_HEADER_V0 = struct.Struct(">qiIbb")  # offset, messageSize, crc, magic, attributes
_HEADER_V1 = struct.Struct(">qiIbbq")  # ... and the timestamp
_OFFSET_AND_SIZE = struct.Struct(">qi")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")

COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
NO_TIMESTAMP = -1
_NO_HEADERS = ()


class LegacyRecordBatch(BatchSpan):
    """One v0/v1 log entry parsed from ``buf[pos:]``: a "shallow" batch, as Kafka's
    ``LegacyFileChannelRecordBatch`` / ``ByteBufferLegacyRecordBatch``.

    It answers what :class:`storage.records.batch.RecordBatch` answers, with Kafka's values
    for fields v0/v1 lack: no producer id/epoch/sequence (-1), no leader epoch (-1), never
    transactional or control. ``last_offset`` is the entry's offset; ``max_timestamp`` the
    entry's timestamp (-1 for v0). Only the header (18 bytes for v0, 26 for v1) is needed to
    construct it; :meth:`ensure_valid`, :meth:`records` and ``base_offset`` of a compressed
    wrapper need the whole entry (``size_in_bytes`` bytes from ``pos``). ``buf`` is kept by
    reference, not copied.

    Raises InvalidRecordError if the magic is not 0 or 1, CorruptRecordError if the header is
    cut short or the declared size is below the message overhead (14 bytes for v0, 22 for v1).
    """

    __slots__ = (
        "_buf", "_pos", "offset", "message_size", "size_in_bytes", "crc", "magic",
        "attributes", "timestamp", "_records", "_crcs",
    )

    # Fields v0/v1 do not have, as Kafka reports them.
    partition_leader_epoch = -1
    producer_id = -1
    producer_epoch = -1
    base_sequence = -1
    last_sequence = -1
    is_transactional = False
    is_control_batch = False
    has_delete_horizon = False

    def __init__(self, buf, pos: int = 0) -> None:
        available = len(buf) - pos
        if available <= MAGIC_OFFSET:
            raise CorruptRecordError(
                f"legacy message at position {pos} is cut short: {max(available, 0)} bytes")
        magic = buf[pos + MAGIC_OFFSET]
        if magic == 0:
            header, overhead = _HEADER_V0, RECORD_OVERHEAD_V0
        elif magic == 1:
            header, overhead = _HEADER_V1, RECORD_OVERHEAD_V1
        else:
            raise InvalidRecordError(
                f"legacy message at position {pos} has magic {magic}; only 0 and 1 are legacy")
        if available < header.size:
            raise CorruptRecordError(
                f"legacy message header at position {pos} needs {header.size} bytes, "
                f"only {available} available")
        fields = header.unpack_from(buf, pos)
        self.offset, self.message_size, self.crc, self.magic = fields[:4]
        if self.message_size < overhead:
            raise CorruptRecordError(
                f"Record is corrupt (the size {self.message_size} of the message at offset "
                f"{self.offset} is smaller than the magic v{magic} overhead {overhead})")
        self.attributes = fields[4] & 0xFF
        self.timestamp = fields[5] if magic else NO_TIMESTAMP
        self.size_in_bytes = self.message_size + LOG_OVERHEAD
        self._buf = buf
        self._pos = pos
        self._records: list[Record] | None = None
        self._crcs: list[int] = [self.crc]  # a wrapper's: its inner messages', once read

    # -- header fields --------------------------------------------------------------------

    @property
    def last_offset(self) -> int:
        """The entry's offset: for a compressed wrapper, the offset of its last inner record."""
        return self.offset

    @property
    def next_offset(self) -> int:
        return self.offset + 1

    @property
    def base_offset(self) -> int:
        """The first record's offset. For a compressed wrapper it is only known after
        decompression (``AbstractLegacyRecordBatch.baseOffset``): errors as :meth:`records`."""
        if not self.attributes & COMPRESSION_CODEC_MASK:
            return self.offset
        return self.records()[0].offset

    @property
    def max_timestamp(self) -> int:
        """The entry's timestamp (epoch ms; -1 for v0): for a wrapper the largest inner
        timestamp or the log-append time (``AbstractLegacyRecordBatch.maxTimestamp``)."""
        return self.timestamp

    @property
    def compression_type(self) -> CompressionType:
        """Codec of a wrapper's value (NONE for a plain message). Raises InvalidRecordError
        for ids 5-7."""
        return CompressionType.for_id(self.attributes & COMPRESSION_CODEC_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        """NO_TIMESTAMP_TYPE for v0; CREATE_TIME or LOG_APPEND_TIME (bit 3) for v1."""
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & TIMESTAMP_TYPE_MASK:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def records_count(self) -> int:
        """Records in the entry: 1, or the number of inner records (decompresses)."""
        return len(self.records())

    def __repr__(self) -> str:
        return (
            f"LegacyRecordBatch(offset={self.offset}, magic={self.magic}, "
            f"size={self.size_in_bytes}, codec={self.attributes & COMPRESSION_CODEC_MASK}, "
            f"attributes={self.attributes:#04x}, timestamp={self.timestamp})"
        )

    # -- whole-entry operations -----------------------------------------------------------

    def _message(self) -> memoryview:
        """Bytes [12, size) of the entry: crc, magic, attributes, ..., value."""
        self._check_complete(f"legacy message at offset {self.offset}")
        start = self._pos + LOG_OVERHEAD
        return memoryview(self._buf)[start:start + self.message_size]

    def ensure_valid(self) -> None:
        """Check the size and the CRC-32 over [magic, end) (``LegacyRecord.ensureValid``).

        Needs the whole entry in ``buf``. Raises CorruptRecordError (with the stored and
        computed CRC on a mismatch). Inner records of a wrapper are checked by :meth:`records`.
        """
        computed = zlib.crc32(self._message()[4:])
        if computed != self.crc:
            raise CorruptRecordError(
                f"Record is corrupt (stored crc = {self.crc}, computed crc = {computed}) "
                f"in the magic v{self.magic} message at offset {self.offset}")

    def records(self) -> list[Record]:
        """The entry's records: the message itself, or a wrapper's inner records with absolute
        offsets and the wrapper's timestamp type (``AbstractLegacyRecordBatch.iterator``).
        Records have no headers and sequence -1.

        Does not check the entry's CRC (see :meth:`ensure_valid`) but does check each inner
        record's, as a consumer with ``check.crcs`` does. Raises CorruptRecordError for a
        truncated entry, a key/value running past its message, an inner CRC mismatch or a
        corrupt compressed stream; InvalidRecordError for a wrapper that is zstd, has an
        unknown codec, a null value, no inner records, a compressed or non-legacy inner
        record, or (v1) an offset below its last relative inner offset.
        """
        if self._records is None:
            message = self._message()
            if self.attributes & COMPRESSION_CODEC_MASK:
                self._records = self._inner_records(message)
            else:
                key, value = _key_and_value(message, self.magic, self.offset)
                self._records = [Record(self.offset, self.timestamp, self.timestamp_type,
                                        key, value, _NO_HEADERS, -1)]
        return self._records

    def record_crcs(self) -> list[int]:
        """The stored CRC of each record (of the message itself, or of each inner message of a
        wrapper, as kafka-dump-log prints them). Errors as :meth:`records`."""
        self.records()
        return self._crcs

    def record_at(self, offset: int) -> Record | None:
        """The record at ``offset``, or None when the entry has none there. Errors as
        :meth:`records`."""
        if offset > self.offset:
            return None
        records = self.records()
        i = bisect.bisect_left(records, offset, key=_offset_of)
        return records[i] if i < len(records) and records[i].offset == offset else None

    def first_record_from_time(self, timestamp: int, min_offset: int) -> Record | None:
        """The first record with timestamp >= ``timestamp`` (epoch ms) and offset >=
        ``min_offset``, or None (``FileRecords.searchForTimestamp``'s inner loop). v0 records
        have no timestamp and never qualify for a target >= 0."""
        if self.timestamp < timestamp:
            return None
        for record in self.records():
            if record.timestamp >= timestamp and record.offset >= min_offset:
                return record
        return None

    def _inner_records(self, message: memoryview) -> list[Record]:
        codec = self.attributes & COMPRESSION_CODEC_MASK
        if codec == CompressionType.ZSTD:
            raise InvalidRecordError(
                f"zstd is not allowed in the magic v{self.magic} wrapper at offset {self.offset}")
        codec = CompressionType.for_id(codec)
        _, compressed = _key_and_value(message, self.magic, self.offset)
        if compressed is None:
            raise InvalidRecordError(
                f"Found invalid compressed record set with null value (magic = {self.magic}) "
                f"at offset {self.offset}")
        entries = _inner_entries(decompress(codec, compressed, magic=self.magic), self.offset)
        if self.magic == 0:
            base = 0  # v0 inner offsets are absolute
        elif self.offset == 0:
            base = 0  # some old librdkafka produce data: relative offsets taken as they are
        else:
            last_inner = entries[-1][0]
            if self.offset < last_inner:
                raise InvalidRecordError(
                    f"Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                    f"'{self.offset}' is less than the last inner message offset "
                    f"'{last_inner}' and it is not zero.")
            base = self.offset - last_inner
        # Inner v1 records take the wrapper's timestamp type, and its timestamp when that is
        # LogAppendTime (LegacyRecord with wrapperRecordTimestamp/-Type).
        wrapper_type = self.timestamp_type
        append_time = self.timestamp if wrapper_type == TimestampType.LOG_APPEND_TIME else None
        records = []
        self._crcs = [entry[-1] for entry in entries]
        for offset, magic, timestamp, key, value, _ in entries:
            if magic == 0:
                timestamp, timestamp_type = NO_TIMESTAMP, TimestampType.NO_TIMESTAMP_TYPE
            else:
                timestamp_type = wrapper_type
                if append_time is not None:
                    timestamp = append_time
            records.append(Record(base + offset, timestamp, timestamp_type, key, value,
                                  _NO_HEADERS, -1))
        return records


def _offset_of(record: Record) -> int:
    return record.offset


def _key_and_value(message, magic: int, offset: int) -> tuple[bytes | None, bytes | None]:
    """Key and value of a message (bytes [12, size) of an entry: crc first). A negative length
    means null, as ``LegacyRecord``'s ``sliceDelimited``. Raises CorruptRecordError when either
    runs past the message."""
    pos = KEY_SIZE_OFFSET_V1 if magic else KEY_SIZE_OFFSET_V0
    end = len(message)
    fields = []
    for _ in range(2):
        if pos + 4 > end:
            raise CorruptRecordError(
                f"legacy message at offset {offset} ends inside its key or value length")
        (n,) = _INT32.unpack_from(message, pos)
        pos += 4
        if n < 0:
            fields.append(None)
            continue
        if pos + n > end:
            raise CorruptRecordError(
                f"legacy message at offset {offset} declares {n} bytes of key or value, "
                f"only {end - pos} left")
        fields.append(bytes(message[pos:pos + n]))
        pos += n
    # Bytes after the value are ignored, as Kafka's LegacyRecord does.
    return fields[0], fields[1]


def _inner_entries(data: bytes, wrapper_offset: int) -> list[tuple]:
    """(offset as stored, magic, timestamp, key, value, crc) of each inner entry of a wrapper's
    decompressed value (``DataLogInputStream``: a partial entry at the end ends the set).
    Raises CorruptRecordError for a size below 14 or an inner CRC mismatch,
    InvalidRecordError for an empty set, a magic other than 0/1 or a compressed inner record."""
    entries = []
    pos, end = 0, len(data)
    view = memoryview(data)
    while end - pos >= LOG_OVERHEAD:
        offset, size = _OFFSET_AND_SIZE.unpack_from(data, pos)
        if size < RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"Record size {size} is less than the minimum record overhead "
                f"({RECORD_OVERHEAD_V0}) in the wrapper at offset {wrapper_offset}")
        start = pos + LOG_OVERHEAD
        if start + size > end:
            break
        message = view[start:start + size]
        (crc,) = _UINT32.unpack_from(message)
        magic, attributes = message[4], message[5]
        if magic not in (0, 1):
            raise InvalidRecordError(
                f"inner message at offset {offset} of the wrapper at offset {wrapper_offset} "
                f"has magic {magic}")
        if attributes & COMPRESSION_CODEC_MASK:
            raise InvalidRecordError("Inner messages must not be compressed")
        if magic == 1 and size < RECORD_OVERHEAD_V1:
            raise CorruptRecordError(
                f"inner message at offset {offset} is {size} bytes, below the v1 overhead")
        computed = zlib.crc32(message[4:])
        if computed != crc:
            raise CorruptRecordError(
                f"Record is corrupt (stored crc = {crc}, computed crc = {computed}) in the inner "
                f"message at offset {offset} of the wrapper at offset {wrapper_offset}")
        timestamp = _INT64.unpack_from(message, 6)[0] if magic else NO_TIMESTAMP
        key, value = _key_and_value(message, magic, offset)
        entries.append((offset, magic, timestamp, key, value, crc))
        pos = start + size
    if not entries:
        raise InvalidRecordError(
            f"Found invalid compressed record set with no inner records at offset {wrapper_offset}")
    return entries
