"""The state a coordinator partition adds up to, kept up to date with its log, as Kafka's
coordinators replay ``__consumer_offsets`` and ``__transaction_state`` when they load a
partition and then follow what is appended to it.

Only committed records count (a transactional offset commit applies once its transaction
commits, as the group coordinator's replay waits for the marker): the replay reads as a
``read_committed`` consumer up to the last stable offset. Each :meth:`CoordinatorReplay.catch_up`
reads the records appended since the last one only, so one more commit costs O(1) work.
"""

from __future__ import annotations

import threading

from storage.coordinator.groups import GroupStates
from storage.coordinator.records import CONSUMER_OFFSETS, TRANSACTION_STATE
from storage.coordinator.transactions import TransactionStates

__all__ = ["COORDINATOR_TOPICS", "CoordinatorReplay"]

COORDINATOR_TOPICS = (CONSUMER_OFFSETS, TRANSACTION_STATE)


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
        Raises what the log's reads raise (CorruptRecordError for a bad batch: the records
        before it stay applied)."""
        with self._lock:
            end = self.log.last_stable_offset
            if end < self._end:
                self.states, self._end = self._fresh(), 0
            read = 0
            for records in self.log.record_lists(self._end, end, read_committed=True,
                                                 cache=False):
                for record in records:
                    self.states.apply(record)
                read += len(records)
            self._end = end
            return read
