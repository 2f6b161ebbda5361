"""Kafka's ``__remote_log_metadata`` topic: the records a broker's
``TopicBasedRemoteLogMetadataManager`` writes about the segments it copies to the remote tier
(KIP-405), decoded through the message schemas kept as data in
``storage/coordinator/messages/storage/``, and the live remote segments they add up to.

A record has a null key; its value is what ``RemoteLogMetadataSerde.serialize`` writes (through
``AbstractApiMessageSerde``): an unsigned varint frame version (1), an unsigned varint api key, an
unsigned varint message version, then the message of that key:

* 0 ``RemoteLogSegmentMetadataRecord``: a segment whose copy started (Kafka's
  ``RemoteLogSegmentMetadata``, state ``COPY_SEGMENT_STARTED``);
* 1 ``RemoteLogSegmentMetadataUpdateRecord``: its state changed
  (``RemoteLogSegmentMetadataUpdate``: ``COPY_SEGMENT_FINISHED``, ``DELETE_SEGMENT_STARTED``,
  ``DELETE_SEGMENT_FINISHED``);
* 2 ``RemotePartitionDeleteMetadataRecord``: a partition's remote data is being deleted
  (``RemotePartitionDeleteMetadata``: ``DELETE_PARTITION_MARKED``, ``_STARTED``, ``_FINISHED``);
* 3 ``RemoteLogSegmentMetadataSnapshotRecord`` (``RemoteLogSegmentMetadataSnapshot``).

:func:`deserialize` mirrors ``RemoteLogMetadataSerde.deserialize`` (its failures carry the message
Kafka's exception would); each result's :meth:`java_string` is its Kafka class's ``toString()``,
what ``kafka-dump-log --remote-log-metadata-decoder`` prints (:func:`dump_payload`).
:class:`RemoteLogMetadataCache` folds the records, in offset order, into the live segments of
each topic-partition as Kafka's ``RemoteLogMetadataCache`` keeps them: a segment is live once its
copy finished (``RemoteLogSegmentState.COPY_SEGMENT_FINISHED``) until a deletion of it starts;
a partition with a delete record has no live segment. :func:`read_metadata_log_dir` reads every
``__remote_log_metadata-<N>`` partition of a broker's log directory.

Where a segment lives in the remote tier is the RemoteStorageManager's business; for Kafka's
reference ``LocalTieredStorage`` it is :meth:`RemoteLogSegmentMetadata.local_tiered_storage_path`.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import functools
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storage.coordinator.api_message import FrameError, read_frame
from storage.coordinator.records import MESSAGES
from storage.coordinator.schema import Message, MessageFormatError, load_message, uuid_bytes
from storage.errors import InvalidTopicError
from storage.log_files import LOG_SUFFIX, filename_prefix
from storage.log_reader import LogReader
from storage.segment_source import FileRecords, LocalSegmentSource
from storage.topic_partition import parse_partition_dir_name

__all__ = [
    "REMOTE_LOG_METADATA_TOPIC", "RemoteLogMetadataCache", "RemoteLogMetadataFormatError",
    "RemoteLogSegmentId", "RemoteLogSegmentMetadata", "RemoteLogSegmentMetadataSnapshot",
    "RemoteLogSegmentMetadataUpdate", "RemoteLogSegmentState", "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState", "TopicIdPartition", "decode_value", "deserialize",
    "dump_payload", "read_metadata_log_dir", "read_metadata_partition", "remote_metadata_json",
]

log = logging.getLogger(__name__)

REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
SCHEMAS = MESSAGES / "storage"
# MetadataRecordType (the generated enum of storage's "metadata" messages): api key -> schema
_MESSAGES = {0: "RemoteLogSegmentMetadataRecord", 1: "RemoteLogSegmentMetadataUpdateRecord",
             2: "RemotePartitionDeleteMetadataRecord", 3: "RemoteLogSegmentMetadataSnapshotRecord"}
# what Java's helpful NullPointerException says when DumpLogSegments reads a null value
_NULL_VALUE = ('Cannot invoke "java.nio.ByteBuffer.remaining()" because the return value of '
               '"org.apache.kafka.common.record.Record.value()" is null')


class RemoteLogMetadataFormatError(ValueError):
    """A value ``RemoteLogMetadataSerde.deserialize`` refuses; the message is that of the
    exception Kafka throws (``MetadataParseException`` and the like), as kafka-dump-log prints
    it after ``Error at offset N, skipping.``."""


class RemoteLogSegmentState(enum.IntEnum):
    """Kafka's ``RemoteLogSegmentState`` (its ids are the values)."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    def can_become(self, target: RemoteLogSegmentState) -> bool:
        """``RemoteLogSegmentState.isValidTransition(this, target)``: the same state, or
        copy started -> finished or deletion started, copy finished -> deletion started,
        deletion started -> finished."""
        return target == self or target in _TRANSITIONS.get(self, ())


