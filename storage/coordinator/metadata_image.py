"""The cluster's state that KRaft's metadata log adds up to, as Kafka 4.1.1's ``MetadataImage``:
features, brokers and controllers, topics and their partitions, configs, producer ids, ACLs,
SCRAM credentials, client quotas and delegation tokens, built from the newest snapshot
(``<20-digit offset>-<10-digit epoch>.checkpoint``) plus the log's records after it, and kept
up to date as the log grows (:class:`MetadataImageReplay`).

Each record changes the image as Kafka's ``MetadataDelta.replay`` (``org.apache.kafka.image``)
does: ``PartitionChangeRecord`` merges as ``PartitionRegistration.merge`` (a new leader bumps
the leader epoch, every change the partition epoch), ``RemoveTopicRecord`` drops the topic and
its configs, ``ClearElrRecord`` empties the eligible leader replicas, a feature at level 0 is
no longer finalized, ``kraft.version`` is never one (KAFKA-18979), and the records of a
metadata transaction (``BeginTransactionRecord`` .. ``EndTransactionRecord``, KIP-868) apply
together when it ends and not at all when it is aborted. The log's records are applied as
they are on disk, as ``kafka-metadata-shell`` does (it reads no high watermark).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storage.coordinator.cluster_metadata import (
    MetadataRecord,
    read_metadata_record,
    snapshot_id,
)
from storage.dir_watch import DirectoryWatch
from storage.errors import KafkaStorageError
from storage.log_files import LOG_SUFFIX, offset_from_file_name
from storage.log_reader import LogReader
from storage.segment_source import FileRecords, LocalSegmentSource

__all__ = ["Broker", "Controller", "MetadataImage", "MetadataImageReplay", "Partition",
           "Topic"]

NO_LEADER_CHANGE = -2  # LeaderConstants.NO_LEADER_CHANGE
NO_RECOVERY_CHANGE = -1  # LeaderRecoveryState.NO_CHANGE
MIGRATING_DIRECTORY = "AAAAAAAAAAAAAAAAAAAAAA"  # DirectoryId.MIGRATING, Uuid(0, 0)
KRAFT_VERSION = "kraft.version"
METADATA_VERSION = "metadata.version"


@dataclasses.dataclass
class Partition:
    """A partition's registration (``PartitionRegistration``): broker ids, the log directory
    id of each replica, ``leader`` (-1: none), ``leader_recovery_state`` (0 RECOVERED,
    1 RECOVERING) and the epochs."""

    replicas: list[int]
    directories: list[str]
    isr: list[int]
    removing_replicas: list[int]
    adding_replicas: list[int]
    elr: list[int]
    last_known_elr: list[int]
    leader: int
    leader_recovery_state: int
    leader_epoch: int
    partition_epoch: int

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> Partition:
        """``new PartitionRegistration(PartitionRecord)``."""
        replicas = data["replicas"]
        return cls(replicas, _default_to_migrating(data.get("directories"), len(replicas)),
                   data["isr"], data["removingReplicas"], data["addingReplicas"],
                   data.get("eligibleLeaderReplicas") or [], data.get("lastKnownElr") or [],
                   data.get("leader", -1), data.get("leaderRecoveryState", 0),
                   data.get("leaderEpoch", -1), data.get("partitionEpoch", -1))

    def merge(self, data: dict[str, Any]) -> Partition:
        """``PartitionRegistration.merge(PartitionChangeRecord)``: what the record does not
        name stays; a leader (other than -2) bumps the leader epoch; the partition epoch
        always moves on."""
        replicas = _changed(data, "replicas", self.replicas)
        directories = _changed(data, "directories", self.directories)
        leader, leader_epoch = self.leader, self.leader_epoch
        if data.get("leader", NO_LEADER_CHANGE) != NO_LEADER_CHANGE:
            leader, leader_epoch = data["leader"], self.leader_epoch + 1
        recovery = data.get("leaderRecoveryState", NO_RECOVERY_CHANGE)
        return Partition(
            replicas, _default_to_migrating(directories, len(replicas)),
            _changed(data, "isr", self.isr),
            _changed(data, "removingReplicas", self.removing_replicas),
            _changed(data, "addingReplicas", self.adding_replicas),
            _changed(data, "eligibleLeaderReplicas", self.elr),
            _changed(data, "lastKnownElr", self.last_known_elr),
            leader, self.leader_recovery_state if recovery == NO_RECOVERY_CHANGE else recovery,
            leader_epoch, self.partition_epoch + 1)


def _changed(data: dict[str, Any], field: str, current: list) -> list:
    value = data.get(field)
    return current if value is None else value


def _default_to_migrating(directories: list[str] | None, replicas: int) -> list[str]:
    """``PartitionRegistration.defaultToMigrating``: no directories (or only MIGRATING ones)
    read as MIGRATING for every replica."""
    if not directories or all(d == MIGRATING_DIRECTORY for d in directories):
        return [MIGRATING_DIRECTORY] * replicas
    return directories


@dataclasses.dataclass
class Topic:
    name: str
    topic_id: str
    partitions: dict[int, Partition] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Broker:
    """A broker's registration (``BrokerRegistration``): ``endpoints`` and ``features`` as
    the record holds them (``BrokerEndpoint``s, ``BrokerFeature``s); ``directories`` the
    log directory ids."""

    broker_id: int
    epoch: int
    incarnation_id: str
    endpoints: list[dict[str, Any]]
    features: list[dict[str, Any]]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool
    is_migrating_zk_broker: bool
    directories: list[str]


@dataclasses.dataclass
class Controller:
    """A controller's registration (``ControllerRegistration``)."""

    controller_id: int
    incarnation_id: str
    zk_migration_ready: bool
    endpoints: list[dict[str, Any]]
    features: list[dict[str, Any]]


