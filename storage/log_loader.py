"""Opening a partition directory: finish or discard interrupted file operations, load the
segments, and recover what an unclean shutdown may have left torn (Kafka's ``LogLoader``).

Recovery revalidates every segment from the one holding the recovery point (the offset below
which data is known to be fsynced) to the end: CRCs, sizes, increasing offsets. A torn or corrupt
tail is truncated and every later segment deleted, so nothing before the last whole batch is lost
and nothing torn is ever served. Segments whose indexes are missing or fail their sanity check
are rebuilt whatever the shutdown was.

Given a :class:`~storage.quarantine.Quarantine`, every byte recovery takes out (a corrupt
batch and what follows it in its segment, a torn tail, the later segments) is kept there
instead of deleted, and each cut is described in ``LoadedLog.cuts`` for the user: nothing is
cut without a trace. A log whose end cannot be read and that is not recovered (a clean
shutdown, or a read-only load) is loaded up to the damage, which ``LoadedLog.damage`` describes.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from storage import disk_calls
from storage.clock import SYSTEM_CLOCK, Clock
from storage.config import LogConfig
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.damage import LogDamage, header_records, next_intact_batch, readable_end
from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.producer_state import ProducerStateManager
from storage.quarantine import Quarantine
from storage.records import iter_batches
from storage.log_files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    log_file,
    offset_from_file_name,
    offset_index_file,
    parse_segment_file_name,
    time_index_file,
    transaction_index_file,
)
from storage.open_files import FilePool
from storage.segment import LogSegment

log = logging.getLogger(__name__)



class IntactDataAfterDamageError(Exception):
    """Recovery found damage with intact batches after it (in its segment or later ones): a
    salvage (``storage.salvage``) keeps them, where Kafka's truncation would cut them all.
    Raised before anything of the partition is cut."""

    def __init__(self, path: Path, position: int, problem: str) -> None:
        super().__init__(f"{path} at byte {position}: {problem}, with intact batches after it")
        self.path, self.position, self.problem = path, position, problem


@dataclass
class LoadedLog:
    """What loading found: the segments (the last is active), the log start offset, the
    recovery point, the log end offset, the damage that stopped the load short of the
    log's end (None when the log reads to its end), and what recovery cut, one line per cut
    (where, the offsets, why, where the bytes are kept)."""

    segments: list[LogSegment]
    log_start_offset: int
    recovery_point: int
    log_end_offset: int
    damage: LogDamage | None = None
    cuts: list[str] = dataclasses.field(default_factory=list)


def segment_bases(directory: Path) -> list[int]:
    """Base offsets of the ``<20 digits>.log`` files of ``directory``, ascending."""
    return bases_of(os.listdir(directory))


def bases_of(names: list[str]) -> list[int]:
    """Base offsets of the ``<20 digits>.log`` names among ``names``, ascending."""
    return sorted(f.offset for name in names
                  if (f := parse_segment_file_name(name)) and f.kind == LOG_SUFFIX and not f.extra)


def swap_in_progress(names: list[str]) -> bool:
    """Whether ``names`` hold a cleaner's ``.swap`` file: a swap is under way (old segments
    renamed ``.deleted``, the new ones not yet renamed to their final names)."""
    return any(name.endswith(SWAP_SUFFIX) for name in names)


def load(directory: Path, config: LogConfig, writable: bool, *, had_clean_shutdown: bool,
         recovery_point: int, log_start_offset: int, epochs: LeaderEpochFileCache,
         producer_state: ProducerStateManager, quarantine: Quarantine | None = None,
         salvage: bool = False, clock: Clock = SYSTEM_CLOCK,
         files: FilePool | None = None) -> LoadedLog:
    """Load ``directory`` (``LogLoader.load``). ``recovery_point`` and ``log_start_offset``
    come from the log-dir checkpoints (0 when absent). Read-only loads change no byte: they skip
    leftover files and recovery. ``quarantine`` keeps what recovery removes (see the module's
    text). A log whose end cannot be read loads up to the damage (``LoadedLog.damage``). ``clock``
    dates the segments it creates; ``files`` holds their ``.log`` descriptors (the log's pool).
    ``salvage=True``: damage with intact batches after it raises IntactDataAfterDamageError
    (nothing cut), for the caller to salvage the partition and load it again.
    Raises OSError, IndexOffsetOverflowError, QuarantineError (nothing removed)."""
    if writable:
        _finish_interrupted_operations(directory, quarantine)
    bases = segment_bases(directory)
    segments: list[LogSegment] = []
    cuts: list[str] = []  # what recovery cut, for the user
    try:
        # A missing index is rebuilt (Kafka creates a missing .timeindex empty, which loses
        # the segment's largest timestamp for retention and ListOffsets).
        needs_recovery = {b for b in bases
                          if not (offset_index_file(directory, b).exists()
                                  and time_index_file(directory, b).exists())}
        for base in bases:
            segment = LogSegment(directory, base, config, writable, clock, files=files)
            segments.append(segment)
            # Every index is trimmed, except the active segment's after a crash
            trimmed = had_clean_shutdown or base != bases[-1]
            if writable and not _indexes_sane(segment, trimmed):
                needs_recovery.add(base)
        recovered: dict[int, list[int]] = {}  # base offset -> its producer batch positions
        if writable:
            segments = _recover(segments, config, needs_recovery, had_clean_shutdown,
                                recovery_point, epochs, recovered, quarantine, salvage, cuts)
            if not segments:
                segments = [LogSegment(directory, log_start_offset, config, True, clock,
                                       files=files)]
        if not segments:
            return LoadedLog([], log_start_offset, log_start_offset, log_start_offset)
        log_end_offset, damage = _log_end_offset(segments[-1])
        if writable and log_end_offset < log_start_offset and damage is None:
            # Kafka: every segment is below the checkpointed log start offset: start afresh there
            log.warning("%s: log end offset %d is below the log start offset %d; deleting "
                        "every segment", directory, log_end_offset, log_start_offset)
            for segment in segments:
                segment.delete()
            segments = [LogSegment(directory, log_start_offset, config, True, clock,
                                   files=files)]
            log_end_offset = log_start_offset
        log_start_offset = max(log_start_offset, segments[0].base_offset)
        if damage is not None:  # left as it is on disk, for a repair
            producer_state.writable = False
        elif writable:
            # the active segment's next appends index as its writer's would have
            segments[-1].resume_appends()
            epochs.truncate_from_end(log_end_offset)
            epochs.truncate_from_start(log_start_offset)
            producer_state.remove_stray_snapshots(s.base_offset for s in segments)  # as Kafka
        try:
            rebuild_producer_state(producer_state, segments, log_start_offset, log_end_offset,
                                   recovered)
        except (CorruptRecordError, InvalidRecordError) as e:
            damage = damage or _replay_damage(segments, producer_state.map_end_offset, e)
        if damage is not None:
            log.error("%s is damaged: %s; it is read up to the damage%s", directory, damage,
                      ", and appends are refused until `kfs verify --repair`" if writable else "")
        return LoadedLog(segments, log_start_offset,
                         min(max(recovery_point, log_start_offset), log_end_offset)
                         if had_clean_shutdown else log_end_offset, log_end_offset, damage,
                         cuts)
    except BaseException:
        for segment in segments:
            segment.close()
        raise


def _recover(segments: list[LogSegment], config: LogConfig, needs_recovery: set[int],
             had_clean_shutdown: bool, recovery_point: int, epochs: LeaderEpochFileCache,
             recovered: dict[int, list[int]], quarantine: Quarantine | None,
             salvage: bool, cuts: list[str]) -> list[LogSegment]:
    """Recover the segments that need it (``LogLoader.recoverLog``): after an unclean shutdown
    every segment from the one holding the recovery point; always those with bad indexes and an
    active segment whose last batch is torn. When an unflushed segment loses bytes, the segments
    after it go too: they were written after data that is now gone (into ``quarantine`` when
    given, as are the cut bytes). Each cut is described in ``cuts``."""
    bases = [s.base_offset for s in segments]
    unflushed = set()
    if not had_clean_shutdown and segments:
        unflushed = set(bases[max(bisect.bisect_right(bases, recovery_point) - 1, 0):])
    elif segments and _torn_at_end(segments[-1]):
        unflushed = {bases[-1]}
    for i, segment in enumerate(segments):
        if segment.base_offset not in needs_recovery | unflushed:
            continue
        recovered[segment.base_offset] = positions = []
        later = segments[i + 1:] if segment.base_offset in unflushed else []
        truncated = segment.recover(epochs, positions,
                                    _keeper(segment, quarantine, i < len(segments) - 1,
                                            salvage, cuts))
        segment.flush()  # what recovery kept becomes the new recovery point: make it durable
        if truncated and later:
            for gone in later:
                _remove_segment(gone, segment, quarantine, cuts)
            segments = segments[: i + 1]
            break
    for segment in segments[:-1]:
        segment.offset_index.trim_to_valid_size()
        segment.time_index.trim_to_valid_size()
    if segments:
        segments[-1].resize_indexes(config.segment_index_bytes)
    return segments


def _torn_at_end(segment: LogSegment) -> bool:
    """Whether the last batch of ``segment`` is torn; False when its headers cannot be read
    (damage left for the load to report: a clean shutdown is trusted, as Kafka does)."""
    try:
        return segment.last_whole_batch_end() != segment.size
    except (CorruptRecordError, InvalidRecordError):
        return False


def _keeper(segment: LogSegment, quarantine: Quarantine | None, later: bool, salvage: bool,
            cuts: list[str]):
    """The ``before_cut`` of ``segment.recover``: keep every tail it cuts in ``quarantine``,
    a corrupt batch and what follows it as well as a torn write (Kafka deletes them; kfs has
    no replica to fetch them from, and a torn write costs little to keep), logged and
    described in ``cuts``; without a quarantine the cut is only logged and described. With
    ``salvage``, damage that intact batches or ``later`` segments follow raises
    IntactDataAfterDamageError instead."""

    def keep(position: int, next_offset: int, problem: str | None) -> None:
        resume = None if quarantine is None else next_intact_batch(segment, position + 1,
                                                                   next_offset)
        if salvage and (later or resume is not None):
            raise IntactDataAfterDamageError(segment.log_path, position,
                                             problem or "a torn batch")
        what = problem or ("a batch that runs past the end of the file (a torn write, or a "
                           "corrupt batch size)")
        if resume is not None:
            what += f"; intact batches follow from byte {resume}"
        records = header_records(segment, position, segment.size)
        line = (f"recovery cut bytes {position}-{segment.size} of {segment.log_path.name} "
                f"(offsets from {next_offset}"
                + ("" if records is None else
                   f", {records} record{'' if records == 1 else 's'} by the headers")
                + f"): {what}")
        if quarantine is not None:
            quarantine.keep_bytes(segment.log_path, position, segment.size, reason=what,
                                  first_offset=next_offset, records=records)
            line += f"; the bytes cut are kept in the quarantine {quarantine.directory}"
        else:
            line += "; the bytes cut are deleted (no quarantine)"
        log.warning("%s: %s", segment.dir.name, line)
        cuts.append(line)
    return keep


def _remove_segment(segment: LogSegment, lost_by: LogSegment, quarantine: Quarantine | None,
                    cuts: list[str]) -> None:
    """Take ``segment`` out of the log after ``lost_by`` lost data: into ``quarantine`` when
    given (its .log; the indexes are derived from it), else deleted as Kafka does; described
    in ``cuts``."""
    line = (f"recovery took out {segment.log_path.name} ({segment.size} bytes, offsets from "
            f"{segment.base_offset}): it follows data lost by {lost_by.log_path.name}")
    if quarantine is None:
        log.warning("deleting %s: it follows data lost by %s", segment.log_path, lost_by.log_path)
        segment.delete()
        cuts.append(line + "; deleted (no quarantine)")
        return
    path = segment.log_path
    segment.close()
    quarantine.keep_file(path, reason=f"follows data lost by {lost_by.log_path.name}",
                         first_offset=segment.base_offset)
    log.warning("moved %s to %s instead of deleting it: it follows data lost by %s", path,
                quarantine.directory, lost_by.log_path)
    cuts.append(line + f"; moved whole into the quarantine {quarantine.directory}")
    for index_file in (offset_index_file, time_index_file, transaction_index_file):
        index_file(segment.dir, segment.base_offset).unlink(missing_ok=True)


def _replay_damage(segments: list[LogSegment], offset: int, error: Exception) -> LogDamage:
    """The damage that stopped the producer-state replay after ``offset``."""
    i = max(bisect.bisect_right([s.base_offset for s in segments], offset) - 1, 0)
    return LogDamage(segments[i].log_path.name, None, offset,
                     f"{error} (the producer state is replayed up to offset {offset} only)")


def _log_end_offset(segment: LogSegment) -> tuple[int, LogDamage | None]:
    """The log end offset (``readNextOffset`` of the last segment); when its batches cannot
    be read to the end, the offset after the last intact one, the segment's size is cut
    there for readers (the file is left as it is) and the damage returned."""
    try:
        if not segment.writable:  # another process may be mid-append: its torn batch waits
            segment.size = segment.last_whole_batch_end()
        return segment.read_next_offset(), None
    except (CorruptRecordError, InvalidRecordError) as e:
        size = segment.size
        end, next_offset, problem = readable_end(segment)
        segment.size = end
        # (a .log read whole to its end: the index lookup was what failed)
        return next_offset, LogDamage(segment.log_path.name, end, next_offset,
                                      problem if end < size else str(e))


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
    replay_producer_batches(state, segments, log_end_offset, recovered)


def replay_producer_batches(state: ProducerStateManager, segments: list[LogSegment],
                            log_end_offset: int, recovered: dict[int, list[int]] | None = None
                            ) -> None:
    """Apply to ``state`` the producer batches from its map end offset to ``log_end_offset``
    (the replay of :func:`rebuild_producer_state`; also how a read-only log follows the
    batches a broker appends). ``recovered`` gives, per recovered segment, its producer batch
    positions, and has their transaction indexes written again."""
    recovered = recovered or {}
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


def _finish_interrupted_operations(directory: Path, quarantine: Quarantine | None = None) -> None:
    """Delete ``*.deleted`` and ``*.cleaned`` files, drop ``.swap`` files of an unfinished
    cleaning, promote complete ones over the segments they replace, and delete index files
    whose ``.log`` is gone (``LogLoader.removeTempFilesAndCollectSwapFiles``). A quarantine
    that keeps everything gets the files of a log (``.log``, ``.log.*``) instead."""
    def unlink(path: Path, why: str) -> None:
        if quarantine is not None and quarantine.keep_all and LOG_SUFFIX in path.name:
            quarantine.keep_file(path, reason=why)
        else:
            path.unlink()

    swaps: list[Path] = []
    min_cleaned = None
    for path in sorted(directory.iterdir()):
        f = parse_segment_file_name(path.name)
        if not f or not f.extra:
            continue
        if f.extra == DELETED_SUFFIX:
            log.info("deleting %s left by an earlier deletion", path)
            unlink(path, "left by an earlier deletion")
        elif f.extra == CLEANED_SUFFIX:
            min_cleaned = f.offset if min_cleaned is None else min(min_cleaned, f.offset)
            log.info("deleting %s left by an interrupted cleaning", path)
            unlink(path, "left by an interrupted cleaning")
        else:
            swaps.append(path)
    for path in swaps:
        if min_cleaned is not None and offset_from_file_name(path.name) >= min_cleaned:
            log.info("deleting %s: its cleaning did not finish", path)
            unlink(path, "its cleaning did not finish")
    swaps = [p for p in swaps if p.exists()]
    _promote_swaps(directory, swaps, unlink)
    for path in directory.iterdir():
        f = parse_segment_file_name(path.name)
        if f and not f.extra and f.kind != LOG_SUFFIX and not log_file(directory, f.offset).exists():
            log.info("deleting %s: its .log is gone", path)
            path.unlink()


def _promote_swaps(directory: Path, swaps: list[Path], unlink) -> None:
    """Replace the segments a finished cleaning covered: delete the old segment files whose base
    falls in [first swap base, last swap's next offset), then strip ``.swap``."""
    log_swaps = sorted(p for p in swaps if p.name.endswith(LOG_SUFFIX + SWAP_SUFFIX))
    if log_swaps:
        first = offset_from_file_name(log_swaps[0].name)
        end = _next_offset_of_log_file(log_swaps[-1], offset_from_file_name(log_swaps[-1].name))
        for path in directory.iterdir():
            f = parse_segment_file_name(path.name)
            if f and not f.extra and first <= f.offset < end:
                log.info("deleting %s: replaced by a finished cleaning", path)
                unlink(path, "replaced by a finished cleaning")
    for path in swaps:
        log.info("promoting %s", path)
        disk_calls.rename(path, path.with_name(path.name[: -len(SWAP_SUFFIX)]))


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
