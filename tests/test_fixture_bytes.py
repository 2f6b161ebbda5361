"""Kafka's bytes from our engine: the batches of Kafka-written partitions, re-appended as a
follower appends (``Log.append_batches``) with the fixture's segment settings, give ``.log``,
``.index``, ``.timeindex``, ``.txnindex``, producer ``.snapshot`` and ``leader-epoch-checkpoint``
files identical to Kafka's."""

import struct
from pathlib import Path

import pytest

from conftest import KAFKA_WRITTEN
from storage import LogConfig
from storage.log import Log
from storage.records import iter_batches

FIXTURES = KAFKA_WRITTEN
# from the fixtures' README
SEGMENT_BYTES = {"plain-0": 64 * 1024, "codecs-0": 16 * 1024, "txn-0": 8 * 1024}

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
        base = int(log_path.stem)
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
        assert (target / file_name).read_bytes() == (source / file_name).read_bytes(), file_name
