"""Record batch framing, once for the Python side (the compiled side's twin is
``storage/records/_c/frame.pxd``): the v2 header's fields by name (``DefaultRecordBatch``),
its attribute masks, and :func:`next_batch`, which says what the bytes at a position of a
``.log`` are, in the order Kafka's ``FileLogInputStream.nextBatch`` checks them (the size,
then the magic); :func:`next_batch_size`, the framing of batches written to us
(``ByteBufferLogInputStream.nextBatchSize``); the stored and computed CRC-32C. Legacy v0/v1
entries share the first 17 bytes (offset, size, CRC, magic). Pure functions over bytes:
nothing here reads a file. Every Python walker of batches reads them through these names.
"""

from __future__ import annotations

import enum
import struct

from crc32c import crc32c

from storage.errors import CorruptRecordError

# The v2 header (DefaultRecordBatch): baseOffset int64, batchLength int32, partitionLeaderEpoch
# int32, magic int8, crc uint32, attributes int16, lastOffsetDelta int32, baseTimestamp int64,
# maxTimestamp int64, producerId int64, producerEpoch int16, baseSequence int32,
# recordsCount int32.
HEADER_STRUCT = struct.Struct(">qiibIhiqqqhii")
RECORD_BATCH_OVERHEAD = HEADER_STRUCT.size  # 61: the records section starts here
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = 8  # batchLength / messageSize: the bytes after the log overhead
LOG_OVERHEAD = 12  # baseOffset + batchLength: the part batchLength does not count
PARTITION_LEADER_EPOCH_OFFSET = 12
MAGIC_OFFSET = 16
HEADER_SIZE_UP_TO_MAGIC = MAGIC_OFFSET + 1
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # CRC-32C covers the batch from here on
LAST_OFFSET_DELTA_OFFSET = 23
BASE_TIMESTAMP_OFFSET = 27
MAX_TIMESTAMP_OFFSET = 35
PRODUCER_ID_OFFSET = 43
PRODUCER_EPOCH_OFFSET = 51
BASE_SEQUENCE_OFFSET = 53
RECORDS_COUNT_OFFSET = 57
LEGACY_RECORD_OVERHEAD_V0 = 14  # the smallest batchLength / messageSize of any format
CURRENT_MAGIC = 2
assert RECORD_BATCH_OVERHEAD == 61

# Attribute bits (the low byte of the int16 at ATTRIBUTES_OFFSET).
COMPRESSION_CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG_MASK = 0x10
CONTROL_FLAG_MASK = 0x20
DELETE_HORIZON_FLAG_MASK = 0x40

_INT64 = struct.Struct(">q")
# a v2 header's baseOffset, batchLength, lastOffsetDelta and maxTimestamp
V2_OFFSETS_AND_MAX_TIMESTAMP = struct.Struct(">qi11xi8xq")
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
_LENGTH_AND_MAGIC = struct.Struct(">8xi4xB")  # batchLength at 8, magic at 16
assert _LENGTH_AND_MAGIC.size == HEADER_SIZE_UP_TO_MAGIC
_INT32_MAX = 2**31 - 1


class Framed(enum.IntEnum):
    """What :func:`next_batch` found (the compiled ``Framed``, value for value)."""

    WHOLE = 0      # a whole v2 batch
    PARTIAL = 1    # the bytes end inside the batch (or its first 17 bytes)
    LEGACY = 2     # a v0/v1 entry, whole or not: its reader's
    TOO_SMALL = 3  # a declared size below the smallest entry: these bytes are not batches
    BAD_MAGIC = 4  # a magic above 2
    SHORT_V2 = 5   # magic 2 but smaller than the v2 header


# (module globals: a walker's every step compares with them)
_WHOLE, _PARTIAL, _LEGACY = Framed.WHOLE, Framed.PARTIAL, Framed.LEGACY
_TOO_SMALL, _BAD_MAGIC, _SHORT_V2 = Framed.TOO_SMALL, Framed.BAD_MAGIC, Framed.SHORT_V2
_MIN_ENTRY_SIZE = LOG_OVERHEAD + LEGACY_RECORD_OVERHEAD_V0  # 26 bytes, log overhead included


def entry_size(buf, at: int = 0) -> int:
    """The size of the batch or legacy entry at ``buf[at:]``, log overhead included, from
    its length field (the caller has 12 bytes there)."""
    return LOG_OVERHEAD + _INT32.unpack_from(buf, at + LENGTH_OFFSET)[0]


