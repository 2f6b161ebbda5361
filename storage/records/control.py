"""Control records: the transaction markers (COMMIT/ABORT) the broker writes to close a
transaction, and the KRaft control types (Kafka's ``ControlRecordType``,
``EndTransactionMarker``, ``MemoryRecords.withEndTransactionMarker``). Sans-IO.

A control batch has attribute bit 5 set (a transaction marker also bit 4) and carries one
record whose key is ``version int16 | type int16`` (4 bytes) and, for a marker, whose value is
``version int16 | coordinatorEpoch int32`` (6 bytes). Both versions are 0 when written; readers
accept any non-negative version and read the v0 fields, ignoring extra bytes.
"""

from __future__ import annotations

import enum
import struct
from typing import NamedTuple

from storage.errors import InvalidRecordError
from storage.records.batch import RecordBatch, build_batch
from storage.records.compression import CompressionType
from storage.records.record import TimestampType

__all__ = [
    "ControlRecordType",
    "ControlRecordKey",
    "EndTransactionMarker",
    "encode_control_record_key",
    "decode_control_record_key",
    "encode_end_txn_marker_value",
    "decode_end_txn_marker_value",
    "build_control_batch",
    "end_transaction_marker",
]

CURRENT_CONTROL_RECORD_KEY_VERSION = 0
CURRENT_END_TXN_MARKER_VERSION = 0
CONTROL_RECORD_KEY_SIZE = 4
END_TXN_MARKER_VALUE_SIZE = 6
NO_PARTITION_LEADER_EPOCH = -1

_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    """Control record types (``ControlRecordType``). Types 2-6 only appear in the KRaft
    metadata log; any other id reads as UNKNOWN, which readers must ignore."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def from_type_id(cls, type_id: int) -> ControlRecordType:
        """The type for a key's int16 type id; UNKNOWN for ids Kafka does not define."""
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN

    @property
    def is_transaction_marker(self) -> bool:
        return self in (ControlRecordType.ABORT, ControlRecordType.COMMIT)


class ControlRecordKey(NamedTuple):
    """A decoded control record key: its version and raw int16 type id (kept as read, so that
    a dump can print ``controlType: UNKNOWN(42)``); :attr:`type` is the ControlRecordType."""

    version: int
    type_id: int

    @property
    def type(self) -> ControlRecordType:
        return ControlRecordType.from_type_id(self.type_id)


class EndTransactionMarker(NamedTuple):
    """A transaction marker (``EndTransactionMarker``): ABORT or COMMIT, and the epoch of the
    transaction coordinator that wrote it."""

    control_type: ControlRecordType
    coordinator_epoch: int


def encode_control_record_key(control_type: ControlRecordType,
                              version: int = CURRENT_CONTROL_RECORD_KEY_VERSION) -> bytes:
    """The 4-byte key ``version int16 | type int16`` (``ControlRecordType.recordKey``).
    Raises ValueError for UNKNOWN (Kafka cannot write it) or a field out of int16 range."""
    control_type = ControlRecordType(control_type)
    if control_type is ControlRecordType.UNKNOWN:
        raise ValueError("Cannot serialize UNKNOWN control record type")
    try:
        return _KEY.pack(version, control_type)
    except struct.error as exc:
        raise ValueError(f"control record key field out of range: {exc}") from None


def decode_control_record_key(key: bytes | None) -> ControlRecordKey:
    """Parse a control record key (``ControlRecordType.parse``): any non-negative version is
    read as v0 and bytes past the first 4 are ignored.

    Raises InvalidRecordError for a null key, fewer than 4 bytes, or a negative version.
    """
    version, type_id = _unpack_versioned(_KEY, key, "end control record key", "control record")
    return ControlRecordKey(version, type_id)


