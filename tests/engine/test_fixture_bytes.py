"""Kafka's bytes from our engine: the batches of Kafka-written partitions, re-appended as a
follower appends (``Log.append_batches``) with the fixture's segment settings, give ``.log``,
``.index``, ``.timeindex``, ``.txnindex``, producer ``.snapshot`` and ``leader-epoch-checkpoint``
files identical to Kafka's.

One version difference: the fixtures were written by Kafka at commit 1eb7644 (October 2024),
whose ``LogSegment.append`` added at most one index entry per append (the append's last offset at
its first batch's position). Kafka 4.1.1, the broker kfs follows (``tests/kafka/test_kafka_same_bytes.py``
compares with it), decides per batch, so where plain-0 had multi-batch appends its ``.index`` and
``.timeindex`` files are those of 4.1.1's rule (:func:`helpers.kafka_written.kafka_41_indexes`),
not the fixture's."""

import struct
from pathlib import Path

import pytest

from helpers.kafka_written import kafka_41_indexes
from helpers.paths import KAFKA_WRITTEN
from storage import LogConfig
from storage.log import Log
from storage.log_files import offset_from_file_name
from storage.records import iter_batches

FIXTURES = KAFKA_WRITTEN
# from the fixtures' README
SEGMENT_BYTES = {"plain-0": 64 * 1024, "codecs-0": 16 * 1024, "txn-0": 8 * 1024}
# fixtures with follower-style appends of several batches (README: plain-0, 21 index entries)
MULTI_BATCH_APPENDS = {"plain-0"}

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def index_entries(path: Path, base_offset: int) -> dict[int, int]:
    """{position: absolute offset} of a Kafka .index file."""
    data = path.read_bytes()
    return {pos: base_offset + rel for rel, pos in struct.iter_unpack(">ii", data)}


def kafka_appends(directory: Path) -> list[bytes]:
    """The fixture's batches grouped into appends that reproduce its index entries.

    An offset index entry (offset o, position p) records an append that started at p and ended
    with offset o. Between those, how batches were grouped changes no entry as long as no
    group starts where Kafka added none, so each stretch between indexed appends is one append.
    """
    appends = []
    for log_path in sorted(directory.glob("*.log")):
        base = offset_from_file_name(log_path.name)
        data = log_path.read_bytes()
        starts = index_entries(log_path.with_suffix(".index"), base)
        group_start = group_end_offset = None
        for batch in iter_batches(data):
            pos = batch.position
            if pos in starts or group_start is None or (
                    group_end_offset is not None and batch.base_offset > group_end_offset):
                if group_start is not None:
                    appends.append(data[group_start:pos])
                group_start, group_end_offset = pos, starts.get(pos)
        appends.append(data[group_start:])
    return appends


@needs_fixtures
@pytest.mark.parametrize("name", sorted(SEGMENT_BYTES))
def test_follower_appends_reproduce_kafkas_files(tmp_path, name):
    source = FIXTURES / name
    target = tmp_path / name
    target.mkdir()
    log = Log(target, name.rsplit("-", 1)[0], 0, LogConfig(segment_bytes=SEGMENT_BYTES[name]))
    for chunk in kafka_appends(source):
        log.append_batches(chunk)
    log.close()
    kinds = ("*.log", "*.index", "*.timeindex", "*.txnindex", "*.snapshot",
             "leader-epoch-checkpoint")
    expected = sorted(p.name for kind in kinds for p in source.glob(kind))
    assert sorted(p.name for kind in kinds for p in target.glob(kind)) == expected
    for file_name in expected:
        want = (source / file_name).read_bytes()
        if name in MULTI_BATCH_APPENDS and file_name.endswith((".index", ".timeindex")):
            # Kafka 4.1.1 indexes per batch, the fixture's Kafka per append (module docstring)
            want = kafka_41_indexes((source / file_name).with_suffix(".log"))[
                file_name.endswith(".timeindex")]
        assert (target / file_name).read_bytes() == want, file_name


@needs_fixtures
def test_kafka_41_indexes_are_the_fixtures_where_every_append_was_one_batch():
    """The oracle above is the fixtures' own rule wherever the two Kafka versions agree: every
    append of codecs-0 and txn-0 was one batch (a producer's), so per batch is per append."""
    for name in set(SEGMENT_BYTES) - MULTI_BATCH_APPENDS:
        for log_path in sorted((FIXTURES / name).glob("*.log")):
            index, time_index = kafka_41_indexes(log_path)
            assert index == log_path.with_suffix(".index").read_bytes(), log_path
            assert time_index == log_path.with_suffix(".timeindex").read_bytes(), log_path
