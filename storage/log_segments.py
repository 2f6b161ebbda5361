"""The ordered segments of one partition (Kafka's ``LogSegments``): the view every reader takes,
lookups by offset, and following the segment files another writer (a running broker) rolls,
deletes and swaps in a read-only directory.

Readers take the view without a lock: a change publishes new lists and never mutates the old
ones, and a segment taken out of the view stays open for ``RETIRED_S`` (a reader that took it
just before finishes with the bytes it had).
"""

from __future__ import annotations

import bisect
import logging
import os
from pathlib import Path

from storage import log_loader
from storage.clock import Clock
from storage.config import LogConfig
from storage.dir_watch import RETIRED_S, DirectoryWatch
from storage.open_files import FilePool
from storage.segment import LogSegment

log = logging.getLogger(__name__)


class LogSegments:
    """The segments of the partition directory ``directory`` in base-offset order.
    ``version`` grows by one whenever segments come or go (roll, retention, the cleaner,
    following), so a reader can tell that what it indexed is still the log's. ``files``: the
    pool of the ``.log`` descriptors of the segments it opens while following (the log's)."""

    def __init__(self, directory: Path, config: LogConfig, clock: Clock,
                 segments: list[LogSegment], files: FilePool | None = None) -> None:
        self.dir, self.config, self.clock, self.files = directory, config, clock, files
        self._view: tuple[list[int], list[LogSegment]] = ([], [])
        self.version = 0
        self.set(segments)
        self._watch = DirectoryWatch(directory, clock)
        self._retired: list[tuple[float, LogSegment]] = []  # (when to close, segment)

    def set(self, segments: list[LogSegment]) -> None:
        """Publish ``segments`` as the log's (the caller holds the log's lock)."""
        self._view = ([s.base_offset for s in segments], segments)
        self.version += 1

    # -- the view ---------------------------------------------------------------------------

    @property
    def view(self) -> tuple[list[int], list[LogSegment]]:
        """(base offsets, segments) as of now, a matching pair never changed afterwards."""
        return self._view

    def all(self) -> list[LogSegment]:
        """The segments in base-offset order as of now (``LogSegments.values``)."""
        return self._view[1]

    def __len__(self) -> int:
        return len(self._view[1])

    @property
    def active(self) -> LogSegment:
        """The last segment, the one appends go to. IndexError when there is none."""
        return self._view[1][-1]

    @property
    def first_base_offset(self) -> int | None:
        """The first segment's base offset (None without segments): below the log start
        offset once DeleteRecords or a follower moved it inside that segment."""
        bases = self._view[0]
        return bases[0] if bases else None

    def floor(self, offset: int) -> LogSegment | None:
        """The segment whose base offset is the largest <= ``offset`` (``floorSegment``)."""
        bases, segments = self._view
        i = bisect.bisect_right(bases, offset) - 1
        return segments[i] if i >= 0 else None

    def from_offset(self, offset: int) -> list[LogSegment]:
        """The segment holding ``offset`` (the first one when it lies below them all) and
        every later one."""
        bases, segments = self._view
        return segments[max(bisect.bisect_right(bases, offset) - 1, 0):]

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._view[1])

    def last_modified_ms(self) -> int:
        """When the log last changed on disk: its active segment's ``.log`` mtime (epoch ms),
        which moves only with appends and rolls (0 when it cannot be read)."""
        try:
            return self.active.modified_ms()
        except (OSError, IndexError, ValueError):
            return 0

    # -- following another writer -----------------------------------------------------------

    def follow_files(self, names: list[str] | None = None) -> bool:
        """Take in the segment files another writer rolled, deleted, renamed ``.deleted``,
        cut back or swapped in since the last look, from the directory's listing (``names``,
        or listed now when it may have changed: ``storage.dir_watch``). A cleaner's swap in
        progress (``.swap`` files) waits for a later call. Returns whether the segments
        changed. Raises FileNotFoundError when the directory or a segment vanished meanwhile."""
        names = self._watch.names() if names is None else names
        if names is None:
            return False
        if log_loader.swap_in_progress(names):
            self._watch.again()
            return False
        bases = log_loader.bases_of(names)
        old = {s.base_offset: s for s in self.all()}
        was_active = self.active if old else None
        # a segment whose file is gone, replaced or cut shorter than what was read is opened
        # anew (a broker truncating its log, a cleaner's swap); so is the active one cut back
        # and written again past that (a follower truncating, then fetching)
        kept = {b: old[b] for b in bases if b in old and old[b].is_file_on_disk()
                and old[b].file_size() >= old[b].size
                and (old[b] is not was_active or was_active.tail_unchanged())}
        if len(kept) == len(old) == len(bases) or not bases:
            return False  # (no .log at all: a listing mid-roll; Kafka keeps an active segment)
        segments = [kept.get(b) or LogSegment(self.dir, b, self.config, False, self.clock,
                                              files=self.files)
                    for b in bases]
        for segment in segments[:-1]:  # finished segments: read to their end
            if segment.size < segment.file_size():
                segment.catch_up()
        active = segments[-1]
        if active.base_offset not in kept:
            active.size = active.last_whole_batch_end()
        now_in = {id(s) for s in segments}
        self.retire([s for s in old.values() if id(s) not in now_in])
        self.set(segments)
        return True

    def follow_active(self) -> int | None:
        """Take in the whole batches another writer appended to the active segment: the
        offset after them, or None when nothing whole was added. An active segment cut
        shorter than what was read, or whose last batch read was written over, is taken in
        anew with :meth:`follow_files` (then ``version`` moves). Raises CorruptRecordError for
        bytes that are not batches."""
        if not len(self):  # (a directory whose first .log is not there yet)
            return None
        active = self.active
        shrank = active.file_size() < active.size
        if shrank or not active.tail_unchanged():
            how = (f"shrank from {active.size} to {active.file_size()} bytes" if shrank else
                   "its last batch read was written over")
            log.warning("%s: %s %s under the reader", self.dir.name, active.log_path.name, how)
            self.follow_files(os.listdir(self.dir))
            return None
        return active.catch_up()

    def retire(self, segments: list[LogSegment]) -> None:
        """Segments out of the view, closed once no reader can still be in them."""
        self._retired.extend((self.clock.monotonic() + RETIRED_S, s) for s in segments)

    def close_retired(self, everything: bool = False) -> None:
        """Close the segments retired a while ago (``everything``: all of them, as at close)."""
        now = float("inf") if everything else self.clock.monotonic()
        due = [s for t, s in self._retired if t <= now]
        self._retired = [(t, s) for t, s in self._retired if t > now]
        for segment in due:
            segment.close()
