"""Batch writes (``df.write.format("kfs")``) with the columns of Spark's Kafka sink, each task
a Kafka transaction committed or aborted by the driver.

Columns: ``value`` (string or binary, required), optional ``key`` (string or binary),
``headers`` (array<struct<key:string,value:binary>>), ``topic`` (string; the ``topic`` option
overrides it) and ``partition`` (int; null or absent: Kafka's default partitioner).

Guarantee: each task attempt writes its records as transactional batches of its own producer id
(``job base + task attempt id``, the base random per job) and records nothing else. The driver
then writes the markers (``DataSourceWriter.commit``): COMMIT for the attempts Spark committed,
ABORT for every other open transaction of the job's producer ids (failed, retried or speculative
attempts), found by scanning the partitions from where they ended when the job started. A
``read_committed`` reader thus sees each row once; a ``read_uncommitted`` reader (the default,
as in Kafka) also sees the batches of failed attempts, i.e. at-least-once, as Spark's Kafka sink.
A transaction the driver cannot end (the driver died, or a task attempt still wrote after
the driver aborted the job) is aborted by the mount once open longer than
``transaction.timeout.ms``, its producer fenced, as Kafka's coordinator does; offline,
``kfs transactions BACKING_DIR find-hanging`` finds it and ``abort`` ends it. Markers go
partition by partition, so a commit failing half-way can leave some partitions committed.

Appends go through ``Log.append_as_leader`` under the backing directory's ``.lock`` (the one
writer at a time; tasks wait for each other). When a writable kfs mount serves the directory
(it holds the lock, as a broker owns its logs), tasks hand their batches to it instead, through
its ``<topic>-<N>/append-batches`` files: the mount assigns the offsets, so tasks and mount
writers never tear or duplicate offsets. On a cluster, that needs the mount on each executor's
machine; otherwise write while the directory is unmounted (or mounted read-only).
"""

from __future__ import annotations

import array
import logging
import secrets
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from crc32c import crc32c
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from storage import LogManager
from storage.clock import now_ms
from storage.config import LogConfig
from storage.directory import check_writable, open_log_directory
from storage.records.batch import encode_arrow, seal_in_place
from storage.records.control import ControlRecordType, build_control_batch
from storage.records.framing import RECORD_BATCH_OVERHEAD
from storage.topic_partition import parse_partition_dir_name

log = logging.getLogger(__name__)

from kfs.mount_table import find_mount
from .partitioner import StickyPartitioner, assign_partitions
from ..reading.columns import arrow_scalar

PRODUCER_EPOCH = 0
# The driver's markers carry the next epoch, as a coordinator bumps it when it ends a
# transaction for good: a stray task attempt still writing with the old epoch is then fenced
# (InvalidProducerEpochError) instead of opening a transaction nobody would close.
MARKER_EPOCH = PRODUCER_EPOCH + 1
_BATCH_BYTES = 512 * 1024  # producer batches stay well under max.message.bytes (1 MiB)
# a batch led by a larger record stops at the default max.message.bytes (a broker refuses more)
_MAX_RECORDS_BYTES = LogConfig.max_message_bytes - RECORD_BATCH_OVERHEAD
_US_PER_MS = arrow_scalar(1000, pa.int64())
TRANSACTIONAL_ATTRIBUTES = 0x10  # uncompressed, CreateTime, transactional
DEFAULT_LOCK_TIMEOUT_S = 600.0


@dataclass
class KfsCommitMessage(WriterCommitMessage):
    """What a task wrote: its producer id and the partitions (``<topic>-<N>``) it wrote to."""

    producer_id: int
    partitions: list[str] = field(default_factory=list)
    rows: int = 0


def _check_schema(schema: StructType, topic_option: str | None) -> None:
    """Spark's Kafka sink checks (``KafkaWriter.validateQuery``); raises ValueError."""
    types = {f.name.lower(): f.dataType for f in schema.fields}
    rules = {"value": (StringType, BinaryType), "key": (StringType, BinaryType),
             "topic": (StringType,), "partition": (IntegerType,)}
    if "value" not in types:
        raise ValueError("Required attribute 'value' not found")
    for name, allowed in rules.items():
        if name in types and not isinstance(types[name], allowed):
            kinds = " or ".join(t.__name__.replace("Type", "").lower() for t in allowed)
            raise ValueError(f"{name} attribute type must be a {kinds}, not "
                             f"{types[name].simpleString()}")
    if "headers" in types and types["headers"].simpleString() != \
            "array<struct<key:string,value:binary>>":
        raise ValueError("headers attribute type must be array<struct<key:string,value:binary>>")
    if topic_option is None and "topic" not in types:
        raise ValueError("topic option required when no 'topic' attribute is present")


