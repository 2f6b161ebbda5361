"""How a record looks as text, one format per partition kind: a plain partition's records are
rendered a chunk at a time by the compiled column builder (``values``: the value and ``\\n``;
``keyed-values``: key, separator, value; ``records.jsonl``: kcat ``-J``'s fields), a
coordinator topic's (``__consumer_offsets``, ``__transaction_state``) one by one through their
message schemas. The mount's streams, ``kfs dump --json`` and the mount's attributes all take
their text from here; bytes that are UTF-8 are text, other bytes ``{"base64": ...}``."""

from __future__ import annotations

import base64
import enum
import json
from array import array
from typing import Any

from storage.coordinator.records import decoded_line, for_topic
from storage.records.columns import ColumnBuilder, RecordColumns
from storage.records.record import Record, TimestampType


class StreamFormat(enum.Enum):
    """The stream kinds, one row each: what each record becomes in a stream. The one table of
    them: the mount derives its stream files from it (``kfs.mount.inodes``: their inode kinds,
    names, listings and lookups, in a partition and in a ``from/<start>/`` window), the
    renderers below branch on it (``PlainFormat``, ``CoordinatorFormat``).

    A row: the file name (the member's value), then the inode slots the mount numbers the
    stream's files by: the whole partition's file (a fixed slot of the partition's) and a
    window's (a slot of its start offset's). Slots are never reused; rows are in listing
    order."""

    #        file name         slot  window slot
    VALUES = ("values",          7,  3)  # the value and "\n"; a null value prints "null"
    KEYED = ("keyed-values",    11,  5)  # key, separator, value and "\n"; null prints "null"
    JSONL = ("records.jsonl",    8,  4)  # kcat -J fields, as `kfs dump --json` encodes them

    def __new__(cls, file: str, slot: int, window_slot: int) -> StreamFormat:
        member = object.__new__(cls)
        member._value_ = file
        member.slot, member.window_slot = slot, window_slot
        return member


def jsonl_prefix(topic: str | None, partition: int | None) -> bytes:
    """The text every JSON line of a partition starts with: ``{"topic":...,"partition":N,``
    (``null`` for an unknown topic or partition, as ``kfs dump`` of a file outside a
    partition directory)."""
    return json.dumps({"topic": topic, "partition": partition}, ensure_ascii=False,
                      separators=(",", ":"))[:-1].encode("utf-8") + b","


def text_or_base64(value: bytes | None) -> Any:
    """JSON for bytes: a string when they are UTF-8, else ``{"base64": ...}``; None for null
    (the compiled renderer's rule for keys and values, here for header values)."""
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


class PlainFormat:
    """A plain partition's records in ``fmt``, rendered from a ColumnBuilder's chunk."""

    def __init__(self, topic: str | None, partition: int | None, fmt: StreamFormat,
                 key_separator: bytes = b"\t"):
        self.format, self.key_separator = fmt, bytes(key_separator)
        self._prefix = jsonl_prefix(topic, partition)

    def builder(self) -> ColumnBuilder:
        """A builder for one chunk (``values`` and ``keyed-values`` keep only the rendered
        text as they decode)."""
        if self.format is StreamFormat.JSONL:
            return ColumnBuilder(True)
        return ColumnBuilder(values_text=True, key_separator=self.key_separator
                             if self.format is StreamFormat.KEYED else None)

    def render(self, builder: ColumnBuilder) -> tuple[Any, Any, Any]:
        """``(text, row ends, offsets)`` of the builder's records (buffers)."""
        return builder.render(self.format is StreamFormat.JSONL, self._prefix)


class CoordinatorFormat:
    """A coordinator topic's records in ``fmt``, decoded through its message schemas: a
    ``values`` line as Kafka's console-consumer formatters print it, ``{"key": {...},
    "value": {...}}``; keyed lines of the decoded key and value; in ``records.jsonl`` the
    ``key`` and ``payload`` fields are the decoded objects."""

    def __init__(self, topic: str, partition: int, fmt: StreamFormat, key_separator: bytes):
        self.topic, self.partition = topic, partition
        self.format, self.key_separator = fmt, bytes(key_separator)
        self._decoder = for_topic(topic)

    @staticmethod
    def builder() -> ColumnBuilder:
        """A builder for one chunk: the records whole, headers too, for :meth:`render`."""
        return ColumnBuilder(True)

    def render(self, builder: ColumnBuilder) -> tuple[bytes, memoryview, memoryview]:
        """``(text, row ends, offsets)`` of the builder's records, a :meth:`line` each
        (buffers, as :meth:`PlainFormat.render`'s)."""
        text, row_ends, offsets = bytearray(), array("q"), array("q")
        for row in RecordColumns(True, builder).to_arrow().to_pylist():
            headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
            text += self.line(Record(row["offset"], row["timestamp"], row["timestamp_type"],
                                     row["key"], row["value"], headers, -1))
            row_ends.append(len(text))
            offsets.append(row["offset"])
        return bytes(text), memoryview(row_ends).cast("B"), memoryview(offsets).cast("B")

    def line(self, record) -> bytes:
        if self.format is StreamFormat.VALUES:
            return decoded_line(self.topic, record.key, record.value, record.offset)
        decoded = self._decoder.decode(record.key, record.value).to_json()
        if self.format is StreamFormat.KEYED:  # the decoded key and value, each as JSON
            return self.key_separator.join(
                json.dumps(decoded[part], ensure_ascii=False, separators=(",", ":")).encode()
                for part in ("key", "value")) + b"\n"
        obj = {"topic": self.topic, "partition": self.partition, "offset": record.offset}
        if record.timestamp_type in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
            obj["tstype"] = ("create" if record.timestamp_type == TimestampType.CREATE_TIME
                             else "logappend")
            obj["ts"] = record.timestamp
        obj["headers"] = [x for k, v in record.headers
                          for x in (k, None if v is None else v.decode("utf-8", "replace"))]
        obj["key"], obj["payload"] = decoded["key"], decoded["value"]
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def record_format(topic: str, partition: int, fmt: StreamFormat,
                  key_separator: bytes = b"\t") -> PlainFormat | CoordinatorFormat:
    """The format of ``topic``'s records: a coordinator topic's, or a plain one's."""
    kind = CoordinatorFormat if for_topic(topic) is not None else PlainFormat
    return kind(topic, partition, fmt, key_separator)

