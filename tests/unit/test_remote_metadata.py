"""``storage.remote.metadata``: ``__remote_log_metadata`` values decoded as Kafka's
``RemoteLogMetadataSerde`` does, and folded into the live remote segments as Kafka's
``RemoteLogMetadataCache`` keeps them. (tests/kafka/test_kafka_tiered_metadata.py holds the same
code to a real broker's records, files and kafka-dump-log.)"""

from __future__ import annotations

import base64
import uuid

import pytest
from helpers.remote_metadata import (
    partition_delete_record,
    segment_record,
    snapshot_record,
    update_record,
)

from storage.records import build_batch
from storage.remote.metadata import (
    RemoteLogMetadataCache,
    RemoteLogMetadataFormatError,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataSnapshot,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
    deserialize,
    read_metadata_log_dir,
    read_metadata_partition,
    remote_metadata_json,
)

TID = bytes(range(16))
TID_TEXT = base64.urlsafe_b64encode(TID).decode().rstrip("=")
STARTED, FINISHED = RemoteLogSegmentState.COPY_SEGMENT_STARTED, RemoteLogSegmentState.COPY_SEGMENT_FINISHED
DELETE_STARTED = RemoteLogSegmentState.DELETE_SEGMENT_STARTED
DELETE_FINISHED = RemoteLogSegmentState.DELETE_SEGMENT_FINISHED


def seg_id(n: int) -> bytes:
    return uuid.UUID(int=n + 1).bytes


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_each_kind_of_value_decodes_into_its_kafka_class():
    m = deserialize(segment_record(TID, seg_id(1), start=10, end=19, epochs=((3, 10), (1, 5), (4, 15)),
                                   custom=b"ab", txn_empty=True))
    assert isinstance(m, RemoteLogSegmentMetadata)
    assert m.topic_id_partition == TopicIdPartition(TID_TEXT, "t\u00fcr", 3)
    assert m.segment_id.id == b64(seg_id(1)) and m.segment_id.uuid == uuid.UUID(int=2)
    assert (m.start_offset, m.end_offset, m.broker_id, m.segment_size_in_bytes) == (10, 19, 1, 4096)
    assert m.segment_leader_epochs == ((1, 5), (3, 10), (4, 15))  # by epoch, as a TreeMap
    assert (m.custom_metadata, m.state, m.txn_index_empty) == (b"ab", STARTED, True)
    assert m.file_stem == f"00000000000000000010-{b64(seg_id(1))}"
    assert str(m.local_tiered_storage_path("/r")) == f"/r/t\u00fcr-3-{TID_TEXT}"
    assert m.java_string() == (
        f"RemoteLogSegmentMetadata{{remoteLogSegmentId=RemoteLogSegmentId{{topicIdPartition="
        f"{TID_TEXT}:t\u00fcr-3, id={b64(seg_id(1))}}}, startOffset=10, endOffset=19, brokerId=1, "
        "maxTimestampMs=1700000000999, eventTimestampMs=1700000001000, "
        "segmentLeaderEpochs={1=5, 3=10, 4=15}, segmentSizeInBytes=4096, "
        "customMetadata=Optional[CustomMetadata{2 bytes}], state=COPY_SEGMENT_STARTED, "
        "txnIdxEmpty=true}")
    assert deserialize(segment_record(TID, seg_id(1))).txn_index_empty is False  # the default

    u = deserialize(update_record(TID, seg_id(1), state=1))
    assert isinstance(u, RemoteLogSegmentMetadataUpdate) and u.state == FINISHED
    assert u.java_string().endswith(
        "customMetadata=Optional.empty, state=COPY_SEGMENT_FINISHED, "
        "eventTimestampMs=1700000002000, brokerId=2}")
    d = deserialize(partition_delete_record(TID, 1))
    assert isinstance(d, RemotePartitionDeleteMetadata)
    assert d.java_string() == (f"RemotePartitionDeleteMetadata{{topicPartition={TID_TEXT}:t\u00fcr-3, "
                               "state=DELETE_PARTITION_STARTED, eventTimestampMs=1700000003000, "
                               "brokerId=1}")
    s = deserialize(snapshot_record(seg_id(2)))
    assert isinstance(s, RemoteLogSegmentMetadataSnapshot)
    assert s.java_string() == (
        f"RemoteLogSegmentMetadataSnapshot{{segmentId={b64(seg_id(2))}, startOffset=100, "
        "endOffset=199, maxTimestampMs=1700000004000, segmentLeaderEpochs={2=100, 3=150}, "
        "segmentSizeInBytes=8192, customMetadata=Optional[CustomMetadata{3 bytes}], "
        "state=COPY_SEGMENT_FINISHED, txnIdxEmpty=true}")


