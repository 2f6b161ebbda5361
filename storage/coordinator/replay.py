"""The state a coordinator partition adds up to, kept up to date with its log, as Kafka's
coordinators replay ``__consumer_offsets`` and ``__transaction_state`` when they load a
partition and then follow what is appended to it.

Only committed records count (a transactional offset commit applies once its transaction
commits, as the group coordinator's replay waits for the marker): the replay reads as a
``read_committed`` consumer up to the last stable offset. Each :meth:`CoordinatorReplay.catch_up`
reads the records appended since the last one only, so one more commit costs O(1) work, and
decodes only the newest record of each key it read.
"""

from __future__ import annotations

import threading
from typing import NamedTuple

import pyarrow as pa

from storage.coordinator.groups import GroupStates
from storage.coordinator.records import CONSUMER_OFFSETS, TRANSACTION_STATE
from storage.coordinator.transactions import TransactionStates
from storage.isolation import IsolationLevel

__all__ = ["COORDINATOR_TOPICS", "CoordinatorReplay"]

COORDINATOR_TOPICS = (CONSUMER_OFFSETS, TRANSACTION_STATE)
WINDOW_ROWS = 1 << 20  # records deduplicated together: fewer survivors become Python objects


class CoordinatorReplay:
    """The :class:`GroupStates` (``__consumer_offsets``) or :class:`TransactionStates`
    (``__transaction_state``) of one partition ``log`` (a ``storage.Log``). Thread-safe.
    Raises ValueError for a log of another topic."""

    def __init__(self, log) -> None:
        if log.topic not in COORDINATOR_TOPICS:
            raise ValueError(f"{log.name} is not a partition of a coordinator topic")
        self.log = log
        self._lock = threading.Lock()
        self.states = self._fresh()
        self._end = 0  # the offset the replay reached (markers and aborted records included)

    def _fresh(self) -> GroupStates | TransactionStates:
        return GroupStates() if self.log.topic == CONSUMER_OFFSETS else TransactionStates()

    def is_current(self) -> bool:
        """Whether every committed record is applied (no I/O)."""
        return self._end == self.log.last_stable_offset

    def catch_up(self) -> int:
        """Apply the records committed since the last call; returns how many were read. A log
        cut back below what was applied (recovery truncated it) is replayed from its start.
        Raises what the log's reads raise (CorruptRecordError for a bad batch: nothing of this
        call is applied then).

        As the topics are compacted, only the newest record of each key read counts (a
        compacted log keeps no more, and Kafka's coordinators rely on that): records are read
        as columns, the newest per key kept, and only those decoded, in offset order."""
        with self._lock:
            end = self.log.last_stable_offset
            if end < self._end:
                self.states, self._end = self._fresh(), 0
            newest: dict[bytes | None, tuple] = {}
            read = 0
            for batch in self.log.reader.read_columns(self._end, end,
                                                      IsolationLevel.READ_COMMITTED,
                                                      max_rows=WINDOW_ROWS):
                read += batch.num_rows
                _keep_newest(batch, newest)
            for offset, timestamp, key, value in sorted(newest.values(), key=_first):
                self.states.apply(_Record(offset, timestamp, key, value))
            self._end = end
            return read


class _Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None


def _first(row: tuple) -> int:
    return row[0]


def _keep_newest(batch: pa.RecordBatch, newest: dict) -> None:
    """Put the newest (offset, timestamp, key, value) of each key of ``batch`` in ``newest``
    (an Arrow hash aggregation finds them; only those become Python objects)."""
    rows = pa.table({"key": batch.column("key"),
                     "row": pa.array(range(batch.num_rows), pa.int64())})
    last = rows.group_by("key", use_threads=False).aggregate([("row", "max")])["row_max"]
    picked = batch.select(["offset", "timestamp", "key", "value"]).take(last.combine_chunks())
    for offset, timestamp, key, value in zip(*(c.to_pylist() for c in picked.columns)):
        newest[key] = (offset, timestamp, key, value)
