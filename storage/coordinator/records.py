"""Records of Kafka's coordinator topics, ``__consumer_offsets`` and ``__transaction_state``,
decoded through the message schemas in ``messages/``.

A key starts with an int16, the record type; the rest of the key is the key message of that
type. A value starts with an int16, its version; the rest is the value message at that version;
a null value is a tombstone (Kafka's ``CoordinatorRecordSerde``, ``TransactionLog``). Which
schema a type uses is data: every ``<Name>Key.json`` of the topic's directory reads the record
types listed in its ``validVersions`` (as Kafka's generated keys did), and its values are
``<Name>Value.json``. A new record type or value version is a new or edited schema file.

Decoding never raises: a record whose type, version or bytes the schemas do not cover comes
back with its undecodable part raw and a warning saying why.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import logging
import struct
from pathlib import Path
from typing import Any

from storage.coordinator.schema import Message, MessageFormatError, SchemaError, load_message

__all__ = ["CONSUMER_OFFSETS", "SHARE_GROUP_STATE", "TRANSACTION_STATE", "CoordinatorRecord", "CoordinatorTopic",
           "RecordFold", "consumer_protocol", "decoded_line", "for_topic", "read_consumer_protocol",
           "share_group_state"]

log = logging.getLogger(__name__)

MESSAGES = Path(__file__).resolve().parent / "messages"
CONSUMER_OFFSETS = "__consumer_offsets"
TRANSACTION_STATE = "__transaction_state"
SHARE_GROUP_STATE = "__share_group_state"  # the share coordinator's (KIP-932), dump only
# the schema directory of each topic, named after the Kafka module that defines its records
_TOPIC_DIRECTORIES = {CONSUMER_OFFSETS: "group-coordinator",
                      TRANSACTION_STATE: "transaction-coordinator"}
_INT16 = struct.Struct(">h")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


@dataclasses.dataclass(frozen=True)
class CoordinatorRecord:
    """One decoded record of a coordinator topic.

    ``record_type`` is the key's int16 prefix (None when the key is null or shorter than 2
    bytes), ``key_name`` the key schema's name (None for an unknown type), ``key`` the key's
    fields in ``<Message>JsonConverter`` shape (None when not decoded). ``tombstone`` is True
    for a null value; otherwise ``value_version`` is the value's int16 prefix (None when
    shorter than 2 bytes) and ``value`` its fields (None when not decoded). ``raw_key`` /
    ``raw_value`` hold the bytes of a part that was not decoded; ``warnings`` say why."""

    record_type: int | None
    key_name: str | None
    key: dict[str, Any] | None
    tombstone: bool
    value_version: int | None = None
    value: dict[str, Any] | None = None
    raw_key: bytes | None = None
    raw_value: bytes | None = None
    warnings: tuple[str, ...] = ()

    @property
    def value_name(self) -> str | None:
        """The value schema's name: the key's with ``Value`` for ``Key``."""
        return None if self.key_name is None else self.key_name[:-3] + "Value"

    @property
    def decoded(self) -> bool:
        """True when key and value (unless a tombstone) were both decoded."""
        return self.key is not None and (self.tombstone or self.value is not None)

    def to_json(self) -> dict[str, Any]:
        """``{"key": {"type", "name", "data"}, "value": {"version", "data"} | null}``, the
        shape of Kafka's decoded records; a part left raw has ``"raw"`` (standard base64)
        instead of ``"data"``."""
        if self.key is not None:
            key = {"type": self.record_type, "name": self.key_name, "data": self.key}
        else:
            key = {"type": self.record_type, "name": self.key_name, "raw": _b64(self.raw_key)}
        if self.tombstone:
            value = None
        elif self.value is not None:
            value = {"version": self.value_version, "data": self.value}
        else:
            value = {"version": self.value_version, "raw": _b64(self.raw_value)}
        return {"key": key, "value": value}


def _prefix(data: bytes) -> int | None:
    return _INT16.unpack_from(data)[0] if len(data) >= 2 else None


class CoordinatorTopic:
    """The record schemas of one coordinator topic (``directory`` holds its ``*Key.json`` and
    ``*Value.json`` files). Raises SchemaError for a malformed schema file, or two key schemas
    claiming one record type."""

    def __init__(self, topic: str, directory: Path) -> None:
        self.topic = topic
        self._types: dict[int, tuple[Message, Message | None]] = {}
        for path in sorted(directory.glob("*Key.json")):
            key = load_message(path)
            value_path = path.with_name(path.name[:-len("Key.json")] + "Value.json")
            value = load_message(value_path) if value_path.exists() else None
            for record_type in self._record_types(key):
                if record_type in self._types:
                    raise SchemaError(f"record type {record_type} of {topic} is claimed by "
                                      f"{self._types[record_type][0].name} and {key.name}")
                self._types[record_type] = (key, value)

    @staticmethod
    def _record_types(key: Message) -> range:
        if key.api_key is not None:  # a "coordinator-key" schema: its apiKey is the type
            return range(key.api_key, key.api_key + 1)
        versions = key.valid_versions
        if versions.high is None:
            raise SchemaError(f"{key.name}: a key's validVersions (its record types) must be bounded")
        return range(versions.low, versions.high + 1)

    @property
    def record_types(self) -> dict[int, str]:
        """Every known record type and its key schema's name."""
        return {t: key.name for t, (key, _) in sorted(self._types.items())}

    def decode(self, key: bytes | None, value: bytes | None) -> CoordinatorRecord:
        """Decode one record's key and value bytes (never raises)."""
        if key is None:
            return CoordinatorRecord(None, None, None, value is None, _prefix(value or b""),
                                     raw_value=value,
                                     warnings=(f"a record of {self.topic} without a key",))
        record_type = _prefix(key)
        if record_type is None:
            return self._raw(None, None, key, value, f"a key of {len(key)} bytes has no record type")
        schemas = self._types.get(record_type)
        if schemas is None:
            return self._raw(record_type, None, key, value,
                             f"unknown record type {record_type} in {self.topic}")
        key_schema, value_schema = schemas
        # A "coordinator-key" (apiKey) schema's generated reader reads every field whatever
        # version it is given, that is as version 0; the older keys are read at their type.
        key_version = 0 if key_schema.api_key is not None else record_type
        try:
            key_data = key_schema.read(key, key_version, 2)
        except MessageFormatError as e:
            return self._raw(record_type, key_schema.name, key, value,
                             f"key of type {record_type} ({key_schema.name}): {e}")
        if value is None:
            return CoordinatorRecord(record_type, key_schema.name, key_data, True)
        return self._with_value(record_type, key_schema.name, key_data, value_schema, value)

    def _with_value(self, record_type: int, key_name: str, key_data: dict, schema: Message | None,
                    value: bytes) -> CoordinatorRecord:
        version = _prefix(value)
        if version is None:
            problem = f"a value of {len(value)} bytes has no version"
        elif schema is None:
            problem = f"no value schema for record type {record_type} ({key_name})"
        else:
            try:
                return CoordinatorRecord(record_type, key_name, key_data, False, version,
                                         schema.read(value, version, 2))
            except MessageFormatError as e:
                problem = f"value version {version} ({schema.name}): {e}"
        return CoordinatorRecord(record_type, key_name, key_data, False, version,
                                 raw_value=value, warnings=(problem,))

    @staticmethod
    def _raw(record_type: int | None, name: str | None, key: bytes, value: bytes | None,
             problem: str) -> CoordinatorRecord:
        version = None if value is None else _prefix(value)
        return CoordinatorRecord(record_type, name, None, value is None, version,
                                 raw_key=key, raw_value=value, warnings=(problem,))