class KfsWriter(DataSourceArrowWriter):
    """The batch writer; options ``path`` (backing directory), ``topic`` and
    ``lockTimeoutMs`` (how long a task waits for the directory's lock, default 600000)."""

    def __init__(self, options, schema: StructType, overwrite: bool):
        if overwrite:
            raise ValueError("kfs topics are append-only: use mode('append')")
        self.path = options.get("path")
        if not self.path:
            raise ValueError('option "path" (the backing directory) is required')
        self.path = str(check_writable(self.path).path)  # (before any task runs)
        self.topic = options.get("topic")
        _check_schema(schema, self.topic)
        self.lock_timeout_s = int(options.get("lockTimeoutMs", DEFAULT_LOCK_TIMEOUT_S * 1000)) / 1000
        self.producer_id_base = secrets.randbits(30) << 32  # this job's ids: base + attempt id
        self.start_offsets = _log_end_offsets(self.path)

    # -- tasks ------------------------------------------------------------------------------

    def write(self, iterator: Iterator) -> KfsCommitMessage:
        """Partition and encode each Arrow batch column-wise (the compiled codec: murmur2 and
        the sticky partitioner over whole columns, records straight from Arrow buffers), then
        append each partition's transactional batches in one go."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        producer_id = self.producer_id_base + ((ctx.taskAttemptId() if ctx else 0) & 0xFFFFFFFF)
        counts = _partition_counts(self.path)
        sticky: dict[str, StickyPartitioner] = {}
        transactions: dict[str, _Transaction] = {}
        rows = 0
        for batch in iterator:
            for topic, part in self._by_topic(batch):
                n = counts.get(topic, 1)
                partitions = _partitions(part, topic, n,
                                         sticky.setdefault(topic, StickyPartitioner(n)))
                for p, rows_of_p in _by_partition(part, partitions):
                    name = f"{topic}-{p}"
                    transactions.setdefault(name, _Transaction(producer_id)).add(rows_of_p)
                rows += part.num_rows
        if transactions:
            with self._appender() as append:
                for name, txn in sorted(transactions.items()):
                    append(name, txn.batches)
        return KfsCommitMessage(producer_id, sorted(transactions), rows)

    def _by_topic(self, batch: pa.RecordBatch) -> Iterator[tuple[str, pa.RecordBatch]]:
        """(topic, its rows) of an Arrow batch, columns named in lower case."""
        batch = batch.rename_columns([name.lower() for name in batch.schema.names])
        if self.topic:
            yield self.topic, batch
            return
        topics = batch.column("topic")
        if topics.null_count:
            raise ValueError("null topic present in the data; use the topic option")
        for topic in pc.unique(topics).to_pylist():
            yield topic, batch.filter(pc.equal(topics, topic))

    def _appender(self) -> _Appender:
        return _Appender(self.path, self.lock_timeout_s)

    # -- driver -----------------------------------------------------------------------------

    def commit(self, messages: list[KfsCommitMessage | None]) -> None:
        """COMMIT the committed attempts' transactions, ABORT any other of this job's."""
        committed = {(m.producer_id, p) for m in messages if m is not None for p in m.partitions}
        self._end_transactions(committed)

    def abort(self, messages: list[KfsCommitMessage | None]) -> None:
        """ABORT every transaction of this job."""
        self._end_transactions(set())

    def _end_transactions(self, committed: set[tuple[int, str]]) -> None:
        with self._appender() as append:
            manager = open_log_directory(self.path)  # the tasks' batches are on disk
            try:
                open_txns = set()
                for name in manager.partition_names():
                    log = manager.get(name)
                    start = self.start_offsets.get(name, log.log_start_offset)
                    open_txns |= {(pid, name) for pid in self._open_producers(log, start)}
            finally:
                manager.close()
            for pid, name in sorted(open_txns):
                marker = ControlRecordType.COMMIT if (pid, name) in committed \
                    else ControlRecordType.ABORT
                append(name, build_control_batch(0, pid, MARKER_EPOCH, marker,
                                                 timestamp_ms=now_ms()))

    def _open_producers(self, log, start: int) -> set[int]:
        """This job's producer ids with data but no marker in ``log`` from ``start`` on."""
        low, high = self.producer_id_base, self.producer_id_base + (1 << 32)
        open_ids: set[int] = set()
        for segment in log.segments.all():
            if segment.read_next_offset() <= start:
                continue
            position = segment.offset_index.lookup(start)[1] if segment.base_offset <= start else 0
            for _, header in segment.scan_batches(position):
                if header.last_offset < start or not low <= header.producer_id < high:
                    continue
                if header.is_control_batch:
                    open_ids.discard(header.producer_id)
                elif header.is_transactional:
                    open_ids.add(header.producer_id)
        return open_ids