def encode_end_txn_marker_value(coordinator_epoch: int,
                                version: int = CURRENT_END_TXN_MARKER_VERSION) -> bytes:
    """The 6-byte marker value ``version int16 | coordinatorEpoch int32``. Raises ValueError
    for a field out of range."""
    try:
        return _MARKER_VALUE.pack(version, coordinator_epoch)
    except struct.error as exc:
        raise ValueError(f"end transaction marker field out of range: {exc}") from None


def decode_end_txn_marker_value(value: bytes | None) -> tuple[int, int]:
    """(version, coordinator epoch) of a marker value (``EndTransactionMarker.deserializeValue``):
    any non-negative version is read as v0, extra bytes are ignored.

    Raises InvalidRecordError for a null value, fewer than 6 bytes, or a negative version.
    """
    return _unpack_versioned(_MARKER_VALUE, value, "end transaction marker",
                             "end transaction marker")


def _unpack_versioned(layout: struct.Struct, data: bytes | None, sized: str,
                      versioned: str) -> tuple[int, ...]:
    """Fields of ``data`` (an int16 version first), with Kafka's error messages for data
    that is null, too short, or of a negative version."""
    if data is None or len(data) < layout.size:
        size = "null" if data is None else len(data)
        raise InvalidRecordError(f"Invalid value size found for {sized}. Must have at least "
                                 f"{layout.size} bytes, but found only {size}")
    fields = layout.unpack_from(data)
    if fields[0] < 0:
        raise InvalidRecordError(f"Invalid version found for {versioned}: {fields[0]}. "
                                 "May indicate data corruption")
    return fields


def build_control_batch(
    base_offset: int,
    producer_id: int,
    producer_epoch: int,
    marker: ControlRecordType,
    coordinator_epoch: int = 0,
    *,
    timestamp_ms: int,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytes:
    """A transaction marker batch, byte for byte as ``MemoryRecords.withEndTransactionMarker``
    writes it: magic 2, uncompressed, CreateTime, transactional + control (attributes 0x30),
    baseSequence -1, one record at offset delta 0 with the marker key and value, no headers
    (78 bytes).

    ``marker`` is ABORT or COMMIT; ``timestamp_ms`` epoch ms, the caller's clock (the log's
    injected clock in the engine); ``partition_leader_epoch`` -1 unless a leader stamps it.
    Raises ValueError for another control type or a field out of range.
    """
    marker = ControlRecordType(marker)
    if not marker.is_transaction_marker:
        raise ValueError(f"Invalid control record type for end transaction marker: {marker.name}")
    return build_batch(
        base_offset,
        [encode_end_txn_marker_value(coordinator_epoch)],
        keys=[encode_control_record_key(marker)],
        timestamps=timestamp_ms,
        codec=CompressionType.NONE,
        timestamp_type=TimestampType.CREATE_TIME,
        partition_leader_epoch=partition_leader_epoch,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
    )


def end_transaction_marker(batch: RecordBatch) -> EndTransactionMarker:
    """The marker a control batch carries, from its first record
    (``EndTransactionMarker.deserialize``).

    Raises InvalidRecordError when ``batch`` is not a control batch, has no record (the cleaner
    may leave an empty one: callers that replay state check ``records_count`` first), is not a
    transaction marker (a KRaft control type or UNKNOWN) or its key/value is malformed;
    CorruptRecordError when its records cannot be decoded.
    """
    if not batch.is_control_batch:
        raise InvalidRecordError(
            f"batch at offset {batch.base_offset} is not a control batch")
    records = batch.records()
    if not records:
        raise InvalidRecordError(
            f"control batch at offset {batch.base_offset} has no record")
    record = records[0]
    control_type = decode_control_record_key(record.key).type
    if not control_type.is_transaction_marker:
        raise InvalidRecordError(
            f"Invalid control record type for end transaction marker: {control_type.name} "
            f"(control batch at offset {batch.base_offset})")
    return EndTransactionMarker(control_type, decode_end_txn_marker_value(record.value)[1])