@functools.cache
def for_topic(topic: str) -> CoordinatorTopic | None:
    """The decoder of ``__consumer_offsets`` or ``__transaction_state``; None for any other
    topic. Loaded once per process."""
    directory = _TOPIC_DIRECTORIES.get(topic)
    return None if directory is None else CoordinatorTopic(topic, MESSAGES / directory)


@functools.cache
def share_group_state() -> CoordinatorTopic:
    """The decoder of ``__share_group_state`` (``ShareCoordinatorRecordSerde``: the same
    int16-prefixed keys and values as the other coordinators'), for ``kfs dump``. Loaded once
    per process."""
    return CoordinatorTopic(SHARE_GROUP_STATE, MESSAGES / "share-coordinator")


class RecordFold:
    """What a coordinator partition's records add up to, fed in offset order: subclasses
    give ``topic`` and :meth:`fold`, the state change of one decoded record."""

    topic: str

    def __init__(self) -> None:
        self._decoder = for_topic(self.topic)
        self.next_offset = 0  # the offset after the last record applied
        self.undecoded = 0  # records left raw (their warnings are in apply's result)

    def apply(self, record) -> CoordinatorRecord:
        """Apply one record (a ``storage.records.Record``: ``offset``, ``timestamp``, ``key``,
        ``value``) and return its decoding, whose ``warnings`` say what was not understood
        (such a record changes nothing). Raises ValueError for a record below
        :attr:`next_offset`: records must come in offset order."""
        decoded = self._decoder.decode(record.key, record.value)
        self.apply_decoded(record.offset, record.timestamp, decoded)
        return decoded

    def apply_decoded(self, offset: int, timestamp: int, decoded: CoordinatorRecord) -> None:
        """:meth:`apply` for a record already decoded by this topic's decoder."""
        if offset < self.next_offset:
            raise ValueError(f"record at offset {offset} applied after offset {self.next_offset - 1}")
        self.next_offset = offset + 1
        if not decoded.decoded:
            self.undecoded += 1
            return
        self.fold(offset, timestamp, decoded)

    def fold(self, offset: int, timestamp: int, decoded: CoordinatorRecord) -> None:
        raise NotImplementedError


