"""Damage in a partition's log: where its batches stop being readable, where intact batches
start again (``LogReader.readable_record_lists`` reads every record that can be read around
it).

A batch is intact when it is whole, its CRC-32C matches and its offsets follow the batches
before it (the checks of Kafka's ``LogSegment.recover``). After a damaged batch the next
intact one is found again (:func:`next_intact_batch`) by looking for a v2 header at every
byte position: magic 2, a size that fits the segment, offsets at or after the expected one
and within the segment's 32-bit reach, and a matching CRC, which random or shifted bytes pass
with odds of about 2**-32. Legacy v0/v1 entries after damage are not found again.

Positions are byte offsets in a ``.log``; offsets are Kafka offsets.
"""

from __future__ import annotations

import dataclasses
import re

from crc32c import crc32c

from storage.errors import InvalidRecordError
from storage.records.framing import (
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    Framed,
    base_offset_at,
    batch_crc_at,
    entry_size,
    is_v2_header,
    next_batch,
    records_count_at,
    stored_crc_at,
)
from storage.segment import SegmentScan

_INT32_MAX = 2**31 - 1
_RESYNC_BLOCK = 4 << 20
# magic 2 at byte 16, then the CRC, then the attributes' high byte (byte 21), always 0
_CANDIDATE = re.compile(rb"\x02(?=[\x00-\xff]{4}\x00)")


@dataclasses.dataclass(frozen=True)
class LogDamage:
    """Bytes of a partition's log that cannot be read: in segment file ``file`` (a ``.log``
    name) from byte ``position`` (None when not known), the first offset that cannot be read
    being ``offset``, for ``reason`` (the codec's words)."""

    file: str
    position: int | None
    offset: int
    reason: str
    last_offset: int | None = None  # the last offset lost, when readable offsets follow

    def __str__(self) -> str:
        where = self.file if self.position is None else f"{self.file}:{self.position}"
        lost = (f"offsets from {self.offset} cannot be read" if self.last_offset is None else
                f"offsets {self.offset}-{self.last_offset} cannot be read; those after them can")
        return (f"{where}: " if where else "") + f"{self.reason} ({lost})"


@dataclasses.dataclass(frozen=True)
class Cut:
    """Bytes [start, end) of a segment's ``.log`` that are not intact batches: offsets from
    ``first_offset`` are lost up to the intact batch at ``end`` (``resume_offset``, its base
    offset; None when nothing intact follows in the segment). ``records`` is what the
    headers in the cut claim (None when they cannot be parsed); ``torn`` when the cut is a
    batch running past the end of the file with nothing intact after it."""

    start: int
    end: int
    first_offset: int
    resume_offset: int | None
    records: int | None
    reason: str
    torn: bool

    @property
    def size(self) -> int:
        return self.end - self.start


@dataclasses.dataclass
class SegmentMap:
    """A segment's ``.log`` as intact runs ``(start, end)`` and the cuts between them;
    ``first_offset``/``last_offset`` of the intact batches (None when there are none) and
    ``next_offset``, the offset after the last of them (or the offset expected at start)."""

    intact: list[tuple[int, int]]
    cuts: list[Cut]
    first_offset: int | None
    last_offset: int | None
    next_offset: int


def readable_end(segment) -> tuple[int, int, str]:
    """(end of the intact batches from the start of ``segment``, the offset after them, what
    is wrong right after them): where a reader of the segment has to stop."""
    scan = SegmentScan(segment.base_offset, crc32c, segment.base_offset, stop_at_problem=True)
    segment.scan_whole_batches(scan)
    end = scan.valid_end
    return end, scan.next_offset, scan.problems[0][1] if scan.problems else _torn_reason(segment, end)


def map_segment(segment, next_offset: int) -> SegmentMap:
    """Every intact batch of ``segment`` (a LogSegment) and every cut between them, the
    batches having to start at or after ``next_offset`` (the end of the segment before).
    Reads the whole ``.log``; changes nothing."""
    intact, cuts = [], []
    first = last = None
    position, size = 0, segment.size
    while position < size:
        scan = SegmentScan(segment.base_offset, crc32c, next_offset, stop_at_problem=True)
        segment.scan_whole_batches(scan, position)
        if scan.overflow_offset >= 0:
            raise InvalidRecordError(f"{segment.log_path}: offset {scan.overflow_offset} does not "
                                     "fit the segment's 32-bit index (a legacy segment to split)")
        if scan.count:
            intact.append((position, scan.valid_end))
            first = _base_offset_at(segment, position) if first is None else first
            last, next_offset, position = scan.last_offset, scan.next_offset, scan.valid_end
        if position >= size:
            break
        cuts.append(_cut_at(segment, position, next_offset,
                            scan.problems[0][1] if scan.problems else None))
        position = cuts[-1].end
    return SegmentMap(intact, cuts, first, last, next_offset)


def _cut_at(segment, position: int, next_offset: int, problem: str | None) -> Cut:
    resume = next_intact_batch(segment, position + 1, next_offset)
    end = segment.size if resume is None else resume
    return Cut(position, end, next_offset,
               None if resume is None else _base_offset_at(segment, resume),
               header_records(segment, position, end),
               problem or _torn_reason(segment, position), problem is None and resume is None)


def next_intact_batch(segment, start: int, next_offset: int) -> int | None:
    """The position of the first intact v2 batch of ``segment`` at or after byte ``start``
    whose offsets start at or after ``next_offset``; None when there is none."""
    position, size = start, segment.size
    while position + RECORD_BATCH_OVERHEAD <= size:
        block = segment.read_at(position, min(_RESYNC_BLOCK, size - position))
        for match in _CANDIDATE.finditer(block, MAGIC_OFFSET):
            at = match.start() - MAGIC_OFFSET
            if at + RECORD_BATCH_OVERHEAD > len(block):
                break  # read again with the next block, which starts before it
            if _intact_at(segment, block, at, position + at, next_offset):
                return position + at
        if position + len(block) >= size:
            return None
        position += len(block) - RECORD_BATCH_OVERHEAD + 1  # headers across the boundary
    return None


def _intact_at(segment, block, at: int, position: int, next_offset: int) -> bool:
    framed, size = next_batch(block, at, at + segment.size - position)  # end: the segment's
    base_offset = base_offset_at(block, at)
    if framed is not Framed.WHOLE or \
            not 0 <= base_offset - max(next_offset, segment.base_offset) <= _INT32_MAX:
        return False
    if at + size > len(block):
        block, at = segment.read_at(position, size), 0
    return batch_crc_at(block, at, size) == stored_crc_at(block, at)


def header_records(segment, start: int, end: int) -> int | None:
    """The records the v2 batch headers in bytes [start, end) of ``segment`` claim, walking
    them by their sizes (the last may run past ``end``: a torn batch); None when a header there
    is not one."""
    position, records = start, 0
    while position < end:
        header = segment.read_at(position, RECORD_BATCH_OVERHEAD)
        if not is_v2_header(header) or (count := records_count_at(header)) < 0:
            return None
        records += count
        position += entry_size(header)
    return records


def _base_offset_at(segment, position: int) -> int:
    return base_offset_at(segment.read_at(position, LOG_OVERHEAD))


def _torn_reason(segment, position: int) -> str:
    left = segment.size - position
    if left < LOG_OVERHEAD:
        return f"{left} bytes after the last whole batch (a torn write)"
    size = entry_size(segment.read_at(position, LOG_OVERHEAD))
    return (f"a batch of {size} bytes starts here but only {left} bytes follow (a torn write, "
            "or a corrupt batch size)")
