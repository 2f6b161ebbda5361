"""Opening a partition directory: finish or discard interrupted file operations, load the
segments, and recover what an unclean shutdown may have left torn (Kafka's ``LogLoader``).

Recovery revalidates every segment from the one holding the recovery point (the offset below
which data is known to be fsynced) to the end: CRCs, sizes, increasing offsets. A torn or corrupt
tail is truncated and every later segment deleted, so nothing before the last whole batch is lost
and nothing torn is ever served. Segments whose indexes are missing or fail their sanity check
are rebuilt whatever the shutdown was.
"""

from __future__ import annotations

import bisect
import logging
import re
from dataclasses import dataclass
from pathlib import Path

from storage.config import LogConfig
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.producer_state import ProducerStateManager
from storage.records import iter_batches
from storage.segment import (
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    filename_prefix,
)

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex)((?:\.cleaned|\.swap|\.deleted)?)")
_SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass
class LoadedLog:
    """What loading found: the segments (the last is active), the log start offset, the
    recovery point and the log end offset."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    log_end_offset: int


def segment_bases(directory: Path) -> list[int]:
    """Base offsets of the ``<20 digits>.log`` files of ``directory``, ascending."""
    return sorted(int(m.group(1)) for p in directory.iterdir()
                  if (m := _SEGMENT_FILE.fullmatch(p.name)) and m.group(2) == LOG_SUFFIX
                  and not m.group(3))


def load(directory: Path, config: LogConfig, writable: bool, *, had_clean_shutdown: bool,
         recovery_point: int, log_start_offset: int, epochs: LeaderEpochFileCache,
         producer_state: ProducerStateManager) -> LoadedLog:
    """Load ``directory`` (``LogLoader.load``). ``recovery_point`` and ``log_start_offset``
    come from the log-dir checkpoints (0 when absent). Read-only loads change no byte: they skip
    leftover files and recovery. Raises OSError, IndexOffsetOverflowError."""
    if writable:
        _finish_interrupted_operations(directory)
    bases = segment_bases(directory)
    segments: list[LogSegment] = []
    try:
        # A missing index is rebuilt (Kafka creates a missing .timeindex empty, which loses
        # the segment's largest timestamp for retention and ListOffsets).
        needs_recovery = {b for b in bases
                          if not all((directory / (filename_prefix(b) + suffix)).exists()
                                     for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX))}
        for base in bases:
            segment = LogSegment(directory, base, config, writable)
            segments.append(segment)
            # Every index is trimmed, except the active segment's after a crash
            trimmed = had_clean_shutdown or base != bases[-1]
            if writable and not _indexes_sane(segment, trimmed):
                needs_recovery.add(base)
        recovered: dict[int, list[int]] = {}  # base offset -> its producer batch positions
        if writable:
            segments = _recover(segments, config, needs_recovery, had_clean_shutdown,
                                recovery_point, epochs, recovered)
            if not segments:
                segments = [LogSegment(directory, log_start_offset, config, writable=True)]
        if not segments:
            return LoadedLog([], log_start_offset, log_start_offset, log_start_offset)
        log_end_offset = segments[-1].read_next_offset()
        if writable and log_end_offset < log_start_offset:
            # Kafka: every segment is below the checkpointed log start offset: start afresh there
            log.warning("%s: log end offset %d is below the log start offset %d; deleting "
                        "every segment", directory, log_end_offset, log_start_offset)
            for segment in segments:
                segment.delete()
            segments = [LogSegment(directory, log_start_offset, config, writable=True)]
            log_end_offset = log_start_offset
        log_start_offset = max(log_start_offset, segments[0].base_offset)
        if writable:
            epochs.truncate_from_end(log_end_offset)
            epochs.truncate_from_start(log_start_offset)
        rebuild_producer_state(producer_state, segments, log_start_offset, log_end_offset,
                               recovered)
        return LoadedLog(segments, log_start_offset,
                         min(max(recovery_point, log_start_offset), log_end_offset)
                         if had_clean_shutdown else log_end_offset, log_end_offset)
    except BaseException:
        for segment in segments:
            segment.close()
        raise


def _recover(segments: list[LogSegment], config: LogConfig, needs_recovery: set[int],
             had_clean_shutdown: bool, recovery_point: int,
             epochs: LeaderEpochFileCache, recovered: dict[int, list[int]]) -> list[LogSegment]:
    """Recover the segments that need it (``LogLoader.recoverLog``): after an unclean shutdown
    every segment from the one holding the recovery point; always those with bad indexes and an
    active segment whose last batch is torn. When an unflushed segment loses bytes, the segments
    after it go too: they were written after data that is now gone."""
    bases = [s.base_offset for s in segments]
    unflushed = set()
    if not had_clean_shutdown and segments:
        unflushed = set(bases[max(bisect.bisect_right(bases, recovery_point) - 1, 0):])
    elif segments and segments[-1].last_whole_batch_end() != segments[-1].size:
        unflushed = {bases[-1]}
    for i, segment in enumerate(segments):
        if segment.base_offset not in needs_recovery | unflushed:
            continue
        recovered[segment.base_offset] = positions = []
        truncated = segment.recover(epochs, positions)
        segment.flush()  # what recovery kept becomes the new recovery point: make it durable
        if truncated and segment.base_offset in unflushed and i < len(segments) - 1:
            for later in segments[i + 1:]:
                log.warning("deleting %s: it follows data lost by %s", later.log_path,
                            segment.log_path)
                later.delete()
            segments = segments[: i + 1]
            break
    for segment in segments[:-1]:
        segment.offset_index.trim_to_valid_size()
        segment.time_index.trim_to_valid_size()
    if segments:
        segments[-1].resize_indexes(config.segment_index_bytes)
    return segments


def rebuild_producer_state(state: ProducerStateManager, segments: list[LogSegment],
                           log_start_offset: int, log_end_offset: int,
                           recovered: dict[int, list[int]] | None = None) -> None:
    """Bring the producer state to ``log_end_offset`` (``UnifiedLog.rebuildProducerState``):
    load the newest snapshot at or below the replay start, then replay from there the batches
    that carry a producer id (their headers, and control records), the others being walked
    over in the compiled codec. The replay starts no later than the first recovered segment,
    whose transaction index recovery emptied: aborted transactions are indexed again there."""
    recovered = recovered or {}
    start = min(recovered, default=log_end_offset)
    state.truncate_and_reload(log_start_offset, start, force=True)
    bases = [s.base_offset for s in segments]
    first = max(bisect.bisect_right(bases, state.map_end_offset) - 1, 0)
    for segment in segments[first:] if state.map_end_offset < log_end_offset else []:
        index = segment.txn_index if segment.base_offset in recovered else None
        for _, batch in segment.producer_batches(segment.offset_index.lookup(
                max(state.map_end_offset, segment.base_offset))[1],
                recovered.get(segment.base_offset)):
            if batch.last_offset >= state.map_end_offset:
                state.apply_batch(batch, index)
    state.update_map_end_offset(log_end_offset)
    state.on_high_watermark_updated(log_end_offset)


def _finish_interrupted_operations(directory: Path) -> None:
    """Delete ``*.deleted`` and ``*.cleaned`` files, drop ``.swap`` files of an unfinished
    cleaning, promote complete ones over the segments they replace, and delete index files
    whose ``.log`` is gone (``LogLoader.removeTempFilesAndCollectSwapFiles``)."""
    swaps: list[Path] = []
    min_cleaned = None
    for path in sorted(directory.iterdir()):
        m = _SEGMENT_FILE.fullmatch(path.name)
        if not m or not m.group(3):
            continue
        base, kind = int(m.group(1)), m.group(3)
        if kind == DELETED_SUFFIX:
            log.info("deleting %s left by an earlier deletion", path)
            path.unlink()
        elif kind == CLEANED_SUFFIX:
            min_cleaned = base if min_cleaned is None else min(min_cleaned, base)
            log.info("deleting %s left by an interrupted cleaning", path)
            path.unlink()
        else:
            swaps.append(path)
    for path in swaps:
        if min_cleaned is not None and int(path.name[:20]) >= min_cleaned:
            log.info("deleting %s: its cleaning did not finish", path)
            path.unlink()
    swaps = [p for p in swaps if p.exists()]
    _promote_swaps(directory, swaps)
    for path in directory.iterdir():
        m = _SEGMENT_FILE.fullmatch(path.name)
        if m and not m.group(3) and m.group(2) != LOG_SUFFIX and \
                not (directory / (m.group(1) + LOG_SUFFIX)).exists():
            log.info("deleting %s: its .log is gone", path)
            path.unlink()


def _promote_swaps(directory: Path, swaps: list[Path]) -> None:
    """Replace the segments a finished cleaning covered: delete the old segment files whose base
    falls in [first swap base, last swap's next offset), then strip ``.swap``."""
    log_swaps = sorted(p for p in swaps if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX))
    if log_swaps:
        first = int(log_swaps[0].name[:20])
        end = _next_offset_of_log_file(log_swaps[-1], int(log_swaps[-1].name[:20]))
        for path in directory.iterdir():
            m = _SEGMENT_FILE.fullmatch(path.name)
            if m and not m.group(3) and first <= int(m.group(1)) < end:
                log.info("deleting %s: replaced by a finished cleaning", path)
                path.unlink()
    for path in swaps:
        log.info("promoting %s", path)
        path.rename(path.with_name(path.name[: -len(SWAP_SUFFIX)]))