def decoded_line(topic: str, key: bytes | None, value: bytes | None, offset: int = -1) -> bytes:
    """A record of ``topic`` (a coordinator topic) as one JSON line,
    ``{"key": {...}, "value": {...} | null}`` (:meth:`CoordinatorRecord.to_json`) and
    ``\n``, as Kafka's console-consumer formatters print such records; what does not decode
    is shown raw and logged as a warning (naming ``offset``). Raises ValueError for another
    topic."""
    decoder = for_topic(topic)
    if decoder is None:
        raise ValueError(f"{topic} is not a coordinator topic")
    decoded = decoder.decode(key, value)
    for warning in decoded.warnings:
        log.warning("%s: offset %d shown raw: %s", topic, offset, warning)
    obj = decoded.to_json()
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


@functools.cache
def client_message(name: str) -> Message:
    """One of the clients' message schemas kept in ``messages/clients/``: the consumer
    protocol's (``ConsumerProtocolSubscription``, ``ConsumerProtocolAssignment``) and the
    values of KRaft's control records (``LeaderChangeMessage``, ``SnapshotHeaderRecord``,
    ``SnapshotFooterRecord``, ``KRaftVersionRecord``, ``VotersRecord``). Raises
    FileNotFoundError for another name."""
    return load_message(MESSAGES / "clients" / f"{name}.json")


def consumer_protocol(name: str) -> Message:
    """``ConsumerProtocolSubscription`` or ``ConsumerProtocolAssignment``: what classic
    consumers put in a group member's subscription and assignment bytes (a version-prefixed
    message). Raises FileNotFoundError for another name."""
    return client_message(name)


def read_consumer_protocol(name: str, data: bytes) -> dict[str, Any] | None:
    """Decode a classic consumer's subscription or assignment bytes (an int16 version, then
    ``name``, i.e. ``ConsumerProtocolSubscription`` or ``ConsumerProtocolAssignment``); None
    when they do not decode. A version newer than the schema's is read as the newest one, as
    ``ConsumerProtocol`` does."""
    message = consumer_protocol(name)
    version = _prefix(data)
    if version is None:
        return None
    if message.valid_versions.high is not None:
        version = min(version, message.valid_versions.high)
    try:
        return message.read(data, version, 2)
    except MessageFormatError:
        return None
