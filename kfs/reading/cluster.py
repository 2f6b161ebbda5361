"""A query over a live cluster (option ``kafka.bootstrap.servers``): the cluster is the source of
truth for partitions and offsets, the remote tier's live segments are read straight from the
object store, and only the offsets after them go through the brokers.

Planning (on the driver, :func:`plan_cluster_ranges`): the partitions the subscription names and
their offsets come from the cluster (``storage.cluster.client``: the log start offset, the high
watermark or at read_committed the last stable offset, offsets for timestamps), the live remote
segments from ``__remote_log_metadata`` read as a consumer (``storage.cluster.remote_metadata``,
only the metadata partitions that hold the partitions read). Each partition's ``[start, end)``
is cut where its remote tier ends: the offsets of live remote segments become ranges read from
the bucket (split at segment bases and index entries as a directory's are, each carrying the
metadata of its segments, so a task asks no broker anything), the rest ranges read through the
brokers. The join is exact: each offset is in one range, the ranges of a partition follow on,
and ``end`` is fixed at planning, so records produced, tiered or deleted locally while the read
runs change nothing (a remote segment deleted by retention meanwhile fails the task, as
``failOnDataLoss`` says).

Without ``remote.path`` (nor ``remote.config``) every offset is read through the brokers, as
Spark's Kafka source reads them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace

import pyarrow as pa

from storage.cluster.client import ClusterClient, PartitionInfo
from storage.cluster.remote_metadata import read_remote_log_metadata
from storage.cluster.tail import read_tail
from storage.directory import open_remote_tier
from storage.errors import UnknownTopicOrPartitionError
from storage.protocols import LogDirectory

from .columns import ROWS_PER_ARROW_BATCH, in_spark_schema, read_log_range
from .offsets import (
    EARLIEST,
    LATEST,
    DataLossError,
    OffsetRange,
    check_covers,
    split_by_bytes,
    split_by_count,
)
from .options import Bound, SourceOptions

__all__ = ["ClusterQuery", "plan_cluster_ranges", "read_cluster_range"]


def plan_cluster_ranges(opts: SourceOptions, max_bytes: int | None) -> list[OffsetRange]:
    """The ranges a batch query of a live cluster reads (see the module), in (topic, partition,
    offset) order, split for parallelism as a directory's are. Raises ValueError (bad bounds),
    DataLossError, UnknownTopicOrPartitionError, ClusterError (the cluster did not answer)."""
    query = ClusterQuery(opts)
    return query.ranges(query.offsets(opts.starting, True),
                        query.offsets(opts.ending, False), max_bytes)


class ClusterQuery:
    """One look at the cluster for a query (a batch, or a stream's micro-batch): the partitions
    the subscription names, as the cluster describes them now, their log start offsets and
    their latest offsets (the high watermark; the last stable offset at read_committed).
    Raises UnknownTopicOrPartitionError, ClusterError."""

    def __init__(self, opts: SourceOptions, client: ClusterClient | None = None) -> None:
        """``client``: the cluster's client to ask (a stream's, kept for its life), else one
        of the query's own."""
        self.opts = opts
        self.client = client or ClusterClient(opts.kafka)
        self.remote_ends: dict[tuple[str, int], int] = {}  # (see ranges)
        self.infos = _partitions(self.client, opts)
        self.partitions = [(p.topic, p.partition) for p in self.infos]
        self.earliest = self.client.offsets(self.partitions, "earliest")
        self.latest = self.client.offsets(self.partitions, "latest", opts.isolation_level)

    def offsets(self, bound: Bound, starting: bool) -> dict[tuple[str, int], int]:
        """The offset ``bound`` names in each partition (as ``kfs.reading.offsets
        .resolve_offset``, the cluster answering; timestamps in one ``ListOffsets``). Raises
        ValueError (bounds not naming every partition read, no offset for a starting
        timestamp under strategy "error")."""
        check_covers(bound, self.partitions, "startingOffsets" if starting else "endingOffsets")
        if bound.kind in ("earliest", "latest"):
            return dict(self.earliest if bound.kind == "earliest" else self.latest)
        if bound.kind == "offsets":
            return {tp: {EARLIEST: self.earliest[tp], LATEST: self.latest[tp]}.get(o, o)
                    for tp, o in ((tp, bound.per_partition[tp]) for tp in self.partitions)}
        timestamps = {tp: bound.timestamp if bound.kind == "timestamp"
                      else bound.per_partition[tp] for tp in self.partitions}
        found = self.client.offsets_for_times(timestamps, self.opts.isolation_level)
        return {tp: self._at_time(tp, found[tp], timestamps[tp], starting)
                for tp in self.partitions}

    def _at_time(self, tp: tuple[str, int], found: int | None, timestamp: int,
                 starting: bool) -> int:
        """The offset a timestamp found, or where none was (no record that late): the latest
        offset, or for a starting bound under strategy "error" ValueError."""
        if found is not None and found < self.latest[tp]:
            return found
        if starting and self.opts.by_timestamp_strategy == "error":
            raise ValueError(f"No offset matched from request of topic-partition "
                             f"{tp[0]}-{tp[1]} and timestamp {timestamp} "
                             "(startingOffsetsByTimestampStrategy=error)")
        return self.latest[tp]

    def ranges(self, begin: dict[tuple[str, int], int], end: dict[tuple[str, int], int],
               max_bytes: int | None, remote_tier: bool = True) -> list[OffsetRange]:
        """The ranges reading ``[begin, end)`` of each partition in ``end`` (a partition not in
        ``begin`` from its log start): from the bucket what the live remote segments hold,
        the rest through the brokers; without ``remote_tier`` all through the brokers (a
        stream's batch after the remote tier: no ``__remote_log_metadata`` read). Sets
        :attr:`remote_ends`: where each partition's remote tier ends (its live segments').
        Raises ValueError, DataLossError as a batch query's bounds do."""
        wanted = [p for p in self.infos if (p.topic, p.partition) in end]
        remote, live = _remote_tier(self.client, self.opts, wanted) if remote_tier else (None, {})
        ranges: list[OffsetRange] = []
        try:
            for p in wanted:
                tp = (p.topic, p.partition)
                name = f"{p.topic}-{p.partition}"
                if remote is not None and name in remote.partition_names():
                    self.remote_ends[tp] = remote.get(name).log_end_offset
                start = _check_range(tp, begin.get(tp, self.earliest[tp]), end[tp],
                                     self.earliest[tp], self.latest[tp], self.opts)
                if start < end[tp]:
                    ranges.extend(_cut(remote, live, p, OffsetRange(*tp, start, end[tp]),
                                       max_bytes))
        finally:
            if remote is not None:
                remote.close()
        return split_by_count(ranges, self.opts.max_records_per_partition,
                              self.opts.min_partitions)


