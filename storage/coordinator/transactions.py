"""The transactional ids of a ``__transaction_state`` partition, materialized from its records.

:class:`TransactionStates` is fed the partition's records in offset order and keeps, per
transactional id, the ``TransactionMetadata`` Kafka's transaction coordinator rebuilds when it
loads the partition (``TransactionStateManager`` reading ``TransactionLog`` records). The topic
is compacted: the newest record of an id wins and a tombstone (null value, written when an id
expires) removes it. One record costs O(1) besides its decoding.

Every timestamp is epoch milliseconds.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from storage.coordinator.records import TRANSACTION_STATE, CoordinatorRecord, RecordFold

__all__ = ["TRANSACTION_STATES", "TransactionMetadata", "TransactionStates", "state_name"]

# TransactionState.fromId: the names by id
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                      "CompleteAbort", "Dead", "PrepareEpochFence")


def state_name(state_id: int) -> str:
    """``TransactionState.fromId(id)``'s name (``Empty``, ``Ongoing``, ``PrepareCommit``,
    ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``, ``Dead``, ``PrepareEpochFence``),
    or ``Unknown(<id>)`` for an id Kafka does not define."""
    return TRANSACTION_STATES[state_id] if 0 <= state_id < len(TRANSACTION_STATES) else f"Unknown({state_id})"


@dataclasses.dataclass(frozen=True)
class TransactionMetadata:
    """One transactional id's current state (Kafka's ``TransactionMetadata``).

    ``state`` is the ``TransactionState`` name, ``state_id`` its id; ``topic_partitions`` the
    partitions of the ongoing or completing transaction as (topic, partition), in record
    order (empty for an Empty transaction, as Kafka ignores them there);
    ``start_timestamp`` is None when no transaction has started (-1 in the record);
    ``previous_producer_id`` / ``next_producer_id`` are None when the record has none (-1);
    ``client_transaction_version`` is 0 unless a flexible record says otherwise;
    ``record_offset`` / ``record_timestamp`` locate the record it comes from."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    previous_producer_id: int | None
    next_producer_id: int | None
    state: str
    state_id: int
    topic_partitions: tuple[tuple[str, int], ...]
    timeout_ms: int
    last_update_timestamp: int
    start_timestamp: int | None
    client_transaction_version: int
    record_offset: int
    record_timestamp: int

    def describe(self, now_ms: int | None = None) -> dict[str, Any]:
        """The state as ``kafka-transactions.sh describe --transactional-id`` shows it::

            {"transactionalId", "producerId", "producerEpoch", "transactionState",
             "transactionTimeoutMs", "currentTransactionStartTimeMs",
             "transactionDurationMs", "topicPartitions": ["<topic>-<partition>", ...]}

        ``currentTransactionStartTimeMs`` is None without a started transaction;
        ``transactionDurationMs`` is ``now_ms`` minus it, None without either."""
        start = self.start_timestamp
        return {
            "transactionalId": self.transactional_id, "producerId": self.producer_id,
            "producerEpoch": self.producer_epoch, "transactionState": self.state,
            "transactionTimeoutMs": self.timeout_ms, "currentTransactionStartTimeMs": start,
            "transactionDurationMs": now_ms - start if now_ms is not None and start is not None else None,
            "topicPartitions": [f"{t}-{p}" for t, p in self.topic_partitions],
        }


def _optional(value: int | None) -> int | None:
    return None if value is None or value < 0 else value


def _metadata(decoded: CoordinatorRecord, offset: int, timestamp: int) -> TransactionMetadata:
    v = decoded.value
    status = v["transactionStatus"]
    partitions = () if status == 0 else tuple(
        (entry["topic"], p) for entry in v["transactionPartitions"] or () for p in entry["partitionIds"])
    return TransactionMetadata(
        decoded.key["transactionalId"], v["producerId"], v["producerEpoch"],
        _optional(v.get("previousProducerId", -1)), _optional(v.get("nextProducerId", -1)),
        state_name(status), status, partitions, v["transactionTimeoutMs"],
        v["transactionLastUpdateTimestampMs"], _optional(v["transactionStartTimestampMs"]),
        v.get("clientTransactionVersion", 0), offset, timestamp)


class TransactionStates(RecordFold):
    """The transactional ids of one ``__transaction_state`` partition. Feed it the
    partition's records in offset order with :meth:`apply`; read it with
    :meth:`transactional_ids`, :meth:`get` and :meth:`describe`."""

    topic = TRANSACTION_STATE

    def __init__(self) -> None:
        super().__init__()
        self._states: dict[str, TransactionMetadata] = {}

    def fold(self, offset: int, timestamp: int, decoded: CoordinatorRecord) -> None:
        if decoded.key_name != "TransactionLogKey":
            return
        transactional_id = decoded.key["transactionalId"]
        if decoded.tombstone:
            self._states.pop(transactional_id, None)
        else:
            self._states[transactional_id] = _metadata(decoded, offset, timestamp)

    def __len__(self) -> int:
        return len(self._states)

    def __contains__(self, transactional_id: str) -> bool:
        return transactional_id in self._states

    def transactional_ids(self) -> list[str]:
        """Every transactional id with a state, sorted."""
        return sorted(self._states)

    def get(self, transactional_id: str) -> TransactionMetadata | None:
        """The id's current state, or None (never written, or expired: a tombstone)."""
        return self._states.get(transactional_id)

    def describe(self, transactional_id: str, now_ms: int | None = None) -> dict[str, Any] | None:
        """:meth:`TransactionMetadata.describe` of the id, or None for an unknown id."""
        state = self._states.get(transactional_id)
        return None if state is None else state.describe(now_ms)
