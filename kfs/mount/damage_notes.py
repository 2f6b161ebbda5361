"""What the mount does about a damaged partition (``Log.damage``, what recovery cut at the
mount, or a batch that is not intact): every other partition and every readable record is
served as usual, reads past the damage get EIO, listings give what can be read and then EIO,
the streams stop with EIO at it, the partition directory's ``user.kfs.damage`` attribute and
the mount's log say what is wrong, and a writable mount refuses appends to a partition whose
end could not be read (EIO) until ``kfs verify --repair``.

``user.kfs.damage`` does not wait for a read to trip over the damage: asking for it checks the
partition's batches not checked yet (:meth:`DamageNotes.unchecked_damage`: each ``.log`` read
once, then only what is appended), so it is there from the mount on.
"""

from __future__ import annotations

import logging
import re
import threading
import weakref
from typing import Any

import trio
from crc32c import crc32c

from storage.damage import LogDamage, map_segment
from storage.segment import SegmentScan
from storage.isolation import IsolationLevel
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.protocols import PartitionLog

log = logging.getLogger(__name__)

DAMAGE_XATTR = b"user.kfs.damage"
KFS_XATTR_PREFIX = b"user.kfs."
_READ_ERRORS = (CorruptRecordError, InvalidRecordError)
_OFFSET_NAMED = re.compile(r"\bat offset (\d+)\b")  # the codec's "Record batch at offset N"


def _covers(damage: LogDamage, offset: int | None) -> bool:
    """Whether ``offset`` is one of those ``damage`` costs."""
    return offset is not None and damage.offset <= offset and (
        damage.last_offset is None or offset <= damage.last_offset)


class DamageNotes:
    """The damage reads have found, per partition id: each new one is logged; the first is
    what the partition's ``user.kfs.damage`` tells."""

    def __init__(self) -> None:
        # pid -> texts in the order found: a description's LogDamage, a read's bare error's
        # offset (None: unknown)
        self._found: dict[int, dict[str, LogDamage | int | None]] = {}
        # LogSegment -> (bytes of its .log checked, the offset expected after them)
        self._checked: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._checking = threading.Lock()

    def unchecked_damage(self, plog: PartitionLog) -> list[LogDamage]:
        """The damage in the bytes of ``plog``'s segments not checked before: every batch's
        sizes, CRC and offsets, as recovery checks them (the compiled ``SegmentScan``, a block
        at a time), from where the last check of the segment ended (a followed broker's
        appends); a segment with a problem is mapped whole (``storage.damage.map_segment``) to
        name each stretch that is not intact batches and the offsets it costs, as a read that
        trips over it would. Runs in a worker thread; pass each to :meth:`note`."""
        found: list[LogDamage] = []
        with self._checking:
            for segment in plog.segments.all():
                size = segment.size
                position, next_offset = self._checked.get(segment, (0, segment.base_offset))
                if position >= size:
                    continue
                try:
                    scan = SegmentScan(segment.base_offset, crc32c, next_offset,
                                       stop_at_problem=True)
                    segment.scan_whole_batches(scan, position)
                    if not scan.problems and scan.valid_end >= size:
                        self._checked[segment] = (scan.valid_end, scan.next_offset)
                        continue
                    mapped = map_segment(segment, segment.base_offset)
                except _READ_ERRORS as e:  # (a legacy segment past its 32-bit offsets)
                    found.append(LogDamage(segment.log_path.name, None, next_offset, str(e)))
                    self._checked[segment] = (size, next_offset)
                    continue
                except OSError:  # (deleted by retention meanwhile)
                    continue
                for cut in mapped.cuts:
                    if cut.end > position:
                        found.append(LogDamage(
                            segment.log_path.name, cut.start, cut.first_offset, cut.reason,
                            None if cut.resume_offset is None else cut.resume_offset - 1))
                self._checked[segment] = (size, mapped.next_offset)
        return found

    async def note_read(self, pid: int, plog: PartitionLog, exc: Exception,
                        offset: int | None = None) -> None:
        """A read tripped over damage: note it as the check of the partition's unchecked
        batches describes it (file, byte, the offsets lost), as ``user.kfs.damage`` told it
        before the read; the read's bare error only when no check finds it (a batch whose CRC
        holds but whose records cannot be decoded). ``offset``: the offset read, if known."""
        for damage in await trio.to_thread.run_sync(self.unchecked_damage, plog):
            self.note(pid, plog.name, damage)
        self.note(pid, plog.name, exc, offset)  # (not news when described above)

    def note(self, pid: int, name: str, damage: LogDamage | Exception,
             offset: int | None = None) -> None:
        """Remember and log ``damage`` of partition ``pid`` unless it is known: one
        description per damage, whoever found it first. A read's bare error (``offset``: the
        offset read, else the one the error names) of damage described with its place is not
        news; a description of damage known only by a read's bare error takes that error's
        place, and is logged (it says more)."""
        found = self._found.setdefault(pid, {})
        text = str(damage)
        if text in found:
            return
        if isinstance(damage, LogDamage):
            bare = {seen for seen, at in found.items() if not isinstance(at, LogDamage)
                    and (f": {seen} (" in text or _covers(damage, at))}
            if bare:  # it takes the place of the first bare error it describes; the others go
                kept: dict[str, LogDamage | int | None] = {}
                for seen, at in found.items():
                    if seen not in bare:
                        kept[seen] = at
                    elif text not in kept:
                        kept[text] = damage
                self._found[pid] = kept
            else:
                found[text] = damage
        else:
            if offset is None:
                match = _OFFSET_NAMED.search(text)
                offset = int(match.group(1)) if match else None
            if any(isinstance(at, LogDamage) and (f": {text} (" in seen or _covers(at, offset))
                   for seen, at in found.items()):
                return
            found[text] = offset
        log.error("%s: damaged: %s (reads of it give EIO; `kfs verify --repair` mends it)",
                  name, text)

    def xattr(self, pid: int, plog: PartitionLog, writable: bool) -> bytes | None:
        """The ``user.kfs.damage`` value of partition ``pid``: what is wrong, or None."""
        if plog.damage is not None:
            text = str(plog.damage)
            if writable:
                text += "; appends are refused until `kfs verify --repair`"
        elif plog.salvaged:  # what recovery at open cut (kept in the quarantine), a salvage
            text = "; ".join(plog.salvaged)
        elif self._found.get(pid):
            texts = list(self._found[pid])
            text = texts[0] + (f" (and {len(texts) - 1} more found)" if len(texts) > 1 else "")
        else:
            return None
        return text.encode("utf-8", "replace")


def readable_run(plog: PartitionLog, want: int, limit: int, isolation: IsolationLevel,
                 found: list[LogDamage]) -> list[Any]:
    """Up to ``limit`` records from offset ``want`` as ``LogReader.records_from`` gives them; when
    a batch among them cannot be read, the records around it instead, its damage appended to
    ``found``. Runs in a worker thread."""
    try:
        return plog.reader.records_from(want, limit, isolation)
    except _READ_ERRORS:
        pass
    run: list[Any] = []
    for item in plog.reader.readable_record_lists(want, isolation):
        if isinstance(item, LogDamage):
            found.append(item)
            continue
        run.extend(item)
        if len(run) >= limit:
            break
    return run
