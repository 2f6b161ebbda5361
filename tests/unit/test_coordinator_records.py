"""Records of __consumer_offsets and __transaction_state decoded (storage.coordinator.records
and .dumplog) against the internal-topics fixtures, which Kafka's own classes wrote and decoded:
every record equal to ``*.expected.jsonl``, every kafka-dump-log string equal to
``*.dump-log.jsonl``; and what does not decode comes back raw with a warning."""

import base64
import json
import struct

import pytest
from helpers.paths import INTERNAL_TOPICS

from storage.coordinator.dumplog import (
    java_json,
    offsets_key_payload,
    transaction_key_payload,
)
from storage.coordinator.records import (
    CONSUMER_OFFSETS,
    TRANSACTION_STATE,
    for_topic,
    read_consumer_protocol,
)
from storage.records import iter_batches

PARTITIONS = {CONSUMER_OFFSETS: "__consumer_offsets-7", TRANSACTION_STATE: "__transaction_state-3"}
TEXT = {CONSUMER_OFFSETS: offsets_key_payload, TRANSACTION_STATE: transaction_key_payload}
needs_fixtures = pytest.mark.needs_fixture("internal-topics")


def fixture_records(topic):
    for log in sorted((INTERNAL_TOPICS / PARTITIONS[topic]).glob("*.log")):
        for batch in iter_batches(log.read_bytes()):
            yield from batch.records()


def jsonl(name):
    with open(INTERNAL_TOPICS / name) as f:
        return [json.loads(line) for line in f]


@needs_fixtures
@pytest.mark.parametrize("topic", list(PARTITIONS))
def test_every_record_decodes_as_kafka_decoded_it(topic):
    decoder = for_topic(topic)
    got = []
    for record in fixture_records(topic):
        decoded = decoder.decode(record.key, record.value)
        assert decoded.warnings == ()
        got.append({"offset": record.offset, "timestamp": record.timestamp, **decoded.to_json()})
    expected = jsonl(f"{PARTITIONS[topic]}.expected.jsonl")
    assert len(got) == len(expected) > 100
    for g, e in zip(got, expected):
        assert g == e


@needs_fixtures
@pytest.mark.parametrize("topic", list(PARTITIONS))
def test_every_dump_log_string_is_kafkas(topic):
    decoder = for_topic(topic)
    got = [{"offset": r.offset, **dict(zip(("key", "payload"),
                                             TEXT[topic](decoder.decode(r.key, r.value), r.offset)))}
           for r in fixture_records(topic)]
    expected = jsonl(f"{PARTITIONS[topic]}.dump-log.jsonl")
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g == e


@needs_fixtures
def test_the_fixture_covers_every_record_type_and_version():
    seen = {(r["key"]["name"], r["value"] and r["value"]["version"])
            for r in jsonl("__consumer_offsets-7.expected.jsonl")}
    assert {("OffsetCommitKey", v) for v in range(5)} <= seen
    assert {("GroupMetadataKey", v) for v in range(5)} <= seen
    assert {name for name, _ in seen} == set(for_topic(CONSUMER_OFFSETS).record_types.values())
    txn = {(r["value"] or {}).get("version") for r in jsonl("__transaction_state-3.expected.jsonl")}
    assert txn == {0, 1, None}


# -- what does not decode ------------------------------------------------------------------


def s16(text):
    data = text.encode()
    return struct.pack(">h", len(data)) + data


OFFSET_KEY = struct.pack(">h", 1) + s16("g") + s16("orders") + struct.pack(">i", 3)
OFFSET_VALUE_V3 = struct.pack(">hqi", 3, 42, 5) + s16("meta") + struct.pack(">q", 1700000000000)


def test_a_hand_made_offset_commit():
    decoded = for_topic(CONSUMER_OFFSETS).decode(OFFSET_KEY, OFFSET_VALUE_V3)
    assert decoded.to_json() == {
        "key": {"type": 1, "name": "OffsetCommitKey",
                "data": {"group": "g", "topic": "orders", "partition": 3}},
        "value": {"version": 3, "data": {"offset": 42, "leaderEpoch": 5, "metadata": "meta",
                                         "commitTimestamp": 1700000000000}}}
    assert offsets_key_payload(decoded, 9) == (
        '{"type":"1","data":{"group":"g","topic":"orders","partition":3}}',
        '{"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"meta",'
        '"commitTimestamp":1700000000000}}')


