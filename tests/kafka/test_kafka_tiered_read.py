"""A tiered topic read directly equals what Kafka's consumer reads through the broker (issue
26): a real Kafka 4.1.1 broker with tiered storage on (``tiered_broker``: LocalTieredStorage as
the remote tier) takes keyed records with headers, lz4-compressed, and a committed and an
aborted transaction, until most of the partition is remote-only; then kfs reads the remote
segments (the live set from ``__remote_log_metadata``) below the broker's local log and the
local log from there (``storage.remote.tiered``), at both isolation levels, and gets exactly
the records a consumer from offset 0 gets (the broker serving the remote segments)."""

from __future__ import annotations

import os

import pytest
from helpers.kafka import SEGMENT_BYTES, TIERED_TOPIC_CONFIG, consume_all, flushed, records_of

from storage import LogManager
from storage.remote.object_store import ObjectStore
from storage.remote.tiered import (
    TieredLogDirectory,
    UnifiedLogDirectory,
    live_metadata_of,
)

pytestmark = pytest.mark.kafka


def produce(broker, topic: str) -> None:
    from confluent_kafka import Producer

    plain = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 5,
                      "compression.type": "lz4"})
    txn = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                    "transactional.id": "tiered-read", "compression.type": "lz4"})
    txn.init_transactions(60)
    for round_ in range(5):
        for i in range(SEGMENT_BYTES // 600):
            n = round_ * 10_000 + i
            plain.produce(topic, key=None if i % 11 == 0 else b"k%d" % (i % 17),
                          value=None if i % 97 == 0 else os.urandom(300).hex().encode(),
                          headers=[("n", b"%d" % n)] if i % 5 == 0 else None)
        flushed(plain)
        txn.begin_transaction()
        for i in range(50):
            txn.produce(topic, key=b"t", value=b"txn-%d-%d" % (round_, i))
        flushed(txn)
        (txn.commit_transaction if round_ % 2 else txn.abort_transaction)(60)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_tiered_topic_read_directly_equals_the_consumer(tiered_broker, isolation):
    broker = tiered_broker
    broker.create_topic("history", 1, TIERED_TOPIC_CONFIG)
    produce(broker, "history")
    broker.wait_tiered("history", 0, segments=3)
    assert broker.local_segment_offsets("history")[0] > 0  # the first offsets are remote-only
    consumed = consume_all(broker, "history", 0, isolation)
    live = live_metadata_of(broker.log_dir)
    assert live, "no live remote segments in __remote_log_metadata"
    logs = UnifiedLogDirectory(LogManager(broker.log_dir, read_only=True),
                               TieredLogDirectory(ObjectStore.from_uri(
                                   broker.remote_storage_dir.as_uri()), live=live))
    try:
        log = logs.get("history-0")
        assert log.log_start_offset == 0
        got = records_of(log, isolation)
        assert len(got) == len(consumed) > 1000
        assert got == consumed
    finally:
        logs.close()
    assert_ends_from_metadata_are_the_segments(broker)


def assert_ends_from_metadata_are_the_segments(broker) -> None:
    """The live remote segments located from their metadata alone (nothing listed, each end
    its ``endOffset`` + 1, each size its ``segmentSizeInBytes``) are the listed segments of the
    same live set, whose ends are read from their last batches."""
    metadata = live_metadata_of(broker.log_dir)
    stems = {directory: set(segments) for directory, segments in metadata.items()}
    uri = broker.remote_storage_dir.as_uri()
    by_metadata = TieredLogDirectory(ObjectStore.from_uri(uri), live=metadata)
    by_listing = TieredLogDirectory(ObjectStore.from_uri(uri), live=stems)
    try:
        ends = [[(s.base_offset, s.size, s.read_next_offset()) for s in d.get("history-0")
                 .segments.all()] for d in (by_metadata, by_listing)]
        assert len(ends[1]) >= 3
        assert ends[0] == ends[1]
    finally:
        by_metadata.close()
        by_listing.close()
