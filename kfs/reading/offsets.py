"""Offset ranges: which offsets of which partitions a query reads, resolved through the engine's
indexes (Spark's ``KafkaOffsetReader`` and ``KafkaOffsetRangeCalculator`` over kfs logs).

A range is ``[start, end)`` of one partition. Starting/ending bounds become offsets through
``Log.log_start_offset`` / ``log_end_offset`` (earliest/latest) and ``Log.find_offset_by_timestamp``
(the first offset whose timestamp is >= t, as ListOffsets answers). Large ranges are split at
segment bases and offset-index entries, so each input partition reads about
``max_bytes`` of ``.log`` and every core has work; nothing here reads a record.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from storage.directory import StoreOptions, open_log_directory, remote_history
from storage.errors import UnknownTopicOrPartitionError
from storage.isolation import IsolationLevel
from storage.location import Location
from storage.protocols import LogDirectory, PartitionLog

from .options import EARLIEST, LATEST, Bound, SourceOptions

DEFAULT_MAX_BYTES_PER_PARTITION = 32 << 20


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[start, end)`` of partition ``topic``-``partition``. Of a live cluster's
    partition (``kfs.reading.cluster``): ``remote_segments``, the live remote segments it reads
    from the bucket (their ``__remote_log_metadata`` records), or ``via_brokers``: read through
    the brokers."""

    topic: str
    partition: int
    start: int
    end: int
    remote_segments: tuple = ()
    via_brokers: bool = False

    @property
    def size(self) -> int:
        return self.end - self.start


class DataLossError(ValueError):
    """Offsets a query needs are no longer in the log (retention/DeleteRecords moved the log
    start offset past them) and ``failOnDataLoss`` is true."""


def open_log(backing_dir: str, topic: str, partition: int, remote_path: str | None = None,
             store: StoreOptions = StoreOptions(), fail_on_data_loss: bool = True
             ) -> PartitionLog:
    """One partition's log, read-only, for a task, through the one door
    (``storage.directory.open_log_directory``: a directory, a URI, with its remote tier; the
    stores' roots were checked when the query was planned). Raises
    UnknownTopicOrPartitionError when the partition is missing.

    What opening costs is paid once per process where it can be (Spark reuses a Python worker
    for the next task): object stores are the process's (``ObjectStore.shared``) and
    ``__remote_log_metadata`` is folded again only when its files changed."""
    directory = open_log_directory(backing_dir, remote=remote_path, options=store,
                                   partitions=lambda t, p: (t, p) == (topic, partition),
                                   fail_on_data_loss=fail_on_data_loss, check_root=False)
    return directory.get(f"{topic}-{partition}")  # a read-only directory holds nothing but its logs


def open_matching(opts: SourceOptions) -> LogDirectory:
    """The log directory of ``opts.path``, read-only, holding only the partitions the query
    reads."""
    return open_log_directory(opts.path, remote=opts.remote_path, options=opts.store,
                              partitions=opts.matches,
                              fail_on_data_loss=opts.fail_on_data_loss)


def matching_logs(manager: LogDirectory, opts: SourceOptions
                  ) -> dict[tuple[str, int], PartitionLog]:
    """The logs the subscription or assignment names, by (topic, partition). Raises ValueError
    when ``assign`` names a partition the backing directory does not hold."""
    logs = {}
    for name in manager.partition_names():
        log = manager.get(name)
        if opts.matches(log.topic, log.partition):
            logs[(log.topic, log.partition)] = log
    missing = sorted(set(opts.assign or ()) - set(logs))
    if missing:
        names = ", ".join(f"{t}-{p}" for t, p in missing)
        raise ValueError(f"assign names partitions that do not exist in {opts.path}: {names}")
    return logs


def check_topics_exist(logs: dict[tuple[str, int], PartitionLog], opts: SourceOptions) -> None:
    """UnknownTopicOrPartitionError naming each ``subscribe`` topic of which no partition was
    found and where it was looked for, as Spark's Kafka source fails a batch query of a topic
    that does not exist (a query that reads nothing would otherwise say nothing)."""
    missing = sorted(set(opts.subscribe or ()) - {topic for topic, _ in logs})
    if missing:
        where = Location.parse(opts.path).display
        if opts.remote_path:
            where += f" (with its remote tier {Location.parse(opts.remote_path).display})"
        raise UnknownTopicOrPartitionError(
            f"topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} not found in {where}: "
            "no <topic>-<N> partition directory of it there")


