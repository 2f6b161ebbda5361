"""Kafka's default partitioner for records written without a ``partition``
(``BuiltInPartitioner`` of the Java producer): keyed records go to
``toPositive(murmur2(key)) % numPartitions``; keyless ones stick to one random partition until
about ``batch.size`` bytes went there, then move on (the "uniform sticky" partitioner)."""

from __future__ import annotations

import random

_SEED = 0x9747B28C
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
DEFAULT_BATCH_SIZE = 16384  # the producer's batch.size


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as a signed 32-bit int."""
    length = len(data)
    h = (_SEED ^ length) & _MASK
    whole = length & ~3
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    rest = length & 3
    if rest == 3:
        h ^= data[whole + 2] << 16
    if rest >= 2:
        h ^= data[whole + 1] << 8
    if rest >= 1:
        h ^= data[whole]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Partitions for keyless records: one random partition per ``batch_size`` bytes of values."""

    def __init__(self, num_partitions: int, batch_size: int = DEFAULT_BATCH_SIZE,
                 rng: random.Random | None = None):
        self._n = num_partitions
        self._batch_size = batch_size
        self._rng = rng or random.Random()
        self._current = self._rng.randrange(num_partitions)
        self._bytes = 0

    def next(self, size: int) -> int:
        """The partition for a record of ``size`` bytes."""
        if self._bytes >= self._batch_size:
            self._bytes = 0
            if self._n > 1:  # a different partition, as Kafka's BuiltInPartitioner
                self._current = (self._current + self._rng.randrange(1, self._n)) % self._n
        self._bytes += size
        return self._current
