"""``kfs dump FILE...``: print segment files as Kafka's ``kafka-dump-log`` (``DumpLogSegments``)
does, or as JSON lines.

The kind of file is the text after the last ``.`` of its name, as in Kafka: ``.log`` (one line
per batch, and one ``| offset: ...`` line per record with ``deep_iteration``/``print_data_log``),
``.index``, ``.timeindex`` (each entry checked against the sibling ``.log``; mismatches go to
stderr after all files, in Kafka's words), ``.snapshot``, ``.txnindex`` and KRaft's
``.checkpoint`` snapshots. Nothing is written to any file.

The text is Kafka 4.1.1's, line for line (tests/kafka/test_kafka_dump_log.py runs both tools on a
real broker's segments): v0/v1 entries in their own lines, KRaft control records (LeaderChange,
SnapshotHeader/Footer, KRaftVersion, KRaftVoters) as the JSON of their values, keys and values
made text as Java's ``new String(bytes, UTF_8)`` makes it (malformed bytes replaced its way),
paths as ``java.io.File`` prints them. Two differences are kept on purpose: the reports on
stderr come in the order the files were given (Kafka's come in a Scala HashMap's order), and
``--transaction-log-decoder`` prints the text of the Kafka that dumped
tests/fixtures/internal-topics (``transaction_metadata::transactionalId=...``), where 4.1.1
prints the JSON of the record's key and value.

With ``json`` every line on stdout is one JSON object: a batch (Kafka's batch fields), a record
(kcat ``-J`` fields ``topic partition offset tstype ts headers key payload`` plus batch context),
or an index entry. Bytes that are valid UTF-8 are strings, others ``{"base64": "..."}``, null
stays null; headers are kcat's flat ``[key, value, key, value, ...]`` list.

``offsets_decoder`` / ``transaction_log_decoder`` (kafka-dump-log's ``--offsets-decoder`` and
``--transaction-log-decoder``; they imply ``print_data_log``, the first wins when both are
given) decode the records of ``__consumer_offsets`` / ``__transaction_state``
(:mod:`storage.coordinator`): the text lines then carry after ``key:`` and ``payload:`` what
Kafka's tool prints, and in ``json`` a record's ``key`` is the decoded key
``{"type", "name", "data"}`` and ``payload`` gives way to ``value``, the decoded value
``{"version", "data"}`` or null for a tombstone (control records stay as they are). A record the
schemas do not cover is printed as Kafka's tool prints it (``Unknown record type ...`` /
``Error at offset ...`` as its key), in JSON with ``"raw"`` (base64) instead of ``"data"`` and a
``warnings`` list; either way a ``kfs dump: <file>: offset N: warning: ...`` line goes to
stderr (the exit status stays 0).

``remote_log_metadata_decoder`` (``--remote-log-metadata-decoder``; it implies
``print_data_log``; the coordinator decoders win over it, as in Kafka) decodes the records of
``__remote_log_metadata``, Kafka's tiered-storage metadata (:mod:`storage.remote.metadata`):
the text lines print no key and after ``payload:`` the ``toString()`` of the Kafka class the
value holds (``RemoteLogSegmentMetadata{...}``, ``RemoteLogSegmentMetadataUpdate{...}``,
``RemotePartitionDeleteMetadata{...}``), or ``Error at offset N, skipping. <why>`` as Kafka's
tool prints it (with the warning on stderr); in JSON ``payload`` gives way to ``value``,
``{"apiKey", "name", "version", "data"}`` (the message's fields) or ``{"raw"}`` and a
``warnings`` list.

``cluster_metadata_decoder`` (``--cluster-metadata-decoder``) decodes KRaft's metadata log
(:mod:`storage.coordinator.cluster_metadata`): no key, after ``payload:`` the record as
``{"type":"TOPIC_RECORD","version":0,"data":{...}}`` or ``Error at N, skipping. <why>`` (and a
warning on stderr naming its type, version and bytes); in JSON ``value``
``{"type", "apiKey", "name", "version", "data"}`` or ``{"raw"}`` and ``warnings``. Snapshots,
``.checkpoint`` files, dump as ``.log`` files do after their ``Snapshot end offset: N, epoch:
E`` line. ``share_group_state_decoder`` (``--share-group-state-decoder``) decodes
``__share_group_state`` as the offsets decoder does ``__consumer_offsets``. When several
decoders are given the first in Kafka's order wins: offsets, transaction log, cluster metadata,
remote log metadata, share group state.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import dataclasses
import functools
import gc
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TextIO

from storage.directory import StoreOptions, check_file, open_segment_source, read_file
from storage.location import Location
from storage.log_files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    filename_prefix,
    offset_from_file_name,
)
from storage.coordinator.cluster_metadata import (
    BOOTSTRAP_CHECKPOINT,
    CHECKPOINT_SUFFIX,
    metadata_json,
    snapshot_id,
)
from storage.coordinator.cluster_metadata import dump_payload as cluster_metadata_payload
from storage.coordinator.dumplog import java_json, offsets_key_payload, transaction_key_payload
from storage.coordinator.records import (
    CONSUMER_OFFSETS,
    SHARE_GROUP_STATE,
    TRANSACTION_STATE,
    CoordinatorRecord,
    CoordinatorTopic,
    client_message,
    for_topic,
    share_group_state,
)
from storage.coordinator.schema import Message, MessageFormatError, Struct
from storage.errors import (
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaStorageError,
)
from storage.log_reader import LogReader
from storage.offset_index import OffsetIndex
from storage.producer_state import ProducerStateEntry, decode_snapshot
from storage.records import Record, RecordBatch
from storage.records.legacy import COMPRESSION_CODEC_MASK as LEGACY_CODEC_MASK
from storage.records.legacy import LegacyRecordBatch
from storage.remote.metadata import dump_payload as remote_metadata_payload
from storage.remote.metadata import remote_metadata_json
from storage.records.control import (
    ControlRecordType,
    decode_control_record_key,
    decode_end_txn_marker_value,
)
from storage.segment import Batch
from storage.segment_source import FileRecords, IndexContents
from storage.time_index import TimeIndex
from storage.topic_partition import parse_partition_dir_name
from storage.transaction_index import TransactionIndex

from kfs.args import add_store_arguments, positive_int, store_options, with_stdout
from kfs.record_format import PlainFormat, StreamFormat

__all__ = ["DumpOptions", "batch_line", "dump_files", "record_line", "snapshot_line"]

MAX_BYTES_DEFAULT = 2**31 - 1  # Integer.MAX_VALUE, kafka-dump-log's --max-bytes default
MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # kafka-dump-log's --max-message-size default
_ENTRY_BLOCK = 64 * 1024  # .log bytes read at an index entry (a larger batch is read whole)
RECORD_INDENT = "|"
SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, SNAPSHOT_SUFFIX, TXN_INDEX_SUFFIX,
            CHECKPOINT_SUFFIX)
# kafka-dump-log's decoders, in the order it picks the first one given
OFFSETS, TRANSACTION_LOG, CLUSTER_METADATA, REMOTE_LOG_METADATA, SHARE_GROUP_STATE_DECODER = (
    "offsets", "transaction-log", "cluster-metadata", "remote-log-metadata", "share-group-state")


@dataclasses.dataclass(frozen=True)
class DumpOptions:
    """kafka-dump-log's options (``print_data_log`` implies ``deep_iteration``; the decoders
    imply both), plus ``json``.

    ``max_bytes`` limits how much of each ``.log`` is read (from its start)."""

    deep_iteration: bool = False
    print_data_log: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    skip_record_metadata: bool = False
    max_bytes: int = MAX_BYTES_DEFAULT
    json: bool = False
    offsets_decoder: bool = False
    transaction_log_decoder: bool = False
    remote_log_metadata_decoder: bool = False
    cluster_metadata_decoder: bool = False
    share_group_state_decoder: bool = False
    store: StoreOptions = StoreOptions()  # how to reach an object store (endpoint, region)

    @property
    def decoder(self) -> str | None:
        """The decoder the records are read with: the first given in kafka-dump-log's order
        (offsets, transaction log, cluster metadata, remote log metadata, share group state)."""
        for name, given in ((OFFSETS, self.offsets_decoder),
                            (TRANSACTION_LOG, self.transaction_log_decoder),
                            (CLUSTER_METADATA, self.cluster_metadata_decoder),
                            (REMOTE_LOG_METADATA, self.remote_log_metadata_decoder),
                            (SHARE_GROUP_STATE_DECODER, self.share_group_state_decoder)):
            if given:
                return name
        return None

    @property
    def print_data(self) -> bool:
        return self.print_data_log or self.decoder is not None

    @property
    def remote_metadata(self) -> bool:
        """Whether records are decoded as ``__remote_log_metadata``'s."""
        return self.decoder == REMOTE_LOG_METADATA

    @property
    def cluster_metadata(self) -> bool:
        """Whether records are decoded as ``__cluster_metadata``'s."""
        return self.decoder == CLUSTER_METADATA

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.print_data

    @property
    def coordinator_topic(self) -> str | None:
        """The coordinator topic whose records the chosen decoder reads, if it is one."""
        return {OFFSETS: CONSUMER_OFFSETS, TRANSACTION_LOG: TRANSACTION_STATE,
                SHARE_GROUP_STATE_DECODER: SHARE_GROUP_STATE}.get(self.decoder)


