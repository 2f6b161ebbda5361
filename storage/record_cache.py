"""The cache of decoded records: an LRU bounded both in entries and in an estimate of the
memory its values take, so that a lookup followed by reads of the same or neighbouring
offsets (``ls``, ``stat``, ``cat`` in a loop) decodes each batch once. The log keeps the
record lists of its recently read batches in one; the mount keeps the records its files
resolved to in another. It is the engine's one bounded LRU: an object store keeps its index
objects in one too, and ``storage.remote.store_pool`` its folded tiered-storage metadata.
Thread-safe."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

RECORD_COST = 200  # bytes of a Record's objects besides its key and value


def record_cost(record: Any) -> int:
    """What one record takes in memory, about: its key, its value and its objects."""
    return RECORD_COST + len(record.key or b"") + len(record.value or b"")


def records_cost(records: list) -> int:
    return sum(record_cost(r) for r in records)


class RecordCache:
    """Least recently used first out, past ``max_entries`` or ``max_bytes`` (``cost`` of each
    value); the newest entry always stays, however large."""

    def __init__(self, max_entries: int, max_bytes: int, cost: Callable[[Any], int]) -> None:
        self._max_entries, self._max_bytes, self._cost = max_entries, max_bytes, cost
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        """The value at ``key``, or None."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Hashable, value: Any) -> None:
        cost = self._cost(value)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[key] = (value, cost)
            self._bytes += cost
            while len(self._entries) > 1 and (len(self._entries) > self._max_entries
                                              or self._bytes > self._max_bytes):
                self._bytes -= self._entries.popitem(last=False)[1][1]

    def drop(self, which: Callable[[Hashable], bool]) -> None:
        """Forget the entries whose key ``which`` accepts (e.g. records retention deleted)."""
        with self._lock:
            for key in [k for k in self._entries if which(k)]:
                self._bytes -= self._entries.pop(key)[1]

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