@pytest.mark.parametrize("value, message", [
    (None, 'Cannot invoke "java.nio.ByteBuffer.remaining()"'),
    (b"", "Error while reading frame version"),
    (b"\x00", "Could not deserialize metadata record with frame version 0."),
    (b"\x02\x00\x00", "unknown frame version 2(only frame version 1 is supported)"),
    (b"\x01\x09\x00", "UnsupportedVersionException: Unknown metadata id 9"),
    (b"\x01\xff\xff\x03\x00", "Value for type was too large."),
    (b"\x01\x00\x01", "Failed to deserialize record with type 0"),  # no version 1 in 4.1.1
    (segment_record(TID, seg_id(1))[:-3], "Failed to deserialize record with type 0"),
    (segment_record(TID, seg_id(1)) + b"xy", "Found 2 byte(s) of garbage after 0"),
    (segment_record(TID, seg_id(1), start=-1), "Unexpected start offset = -1."),
    (segment_record(TID, seg_id(1), start=5, end=4), "Unexpected end offset = 4."),
    (segment_record(TID, seg_id(1), epochs=()), "segmentLeaderEpochs can not be null or empty"),
    (segment_record(TID, seg_id(1), state=7), "state can not be null"),
    (partition_delete_record(TID, 9), "null"),
])
def test_values_that_do_not_decode_say_what_kafka_says(value, message):
    with pytest.raises(RemoteLogMetadataFormatError) as e:
        deserialize(value)
    assert message in str(e.value)
    obj, warnings = remote_metadata_json(value)
    assert warnings == [str(e.value)] and (obj is None) == (value is None)


def test_json_of_a_value():
    obj, warnings = remote_metadata_json(update_record(TID, seg_id(1), state=2, custom=b"\x01"))
    assert warnings == []
    assert obj == {"apiKey": 1, "name": "RemoteLogSegmentMetadataUpdateRecord", "version": 0,
                   "data": {"remoteLogSegmentId": {"topicIdPartition": {
                       "name": "t\u00fcr", "id": TID_TEXT, "partition": 3}, "id": b64(seg_id(1))},
                       "brokerId": 2, "eventTimestampMs": 1700000002000, "customMetadata": "AQ==",
                       "remoteLogSegmentState": 2}}


def fold(*values: bytes) -> RemoteLogMetadataCache:
    cache = RemoteLogMetadataCache()
    for offset, value in enumerate(values):
        cache.apply_value(value, offset)
    return cache


def test_a_segment_is_live_from_its_copy_finished_until_its_deletion_starts():
    tp = TopicIdPartition(TID_TEXT, "t\u00fcr", 3)
    history = [segment_record(TID, seg_id(0), 0, 99), update_record(TID, seg_id(0), 1),
               segment_record(TID, seg_id(1), 100, 199), update_record(TID, seg_id(1), 1),
               segment_record(TID, seg_id(2), 200, 299)]  # being copied
    cache = fold(*history)
    assert [m.start_offset for m in cache.live_segments(tp)] == [0, 100]
    assert [m.state for m in cache.segments(tp)] == [FINISHED, FINISHED, STARTED]
    live = cache.live_segments(tp)[0]
    assert (live.event_timestamp_ms, live.broker_id) == (1700000002000, 2)  # the update's
    stems = {d: set(m) for d, m in cache.live_metadata_by_directory().items()}
    assert stems == {f"t\u00fcr-3-{TID_TEXT}": {
        f"00000000000000000000-{b64(seg_id(0))}", f"00000000000000000100-{b64(seg_id(1))}"}}

    cache = fold(*history, update_record(TID, seg_id(0), 2))
    assert [m.start_offset for m in cache.live_segments(tp)] == [100]
    assert [m.state for m in cache.segments(tp)][0] == DELETE_STARTED
    cache = fold(*history, update_record(TID, seg_id(0), 2), update_record(TID, seg_id(0), 3))
    assert [m.start_offset for m in cache.segments(tp)] == [100, 200]  # gone for good

    # a partition being deleted has nothing live, whatever its segments say
    for state in RemotePartitionDeleteState:
        cache = fold(*history, partition_delete_record(TID, state))
        assert cache.live_segments(tp) == [] and cache.partition_deleted(tp) == state
        assert cache.partitions_deleted == [tp] and cache.live() == {}


