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
If the driver dies between tasks and markers, the job's transactions stay open (Kafka's
``transaction.timeout.ms`` has no counterpart here); markers go partition by partition, so a
commit failing half-way can leave some partitions committed.

Appends go through ``Log.append_as_leader`` under the backing directory's ``.lock`` (the one
writer at a time; tasks wait for each other). When a writable kfs mount serves the directory
(it holds the lock, as a broker owns its logs), tasks hand their batches to it instead, through
its ``<topic>-<N>/append-batches`` files: the mount assigns the offsets, so tasks and mount
writers never tear or duplicate offsets. On a cluster, that needs the mount on each executor's
machine; otherwise write while the directory is unmounted (or mounted read-only).
"""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructType

from storage import LogManager
from storage.records import build_batch
from storage.records.control import ControlRecordType, build_control_batch
from storage.topic_partition import parse_partition_dir_name

from ..mounts import find_mount
from .partitioner import StickyPartitioner, partition_for_key

PRODUCER_EPOCH = 0
# The driver's markers carry the next epoch, as a coordinator bumps it when it ends a
# transaction for good: a stray task attempt still writing with the old epoch is then fenced
# (InvalidProducerEpochError) instead of opening a transaction nobody would close.
MARKER_EPOCH = PRODUCER_EPOCH + 1
_BATCH_BYTES = 512 * 1024  # producer batches stay well under max.message.bytes (1 MiB)
_RECORD_OVERHEAD = 32
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
        self.topic = options.get("topic")
        _check_schema(schema, self.topic)
        self.lock_timeout_s = int(options.get("lockTimeoutMs", DEFAULT_LOCK_TIMEOUT_S * 1000)) / 1000
        self.producer_id_base = secrets.randbits(30) << 32  # this job's ids: base + attempt id
        self.start_offsets = _log_end_offsets(self.path)

    # -- tasks ------------------------------------------------------------------------------

    def write(self, iterator: Iterator) -> KfsCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        producer_id = self.producer_id_base + ((ctx.taskAttemptId() if ctx else 0) & 0xFFFFFFFF)
        counts = _partition_counts(self.path)
        sticky: dict[str, StickyPartitioner] = {}
        grouped: dict[str, list[tuple]] = defaultdict(list)
        rows = 0
        for batch in iterator:
            for topic, partition, record in self._records(batch):
                n = counts.get(topic, 1)
                if partition is None:
                    key = record[0]
                    if key is not None:
                        partition = partition_for_key(key, n)
                    else:
                        sticky.setdefault(topic, StickyPartitioner(n))
                        partition = sticky[topic].next(len(record[1] or b""))
                elif not 0 <= partition < n:
                    raise ValueError(f"partition {partition} of topic {topic} does not exist "
                                     f"(it has {n})")
                grouped[f"{topic}-{partition}"].append(record)
                rows += 1
        data = {name: _transactional_batches(records, producer_id)
                for name, records in grouped.items()}
        if data:
            with self._appender() as append:
                for name, chunk in sorted(data.items()):
                    append(name, chunk)
        return KfsCommitMessage(producer_id, sorted(data), rows)

    def _records(self, batch):
        """(topic, partition or None, (key, value, headers)) per row of an Arrow batch."""
        columns = {name.lower(): batch.column(i).to_pylist()
                   for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        values = [_as_bytes(v) for v in columns["value"]]
        keys = [_as_bytes(k) for k in columns["key"]] if "key" in columns else [None] * n
        headers = columns.get("headers") or [None] * n
        topics = [self.topic] * n if self.topic else columns["topic"]
        partitions = columns.get("partition") or [None] * n
        for i in range(n):
            topic = topics[i]
            if topic is None:
                raise ValueError("null topic present in the data; use the topic option")
            hdrs = [(h["key"], h["value"]) for h in headers[i]] if headers[i] else []
            yield topic, partitions[i], (keys[i], values[i], hdrs)

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
            manager = LogManager(self.path, read_only=True)  # the tasks' batches are on disk
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
                append(name, build_control_batch(0, pid, MARKER_EPOCH, marker))

    def _open_producers(self, log, start: int) -> set[int]:
        """This job's producer ids with data but no marker in ``log`` from ``start`` on."""
        low, high = self.producer_id_base, self.producer_id_base + (1 << 32)
        open_ids: set[int] = set()
        for segment in log.log_segments():
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
    engine with the ``.lock`` held only for the block."""

    def __init__(self, path: str, timeout_s: float):
        self._path, self._timeout_s = path, timeout_s
        self._manager: LogManager | None = None

    def __enter__(self):
        mount = find_mount(self._path)
        if mount is not None:
            return lambda name, data: _append_through_mount(mount, name, data)
        self._manager = LogManager(self._path, lock_timeout_s=self._timeout_s)
        return lambda name, data: _get_or_create(self._manager, name).append_as_leader(data)

    def __exit__(self, *exc) -> None:
        if self._manager is not None:
            self._manager.close()


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


def _as_bytes(v) -> bytes | None:
    return v.encode() if isinstance(v, str) else v


def _log_end_offsets(path: str) -> dict[str, int]:
    if not Path(path).is_dir():
        return {}
    manager = LogManager(path, read_only=True)
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


def _transactional_batches(records: list[tuple], producer_id: int) -> bytes:
    """Producer batches (about 512 KiB each) of ``(key, value, headers)`` records, transactional,
    with sequence numbers from 0 (``RecordAccumulator`` with ``transactional.id``)."""
    out, start, size, sequence = [], 0, 0, 0
    for i, (key, value, headers) in enumerate(records):
        size += len(value or b"") + len(key or b"") + _RECORD_OVERHEAD + sum(
            len(k) + len(v or b"") for k, v in headers)
        if size >= _BATCH_BYTES or i == len(records) - 1:
            chunk = records[start:i + 1]
            keys, values, hdrs = zip(*chunk)
            out.append(build_batch(
                0, list(values),
                None if not any(k is not None for k in keys) else list(keys), None,
                [list(h) for h in hdrs] if any(hdrs) else None,
                producer_id=producer_id, producer_epoch=PRODUCER_EPOCH,
                base_sequence=sequence, is_transactional=True))
            sequence += len(chunk)
            start, size = i + 1, 0
    return b"".join(out)