class _Appender:
    """``append(partition, batches)`` for the span of a ``with`` block: through the kfs mount
    serving the directory when there is one (its ``append-batches`` files), else through the
    engine with the ``.lock`` held only for the block. An engine append is flushed before it
    returns (a failed fsync takes it back: a task or commit told of an error never finds its
    batches stored), so a close that fails afterwards (a checkpoint, the clean-shutdown
    marker: the next open recovers) is logged, not the block's failure."""

    def __init__(self, path: str, timeout_s: float):
        self._path, self._timeout_s = path, timeout_s
        self._manager: LogManager | None = None

    def __enter__(self):
        mount = find_mount(self._path)
        if mount is not None:
            return lambda name, data: _append_through_mount(mount, name, data)
        self._manager = open_log_directory(self._path, read_only=False,
                                           lock_timeout_s=self._timeout_s)
        return lambda name, data: _get_or_create(self._manager, name).append_as_leader(
            data, sync=True)

    def __exit__(self, *exc) -> None:
        if self._manager is not None:
            try:
                self._manager.close()
            except OSError as error:  # (every append is durable already)
                log.warning("closing %s after the appends: %s", self._path, error)


def _append_through_mount(mount: Path, name: str, data: bytes) -> None:
    """Write whole batches to the mount's ``append-batches`` (a missing first partition of a
    topic is made with mkdir, as ``_get_or_create`` does). Raises OSError with the mount's
    errno (EINVAL, EFBIG, ENOSPC...)."""
    directory = mount / name
    if not directory.exists():
        topic, partition = parse_partition_dir_name(name)
        if partition != 0:
            raise ValueError(f"partition {name} does not exist")
        directory.mkdir(exist_ok=True)
    with open(directory / "append-batches", "ab", buffering=0) as f:
        view = memoryview(data)
        while view:
            view = view[f.write(view):]


def _partitions(batch: pa.RecordBatch, topic: str, n: int,
                sticky: StickyPartitioner) -> pa.Array:
    """The partition of each row: its ``partition`` column, else Kafka's default partitioner.
    Raises ValueError for a partition the topic does not have."""
    rows = batch.num_rows
    out = array.array("i", [-1]) * rows
    if "partition" in batch.schema.names:
        given = batch.column("partition")
        filled = given.fill_null(-1).cast(pa.int32())
        out = array.array("i", memoryview(filled.buffers()[1]).cast("i")[
            filled.offset:filled.offset + rows])
        if given.null_count < len(given):
            low, high = pc.min_max(given).values()
            if low.as_py() < 0 or high.as_py() >= n:
                bad = low.as_py() if low.as_py() < 0 else high.as_py()
                raise ValueError(f"partition {bad} of topic {topic} does not exist "
                                 f"(it has {n})")
    if -1 in out:
        assign_partitions(rows, _binary(batch, "key"), _binary(batch, "value"), out, n, sticky)
    return pa.Array.from_buffers(pa.int32(), rows, [None, pa.py_buffer(out)])


