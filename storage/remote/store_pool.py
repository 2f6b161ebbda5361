"""What a process keeps of remote reads for its next reader: one :class:`StorePool`, bounded,
the process's :data:`PROCESS_POOL` (reached through ``ObjectStore.shared``, which
``storage.directory.open_store`` calls, and ``storage.remote.tiered.live_metadata_of``).

Spark reuses a Python worker for task after task, and each task opens its partition's log
anew. What that open costs and that never goes stale is kept here for the next task, as Spark's
own Kafka source keeps its consumers per executor (``KafkaDataConsumer``'s
``InternalKafkaConsumerPool``): the object stores (their connections, opened ``.log`` objects
and cached index objects) and the folded ``__remote_log_metadata`` of broker log directories,
which say where the stores' segments are. A process's lifetime is the point; the bounds keep it
small: the ``stores`` last used stores (an older one's fetch threads are stopped, its opened
objects dropped) and the ``folds`` last used folds. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import TypeVar

from storage.record_cache import RecordCache

from .object_store import ObjectStore

SHARED_STORES = 4  # stores kept (StorePool.store), the least recently used go
METADATA_FOLDS_KEPT = 4  # broker log directories whose folded __remote_log_metadata is kept

T = TypeVar("T")


class StorePool:
    """Object stores by (URI, endpoint, region), at most ``stores`` of them, and values derived
    from files that change (``__remote_log_metadata``'s fold) by key, at most ``folds``."""

    def __init__(self, stores: int = SHARED_STORES, folds: int = METADATA_FOLDS_KEPT) -> None:
        self.max_stores = stores
        self._lock = threading.Lock()
        self._stores: OrderedDict[tuple, ObjectStore] = OrderedDict()  # LRU first
        self._folds = RecordCache(folds, 0, lambda kept: 0)  # key -> (signature, value)

    def store(self, uri: str, *, endpoint: str | None = None,
              region: str | None = None) -> ObjectStore:
        """The pool's store for ``uri`` (``ObjectStore.from_uri``'s), made on first use and
        kept while among the ``stores`` last used; its ``close()`` leaves it open for the next
        reader. Safe to share because what a store keeps never goes stale (see
        ``ObjectStore.shared``). Raises as ``ObjectStore.from_uri``."""
        key = (uri, endpoint, region)
        with self._lock:
            store = self._stores.get(key)
            if store is not None:
                self._stores.move_to_end(key)
                return store
        store = ObjectStore.from_uri(uri, endpoint=endpoint, region=region)
        store.pooled = True
        with self._lock:
            store = self._stores.setdefault(key, store)
            self._stores.move_to_end(key)
            while len(self._stores) > self.max_stores:
                _, old = self._stores.popitem(last=False)
                old.stop()  # (a reader still holding it starts its threads again)
        return store

    def fold(self, key: Hashable, signature: Hashable, read: Callable[[], T]) -> T:
        """``read()``'s value for ``key``, read again only when ``signature`` (what the value
        was read from: names, inodes, sizes, mtimes) is not the one it was kept with."""
        kept = self._folds.get(key)
        if kept is not None and kept[0] == signature:
            return kept[1]
        value = read()
        self._folds.put(key, (signature, value))
        return value

    def close(self) -> None:
        """Stop every store's fetch threads and forget what is kept."""
        with self._lock:
            stores, self._stores = list(self._stores.values()), OrderedDict()
        for store in stores:
            store.stop()
        self._folds.clear()


# The process's pool (see the module): the one process-wide state of remote reads.
PROCESS_POOL = StorePool()
