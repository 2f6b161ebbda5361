"""kfs as a Python library: the records of Kafka topics as Arrow record batches, for pandas,
Polars, DuckDB and ``pyarrow.dataset``, without Spark or a mount (:func:`read`, :func:`read_table`).

A read takes the options of the PySpark source (``kfs.reading.options``: the names and meanings of
Spark's Kafka source) and plans as it does (``kfs.reading.offsets.plan_ranges``: bounds resolved
through the offset and time indexes, then checked against the log), so a read moves between
Spark and a laptop unchanged; its rows are the source's (``kfs.reading.columns``). Logs are opened
through the one door, ``storage.directory.open_log_directory``. No pyspark is imported.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import weakref
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import pyarrow as pa

from storage.errors import UnknownTopicOrPartitionError
from storage.isolation import IsolationLevel
from storage.protocols import LogDirectory

from .reading.cluster import plan_cluster_ranges, read_cluster_range
from .reading.columns import ARROW_SCHEMA_WITH_HEADERS, ROWS_PER_ARROW_BATCH, read_log_range
from .reading.offsets import DataLossError, open_matching, plan_ranges
from .reading.options import KNOWN_OPTIONS, SourceOptions, parse_options

__all__ = ["COLUMNS", "SCHEMA", "DataLossError", "UnknownTopicOrPartitionError", "read",
           "read_table"]

#: Every column a read can give, in order: Spark's Kafka source schema with ``headers``.
SCHEMA = ARROW_SCHEMA_WITH_HEADERS
COLUMNS = tuple(SCHEMA.names)
# options whose names hold a dot, also taken as keywords with "_" for "." (remote_path=...)
_DOTTED = {name.replace(".", "_").lower(): name for name in KNOWN_OPTIONS if "." in name}


def read(location: str | os.PathLike | None, *, topics: str | Iterable[str] | None = None,
         partitions: Iterable[int] | None = None, start: Any = None, end: Any = None,
         isolation_level: str | None = None, columns: Iterable[str] | None = None,
         batch_rows: int = ROWS_PER_ARROW_BATCH, **options: Any) -> pa.RecordBatchReader:
    """The data records of topics at ``location`` as a ``pyarrow.RecordBatchReader``, streamed:
    batches of at most about ``batch_rows`` rows, partition after partition ((topic, partition)
    order), each partition in offset order; at most one batch's columns (and one 1 MiB block of
    ``.log``) are held at a time, whatever the topic's size. Control records are never rows.

    ``location``: anything the one door opens (``storage.directory.open_log_directory``): a
    backing or broker log directory, an object store's URI (``s3://bucket/prefix``, ``gs://``,
    ``file://``), and with option ``remote_path`` (``remote.path``) a tiered topic's
    RemoteStorageManager root; or None with option ``kafka.bootstrap.servers``: a live cluster,
    its remote tier's history (``remote.path``) from the bucket and the rest through the
    brokers (``kfs.reading.cluster``; ``kafka.*`` options are the client's settings).

    Which records (shorthands for the Spark source's options; give one or the other):

    - ``topics``: a name or names (``subscribe``); with ``partitions`` (partition numbers of
      each of those topics) an ``assign``.
    - ``start`` / ``end`` (``end`` exclusive): ``"earliest"`` / ``"latest"``; an aware
      ``datetime`` (``startingTimestamp`` / ``endingTimestamp``: the first offset whose
      timestamp is >= it, found through the time index, as Kafka's ListOffsets); a mapping of
      offsets ``{"topic": {"0": 23}}`` or ``{("topic", 0): 23}`` naming every partition read
      (-2 earliest, -1 latest); an int offset, for every partition of ``topics``+``partitions``.
      Default: earliest to latest.
    - ``isolation_level``: ``"read_uncommitted"`` (default) or ``"read_committed"`` (no records of
      aborted transactions, nothing at or past the last stable offset: Kafka's consumer
      ``isolation.level``).
    - ``**options``: any other option of the Spark source, named as there (case-insensitive;
      ``remote_path`` for ``remote.path``): ``subscribePattern``, ``assign``,
      ``startingOffsets``, ``startingTimestamp`` (epoch ms), ``startingOffsetsByTimestamp``,
      ``failOnDataLoss``, ``includeHeaders``, ``endpoint``, ``region``, ... Values may be
      strings, numbers, booleans, or mappings/lists (given as JSON).

    Columns (``columns``: a subset of :data:`COLUMNS`, in the order given; default the Spark
    source's: every column but ``headers``, with ``headers`` when ``includeHeaders=true``):
    ``key``, ``value`` (binary, null for a null key / a tombstone; a value that is not UTF-8
    stays binary), ``topic`` (string), ``partition`` (int32), ``offset`` (int64), ``timestamp``
    (``timestamp[us, UTC]``; Kafka's epoch ms), ``timestampType`` (int32: 0 CreateTime,
    1 LogAppendTime, -1 none, magic v0), ``headers`` (``list<struct<key: string, value:
    binary>>``, null when a record has none). Headers are decoded only when asked for.

    Raises, before any record is read, as the Spark source fails such a query: ValueError for a
    bad or unknown option (the option named) or bounds naming partitions not read;
    UnknownTopicOrPartitionError for a subscribed topic with no partition at ``location``;
    :class:`DataLossError` (a ValueError) for offsets no longer in the log while
    ``failOnDataLoss`` (default true); ``storage.remote.object_store.ObjectStoreError``,
    FileNotFoundError for a location that cannot be opened. While reading:
    CorruptRecordError for a batch that fails its CRC, DataLossError /
    ``storage.remote.tiered.OffsetGapError`` for offsets retention removed meanwhile or in
    neither tier of a tiered topic."""
    source = _TopicRead(_source_options(location, topics, partitions, start, end,
                                        isolation_level, options), columns)
    return source.reader(batch_rows)


def plan(location: str | os.PathLike, read_args: Mapping[str, Any],
         columns: Iterable[str] | None = None) -> _TopicRead:
    """A read planned as :func:`read` plans it (``read_args``: its keywords), for readers of
    their own (``kfs export``): its ``directory`` open (close it), ``ranges``, ``opts`` and the
    ``schema`` of ``columns``."""
    kw = dict(read_args)
    opts = _source_options(location, kw.pop("topics", None), kw.pop("partitions", None),
                           kw.pop("start", None), kw.pop("end", None),
                           kw.pop("isolation_level", None), kw)
    return _TopicRead(opts, columns)


def read_table(location: str | os.PathLike, **kwargs: Any) -> pa.Table:
    """:func:`read`'s records as one ``pyarrow.Table`` (all in memory; the same arguments,
    errors and columns)."""
    return read(location, **kwargs).read_all()


class _TopicRead:
    """A planned read: the log directory open (only the partitions read) and the offset ranges,
    resolved now so that bad options and data loss are raised by :func:`read` itself."""

    def __init__(self, opts: SourceOptions, columns: Iterable[str] | None):
        self.opts = opts
        self.names = _column_names(columns, opts.include_headers)
        self.headers = "headers" in self.names
        self.schema = pa.schema([SCHEMA.field(name) for name in self.names])
        if opts.cluster:  # a live cluster: no directory; the bucket and brokers per range
            self.directory = None
            self.ranges = plan_cluster_ranges(opts, None)
            return
        self.directory: LogDirectory | None = open_matching(opts)
        try:
            self.ranges = plan_ranges(self.directory, opts, None)
        except BaseException:
            self.directory.close()
            raise

    def close(self) -> None:
        if self.directory is not None:
            self.directory.close()

    def reader(self, batch_rows: int) -> pa.RecordBatchReader:
        batches = self._batches(batch_rows)
        # a reader dropped before (or without) being read to its end closes the logs too; the
        # logs are closed once, whichever comes first
        self._close = weakref.finalize(batches, self.close)
        return pa.RecordBatchReader.from_batches(self.schema, batches)

    def _batches(self, batch_rows: int) -> Iterator[pa.RecordBatch]:
        whole = list(self.names) == (SCHEMA.names if self.headers else SCHEMA.names[:-1])
        try:
            for rng in self.ranges:
                for batch in self._range(rng, batch_rows):
                    yield batch if whole else batch.select(self.names)
        finally:
            self._close()


    def _range(self, rng, batch_rows: int) -> Iterator[pa.RecordBatch]:
        if self.directory is None:
            return read_cluster_range(self.opts, rng, self.headers, batch_rows)
        log = self.directory.get(f"{rng.topic}-{rng.partition}")
        # (one stream of the caller's: the next block is read on the core it leaves idle)
        return read_log_range(log, rng, self.headers, self.opts.fail_on_data_loss,
                              self.opts.isolation_level, batch_rows, read_ahead=True)


def _column_names(columns: Iterable[str] | None, include_headers: bool) -> list[str]:
    if columns is None:
        return list(COLUMNS if include_headers else COLUMNS[:-1])
    names = [columns] if isinstance(columns, str) else list(columns)
    unknown = [name for name in names if name not in COLUMNS]
    if unknown or not names or len(set(names)) != len(names):
        raise ValueError(f"columns must be distinct names among {', '.join(COLUMNS)}, "
                         f"not {names!r}")
    return names


def _source_options(location, topics, partitions, start, end, isolation_level,
                    options: Mapping[str, Any]) -> SourceOptions:
    """The Spark source's options of a :func:`read` call, parsed by its parser (its errors)."""
    given = {_DOTTED.get(k.lower(), k): _option_text(v) for k, v in options.items()}
    if location is not None:  # (None: a live cluster, option kafka.bootstrap.servers)
        given["path"] = os.fspath(location) if isinstance(location, os.PathLike) \
            else str(location)
    pairs = None
    if topics is not None:
        names = [topics] if isinstance(topics, str) else list(topics)
        if partitions is None:
            _set(given, "subscribe", ",".join(names), "topics")
        else:
            pairs = [(t, int(p)) for t in names for p in partitions]
            _set(given, "assign", json.dumps({t: [int(p) for p in partitions] for t in names}),
                 "topics/partitions")
    elif partitions is not None:
        raise ValueError("partitions= needs topics= (the topics whose partitions they are)")
    for side, bound in (("starting", start), ("ending", end)):
        if bound is not None:
            name, text = _bound_option(side, bound, pairs)
            _set(given, name, text, "start" if side == "starting" else "end")
    if isolation_level is not None:
        _set(given, "isolation.level", _option_text(isolation_level), "isolation_level")
    return parse_options(given, streaming=False)


def _set(options: dict, name: str, value: str, keyword: str) -> None:
    if any(k.lower() == name.lower() for k in options):
        raise ValueError(f"give {keyword}= or option {name}, not both")
    options[name] = value


def _bound_option(side: str, bound: Any, pairs) -> tuple[str, str]:
    """(option name, its text) of a ``start``/``end`` keyword."""
    word = "start" if side == "starting" else "end"
    if isinstance(bound, str):
        return f"{side}Offsets", bound
    if isinstance(bound, dt.datetime):
        if bound.tzinfo is None:
            raise ValueError(f"{word}={bound!r} has no time zone: give an aware datetime "
                             "(e.g. tzinfo=datetime.timezone.utc)")
        return f"{side}Timestamp", str(round(bound.timestamp() * 1000))
    if isinstance(bound, Mapping):
        per: dict[str, dict[str, int]] = {}
        for key, offset in bound.items():
            if isinstance(key, tuple):
                per.setdefault(str(key[0]), {})[str(int(key[1]))] = int(offset)
            else:
                per.setdefault(str(key), {}).update({str(p): int(o) for p, o in offset.items()})
        return f"{side}Offsets", json.dumps(per)
    if isinstance(bound, int) and not isinstance(bound, bool):
        if pairs is None:
            raise ValueError(f"{word}={bound}: an offset for every partition needs topics= and "
                             "partitions=; else give {topic: {partition: offset}}")
        per = {}
        for topic, partition in pairs:
            per.setdefault(topic, {})[str(partition)] = bound
        return f"{side}Offsets", json.dumps(per)
    raise ValueError(f"{word} must be 'earliest', 'latest', an aware datetime, an offset or "
                     f"{{topic: {{partition: offset}}}}, not {bound!r}")


def _option_text(value: Any) -> str:
    """A keyword's value as the Spark option's text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (Mapping, list, tuple)):
        return json.dumps(value)
    if isinstance(value, IsolationLevel):
        return value.value
    return os.fspath(value) if isinstance(value, os.PathLike) else str(value)