def base_offset_at(buf, at: int = 0) -> int:
    """The base offset of the batch at ``buf[at:]`` (a legacy entry's: its own offset)."""
    return _INT64.unpack_from(buf, at)[0]


def records_count_at(buf, at: int = 0) -> int:
    """The recordsCount of the v2 batch header at ``buf[at:]``."""
    return _INT32.unpack_from(buf, at + RECORDS_COUNT_OFFSET)[0]


def last_offset_delta_at(buf, at: int = 0) -> int:
    """The lastOffsetDelta of the v2 batch header at ``buf[at:]``."""
    return _INT32.unpack_from(buf, at + LAST_OFFSET_DELTA_OFFSET)[0]


def next_batch(buf, pos: int = 0, end: int | None = None) -> tuple[Framed, int]:
    """What ``buf[pos:end]`` starts with, and its size (log overhead included; 0 while its
    length field is cut off).

    ``end`` (default ``len(buf)``) may lie past the end of ``buf`` when ``buf`` is a window of
    longer bytes (a block read from a file, ``end`` the file's end in the block's positions):
    only the 17 bytes at ``pos`` are read, and they have to be in ``buf`` then."""
    if end is None:
        end = len(buf)
    if end - pos < HEADER_SIZE_UP_TO_MAGIC:
        return _PARTIAL, 0
    length, magic = _LENGTH_AND_MAGIC.unpack_from(buf, pos)
    size = LOG_OVERHEAD + length
    if size < _MIN_ENTRY_SIZE:
        return _TOO_SMALL, size
    if magic < CURRENT_MAGIC:
        return _LEGACY, size
    if magic > CURRENT_MAGIC:
        return _BAD_MAGIC, size
    if size < RECORD_BATCH_OVERHEAD:
        return _SHORT_V2, size
    if size > end - pos:
        return _PARTIAL, size
    return _WHOLE, size


def is_v2_header(buf, at: int = 0) -> bool:
    """Whether ``buf[at:]`` starts with a whole v2 batch header: its 61 bytes, magic 2 and a
    size the header fits in. The batch itself may run past ``buf`` (:func:`next_batch` says
    PARTIAL then)."""
    return (len(buf) - at >= RECORD_BATCH_OVERHEAD
            and next_batch(buf, at)[0] in (_WHOLE, _PARTIAL))


def next_batch_size(buf, pos: int = 0, max_size: int = _INT32_MAX) -> int | None:
    """The size (log overhead included) of the batch or legacy entry at ``buf[pos:]``, from
    its 12-byte log overhead alone, as Kafka's ``ByteBufferLogInputStream.nextBatchSize``
    frames the batches written to it (a produce request's records): None while fewer than 17
    bytes are there (the size is checked as soon as 12 are). Whether the entry is all there
    is the caller's question. Raises CorruptRecordError for a declared batchLength below the
    smallest entry (14) or above ``max_size``."""
    available = len(buf) - pos
    if available < LOG_OVERHEAD:
        return None
    length = _INT32.unpack_from(buf, pos + LENGTH_OFFSET)[0]
    if length < LEGACY_RECORD_OVERHEAD_V0:
        raise CorruptRecordError(f"Record size {length} is less than the minimum record overhead "
                                 f"({LEGACY_RECORD_OVERHEAD_V0})")
    if length > max_size:
        raise CorruptRecordError(f"Record size {length} exceeds the largest allowable message "
                                 f"size ({max_size}).")
    if available < HEADER_SIZE_UP_TO_MAGIC:
        return None
    return LOG_OVERHEAD + length


def stored_crc_at(buf, at: int = 0) -> int:
    """The CRC-32C stored in the v2 batch header at ``buf[at:]`` (``DefaultRecordBatch.checksum``;
    a legacy entry's CRC is elsewhere)."""
    return _UINT32.unpack_from(buf, at + CRC_OFFSET)[0]


def batch_crc_at(buf, at: int = 0, size: int | None = None) -> int:
    """The CRC-32C of the v2 batch at ``buf[at:]`` computed over its bytes [21, ``size``)
    (``DefaultRecordBatch.computeChecksum``); ``size`` defaults to the batch's own
    (:func:`entry_size`), all of it in ``buf``. A batch is intact when this is
    :func:`stored_crc_at`."""
    if size is None:
        size = entry_size(buf, at)
    return crc32c(memoryview(buf)[at + ATTRIBUTES_OFFSET:at + size])
