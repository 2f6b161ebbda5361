"""The message-schema reader (storage.coordinator.schema) on schemas and bytes written here by
hand from Kafka's encoding rules: version ranges, classic and compact (flexible) encodings,
tagged fields and their defaults, nullable structs, common structs, and clean errors for
bytes that do not fit."""

import base64
import json
import struct

import pytest

from storage.coordinator.records import CoordinatorTopic
from storage.coordinator.schema import (
    MessageFormatError,
    SchemaError,
    UnknownVersionError,
    Versions,
    load_message,
    uuid_string,
)


def write_schema(directory, spec, comment="// a test schema"):
    path = directory / f"{spec['name']}.json"
    path.write_text(comment + "\n" + json.dumps(spec, indent=2))
    return path


def uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def s16(text):  # classic string: int16 length + UTF-8
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def compact(text):  # compact string: unsigned varint length + 1
    data = text.encode()
    return uvarint(len(data) + 1) + data


SAMPLE = {
    "name": "SampleValue",
    "validVersions": "0-2",
    "flexibleVersions": "2+",
    "fields": [
        {"name": "Id", "type": "int64", "versions": "0+"},
        {"name": "Note", "type": "string", "versions": "0+", "nullableVersions": "1+"},
        {"name": "OnlyOne", "type": "int16", "versions": "1", "default": -1},
        {"name": "Items", "type": "[]Item", "versions": "0+", "fields": [
            {"name": "Name", "type": "string", "versions": "0+"},
            {"name": "Ids", "type": "[]int32", "versions": "0+"},
        ]},
        {"name": "Blob", "type": "bytes", "versions": "0+", "nullableVersions": "0+"},
        {"name": "Flag", "type": "bool", "versions": "0+"},
        {"name": "Hint", "type": "int32", "taggedVersions": "2+", "tag": 0, "default": "0x10"},
        {"name": "Label", "type": "string", "versions": "2+", "taggedVersions": "2+", "tag": 1,
         "nullableVersions": "2+", "default": "null"},
    ],
}


@pytest.fixture
def sample(tmp_path):
    return load_message(write_schema(tmp_path, SAMPLE))


def test_version_ranges():
    assert 3 in Versions.parse("0+") and 0 in Versions.parse("0+")
    assert [v for v in range(6) if v in Versions.parse("1-3")] == [1, 2, 3]
    assert [v for v in range(6) if v in Versions.parse("2")] == [2]
    assert [v for v in range(6) if v in Versions.parse("none")] == []
    assert str(Versions.parse("4+")) == "4+" and str(Versions.parse("1-3")) == "1-3"
    with pytest.raises(SchemaError):
        Versions.parse("one+")


def test_classic_encoding_only_the_fields_of_the_version(sample):
    v0 = (struct.pack(">q", 7) + s16("héllo") + struct.pack(">i", 2)
          + s16("a") + struct.pack(">ii", 1, 5) + s16("b") + struct.pack(">i", 0)
          + struct.pack(">i", 3) + b"\x00\x01\x02" + b"\x01")
    assert sample.read(v0, 0) == {
        "id": 7, "note": "héllo", "items": [{"name": "a", "ids": [5]}, {"name": "b", "ids": []}],
        "blob": "AAEC", "flag": True}
    # version 1: onlyOne appears; null string and null bytes where nullable
    v1 = (struct.pack(">q", -1) + struct.pack(">h", -1) + struct.pack(">h", 9)
          + struct.pack(">i", 0) + struct.pack(">i", -1) + b"\x00")
    assert sample.read(v1, 1) == {"id": -1, "note": None, "onlyOne": 9, "items": [],
                                  "blob": None, "flag": False}


def test_compact_encoding_and_tagged_fields(sample):
    body = (struct.pack(">q", 1) + compact("x") + uvarint(2) + compact("i") + uvarint(2)
            + struct.pack(">i", 4) + b"\x00"  # the Item struct's empty tagged section
            + uvarint(3) + b"\xff\xfe" + b"\x00")
    # no tags: the tagged fields are their defaults and are not written
    assert sample.read(body + uvarint(0), 2) == {
        "id": 1, "note": "x", "items": [{"name": "i", "ids": [4]}], "blob": "//4=", "flag": False}
    # tag 0 at its default (0x10) is still left out; tag 1 set; an unknown tag 9 is skipped
    tags = (uvarint(3) + uvarint(0) + uvarint(4) + struct.pack(">i", 16)
            + uvarint(1) + uvarint(3) + compact("hi") + uvarint(9) + uvarint(2) + b"??")
    assert sample.read(body + tags, 2)["label"] == "hi"
    assert "hint" not in sample.read(body + tags, 2)
    other = uvarint(1) + uvarint(0) + uvarint(4) + struct.pack(">i", 17)
    assert sample.read(body + other, 2)["hint"] == 17


def test_bytes_after_the_message_are_ignored_as_kafka_does(sample):
    v1 = (struct.pack(">q", 3) + s16("n") + struct.pack(">h", 1) + struct.pack(">i", 0)
          + struct.pack(">i", 0) + b"\x01")
    assert sample.read(v1 + b"trailing", 1)["id"] == 3


@pytest.mark.parametrize("cut", [0, 1, 7, 8, 9, 12])
def test_truncated_bytes_are_a_clean_error(sample, cut):
    v0 = (struct.pack(">q", 7) + s16("hello") + struct.pack(">i", 0) + struct.pack(">i", 0) + b"\x01")
    with pytest.raises(MessageFormatError):
        sample.read(v0[:cut], 0)


