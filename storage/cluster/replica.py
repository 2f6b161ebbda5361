"""A partition's tail, the offsets after its remote tier, fetched through the brokers and kept in
Kafka's own format in a local log: what a follower replica holds, with a consumer for its fetcher
(librdkafka hands out records, not batches, so they are encoded again, each keeping the offset,
timestamp, timestamp type, key, value, headers and leader epoch the brokers gave it).

A log read through it is the broker's log as a consumer at the fetch's isolation level sees it:
at read_committed no record of an aborted transaction, at either level no control record (its
offset is a gap, as in a compacted log). The log end offset is where the last fetch ended (the
high watermark, or the last stable offset at read_committed), past the last record when markers
end the log.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from itertools import groupby

from storage.isolation import IsolationLevel
from storage.log import Log
from storage.records.batch import TimestampType, build_batch

from .fetch import fetch

__all__ = ["TailReplica", "replica_batches"]

RECORDS_PER_BATCH = 1000  # a replica batch's records at most (a producer's batch's order)
APPEND_BYTES = 1 << 20  # replica batches appended in one go, about

# librdkafka's timestamp types (TIMESTAMP_CREATE_TIME 1, TIMESTAMP_LOG_APPEND_TIME 2; 0: none)
_LOG_APPEND_TIME = 2


class TailReplica:
    """``log`` (a writable local ``storage.log.Log`` made empty at the tail's first offset,
    in a directory of its own) filled by :meth:`fetch_to` from the partition
    ``log.topic``-``log.partition`` of the cluster ``settings`` (librdkafka's client settings)
    at ``isolation``. Everything else is the log's (the surface a ``UnifiedLog`` joins below
    its remote tier)."""

    def __init__(self, log: Log, settings: Mapping[str, str], isolation: IsolationLevel,
                 timeout_s: float) -> None:
        self.log = log
        self._settings = dict(settings)
        self._isolation = isolation
        self._timeout_s = timeout_s
        self._fetched = log.log_end_offset

    def __getattr__(self, name: str):
        return getattr(self.log, name)

    @property
    def log_end_offset(self) -> int:
        """Where the last fetch ended (records and markers below it are in)."""
        return max(self._fetched, self.log.log_end_offset)

    @property
    def last_stable_offset(self) -> int:
        """As :attr:`log_end_offset`: a read_committed fetch stops at the last stable offset,
        and holds no transaction open."""
        return self.log_end_offset

    def fetch_to(self, end: int) -> None:
        """Fetch offsets ``[log end offset, end)`` through the brokers (``end`` at most the
        high watermark, or the last stable offset at read_committed) and append them. Raises
        ClusterError (``storage.cluster.fetch.fetch``); OSError from the local disk."""
        start = self.log_end_offset
        if end <= start:
            return
        messages = fetch(self._settings, self.log.topic, self.log.partition, start, end,
                         self._timeout_s, self._isolation)
        for chunk in _chunks(replica_batches(messages)):
            self.log.append_batches(chunk)
        self._fetched = end

    def close(self) -> None:
        self.log.close()


def replica_batches(messages: Iterable) -> Iterator[bytes]:
    """v2 batches holding ``messages`` (confluent-kafka ``Message``s of one partition, in offset
    order): consecutive records of one leader epoch and timestamp type (and, for LogAppendTime,
    one timestamp: the batch's) at most RECORDS_PER_BATCH together, offset gaps kept as offset
    deltas."""
    def kind(m) -> tuple:
        ts_type, ts = m.timestamp()
        epoch = m.leader_epoch()
        return (-1 if epoch is None else epoch, ts_type == _LOG_APPEND_TIME,
                ts if ts_type == _LOG_APPEND_TIME else None)

    run: list = []
    for key, group in groupby(messages, kind):
        for m in group:
            run.append(m)
            if len(run) == RECORDS_PER_BATCH:
                yield _batch(run, *key)
                run = []
        if run:
            yield _batch(run, *key)
            run = []


def _batch(run: list, epoch: int, log_append: bool, append_time: int | None) -> bytes:
    base = run[0].offset()
    return build_batch(
        base, [m.value() for m in run], [m.key() for m in run],
        [m.timestamp()[1] for m in run], [m.headers() or () for m in run],
        timestamp_type=TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME,
        log_append_time=append_time, partition_leader_epoch=epoch,
        offset_deltas=[m.offset() - base for m in run])


def _chunks(batches: Iterable[bytes]) -> Iterator[bytes]:
    """Batches joined into about APPEND_BYTES a piece (one append each)."""
    piece: list[bytes] = []
    size = 0
    for batch in batches:
        piece.append(batch)
        size += len(batch)
        if size >= APPEND_BYTES:
            yield b"".join(piece)
            piece, size = [], 0
    if piece:
        yield b"".join(piece)
