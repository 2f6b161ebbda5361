"""Which compacted log to clean, how far, and the record of it (Kafka's ``LogCleaner``,
``LogCleanerManager`` and ``LogToClean``, for one log directory and one cleaner thread).

A log is compacted when ``cleanup.policy`` contains ``compact``. Its cleanable range is
``[first dirty offset, first uncleanable offset)``: the first dirty offset is the log
directory's ``cleaner-offset-checkpoint`` entry (the end of the last pass), or the log start
offset; the first uncleanable offset is the least of the last stable offset, the active
segment's base offset and the base of the first segment holding a record younger than
``min.compaction.lag.ms``, rounded down to a segment base. The dirtiest log (cleanable bytes /
total bytes) is cleaned first, once its ratio passes ``min.cleanable.dirty.ratio`` or a dirty
segment has waited longer than ``max.compaction.lag.ms``. A pass that fails on bad data marks
its partition uncleanable (it is not tried again in this process); the others go on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from storage.checkpoint import read_offsets, write_offsets
from storage.cleaner import (
    Cleaner,
    CleanerStats,
    Throttler,
    log_segments,
)
from storage.clock import SYSTEM_CLOCK, Clock
from storage.errors import CorruptCheckpointError, KafkaStorageError, LogCleaningAbortedError
from storage.log_files import CLEANER_OFFSET_CHECKPOINT
from storage.offset_map import SkimpyOffsetMap

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OffsetsToClean:
    """``LogCleanerManager.OffsetsToClean``: offsets, and whether the checkpoint was invalid."""

    first_dirty_offset: int
    first_uncleanable_dirty_offset: int
    force_update_checkpoint: bool


def non_active_segments_from(log_, offset: int):
    """``nonActiveLogSegmentsFrom``: the segments from the one holding ``offset`` up to the
    active one (excluded)."""
    segments = log_.segments.all()
    return log_segments(segments, offset, segments[-1].base_offset)


def cleanable_offsets(log_, last_clean_offset: int | None, now: int) -> OffsetsToClean:
    """The range of dirty offsets that can be cleaned (``cleanableOffsets``): not past the
    last stable offset, the active segment, or a segment with a record younger than
    ``min.compaction.lag.ms`` at ``now`` (epoch ms). A checkpoint below the log start or past
    the log end is reset to the log start."""
    start = log_.log_start_offset
    checkpoint = start if last_clean_offset is None else last_clean_offset
    force = False
    if checkpoint < start or checkpoint > log_.log_end_offset:
        if checkpoint > log_.log_end_offset or not log_.config.deletes:
            log.warning("Resetting first dirty offset of %s to log start offset %d since the "
                        "checkpointed offset %d is invalid.", log_.name, start, checkpoint)
        checkpoint, force = start, True
    candidates = [log_.last_stable_offset, log_.segments.active.base_offset]
    lag = max(log_.config.min_compaction_lag_ms, 0)
    if lag > 0:
        candidates += [s.base_offset for s in non_active_segments_from(log_, checkpoint)
                       if s.largest_timestamp > now - lag][:1]
    return OffsetsToClean(checkpoint, max(checkpoint, min(candidates)), force)


def calculate_cleanable_bytes(log_, first_dirty: int, uncleanable: int) -> tuple[int, int]:
    """(the base of the segment holding ``uncleanable``, the bytes of the segments from the
    one holding ``first_dirty`` below it) (``calculateCleanableBytes``)."""
    non_active = non_active_segments_from(log_, uncleanable)
    first_uncleanable = (non_active[0] if non_active else log_.segments.active).base_offset
    cleanable = log_segments(log_.segments.all(), min(first_dirty, first_uncleanable),
                             first_uncleanable)
    return first_uncleanable, sum(s.size for s in cleanable)


def max_compaction_delay(log_, first_dirty: int, now: int) -> int:
    """How long past ``max.compaction.lag.ms`` the oldest dirty segment has waited, in ms (0:
    not overdue) (``maxCompactionDelay``); a segment's age is its first batch's timestamp."""
    stamps = [t for s in non_active_segments_from(log_, first_dirty)
              if (t := s.first_batch_timestamp()) > 0]
    clean_until = now - max(log_.config.max_compaction_lag_ms, 0)
    earliest = min(stamps, default=2**63 - 1)
    return clean_until - earliest if earliest < clean_until else 0


class LogToClean:
    """A log with its cleanable range and sizes (``LogToClean``)."""

    def __init__(self, log_, first_dirty_offset: int, uncleanable_offset: int,
                 need_compaction_now: bool):
        self.log = log_
        self.first_dirty_offset = first_dirty_offset
        self.need_compaction_now = need_compaction_now
        self.clean_bytes = sum(s.size for s in log_.segments.all()
                               if s.base_offset < first_dirty_offset)
        self.first_uncleanable_offset, self.cleanable_bytes = calculate_cleanable_bytes(
            log_, first_dirty_offset, uncleanable_offset)
        self.total_bytes = self.clean_bytes + self.cleanable_bytes
        self.cleanable_ratio = self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


@dataclass
class CleanResult:
    """One pass: the partition, its dirty section ``[start, end)`` and the figures."""

    name: str
    start: int
    end: int
    stats: CleanerStats


class LogCleanerManager:
    """The state of cleaning for the logs of ``log_dir`` (``LogCleanerManager``): the
    ``cleaner-offset-checkpoint`` (``<topic> <partition> <first dirty offset>`` lines in Kafka's
    checkpoint format), the partitions in progress and those marked uncleanable. ``logs()``
    gives the current ``{name: Log}``."""

    def __init__(self, log_dir: Path, logs: Callable[[], dict]):
        self.dir = Path(log_dir)
        self._logs = logs
        self._lock = threading.Lock()
        self._in_progress: set[str] = set()
        self.uncleanable: set[str] = set()

    @property
    def checkpoint_path(self) -> Path:
        return self.dir / CLEANER_OFFSET_CHECKPOINT

    def all_cleaner_checkpoints(self) -> dict[str, int]:
        try:
            return read_offsets(self.checkpoint_path)
        except CorruptCheckpointError as exc:
            log.error("%s; treating it as absent", exc)
            return {}

    def offsets_to_clean(self, log_, now: int) -> OffsetsToClean:
        """:func:`cleanable_offsets` from the checkpoint, rewriting an invalid entry."""
        offsets = cleanable_offsets(log_, self.all_cleaner_checkpoints().get(log_.name), now)
        if offsets.force_update_checkpoint:
            self.update_checkpoint(log_.name, offsets.first_dirty_offset)
        return offsets

    def grab_filthiest_compacted_log(self, now: int) -> LogToClean | None:
        """The compacted log to clean next, marked in progress (``grabFilthiestCompactedLog``):
        of the logs not in progress nor uncleanable, the one with the largest cleanable ratio
        among those above their ``min.cleanable.dirty.ratio`` or overdue by
        ``max.compaction.lag.ms``; None when there is none."""
        with self._lock:
            candidates = []
            for name, log_ in self._logs().items():
                if not log_.config.compact or name in self._in_progress or \
                        name in self.uncleanable:
                    continue
                ltc = self.log_to_clean(log_, now)
                if ltc.total_bytes > 0 and (
                        ltc.need_compaction_now and ltc.cleanable_bytes > 0
                        or ltc.cleanable_ratio > log_.config.min_cleanable_dirty_ratio):
                    candidates.append(ltc)
            if not candidates:
                return None
            filthiest = max(candidates, key=lambda ltc: ltc.cleanable_ratio)
            self._in_progress.add(filthiest.log.name)
            return filthiest

    def log_to_clean(self, log_, now: int) -> LogToClean:
        offsets = self.offsets_to_clean(log_, now)
        return LogToClean(log_, offsets.first_dirty_offset,
                          offsets.first_uncleanable_dirty_offset,
                          max_compaction_delay(log_, offsets.first_dirty_offset, now) > 0)

    def begin(self, name: str) -> bool:
        """Mark ``name`` in progress; False when it already is."""
        with self._lock:
            if name in self._in_progress:
                return False
            self._in_progress.add(name)
            return True

    def done_cleaning(self, name: str, end_offset: int | None) -> None:
        """Record the first dirty offset ``end_offset`` (None: the pass failed) and release
        the partition (``doneCleaning``)."""
        with self._lock:
            self._in_progress.discard(name)
        if end_offset is not None:
            self.update_checkpoint(name, end_offset)

    def update_checkpoint(self, name: str, offset: int) -> None:
        """Rewrite the checkpoint with ``name`` at ``offset``, dropping partitions gone."""
        with self._lock:
            logs = self._logs()
            entries = {n: o for n, o in self.all_cleaner_checkpoints().items() if n in logs}
            entries[name] = offset
            write_offsets(self.checkpoint_path, entries)

    def mark_partition_uncleanable(self, name: str) -> None:
        with self._lock:
            self.uncleanable.add(name)


class LogCleaner:
    """The log cleaner of a backing directory with one cleaner "thread" that the caller drives
    (the mount's scheduler, or ``kfs compact``): each :meth:`clean_filthiest_log` is one
    ``CleanerThread.doWork`` round. ``config`` is the directory's ``LogManagerConfig``;
    ``message_max_bytes`` the broker's ``message.max.bytes`` (the largest read buffer); ``clock``
    is the time a pass runs at, unless given (``storage.clock``)."""

    def __init__(self, log_dir: Path, logs: Callable[[], dict], config,
                 message_max_bytes: int = 1_048_588, clock: Clock = SYSTEM_CLOCK):
        self.config = config
        self.clock = clock
        self.manager = LogCleanerManager(log_dir, logs)
        self._logs = logs
        self._message_max_bytes = message_max_bytes
        self._cleaner: Cleaner | None = None
        self.throttler = Throttler(config.log_cleaner_io_max_bytes_per_second, clock)

    def cleaner(self, progress: Callable[[int], None] | None = None) -> Cleaner:
        """The Cleaner (its offset map allocated on first use: pages are touched as it
        fills)."""
        if self._cleaner is None:
            self._cleaner = Cleaner(
                SkimpyOffsetMap(min(self.config.log_cleaner_dedupe_buffer_size, 2**31 - 1)),
                self.config.log_cleaner_io_buffer_size // 2, self._message_max_bytes,
                self.config.log_cleaner_io_buffer_load_factor, self.throttler)
        self._cleaner.progress = progress or (lambda n: None)
        return self._cleaner

    def clean_filthiest_log(self, now: int | None = None) -> CleanResult | None:
        """Clean the dirtiest eligible log, then apply retention to the compacted logs with
        ``delete`` (``cleanFilthiestLog``). Returns the pass, or None when no log needed one
        (or the pass failed: it is logged)."""
        now = self.clock.milliseconds() if now is None else now
        ltc = self.manager.grab_filthiest_compacted_log(now)
        result = None
        if ltc is not None:
            result = self._clean(ltc, now)
        for name, log_ in self._logs().items():
            if log_.config.compact and name not in self.manager.uncleanable:
                log_.delete_old_segments(now)
        return result

    def clean_log(self, name: str, now: int | None = None,
                  progress: Callable[[int], None] | None = None) -> CleanResult | None:
        """One pass over partition ``name`` whatever its dirty ratio (``kfs compact``); None
        when it has nothing cleanable. Raises KeyError for an unknown partition, ValueError for
        one whose cleanup.policy has no compact, and what the pass raises."""
        now = self.clock.milliseconds() if now is None else now
        log_ = self._logs()[name]
        if not log_.config.compact:
            raise ValueError(f"{name}: cleanup.policy={log_.config.cleanup_policy} does not "
                             "compact")
        ltc = self.manager.log_to_clean(log_, now)
        if ltc.cleanable_bytes == 0 or not self.manager.begin(name):
            return None
        return self._clean(ltc, now, progress, reraise=True)

    def _clean(self, ltc: LogToClean, now: int, progress=None,
               reraise: bool = False) -> CleanResult | None:
        name, start, end = ltc.log.name, ltc.first_dirty_offset, None
        try:
            end, stats = self.cleaner(progress).clean(ltc.log, start, ltc.first_uncleanable_offset,
                                                      now)
        except LogCleaningAbortedError as exc:
            log.info("Cleaning of log %s aborted: %s", name, exc)
        except OSError as exc:  # e.g. ENOSPC: as Kafka, the log goes offline for writes
            log.error("Failed to clean up log for %s in dir %s due to IOException: %s", name,
                      self.manager.dir, exc)
            ltc.log.go_offline(exc)  # (the next mount finishes or undoes a half-done swap)
            if reraise:
                raise
        except (KafkaStorageError, ValueError) as exc:
            log.warning("Unexpected exception thrown when cleaning log %s. Marking its partition "
                        "(%s) as uncleanable: %s", name, name, exc)
            self.manager.mark_partition_uncleanable(name)
            if reraise:
                raise
        finally:
            self.manager.done_cleaning(name, end)
        if end is None:
            return None
        result = CleanResult(name, start, end, stats)
        log.info("%s", stats_message(result))
        return result


def for_log_manager(mgr) -> LogCleaner:
    """A LogCleaner of a LogManager's logs and settings (keep it: its offset map is large)."""
    from storage.config import load_broker_config

    broker = load_broker_config(mgr.dir)
    # a damaged log is left as it is, for `kfs verify --repair`
    return LogCleaner(mgr.dir, lambda: {n: log_ for n in mgr.partition_names()
                                        if (log_ := mgr.get(n)).damage is None},
                      mgr.config, broker.get("max_message_bytes", 1_048_588), mgr.clock)


def _mb(n: float) -> float:
    return n / (1024 * 1024)


def stats_message(result: CleanResult) -> str:
    """LogCleaner's summary of a pass (``recordStats``), in its words."""
    s = result.stats
    total, index = s.elapsed_secs(), s.elapsed_index_secs()
    clean = max(total - index, 1e-9)
    lines = [
        f"Log cleaner thread 0 cleaned log {result.name} (dirty section = "
        f"[{result.start}, {result.end}])",
        f"{_mb(s.bytes_read):,.1f} MB of log processed in {total:,.1f} seconds "
        f"({_mb(s.bytes_read / total):,.1f} MB/sec).",
        f"Indexed {_mb(s.map_bytes_read):,.1f} MB in {index:.1f} seconds "
        f"({_mb(s.map_bytes_read) / index:,.1f} Mb/sec, {100 * index / total:.1f}% of total time)",
        f"Buffer utilization: {100 * s.buffer_utilization:.1f}%",
        f"Cleaned {_mb(s.bytes_read):,.1f} MB in {clean:.1f} seconds "
        f"({_mb(s.bytes_read) / clean:,.1f} Mb/sec, {100 * clean / total:.1f}% of total time)",
        f"Start size: {_mb(s.bytes_read):,.1f} MB ({s.messages_read:,d} messages)",
        f"End size: {_mb(s.bytes_written):,.1f} MB ({s.messages_written:,d} messages)",
        f"{100.0 * (1.0 - s.bytes_written / max(s.bytes_read, 1)):.1f}% size reduction "
        f"({100.0 * (1.0 - s.messages_written / max(s.messages_read, 1)):.1f}% fewer messages)",
    ]
    if s.invalid_messages_read:
        lines.append(f"Found {s.invalid_messages_read} invalid messages during compaction.")
    return "\n\t".join(lines)


def compacted(names: Iterable[str], logs: dict) -> list[str]:
    """The names whose log compacts."""
    return [n for n in names if logs[n].config.compact]
