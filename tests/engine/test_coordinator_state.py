"""GroupStates and TransactionStates (storage.coordinator.groups / .transactions) fed the
internal-topics fixtures record by record, checked against a plain fold of ``expected.jsonl``
(Kafka's own decoding: newest record of a key wins, a null value removes it) after every
record; and tombstone semantics, ordering and describe() on hand-made records."""

import json
import struct

import pytest
from helpers.paths import INTERNAL_TOPICS

from storage.coordinator.groups import GroupStates
from storage.coordinator.transactions import TransactionStates
from storage.records import Record, iter_batches

needs_fixtures = pytest.mark.needs_fixture("internal-topics")
# TransactionState.fromId, as Kafka's TransactionLog documents the ids
STATE_NAMES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort",
               4: "CompleteCommit", 5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}


def fixture_records(name):
    for log in sorted((INTERNAL_TOPICS / name).glob("*.log")):
        for batch in iter_batches(log.read_bytes()):
            yield from batch.records()


def expected_rows(name):
    with open(INTERNAL_TOPICS / f"{name}.expected.jsonl") as f:
        return [json.loads(line) for line in f]


class Fold:
    """The reference: the newest expected.jsonl row per (key name, key data); a null value
    removes the key."""

    def __init__(self):
        self.live = {}

    def add(self, row):
        ident = (row["key"]["name"], json.dumps(row["key"]["data"], sort_keys=True))
        if row["value"] is None:
            self.live.pop(ident, None)
        else:
            self.live[ident] = row

    def rows(self, name, **match):
        return [r for (n, _), r in self.live.items()
                if n == name and all(r["key"]["data"].get(k) == v for k, v in match.items())]

    def groups(self):
        return {r["key"]["data"].get("group", r["key"]["data"].get("groupId")) for r in self.live.values()}


def expected_offsets(fold, group):
    out = {}
    for r in fold.rows("OffsetCommitKey", group=group):
        v = r["value"]["data"]
        out[(r["key"]["data"]["topic"], r["key"]["data"]["partition"])] = (
            v["offset"], v["metadata"], v["commitTimestamp"],
            None if v.get("leaderEpoch", -1) == -1 else v["leaderEpoch"],
            None if v.get("expireTimestamp", -1) == -1 else v["expireTimestamp"], r["offset"])
    return out


def state_offsets(states, group):
    return {tp: (c.offset, c.metadata, c.commit_timestamp, c.leader_epoch, c.expire_timestamp,
                 c.record_offset) for tp, c in states.offsets(group).items()}


@needs_fixtures
def test_groups_follow_the_offsets_topic_record_by_record():
    states, fold = GroupStates(), Fold()
    rows = expected_rows("__consumer_offsets-7")
    seen_groups = set()
    for record, row in zip(fixture_records("__consumer_offsets-7"), rows, strict=True):
        assert states.apply(record).warnings == ()
        fold.add(row)
        group = row["key"]["data"].get("group", row["key"]["data"].get("groupId"))
        seen_groups.add(group)
        assert state_offsets(states, group) == expected_offsets(fold, group)
        assert set(states.group_ids()) == fold.groups()
    assert states.next_offset == rows[-1]["offset"] + 1
    # groups deleted or expired (every key tombstoned) are gone, the others are all there
    gone = seen_groups - fold.groups()
    assert gone and all(g not in states for g in gone)
    assert len(states) == len(fold.groups()) >= 4
    for group in fold.groups():
        assert state_offsets(states, group) == expected_offsets(fold, group)


def final_states():
    states, fold = GroupStates(), Fold()
    for record, row in zip(fixture_records("__consumer_offsets-7"), expected_rows("__consumer_offsets-7")):
        states.apply(record)
        fold.add(row)
    return states, fold