def test_malformed_lengths_and_nulls(sample):
    # null where the version does not allow it (note is nullable from version 1)
    with pytest.raises(MessageFormatError, match="non-nullable field Note"):
        sample.read(struct.pack(">q", 7) + struct.pack(">h", -1), 0)
    # an array claiming more elements than bytes left
    with pytest.raises(MessageFormatError, match="array of"):
        sample.read(struct.pack(">q", 7) + s16("a") + struct.pack(">i", 1000), 0)
    # a varint longer than 5 bytes
    with pytest.raises(MessageFormatError, match="varint"):
        sample.read(struct.pack(">q", 7) + b"\xff" * 6, 2)
    # a tagged field whose size runs past the end
    body = struct.pack(">q", 1) + compact("x") + uvarint(1) + uvarint(1) + b"\x00"
    assert sample.read(body + uvarint(0), 2)["items"] == []
    with pytest.raises(MessageFormatError, match="tagged field"):
        sample.read(body + uvarint(1) + uvarint(0) + uvarint(50), 2)


def test_unknown_version(sample):
    with pytest.raises(UnknownVersionError, match="no version 3"):
        sample.read(b"", 3)


def test_uuid_common_structs_and_nullable_structs(tmp_path):
    spec = {
        "name": "Holder",
        "validVersions": "0",
        "flexibleVersions": "0+",
        "fields": [
            {"name": "Ref", "type": "uuid", "versions": "0+"},
            {"name": "Parts", "type": "[]Part", "versions": "0+"},
            {"name": "Maybe", "type": "Part", "versions": "0+", "nullableVersions": "0+"},
            {"name": "Extra", "type": "Part", "versions": "0+", "nullableVersions": "0+",
             "default": None, "taggedVersions": "0+", "tag": 0},
        ],
        "commonStructs": [{"name": "Part", "versions": "0+", "fields": [
            {"name": "N", "type": "int8", "versions": "0+"}]}],
    }
    message = load_message(write_schema(tmp_path, spec))
    ref = bytes(range(16))
    part = b"\x05\x00"  # N = 5, no tags
    body = ref + uvarint(2) + part + b"\xff"  # Maybe: int8 marker -1 = null
    # Extra absent: its default (an empty Part) is not written
    assert message.read(body + uvarint(0), 0) == {
        "ref": uuid_string(ref), "parts": [{"n": 5}], "maybe": None}
    assert uuid_string(ref) == base64.urlsafe_b64encode(ref).decode().rstrip("=")
    # Extra tagged as null (varint marker 0): null is not the default, so it is written
    assert message.read(body + uvarint(1) + uvarint(0) + uvarint(1) + b"\x00", 0)["extra"] is None
    present = ref + uvarint(1) + b"\x01" + part + uvarint(1) + uvarint(0) + uvarint(3) + b"\x01" + part
    assert message.read(present, 0) == {"ref": uuid_string(ref), "parts": [], "maybe": {"n": 5},
                                        "extra": {"n": 5}}


def test_bad_schemas(tmp_path):
    with pytest.raises(SchemaError, match="unknown type"):
        load_message(write_schema(tmp_path, {"name": "A", "validVersions": "0", "fields": [
            {"name": "X", "type": "[]Nowhere", "versions": "0+"}]}))
    with pytest.raises(SchemaError, match="no 'validVersions'"):
        load_message(write_schema(tmp_path, {"name": "B", "fields": []}))
    with pytest.raises(SchemaError, match="has no tag"):
        load_message(write_schema(tmp_path, {"name": "C", "validVersions": "0",
                                             "flexibleVersions": "0+", "fields": [
            {"name": "X", "type": "int8", "taggedVersions": "0+"}]}))


def test_a_new_record_type_and_value_version_are_data(tmp_path):
    """A coordinator topic is its directory of schemas: adding a key schema adds a record type,
    widening validVersions adds a value version, without touching code."""
    write_schema(tmp_path, {"name": "ThingKey", "validVersions": "9", "fields": [
        {"name": "Id", "type": "string", "versions": "9"}]})
    write_schema(tmp_path, {"name": "ThingValue", "validVersions": "0", "fields": [
        {"name": "Count", "type": "int32", "versions": "0+"}]})
    key = struct.pack(">h", 9) + s16("t1")
    topic = CoordinatorTopic("__things", tmp_path)
    assert topic.record_types == {9: "ThingKey"}
    assert topic.decode(key, struct.pack(">hi", 0, 4)).to_json() == {
        "key": {"type": 9, "name": "ThingKey", "data": {"id": "t1"}},
        "value": {"version": 0, "data": {"count": 4}}}
    newer = topic.decode(key, struct.pack(">hiq", 1, 4, 77))
    assert newer.value is None and "no version 1" in newer.warnings[0]
    write_schema(tmp_path, {"name": "ThingValue", "validVersions": "0-1", "flexibleVersions": "1+",
                            "fields": [{"name": "Count", "type": "int32", "versions": "0+"},
                                       {"name": "Since", "type": "int64", "versions": "1+"}]})
    topic = CoordinatorTopic("__things", tmp_path)
    assert topic.decode(key, struct.pack(">hiq", 1, 4, 77) + b"\x00").value == {"count": 4, "since": 77}


def test_two_keys_claiming_one_type_is_a_schema_error(tmp_path):
    for name in ("AKey", "BKey"):
        write_schema(tmp_path, {"name": name, "validVersions": "1-2", "fields": []})
    with pytest.raises(SchemaError, match="claimed by AKey and BKey"):
        CoordinatorTopic("__x", tmp_path)