_TRANSITIONS = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: (RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
                                                 RemoteLogSegmentState.DELETE_SEGMENT_STARTED),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: (RemoteLogSegmentState.DELETE_SEGMENT_STARTED,),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: (RemoteLogSegmentState.DELETE_SEGMENT_FINISHED,),
}


class RemotePartitionDeleteState(enum.IntEnum):
    """Kafka's ``RemotePartitionDeleteState``."""

    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _optional_custom(custom: bytes | None) -> str:
    """``Optional<CustomMetadata>.toString()``."""
    return "Optional.empty" if custom is None else f"Optional[CustomMetadata{{{len(custom)} bytes}}]"


def _epochs_string(epochs: tuple[tuple[int, int], ...]) -> str:
    """A ``TreeMap<Integer, Long>``'s ``toString()``: ``{epoch=offset, ...}``."""
    return "{" + ", ".join(f"{e}={o}" for e, o in epochs) + "}"


@dataclasses.dataclass(frozen=True)
class TopicIdPartition:
    """Kafka's ``TopicIdPartition``: ``topic_id`` as ``Uuid.toString()`` spells it (base64url,
    no padding)."""

    topic_id: str
    topic: str
    partition: int

    @property
    def name(self) -> str:
        """``<topic>-<N>``, the partition's directory name."""
        return f"{self.topic}-{self.partition}"

    def java_string(self) -> str:
        return f"{self.topic_id}:{self.topic}-{self.partition}"


@dataclasses.dataclass(frozen=True)
class RemoteLogSegmentId:
    """Kafka's ``RemoteLogSegmentId``: the partition and the segment's own id (base64url)."""

    topic_id_partition: TopicIdPartition
    id: str

    @property
    def uuid(self) -> uuid.UUID:
        """The segment id as a UUID (Kafka prints it base64url)."""
        return uuid.UUID(bytes=uuid_bytes(self.id))

    def java_string(self) -> str:
        return (f"RemoteLogSegmentId{{topicIdPartition={self.topic_id_partition.java_string()}, "
                f"id={self.id}}}")


