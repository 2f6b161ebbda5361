"""``__remote_log_metadata`` read as a consumer: which remote segments of the wanted partitions
are live, as the brokers' ``TopicBasedRemoteLogMetadataManager`` folds it, with no broker's
disk at hand. Only the metadata partitions that hold the wanted partitions are read (Kafka's
``RemoteLogMetadataTopicPartitioner``), each from its start to its high watermark when the read
began; the records are folded by ``storage.remote.metadata.RemoteLogMetadataCache``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping

from storage.coordinator.schema import uuid_bytes
from storage.remote.metadata import REMOTE_LOG_METADATA_TOPIC, RemoteLogMetadataCache

from .client import ClusterClient, PartitionInfo
from .fetch import fetch

__all__ = ["metadata_partition", "read_remote_log_metadata"]

EARLIEST = -2  # librdkafka's OFFSET_BEGINNING: the log start


def _murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` (seed 0x9747b28c), a signed 32-bit int."""
    m, r = 0x5BD1E995, 24
    h = (0x9747B28C ^ len(data)) & 0xFFFFFFFF
    whole = len(data) // 4 * 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = data[whole:]
    if tail:
        for i in reversed(range(len(tail))):
            h ^= tail[i] << (8 * i)
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _java_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _long_hash(value: int) -> int:
    """``Long.hashCode``: the two halves xor-ed."""
    value &= 0xFFFFFFFFFFFFFFFF
    return _java_int(value ^ (value >> 32))


def metadata_partition(topic_id: str, partition: int, partitions: int) -> int:
    """The ``__remote_log_metadata`` partition holding a topic-partition's records
    (``RemoteLogMetadataTopicPartitioner.metadataPartition``: murmur2 of the big-endian
    ``Objects.hash(leastSignificantBits, mostSignificantBits, partition)``, made positive,
    modulo the metadata topic's partition count)."""
    most, least = struct.unpack(">qq", uuid_bytes(topic_id))
    h = 1
    for part in (_long_hash(least), _long_hash(most), partition):
        h = _java_int(31 * h + part)
    return (_murmur2(struct.pack(">i", h)) & 0x7FFFFFFF) % partitions


def read_remote_log_metadata(client: ClusterClient, wanted: Iterable[PartitionInfo]
                             ) -> RemoteLogMetadataCache:
    """The fold of every record in the metadata partitions that hold ``wanted``'s, up to
    their high watermarks now. An empty fold when the cluster has no ``__remote_log_metadata``
    (no tiered storage). Raises ClusterError when a metadata partition cannot be read."""
    cache = RemoteLogMetadataCache()
    if REMOTE_LOG_METADATA_TOPIC not in client.topic_names():
        return cache
    count = len(client.partitions([REMOTE_LOG_METADATA_TOPIC]))
    needed = sorted({metadata_partition(p.topic_id, p.partition, count) for p in wanted})
    ends = client.offsets([(REMOTE_LOG_METADATA_TOPIC, n) for n in needed], "latest")
    for n in needed:
        for offset, value in _records(client.config, n, ends[(REMOTE_LOG_METADATA_TOPIC, n)],
                                      client.timeout_s):
            cache.apply_value(value, offset)
    return cache


def _records(config: Mapping[str, str], partition: int, end: int, timeout_s: float):
    """(offset, value) of metadata partition ``partition`` from its start to ``end``
    (``config``: librdkafka's settings)."""
    for m in fetch(config, REMOTE_LOG_METADATA_TOPIC, partition, EARLIEST, end, timeout_s):
        yield m.offset(), m.value()