@needs_fixtures
def test_classic_groups_metadata_and_describe():
    states, fold = final_states()
    classic = fold.rows("GroupMetadataKey")
    assert len(classic) >= 3
    for row in classic:
        group, value = row["key"]["data"]["group"], row["value"]["data"]
        d = states.describe(group, log_end_offset=lambda t, p: 10**6)
        assert d["type"] == "classic" and states.group_type(group) == "classic"
        assert (d["protocolType"], d["assignmentStrategy"], d["generation"], d["leader"]) == (
            value["protocolType"], value["protocol"], value["generation"], value["leader"])
        assert d["state"] == ("Stable" if value["members"] else "Empty")
        assert [(m["consumerId"], m["clientId"], m["host"]) for m in d["members"]] == [
            (m["memberId"], m["clientId"], m["clientHost"]) for m in value["members"]]
        committed = expected_offsets(fold, group)
        rows = {(r["topic"], r["partition"]): r for r in d["offsets"]}
        assert set(committed) <= set(rows)
        for tp, (offset, metadata, commit_ts, epoch, expire_ts, _) in committed.items():
            r = rows[tp]
            assert (r["currentOffset"], r["metadata"], r["commitTimestamp"], r["leaderEpoch"],
                    r["expireTimestamp"]) == (offset, metadata, commit_ts, epoch, expire_ts)
            assert (r["logEndOffset"], r["lag"]) == (10**6, 10**6 - offset)
    # a consumer-protocol group's owners come from the assignment bytes
    orders = states.describe("orders-enricher-20")
    owned = [r for r in orders["offsets"] if r["consumerId"] is not None]
    assert owned and all(r["clientId"].startswith("orders-enricher-") for r in owned)
    assert {m["consumerId"] for m in orders["members"]} == {r["consumerId"] for r in owned}


@needs_fixtures
def test_consumer_protocol_group():
    states, fold = final_states()
    (meta,) = fold.rows("ConsumerGroupMetadataKey")
    group = meta["key"]["data"]["groupId"]
    (target,) = fold.rows("ConsumerGroupTargetAssignmentMetadataKey", groupId=group)
    (topics,) = fold.rows("ConsumerGroupPartitionMetadataKey", groupId=group)
    names = {t["topicId"]: t["topicName"] for t in topics["value"]["data"]["topics"]}
    members = {r["key"]["data"]["memberId"]: r for r in fold.rows("ConsumerGroupMemberMetadataKey", groupId=group)}
    current = {r["key"]["data"]["memberId"]: r["value"]["data"]
               for r in fold.rows("ConsumerGroupCurrentMemberAssignmentKey", groupId=group)}
    d = states.describe(group)
    assert states.group_type(group) == "consumer" and d["type"] == "consumer"
    assert d["groupEpoch"] == meta["value"]["data"]["epoch"]
    assert d["targetAssignmentEpoch"] == target["value"]["data"]["assignmentEpoch"]
    assert [m["consumerId"] for m in d["members"]] == sorted(members)
    for m in d["members"]:
        cur = current[m["consumerId"]]
        assert m["memberEpoch"] == cur["memberEpoch"]
        assert m["clientId"] == members[m["consumerId"]]["value"]["data"]["clientId"]
        assert sorted((tp["topic"], tp["partition"]) for tp in m["assignment"]) == sorted(
            (names[a["topicId"]], p) for a in cur["assignedPartitions"] for p in a["partitions"])
    assert d["state"] == consumer_group_state(fold, group)


def consumer_group_state(fold, group):
    """ConsumerGroup's state rule: Empty without members, Assigning while the group epoch is
    ahead of the target assignment's, Reconciling while a member's epoch is not the target's."""
    members = {r["key"]["data"]["memberId"] for r in fold.rows("ConsumerGroupMemberMetadataKey", groupId=group)}
    if not members:
        return "Empty"
    epoch = [r["value"]["data"]["epoch"] for r in fold.rows("ConsumerGroupMetadataKey", groupId=group)]
    target = [r["value"]["data"]["assignmentEpoch"]
              for r in fold.rows("ConsumerGroupTargetAssignmentMetadataKey", groupId=group)]
    if (epoch or [0])[0] > (target or [-1])[0]:
        return "Assigning"
    current = {r["key"]["data"]["memberId"]: r["value"]["data"]["memberEpoch"]
               for r in fold.rows("ConsumerGroupCurrentMemberAssignmentKey", groupId=group)}
    return "Reconciling" if any(current.get(m) != (target or [-1])[0] for m in members) else "Stable"


@needs_fixtures
def test_consumer_group_state_record_by_record():
    states, fold = GroupStates(), Fold()
    seen = []
    for record, row in zip(fixture_records("__consumer_offsets-7"), expected_rows("__consumer_offsets-7")):
        states.apply(record)
        fold.add(row)
        group = row["key"]["data"].get("groupId")
        if group is not None and states.group_type(group) == "consumer":
            assert states.state(group) == consumer_group_state(fold, group)
            seen.append(states.state(group))
    # the fixture's member B joins (revocation) and leaves
    assert {"Reconciling", "Stable"} <= set(seen)


