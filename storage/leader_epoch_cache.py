"""The partition's leader-epoch cache and its ``leader-epoch-checkpoint`` file
(Kafka's ``LeaderEpochFileCache``): the first offset of each leader epoch seen in the log."""

from __future__ import annotations

import logging
from pathlib import Path

from storage.checkpoint import read_epochs, write_epochs
from storage.errors import CorruptCheckpointError
from storage.log_files import LEADER_EPOCH_CHECKPOINT

log = logging.getLogger(__name__)


class LeaderEpochFileCache:
    """[(epoch, start offset)] ascending in both, persisted on every change when writable.

    A malformed file is logged and rebuilt from the log by the loader (Kafka fails the log dir
    instead; kfs recovers, since the epochs are all in the batches)."""

    def __init__(self, partition_dir: Path, writable: bool):
        self.path = Path(partition_dir) / LEADER_EPOCH_CHECKPOINT
        self.writable = writable
        try:
            self.entries: list[tuple[int, int]] = read_epochs(self.path)
        except CorruptCheckpointError as e:
            log.warning("%s; rebuilding it from the log", e)
            self.entries = []

    @property
    def latest_epoch(self) -> int:
        """The latest epoch, or -1 when none."""
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` starts at ``start_offset`` when it is newer than the latest
        (``LeaderEpochFileCache.assign``); older or equal epochs are ignored; entries whose start
        offset is >= the new one are dropped first (they conflict with it)."""
        if epoch < 0 or epoch <= self.latest_epoch:
            return
        self.entries = [e for e in self.entries if e[1] < start_offset] + [(epoch, start_offset)]
        self._flush()

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs starting at or after ``end_offset`` (the log was truncated there)."""
        kept = [e for e in self.entries if e[1] < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start offset moved to ``start_offset``: drop the epochs that start at or
        before it, and re-add the last dropped one at ``start_offset``
        (``LeaderEpochFileCache.truncateFromStartAsyncFlush``)."""
        dropped = [e for e in self.entries if e[1] <= start_offset]
        if not dropped or dropped[-1][1] == start_offset and len(dropped) == 1:
            return
        self.entries = [(dropped[-1][0], start_offset)] + self.entries[len(dropped):]
        self._flush()

    def _flush(self) -> None:
        if self.writable:
            write_epochs(self.path, self.entries)
