"""The consumer groups of a ``__consumer_offsets`` partition, materialized from its records.

:class:`GroupStates` is fed the partition's records in offset order and keeps, per group, what
Kafka's group coordinator rebuilds when it loads the partition (``GroupMetadataManager`` and
``OffsetMetadataManager`` replaying ``CoordinatorRecord``\\ s): the committed offsets, a classic
group's metadata and members (``GroupMetadataValue``), and a consumer group's (KIP-848)
epochs, members and assignments (record types 3-8). The topic is compacted, so the state is
per record key: the newest record of a key wins and a tombstone (null value) removes what that
key held; a group with nothing left is gone. One record costs O(1) besides its decoding.

Every timestamp is epoch milliseconds.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

from storage.coordinator.records import (
    CONSUMER_OFFSETS,
    CoordinatorRecord,
    RecordFold,
    read_consumer_protocol,
)

__all__ = ["MEMBER_STATES", "CommittedOffset", "GroupStates"]

# MemberState ids of ConsumerGroupCurrentMemberAssignmentValue.state
MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS", 127: "UNKNOWN"}


@dataclasses.dataclass(frozen=True)
class CommittedOffset:
    """One committed offset of a group (Kafka's ``OffsetAndMetadata``): ``leader_epoch`` and
    ``expire_timestamp`` are None when the record has none (older value versions, or -1);
    ``record_offset`` / ``record_timestamp`` locate the record that committed it."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    metadata: str
    commit_timestamp: int
    expire_timestamp: int | None
    record_offset: int
    record_timestamp: int


def _optional(value: int | None) -> int | None:
    return None if value is None or value < 0 else value


@dataclasses.dataclass
class _Group:
    """Everything one group id holds, each part keyed as its records are."""

    offsets: dict[tuple[str, int], CommittedOffset] = dataclasses.field(default_factory=dict)
    classic: dict[str, Any] | None = None  # GroupMetadataValue data
    epoch: int | None = None  # ConsumerGroupMetadataValue
    topics: dict[str, dict[str, Any]] | None = None  # topicId -> ConsumerGroupPartitionMetadataValue topic
    members: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    target_epoch: int | None = None
    targets: dict[str, list[dict[str, Any]]] = dataclasses.field(default_factory=dict)
    current: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)

    def is_consumer_group(self) -> bool:
        return (self.epoch is not None or self.topics is not None or bool(self.members)
                or self.target_epoch is not None or bool(self.targets) or bool(self.current))

    def is_empty(self) -> bool:
        return not self.offsets and self.classic is None and not self.is_consumer_group()


def _set_or_drop(table: dict, key, value) -> None:
    if value is None:
        table.pop(key, None)
    else:
        table[key] = value


