"""The compiled twin of ``storage.records.batch`` (type stub of ``records.pyx``): records
sections decoded and encoded, batches sealed (header and CRC-32C). Offsets are Kafka offsets,
timestamps epoch ms; ``crc`` is the ``crc32c`` package's function."""

from collections.abc import Callable, Sequence
from typing import Any

from storage.records.record import Record

_Buffer = bytes | bytearray | memoryview
# An Arrow binary array as (validity, offsets, data, offset): buffers and the array's offset
_BinaryArray = tuple[Any, Any, Any, int]

def decode_records(data: _Buffer, count: int, base_offset: int, base_timestamp: int,
                   append_time: int, base_sequence: int) -> tuple[Record, ...]:
    """Every record of an uncompressed records section, in order (``append_time``: a
    LogAppendTime batch's maxTimestamp, else -1). Raises CorruptRecordError."""

def record_at(data: _Buffer, count: int, base_offset: int, base_timestamp: int,
              append_time: int, base_sequence: int, offset: int) -> Record | None:
    """The record at ``offset`` (the others skimmed), or None for a gap. Raises
    CorruptRecordError."""

def first_record_from_time(data: _Buffer, count: int, base_offset: int, base_timestamp: int,
                           append_time: int, base_sequence: int, timestamp: int,
                           min_offset: int) -> Record | None:
    """The first record with timestamp >= ``timestamp`` and offset >= ``min_offset``, or None
    (``FileRecords.searchForTimestamp``'s inner loop). Raises CorruptRecordError."""

def encode_records(values: Sequence[_Buffer | None], keys: Sequence[_Buffer | None] | None = None,
                   timestamp_deltas: int | Sequence[int] = 0,
                   headers: Sequence[Sequence[tuple[str, bytes | None]] | None] | None = None,
                   offset_deltas: Sequence[int] | None = None) -> bytes:
    """The records section of a batch (``DefaultRecord.writeTo`` for each record). Raises
    TypeError for a header key that is not str, ValueError for a field out of range."""

def batch_room(room: int, first_body: int, cap: int = -1) -> int:
    """Records bytes a producer's batch takes: ``room``, or the upper bound of a larger first
    record (its body at deltas 0 and 18 bytes), within ``cap`` but never less than that
    record."""

def plan_cuts(values: Sequence[_Buffer | None], keys: Sequence[_Buffer | None] | None,
              room: int, cap: int = -1) -> list[tuple[int, int]]:
    """The [start, end) runs of records stamped at once, cut as Kafka's producer cuts them
    (``MemoryRecordsBuilder.hasRoomFor``) into batches of ``room`` bytes of records."""

def encode_lines(buf: _Buffer, pos: int, end: int, max_bytes: int, max_records: int,
                 separator: _Buffer | None = None, head: int = 0, cap: int = -1
                 ) -> tuple[bytes | None, int, int, int]:
    """Console-producer records of the ``\\n``-terminated lines of ``buf[pos:end]``, within
    ``max_bytes`` and ``max_records``: ``(records section, records, position after, largest
    record)``, or ``(None, -1, position, 0)`` when the first line lacks ``separator``."""

def seal(records: _Buffer, count: int, base_offset: int, base_timestamp: int,
         max_timestamp: int, last_offset_delta: int, attributes: int,
         partition_leader_epoch: int, producer_id: int, producer_epoch: int,
         base_sequence: int, crc: Callable[[Any], int]) -> bytes:
    """A v2 batch: the 61-byte header and CRC around ``records``. Raises OverflowError for a
    field out of range."""

def seal_in_place(buf: bytearray, position: int, count: int, base_offset: int,
                  base_timestamp: int, max_timestamp: int, attributes: int, producer_id: int,
                  producer_epoch: int, base_sequence: int, crc: Callable[[Any], int]) -> None:
    """Write the header and CRC of the batch filling ``buf[position:]`` (61 bytes left by
    :func:`encode_arrow` with ``head=61``). Raises ValueError without room or past 2 GiB."""

def encode_line_batches(buf: _Buffer, room: int, base_offset: int, timestamp: int,
                        log_append: bool, partition_leader_epoch: int, crc: Callable[[Any], int],
                        separator: _Buffer | None = None,
                        compress: Callable[[bytes], bytes] | None = None, codec: int = 0,
                        cap: int = -1
                        ) -> tuple[list[bytes], list[int], int] | tuple[None, None, int]:
    """Every line of ``buf`` as sealed v2 batches of at most ``room`` bytes of records:
    ``(batches, records of each, largest records section)``, or ``(None, None, line number)``
    for a keyed line without the separator."""

def encode_arrow(start: int, stop: int, values: _BinaryArray, keys: _BinaryArray | None,
                 headers: tuple[Any, Any, int, _BinaryArray, _BinaryArray] | None,
                 timestamps: tuple[Any, Any, int] | None, default_timestamp: int,
                 max_bytes: int, out: bytearray, head: int = 0, cap: int = -1
                 ) -> tuple[int, int, int]:
    """Records of Arrow columns, rows [``start``, ``stop``) within ``max_bytes``, appended to
    ``out``: ``(rows, first timestamp, max timestamp)``. Raises ValueError for a row out of
    range, a negative timestamp or a record over 2 GiB."""
