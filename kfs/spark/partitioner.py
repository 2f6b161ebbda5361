"""Kafka's default partitioner for records written without a ``partition``
(``BuiltInPartitioner`` of the Java producer): keyed records go to
``toPositive(murmur2(key)) % numPartitions``; keyless ones stick to one random partition until
about ``batch.size`` bytes went there, then move on (the "uniform sticky" partitioner)."""

from __future__ import annotations

import random

from kfs.spark._partitioner import (  # this module is their owner
    assign_partitions,
    murmur2_of,
)

__all__ = ["StickyPartitioner", "assign_partitions", "murmur2", "partition_for_key"]

DEFAULT_BATCH_SIZE = 16384  # the producer's batch.size


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as a signed 32-bit int (the compiled codec's)."""
    return murmur2_of(data)


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """Partitions for keyless records: one random partition per ``batch_size`` bytes of values.

    ``current`` is the partition, ``bytes`` what it has had so far; ``switch`` moves on (the
    codec's ``assign_partitions`` runs the same rule over whole columns)."""

    def __init__(self, num_partitions: int, batch_size: int = DEFAULT_BATCH_SIZE,
                 rng: random.Random | None = None):
        self._n = num_partitions
        self.batch_size = batch_size
        self._rng = rng or random.Random()
        self.current = self._rng.randrange(num_partitions)
        self.bytes = 0

    def switch(self) -> int:
        """A different partition, as Kafka's ``BuiltInPartitioner``; returns it."""
        self.bytes = 0
        if self._n > 1:
            self.current = (self.current + self._rng.randrange(1, self._n)) % self._n
        return self.current

    def next(self, size: int) -> int:
        """The partition for a record of ``size`` bytes."""
        if self.bytes >= self.batch_size:
            self.switch()
        self.bytes += size
        return self.current