def test_unknown_record_type_is_raw_with_a_warning():
    key = struct.pack(">h", 42) + b"whatever"
    value = struct.pack(">h", 0) + b"\x01\x02"
    decoded = for_topic(CONSUMER_OFFSETS).decode(key, value)
    assert decoded.to_json() == {
        "key": {"type": 42, "name": None, "raw": base64.b64encode(key).decode()},
        "value": {"version": 0, "raw": base64.b64encode(value).decode()}}
    assert decoded.warnings == ("unknown record type 42 in __consumer_offsets",)
    assert offsets_key_payload(decoded, 17) == ("Unknown record type 42 at offset 17, skipping.", None)
    txn = for_topic(TRANSACTION_STATE).decode(struct.pack(">h", 1) + s16("t"), None)
    assert txn.raw_key is not None and txn.tombstone and "unknown record type 1" in txn.warnings[0]
    assert transaction_key_payload(txn, 3) == ("Unknown record type 1 at offset 3, skipping.", None)


def test_unknown_value_version_keeps_the_key_and_leaves_the_value_raw():
    value = struct.pack(">h", 9) + b"\x00" * 30
    decoded = for_topic(CONSUMER_OFFSETS).decode(OFFSET_KEY, value)
    assert decoded.key == {"group": "g", "topic": "orders", "partition": 3}
    assert decoded.to_json()["value"] == {"version": 9, "raw": base64.b64encode(value).decode()}
    assert decoded.warnings == ("value version 9 (OffsetCommitValue): OffsetCommitValue has no "
                                "version 9 (valid versions: 0-4)",)
    text = offsets_key_payload(decoded, 5)
    assert text[0].startswith("Error at offset 5, skipping. value version 9") and text[1] is None


@pytest.mark.parametrize("cut", range(len(OFFSET_VALUE_V3)))
def test_truncated_values_are_raw_with_a_warning(cut):
    decoded = for_topic(CONSUMER_OFFSETS).decode(OFFSET_KEY, OFFSET_VALUE_V3[:cut])
    assert decoded.value is None and not decoded.tombstone and len(decoded.warnings) == 1
    assert decoded.raw_value == OFFSET_VALUE_V3[:cut]
    assert decoded.value_version == (3 if cut >= 2 else None)


@pytest.mark.parametrize("cut", range(len(OFFSET_KEY)))
def test_truncated_keys_are_raw_with_a_warning(cut):
    decoded = for_topic(CONSUMER_OFFSETS).decode(OFFSET_KEY[:cut], OFFSET_VALUE_V3)
    assert decoded.key is None and decoded.raw_key == OFFSET_KEY[:cut]
    assert decoded.raw_value == OFFSET_VALUE_V3 and len(decoded.warnings) == 1
    assert offsets_key_payload(decoded, 0)[0].startswith(("Error at offset 0", "Unknown record"))


def test_null_key_is_raw_with_a_warning():
    decoded = for_topic(TRANSACTION_STATE).decode(None, b"\x00\x01abc")
    assert decoded.to_json() == {"key": {"type": None, "name": None, "raw": None},
                                 "value": {"version": 1, "raw": "AAFhYmM="}}
    assert decoded.warnings == ("a record of __transaction_state without a key",)


def test_consumer_protocol_bytes():
    # ConsumerProtocolAssignment v0: one topic with partitions 0 and 2, null user data
    data = struct.pack(">hi", 0, 1) + s16("t") + struct.pack(">iiii", 2, 0, 2, -1)
    assert read_consumer_protocol("ConsumerProtocolAssignment", data) == {
        "assignedPartitions": [{"topic": "t", "partitions": [0, 2]}], "userData": None}
    # a newer version is read as the newest known, as ConsumerProtocol does
    newer = struct.pack(">h", 7) + data[2:]
    assert read_consumer_protocol("ConsumerProtocolAssignment", newer)["userData"] is None
    assert read_consumer_protocol("ConsumerProtocolAssignment", data[:-3]) is None
    assert read_consumer_protocol("ConsumerProtocolAssignment", b"\x00") is None


def test_java_json_is_jacksons_text():
    assert java_json({"a": [1, None, True], "b": "q\"\\\n\x01é✓"}) == \
        '{"a":[1,null,true],"b":"q\\"\\\\\\n\\u0001é✓"}'