def _partitions(client: ClusterClient, opts: SourceOptions) -> list[PartitionInfo]:
    """The partitions the subscription or assignment names, as the cluster describes them."""
    if opts.subscribe is not None:
        topics = list(opts.subscribe)
    elif opts.assign is not None:
        topics = sorted({t for t, _ in opts.assign})
    else:
        topics = [t for t in client.topic_names() if opts.matches(t, 0)]
    infos = [p for p in client.partitions(topics) if opts.matches(p.topic, p.partition)]
    missing = sorted(set(opts.assign or ()) - {(p.topic, p.partition) for p in infos})
    if missing:
        names = ", ".join(f"{t}-{n}" for t, n in missing)
        raise UnknownTopicOrPartitionError(f"assign names partitions {opts.where} does not "
                                           f"have: {names}")
    return sorted(infos, key=lambda p: (p.topic, p.partition))


def _remote_tier(client: ClusterClient, opts: SourceOptions, infos: list[PartitionInfo]
                 ) -> tuple[LogDirectory | None, dict[str, list]]:
    """The remote tier holding the live segments of the partitions read, and those segments'
    ``__remote_log_metadata`` records by partition name ((None, {}) without remote.path /
    remote.config: every offset then goes through the brokers)."""
    where = _remote_location(opts)
    if where is None:
        return None, {}
    cache = read_remote_log_metadata(client, infos)
    by_name = {f"{p.topic}-{p.partition}": cache.live_by_name(p.topic, p.partition)
               for p in infos}
    wanted = {(p.topic, p.partition) for p in infos}
    return open_remote_tier(where, opts.store, lambda t, n: (t, n) in wanted,
                            cache.live_metadata_by_directory(),
                            explicit=opts.remote_path is not None), by_name