def check_remote_history(log: PartitionLog, bound: Bound, start: int,
                         history: dict[str, tuple[int, int]], opts: SourceOptions) -> None:
    """DataLossError when the query would start in the history of a tiered partition that is
    in its remote tier only (``history``: ``storage.directory.remote_history`` of a broker's
    log directory read without ``remote.path``), naming the offsets and the option that reads
    them; the local log's first offset is not the partition's log start then. Nothing when
    not ``failOnDataLoss`` (the local log is read alone)."""
    first_remote = history.get(log.name, (None,))[0]
    if first_remote is None or first_remote >= log.log_start_offset or not opts.fail_on_data_loss:
        return
    if bound.kind == "earliest" or start < log.log_start_offset:
        raise DataLossError(
            f"{log.name} is tiered: offsets {first_remote}..{log.log_start_offset - 1} are in "
            f"its remote tier, not in {Location.parse(opts.path).display}: give option "
            "remote.path (the RemoteStorageManager's root) to read them, or "
            "failOnDataLoss=false to read the local log alone")


def latest_offset(log: PartitionLog,
                  isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> int:
    """Where "latest" is: the last stable offset for read_committed, else the log end offset
    (as a Kafka consumer's end offsets under each ``isolation.level``)."""
    return log.reader.visible_end(isolation)


def resolve_offset(bound: Bound, log: PartitionLog, starting: bool, strategy: str = "error",
                   isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> int:
    """The offset ``bound`` names in ``log``. Timestamps map to the first offset with a
    timestamp >= t; when none has one, an ending bound is the log end offset and a starting one
    follows ``startingOffsetsByTimestampStrategy`` ("error" raises ValueError, "latest")."""
    tp = (log.topic, log.partition)
    if bound.kind == "earliest":
        return log.log_start_offset
    if bound.kind == "latest":
        return latest_offset(log, isolation)
    if bound.kind == "offsets":
        offset = bound.per_partition[tp]
        return {EARLIEST: log.log_start_offset,
                LATEST: latest_offset(log, isolation)}.get(offset, offset)
    timestamp = bound.timestamp if bound.kind == "timestamp" else bound.per_partition[tp]
    record = log.reader.find_offset_by_timestamp(timestamp, isolation)
    if record is not None:
        return record.offset
    if starting and strategy == "error":
        raise ValueError(f"No offset matched from request of topic-partition {log.name} and "
                         f"timestamp {timestamp} (startingOffsetsByTimestampStrategy=error)")
    return latest_offset(log, isolation)


def check_covers(bound: Bound, partitions: Iterable[tuple[str, int]], name: str) -> None:
    """Spark requires per-partition JSON bounds to name every partition read."""
    if bound.kind not in ("offsets", "timestamps"):
        return
    wanted = set(partitions)
    if set(bound.per_partition) != wanted:
        fmt = lambda tps: ", ".join(f"{t}-{p}" for t, p in sorted(tps))  # noqa: E731
        raise ValueError(f"{name} must name every partition read (-1 latest, -2 earliest); "
                         f"specified: {fmt(bound.per_partition)}; read: {fmt(wanted)}")


def clamp_to_log(rng: OffsetRange, log: PartitionLog, fail_on_data_loss: bool) -> OffsetRange:
    """``rng`` checked against what the log holds: offsets below the log start offset are data
    loss (DataLossError when ``fail_on_data_loss``, else skipped). Raises ValueError for a range
    that starts past its end or reaches past the log end offset."""
    lso, leo = log.log_start_offset, log.log_end_offset
    if rng.end < rng.start:
        raise ValueError(f"ending offset {rng.end} < starting offset {rng.start} for {log.name}")
    if rng.end > leo:
        raise ValueError(f"offset {rng.end} of {log.name} is past its log end offset {leo}")
    if rng.start < lso:
        if fail_on_data_loss:
            raise DataLossError(
                f"offsets {rng.start}..{lso - 1} of {log.name} are no longer in the log (log start "
                f"offset {lso}); set failOnDataLoss=false to skip them")
        rng = replace(rng, start=min(lso, rng.end))
    return rng


def split_by_bytes(log: PartitionLog, rng: OffsetRange, max_bytes: int) -> list[OffsetRange]:
    """Cut ``rng`` into the fewest consecutive ranges of at most about ``max_bytes`` of
    ``.log``, of about equal size (so the tasks of a read finish together), at segment bases
    and offset-index entries (so each reader starts from an index lookup)."""
    marks = _byte_marks(log, rng.start, rng.end, max(max_bytes // 16, 1))
    if len(marks) < 2:
        return [rng]
    first = marks[0][1]
    total = _end_position(log, rng.end) - first
    parts = math.ceil(total / max_bytes)
    positions = [position for _, position in marks]
    cuts = [rng.start]
    for k in range(1, parts):
        target = first + total * k // parts
        i = bisect.bisect_left(positions, target)
        nearest = min((j for j in (i - 1, i) if 0 <= j < len(marks)),
                      key=lambda j: abs(positions[j] - target))
        if cuts[-1] < marks[nearest][0] < rng.end:
            cuts.append(marks[nearest][0])
    cuts.append(rng.end)
    return [replace(rng, start=a, end=b) for a, b in zip(cuts, cuts[1:]) if b > a]


def _end_position(log: PartitionLog, end: int) -> int:
    """Where offset ``end`` starts, as a byte position counted over the whole log (the offset
    index's entry at or before it: a close bound); the log's size for the log end offset."""
    before, segments = 0, log.segments.all()
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else log.log_end_offset
        if end < next_base:
            return before + segment.offset_index.lookup(end)[1]
        before += segment.size
    return before


def _byte_marks(log: PartitionLog, start: int, end: int, step: int) -> list[tuple[int, int]]:
    """(offset, byte position counted over the whole log) at ``start``, at each segment base
    inside the range and at offset-index entries about every ``step`` bytes."""
    marks: list[tuple[int, int]] = []
    segments = log.segments.all()
    before = 0
    for i, segment in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        if segment.base_offset >= end:
            break
        if next_base is not None and next_base <= start:
            before += segment.size
            continue
        low = max(start, segment.base_offset)
        low_pos = segment.offset_index.lookup(low)[1] if low > segment.base_offset else 0
        marks.append((low, before + low_pos))
        marks.extend((offset, before + pos)
                     for offset, pos in _index_marks(segment, low, end, low_pos, step))
        before += segment.size
    return marks


def _index_marks(segment, low: int, end: int, position: int, step: int):
    index = segment.offset_index
    slots = range(index.entries)
    while True:
        position += step
        if position >= segment.size:
            return
        slot = bisect.bisect_right(slots, position, key=lambda s: index.entry(s)[1]) - 1
        if slot < 0:
            continue
        offset, pos = index.entry(slot)
        if offset >= end:
            return
        if offset > low:
            yield offset, pos
            low, position = offset, pos


def split_by_count(ranges: list[OffsetRange], max_records: int | None,
                   min_partitions: int | None) -> list[OffsetRange]:
    """Spark's ``maxRecordsPerPartition`` (ranges cut into equal parts of at most that many
    offsets) and ``minPartitions`` (the largest ranges halved until there are that many)."""
    out: list[OffsetRange] = []
    for rng in ranges:
        parts = math.ceil(rng.size / max_records) if max_records and rng.size else 1
        out.extend(_equal_parts(rng, parts))
    while min_partitions and len(out) < min_partitions:
        largest = max(range(len(out)), key=lambda i: out[i].size, default=None)
        if largest is None or out[largest].size < 2:
            break
        out[largest:largest + 1] = _equal_parts(out[largest], 2)
    return out


def _equal_parts(rng: OffsetRange, parts: int) -> list[OffsetRange]:
    bounds = [rng.start + rng.size * i // parts for i in range(parts + 1)]
    return [replace(rng, start=a, end=b) for a, b in zip(bounds, bounds[1:])]


def plan_ranges(manager: LogDirectory, opts: SourceOptions, max_bytes: int | None,
                pushed=None) -> list[OffsetRange]:
    """The ranges a batch query reads from ``manager`` (``open_matching(opts)``): bounds
    resolved per partition through the indexes, checked against the log, narrowed by pushed
    filters (``kfs.spark.pushdown``), split for parallelism (``max_bytes`` of ``.log`` per
    range, ``maxRecordsPerPartition``, ``minPartitions``; None: one range per partition),
    in (topic, partition, offset) order. Raises ValueError (bad bounds), DataLossError and
    UnknownTopicOrPartitionError, as Spark's Kafka source fails such a query."""
    logs = matching_logs(manager, opts)
    check_topics_exist(logs, opts)
    check_covers(opts.starting, logs, "startingOffsets")
    check_covers(opts.ending, logs, "endingOffsets")
    history = remote_history(opts.path) if opts.remote_path is None else {}
    ranges = []
    for (topic, partition), log in sorted(logs.items()):
        if pushed is not None and not pushed.allows_partition(partition):
            continue
        start = resolve_offset(opts.starting, log, True, opts.by_timestamp_strategy,
                               opts.isolation_level)
        check_remote_history(log, opts.starting, start, history, opts)
        end = resolve_offset(opts.ending, log, False, isolation=opts.isolation_level)
        rng = clamp_to_log(OffsetRange(topic, partition, start, end), log,
                           opts.fail_on_data_loss)
        if pushed is not None:
            rng = _narrow(rng, log, pushed)
        if rng.size > 0:
            ranges.extend(split_by_bytes(log, rng, max_bytes) if max_bytes else [rng])
    return split_by_count(ranges, opts.max_records_per_partition, opts.min_partitions)


def _narrow(rng: OffsetRange, log, pushed) -> OffsetRange:
    start = max(rng.start, pushed.min_offset)
    end = min(rng.end, pushed.max_offset)
    if pushed.min_timestamp is not None and start < end:
        record = log.reader.find_offset_by_timestamp(pushed.min_timestamp)
        start = max(start, record.offset if record is not None else end)
    return OffsetRange(rng.topic, rng.partition, min(start, end), end)