@dataclasses.dataclass
class MetadataImage:
    """The image (``MetadataImage``). ``metadata_version`` is ``metadata.version``'s feature
    level (None before one is set); ``finalized`` the other finalized features' levels;
    ``configs`` keyed by (``ConfigResource.Type`` id, resource name; "" the default);
    ``client_quotas`` keyed by the entity's sorted (entity type, name) pairs; ``acls`` and
    ``delegation_tokens`` hold their records' data; ``scram`` is mechanism id -> user ->
    ``UserScramCredentialRecord`` data; ``provenance`` the (last offset, epoch, time in epoch
    ms) of the last batch applied, None before one."""

    metadata_version: int | None = None
    finalized: dict[str, int] = dataclasses.field(default_factory=dict)
    brokers: dict[int, Broker] = dataclasses.field(default_factory=dict)
    controllers: dict[int, Controller] = dataclasses.field(default_factory=dict)
    topics: dict[str, Topic] = dataclasses.field(default_factory=dict)  # by topic id
    configs: dict[tuple[int, str], dict[str, str]] = dataclasses.field(default_factory=dict)
    next_producer_id: int = -1
    acls: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    scram: dict[int, dict[str, dict[str, Any]]] = dataclasses.field(default_factory=dict)
    client_quotas: dict[tuple[tuple[str, str | None], ...], dict[str, float]] = \
        dataclasses.field(default_factory=dict)
    delegation_tokens: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    provenance: tuple[int, int, int] | None = None

    def topic_by_name(self, name: str) -> Topic | None:
        return next((t for t in self.topics.values() if t.name == name), None)

    def apply(self, record: MetadataRecord) -> None:
        """Replay one record (``MetadataDelta.replay``); a type the image does not hold
        (``NoOpRecord``, the transaction markers) changes nothing. Raises KafkaStorageError
        for a record naming a broker, topic or partition the image does not have."""
        handler = _HANDLERS.get(record.name)
        if handler is not None:
            handler(self, record.data)

    # -- features and the cluster

    def _feature_level(self, d: dict[str, Any]) -> None:
        name, level = d["name"], d["featureLevel"]
        if name == METADATA_VERSION:
            self.metadata_version = level
        elif name == KRAFT_VERSION:
            return
        elif level == 0:
            self.finalized.pop(name, None)
        else:
            self.finalized[name] = level

    def _register_broker(self, d: dict[str, Any]) -> None:
        self.brokers[d["brokerId"]] = Broker(
            d["brokerId"], d["brokerEpoch"], d["incarnationId"], d["endPoints"], d["features"],
            d.get("rack"), d.get("fenced", True), d.get("inControlledShutdown", False),
            d.get("isMigratingZkBroker", False), d.get("logDirs") or [])

    def _broker(self, broker_id: int, epoch: int) -> Broker:
        """``ClusterDelta.getBrokerOrThrow``."""
        broker = self.brokers.get(broker_id)
        if broker is None or broker.epoch != epoch:
            raise KafkaStorageError(f"a metadata record changes broker {broker_id} at epoch "
                                    f"{epoch}, which is not registered")
        return broker

    def _fence(self, d: dict[str, Any]) -> None:
        self._broker(d["id"], d["epoch"]).fenced = True

    def _unfence(self, d: dict[str, Any]) -> None:
        self._broker(d["id"], d["epoch"]).fenced = False

    def _broker_change(self, d: dict[str, Any]) -> None:
        """BrokerRegistrationChangeRecord: fenced 1 fences, -1 unfences, 0 keeps;
        inControlledShutdown 1 sets it; non-empty logDirs replace the directories."""
        broker = self._broker(d["brokerId"], d["brokerEpoch"])
        fenced = d.get("fenced", 0)
        if fenced:
            broker.fenced = fenced == 1
        if d.get("inControlledShutdown", 0) == 1:
            broker.in_controlled_shutdown = True
        if d.get("logDirs"):
            broker.directories = d["logDirs"]

    def _unregister_broker(self, d: dict[str, Any]) -> None:
        self.brokers.pop(d["brokerId"], None)

    def _register_controller(self, d: dict[str, Any]) -> None:
        self.controllers[d["controllerId"]] = Controller(
            d["controllerId"], d["incarnationId"], d.get("zkMigrationReady", False),
            d["endPoints"], d["features"])

    # -- topics

    def _topic(self, d: dict[str, Any]) -> None:
        self.topics[d["topicId"]] = Topic(d["name"], d["topicId"])

    def _topic_of(self, topic_id: str) -> Topic:
        topic = self.topics.get(topic_id)
        if topic is None:
            raise KafkaStorageError(f"a metadata record names topic id {topic_id}, which "
                                    "the image does not have")
        return topic

    def _partition(self, d: dict[str, Any]) -> None:
        self._topic_of(d["topicId"]).partitions[d["partitionId"]] = Partition.from_record(d)

    def _partition_change(self, d: dict[str, Any]) -> None:
        partitions = self._topic_of(d["topicId"]).partitions
        current = partitions.get(d["partitionId"])
        if current is None:
            raise KafkaStorageError(f"a PartitionChangeRecord names partition "
                                    f"{d['partitionId']} of topic id {d['topicId']}, which "
                                    "the image does not have")
        partitions[d["partitionId"]] = current.merge(d)

    def _remove_topic(self, d: dict[str, Any]) -> None:
        topic = self.topics.pop(d["topicId"], None)
        if topic is not None:
            self.configs.pop((TOPIC_RESOURCE, topic.name), None)

    def _clear_elr(self, d: dict[str, Any]) -> None:
        """``TopicsDelta.replay(ClearElrRecord)``: one topic by name, or every topic."""
        name = d.get("topicName", "")
        topics = list(self.topics.values()) if not name else [self.topic_by_name(name)]
        if topics == [None]:
            raise KafkaStorageError(f"a ClearElrRecord names topic {name!r}, which the image "
                                    "does not have")
        cleared = {"eligibleLeaderReplicas": [], "lastKnownElr": []}
        for topic in topics:
            for pid, partition in topic.partitions.items():
                if partition.elr or partition.last_known_elr:
                    topic.partitions[pid] = partition.merge(cleared)

    # -- configs, producer ids, security and quotas

    def _config(self, d: dict[str, Any]) -> None:
        key = (d["resourceType"], d["resourceName"])
        if d.get("value") is None:
            values = self.configs.get(key, {})
            values.pop(d["name"], None)
            if not values:
                self.configs.pop(key, None)
        else:
            self.configs.setdefault(key, {})[d["name"]] = d["value"]

    def _producer_ids(self, d: dict[str, Any]) -> None:
        self.next_producer_id = d["nextProducerId"]

    def _acl(self, d: dict[str, Any]) -> None:
        self.acls[d["id"]] = d

    def _remove_acl(self, d: dict[str, Any]) -> None:
        self.acls.pop(d["id"], None)

    def _scram(self, d: dict[str, Any]) -> None:
        self.scram.setdefault(d["mechanism"], {})[d["name"]] = d

    def _remove_scram(self, d: dict[str, Any]) -> None:
        self.scram.get(d["mechanism"], {}).pop(d["name"], None)

    def _client_quota(self, d: dict[str, Any]) -> None:
        entity = tuple(sorted((e["entityType"], e.get("entityName")) for e in d["entity"]))
        quotas = self.client_quotas.setdefault(entity, {})
        if d["remove"]:
            quotas.pop(d["key"], None)
        else:
            quotas[d["key"]] = d["value"]
        if not quotas:
            del self.client_quotas[entity]

    def _delegation_token(self, d: dict[str, Any]) -> None:
        self.delegation_tokens[d["tokenId"]] = d

    def _remove_delegation_token(self, d: dict[str, Any]) -> None:
        self.delegation_tokens.pop(d["tokenId"], None)


