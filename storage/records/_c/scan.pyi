"""The compiled twin of ``storage.segment``'s scans (type stub of ``scan.pyx``): batch
boundaries, the producer batches a replay needs, and ``SegmentScan``, the checks of recovery and
verify. Positions are byte offsets in a ``.log``, timestamps epoch ms."""

from collections.abc import Callable
from typing import Any

_Buffer = bytes | bytearray | memoryview

def batch_ends(buf: _Buffer, pos: int = 0, end: int = -1) -> tuple[list[int], int]:
    """``(positions, stop)``: where each whole batch of ``buf[pos:end]`` (any magic) starts, by
    their batchLength fields alone, and where the walk stopped (``end``, a partial batch, or a
    size below the smallest entry). Raises ValueError for a negative ``pos``."""

def append_index_entries(batches: list[_Buffer], base_offset: int, position: int,
                         since_entry: int, interval: int, max_timestamp: int,
                         max_timestamp_offset: int, last_time_entry: int
                         ) -> tuple[bytes, bytes, int, int, int]:
    """The offset- and time-index entries (as on disk) an append of ``batches`` from .log
    ``position`` makes, batch by batch as Kafka 4.1's ``LogSegment.append``, and the state after
    it: ``(offset entries, time entries, bytes since the last entry, largest timestamp so far,
    its offset)``. Raises ValueError when a buffer does not hold whole batches."""

def largest_lower_bound(entries: _Buffer, count: int, entry_size: int, key_at: int,
                        key_size: int, target: int) -> int:
    """The last of the first ``count`` index entries (``entry_size`` bytes each) whose
    big-endian key of ``key_size`` bytes (4 or 8) at ``key_at`` is <= ``target``, or -1
    (``AbstractIndex.largestLowerBoundSlotFor``). Raises ValueError when they do not fit."""

def producer_batches(buf: Any) -> tuple[list[int], int]:
    """``(positions, consumed)``: the v2 batches at the front of ``buf`` that carry a producer id
    or are control batches (``UnifiedLog.loadProducersFromRecords``' only ones), and the bytes of
    whole batches walked (legacy entries walked over)."""

class SegmentScan:
    """One pass over a segment's ``.log``, a block at a time, with the checks of Kafka's
    ``LogSegment.recover`` and ``kafka-dump-log`` (size, magic, CRC-32C with ``crc``, codec,
    record count, offsets never going back and within the index's reach of ``base``), keeping
    each batch's position, last offset, max timestamp and leader epoch for the index checks.
    ``problems``: ``(position, message)``; ``stop_at_problem`` (recovery) stops at the first.
    Every attribute but ``problems`` is read-only."""

    count: int
    base: int
    next_offset: int
    valid_end: int
    at_legacy: bool
    broken: bool
    stop_at_problem: bool
    overflow_offset: int
    problems: list[tuple[int, str]]
    producer_positions: list[int]

    def __init__(self, base: int, crc: Callable[[Any], int], next_offset: int = -1,
                 stop_at_problem: bool = False) -> None: ...
    @property
    def last_offset(self) -> int | None:
        """The last offset of the last batch, or None."""
    def max_timestamp_and_offset(self) -> tuple[int, int]:
        """(largest max timestamp, last offset of the first batch carrying it), or (-1, -1)."""
    def add(self, position: int, size: int, first_offset: int, last_offset: int,
            max_timestamp: int, epoch: int = -1) -> None:
        """Record a whole batch checked elsewhere (a legacy entry), its offsets checked."""
    def scan(self, buf: Any, position: int, end: int = -1) -> int:
        """Check the whole batches of ``buf`` (the ``.log`` from ``position``) up to ``end``;
        returns the bytes consumed (up to a partial batch, a legacy entry, bytes that are not a
        batch, or with ``stop_at_problem`` the first batch with a problem)."""
    def check_offset_index(self, entries: Any, readable: bool) -> list[tuple[int, str]]:
        """``(slot, message)`` for each bad offset-index entry (8 bytes: relative offset,
        position, big-endian)."""
    def check_time_index(self, entries: Any, readable: bool) -> list[tuple[int, str]]:
        """``(slot, message)`` for each bad time-index entry (12 bytes: timestamp, relative
        offset)."""
    def index_entries(self, interval: int) -> tuple[bytes, bytes]:
        """(offset-index bytes, time-index bytes) recovery writes for the batches scanned, an
        entry every ``interval`` bytes (``LogSegment.recover``)."""
    def epoch_starts(self) -> list[tuple[int, int]]:
        """(leader epoch, base offset) where the batches' partitionLeaderEpoch rises."""

class PendingRead:
    """``buffer`` (writable) filled from the descriptor ``fd`` at ``position`` (bytes) by a
    thread of its own, without the GIL; ``fd`` must stay open until :meth:`wait`. A read never
    waited for is waited for when dropped."""
    def __init__(self, fd: int, buffer: _Buffer, position: int) -> None: ...
    def wait(self) -> int:
        """The bytes read (short only at the end of the file); raises OSError as ``pread``
        failed."""