def _by_partition(batch: pa.RecordBatch, partitions: pa.Array
                  ) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(partition, its rows in their order) of a batch: one stable sort, then slices (none
    when every row goes to one partition, as with a one-partition topic)."""
    if not batch.num_rows:
        return
    low, high = pc.call_function("min_max", [partitions]).values()
    if low == high:
        yield low.as_py(), batch
        return
    order = pc.sort_indices(partitions)  # stable: rows keep their order within a partition
    batch, partitions = batch.take(order), partitions.take(order)
    start = 0
    for run in pc.value_counts(partitions).to_pylist():  # in order of appearance: sorted
        yield run["values"], batch.slice(start, run["counts"])
        start += run["counts"]


def _binary(batch: pa.RecordBatch, name: str) -> tuple | None:
    """A string or binary column as the codec takes it: (validity, offsets, data, offset)."""
    if name not in batch.schema.names:
        return None
    array = batch.column(name)
    if pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type):
        array = array.cast(pa.binary())
    validity, offsets, data = array.buffers()[:3]
    return (validity if array.null_count else None, offsets, data, array.offset)


def _headers(batch: pa.RecordBatch) -> tuple | None:
    if "headers" not in batch.schema.names:
        return None
    lists = batch.column("headers")
    entries = lists.values.flatten()  # key and value arrays of the struct
    keys, values = (pa.RecordBatch.from_arrays(entries, ["k", "v"]),) * 2
    return (lists.buffers()[0] if lists.null_count else None, lists.buffers()[1], lists.offset,
            _binary(keys, "k"), _binary(values, "v"))


def _timestamps(batch: pa.RecordBatch) -> tuple | None:
    if "timestamp" not in batch.schema.names:
        return None
    # Spark's are microseconds; call_function: pc.divide's wrapper costs more than the divide
    ms = pc.call_function("divide", [batch.column("timestamp").cast(pa.int64()), _US_PER_MS])
    return (ms.buffers()[0] if ms.null_count else None, ms.buffers()[1], ms.offset)


class _Transaction:
    """A task's batches for one partition, as a transactional producer (``RecordAccumulator``
    with ``transactional.id``) builds them: at most _BATCH_BYTES of records each, sequence
    numbers from 0, encoded from the rows' Arrow buffers and sealed in one growing bytearray
    (no joining copy; the engine stamps the offsets into it)."""

    def __init__(self, producer_id: int):
        self.producer_id = producer_id
        self.batches = bytearray()
        self.sequence = 0

    def add(self, rows: pa.RecordBatch) -> None:
        columns = (_binary(rows, "value"), _binary(rows, "key"), _headers(rows),
                   _timestamps(rows))
        start, now = 0, now_ms()
        while start < rows.num_rows:
            position = len(self.batches)
            count, first_ts, max_ts = encode_arrow(start, rows.num_rows, *columns, now,
                                                   _BATCH_BYTES, self.batches,
                                                   RECORD_BATCH_OVERHEAD, _MAX_RECORDS_BYTES)
            seal_in_place(self.batches, position, count, 0, first_ts, max_ts,
                          TRANSACTIONAL_ATTRIBUTES, self.producer_id, PRODUCER_EPOCH,
                          self.sequence, crc32c)
            self.sequence += count
            start += count


def _log_end_offsets(path: str) -> dict[str, int]:
    if not Path(path).is_dir():
        return {}
    manager = open_log_directory(path)
    try:
        return {name: manager.get(name).log_end_offset for name in manager.partition_names()}
    finally:
        manager.close()


def _partition_counts(path: str) -> dict[str, int]:
    """Partitions per topic, from the directory names (``<topic>-<N>``)."""
    counts: dict[str, int] = defaultdict(int)
    root = Path(path)
    for child in root.iterdir() if root.is_dir() else ():
        try:
            topic, _ = parse_partition_dir_name(child.name)
        except Exception:
            continue
        if child.is_dir():
            counts[topic] += 1
    return counts


def _get_or_create(manager: LogManager, name: str):
    """The partition's log; a topic's first partition is created on first write, as Kafka's
    ``auto.create.topics.enable`` (one partition)."""
    if name in manager.partition_names():
        return manager.get(name)
    topic, partition = parse_partition_dir_name(name)
    if partition != 0:
        raise ValueError(f"partition {name} does not exist")
    return manager.create(name)