@dataclasses.dataclass(frozen=True)
class RemoteLogSegmentMetadata:
    """Kafka's ``RemoteLogSegmentMetadata``: one remote segment. ``segment_leader_epochs`` are
    (leader epoch, its first offset in the segment) sorted by epoch; ``custom_metadata`` the
    RemoteStorageManager's bytes or None; ``txn_index_empty`` whether the segment's
    transaction index is empty (then LocalTieredStorage writes no ``.txnindex``)."""

    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    segment_size_in_bytes: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    txn_index_empty: bool

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.segment_id.topic_id_partition

    def with_update(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """``createWithUpdates``: the update's state, custom metadata, event time and broker."""
        return dataclasses.replace(self, state=update.state, custom_metadata=update.custom_metadata,
                                   event_timestamp_ms=update.event_timestamp_ms,
                                   broker_id=update.broker_id)

    @property
    def file_stem(self) -> str:
        """``<20-digit start offset>-<segment id>``: the name before the suffix of each of the
        segment's files in LocalTieredStorage (``RemoteLogSegmentFileset``)."""
        return f"{filename_prefix(self.start_offset)}-{self.segment_id.id}"

    def local_tiered_storage_path(self, root: str | Path) -> Path:
        """The directory LocalTieredStorage keeps the segment's files in under ``root`` (its
        ``kafka-tiered-storage`` directory): ``<topic>-<N>-<topic id>``; the files are
        ``<file_stem>.{log,index,timeindex,snapshot,leader_epoch_checkpoint[,txnindex]}``."""
        tp = self.topic_id_partition
        return Path(root) / f"{tp.topic}-{tp.partition}-{tp.topic_id}"

    def java_string(self) -> str:
        return (f"RemoteLogSegmentMetadata{{remoteLogSegmentId={self.segment_id.java_string()}, "
                f"startOffset={self.start_offset}, endOffset={self.end_offset}, "
                f"brokerId={self.broker_id}, maxTimestampMs={self.max_timestamp_ms}, "
                f"eventTimestampMs={self.event_timestamp_ms}, "
                f"segmentLeaderEpochs={_epochs_string(self.segment_leader_epochs)}, "
                f"segmentSizeInBytes={self.segment_size_in_bytes}, "
                f"customMetadata={_optional_custom(self.custom_metadata)}, "
                f"state={self.state.name}, txnIdxEmpty={_java_bool(self.txn_index_empty)}}}")


@dataclasses.dataclass(frozen=True)
class RemoteLogSegmentMetadataUpdate:
    """Kafka's ``RemoteLogSegmentMetadataUpdate``: a remote segment's new state."""

    segment_id: RemoteLogSegmentId
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    event_timestamp_ms: int
    broker_id: int

    def java_string(self) -> str:
        return (f"RemoteLogSegmentMetadataUpdate{{remoteLogSegmentId="
                f"{self.segment_id.java_string()}, "
                f"customMetadata={_optional_custom(self.custom_metadata)}, "
                f"state={self.state.name}, eventTimestampMs={self.event_timestamp_ms}, "
                f"brokerId={self.broker_id}}}")


@dataclasses.dataclass(frozen=True)
class RemotePartitionDeleteMetadata:
    """Kafka's ``RemotePartitionDeleteMetadata``: a partition's remote data being deleted."""

    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int

    def java_string(self) -> str:
        return (f"RemotePartitionDeleteMetadata{{topicPartition="
                f"{self.topic_id_partition.java_string()}, state={self.state.name}, "
                f"eventTimestampMs={self.event_timestamp_ms}, brokerId={self.broker_id}}}")


@dataclasses.dataclass(frozen=True)
class RemoteLogSegmentMetadataSnapshot:
    """Kafka's ``RemoteLogSegmentMetadataSnapshot``: one segment of a snapshot of the metadata
    cache (no topic-partition: the snapshot is per partition)."""

    segment_id: str
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    segment_size_in_bytes: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState
    txn_index_empty: bool

    def java_string(self) -> str:
        return (f"RemoteLogSegmentMetadataSnapshot{{segmentId={self.segment_id}, "
                f"startOffset={self.start_offset}, endOffset={self.end_offset}, "
                f"maxTimestampMs={self.max_timestamp_ms}, "
                f"segmentLeaderEpochs={_epochs_string(self.segment_leader_epochs)}, "
                f"segmentSizeInBytes={self.segment_size_in_bytes}, "
                f"customMetadata={_optional_custom(self.custom_metadata)}, "
                f"state={self.state.name}, txnIdxEmpty={_java_bool(self.txn_index_empty)}}}")


RemoteLogMetadata = (RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate
                     | RemotePartitionDeleteMetadata | RemoteLogSegmentMetadataSnapshot)


# -- RemoteLogMetadataSerde ----------------------------------------------------------------


@functools.cache
def schema(api_key: int) -> Message:
    """The message schema of one api key (``MetadataRecordType``). Raises
    RemoteLogMetadataFormatError for an unknown key, as Kafka words it."""
    name = _MESSAGES.get(api_key)
    if name is None:
        raise RemoteLogMetadataFormatError(
            f"org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id {api_key}")
    return load_message(SCHEMAS / f"{name}.json")


def _bytes(b64: str | None) -> bytes | None:
    return None if b64 is None else base64.b64decode(b64)


def _segment_id(entry: dict[str, Any]) -> RemoteLogSegmentId:
    tp = entry["topicIdPartition"]
    return RemoteLogSegmentId(TopicIdPartition(tp["id"], tp["name"], tp["partition"]), entry["id"])


def _segment_state(state_id: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(state_id)
    except ValueError:
        raise RemoteLogMetadataFormatError("state can not be null") from None


def _epochs(entries: list[dict[str, Any]], start: int, end: int) -> tuple[tuple[int, int], ...]:
    # RemoteLogSegmentMetadata's checks, in its constructor's order
    if start < 0:
        raise RemoteLogMetadataFormatError(
            f"Unexpected start offset = {start}. StartOffset for a remote segment cannot be negative")
    if end < start:
        raise RemoteLogMetadataFormatError(
            f"Unexpected end offset = {end}. EndOffset for a remote segment cannot be less than "
            f"startOffset = {start}")
    if not entries:
        raise RemoteLogMetadataFormatError("segmentLeaderEpochs can not be null or empty")
    epochs: dict[int, int] = {}
    for e in entries:  # a HashMap: a repeated epoch keeps its last offset
        epochs[e["leaderEpoch"]] = e["offset"]
    return tuple(sorted(epochs.items()))


def deserialize(value: bytes | None) -> RemoteLogMetadata:
    """``RemoteLogMetadataSerde.deserialize``: one ``__remote_log_metadata`` record value as
    the Kafka class it holds. Raises RemoteLogMetadataFormatError (Kafka's message) for a
    value that does not decode."""
    api_key, _, data = decode_value(value)
    return _transform(api_key, data)


def decode_value(value: bytes | None) -> tuple[int, int, dict[str, Any]]:
    """(api key, message version, the message's fields in ``<Message>JsonConverter`` shape)
    of one record value: the frame ``AbstractApiMessageSerde.read`` reads. Raises
    RemoteLogMetadataFormatError (Kafka's message) for a value that does not decode."""
    if value is None:
        raise RemoteLogMetadataFormatError(_NULL_VALUE)
    try:
        api_key, version, pos = read_frame(value)
    except FrameError as e:
        raise RemoteLogMetadataFormatError(e.kafka_message) from None
    message = schema(api_key)
    try:
        data, end = message.read_with_end(value, version, pos)
    except MessageFormatError:
        raise RemoteLogMetadataFormatError(f"Failed to deserialize record with type {api_key}") from None
    if end < len(value):
        raise RemoteLogMetadataFormatError(
            f"Found {len(value) - end} byte(s) of garbage after {api_key}")
    return api_key, version, data


def _transform(api_key: int, d: dict[str, Any]) -> RemoteLogMetadata:
    """The ``*Transform.fromApiMessageAndVersion`` of each api key."""
    if api_key == 0:
        return RemoteLogSegmentMetadata(
            _segment_id(d["remoteLogSegmentId"]), d["startOffset"], d["endOffset"], d["brokerId"],
            d["maxTimestampMs"], d["eventTimestampMs"],
            _epochs(d["segmentLeaderEpochs"], d["startOffset"], d["endOffset"]),
            d["segmentSizeInBytes"], _bytes(d["customMetadata"]),
            _segment_state(d["remoteLogSegmentState"]), d.get("txnIndexEmpty", False))
    if api_key == 1:
        return RemoteLogSegmentMetadataUpdate(
            _segment_id(d["remoteLogSegmentId"]), _bytes(d["customMetadata"]),
            _segment_state(d["remoteLogSegmentState"]), d["eventTimestampMs"], d["brokerId"])
    if api_key == 2:
        tp = d["topicIdPartition"]
        try:
            state = RemotePartitionDeleteState(d["remotePartitionDeleteState"])
        except ValueError:  # requireNonNull(state) without a message: Java prints "null"
            raise RemoteLogMetadataFormatError("null") from None
        return RemotePartitionDeleteMetadata(TopicIdPartition(tp["id"], tp["name"], tp["partition"]),
                                             state, d["eventTimestampMs"], d["brokerId"])
    return RemoteLogSegmentMetadataSnapshot(
        d["segmentId"], d["startOffset"], d["endOffset"], d["brokerId"], d["maxTimestampMs"],
        d["eventTimestampMs"], _epochs(d["segmentLeaderEpochs"], d["startOffset"], d["endOffset"]),
        d["segmentSizeInBytes"], _bytes(d["customMetadata"]),
        _segment_state(d["remoteLogSegmentState"]), d.get("txnIndexEmpty", False))


def dump_payload(value: bytes | None, offset: int) -> str:
    """What ``kafka-dump-log --remote-log-metadata-decoder`` prints after ``payload:`` for the
    record at ``offset`` (DumpLogSegments' RemoteMetadataLogMessageParser): the ``toString()``
    of the deserialized metadata, or ``Error at offset N, skipping. <why>``."""
    try:
        return deserialize(value).java_string()
    except RemoteLogMetadataFormatError as e:
        return f"Error at offset {offset}, skipping. {e}"


def remote_metadata_json(value: bytes | None) -> tuple[dict[str, Any] | None, list[str]]:
    """One record value as JSON (``kfs dump --json --remote-log-metadata-decoder``):
    ``{"apiKey", "name", "version", "data"}`` and no warnings, or, for a value that does not
    decode, ``{"raw": base64}`` (None for a null value) and why."""
    try:
        api_key, version, data = decode_value(value)
        _transform(api_key, data)  # Kafka's checks of the fields' values too
    except RemoteLogMetadataFormatError as e:
        raw = None if value is None else {"raw": base64.b64encode(value).decode("ascii")}
        return raw, [str(e)]
    return {"apiKey": api_key, "name": _MESSAGES[api_key], "version": version, "data": data}, []


# -- RemoteLogMetadataCache ----------------------------------------------------------------


class RemoteLogMetadataCache:
    """What a ``__remote_log_metadata`` partition's records add up to, fed in offset order
    (:meth:`apply`): every remote segment's metadata with its latest state, per
    topic-partition (Kafka's ``RemoteLogMetadataCache`` / ``RemotePartitionMetadataStore``).

    An update of a segment it never saw start is ignored with a warning (Kafka's cache throws
    RemoteResourceNotFoundException and goes on), as is one that is not a valid transition
    (``RemoteLogSegmentState.isValidTransition``: Kafka's IllegalStateException) or a value
    that does not decode."""

    def __init__(self) -> None:
        self._segments: dict[TopicIdPartition, dict[str, RemoteLogSegmentMetadata]] = {}
        self._deleted_partitions: dict[TopicIdPartition, RemotePartitionDeleteState] = {}
        self._last_applied: dict[TopicIdPartition, int] = {}  # the order of its latest record
        self._applied = 0
        self.warnings: list[str] = []

    def apply(self, metadata: RemoteLogMetadata) -> None:
        """Apply one decoded record."""
        if isinstance(metadata, RemoteLogSegmentMetadata):
            if metadata.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                self._warn(f"{metadata.segment_id.java_string()} starts in state "
                           f"{metadata.state.name}, not COPY_SEGMENT_STARTED: ignored")
                return
            segments = self._segments.setdefault(metadata.topic_id_partition, {})
            segments[metadata.segment_id.id] = metadata
            self._seen(metadata.topic_id_partition)
        elif isinstance(metadata, RemoteLogSegmentMetadataUpdate):
            segments = self._segments.get(metadata.segment_id.topic_id_partition, {})
            existing = segments.get(metadata.segment_id.id)
            if existing is None:
                self._warn(f"an update of {metadata.segment_id.java_string()}, never seen "
                           "started: ignored")
                return
            if not existing.state.can_become(metadata.state):
                self._warn(f"{metadata.segment_id.java_string()} cannot go from "
                           f"{existing.state.name} to {metadata.state.name}: ignored")
                return
            if metadata.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
                del segments[metadata.segment_id.id]
            else:
                segments[metadata.segment_id.id] = existing.with_update(metadata)
            self._seen(metadata.segment_id.topic_id_partition)
        elif isinstance(metadata, RemotePartitionDeleteMetadata):
            self._deleted_partitions[metadata.topic_id_partition] = metadata.state
            self._seen(metadata.topic_id_partition)
            if metadata.state == RemotePartitionDeleteState.DELETE_PARTITION_FINISHED:
                self._segments.pop(metadata.topic_id_partition, None)
        # a snapshot record names no partition: nothing to fold

    def apply_value(self, value: bytes | None, offset: int = -1) -> None:
        """Decode and apply one record value (a value that does not decode is warned about
        and skipped)."""
        try:
            metadata = deserialize(value)
        except RemoteLogMetadataFormatError as e:
            self._warn(f"{REMOTE_LOG_METADATA_TOPIC} offset {offset} skipped: {e}")
            return
        self.apply(metadata)

    def _seen(self, tp: TopicIdPartition) -> None:
        self._applied += 1
        self._last_applied[tp] = self._applied

    def _warn(self, text: str) -> None:
        self.warnings.append(text)
        log.warning("%s", text)

    @property
    def partitions(self) -> list[TopicIdPartition]:
        """Every topic-partition with remote segments known (live or not), by name."""
        return sorted(self._segments, key=lambda tp: (tp.topic, tp.partition, tp.topic_id))

    @property
    def partitions_deleted(self) -> list[TopicIdPartition]:
        """Every topic-partition with a delete record (its remote data deleted or being so)."""
        return sorted(self._deleted_partitions, key=lambda tp: (tp.topic, tp.partition, tp.topic_id))

    def partition_deleted(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        """The state of a deletion of the partition's remote data, or None."""
        return self._deleted_partitions.get(tp)

    def segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """Every segment of the partition the cache holds, in any state but
        ``DELETE_SEGMENT_FINISHED``, by start offset."""
        return sorted(self._segments.get(tp, {}).values(),
                      key=lambda m: (m.start_offset, m.end_offset, m.segment_id.id))

    def live_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        """The partition's remote segments a reader may read: copied
        (``COPY_SEGMENT_FINISHED``) and not being deleted, none of a partition being deleted;
        by start offset."""
        if tp in self._deleted_partitions:
            return []
        return [m for m in self.segments(tp) if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]

    def live(self) -> dict[TopicIdPartition, list[RemoteLogSegmentMetadata]]:
        """:meth:`live_segments` of every partition that has some."""
        out = {}
        for tp in self.partitions:
            segments = self.live_segments(tp)
            if segments:
                out[tp] = segments
        return out

    def live_metadata_by_directory(self) -> dict[str, dict[str, RemoteLogSegmentMetadata]]:
        """The live segments' metadata as LocalTieredStorage names them:
        ``{"<topic>-<N>-<topic id>": {"<20-digit start offset>-<segment id>": metadata, ...}}``
        (a listing's files whose name before the suffix is not there are segments being copied
        or deleted), the partitions in the order their latest records came (of a topic deleted
        and created again, the current one last)."""
        live = self.live()
        return {live[tp][0].local_tiered_storage_path("").name: {m.file_stem: m for m in live[tp]}
                for tp in sorted(live, key=self._last_applied.__getitem__)}

    def live_by_name(self, topic: str, partition: int) -> list[RemoteLogSegmentMetadata]:
        """The live segments of ``<topic>-<partition>`` under its current topic id (the one
        whose records came last, when a topic of that name was deleted and created again)."""
        candidates = [tp for tp in self._last_applied
                      if tp.topic == topic and tp.partition == partition]
        if not candidates:
            return []
        return self.live_segments(max(candidates, key=self._last_applied.__getitem__))


# -- reading the topic's partitions ----------------------------------------------------------


def _partition_values(directory: Path) -> Iterator[tuple[int, bytes | None]]:
    """(offset, value) of every data record of a partition directory's ``.log`` files, in
    offset order (control batches skipped: the metadata manager's producer is not
    transactional, but a marker would carry no metadata)."""
    logs = sorted(directory.glob(f"*{LOG_SUFFIX}"), key=lambda p: int(p.name.split(".")[0]))
    for path in logs:
        source = LocalSegmentSource.of_path(path)
        try:
            records = FileRecords(source)
            for batch in LogReader.whole_batches(records, 0, records.size):
                if batch.is_control_batch:
                    continue
                for record in batch.records():
                    yield record.offset, record.value
        finally:
            source.close()


def read_metadata_partition(directory: str | Path,
                            cache: RemoteLogMetadataCache | None = None) -> RemoteLogMetadataCache:
    """Fold one ``__remote_log_metadata-<N>`` partition directory (a broker's, read-only; a
    torn batch at the end of the active segment ends the read there) into ``cache`` (a new
    one by default), which is returned. Raises CorruptRecordError / InvalidRecordError for
    bytes that are not batches."""
    cache = RemoteLogMetadataCache() if cache is None else cache
    for offset, value in _partition_values(Path(directory)):
        cache.apply_value(value, offset)
    return cache


def read_metadata_log_dir(log_dir: str | Path) -> RemoteLogMetadataCache:
    """Every ``__remote_log_metadata-<N>`` partition of a broker's log directory folded into
    one cache (the records of one topic-partition all go to one metadata partition, so the
    order that matters is kept). An empty cache when there is none."""
    cache = RemoteLogMetadataCache()
    for directory in sorted(Path(log_dir).iterdir()):
        if not directory.is_dir() or not directory.name.startswith(REMOTE_LOG_METADATA_TOPIC + "-"):
            continue
        try:
            topic, _ = parse_partition_dir_name(directory.name)
        except InvalidTopicError:
            continue
        if topic == REMOTE_LOG_METADATA_TOPIC:
            read_metadata_partition(directory, cache)
    return cache