def dump_files(paths: Sequence[str], options: DumpOptions, out: TextIO, err: TextIO) -> int:
    """Dump each file in order; then print, on ``err``, what kafka-dump-log reports after all
    files (index mismatches, time-index errors, non-consecutive offsets).

    Returns the exit status: 0, or 1 when some file was missing, of an unknown kind or
    unreadable (each such file gets one ``kfs dump: ...`` line on ``err``; the others are still
    dumped). Mismatches are reported as Kafka does and do not change the status."""
    dumper = _Dumper(options, out, err)
    # Records are made and dropped by the million, none in a cycle: the cyclic collector's
    # passes over them would only cost time.
    collecting = gc.isenabled()
    gc.disable()
    try:
        for path in paths:
            dumper.dump(path)
    finally:
        if collecting:
            gc.enable()
    dumper.reports.print(err)
    return dumper.status


# -- Kafka's text lines -------------------------------------------------------------------


def _java_bool(value: bool) -> str:
    return "true" if value else "false"


def _delete_horizon(batch: RecordBatch) -> int | None:
    """``RecordBatch.deleteHorizonMs``: baseTimestamp when the delete-horizon bit is set."""
    return batch.base_timestamp if batch.has_delete_horizon else None


def _is_valid(batch: RecordBatch) -> bool:
    """``RecordBatch.isValid``: size and CRC-32C (no record decoding)."""
    try:
        batch.ensure_valid()
    except CorruptRecordError:
        return False
    return True


def _codec_name(batch: RecordBatch) -> str:
    return batch.compression_type.kafka_name  # InvalidRecordError for ids 5-7, as Kafka


def batch_line(batch: RecordBatch | LegacyRecordBatch, position: int) -> str:
    """kafka-dump-log's line for the batch at ``position`` in its file (``printBatchLevel``):
    a v2 batch's fields, or for a v0/v1 entry only its offset, then what both have."""
    if batch.magic >= 2:
        horizon = _delete_horizon(batch)
        head = (
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
            f"count: {batch.records_count} baseSequence: {batch.base_sequence} "
            f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {_java_bool(batch.is_transactional)} "
            f"isControl: {_java_bool(batch.is_control_batch)} deleteHorizonMs: "
            f"{'OptionalLong.empty' if horizon is None else f'OptionalLong[{horizon}]'}")
    else:
        head = f"offset: {batch.last_offset}"
    return (
        f"{head} position: {position} {batch.timestamp_type.kafka_name}: {batch.max_timestamp} "
        f"size: {batch.size_in_bytes} magic: {batch.magic} compresscodec: {_codec_name(batch)} "
        f"crc: {batch.crc} isvalid: {_java_bool(_is_valid(batch))}"
    )


def _legacy_record_checks(batch: LegacyRecordBatch) -> list[tuple[bool, int]]:
    """(isValid, crc) of each record of a v0/v1 entry, as kafka-dump-log prints them after a
    legacy record: the entry's own for a plain message, each inner message's for a compressed
    wrapper (whose records() already checked every inner CRC, so they are valid)."""
    if not batch.attributes & LEGACY_CODEC_MASK:
        return [(_is_valid(batch), batch.crc)]
    return [(True, crc) for crc in batch.record_crcs()]


# -- Java's String(bytes, UTF_8) ----------------------------------------------------------
#
# kafka-dump-log's StringDecoder makes text of keys and values with ``new String(bytes,
# UTF_8)``, which replaces malformed input with U+FFFD in its own way (JDK 17's
# ``String.decodeUTF8_UTF16``), not Python's "maximal subpart" way: a surrogate encoded in three
# bytes (ED A0 80) is one U+FFFD for Java and three for Python; a sequence cut short at the end
# of the bytes ends the text with one U+FFFD. Both take exactly the well-formed sequences as
# text, so Python's decoder runs as it is and this error handler, called at the first byte
# Python finds malformed, answers what Java does there: one U+FFFD, and the position Java goes
# on from.

_REPL = "\ufffd"


def _not_continuation(b: int) -> bool:
    return (b & 0xC0) != 0x80


