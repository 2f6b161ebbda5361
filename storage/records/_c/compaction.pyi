"""The compiled twin of ``storage.offset_map`` (type stub of ``compaction.pyx``): Kafka's
``SkimpyOffsetMap``, the cleaner's key mapping over a segment's batches, and its record
filter (``MemoryRecords.filterTo``)."""

from collections.abc import Callable
from typing import Any

_Buffer = bytes | bytearray | memoryview

def md5_digest(data: _Buffer) -> bytes:
    """MD5 of ``data``, as ``hashlib.md5(data).digest()`` (for the tests)."""

class SkimpyOffsetMap:
    """Kafka's ``SkimpyOffsetMap``: key (by its MD5) -> offset in ``memory // 24`` slots, no
    deletes. Raises ValueError when ``memory`` holds no slot. Read-only attributes but
    ``latest_offset``."""

    slots: int
    size: int
    lookups: int
    probes: int
    latest_offset: int

    def __init__(self, memory: int) -> None: ...
    def put(self, key: _Buffer, offset: int) -> None:
        """Map ``key`` to ``offset``; ValueError when every slot is taken."""
    def get(self, key: _Buffer) -> int:
        """The offset mapped to ``key``, or -1."""
    def update_latest_offset(self, offset: int) -> None:
        """Set ``latest_offset`` (``updateLatestOffset``)."""
    def clear(self) -> None:
        """Forget every key."""
    @property
    def utilization(self) -> float:
        """size / slots."""

def map_section(m: SkimpyOffsetMap, section: Any, count: int, base_offset: int, start: int,
                max_entries: int) -> tuple[int, bool]:
    """Map the keys of one uncompressed records section from offset ``start``: ``(records
    read, the map is full)``."""

def map_run(m: SkimpyOffsetMap, buf: Any, position: int, start: int, max_entries: int,
            crc: Callable[[Any], int], decompress: Callable[[int, memoryview], Any]
            ) -> tuple[int, int, int]:
    """Map the keys of the whole v2 data batches of ``buf`` from ``position``: ``(bytes
    consumed, records read, stopped: 0 end, 1 batch for the caller, 2 full)``."""

class RecordFilter:
    """The cleaner's ``MemoryRecords.filterTo`` with ``Cleaner.cleanInto``'s filter over one
    buffer of batches at a time; the chunk's figures accumulate until :meth:`reset`.
    ``producer_last``: active producer id -> its last data offset. Read-only attributes."""

    messages_read: int
    messages_retained: int
    bytes_retained: int
    invalid_messages: int
    max_offset: int
    max_timestamp: int
    shallow_offset_of_max_timestamp: int

    def __init__(self, offset_map: SkimpyOffsetMap, now: int, delete_retention_ms: int,
                 upper_bound: int, producer_last: dict[int, int], crc: Callable[[Any], int],
                 decompress: Callable[[int, memoryview], Any],
                 compress: Callable[[int, bytes], bytes]) -> None: ...
    def reset(self) -> None:
        """Start a new chunk: zero its figures (``FilterResult``)."""
    def filter_batch(self, buf: Any, position: int, retain_empty: bool, discard_records: bool,
                     marker_for_empty_txn: bool, out: bytearray) -> int:
        """Filter the batch at ``buf[position:]`` (a control or transactional one) with the
        retention its caller decided, into ``out``; returns its size."""
    def run(self, buf: Any, position: int, out: bytearray, out_limit: int) -> tuple[int, int]:
        """Filter the whole v2 data batches of ``buf`` from ``position`` into ``out``:
        ``(bytes consumed, stopped: 0 end, 1 batch for the caller, 2 output full)``."""