def _next_offset_of_log_file(path: Path, base_offset: int) -> int:
    next_offset = base_offset
    for batch in iter_batches(path.read_bytes()):
        next_offset = batch.next_offset
    return next_offset


def _indexes_sane(segment: LogSegment, trimmed: bool) -> bool:
    """False when an index fails ``sanityCheck``, when a ``trimmed`` index has zero-filled
    slots, or when the last entry of either index disagrees with the .log (e.g. the .log was
    cut short after a clean shutdown, or the index was zeroed or overwritten)."""
    try:
        for index in (segment.offset_index, segment.time_index):
            index.sanity_check()
            if trimmed and 0 < index.entries < index.max_entries:
                # Kafka trims on roll and close: a zero tail there is damage, not preallocation
                # (a missing index was just created empty: no entries, nothing to distrust)
                raise ValueError(f"{index.path} has {index.max_entries - index.entries} "
                                 f"zero-filled slots after its {index.entries} entries")
        _check_last_entries(segment)
    except ValueError as e:
        log.warning("%s; rebuilding the indexes", e)
        return False
    except (CorruptRecordError, InvalidRecordError):
        pass  # bytes that are not batch headers prove nothing about the indexes; reads will tell
    return True


def _check_last_entries(segment: LogSegment) -> None:
    """Raise ValueError unless the last offset-index entry (O, P) names a batch at position P
    of the .log whose last offset is at most O (P starts the append whose last offset is O),
    and the last time-index entry (T, O) names an offset of the .log whose batch has max
    timestamp T. Each check reads batch headers only."""
    index = segment.offset_index
    if index.entries:
        offset, position = index.lookup(index.last_offset)
        if position >= segment.size:
            raise ValueError(f"{index.path} points past the end of {segment.log_path}")
        batch = next(segment.scan_batches(position), (None, None))[1]
        if batch is not None and batch.last_offset > offset:
            raise ValueError(f"{index.path}: the batch at byte {position} of "
                             f"{segment.log_path} ends after offset {offset}")
    time_index = segment.time_index
    if time_index.entries:
        timestamp, offset = time_index.last_entry
        found = segment.find_batch(offset)
        if found is None or found[1].max_timestamp != timestamp:
            raise ValueError(f"{time_index.path}: no batch of {segment.log_path} holds offset "
                             f"{offset} with max timestamp {timestamp}")