def _java_utf8_resume(data: bytes, sp: int) -> int:
    """Where Java's UTF-8 decoder goes on after the one U+FFFD it emits for the malformed
    input starting at ``data[sp]`` (``len(data)``: it stops there)."""
    sl = len(data)
    b1 = data[sp]
    sp += 1
    if 0xC2 <= b1 <= 0xDF:  # a 2-byte lead: the second byte is not a continuation
        return sp if sp < sl else sl
    if 0xE0 <= b1 <= 0xEF:  # 3-byte lead
        if sp + 1 < sl:
            b2, b3 = data[sp], data[sp + 1]
            bad2 = (b1 == 0xE0 and (b2 & 0xE0) == 0x80) or _not_continuation(b2)
            if bad2 or _not_continuation(b3):
                return sp + (0 if bad2 else 1)  # malformed3: 1 or 2 bytes
            return sp + 2  # a surrogate: all three bytes
        if sp < sl and ((b1 == 0xE0 and (data[sp] & 0xE0) == 0x80) or _not_continuation(data[sp])):
            return sp
        return sl
    if 0xF0 <= b1 <= 0xF7:  # 4-byte lead (F5-F7 too, as Java reads them)
        if sp + 2 < sl:  # not a supplementary code point, or a byte is not a continuation
            b2 = data[sp]
            if (b1 > 0xF4 or (b1 == 0xF0 and not 0x90 <= b2 <= 0xBF)
                    or (b1 == 0xF4 and (b2 & 0xF0) != 0x80) or _not_continuation(b2)):
                return sp  # malformed4: 1 byte
            return sp + 1 if _not_continuation(data[sp + 1]) else sp + 2
        if b1 > 0xF4 or (sp < sl and ((b1 == 0xF0 and not 0x90 <= data[sp] <= 0xBF)
                                      or (b1 == 0xF4 and (data[sp] & 0xF0) != 0x80)
                                      or _not_continuation(data[sp]))):
            return sp
        sp += 1
        if sp < sl and _not_continuation(data[sp]):
            return sp
        return sl
    return sp  # a continuation byte, C0, C1, F8-FF: 1 byte