TOPIC_RESOURCE = 2  # ConfigResource.Type.TOPIC

_HANDLERS = {
    "FeatureLevelRecord": MetadataImage._feature_level,
    "RegisterBrokerRecord": MetadataImage._register_broker,
    "UnregisterBrokerRecord": MetadataImage._unregister_broker,
    "FenceBrokerRecord": MetadataImage._fence,
    "UnfenceBrokerRecord": MetadataImage._unfence,
    "BrokerRegistrationChangeRecord": MetadataImage._broker_change,
    "RegisterControllerRecord": MetadataImage._register_controller,
    "TopicRecord": MetadataImage._topic,
    "PartitionRecord": MetadataImage._partition,
    "PartitionChangeRecord": MetadataImage._partition_change,
    "RemoveTopicRecord": MetadataImage._remove_topic,
    "ClearElrRecord": MetadataImage._clear_elr,
    "ConfigRecord": MetadataImage._config,
    "ProducerIdsRecord": MetadataImage._producer_ids,
    "AccessControlEntryRecord": MetadataImage._acl,
    "RemoveAccessControlEntryRecord": MetadataImage._remove_acl,
    "UserScramCredentialRecord": MetadataImage._scram,
    "RemoveUserScramCredentialRecord": MetadataImage._remove_scram,
    "ClientQuotaRecord": MetadataImage._client_quota,
    "DelegationTokenRecord": MetadataImage._delegation_token,
    "RemoveDelegationTokenRecord": MetadataImage._remove_delegation_token,
}
_BEGIN, _END, _ABORT = "BeginTransactionRecord", "EndTransactionRecord", "AbortTransactionRecord"


