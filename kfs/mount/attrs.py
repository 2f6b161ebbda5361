"""The extended attributes of the mount's files: ``user.kafka.*`` of a record file (what a Kafka
consumer sees of a ConsumerRecord) and of a partition directory (its offsets and size)."""

from __future__ import annotations

import json
from typing import Any

from storage import TimestampType
from storage.protocols import PartitionLog

from kfs.record_format import text_or_base64

XATTR_PREFIX = b"user.kafka."


def _timestamp_type_name(value: int) -> str:
    try:
        return TimestampType(value).kafka_name
    except ValueError:
        return str(value)


def _headers_json(headers: tuple) -> bytes:
    pairs = [[key, text_or_base64(value)] for key, value in headers]
    try:
        return json.dumps(pairs, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in a header key: fall back to \\u escapes
        return json.dumps(pairs).encode("ascii")


def record_xattrs(topic: str, partition: int, record: Any) -> dict[bytes, bytes]:
    """The ``user.kafka.*`` attributes of a record file, in listing order (values are bytes;
    numbers in decimal).  Mirrors what a Kafka consumer sees of a ConsumerRecord."""
    attrs: dict[bytes, bytes] = {
        b"user.kafka.topic": topic.encode("utf-8"),
        b"user.kafka.partition": b"%d" % partition,
        b"user.kafka.offset": b"%d" % record.offset,
        b"user.kafka.timestamp": b"%d" % record.timestamp,
        b"user.kafka.timestampType": _timestamp_type_name(record.timestamp_type).encode(),
    }
    if record.key is None:
        attrs[b"user.kafka.key.null"] = b"true"
    else:
        attrs[b"user.kafka.key"] = bytes(record.key)
    if record.value is None:
        attrs[b"user.kafka.value.null"] = b"true"
    attrs[b"user.kafka.headers"] = _headers_json(record.headers)
    for key, value in record.headers:  # the last header with a key wins, as Headers.lastHeader
        name = b"user.kafka.header." + key.encode("utf-8", "surrogateescape")
        if value is None:
            attrs.pop(name, None)
        else:
            attrs[name] = bytes(value)
    return attrs


def partition_xattrs(plog: PartitionLog) -> dict[bytes, bytes]:
    """The ``user.kafka.*`` attributes of a partition directory (in memory: no disk)."""
    return {
        b"user.kafka.logStartOffset": b"%d" % plog.log_start_offset,
        b"user.kafka.logEndOffset": b"%d" % plog.log_end_offset,
        b"user.kafka.lastStableOffset": b"%d" % plog.last_stable_offset,
        b"user.kafka.sizeInBytes": b"%d" % plog.segments.size_in_bytes,
        b"user.kafka.segmentCount": b"%d" % len(plog.segments),
    }