class GroupStates(RecordFold):
    """The groups of one ``__consumer_offsets`` partition. Feed it the partition's records in
    offset order with :meth:`apply`; read it with :meth:`group_ids`, :meth:`offsets`,
    :meth:`describe` and :meth:`members`."""

    topic = CONSUMER_OFFSETS

    def __init__(self) -> None:
        super().__init__()
        self._groups: dict[str, _Group] = {}
        self._replay = {
            "OffsetCommitKey": self._offset_commit,
            "GroupMetadataKey": self._group_metadata,
            "ConsumerGroupMetadataKey": self._consumer_group_metadata,
            "ConsumerGroupPartitionMetadataKey": self._partition_metadata,
            "ConsumerGroupMemberMetadataKey": self._member_metadata,
            "ConsumerGroupTargetAssignmentMetadataKey": self._target_assignment_metadata,
            "ConsumerGroupTargetAssignmentMemberKey": self._target_assignment_member,
            "ConsumerGroupCurrentMemberAssignmentKey": self._current_assignment,
        }

    def fold(self, offset: int, timestamp: int, decoded: CoordinatorRecord) -> None:
        replay = self._replay.get(decoded.key_name)
        if replay is None:  # a record type this state does not track
            return
        group_id = decoded.key.get("group", decoded.key.get("groupId"))
        group = self._groups.get(group_id)
        if group is None:
            group = self._groups[group_id] = _Group()
        replay(group, decoded, offset, timestamp)
        if group.is_empty():
            del self._groups[group_id]

    def _offset_commit(self, group: _Group, r: CoordinatorRecord, offset: int, ts: int) -> None:
        tp = (r.key["topic"], r.key["partition"])
        if r.tombstone:
            group.offsets.pop(tp, None)
            return
        v = r.value
        group.offsets[tp] = CommittedOffset(
            tp[0], tp[1], v["offset"], _optional(v.get("leaderEpoch")), v["metadata"],
            v["commitTimestamp"], _optional(v.get("expireTimestamp")), offset, ts)

    @staticmethod
    def _group_metadata(group: _Group, r: CoordinatorRecord, offset: int, ts: int) -> None:
        group.classic = None if r.tombstone else r.value

    @staticmethod
    def _consumer_group_metadata(group: _Group, r: CoordinatorRecord, offset: int, ts: int) -> None:
        group.epoch = None if r.tombstone else r.value["epoch"]

    @staticmethod
    def _partition_metadata(group: _Group, r: CoordinatorRecord, offset: int, ts: int) -> None:
        group.topics = None if r.tombstone else {t["topicId"]: t for t in r.value["topics"]}

    @staticmethod
    def _member_metadata(group: _Group, r: CoordinatorRecord, offset: int, ts: int) -> None:
        _set_or_drop(group.members, r.key["memberId"], None if r.tombstone else r.value)

    @staticmethod
    def _target_assignment_metadata(group: _Group, r: CoordinatorRecord, offset: int, ts: int) -> None:
        group.target_epoch = None if r.tombstone else r.value["assignmentEpoch"]

    @staticmethod
    def _target_assignment_member(group: _Group, r: CoordinatorRecord, offset: int, ts: int) -> None:
        _set_or_drop(group.targets, r.key["memberId"], None if r.tombstone else r.value["topicPartitions"])

    @staticmethod
    def _current_assignment(group: _Group, r: CoordinatorRecord, offset: int, ts: int) -> None:
        _set_or_drop(group.current, r.key["memberId"], None if r.tombstone else r.value)

    # -- reading -------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._groups)

    def __contains__(self, group_id: str) -> bool:
        return group_id in self._groups

    def group_ids(self) -> list[str]:
        """Every group with something left (offsets, metadata or members), sorted."""
        return sorted(self._groups)

    def offsets(self, group_id: str) -> dict[tuple[str, int], CommittedOffset]:
        """The group's committed offsets by (topic, partition), sorted; empty for an unknown
        group."""
        group = self._groups.get(group_id)
        return {} if group is None else dict(sorted(group.offsets.items()))

    def group_type(self, group_id: str) -> str | None:
        """``consumer`` (KIP-848 records), ``classic``, or None for an unknown group."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        return "consumer" if group.is_consumer_group() else "classic"

    def state(self, group_id: str) -> str | None:
        """The state Kafka's coordinator gives the group after loading the partition: a
        classic group is ``Stable`` with members, else ``Empty`` (a group with only offsets
        too); a consumer group is ``Empty`` without members, ``Assigning`` while its epoch is
        ahead of the target assignment's, ``Reconciling`` while a member's epoch is not the
        target assignment's, else ``Stable``. None for an unknown group."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        if group.is_consumer_group():
            return _consumer_group_state(group)
        return "Stable" if group.classic and group.classic["members"] else "Empty"

    def members(self, group_id: str) -> list[dict[str, Any]]:
        """The group's members, as ``kafka-consumer-groups.sh --describe --members`` lists
        them: ``consumerId``, ``groupInstanceId``, ``host``, ``clientId`` and
        ``assignment``, the assigned partitions as ``{"topic", "partition"}`` (a consumer
        group's topics named by its partition metadata; ``topicId`` added when the name is
        unknown). Empty for an unknown group."""
        group = self._groups.get(group_id)
        if group is None:
            return []
        if group.is_consumer_group():
            return [_consumer_member(group, member_id) for member_id in sorted(group.members)]
        if group.classic is None:
            return []
        protocol_type = group.classic["protocolType"]
        return [_classic_member(m, protocol_type) for m in group.classic["members"]]

    def describe(self, group_id: str,
                 log_end_offset: Callable[[str, int], int | None] | None = None) -> dict[str, Any] | None:
        """The group as ``kafka-consumer-groups.sh --describe`` (with ``--state`` and
        ``--members``) shows it, or None for an unknown group::

            {"group", "type" ("classic"|"consumer"), "state", "protocolType",
             "assignmentStrategy", "generation" (classic) | "groupEpoch" and
             "targetAssignmentEpoch" (consumer), "leader" (classic),
             "currentStateTimestamp" (classic, or None), "members": [see members()],
             "offsets": [{"topic", "partition", "currentOffset", "logEndOffset", "lag",
                          "consumerId", "host", "clientId", "leaderEpoch", "metadata",
                          "commitTimestamp", "expireTimestamp"}]}

        ``offsets`` has a row per partition that has a committed offset or an owner, sorted by
        topic and partition; what is unknown is None (no commit: ``currentOffset``; no owner:
        ``consumerId``/``host``/``clientId``). ``log_end_offset(topic, partition)`` gives the
        partition's log end offset when it is known (None otherwise); ``lag`` is then log end
        offset minus committed offset."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        members = self.members(group_id)
        out: dict[str, Any] = {"group": group_id, "type": self.group_type(group_id),
                               "state": self.state(group_id)}
        out.update(_consumer_summary(group) if group.is_consumer_group() else _classic_summary(group))
        out["members"] = members
        out["offsets"] = _offset_rows(group, members, log_end_offset)
        return out


# -- describe helpers ---------------------------------------------------------------------


def _consumer_group_state(group: _Group) -> str:
    if not group.members:
        return "Empty"
    target = group.target_epoch if group.target_epoch is not None else -1
    if (group.epoch if group.epoch is not None else 0) > target:
        return "Assigning"
    if any(group.current.get(m, {}).get("memberEpoch") != target for m in group.members):
        return "Reconciling"
    return "Stable"


def _decode_assignment(encoded: str | None) -> list[dict[str, Any]]:
    """The partitions of a classic consumer's assignment bytes (base64); empty when they do
    not decode."""
    assignment = read_consumer_protocol("ConsumerProtocolAssignment", base64.b64decode(encoded or ""))
    if assignment is None:
        return []
    return [{"topic": tp["topic"], "partition": p}
            for tp in assignment["assignedPartitions"] for p in tp["partitions"]]


def _classic_member(member: dict[str, Any], protocol_type: str) -> dict[str, Any]:
    partitions = _decode_assignment(member["assignment"]) if protocol_type == "consumer" else []
    return {"consumerId": member["memberId"], "groupInstanceId": member.get("groupInstanceId"),
            "host": member["clientHost"], "clientId": member["clientId"],
            "assignment": sorted(partitions, key=lambda tp: (tp["topic"], tp["partition"]))}


def _consumer_member(group: _Group, member_id: str) -> dict[str, Any]:
    member = group.members[member_id]
    current = group.current.get(member_id)
    names = {tid: t["topicName"] for tid, t in (group.topics or {}).items()}
    partitions = []
    for tp in (current or {}).get("assignedPartitions", []):
        for p in tp["partitions"]:
            row = {"topic": names.get(tp["topicId"]), "partition": p}
            if row["topic"] is None:
                row["topicId"] = tp["topicId"]
            partitions.append(row)
    return {"consumerId": member_id, "groupInstanceId": member["instanceId"],
            "host": member["clientHost"], "clientId": member["clientId"],
            "rackId": member["rackId"], "memberEpoch": (current or {}).get("memberEpoch"),
            "memberState": MEMBER_STATES.get((current or {}).get("state")),
            "assignment": sorted(partitions, key=lambda tp: (tp["topic"] or "", tp["partition"]))}


def _classic_summary(group: _Group) -> dict[str, Any]:
    c = group.classic or {}
    return {"protocolType": c.get("protocolType", ""), "assignmentStrategy": c.get("protocol"),
            "generation": c.get("generation"), "leader": c.get("leader"),
            "currentStateTimestamp": _optional(c.get("currentStateTimestamp"))}


def _consumer_summary(group: _Group) -> dict[str, Any]:
    assignors = sorted({m["serverAssignor"] for m in group.members.values() if m["serverAssignor"]})
    return {"protocolType": "consumer", "assignmentStrategy": ",".join(assignors) or None,
            "groupEpoch": group.epoch, "targetAssignmentEpoch": group.target_epoch}


def _owners(members: list[dict[str, Any]]) -> Iterator[tuple[tuple[str, int], dict[str, Any]]]:
    for member in members:
        for tp in member["assignment"]:
            if tp["topic"] is not None:
                yield (tp["topic"], tp["partition"]), member


def _offset_rows(group: _Group, members: list[dict[str, Any]],
                 log_end_offset: Callable[[str, int], int | None] | None) -> list[dict[str, Any]]:
    owners = dict(_owners(members))
    rows = []
    for tp in sorted(set(group.offsets) | set(owners)):
        committed = group.offsets.get(tp)
        owner = owners.get(tp)
        end = log_end_offset(*tp) if log_end_offset is not None else None
        current = committed.offset if committed else None
        rows.append({
            "topic": tp[0], "partition": tp[1], "currentOffset": current, "logEndOffset": end,
            "lag": end - current if end is not None and current is not None else None,
            "consumerId": owner["consumerId"] if owner else None,
            "host": owner["host"] if owner else None,
            "clientId": owner["clientId"] if owner else None,
            "leaderEpoch": committed.leader_epoch if committed else None,
            "metadata": committed.metadata if committed else None,
            "commitTimestamp": committed.commit_timestamp if committed else None,
            "expireTimestamp": committed.expire_timestamp if committed else None,
        })
    return rows
