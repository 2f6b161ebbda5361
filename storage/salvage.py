"""Salvage a partition's log: take out only the bytes that are not intact batches, keep every
intact batch around them (what ``kfs verify --repair`` does before recovering).

Kafka's recovery cuts a segment at its first bad batch and deletes every segment after it: a
follower fetches the rest again from the leader. Without a replica that loses every intact
batch after one flipped bit, so salvage instead cuts each run of bytes that are not intact
batches (see ``storage.damage``: a batch failing its CRC or size checks, offsets going back,
a torn tail) into a quarantine (``storage.quarantine``) and keeps the rest. The log then has
an offset gap where the cut batches were, which Kafka's format allows (compaction leaves gaps;
a consumer fetches on from the next batch; a segment's base offset may lie below its first
batch): offsets still only increase, so no offset is ever reused or reordered. A segment left
without an intact batch is moved to the quarantine whole (unless it is the last one, which
stays, empty, to keep the log end offset); a segment whose base offset lies below the end of
the one before is renamed to its first kept offset. A segment that was empty already (no byte
to cut, as compaction can leave one) stays where it is, as Kafka's recovery keeps it:
``LogSegment.recover`` truncates nothing there, and ``LogLoader.recoverLog`` deletes segments
only after one that lost bytes.

Salvage rewrites only ``.log`` files (through Kafka's ``.cleaned`` suffix, so a crash half-way
leaves the old file, and a loader deletes the half-written one); the indexes, ``.txnindex``
and producer snapshots are then rebuilt by a recovery (``LogManager(force_recovery=True)``).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from storage import disk_calls
from storage.checkpoint import fsync_directory
from storage.config import LogConfig
from storage.damage import Cut, map_segment
from storage.log_files import (
    CLEANED_SUFFIX,
    log_file,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from storage.log_loader import segment_bases
from storage.quarantine import Quarantine
from storage.segment import LogSegment

_COPY_BLOCK = 1 << 20


@dataclasses.dataclass
class SegmentPlan:
    """What salvage does to one segment's ``.log`` (``path``, ``size`` bytes): cut ``cuts``,
    keep the ``intact`` byte runs (offsets ``first_offset``..``last_offset``); ``new_base``
    when it is renamed; ``remove`` when it has bytes, none of them intact, and goes whole (an
    empty segment is never removed: it has nothing to cut)."""

    path: Path
    base: int
    size: int
    cuts: list[Cut]
    intact: list[tuple[int, int]]
    first_offset: int | None
    last_offset: int | None
    new_base: int | None = None
    remove: bool = False

    @property
    def changed(self) -> bool:
        return bool(self.cuts) or self.new_base is not None

    @property
    def kept_bytes(self) -> int:
        return sum(end - start for start, end in self.intact)


@dataclasses.dataclass
class PartitionPlan:
    """Salvage of one partition directory: its segments in base-offset order."""

    directory: Path
    segments: list[SegmentPlan]

    @property
    def changed(self) -> bool:
        return any(s.changed for s in self.segments)

    def lost_offsets(self, segment: SegmentPlan, cut: Cut) -> tuple[int, int | None]:
        """(first, last) offsets lost with ``cut``: up to the next intact batch, in this
        segment or a later one; last None when nothing intact follows in the log."""
        if cut.resume_offset is not None:
            return cut.first_offset, cut.resume_offset - 1
        later = self.segments[self.segments.index(segment) + 1:]
        nxt = next((s.first_offset for s in later if s.first_offset is not None), None)
        return cut.first_offset, None if nxt is None else nxt - 1

    def kept_after(self, segment: SegmentPlan, cut: Cut) -> tuple[int, int] | None:
        """(first, last) offsets of the intact batches kept after ``cut``; None if none."""
        at = self.segments.index(segment)
        after = [s for s in self.segments[at:] if s.first_offset is not None]
        last = next((s.last_offset for s in reversed(after)), None)
        if cut.resume_offset is not None:
            return cut.resume_offset, last
        later = [s for s in after if s is not segment]
        return (later[0].first_offset, last) if later else None


def plan_partition(directory: Path) -> PartitionPlan:
    """What salvage would do to ``directory`` (read-only: reads every ``.log`` whole).
    Raises InvalidRecordError for a legacy segment whose offsets overflow its index (Kafka
    splits those), OSError."""
    plans, next_offset = [], None
    bases = segment_bases(directory)
    for i, base in enumerate(bases):
        expected = base if next_offset is None else max(next_offset, base)
        segment = LogSegment(directory, base, LogConfig(), writable=False)
        try:
            found = map_segment(segment, expected)
            size = segment.size
        finally:
            segment.close()
        plan = SegmentPlan(segment.log_path, base, size, found.cuts, found.intact,
                           found.first_offset, found.last_offset)
        overlaps = next_offset is not None and base < next_offset
        if found.first_offset is None:
            plan.remove = bool(found.cuts) and (i < len(bases) - 1 or overlaps)
        elif overlaps:
            plan.new_base = found.first_offset
        if found.first_offset is not None:
            next_offset = found.next_offset
        plans.append(plan)
    return PartitionPlan(directory, plans)


def salvage_partition(plan: PartitionPlan, quarantine: Quarantine) -> list[str]:
    """Do ``plan`` (the directory's lock held): every cut kept in ``quarantine`` first, then
    the ``.log`` rewritten with its intact runs (or moved whole, or renamed). Returns one line
    per segment changed. Raises QuarantineError, OSError (the segment being worked on is left
    as it was)."""
    done = []
    for segment in plan.segments:
        if not segment.changed:
            continue
        name = f"{plan.directory.name}/{segment.path.name}"
        if segment.remove:
            # (a segment removed has cuts: an empty one is never removed)
            quarantine.keep_file(segment.path, reason="; ".join(c.reason for c in segment.cuts),
                                 first_offset=segment.cuts[0].first_offset,
                                 records=_records(segment.cuts))
            _remove_derived(plan.directory, segment.base)
            done.append(f"{name}: moved to the quarantine whole ({segment.size} bytes, no intact "
                        "batch in it)")
            continue
        for cut in segment.cuts:
            first, last = plan.lost_offsets(segment, cut)
            quarantine.keep_bytes(segment.path, cut.start, cut.end, reason=cut.reason,
                                  first_offset=first, last_offset=last, records=cut.records)
        target = _rewrite(plan.directory, segment)
        done.append(f"{name}: {sum(c.size for c in segment.cuts)} bytes cut into the quarantine, "
                    f"{segment.kept_bytes} bytes of intact batches kept"
                    + (f", renamed {target.name}" if target != segment.path else ""))
    return done


def _rewrite(directory: Path, segment: SegmentPlan) -> Path:
    """Write the intact runs of ``segment`` to ``<target>.log.cleaned``, make it durable and
    rename it over the target (the segment's own name, or its new base offset's)."""
    base = segment.base if segment.new_base is None else segment.new_base
    target = log_file(directory, base)
    if target != segment.path and target.exists():  # (another segment has that name)
        target, base = segment.path, segment.base
    cleaned = target.with_name(target.name + CLEANED_SUFFIX)
    try:
        with open(segment.path, "rb") as src, open(cleaned, "wb", buffering=0) as dst:
            for start, end in segment.intact:
                src.seek(start)
                left = end - start
                while left > 0:
                    chunk = src.read(min(_COPY_BLOCK, left))
                    if not chunk:
                        raise OSError(f"{segment.path} ends before byte {end}")
                    disk_calls.write_all(dst.fileno(), chunk)
                    left -= len(chunk)
            disk_calls.fsync(dst.fileno())
        disk_calls.replace(cleaned, target)
    except BaseException:
        cleaned.unlink(missing_ok=True)
        raise
    if target != segment.path:
        segment.path.unlink()
    _remove_derived(directory, segment.base)  # rebuilt by the recovery that follows
    fsync_directory(directory)
    return target


def _remove_derived(directory: Path, base: int) -> None:
    """Remove the index files of the segment at ``base``: they are derived from its .log."""
    for index_file in (offset_index_file, time_index_file, transaction_index_file):
        index_file(directory, base).unlink(missing_ok=True)


def _records(cuts: list[Cut]) -> int | None:
    counts = [c.records for c in cuts]
    return None if None in counts else sum(counts)