def test_what_the_cache_cannot_place_is_warned_about_and_skipped():
    tp = TopicIdPartition(TID_TEXT, "t\u00fcr", 3)
    cache = fold(update_record(TID, seg_id(5), 1),  # never started
                 b"\x01\x09\x00",  # not a value of this topic
                 segment_record(TID, seg_id(6), state=1),  # starts finished
                 snapshot_record(seg_id(7)),  # names no partition: nothing to fold
                 segment_record(TID, seg_id(1)), update_record(TID, seg_id(1), 1))
    assert len(cache.warnings) == 3 and "offset 1 skipped" in cache.warnings[1]
    assert [m.segment_id.id for m in cache.live_segments(tp)] == [b64(seg_id(1))]

    # transitions Kafka's RemoteLogSegmentState refuses: back to copied, or deleted unstarted
    cache = fold(segment_record(TID, seg_id(1)), update_record(TID, seg_id(1), 2),
                 update_record(TID, seg_id(1), 1),  # deletion started -> copy finished
                 segment_record(TID, seg_id(2), 100, 199), update_record(TID, seg_id(2), 1),
                 update_record(TID, seg_id(2), 1),  # the same state again: allowed
                 update_record(TID, seg_id(2), 3))  # copy finished -> deletion finished
    assert len(cache.warnings) == 2 and "cannot go from DELETE_SEGMENT_STARTED to " \
        "COPY_SEGMENT_FINISHED" in cache.warnings[0]
    assert [(m.start_offset, m.state) for m in cache.segments(tp)] == [
        (0, DELETE_STARTED), (100, FINISHED)]


def test_partitions_apart_and_a_topic_created_again():
    other = bytes(16 * [7])
    cache = fold(segment_record(TID, seg_id(0), topic="a", partition=0),
                 update_record(TID, seg_id(0), 1, topic="a", partition=0),
                 segment_record(TID, seg_id(1), topic="a", partition=1),
                 update_record(TID, seg_id(1), 1, topic="a", partition=1),
                 # "a" deleted and created again: a new topic id, the same partition names
                 segment_record(other, seg_id(2), 0, 49, topic="a", partition=0),
                 update_record(other, seg_id(2), 1, topic="a", partition=0))
    assert [tp.name for tp in cache.live()] == ["a-0", "a-0", "a-1"]
    # a lookup by name finds the topic id whose records came last
    assert [m.segment_id.id for m in cache.live_by_name("a", 0)] == [b64(seg_id(2))]
    assert cache.live_by_name("a", 1)[0].segment_id.id == b64(seg_id(1))
    assert cache.live_by_name("b", 0) == []


def test_a_partition_directory_and_a_log_directory(tmp_path):
    values = [segment_record(TID, seg_id(0), 0, 99), update_record(TID, seg_id(0), 1),
              segment_record(TID, seg_id(1), 100, 199), update_record(TID, seg_id(1), 1)]
    for n, chunk in enumerate((values[:2], values[2:])):
        part = tmp_path / f"__remote_log_metadata-{n}"
        part.mkdir()
        offset = 0
        for value in chunk:  # two segments in partition 0's directory
            (part / f"{offset:020d}.log").write_bytes(
                build_batch(offset, [value], [None], 1_700_000_000_000))
            offset += 1
    (tmp_path / "other-0").mkdir()
    (tmp_path / "other-0" / "00000000000000000000.log").write_bytes(b"not read")
    tp = TopicIdPartition(TID_TEXT, "t\u00fcr", 3)
    assert [m.start_offset for m in read_metadata_partition(
        tmp_path / "__remote_log_metadata-0").live_segments(tp)] == [0]
    assert [m.start_offset for m in read_metadata_log_dir(tmp_path).live_segments(tp)] == [0, 100]
    assert read_metadata_log_dir(tmp_path / "other-0").live() == {}
