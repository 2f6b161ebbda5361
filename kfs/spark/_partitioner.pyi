"""The compiled twin of ``kfs.spark.partitioner`` (type stub of ``_partitioner.pyx``): Kafka's
murmur2 and the default partitioner over whole Arrow columns."""

from typing import Any

# An Arrow binary array as (validity, offsets, data, offset): buffers and the array's offset
_BinaryArray = tuple[Any, Any, Any, int]

def murmur2_of(data: bytes | bytearray | memoryview) -> int:
    """Kafka's ``Utils.murmur2`` of ``data`` as a signed 32-bit int."""

def assign_partitions(n: int, keys: _BinaryArray | None, values: _BinaryArray, out: Any,
                      num_partitions: int, sticky: Any) -> None:
    """Kafka's default partitioner (``BuiltInPartitioner``) over rows [0, ``n``): each row whose
    ``out`` (an int32 buffer) entry is -1 gets ``toPositive(murmur2(key)) % num_partitions``, or
    without a key the sticky partition of ``sticky`` (a ``StickyPartitioner``: ``current``,
    ``bytes``, ``batch_size``, ``switch()``)."""