def _java_utf8_errors(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    return _REPL, _java_utf8_resume(exc.object, exc.start)


codecs.register_error("kfs-java-utf8", _java_utf8_errors)


def _decode_text(data: bytes) -> str:
    """kafka-dump-log's default StringDecoder: ``new String(data, UTF_8)`` (JDK 17)."""
    return str(data, "utf-8", "kfs-java-utf8")


def _control_fields(record: Record) -> tuple[ControlRecordType, int, int | None]:
    """(type, raw type id, coordinator epoch of an end-transaction marker or None).
    Raises InvalidRecordError for a malformed key or marker value."""
    key = decode_control_record_key(record.key)
    epoch = decode_end_txn_marker_value(record.value)[1] if key.type.is_transaction_marker else None
    return key.type, key.type_id, epoch


# The values of KRaft's control records (their schemas, clients' common/message/*.json, are in
# storage/coordinator/messages/clients/): kafka-dump-log prints each, after its label, as its
# JSON converter writes it.
_KRAFT_CONTROL_SCHEMAS: dict[ControlRecordType, tuple[str, str]] = {
    ControlRecordType.LEADER_CHANGE: ("LeaderChange:", "LeaderChangeMessage"),
    ControlRecordType.SNAPSHOT_HEADER: ("SnapshotHeader", "SnapshotHeaderRecord"),
    ControlRecordType.SNAPSHOT_FOOTER: ("SnapshotFooter", "SnapshotFooterRecord"),
    ControlRecordType.KRAFT_VERSION: ("KRaftVersion", "KRaftVersionRecord"),
    ControlRecordType.KRAFT_VOTERS: ("KRaftVoters", "VotersRecord"),
}


@functools.cache
def _kraft_control_message(control_type: ControlRecordType) -> tuple[str, Message]:
    label, name = _KRAFT_CONTROL_SCHEMAS[control_type]
    return label, client_message(name)


def _written_at(message: Message, body: Struct, data: dict[str, Any], version: int) -> dict[str, Any]:
    """What ``<Message>JsonConverter.write(message, version)`` makes of ``data`` (read at
    version 0): the fields of ``version``, those not read at their defaults ("0+" fields are
    written whatever the version)."""
    out: dict[str, Any] = {}
    for f in body.fields:
        always = f.versions.low == 0 and f.versions.high is None
        if not always and version not in f.versions:
            continue
        value = data[f.json_name] if f.json_name in data else message.field_default(f, version)
        if f.struct is not None and value is not None:
            if f.element is not None:
                value = [_written_at(message, f.struct, v, version) for v in value]
            else:
                value = _written_at(message, f.struct, value, version)
        out[f.json_name] = value
    return out


def _kraft_control_text(control_type: ControlRecordType, record: Record) -> str:
    """`` LeaderChange: {...}``, `` SnapshotHeader {...}`` etc.: ControlRecordUtils reads the
    value at version 0 and kafka-dump-log prints the JSON of the version its Version field
    says. Raises InvalidRecordError for a value that does not decode."""
    label, message = _kraft_control_message(control_type)
    try:
        data = message.read(record.value or b"", 0)
    except MessageFormatError as e:
        raise InvalidRecordError(f"{message.name} of the control record at offset "
                                 f"{record.offset}: {e}") from None
    data = _written_at(message, message.body, data, data["version"])
    return f" {label} {java_json(data)}"


def _control_text(record: Record) -> str:
    control_type, type_id, epoch = _control_fields(record)
    if epoch is not None:
        return f" endTxnMarker: {control_type.name} coordinatorEpoch: {epoch}"
    if control_type in _KRAFT_CONTROL_SCHEMAS:
        return _kraft_control_text(control_type, record)
    return f" controlType: {control_type.name}({type_id})"


def _text_key_payload(record: Record) -> tuple[str | None, str | None]:
    return (None if record.key is None else _decode_text(record.key),
            None if record.value is None else _decode_text(record.value))


def record_line(batch: RecordBatch | LegacyRecordBatch, record: Record, print_data: bool = False,
                skip_metadata: bool = False,
                parse: Callable[[Record], tuple[str | None, str | None]] = _text_key_payload,
                legacy_check: tuple[bool, int] | None = None) -> str:
    """kafka-dump-log's deep-iteration line for one record of ``batch``: ``| offset: ...``,
    with, for a v2 batch, the sequence and header keys and the control marker of a control
    record, for a v0/v1 record its ``legacy_check`` (isValid, crc) and, with ``print_data``,
    ``key:`` and ``payload:``: what ``parse`` makes of the record (kafka-dump-log's
    MessageParser; by default text as Java decodes UTF-8, None for null, which is left out).
    Raises InvalidRecordError for a malformed control record."""
    parts = []
    prefix = f"{RECORD_INDENT} "
    if not skip_metadata:
        parts.append(
            f"{prefix}offset: {record.offset} {batch.timestamp_type.kafka_name}: {record.timestamp} "
            f"keySize: {-1 if record.key is None else len(record.key)} "
            f"valueSize: {-1 if record.value is None else len(record.value)}")
        prefix = " "
        if batch.magic >= 2:
            parts.append(f" sequence: {record.sequence} headerKeys: "
                         f"[{','.join(k for k, _ in record.headers)}]")
        elif legacy_check is not None:
            # the closing brace is Kafka's: its format string has one too many
            parts.append(f" isValid: {_java_bool(legacy_check[0])} crc: {legacy_check[1]}}}")
        if batch.is_control_batch:
            parts.append(_control_text(record))
    if print_data and not batch.is_control_batch:
        key, payload = parse(record)
        if key is not None:
            parts.append(f"{prefix}key: {key}")
        if payload is not None:
            parts.append(f" payload: {payload}")
    return "".join(parts)


def _java_text_bytes(data: bytes) -> bytes:
    """The UTF-8 of ``new String(data, UTF_8)``: ``data`` itself when it is well-formed."""
    if data.isascii():
        return data
    return str(data, "utf-8", "kfs-java-utf8").encode("utf-8")


def _plain_record_bytes(batch: RecordBatch, records: list[Record], print_data: bool,
                        skip_metadata: bool) -> bytes:
    """The UTF-8 of the record lines of a v2 data batch (not control), each ended by a
    newline: what :func:`record_line` makes of each record with the default parser, in one
    loop, made as bytes (a key or value that is ASCII is its own text)."""
    lines: list[bytes] = []
    append = lines.append
    text = _java_text_bytes
    if skip_metadata:
        for _, _, _, key, value, _, _ in records:
            line = b"| key: " + text(key) if print_data and key is not None else b""
            if print_data and value is not None:
                line += b" payload: " + text(value)
            append(line)
    else:
        template = (b"| offset: %d " + batch.timestamp_type.kafka_name.encode()
                    + b": %d keySize: %d valueSize: %d sequence: %d headerKeys: [%s]")
        for offset, timestamp, _, key, value, headers, sequence in records:
            line = template % (
                offset, timestamp, -1 if key is None else len(key),
                -1 if value is None else len(value), sequence,
                ",".join([h[0] for h in headers]).encode("utf-8", "replace") if headers else b"")
            if print_data:
                if key is not None:
                    line += b" key: " + (key if key.isascii() else text(key))
                if value is not None:
                    line += b" payload: " + (value if value.isascii() else text(value))
            append(line)
    append(b"")
    return b"\n".join(lines)


class _Output:
    """Where a dump's stdout goes: the text stream given, or, when it has one, the binary
    buffer under it, so that record lines made as UTF-8 bytes go out without being decoded
    and encoded again (everything then goes there, in order)."""

    def __init__(self, out: TextIO) -> None:
        self._text = out
        self._binary = getattr(out, "buffer", None)
        if self._binary is not None:
            out.flush()  # what was written through the text layer comes first

    def write(self, text: str) -> None:
        if self._binary is None:
            self._text.write(text)
        else:
            self._binary.write(text.encode("utf-8", "replace"))

    def write_bytes(self, data: bytes) -> None:
        if self._binary is None:
            self._text.write(data.decode("utf-8"))
        else:
            self._binary.write(data)


# -- JSON objects -------------------------------------------------------------------------


def _batch_object(batch: RecordBatch, position: int) -> dict[str, Any]:
    return {
        "baseOffset": batch.base_offset, "lastOffset": batch.last_offset,
        "count": batch.records_count, "baseSequence": batch.base_sequence,
        "lastSequence": batch.last_sequence, "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch, "partitionLeaderEpoch": batch.partition_leader_epoch,
        "isTransactional": batch.is_transactional, "isControl": batch.is_control_batch,
        "deleteHorizonMs": _delete_horizon(batch), "position": position,
        "timestampType": batch.timestamp_type.kafka_name, "maxTimestamp": batch.max_timestamp,
        "size": batch.size_in_bytes, "magic": batch.magic, "compresscodec": _codec_name(batch),
        "crc": batch.crc, "isvalid": _is_valid(batch),
    }


def _record_lines(batch: RecordBatch, records: list[Record], fmt: PlainFormat) -> list[str]:
    """Each record as one JSON object: kcat's fields as ``records.jsonl`` renders them
    (``fmt``, the partition's format), then the batch context."""
    builder = fmt.builder()
    if isinstance(batch, RecordBatch):
        batch.add_to(builder)
    else:  # legacy v0/v1
        for r in records:
            builder.add_record(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
    text = bytes(fmt.render(builder)[0]).decode("utf-8")
    return [kcat[:-1] + "," + json.dumps(_record_context(batch, record), ensure_ascii=False,
                                         separators=(",", ":"))[1:]
            for kcat, record in zip(text.split("\n"), records)]


def _decoded_line(line: str, decoded: CoordinatorRecord) -> str:
    """A record's JSON line with the decoded key in place of ``key`` and the decoded value in
    place of ``payload`` (as ``value``), plus the decoder's ``warnings`` if any."""
    parts = decoded.to_json()
    obj = {}
    for name, value in json.loads(line).items():
        if name == "key":
            obj["key"] = parts["key"]
        elif name == "payload":
            obj["value"] = parts["value"]
        else:
            obj[name] = value
    if decoded.warnings:
        obj["warnings"] = list(decoded.warnings)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _remote_metadata_line(line: str, record: Record) -> str:
    """A record's JSON line with its value decoded as ``__remote_log_metadata``'s in place of
    ``payload`` (as ``value``), plus ``warnings`` when it does not decode."""
    return _with_value(line, *remote_metadata_json(record.value))


def _with_value(line: str, value: Any, warnings: list[str]) -> str:
    """A record's JSON line with ``value`` (its value decoded) in place of ``payload``, plus
    ``warnings`` when it did not decode."""
    obj = {}
    for name, field in json.loads(line).items():
        if name == "payload":
            obj["value"] = value
        else:
            obj[name] = field
    if warnings:
        obj["warnings"] = warnings
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _record_context(batch: RecordBatch, record: Record) -> dict[str, Any]:
    obj: dict[str, Any] = dict(
        sequence=record.sequence, batchBaseOffset=batch.base_offset,
        producerId=batch.producer_id, isTransactional=batch.is_transactional,
        isControl=batch.is_control_batch)
    if batch.is_control_batch:
        control_type, type_id, epoch = _control_fields(record)
        obj["controlType"] = control_type.name if control_type != ControlRecordType.UNKNOWN else type_id
        if epoch is not None:
            obj["coordinatorEpoch"] = epoch
    return obj


# -- the files ----------------------------------------------------------------------------


class DumpError(Exception):
    """A file that cannot be dumped: reported as ``kfs dump: <path>: <message>``."""


class _Reports:
    """What kafka-dump-log collects while dumping and prints on stderr after the last file."""

    def __init__(self) -> None:
        self.index_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.timestamp_mismatches: dict[str, list[tuple[int, int]]] = {}
        self.out_of_order: dict[str, list[tuple[int, int]]] = {}
        self.not_found: dict[str, list[tuple[int, int]]] = {}
        self.non_consecutive: dict[str, list[tuple[int, int]]] = {}

    @staticmethod
    def add(table: dict[str, list], path: str, pair: tuple[int, int]) -> None:
        table.setdefault(java_absolute_path(path), []).append(pair)

    def print(self, err: TextIO) -> None:
        # Kafka prepends index mismatches and offset gaps to Scala lists, so it prints them
        # last-first; time-index errors go to buffers and print in order.
        for path, pairs in self.index_mismatches.items():
            err.write(f"Mismatches in :{path}\n")
            err.writelines(f"  Index offset: {a}, log offset: {b}\n" for a, b in reversed(pairs))
        for path, pairs in self.timestamp_mismatches.items():
            err.write(f"Found timestamp mismatch in :{path}\n")
            err.writelines(f"  Index timestamp: {a}, log timestamp: {b}\n" for a, b in pairs)
        for path, pairs in self.out_of_order.items():
            err.write(f"Found out of order timestamp in :{path}\n")
            err.writelines(f"  Index timestamp: {a}, Previously indexed timestamp: {b}\n"
                           for a, b in pairs)
        for pairs in self.not_found.values():
            err.write("The following indexed offsets are not found in the log.\n")
            err.writelines(f"Indexed offset: {a}, found log offset: {b}\n" for a, b in pairs)
        for path, pairs in self.non_consecutive.items():
            err.write(f"Non-consecutive offsets in {path}\n")
            err.writelines(f"  {a} is followed by {b}\n" for a, b in reversed(pairs))


def java_path(path: str) -> str:
    """``new File(path).toString()`` on Unix: repeated slashes collapsed, a trailing one
    dropped (nothing else is resolved); a URI as given, without credentials."""
    where = Location.parse(path)
    if where.is_remote:
        return where.display
    if "//" in path or (path.endswith("/") and path != "/"):
        path = "/".join(p for i, p in enumerate(path.split("/")) if p or i == 0) or "/"
    return path


def java_absolute_path(path: str) -> str:
    """``new File(path).getAbsolutePath()``: a relative path joined to the working directory,
    without resolving ``.`` or ``..`` (as Kafka reports its mismatches' files)."""
    if Location.parse(path).is_remote:
        return java_path(path)
    path = java_path(path)
    if path.startswith("/"):
        return path
    return java_path(os.getcwd() + "/" + path) if path else os.getcwd()


def _base_offset(path: str) -> int:
    """The offset before the first ``.`` of the file name (``UnifiedLog.offsetFromFile``)."""
    name = Location.parse(path).name
    try:
        return offset_from_file_name(name)
    except ValueError:
        from storage.remote.tiered import tiered_base_offset  # (a remote tier's segment file)

        if (base := tiered_base_offset(name)) is not None:
            return base
        raise DumpError("the file name does not start with a base offset "
                        f"(e.g. {filename_prefix(0)}{os.path.splitext(name)[1]})") from None


def _sibling(path: str, suffix: str) -> str:
    """The segment file beside ``path`` with the same prefix and another suffix (a local one
    by its absolute path, as Kafka names it)."""
    where = Location.parse(path)
    name = where.name.split(".")[0] + suffix
    if where.is_remote:
        return where.sibling(name).text
    return os.path.join(os.path.dirname(os.path.abspath(path)), name)


def _check_exists(path: str, store: StoreOptions, what: str = "") -> None:
    """DumpError unless ``path`` is a file (an object), said once: ``what`` and the path
    before the reason when it is another file than the one dumped."""
    remote = Location.parse(path).is_remote
    try:
        check_file(path, store)
    except FileNotFoundError:
        reason = "no such object" if remote else "No such file or directory"
    except IsADirectoryError:
        reason = "a directory, not an object" if remote else "Is a directory"
    else:
        return
    raise DumpError(f"{what}{java_path(path)}: {reason}" if what else reason)


@contextlib.contextmanager
def _log_records(path: str, store: StoreOptions) -> Iterator[FileRecords]:
    """The ``.log`` at ``path`` as the engine reads a segment's bytes (through its source,
    ``storage.segment_source``), for the span of a ``with``."""
    _check_exists(path, store)
    source = open_segment_source(path, store)
    try:
        yield FileRecords(source)
    finally:
        source.close()


def _index_contents(path: str, store: StoreOptions) -> IndexContents | None:
    """An index file's bytes when ``path`` is an object's URI (None: a local file, which the
    index reads itself)."""
    if not Location.parse(path).is_remote:
        return None
    data = read_file(path, store)
    return IndexContents(data, len(data))


def _first_batch(records: FileRecords, position: int, end: int, buffer) -> Batch | None:
    """The batch at ``position`` when it is whole before ``end``, else None."""
    batch = next(LogReader.whole_batches(records, position, min(end, records.size),
                                         len(buffer), buffer), None)
    return batch if batch is not None and position + batch.size_in_bytes <= end else None


class _Dumper:
    def __init__(self, options: DumpOptions, out: TextIO, err: TextIO) -> None:
        self.options = options
        self.out = _Output(out)
        self.err = err
        self.reports = _Reports()
        self.status = 0
        self._partition: dict[str, Any] = {}
        topic = options.coordinator_topic
        self.coordinator: CoordinatorTopic | None = (
            None if topic is None else share_group_state() if topic == SHARE_GROUP_STATE
            else for_topic(topic))
        # kafka-dump-log prints share group state records as it prints __consumer_offsets'
        self._key_payload = transaction_key_payload if topic == TRANSACTION_STATE else offsets_key_payload

    # -- output ---------------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.out.write(text + "\n")

    def note(self, text: str) -> None:
        """Kafka's informational lines: stdout as text, stderr with --json (stdout is JSON)."""
        (self.err if self.options.json else self.out).write(text + "\n")

    def emit(self, obj: dict[str, Any]) -> None:
        self.out.write(json.dumps({**self._partition, **obj}, ensure_ascii=False, separators=(",", ":")) + "\n")

    def error(self, path: str, message: str) -> None:
        name = java_path(path)
        message = message.removeprefix(f"{name}: ")  # (an object store's error names it too)
        self.err.write(f"kfs dump: {name}: {message}\n")
        self.status = 1

    # -- dispatch -------------------------------------------------------------------------

    def dump(self, path: str) -> None:
        if not self.options.json:
            self.line(f"Dumping {java_path(path)}")
        name = Location.parse(path).name
        suffix = name[name.rfind("."):] if "." in name else ""
        handler: Callable[[str], None] | None = {
            LOG_SUFFIX: self.dump_log, INDEX_SUFFIX: self.dump_index,
            TIME_INDEX_SUFFIX: self.dump_time_index, SNAPSHOT_SUFFIX: self.dump_snapshot,
            TXN_INDEX_SUFFIX: self.dump_txn_index, CHECKPOINT_SUFFIX: self.dump_checkpoint,
            # Aiven's tiered storage: a segment's manifest and its indexes' object
            ".rsm-manifest": self.dump_aiven_manifest, ".indexes": self.dump_aiven_indexes,
        }.get(suffix)
        if handler is None:
            self.err.write(f"Ignoring unknown file {java_path(path)} (kfs dump reads {', '.join(SUFFIXES)} files)\n")
            self.status = 1
            return
        self._partition = self._topic_partition(path)
        try:
            _check_exists(path, self.options.store)
            handler(path)
        except DumpError as e:
            self.error(path, str(e))
        except (KafkaStorageError, ValueError) as e:
            self.error(path, str(e))
        except BrokenPipeError:
            raise  # the reader went away (| head): the command ends quietly
        except OSError as e:
            self.error(path, e.strerror or str(e))

    @staticmethod
    def _topic_partition(path: str) -> dict[str, Any]:
        """topic/partition from the directory holding the file: ``<topic>-<N>``, or
        LocalTieredStorage's ``<topic>-<N>-<topic id>`` (null if neither)."""
        from storage.remote.tiered import tiered_partition_name

        folder = Location.parse(path).parent_name
        for name in (folder, tiered_partition_name(folder)):
            try:
                topic, partition = parse_partition_dir_name(name or "")
            except InvalidTopicError:
                continue
            return {"topic": topic, "partition": partition}
        return {"topic": None, "partition": None}

    # -- .log -----------------------------------------------------------------------------

    def dump_log(self, path: str) -> None:
        base = _base_offset(path)
        if not self.options.json:
            self.line(f"Log starting offset: {base}")
        self._dump_batches(path)

    def dump_checkpoint(self, path: str) -> None:
        """A KRaft snapshot: its id, then its batches as a ``.log``'s."""
        name = Location.parse(path).name
        if name == BOOTSTRAP_CHECKPOINT:
            head = "KRaft bootstrap snapshot"
        elif (snapshot := snapshot_id(name)) is not None:
            head = f"Snapshot end offset: {snapshot[0]}, epoch: {snapshot[1]}"
        else:
            raise DumpError("not a KRaft snapshot's name (<20-digit end offset>-<10-digit "
                            f"epoch>{CHECKPOINT_SUFFIX}, or {BOOTSTRAP_CHECKPOINT})")
        if not self.options.json:
            self.line(head)
        self._dump_batches(path)

    def _dump_batches(self, path: str) -> None:
        with _log_records(path, self.options.store) as records:
            end = min(records.size, self.options.max_bytes)
            valid_bytes = 0
            last_offset = [-1]
            try:
                for batch in LogReader.whole_batches(records, 0, end):
                    if valid_bytes + batch.size_in_bytes > end:
                        break  # (Kafka's --max-bytes: batches wholly within the first bytes)
                    self._dump_batch(path, batch, valid_bytes, last_offset)
                    valid_bytes += batch.size_in_bytes
            except (CorruptRecordError, InvalidRecordError) as e:
                raise DumpError(f"at byte {valid_bytes}: {e}") from None
            trailing = end - valid_bytes
            if trailing > 0 and self.options.max_bytes == MAX_BYTES_DEFAULT:
                self.note(f"Found {trailing} invalid bytes at the end of {os.path.basename(java_path(path))}")

    def _dump_batch(self, path: str, batch: RecordBatch, position: int, last_offset: list[int]) -> None:
        options = self.options
        if not options.deep:
            if options.json:
                self.emit(_batch_object(batch, position))
            else:
                self.line(batch_line(batch, position))
            return
        if (not options.json and options.decoder is None
                and batch.magic >= 2 and not batch.is_control_batch):
            # the common case, in one loop (a dump of a big log spends its time here)
            head = (batch_line(batch, position) + "\n").encode("utf-8", "replace")
            try:
                records = batch.records()
            except (CorruptRecordError, InvalidRecordError) as e:
                self.out.write_bytes(head)
                self.error(path, f"batch at position {position} (offset {batch.base_offset}): {e}")
                return
            self.out.write_bytes(head + _plain_record_bytes(batch, records, options.print_data,
                                                            options.skip_record_metadata))
            self._track_offsets(path, records, last_offset)
            return
        if not options.json:
            self.line(batch_line(batch, position))
        try:
            records = batch.records()
            decoded = self._decode(path, batch, records)
            if options.json:
                lines = _record_lines(batch, records,
                                      PlainFormat(**self._partition, fmt=StreamFormat.JSONL))
                if decoded is not None:
                    lines = [_decoded_line(line, d) for line, d in zip(lines, decoded)]
                elif options.remote_metadata and not batch.is_control_batch:
                    lines = [_remote_metadata_line(line, r) for line, r in zip(lines, records)]
                elif options.cluster_metadata and not batch.is_control_batch:
                    lines = [self._cluster_metadata_line(path, line, r)
                             for line, r in zip(lines, records)]
            else:
                if decoded:
                    parsers = [self._parser(d) for d in decoded]
                elif options.remote_metadata:
                    parsers = [self._remote_metadata_parser(path)] * len(records)
                elif options.cluster_metadata:
                    parsers = [self._cluster_metadata_parser(path)] * len(records)
                else:
                    parsers = [_text_key_payload] * len(records)
                checks = (_legacy_record_checks(batch) if batch.magic < 2
                          else [None] * len(records))
                lines = [record_line(batch, record, options.print_data, options.skip_record_metadata,
                                     parse, check)
                         for record, parse, check in zip(records, parsers, checks)]
        except (CorruptRecordError, InvalidRecordError) as e:
            # Kafka's tool stops with a stack trace; the batch is skipped and the walk goes on.
            self.error(path, f"batch at position {position} (offset {batch.base_offset}): {e}")
            return
        self._track_offsets(path, records, last_offset)
        for line in lines:
            self.line(line)

    def _track_offsets(self, path: str, records: list[Record], last_offset: list[int]) -> None:
        """Offsets that do not follow the one before in the file, as Kafka reports them."""
        previous = last_offset[0]
        for record in records:
            offset = record.offset
            if previous != -1 and offset != previous + 1:
                self.reports.add(self.reports.non_consecutive, path, (previous, offset))
            previous = offset
        last_offset[0] = previous

    def _decode(self, path: str, batch: RecordBatch, records: list[Record]) -> list[CoordinatorRecord] | None:
        """The records decoded by the chosen coordinator decoder (None without one, or for a
        control batch); what did not decode is warned about on stderr."""
        if self.coordinator is None or batch.is_control_batch:
            return None
        decoded = [self.coordinator.decode(r.key, r.value) for r in records]
        for record, d in zip(records, decoded):
            for warning in d.warnings:
                self.err.write(f"kfs dump: {path}: offset {record.offset}: warning: {warning}\n")
        return decoded

    def _parser(self, decoded: CoordinatorRecord) -> Callable[[Record], tuple[str | None, str | None]]:
        return lambda record: self._key_payload(decoded, record.offset)

    def _remote_metadata_parser(self, path: str) -> Callable[[Record], tuple[str | None, str | None]]:
        """kafka-dump-log's RemoteMetadataLogMessageParser: no key, the payload as Kafka's
        tool prints it; a value that does not decode is also warned about on stderr."""
        def parse(record: Record) -> tuple[str | None, str | None]:
            payload = remote_metadata_payload(record.value, record.offset)
            if payload.startswith(f"Error at offset {record.offset}, skipping. "):
                self.err.write(f"kfs dump: {path}: offset {record.offset}: warning: "
                               f"{payload.split(', skipping. ', 1)[1]}\n")
            return None, payload
        return parse

    def _warn(self, path: str, offset: int, warning: str) -> None:
        self.err.write(f"kfs dump: {java_path(path)}: offset {offset}: warning: {warning}\n")

    def _cluster_metadata_parser(self, path: str) -> Callable[[Record], tuple[str | None, str | None]]:
        """kafka-dump-log's ClusterMetadataLogMessageParser: no key, the record as JSON; a
        value that does not decode is also warned about on stderr (with its bytes)."""
        def parse(record: Record) -> tuple[str | None, str | None]:
            payload, warning = cluster_metadata_payload(record.value, record.offset)
            if warning is not None:
                self._warn(path, record.offset, warning)
            return None, payload
        return parse

    def _cluster_metadata_line(self, path: str, line: str, record: Record) -> str:
        """A record's JSON line with its value decoded as a metadata record in place of
        ``payload`` (as ``value``), plus ``warnings`` (also on stderr) when it does not."""
        value, warnings = metadata_json(record.value)
        for warning in warnings:
            self._warn(path, record.offset, warning)
        return _with_value(line, value, warnings)

    # -- .index ---------------------------------------------------------------------------

    def dump_index(self, path: str) -> None:
        base = _base_offset(path)
        log_path = _sibling(path, LOG_SUFFIX)
        _check_exists(log_path, self.options.store, "its segment's log ")
        index = OffsetIndex(path, base, 0, writable=False, contents=_index_contents(path, self.options.store))
        try:
            if index.entries == 0:
                self.note(f"{java_path(path)} is empty.")
                return
            if self.options.index_sanity_check:
                index.sanity_check()
                self.note(f"{java_path(path)} passed sanity check.")
                return
            with _log_records(log_path, self.options.store) as records:
                buffer = bytearray(_ENTRY_BLOCK)
                for slot in range(index.entries):
                    offset, position = index.entry(slot)
                    if slot > 0 and offset == base:
                        break  # the zero-filled tail of an index left untrimmed by a crash
                    self._check_index_entry(path, records, buffer, offset, position)
                    if not self.options.verify_index_only:
                        if self.options.json:
                            self.emit({"offset": offset, "position": position})
                        else:
                            self.line(f"offset: {offset} position: {position}")
        finally:
            index.close()

    def _check_index_entry(self, path: str, records: FileRecords, buffer, offset: int,
                           position: int) -> None:
        """Kafka compares the entry's offset with the last offset of the batch at its position
        (the first in ``--max-message-size``, 5 MiB, from there; a v2 batch or a v0/v1 entry)."""
        try:
            batch = _first_batch(records, position, position + MAX_MESSAGE_SIZE, buffer)
            if batch is None:
                raise CorruptRecordError("no whole batch within 5 MiB of it")
        except (CorruptRecordError, InvalidRecordError) as e:
            self.error(path, f"entry (offset {offset}, position {position}): no batch there: {e}")
            return
        if batch.last_offset != offset:
            self.reports.add(self.reports.index_mismatches, path, (offset, batch.last_offset))

    # -- .timeindex -----------------------------------------------------------------------

    def dump_time_index(self, path: str) -> None:
        base = _base_offset(path)
        log_path = _sibling(path, LOG_SUFFIX)
        _check_exists(log_path, self.options.store, "its segment's log ")
        time_index = TimeIndex(path, base, 0, writable=False, contents=_index_contents(path, self.options.store))
        offset_path = _sibling(path, INDEX_SUFFIX)
        offset_index = OffsetIndex(offset_path, base, 0, writable=False,
                                   contents=_index_contents(offset_path, self.options.store))
        try:
            if self.options.index_sanity_check:
                time_index.sanity_check()
                self.note(f"{java_path(path)} passed sanity check.")
                return
            with _log_records(log_path, self.options.store) as records:
                buffer = bytearray(_ENTRY_BLOCK)
                previous = -1
                for slot in range(time_index.entries):
                    timestamp, offset = time_index.entry(slot)
                    if slot > 0 and offset == base:
                        break
                    self._check_time_index_entry(path, records, buffer, offset_index, timestamp,
                                                 offset, previous)
                    if not self.options.verify_index_only:
                        if self.options.json:
                            self.emit({"timestamp": timestamp, "offset": offset})
                        else:
                            self.line(f"timestamp: {timestamp} offset: {offset}")
                    previous = timestamp
        finally:
            time_index.close()
            offset_index.close()

    def _check_time_index_entry(self, path: str, records: FileRecords, buffer,
                                offset_index: OffsetIndex, timestamp: int, offset: int,
                                previous: int) -> None:
        """Kafka finds the first batch at or past the entry's offset (from the offset index's
        position) and wants it to end at that offset and carry that max record timestamp."""
        reports = self.reports
        found = None
        for batch in LogReader.whole_batches(records, offset_index.lookup(offset)[1], records.size,
                                             len(buffer), buffer):
            if batch.last_offset >= offset:
                found = batch
                break
        if found is None:
            reports.add(reports.not_found, path, (offset, -1))
        elif found.last_offset != offset:
            reports.add(reports.not_found, path, (offset, found.last_offset))
        else:
            max_timestamp = max((r.timestamp for r in found.records()), default=-1)
            if max_timestamp != timestamp:
                reports.add(reports.timestamp_mismatches, path, (timestamp, max_timestamp))
            if previous >= timestamp:
                reports.add(reports.out_of_order, path, (timestamp, previous))

    # -- .snapshot and .txnindex ----------------------------------------------------------

    def dump_snapshot(self, path: str) -> None:
        data = read_file(path, self.options.store)
        try:
            entries = decode_snapshot(data)
        except CorruptSnapshotError as e:
            raise DumpError(str(e)) from None  # Kafka prints the message and goes on
        for entry in entries:
            if self.options.json:
                self.emit(_snapshot_object(entry))
            else:
                self.line(snapshot_line(entry))

    def dump_aiven_manifest(self, path: str) -> None:
        from .dump_aiven import dump_manifest

        dump_manifest(self, path)

    def dump_aiven_indexes(self, path: str) -> None:
        from .dump_aiven import dump_indexes

        dump_indexes(self, path)

    def dump_txn_index(self, path: str) -> None:
        source = None
        if Location.parse(path).is_remote:
            source = open_segment_source(path, self.options.store,
                                         indexes={TXN_INDEX_SUFFIX: None})
        index = TransactionIndex(Path(path), _base_offset(path), writable=False, source=source)
        try:
            for txn in index.all_aborted_txns():
                if self.options.json:
                    self.emit({"version": txn.version, "producerId": txn.producer_id,
                               "firstOffset": txn.first_offset, "lastOffset": txn.last_offset,
                               "lastStableOffset": txn.last_stable_offset})
                else:
                    self.line(f"version: {txn.version} producerId: {txn.producer_id} "
                              f"firstOffset: {txn.first_offset} lastOffset: {txn.last_offset} "
                              f"lastStableOffset: {txn.last_stable_offset}")
        finally:
            index.close()


def _optional_long(value: int | None) -> str:
    return "OptionalLong.empty" if value is None else f"OptionalLong[{value}]"


def snapshot_line(entry: ProducerStateEntry) -> str:
    """kafka-dump-log's line for one producer of a ``.snapshot`` (``dumpProducerIdSnapshot``):
    without batch metadata it ends with the space after lastTimestamp, as Kafka's does."""
    line = (f"producerId: {entry.producer_id} producerEpoch: {entry.producer_epoch} "
            f"coordinatorEpoch: {entry.coordinator_epoch} "
            f"currentTxnFirstOffset: {_optional_long(entry.current_txn_first_offset)} "
            f"lastTimestamp: {entry.last_timestamp} ")
    if entry.batch_metadata:
        b = entry.batch_metadata[0]
        line += (f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} "
                 f"lastOffset: {b.last_offset} offsetDelta: {b.offset_delta} timestamp: {b.timestamp}")
    return line


def _snapshot_object(entry: ProducerStateEntry) -> dict[str, Any]:
    obj = {"producerId": entry.producer_id, "producerEpoch": entry.producer_epoch,
           "coordinatorEpoch": entry.coordinator_epoch,
           "currentTxnFirstOffset": entry.current_txn_first_offset,
           "lastTimestamp": entry.last_timestamp}
    if entry.batch_metadata:
        b = entry.batch_metadata[0]
        obj.update(firstSequence=b.first_seq, lastSequence=b.last_seq, lastOffset=b.last_offset,
                   offsetDelta=b.offset_delta, timestamp=b.timestamp)
    return obj


# --------------------------------------------------------------------------- the command


def add_parser(sub) -> None:
    dump = sub.add_parser(
        "dump",
        help="print .log/.index/.timeindex/.snapshot/.txnindex/.checkpoint files as "
             "kafka-dump-log does",
        description=(
            "Print segment files as Kafka's kafka-dump-log does: a line per batch of a .log (and "
            "a '| offset: ...' line per record with --deep-iteration), the entries of .index and "
            ".timeindex files (checked against their .log; mismatches go to stderr), producer "
            "snapshots and transaction indexes. Nothing is written."
        ),
    )
    dump.add_argument("files", metavar="FILE", nargs="*", help="segment files to dump")
    dump.add_argument("--files", dest="files_csv", metavar="FILE[,FILE...]", action="append",
                      default=[], help="comma-separated files, as kafka-dump-log takes them")
    dump.add_argument("--deep-iteration", action="store_true",
                      help="print every record, not just batches")
    dump.add_argument("--print-data-log", action="store_true",
                      help="print record keys and values as UTF-8 text (implies --deep-iteration)")
    dump.add_argument("--skip-record-metadata", action="store_true",
                      help="with --print-data-log, print only keys and values")
    dump.add_argument("--verify-index-only", action="store_true",
                      help="check index entries against the .log without printing them")
    dump.add_argument("--index-sanity-check", action="store_true",
                      help="only run Kafka's sanity check on .index/.timeindex files")
    dump.add_argument("--max-bytes", type=positive_int, metavar="N",
                      help="read at most N bytes of each .log (default: all)")
    dump.add_argument("--json", action="store_true",
                      help="one JSON object per line (kcat -J fields for records); "
                           "non-UTF-8 bytes as {\"base64\": ...}")
    dump.add_argument("--offsets-decoder", action="store_true",
                      help="decode the records as __consumer_offsets records (implies "
                           "--print-data-log; with --json: decoded key and value objects)")
    dump.add_argument("--transaction-log-decoder", action="store_true",
                      help="decode the records as __transaction_state records (implies "
                           "--print-data-log; with --json: decoded key and value objects)")
    dump.add_argument("--remote-log-metadata-decoder", action="store_true",
                      help="decode the records as __remote_log_metadata records, Kafka's "
                           "tiered-storage metadata (implies --print-data-log; with --json: "
                           "decoded value objects)")
    dump.add_argument("--cluster-metadata-decoder", action="store_true",
                      help="decode the records as __cluster_metadata records, KRaft's metadata "
                           "log and its .checkpoint snapshots (implies --print-data-log; with "
                           "--json: decoded value objects)")
    dump.add_argument("--share-group-state-decoder", action="store_true",
                      help="decode the records as __share_group_state records, the share "
                           "groups' state (implies --print-data-log; with --json: decoded key "
                           "and value objects)")
    add_store_arguments(dump, None)
    dump.set_defaults(func=run, more_positionals="files")


def run(args: argparse.Namespace) -> int:
    files = list(args.files) + [f for csv in args.files_csv for f in csv.split(",") if f]
    if not files:
        print("kfs dump: error: no FILE given", file=sys.stderr)
        return 2
    options = DumpOptions(
        deep_iteration=args.deep_iteration, print_data_log=args.print_data_log,
        verify_index_only=args.verify_index_only, index_sanity_check=args.index_sanity_check,
        skip_record_metadata=args.skip_record_metadata,
        max_bytes=args.max_bytes or MAX_BYTES_DEFAULT, json=args.json,
        offsets_decoder=args.offsets_decoder, transaction_log_decoder=args.transaction_log_decoder,
        remote_log_metadata_decoder=args.remote_log_metadata_decoder,
        cluster_metadata_decoder=args.cluster_metadata_decoder,
        share_group_state_decoder=args.share_group_state_decoder,
        store=store_options(args),
    )
    return with_stdout(lambda out: dump_files(files, options, out, sys.stderr))
