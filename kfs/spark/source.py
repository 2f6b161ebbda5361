"""The ``kfs`` data source for PySpark's Python Data Source API: the shape of Spark's Kafka
source (``spark.read.format("kafka")``) over a kfs backing directory.

``KfsDataSource`` serves batch reads, streaming reads and batch writes; ``KfsPushdownDataSource``
is the same source whose batch reader also takes pushed filters (Spark refuses a reader with
``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is on, so ``register`` picks
the one that fits the session).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from storage.directory import remote_history
from storage.protocols import LogDirectory

from ..reading.offsets import (
    DEFAULT_MAX_BYTES_PER_PARTITION,
    OffsetRange,
    check_covers,
    check_remote_history,
    clamp_to_log,
    latest_offset,
    matching_logs,
    open_matching,
    plan_ranges,
    resolve_offset,
    split_by_bytes,
)
from .metadata import METADATA_SCHEMA, ClusterMetadataReader, is_cluster_metadata
from ..reading.options import SourceOptions, parse_options
from .schema import spark_schema


@dataclass
class RangePartition(InputPartition):
    """One Spark input partition: offsets ``[rng.start, rng.end)`` of one Kafka partition (None:
    nothing to read)."""

    rng: OffsetRange | None

    def __post_init__(self):
        InputPartition.__init__(self, self.rng)


class KfsDataSource(DataSource):
    """``spark.read.format("kfs").option("path", BACKING_DIR).option("subscribe", "orders")``.

    Options and schema are Spark's Kafka source's (see ``kfs.reading.options``); ``path`` is the
    backing directory; ``maxBytesPerPartition`` (default 32 MiB of ``.log``) bounds the bytes
    one input partition reads."""

    @classmethod
    def name(cls) -> str:
        return "kfs"

    def schema(self) -> StructType:
        if is_cluster_metadata(self.options):  # KRaft's metadata log: its own rows
            return METADATA_SCHEMA
        return spark_schema(_include_headers(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_cluster_metadata(self.options):
            return ClusterMetadataReader(self.options, schema)
        return KfsBatchReader(self.options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if is_cluster_metadata(self.options):
            raise ValueError("__cluster_metadata is read in batch queries only")
        return KfsStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        from .writer import KfsWriter  # the write path needs nothing of the read path

        return KfsWriter(self.options, schema, overwrite)


class KfsPushdownDataSource(KfsDataSource):
    """:class:`KfsDataSource` whose batch reader takes pushed filters on ``partition``,
    ``offset`` and ``timestamp`` (needs ``spark.sql.python.filterPushdown.enabled=true``)."""

    def reader(self, schema: StructType) -> DataSourceReader:
        if is_cluster_metadata(self.options):
            return ClusterMetadataReader(self.options, schema)
        return KfsPushdownBatchReader(self.options, schema)


def _include_headers(options) -> bool:
    return str(options.get("includeHeaders", "false")).strip().lower() == "true"


def _check_schema(schema: StructType, opts: SourceOptions) -> None:
    expected = spark_schema(opts.include_headers)
    if schema != expected:
        raise ValueError("the kfs source has a fixed schema (Spark's Kafka source schema) and "
                         f"cannot be set with a custom one: {schema.simpleString()}")


def _max_bytes(options) -> int:
    text = options.get("maxBytesPerPartition")
    if text is None:
        return DEFAULT_MAX_BYTES_PER_PARTITION
    if not str(text).isdigit() or int(text) <= 0:
        raise ValueError(f"maxBytesPerPartition must be a positive integer, not {text!r}")
    return int(text)


class KfsBatchReader(DataSourceReader):
    """Plans offset ranges on the driver (``partitions``) and reads each as Arrow batches in a
    task (``read``)."""

    def __init__(self, options, schema: StructType):
        self.opts = parse_options(options, streaming=False)
        _check_schema(schema, self.opts)
        self.max_bytes = _max_bytes(options)
        self.pushed = None

    def partitions(self) -> list[RangePartition]:
        if self.opts.cluster:  # (a live cluster: history from the bucket, the tail via brokers)
            from ..reading.cluster import plan_cluster_ranges

            ranges = plan_cluster_ranges(self.opts, self.max_bytes)
        else:
            ranges = plan_batch(self.opts, self.max_bytes, self.pushed)
        return [RangePartition(r) for r in ranges] or [RangePartition(None)]

    def read(self, partition: RangePartition):
        if partition.rng is None:
            return iter(())
        if self.opts.cluster:
            from ..reading.cluster import read_cluster_range

            return read_cluster_range(self.opts, partition.rng, self.opts.include_headers)
        from .reader import read_range  # (in the task's process alone: pyarrow, the codec)

        return read_range(self.opts.path, partition.rng, self.opts.include_headers,
                          self.opts.fail_on_data_loss, self.opts.isolation_level,
                          remote_path=self.opts.remote_path, store=self.opts.store)


class KfsPushdownBatchReader(KfsBatchReader):
    """:class:`KfsBatchReader` that narrows its ranges with pushed filters
    (see ``kfs.spark.pushdown``)."""

    def pushFilters(self, filters):
        if self.opts.cluster:  # (ranges over a cluster are not narrowed: Spark filters)
            return list(filters)
        from .pushdown import push

        self.pushed, remaining = push(list(filters))
        return remaining


def plan_batch(opts: SourceOptions, max_bytes: int, pushed=None) -> list[OffsetRange]:
    """The ranges a batch query reads: bounds resolved per partition, checked against the log,
    narrowed by pushed filters, split for parallelism. Raises ValueError (bad bounds) and
    DataLossError."""
    manager = open_matching(opts)
    try:
        return plan_ranges(manager, opts, max_bytes, pushed)
    finally:
        manager.close()


class KfsStreamReader(DataSourceStreamReader):
    """Micro-batches over per-partition Kafka offsets, ``{"topic": {"0": 42}}`` (Spark's
    ``KafkaSourceOffset`` JSON). Each batch ends at the partitions' log end offsets, or fewer
    offsets under ``maxOffsetsPerTrigger`` (shared out in proportion to what each partition
    has waiting, as Spark's Kafka source); partitions that appear later start at their earliest
    offset."""

    def __init__(self, options, schema: StructType):
        self.opts = parse_options(options, streaming=True)
        _check_schema(schema, self.opts)
        self.max_bytes = _max_bytes(options)
        self._cluster = None
        if self.opts.cluster:  # (a live cluster: the history from the bucket, then brokers)
            from .cluster_stream import ClusterStream

            self._cluster = ClusterStream(self.opts, self.max_bytes)

    def _logs(self, manager: LogDirectory):
        return matching_logs(manager, self.opts)

    def initialOffset(self) -> dict:
        if self._cluster is not None:
            return _as_json(self._cluster.initial())
        manager = open_matching(self.opts)
        try:
            logs = self._logs(manager)
            check_covers(self.opts.starting, logs, "startingOffsets")
            history = remote_history(self.opts.path) if self.opts.remote_path is None else {}
            starts = {tp: resolve_offset(self.opts.starting, log, True,
                                         self.opts.by_timestamp_strategy,
                                         self.opts.isolation_level)
                      for tp, log in logs.items()}
            for tp, log in logs.items():
                check_remote_history(log, self.opts.starting, starts[tp], history, self.opts)
            return _as_json(starts)
        finally:
            manager.close()

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        limit = self.opts.max_offsets_per_trigger
        return ReadMaxRows(limit) if limit else ReadAllAvailable()

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        if self._cluster is not None:
            begin, latest = self._cluster.latest(_from_json(start or {}))
        else:
            begin, latest = self._latest(start)
        max_rows = getattr(limit, "max_rows", None)
        if max_rows is not None:
            latest = _rate_limit(begin, latest, max_rows)
        return _as_json(latest)

    def _latest(self, start: dict | None):
        """(where each partition's batch begins, its latest offset) in the directory."""
        manager = open_matching(self.opts)
        try:
            logs = self._logs(manager)
            begin = _from_json(start or {})
            begin = {tp: begin.get(tp, log.log_start_offset) for tp, log in logs.items()}
            latest = {tp: latest_offset(log, self.opts.isolation_level) for tp, log in logs.items()}
        finally:
            manager.close()
        return begin, latest

    def reportLatestOffset(self) -> dict:
        if self._cluster is not None:
            return _as_json(self._cluster.reported_latest())
        manager = open_matching(self.opts)
        try:
            return _as_json({tp: latest_offset(log, self.opts.isolation_level)
                             for tp, log in self._logs(manager).items()})
        finally:
            manager.close()

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        begin, finish = _from_json(start), _from_json(end)
        if self._cluster is not None:
            return [RangePartition(r) for r in self._cluster.ranges(begin, finish)]
        manager = open_matching(self.opts)
        try:
            ranges = []
            for tp, end_offset in sorted(finish.items()):
                log = manager.get(f"{tp[0]}-{tp[1]}")
                rng = OffsetRange(*tp, begin.get(tp, log.log_start_offset), end_offset)
                rng = clamp_to_log(rng, log, self.opts.fail_on_data_loss)
                if rng.size > 0:
                    ranges.extend(split_by_bytes(log, rng, self.max_bytes))
        finally:
            manager.close()
        return [RangePartition(r) for r in ranges]

    def read(self, partition: RangePartition):
        if self.opts.cluster:
            from ..reading.cluster import read_cluster_range

            return read_cluster_range(self.opts, partition.rng, self.opts.include_headers)
        from .reader import read_range  # (in the task's process alone: pyarrow, the codec)

        return read_range(self.opts.path, partition.rng, self.opts.include_headers,
                          self.opts.fail_on_data_loss, self.opts.isolation_level,
                          remote_path=self.opts.remote_path, store=self.opts.store)

    def commit(self, end: dict) -> None:
        pass  # offsets live in Spark's checkpoint; nothing to release here


def _as_json(offsets: dict[tuple[str, int], int]) -> dict:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = offset
    return out


def _from_json(offsets: dict) -> dict[tuple[str, int], int]:
    return {(topic, int(p)): int(o) for topic, parts in offsets.items() for p, o in parts.items()}


def _rate_limit(begin: dict, latest: dict, max_rows: int) -> dict:
    """End offsets taking at most ``max_rows`` offsets in all, each partition getting a share
    proportional to its backlog (Spark's ``KafkaMicroBatchStream.rateLimit``)."""
    backlog = {tp: max(latest[tp] - begin[tp], 0) for tp in latest}
    total = sum(backlog.values())
    if total <= max_rows:
        return latest
    out = {}
    for tp, waiting in backlog.items():
        share = max_rows * waiting / total
        # as Spark: a share below one offset is rounded up, so no partition starves
        share = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = begin[tp] + min(waiting, share)
    return out
