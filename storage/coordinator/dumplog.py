"""What Kafka's ``kafka-dump-log`` prints after ``key:`` and ``payload:`` for a record of a
coordinator topic, with ``--offsets-decoder`` (``DumpLogSegments.OffsetsMessageParser``) or
``--transaction-log-decoder`` (``TransactionLog.formatRecordKeyAndValue``).

``--offsets-decoder``: the key as ``{"type":"<record type>","data":{...}}`` and the value as
``{"version":"<version>","data":{...}}`` (Jackson's compact JSON of the generated JSON
converters), ``<DELETE>`` for a tombstone; in a ``GroupMetadataValue`` whose protocolType is
``consumer`` each member's subscription and assignment bytes are replaced by their decoded
``ConsumerProtocolSubscription`` / ``ConsumerProtocolAssignment`` (left as base64 when they do
not decode). A record that does not decode prints only a key: ``Unknown record type T at offset
O, skipping.`` or ``Error at offset O, skipping. <why>``.

``--transaction-log-decoder``: ``transaction_metadata::transactionalId=<id>`` and
``producerId:P,producerEpoch:E,state=<TransactionState>,partitions=[t-p,...],
txnLastUpdateTimestamp=T,txnTimeoutMs=M`` (``<DELETE>`` for a tombstone); partitions in the
iteration order of the Scala ``mutable.HashSet`` Kafka collects them in.
"""

from __future__ import annotations

import base64
import decimal
from typing import Any

from storage.coordinator.records import CoordinatorRecord, read_consumer_protocol
from storage.coordinator.transactions import TRANSACTION_STATES

__all__ = ["DELETE", "java_json", "offsets_key_payload", "scala_hash_set_order",
           "transaction_key_payload"]

DELETE = "<DELETE>"
_CONSUMER_PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE


# -- Jackson's JSON text ------------------------------------------------------------------

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n",
                  "\f": "\\f", "\r": "\\r"}