@needs_fixtures
def test_transactions_follow_the_transaction_topic_record_by_record():
    states, fold = TransactionStates(), Fold()
    for record, row in zip(fixture_records("__transaction_state-3"), expected_rows("__transaction_state-3"),
                           strict=True):
        assert states.apply(record).warnings == ()
        fold.add(row)
        tid = row["key"]["data"]["transactionalId"]
        live = fold.rows("TransactionLogKey", transactionalId=tid)
        got = states.get(tid)
        if not live:
            assert got is None and tid not in states
            continue
        v = live[0]["value"]["data"]
        partitions = [] if v["transactionStatus"] == 0 else [
            (e["topic"], p) for e in v["transactionPartitions"] for p in e["partitionIds"]]
        assert (got.producer_id, got.producer_epoch, got.state, got.state_id, list(got.topic_partitions),
                got.timeout_ms, got.last_update_timestamp, got.start_timestamp,
                got.client_transaction_version, got.record_offset) == (
            v["producerId"], v["producerEpoch"], STATE_NAMES[v["transactionStatus"]],
            v["transactionStatus"], partitions, v["transactionTimeoutMs"],
            v["transactionLastUpdateTimestampMs"],
            None if v["transactionStartTimestampMs"] == -1 else v["transactionStartTimestampMs"],
            v.get("clientTransactionVersion", 0), row["offset"])
    assert states.transactional_ids() == sorted(r["key"]["data"]["transactionalId"]
                                                for r in fold.live.values())


@needs_fixtures
def test_transaction_describe():
    states = TransactionStates()
    for record in fixture_records("__transaction_state-3"):
        states.apply(record)
    ongoing = [tid for tid in states.transactional_ids() if states.get(tid).state == "Ongoing"]
    assert ongoing
    state = states.get(ongoing[0])
    d = states.describe(ongoing[0], now_ms=state.start_timestamp + 1500)
    assert d == {
        "transactionalId": ongoing[0], "producerId": state.producer_id,
        "producerEpoch": state.producer_epoch, "transactionState": "Ongoing",
        "transactionTimeoutMs": state.timeout_ms,
        "currentTransactionStartTimeMs": state.start_timestamp, "transactionDurationMs": 1500,
        "topicPartitions": [f"{t}-{p}" for t, p in state.topic_partitions]}
    assert d["topicPartitions"]
    assert states.describe("no-such-id") is None


# -- hand-made records ---------------------------------------------------------------------


def s16(text):
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def offset_key(group, topic, partition):
    return struct.pack(">h", 1) + s16(group) + s16(topic) + struct.pack(">i", partition)


def offset_value(offset, epoch=-1, ts=1700000000000):
    return struct.pack(">hqi", 3, offset, epoch) + s16("") + struct.pack(">q", ts)


def group_key(group):
    return struct.pack(">h", 2) + s16(group)


def group_value(generation, members):
    """GroupMetadataValue v0 (protocol type "consumer", protocol "range")."""
    out = struct.pack(">h", 0) + s16("consumer") + struct.pack(">i", generation) + s16("range")
    out += s16(members[0] if members else None) + struct.pack(">i", len(members))
    for member in members:
        out += s16(member) + s16("client") + s16("/10.0.0.1") + struct.pack(">i", 10000)
        out += struct.pack(">i", 0) + struct.pack(">i", 0)  # empty subscription/assignment
    return out


class Feed:
    def __init__(self, states):
        self.states = states
        self.offset = 0

    def __call__(self, key, value, ts=1700000000000):
        decoded = self.states.apply(Record(self.offset, ts, 0, key, value, (), -1))
        self.offset += 1
        return decoded


