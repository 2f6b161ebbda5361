"""``__remote_log_metadata`` record values built byte by byte, as Kafka's
``RemoteLogMetadataSerde`` writes them (``AbstractApiMessageSerde``'s frame: unsigned varints
frame version 1, api key, message version; then the flexible-version message: compact strings
and bytes, 16-byte UUIDs, an empty tagged-field section or ``txnIndexEmpty`` as tag 0), for the
values a broker never writes (custom metadata, several leader epochs, snapshots, bad bytes).
Topic and segment ids are 16 raw bytes."""

from __future__ import annotations

import struct

__all__ = ["partition_delete_record", "segment_record", "snapshot_record", "update_record",
           "uvarint"]


def uvarint(n: int) -> bytes:
    """``n`` as an unsigned varint (Kafka's ByteUtils.writeUnsignedVarint)."""
    out = b""
    while n >= 0x80:
        out += bytes([n & 0x7F | 0x80])
        n >>= 7
    return out + bytes([n])


def _string(text: str) -> bytes:
    data = text.encode()
    return uvarint(len(data) + 1) + data


def _bytes_field(data: bytes | None) -> bytes:
    return b"\0" if data is None else uvarint(len(data) + 1) + data


def _topic_id_partition(topic: str, topic_id: bytes, partition: int) -> bytes:
    return _string(topic) + topic_id + struct.pack(">i", partition) + b"\0"


def _segment_id(topic: str, topic_id: bytes, partition: int, segment: bytes) -> bytes:
    return _topic_id_partition(topic, topic_id, partition) + segment + b"\0"


def _epochs(entries) -> bytes:
    return uvarint(len(entries) + 1) + b"".join(struct.pack(">iq", e, o) + b"\0"
                                                 for e, o in entries)


def _frame(api_key: int, version: int = 0) -> bytes:
    return uvarint(1) + uvarint(api_key) + uvarint(version)


def segment_record(tid, seg, start=0, end=99, epochs=((0, 0),), custom=None, state=0,
                   txn_empty=None, topic="t\u00fcr", partition=3, size=4096) -> bytes:
    """A ``RemoteLogSegmentMetadataRecord`` (api key 0) of segment ``seg`` of
    ``<topic>-<partition>`` (topic id ``tid``), its ``.log`` ``size`` bytes; ``txn_empty``
    None leaves the tagged field out (its default, false)."""
    tagged = b"\0" if txn_empty is None else b"\x01\x00\x01" + bytes([txn_empty])
    return (_frame(0) + _segment_id(topic, tid, partition, seg)
            + struct.pack(">qqiqq", start, end, 1, 1_700_000_000_999, 1_700_000_001_000)
            + _epochs(epochs) + struct.pack(">i", size) + _bytes_field(custom)
            + bytes([state]) + tagged)


def update_record(tid, seg, state=1, custom=None, topic="t\u00fcr", partition=3) -> bytes:
    """A ``RemoteLogSegmentMetadataUpdateRecord`` (api key 1): segment ``seg`` in ``state``."""
    return (_frame(1) + _segment_id(topic, tid, partition, seg)
            + struct.pack(">iq", 2, 1_700_000_002_000) + _bytes_field(custom) + bytes([state])
            + b"\0")


def partition_delete_record(tid, state, topic="t\u00fcr", partition=3) -> bytes:
    """A ``RemotePartitionDeleteMetadataRecord`` (api key 2) of the partition in ``state``."""
    return (_frame(2) + _topic_id_partition(topic, tid, partition)
            + struct.pack(">iqb", 1, 1_700_000_003_000, state) + b"\0")


def snapshot_record(seg, txn_empty=True) -> bytes:
    """A ``RemoteLogSegmentMetadataSnapshotRecord`` (api key 3) of segment ``seg``, offsets
    100-199, leader epochs 2 and 3, custom metadata ``xyz``, COPY_SEGMENT_FINISHED."""
    return (_frame(3) + seg + struct.pack(">qqiqq", 100, 199, 1, 1_700_000_004_000,
                                          1_700_000_005_000)
            + _epochs([(2, 100), (3, 150)]) + struct.pack(">i", 8192) + _bytes_field(b"xyz")
            + bytes([1]) + (b"\x01\x00\x01\x01" if txn_empty else b"\0"))