def _java_string(text: str) -> str:
    # Jackson escapes only '"', '\\' and control characters, with upper-case hex
    out = []
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch < " ":
            out.append(f"\\u{ord(ch):04X}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _java_double(value: float) -> str:
    """``Double.toString``: plain from 10**-3 up to 10**7, else ``d.dddE<n>``; at least one
    digit after the point (the digits are Python's shortest round-trip ones)."""
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0 or 1e-3 <= abs(value) < 1e7:
        return repr(value)
    shortest = decimal.Decimal(repr(abs(value))).normalize()
    digits = "".join(map(str, shortest.as_tuple().digits))
    sign = "-" if value < 0 else ""
    return f"{sign}{digits[0]}.{digits[1:] or '0'}E{shortest.adjusted()}"


def java_json(value: Any) -> str:
    """``JsonNode.toString()`` of a value built from dicts, lists, str, int, float, bool and
    None: compact, non-ASCII characters as they are, floats as Java prints doubles."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _java_string(value)
    if isinstance(value, float):
        return _java_double(value)
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{_java_string(k)}:{java_json(v)}" for k, v in value.items()) + "}"
    return "[" + ",".join(java_json(v) for v in value) + "]"


# -- --offsets-decoder --------------------------------------------------------------------


def _failure(record: CoordinatorRecord, offset: int) -> str:
    if record.record_type is not None and record.key_name is None:
        return f"Unknown record type {record.record_type} at offset {offset}, skipping."
    why = record.warnings[0] if record.warnings else "not decoded"
    return f"Error at offset {offset}, skipping. {why}"


def _decoded_protocol(name: str, encoded: Any) -> Any:
    """A member's subscription/assignment bytes (base64) as the decoded consumer-protocol
    message, or unchanged when they do not decode (DumpLogSegments keeps the bytes then)."""
    if not isinstance(encoded, str):
        return encoded
    decoded = read_consumer_protocol(name, base64.b64decode(encoded))
    return encoded if decoded is None else decoded


def _group_metadata_json(value: dict[str, Any]) -> dict[str, Any]:
    if value.get("protocolType") != _CONSUMER_PROTOCOL_TYPE or not isinstance(value.get("members"), list):
        return value
    members = []
    for member in value["members"]:
        member = dict(member)
        if "subscription" in member:
            member["subscription"] = _decoded_protocol("ConsumerProtocolSubscription", member["subscription"])
        if "assignment" in member:
            member["assignment"] = _decoded_protocol("ConsumerProtocolAssignment", member["assignment"])
        members.append(member)
    return {**value, "members": members}


def offsets_key_payload(record: CoordinatorRecord, offset: int) -> tuple[str, str | None]:
    """(key text, payload text or None) of a ``__consumer_offsets`` record at ``offset``."""
    if not record.decoded:
        return _failure(record, offset), None
    key = java_json({"type": str(record.record_type), "data": record.key})
    if record.tombstone:
        return key, DELETE
    value = record.value
    if record.value_name == "GroupMetadataValue":
        value = _group_metadata_json(value)
    return key, java_json({"version": str(record.value_version), "data": value})


# -- --transaction-log-decoder ------------------------------------------------------------


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _java_string_hash(text: str) -> int:
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + int.from_bytes(units[i:i + 2], "big")) & 0xFFFFFFFF
    return _int32(h)


def _topic_partition_hash(topic: str, partition: int) -> int:
    """``TopicPartition.hashCode``."""
    return _int32(31 * (31 + partition) + _java_string_hash(topic))


def _table_size_for(capacity: int) -> int:
    return min((1 << (max(capacity - 1, 4).bit_length() - 1)) * 2, 1 << 30)


def scala_hash_set_order(groups: list[list[tuple[str, int]]]) -> list[tuple[str, int]]:
    """The topic-partitions in the order a Scala 2.13 ``mutable.HashSet`` iterates them once
    each group (one topic's partitions, as ``TransactionMetadata.addPartitions`` gets them) was
    added with ``++=``: by bucket (the improved hash masked by the table size), then by improved
    hash, then in insertion order; duplicates dropped. The table starts at 16 buckets; ``++=``
    first sizes it for the group, and a group of at most 4 (a ``Set1``..``Set4``) is added one
    element at a time, doubling the table whenever the next element would reach 3/4 of it."""
    hashes: dict[tuple[str, int], int] = {}
    buckets = 16
    for group in groups:
        group = list(dict.fromkeys(group))  # Scala's immutable Set of the group
        buckets = max(buckets, _table_size_for(int((len(group) + 1) / 0.75)))
        for tp in group:
            if len(group) <= 4 and len(hashes) + 1 >= int(buckets * 0.75):
                buckets *= 2
            if tp not in hashes:
                h = _topic_partition_hash(*tp)
                hashes[tp] = _int32(h ^ ((h & 0xFFFFFFFF) >> 16))
    order = {tp: i for i, tp in enumerate(hashes)}
    return sorted(hashes, key=lambda tp: (hashes[tp] & (buckets - 1), hashes[tp], order[tp]))


def _transaction_partitions(value: dict[str, Any]) -> list[list[tuple[str, int]]]:
    if value["transactionStatus"] == 0:  # an Empty transaction's partitions are not read
        return []
    return [[(entry["topic"], p) for p in entry["partitionIds"]]
            for entry in value.get("transactionPartitions") or []]


def transaction_key_payload(record: CoordinatorRecord, offset: int) -> tuple[str, str | None]:
    """(key text, payload text or None) of a ``__transaction_state`` record at ``offset``."""
    if not record.decoded:
        return _failure(record, offset), None
    key = f"transaction_metadata::transactionalId={record.key['transactionalId']}"
    if record.tombstone:
        return key, DELETE
    value = record.value
    status = value["transactionStatus"]
    if not 0 <= status < len(TRANSACTION_STATES):
        return (f"Error at offset {offset}, skipping. Unknown transaction state id {status} "
                "from the transaction status message"), None
    partitions = ",".join(f"{t}-{p}" for t, p in scala_hash_set_order(_transaction_partitions(value)))
    return key, (f"producerId:{value['producerId']},producerEpoch:{value['producerEpoch']},"
                 f"state={TRANSACTION_STATES[status]},partitions=[{partitions}],"
                 f"txnLastUpdateTimestamp={value['transactionLastUpdateTimestampMs']},"
                 f"txnTimeoutMs={value['transactionTimeoutMs']}")
