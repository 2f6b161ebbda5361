"""A partition's tail kept in a local log as the consumer handed it out
(``storage.cluster.replica``): records encoded again with the offsets, timestamps, timestamp
types, keys, values, headers and leader epochs the brokers gave them; offset gaps (control
records, compaction) kept; the log's end where the fetch ended. The replica against a real
cluster: tests/kafka/test_kafka_cluster_read.py (the mount of a live cluster)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from storage.cluster import replica as replica_module
from storage.cluster.replica import RECORDS_PER_BATCH, TailReplica, replica_batches
from storage.config import LogConfig
from storage.isolation import IsolationLevel
from storage.log import Log
from storage.records.batch import iter_batches


@dataclass
class Message:
    """What confluent-kafka's ``Message`` gives the replica."""

    at: int
    ts: int = 1_700_000_000_000
    ts_type: int = 1  # librdkafka: 1 CreateTime, 2 LogAppendTime
    k: bytes | None = b"k"
    v: bytes | None = b"v"
    h: list | None = None
    epoch: int | None = 3

    def offset(self):
        return self.at

    def timestamp(self):
        return self.ts_type, self.ts

    def key(self):
        return self.k

    def value(self):
        return self.v

    def headers(self):
        return self.h

    def leader_epoch(self):
        return self.epoch


def test_offset_gaps_stay_gaps_in_one_batch():
    batches = [b for b in iter_batches(b"".join(replica_batches(
        [Message(10), Message(11), Message(14)])))]
    assert len(batches) == 1
    batch = batches[0]
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (10, 14, 3)
    assert [r.offset for r in batch.records()] == [10, 11, 14]


def test_a_batch_is_cut_at_a_new_epoch_a_new_timestamp_type_and_its_size():
    messages = [Message(0, epoch=1), Message(1, epoch=2), Message(2, epoch=2, ts_type=2),
                Message(3, epoch=2, ts_type=2, ts=5), Message(4, epoch=None)]
    messages += [Message(5 + n) for n in range(RECORDS_PER_BATCH + 1)]
    batches = list(iter_batches(b"".join(replica_batches(messages))))
    assert [(b.base_offset, b.last_offset) for b in batches] == [
        (0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 4 + RECORDS_PER_BATCH),
        (5 + RECORDS_PER_BATCH, 5 + RECORDS_PER_BATCH)]
    assert [b.partition_leader_epoch for b in batches[:5]] == [1, 2, 2, 2, -1]
    append_time = batches[3]
    assert append_time.timestamp_type == 1 and append_time.max_timestamp == 5


def test_keys_values_headers_and_nulls_are_kept():
    messages = [Message(7, k=None, v=None, h=[("a", b"1"), ("empty", None)], ts=-1),
                Message(8, k=b"", v=b"", h=[])]
    records = [r for b in iter_batches(b"".join(replica_batches(messages))) for r in b.records()]
    assert [(r.key, r.value, list(r.headers)) for r in records] == [
        (None, None, [("a", b"1"), ("empty", None)]), (b"", b"", [])]
    assert records[0].timestamp == -1


@pytest.fixture
def tail_log(tmp_path):
    (tmp_path / "t-0").mkdir()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(), log_start_offset=100, recovery_point=100)
    yield log
    log.close()


def test_the_log_ends_where_the_fetch_ended_past_trailing_markers(tail_log, monkeypatch):
    """The fetch to 106 gets records 100..103 (104 and 105 are markers the consumer does not
    hand out): the log ends at 106, and the next fetch starts there."""
    asked = []

    def fetch(settings, topic, partition, start, end, timeout_s, isolation):
        asked.append((topic, partition, start, end, isolation))
        return iter([Message(o) for o in range(start, min(end, 104))])

    monkeypatch.setattr(replica_module, "fetch", fetch)
    replica = TailReplica(tail_log, {"bootstrap.servers": "b:1"},
                          IsolationLevel.READ_COMMITTED, 5.0)
    replica.fetch_to(106)
    assert replica.log_end_offset == replica.last_stable_offset == 106
    assert tail_log.log_end_offset == 104
    replica.fetch_to(106)  # nothing new: no fetch
    replica.fetch_to(108)
    assert asked == [("t", 0, 100, 106, IsolationLevel.READ_COMMITTED),
                     ("t", 0, 106, 108, IsolationLevel.READ_COMMITTED)]
    assert [r.offset for r in tail_log.reader.records_from(100, 10)] == [100, 101, 102, 103]
