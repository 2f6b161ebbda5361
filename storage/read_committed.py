"""What a read_committed consumer sees: no control batch, and no batch of an aborted
transaction (the broker side is ``UnifiedLog.collectAbortedTransactions``, the filter the
consumer's ``CompletedFetch`` applies with the fetch response's aborted transactions).

A read_committed read is also bounded by the last stable offset
(``ProducerStateManager.last_stable_offset``): offsets at or above it are not returned at all.
Visibility is decided per batch: all records of a visible batch are visible.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Iterable
from typing import Protocol

from storage.transaction_index import AbortedTxn, TransactionIndex

__all__ = ["collect_aborted_txns", "AbortedTxnFilter"]


class _BatchHeader(Protocol):  # what RecordBatch offers
    producer_id: int
    base_offset: int
    is_transactional: bool
    is_control_batch: bool


def collect_aborted_txns(txn_indexes: Iterable[TransactionIndex], fetch_offset: int,
                         upper_bound_offset: int) -> list[AbortedTxn]:
    """The aborted transactions overlapping [fetch_offset, upper_bound_offset), read from
    ``txn_indexes``: those of the segment containing ``fetch_offset`` and of every later
    segment, in offset order (``UnifiedLog.collectAbortedTransactions``). Stops at the first
    index whose search is complete, so later segments are usually not opened. Raises
    CorruptIndexError / OSError as ``TransactionIndex.collect_aborted_txns``."""
    found: list[AbortedTxn] = []
    for index in txn_indexes:
        result = index.collect_aborted_txns(fetch_offset, upper_bound_offset)
        found.extend(result.aborted_txns)
        if result.is_complete:
            break
    return found


class AbortedTxnFilter:
    """Decides read_committed visibility of batches given the aborted transactions
    overlapping them (from :func:`collect_aborted_txns` over a range covering the batches).

    A transactional batch of producer P is aborted when an aborted transaction of P spans it:
    ``first_offset <= batch.base_offset <= last_offset`` (a producer's transactions do not
    overlap, and the marker at ``last_offset`` closes it). Batches may be asked in any order,
    which suits random reads as well as scans.
    """

    def __init__(self, aborted_txns: Iterable[AbortedTxn]):
        spans: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for txn in aborted_txns:
            spans[txn.producer_id].append((txn.first_offset, txn.last_offset))
        self._spans = {pid: sorted(s) for pid, s in spans.items()}

    def is_aborted(self, batch: _BatchHeader) -> bool:
        """True for a transactional data batch inside an aborted transaction."""
        if not batch.is_transactional or batch.is_control_batch:
            return False
        return self.is_aborted_at(batch.producer_id, batch.base_offset)

    def is_aborted_at(self, producer_id: int, base_offset: int) -> bool:
        """:meth:`is_aborted` of a transactional data batch given by its producer id and base
        offset (the compiled column reader asks this way)."""
        spans = self._spans.get(producer_id)
        if not spans:
            return False
        i = bisect.bisect_right(spans, (base_offset, float("inf"))) - 1
        return i >= 0 and spans[i][0] <= base_offset <= spans[i][1]

    def is_visible(self, batch: _BatchHeader) -> bool:
        """True if a read_committed consumer gets ``batch``'s records: not a control batch,
        not aborted. (The LSO bound is the caller's.)"""
        return not batch.is_control_batch and not self.is_aborted(batch)