def _remote_location(opts: SourceOptions) -> str | None:
    """remote.path, or the place remote.config's properties name; None: neither."""
    config, _ = opts.store.remote_storage()
    return opts.remote_path or (config.location if config is not None else None)


def _check_range(tp: tuple[str, int], start: int, end: int, log_start: int, log_end: int,
                 opts: SourceOptions) -> int:
    """``start``, checked as ``clamp_to_log`` checks a directory's range (the cluster's log
    start and end offsets)."""
    name = f"{tp[0]}-{tp[1]}"
    if end < start:
        raise ValueError(f"ending offset {end} < starting offset {start} for {name}")
    if end > log_end:
        raise ValueError(f"offset {end} of {name} is past its end offset {log_end}")
    if start < log_start:
        if opts.fail_on_data_loss:
            raise DataLossError(f"offsets {start}..{log_start - 1} of {name} are no longer in "
                                f"the log (log start offset {log_start}); set "
                                "failOnDataLoss=false to skip them")
        return min(log_start, end)
    return start


def _cut(remote: LogDirectory | None, live: dict[str, list], p: PartitionInfo,
         rng: OffsetRange, max_bytes: int | None) -> list[OffsetRange]:
    """``rng`` as ranges from the bucket (the live remote segments' offsets) and ranges through
    the brokers (the rest), in offset order."""
    name = f"{p.topic}-{p.partition}"
    if remote is None or name not in remote.partition_names():
        return [replace(rng, via_brokers=True)]
    log = remote.get(name)
    low, high = log.log_start_offset, log.log_end_offset  # [first, after the last) remote
    out = []
    if rng.start < min(low, rng.end):
        out.append(replace(rng, end=min(low, rng.end), via_brokers=True))
    inside = replace(rng, start=max(rng.start, low), end=min(rng.end, high))
    if inside.size > 0:
        parts = split_by_bytes(log, inside, max_bytes) if max_bytes else [inside]
        out.extend(replace(part, remote_segments=_segments_of(live[name], part))
                   for part in parts)
    if rng.end > max(high, rng.start):
        out.append(replace(rng, start=max(high, rng.start), via_brokers=True))
    return out


def _segments_of(segments: list, rng: OffsetRange) -> tuple:
    """The ``__remote_log_metadata`` records of the remote segments holding ``rng``."""
    return tuple(m for m in segments if m.start_offset < rng.end and m.end_offset >= rng.start)


def read_cluster_range(opts: SourceOptions, rng: OffsetRange, include_headers: bool,
                       rows_per_batch: int = ROWS_PER_ARROW_BATCH) -> Iterator[pa.RecordBatch]:
    """Arrow batches (``kfs.reading.columns``'s schema) of the data records of a range
    :func:`plan_cluster_ranges` planned: through the brokers, or from the bucket by its
    segments' metadata (no broker asked). Raises ClusterError, DataLossError (a remote
    segment deleted since planning), CorruptRecordError."""
    if rng.via_brokers:
        yield from in_spark_schema(read_tail(opts.kafka, rng.topic, rng.partition, rng.start,
                                             rng.end, opts.isolation_level, include_headers,
                                             rows_per_batch), rng.topic, rng.partition)
        return
    first = rng.remote_segments[0]
    directory = first.local_tiered_storage_path("").name
    live = {directory: {m.file_stem: m for m in rng.remote_segments}}
    remote = open_remote_tier(_remote_location(opts), opts.store,
                              lambda t, n: (t, n) == (rng.topic, rng.partition), live,
                              check_root=False, explicit=opts.remote_path is not None)
    try:
        log = remote.get(f"{rng.topic}-{rng.partition}")
        yield from read_log_range(log, rng, include_headers, opts.fail_on_data_loss,
                                  opts.isolation_level, rows_per_batch)
    finally:
        remote.close()
