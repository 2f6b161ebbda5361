"""The key and value of control records, the records of control batches (Kafka's
``ControlRecordType`` and ``EndTransactionMarker``), sans-IO.

Key (4 bytes): int16 version (0) + int16 type. End-transaction marker value (6 bytes): int16
version (0) + int32 coordinatorEpoch. Longer keys and values are read as version 0, as Kafka does.
"""

from __future__ import annotations

import enum
import struct
import typing

from storage.errors import InvalidRecordError
from storage.records.record import Record

__all__ = ["ControlRecordType", "EndTransactionMarker", "parse_type_id"]

_KEY = struct.Struct(">hh")
_END_TXN_VALUE = struct.Struct(">hi")


class ControlRecordType(enum.IntEnum):
    """What a control record says (Kafka's ``ControlRecordType``); types 2-6 only appear in
    KRaft's metadata log and snapshots."""

    UNKNOWN = -1
    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def for_id(cls, type_id: int) -> "ControlRecordType":
        """The type with id ``type_id``; UNKNOWN for any other id (``fromTypeId``), which
        readers must ignore."""
        try:
            return cls(type_id)
        except ValueError:
            return cls.UNKNOWN

    @classmethod
    def parse(cls, key: bytes | None) -> "ControlRecordType":
        """The type named by a control record key (``ControlRecordType.parse``).
        Raises InvalidRecordError as :func:`parse_type_id`."""
        return cls.for_id(parse_type_id(key))


def parse_type_id(key: bytes | None) -> int:
    """The raw type id of a control record key (``ControlRecordType.parseTypeId``).
    Raises InvalidRecordError for a key shorter than 4 bytes or a negative version."""
    if key is None or len(key) < _KEY.size:
        raise InvalidRecordError(
            "Invalid value size found for end control record key. Must have at least "
            f"{_KEY.size} bytes, but found only {0 if key is None else len(key)}")
    version, type_id = _KEY.unpack_from(key)
    if version < 0:
        raise InvalidRecordError(f"Invalid version found for control record: {version}")
    return type_id


class EndTransactionMarker(typing.NamedTuple):
    """The COMMIT or ABORT marker that ends a transaction (Kafka's ``EndTransactionMarker``)."""

    control_type: ControlRecordType
    coordinator_epoch: int

    @classmethod
    def deserialize(cls, record: Record) -> "EndTransactionMarker":
        """The marker of a control record (``EndTransactionMarker.deserialize``). Raises
        InvalidRecordError when the key is not ABORT/COMMIT, or the value is shorter than 6
        bytes or has a negative version."""
        control_type = ControlRecordType.parse(record.key)
        if control_type not in (ControlRecordType.ABORT, ControlRecordType.COMMIT):
            raise InvalidRecordError(
                f"Invalid control record type for end transaction marker: {control_type.name}")
        value = record.value
        if value is None or len(value) < _END_TXN_VALUE.size:
            raise InvalidRecordError(
                "Invalid value size found for end transaction marker. Must have at least "
                f"{_END_TXN_VALUE.size} bytes, but found only {0 if value is None else len(value)}")
        version, coordinator_epoch = _END_TXN_VALUE.unpack_from(value)
        if version < 0:
            raise InvalidRecordError(f"Invalid version found for end transaction marker: {version}")
        return cls(control_type, coordinator_epoch)
