"""KRaft's metadata log, ``__cluster_metadata``: its records decoded through Kafka 4.1.1's
metadata schemas (``metadata/src/main/resources/common/metadata/*.json``, kept as data in
``messages/metadata/``).

A metadata record has a null key; its value is what ``MetadataRecordSerde`` writes (through
``AbstractApiMessageSerde``): an unsigned varint frame version (1), an unsigned varint record
type (the schema's ``apiKey``), an unsigned varint version, then the message of that type at
that version, and nothing after it. The same records make up the log's segments (``.log``) and
its snapshots (``<20-digit offset>-<10-digit epoch>.checkpoint``, between a SnapshotHeader and
a SnapshotFooter control record).

:func:`read_metadata_record` mirrors ``MetadataRecordSerde.read``; its failures carry the
message Kafka's ``MetadataParseException`` would (:attr:`MetadataParseError.kafka_message`)
and kfs's own more precise reason. Where kfs is stricter than Kafka, on purpose: a version
outside the schema's ``validVersions`` fails (Kafka's generated readers read any version as
the fields' version ranges say, so a record of a later Kafka would print half-understood).

:func:`dump_payload` is what ``kafka-dump-log --cluster-metadata-decoder`` prints after
``payload:``: ``{"type":"TOPIC_RECORD","version":0,"data":{...}}`` (``MetadataRecordType``'s
name, the version, the message as ``MetadataJsonConverters.writeJson`` writes it), or
``Error at <offset>, skipping. <message>``.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from storage.coordinator.api_message import FRAME_VERSION, FrameError, read_frame
from storage.coordinator.dumplog import java_json
from storage.coordinator.records import MESSAGES
from storage.coordinator.schema import Message, MessageFormatError, SchemaError, load_message
from storage.log_files import CLUSTER_METADATA_TOPIC, LOG_SUFFIX, offset_from_file_name
from storage.log_reader import LogReader
from storage.segment_source import FileRecords, LocalSegmentSource

__all__ = ["BOOTSTRAP_CHECKPOINT", "CHECKPOINT_SUFFIX", "CLUSTER_METADATA", "FRAME_VERSION",
           "MetadataParseError", "MetadataRecord",
           "dump_payload", "metadata_json", "metadata_schemas", "read_metadata_record",
           "read_metadata_log", "record_type_name", "snapshot_id"]

CLUSTER_METADATA = CLUSTER_METADATA_TOPIC
CHECKPOINT_SUFFIX = ".checkpoint"  # Snapshots.SUFFIX
BOOTSTRAP_CHECKPOINT = "bootstrap.checkpoint"  # BootstrapDirectory.BINARY_BOOTSTRAP_FILENAME
_SNAPSHOT_NAME = re.compile(r"(\d{20})-(\d{10})\.checkpoint")


class MetadataParseError(ValueError):
    """A value that is not a metadata record. ``kafka_message`` is the message of the
    ``MetadataParseException`` Kafka throws for it; ``str()`` is kfs's reason, naming the
    record type and version when they were read."""

    def __init__(self, kafka_message: str, reason: str | None = None) -> None:
        super().__init__(reason or kafka_message)
        self.kafka_message = kafka_message


def snapshot_id(name: str) -> tuple[int, int] | None:
    """(end offset, epoch) of a snapshot's file name, ``<20-digit offset>-<10-digit
    epoch>.checkpoint`` (``Snapshots.parse``); None for another name."""
    m = _SNAPSHOT_NAME.fullmatch(name)
    return None if m is None else (int(m.group(1)), int(m.group(2)))


def record_type_name(name: str) -> str:
    """``MetadataRecordType``'s constant name of a record schema: MessageGenerator's
    ``toSnakeCase`` upper-cased (``TopicRecord`` -> ``TOPIC_RECORD``; a run of capitals gets no
    underscores inside it)."""
    out, previous_capital = [], True
    for ch in name:
        if ch.isupper():
            if not previous_capital:
                out.append("_")
            out.append(ch.lower())
            previous_capital = True
        else:
            out.append(ch)
            previous_capital = False
    return "".join(out).upper()


@functools.cache
def metadata_schemas() -> dict[int, Message]:
    """Every metadata record schema by its ``apiKey`` (loaded once). Raises SchemaError for a
    schema without an ``apiKey`` or two schemas of one type."""
    schemas: dict[int, Message] = {}
    for path in sorted((MESSAGES / "metadata").glob("*.json")):
        message = load_message(path)
        if message.api_key is None:
            raise SchemaError(f"{path.name}: a metadata record schema needs an apiKey")
        if message.api_key in schemas:
            raise SchemaError(f"metadata record type {message.api_key} is claimed by "
                              f"{schemas[message.api_key].name} and {message.name}")
        schemas[message.api_key] = message
    return schemas


@dataclasses.dataclass(frozen=True)
class MetadataRecord:
    """One decoded metadata record: its type (``api_key``, the schema's ``name``), ``version``
    and fields (``data``, in ``<Message>JsonConverter`` shape)."""

    api_key: int
    name: str
    version: int
    data: dict[str, Any]

    @property
    def type_name(self) -> str:
        """``MetadataRecordType.toString()``: ``TOPIC_RECORD``, ``PARTITION_CHANGE_RECORD``..."""
        return record_type_name(self.name)

    def to_json(self) -> dict[str, Any]:
        """``{"type", "version", "data"}``: the object kafka-dump-log prints."""
        return {"type": self.type_name, "version": self.version, "data": self.data}


def read_metadata_record(value: bytes | None) -> MetadataRecord:
    """Decode one record value of ``__cluster_metadata`` (``MetadataRecordSerde.read``).
    Raises MetadataParseError for a null value, an unknown frame version, record type or
    version, bytes that do not hold the message, or bytes after it; its reason names the
    record type and version and holds the value's bytes (hex)."""
    if value is None:
        raise MetadataParseError("Error while reading frame version",
                                 "a metadata record without a value")
    try:
        api_key, version, pos = read_frame(value)
    except FrameError as e:
        raise MetadataParseError(e.kafka_message, e.reason) from None
    schema = metadata_schemas().get(api_key)
    if schema is None:
        raise MetadataParseError(
            "org.apache.kafka.common.errors.UnsupportedVersionException: Unknown metadata id "
            f"{api_key}",
            f"unknown metadata record type {api_key} (version {version}; the schemas know types "
            f"{min(metadata_schemas())}-{max(metadata_schemas())}), value {value.hex()}")
    try:
        data, end = schema.read_with_end(value, version, pos)
    except MessageFormatError as e:
        raise MetadataParseError(f"Failed to deserialize record with type {api_key}",
                                 f"{schema.name} (type {api_key}) version {version}: {e}; "
                                 f"value {value.hex()}") from None
    if end < len(value):
        raise MetadataParseError(
            f"Found {len(value) - end} byte(s) of garbage after {api_key}",
            f"{schema.name} (type {api_key}) version {version}: {len(value) - end} byte(s) after "
            f"the message; value {value.hex()}")
    return MetadataRecord(api_key, schema.name, version, data)


def dump_payload(value: bytes | None, offset: int) -> tuple[str, str | None]:
    """(what kafka-dump-log --cluster-metadata-decoder prints after ``payload:`` for the record
    value at ``offset``, kfs's warning or None): the record's JSON, or ``Error at <offset>,
    skipping. <Kafka's message>`` and the reason it did not decode."""
    try:
        record = read_metadata_record(value)
    except MetadataParseError as e:
        return f"Error at {offset}, skipping. {e.kafka_message}", str(e)
    return java_json(record.to_json()), None


def metadata_json(value: bytes | None) -> tuple[dict[str, Any], list[str]]:
    """A record value as JSON: ``{"type", "apiKey", "name", "version", "data"}`` and no
    warnings, or ``{"raw": <base64 or null>}`` and the reason it did not decode."""
    try:
        record = read_metadata_record(value)
    except MetadataParseError as e:
        raw = None if value is None else base64.b64encode(value).decode("ascii")
        return {"raw": raw}, [str(e)]
    return {"type": record.type_name, "apiKey": record.api_key, "name": record.name,
            "version": record.version, "data": record.data}, []


def read_metadata_log(directory: str | Path) -> Iterator[tuple[int, int, bytes | None]]:
    """(offset, timestamp in ms, value) of every metadata record in the ``.log`` segments of
    ``directory`` (a ``__cluster_metadata-0``), in offset order; control batches (leader
    changes, KRaft versions and voters) are skipped. Raises CorruptRecordError for a corrupt
    batch, OSError for a file that cannot be read."""
    logs = sorted(Path(directory).glob(f"*{LOG_SUFFIX}"),
                  key=lambda p: offset_from_file_name(p.name))
    for path in logs:
        source = LocalSegmentSource.of_path(path)
        try:
            records = FileRecords(source)
            for batch in LogReader.whole_batches(records, 0, records.size):
                if batch.is_control_batch:
                    continue
                for record in batch.records():
                    yield record.offset, record.timestamp, record.value
        finally:
            source.close()