def test_newest_commit_wins_and_a_tombstone_removes_it():
    states = GroupStates()
    feed = Feed(states)
    feed(offset_key("g", "t", 0), offset_value(10))
    feed(offset_key("g", "t", 1), offset_value(20, epoch=3))
    feed(offset_key("g", "t", 0), offset_value(15))
    assert {tp: c.offset for tp, c in states.offsets("g").items()} == {("t", 0): 15, ("t", 1): 20}
    assert states.offsets("g")[("t", 1)].leader_epoch == 3
    assert states.offsets("g")[("t", 0)].leader_epoch is None
    assert states.state("g") == "Empty" and states.group_type("g") == "classic"
    feed(offset_key("g", "t", 0), None)
    assert list(states.offsets("g")) == [("t", 1)]
    feed(offset_key("g", "t", 1), None)
    assert "g" not in states and states.group_ids() == [] and states.describe("g") is None
    feed(offset_key("g", "t", 1), None)  # a tombstone of nothing changes nothing
    assert len(states) == 0


def test_group_metadata_tombstone_keeps_offsets_until_theirs():
    states = GroupStates()
    feed = Feed(states)
    feed(group_key("g"), group_value(1, ["m1", "m2"]))
    feed(offset_key("g", "t", 0), offset_value(5))
    assert states.state("g") == "Stable" and len(states.members("g")) == 2
    feed(group_key("g"), group_value(2, []))
    assert states.state("g") == "Empty" and states.describe("g")["generation"] == 2
    feed(group_key("g"), None)
    assert "g" in states and states.describe("g")["generation"] is None
    assert states.describe("g")["offsets"][0]["currentOffset"] == 5
    feed(offset_key("g", "t", 0), None)
    assert "g" not in states


def test_records_must_come_in_offset_order():
    states = GroupStates()
    states.apply(Record(5, 0, 0, offset_key("g", "t", 0), offset_value(1), (), -1))
    with pytest.raises(ValueError, match="offset 4"):
        states.apply(Record(4, 0, 0, offset_key("g", "t", 0), offset_value(2), (), -1))
    assert states.offsets("g")[("t", 0)].offset == 1 and states.next_offset == 6
    txn = TransactionStates()
    txn.apply(Record(3, 0, 0, None, None, (), -1))
    with pytest.raises(ValueError):
        txn.apply(Record(3, 0, 0, None, None, (), -1))


def test_undecodable_records_change_nothing_and_say_why():
    states = GroupStates()
    feed = Feed(states)
    feed(offset_key("g", "t", 0), offset_value(5))
    decoded = feed(offset_key("g", "t", 0), struct.pack(">h", 9) + b"\x00" * 8)
    assert decoded.warnings and states.offsets("g")[("t", 0)].offset == 5
    assert feed(struct.pack(">h", 77), b"\x00\x00").warnings
    assert states.undecoded == 2 and states.group_ids() == ["g"]


def txn_key(tid):
    return struct.pack(">h", 0) + s16(tid)


def txn_value(pid, epoch, status, partitions, ts=1700000000000):
    """TransactionLogValue v0."""
    out = struct.pack(">hqhib", 0, pid, epoch, 60000, status)
    if partitions is None:
        out += struct.pack(">i", -1)
    else:
        out += struct.pack(">i", len(partitions))
        for topic, ids in partitions:
            out += s16(topic) + struct.pack(">i", len(ids)) + b"".join(struct.pack(">i", i) for i in ids)
    return out + struct.pack(">qq", ts, ts - 5 if status else -1)


def test_transaction_tombstone_and_reinitialization():
    states = TransactionStates()
    feed = Feed(states)
    feed(txn_key("app"), txn_value(100, 0, 0, None))
    assert states.get("app").state == "Empty" and states.get("app").start_timestamp is None
    feed(txn_key("app"), txn_value(100, 0, 1, [("orders", [1, 0]), ("audit", [2])]))
    got = states.get("app")
    assert (got.state, got.topic_partitions) == ("Ongoing", (("orders", 1), ("orders", 0), ("audit", 2)))
    assert states.describe("app", now_ms=1700000000005)["transactionDurationMs"] == 10
    feed(txn_key("app"), txn_value(100, 0, 4, []))
    assert states.get("app").state == "CompleteCommit" and states.get("app").topic_partitions == ()
    feed(txn_key("app"), None)
    assert states.get("app") is None and "app" not in states and len(states) == 0
    feed(txn_key("app"), txn_value(101, 0, 0, None))
    assert states.get("app").producer_id == 101
    feed(txn_key("app"), txn_value(101, 0, 9, []))
    assert states.get("app").state == "Unknown(9)"