class MetadataImageReplay:
    """The image of the ``__cluster_metadata-0`` at ``directory``, caught up with its log on
    each :meth:`catch_up` (only the batches appended since the last call are read). Thread-
    safe. A log whose segments before the read position were deleted (a newer snapshot
    replaced them) is replayed afresh from the newest snapshot."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        # (a catch-up with nothing new costs a stat of the directory and of one segment: it
        # runs at every request for a node of the image)
        self._watch = DirectoryWatch(self.directory)
        self._listed: dict[int, Path] = {}
        self._reset()

    def _reset(self) -> None:
        self.image = MetadataImage()
        self._next_offset = 0  # the first offset not applied
        self._segment: int | None = None  # base offset of the segment being read
        self._position = 0  # byte position after the last whole batch read in it
        self._transaction: list[MetadataRecord] | None = None  # records of an open one

    def catch_up(self) -> MetadataImage:
        """The image with every whole batch on disk applied. Raises KafkaStorageError for a
        log that starts after the newest snapshot ends (records are missing), or for a
        record the image cannot take; MetadataParseError for a value that is not a metadata
        record; CorruptRecordError for a corrupt batch; FileNotFoundError when the directory
        is gone."""
        with self._lock:
            segments = self._segments()
            if self._segment is not None and (
                    self._segment not in segments
                    or segments[self._segment].stat().st_size < self._position):
                self._reset()  # (its segment deleted, or cut back by a truncation)
            if self._segment is None:
                self._load_snapshot()
                first = min(segments, default=self._next_offset)
                if first > self._next_offset:
                    raise KafkaStorageError(
                        f"{self.directory}: the metadata log starts at offset {first} and no "
                        f"snapshot reaches it (the newest ends at {self._next_offset})")
            for base in sorted(segments):
                following = [b for b in segments if b > base]
                if following and min(following) <= self._next_offset:
                    continue  # wholly before what is applied
                if self._segment is not None and base < self._segment:
                    continue
                if base != self._segment:
                    self._segment, self._position = base, 0
                self._read_segment(segments[base])
            return self.image

    def _segments(self) -> dict[int, Path]:
        """The ``.log`` segments by base offset, listed again only when the directory may
        have changed (``storage.dir_watch``). Raises FileNotFoundError when it is gone."""
        names = self._watch.names()
        if names is not None:
            self._listed = {offset_from_file_name(n): self.directory / n for n in names
                            if n.endswith(LOG_SUFFIX)}
        return self._listed

    def _load_snapshot(self) -> None:
        """The newest snapshot's records, as the image to go on from."""
        snapshots = [(snapshot_id(p.name), p) for p in self.directory.glob("*.checkpoint")]
        snapshots = sorted((sid, p) for sid, p in snapshots if sid is not None)
        if not snapshots:
            return
        (end_offset, _), path = snapshots[-1]
        for (_, provenance), records in _batches(path, 0):
            if records is not None:  # (not the SnapshotHeader's or SnapshotFooter's batch)
                for record in records:
                    self.image.apply(record)
                self.image.provenance = provenance
        self._next_offset = end_offset

    def _read_segment(self, path: Path) -> None:
        if path.stat().st_size <= self._position:
            return  # (nothing appended since the last read)
        for (position, provenance), records in _batches(path, self._position,
                                                        self._next_offset):
            self._position = position
            if records is None:
                continue
            for record in records:
                self._apply(record)
            self._next_offset = provenance[0] + 1
            self.image.provenance = provenance

    def _apply(self, record: MetadataRecord) -> None:
        """One record, held back inside a metadata transaction (KIP-868)."""
        if record.name == _BEGIN:
            self._transaction = []
        elif record.name in (_END, _ABORT):
            done, self._transaction = self._transaction or [], None
            if record.name == _END:
                for held in done:
                    self.image.apply(held)
        elif self._transaction is not None:
            self._transaction.append(record)
        else:
            self.image.apply(record)


def _batches(path: Path, position: int, from_offset: int = 0
             ) -> Iterator[tuple[tuple[int, tuple[int, int, int]], list[MetadataRecord] | None]]:
    """((byte position after the batch, (last offset, leader epoch, max timestamp)), its
    decoded metadata records) for each whole batch of the file at ``path`` from
    ``position``; records None for a control batch or one wholly before ``from_offset``."""
    source = LocalSegmentSource.of_path(path)
    try:
        records = FileRecords(source)
        end = position
        for batch in LogReader.whole_batches(records, position, records.size):
            end += batch.size_in_bytes
            info = (end, (batch.last_offset, batch.partition_leader_epoch, batch.max_timestamp))
            if batch.is_control_batch or batch.last_offset < from_offset:
                yield info, None
                continue
            yield info, [read_metadata_record(r.value) for r in batch.records()
                         if r.offset >= from_offset]
    finally:
        source.close()
