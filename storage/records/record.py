"""One decoded record and its timestamp type (Kafka's ``DefaultRecord``, ``TimestampType``)."""

from __future__ import annotations

import enum
import typing

from storage.errors import CorruptRecordError

__all__ = ["BatchSpan", "TimestampType", "Record"]


class TimestampType(enum.IntEnum):
    """What a batch's timestamps mean (Kafka's ``TimestampType``); bit 3 of the attributes."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1

    @property
    def kafka_name(self) -> str:
        """Kafka's display name: 'NoTimestampType', 'CreateTime' or 'LogAppendTime'."""
        return _KAFKA_NAMES[self]


_KAFKA_NAMES = {
    TimestampType.NO_TIMESTAMP_TYPE: "NoTimestampType",
    TimestampType.CREATE_TIME: "CreateTime",
    TimestampType.LOG_APPEND_TIME: "LogAppendTime",
}


class Record(typing.NamedTuple):
    """One record of a batch, as Kafka's ``DefaultRecord`` reports it.

    ``timestamp`` is epoch milliseconds (-1 = none); in a LogAppendTime batch it is the batch's
    maxTimestamp whatever the stored delta. ``timestamp_type`` is a ``TimestampType`` value.
    ``headers`` is a tuple of ``(key: str, value: bytes | None)`` pairs. ``sequence`` is the
    producer sequence (baseSequence + offset delta, wrapping at 2**31), or -1 without one.
    """

    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    sequence: int


class BatchSpan:
    """What a parsed batch of either format (v2 ``RecordBatch``, v0/v1 ``LegacyRecordBatch``)
    knows of the buffer it came from: ``_buf``, its start ``_pos`` and ``size_in_bytes``."""

    __slots__ = ()

    @property
    def position(self) -> int:
        """Where the batch starts in the buffer it was parsed from."""
        return self._pos

    @property
    def is_complete(self) -> bool:
        """True when the buffer holds the whole batch, not just its header."""
        return len(self._buf) - self._pos >= self.size_in_bytes

    def _check_complete(self, what: str) -> None:
        """Raise CorruptRecordError when the buffer ends inside the batch."""
        available = len(self._buf) - self._pos
        if available < self.size_in_bytes:
            raise CorruptRecordError(f"{what} is truncated: {self.size_in_bytes} bytes "
                                     f"declared, {available} available")
