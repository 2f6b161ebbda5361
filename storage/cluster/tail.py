"""A partition's records fetched through the brokers, as the engine's record columns
(``storage.records.columns``: ``offset``, ``timestamp`` epoch ms, ``timestamp_type`` 0 create /
1 log append, ``key``, ``value``, and ``headers`` when asked): the part of a tiered topic after
its remote tier, read by a consumer assigned to the partition (librdkafka: its fetches follow the
leader, decompress, and at read_committed leave out aborted transactions and control records).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa

from storage.isolation import IsolationLevel
from storage.records.columns import HEADERS_TYPE

from .client import api_timeout_s, client_config
from .fetch import fetch

__all__ = ["read_tail"]

_TIMESTAMP_TYPES = {1: 0, 2: 1}  # librdkafka's CREATE_TIME/LOG_APPEND_TIME -> Kafka's 0/1


def read_tail(config: Mapping[str, str], topic: str, partition: int, start: int, end: int,
              isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
              include_headers: bool = False, rows_per_batch: int = 32768
              ) -> Iterator[pa.RecordBatch]:
    """Record columns of the data records of offsets ``[start, end)`` of ``topic``-``partition``
    through the cluster at ``config["bootstrap.servers"]`` (``end`` at most the high watermark,
    or the last stable offset at read_committed, when the range was planned), at most
    ``rows_per_batch`` rows a batch. ``config``: the client settings (``kafka.`` options, as
    ``storage.cluster.client.client_config`` takes them). Raises ClusterError when the brokers
    refuse the fetch or send nothing for ``default.api.timeout.ms`` (60 s) before ``end`` is
    reached (e.g. the records were deleted)."""
    rows = _Rows(include_headers)
    for m in fetch(client_config(config), topic, partition, start, end, api_timeout_s(config),
                   isolation):
        rows.add(m)
        if len(rows) >= rows_per_batch:
            yield rows.take(rows_per_batch)
    if len(rows):
        yield rows.take(len(rows))


class _Rows:
    """Columns being gathered from consumed messages."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.columns: dict[str, list] = {name: [] for name in (
            "offset", "timestamp", "timestamp_type", "key", "value",
            *(("headers",) if include_headers else ()))}

    def __len__(self) -> int:
        return len(self.columns["offset"])

    def add(self, m) -> None:
        kind, timestamp = m.timestamp()
        c = self.columns
        c["offset"].append(m.offset())
        c["timestamp"].append(timestamp)
        c["timestamp_type"].append(_TIMESTAMP_TYPES.get(kind, 0))
        c["key"].append(m.key())
        c["value"].append(m.value())
        if self.include_headers:
            headers = m.headers()
            c["headers"].append(None if headers is None else
                                [{"key": k, "value": v} for k, v in headers])

    def take(self, n: int) -> pa.RecordBatch:
        """The first ``n`` rows as a record batch, removed from what is gathered."""
        taken = {name: values[:n] for name, values in self.columns.items()}
        for values in self.columns.values():
            del values[:n]
        types = {"offset": pa.int64(), "timestamp": pa.int64(), "timestamp_type": pa.int32(),
                 "key": pa.binary(), "value": pa.binary(), "headers": HEADERS_TYPE}
        return pa.RecordBatch.from_arrays([pa.array(v, types[k]) for k, v in taken.items()],
                                          names=list(taken))
