"""KRaft's metadata image replayed from ``__cluster_metadata-0``
(``storage.coordinator.metadata_image``) and its tree as kafka-metadata-shell names it
(``storage.coordinator.metadata_nodes``), on the metadata log a Kafka 4.1.1 broker wrote
(tests/fixtures/cluster-metadata) and on logs rebuilt from its records. The tree's text is held
against the shell itself in tests/kafka/test_kafka_metadata_image.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.paths import FIXTURES_ROOT

from storage.coordinator.cluster_metadata import read_metadata_log, read_metadata_record
from storage.coordinator.metadata_image import MetadataImageReplay, Partition
from storage.coordinator.metadata_nodes import java_zoned_time, node, partition_text
from storage.errors import KafkaStorageError
from storage.records import build_batch

FIXTURE = FIXTURES_ROOT / "cluster-metadata" / "__cluster_metadata-0"
SEGMENT = "00000000000000000000.log"
ABORT = b"\x01\x19\x00\x00"  # AbortTransactionRecord v0, no reason


def tree(image) -> dict[tuple[str, ...], str | None]:
    """Every path of the image's tree: its text, or None for a directory."""
    out: dict[tuple[str, ...], str | None] = {}

    def walk(path: tuple[str, ...]) -> None:
        found = node(image, path)
        out[path] = None if isinstance(found, list) else found
        for child in found if isinstance(found, list) else ():
            walk((*path, child))
    walk(())
    return out


@pytest.fixture
def metadata_dir(tmp_path) -> Path:
    directory = tmp_path / "__cluster_metadata-0"
    directory.mkdir()
    return directory


def _records() -> list[tuple[int, int, bytes]]:
    return [(offset, timestamp, value) for offset, timestamp, value in read_metadata_log(FIXTURE)]


def _write_log(path: Path, records: list[tuple[int, int, bytes]]) -> None:
    """One batch per record, at the record's offset (epoch 1)."""
    path.write_bytes(b"".join(build_batch(offset, [value], timestamps=timestamp,
                                          partition_leader_epoch=1)
                              for offset, timestamp, value in records))


def test_the_fixture_image(metadata_dir):
    shutil.copy(FIXTURE / SEGMENT, metadata_dir)
    image = MetadataImageReplay(metadata_dir).catch_up()
    assert node(image, ("features", "metadataVersion")) == "Optional[4.1-IV1]"
    assert "finalized_kraft.version" not in node(image, ("features",))  # (KAFKA-18979)
    assert node(image, ("producerIds", "nextProducerId")) == "1000"
    assert sorted(node(image, ("topics", "byName"))) == [
        "__remote_log_metadata", "__transaction_state", "lz4", "plain", "txn"]
    plain = node(image, ("topics", "byName", "plain"))
    assert plain[:2] == ["name", "id"] and node(image, ("topics", "byName", "plain", "name")) == "plain"
    topic_id = node(image, ("topics", "byName", "plain", "id"))
    assert tree(image)[("topics", "byId", topic_id, "0")] == \
        node(image, ("topics", "byName", "plain", "0"))
    assert node(image, ("configs", "TOPIC:plain", "remote.storage.enable")) == "true"
    assert node(image, ("configs", "BROKER", "min.insync.replicas")) == "1"
    assert node(image, ("provenance",)).startswith("offset 240, epoch 1, time 2026-11-28T")


def test_paths_that_are_not_there(metadata_dir):
    shutil.copy(FIXTURE / SEGMENT, metadata_dir)
    image = MetadataImageReplay(metadata_dir).catch_up()
    for path in [("nope",), ("topics", "byName", "nope"), ("topics", "byName", "plain", "99"),
                 ("topics", "byName", "plain", "x"), ("cluster", "brokers", "7"),
                 ("configs", "TOPIC:nope"), ("scram", "SCRAM-SHA-1"), ("acls", "byId", "x"),
                 ("features", "zkMigrationState")]:
        with pytest.raises(FileNotFoundError):
            node(image, path)
    with pytest.raises(NotADirectoryError):
        node(image, ("provenance", "x"))


def test_catching_up_reads_only_what_was_appended(metadata_dir):
    """The log written in two steps, the second with a torn batch first: each catch-up
    applies the whole batches on disk, and the image ends as the whole log's."""
    data = (FIXTURE / SEGMENT).read_bytes()
    whole = MetadataImageReplay(FIXTURE).catch_up()
    cut = len(data) // 2
    segment = metadata_dir / SEGMENT
    segment.write_bytes(data[:cut])  # ends inside a batch: a torn one, as a writer leaves it
    replay = MetadataImageReplay(metadata_dir)
    part = tree(replay.catch_up())
    assert part != tree(whole)
    assert part == tree(replay.catch_up())  # nothing new: the same image
    with segment.open("ab") as f:
        f.write(data[cut:])
    assert tree(replay.catch_up()) == tree(whole)


def test_an_aborted_metadata_transaction_changes_nothing(metadata_dir):
    """The bootstrap records' transaction (KIP-868) with its end replaced by an abort: neither
    metadata.version nor the broker config it held is in the image; the committed one of the
    original log puts both there."""
    records = _records()
    names = [read_metadata_record(value).name for _, _, value in records]
    end = names.index("EndTransactionRecord")
    assert names.index("BeginTransactionRecord") < names.index("FeatureLevelRecord") < end
    records[end] = (records[end][0], records[end][1], ABORT)
    _write_log(metadata_dir / SEGMENT, records)
    image = MetadataImageReplay(metadata_dir).catch_up()
    assert node(image, ("features", "metadataVersion")) == "Optional.empty"
    assert "BROKER" not in node(image, ("configs",))
    assert "plain" in node(image, ("topics", "byName"))  # what came after still applies


def test_a_snapshot_and_the_log_after_it(metadata_dir):
    """A snapshot of the first records (kept as a .checkpoint) and a log that starts in the
    middle of them: the image is the whole log's; a log that starts after every snapshot
    is refused, naming both."""
    records = _records()
    whole = _write_and_replay(metadata_dir, records)
    middle = records[len(records) // 2][0]
    for path in metadata_dir.iterdir():
        path.unlink()
    _write_log(metadata_dir / f"{middle:020d}-{1:010d}.checkpoint",
               [r for r in records if r[0] < middle])
    tail = [r for r in records if r[0] >= middle - 3]  # overlapping: those before are skipped
    _write_log(metadata_dir / f"{tail[0][0]:020d}.log", tail)
    assert tree(MetadataImageReplay(metadata_dir).catch_up()) == whole
    (metadata_dir / f"{middle:020d}-{1:010d}.checkpoint").unlink()
    with pytest.raises(KafkaStorageError, match=f"starts at offset {tail[0][0]}"):
        MetadataImageReplay(metadata_dir).catch_up()


def _write_and_replay(directory: Path, records) -> dict:
    _write_log(directory / SEGMENT, records)
    return tree(MetadataImageReplay(directory).catch_up())


def test_a_deleted_segment_replays_from_the_newest_snapshot(metadata_dir):
    records = _records()
    half = len(records) // 2
    first, second = records[:half], records[half:]
    _write_log(metadata_dir / SEGMENT, first)
    replay = MetadataImageReplay(metadata_dir)
    replay.catch_up()
    # the controller snapshots the first half, rolls, and deletes the first segment
    base = second[0][0]
    _write_log(metadata_dir / f"{base:020d}-{1:010d}.checkpoint", first)
    _write_log(metadata_dir / f"{base:020d}.log", second)
    (metadata_dir / SEGMENT).unlink()
    expected = MetadataImageReplay(FIXTURE).catch_up()
    got = replay.catch_up()
    assert {p: t for p, t in tree(got).items() if p != ("provenance",)} == \
        {p: t for p, t in tree(expected).items() if p != ("provenance",)}


def test_partition_changes_merge_as_kafka_merges_them():
    """``PartitionRegistration.merge``: a new leader bumps the leader epoch, any change the
    partition epoch; absent fields stay; empty directories read as MIGRATING."""
    p = Partition.from_record({"replicas": [1, 2], "isr": [1, 2], "removingReplicas": [],
                               "addingReplicas": [], "leader": 1, "leaderEpoch": 0,
                               "partitionEpoch": 0, "directories": []})
    assert p.directories == ["AAAAAAAAAAAAAAAAAAAAAA"] * 2 and p.elr == []
    shrunk = p.merge({"isr": [1]})
    assert (shrunk.isr, shrunk.leader, shrunk.leader_epoch, shrunk.partition_epoch) == \
        ([1], 1, 0, 1)
    moved = shrunk.merge({"leader": 2, "leaderRecoveryState": 1})
    assert (moved.leader, moved.leader_epoch, moved.partition_epoch) == (2, 1, 2)
    assert partition_text(moved) == (
        "PartitionRegistration(replicas=[1, 2], directories=[AAAAAAAAAAAAAAAAAAAAAA, "
        "AAAAAAAAAAAAAAAAAAAAAA], isr=[1], removingReplicas=[], addingReplicas=[], elr=[], "
        "lastKnownElr=[], leader=2, leaderRecoveryState=RECOVERING, leaderEpoch=1, "
        "partitionEpoch=2)")
    assert moved.merge({"leader": -2}).leader_epoch == 1  # NO_LEADER_CHANGE


@pytest.mark.parametrize("ms, text", [
    (0, "1970-01-01T00:00:00Z[UTC]"), (1500, "1970-01-01T00:00:01.5Z[UTC]"),
    (1120, "1970-01-01T00:00:01.12Z[UTC]"), (1764358917122, "2025-11-28T19:41:57.122Z[UTC]"),
    (-1, "1969-12-31T23:59:59.999Z[UTC]")])
def test_times_print_as_javas_iso_zoned_date_time(ms, text):
    assert java_zoned_time(ms) == text


def test_a_log_cut_back_is_replayed_afresh(metadata_dir):
    """A segment cut shorter under the replay (a KRaft follower truncating its uncommitted
    tail to the leader's): the image is replayed from the start, not kept past the cut."""
    data = (FIXTURE / SEGMENT).read_bytes()
    segment = metadata_dir / SEGMENT
    segment.write_bytes(data[:len(data) // 2])
    half = tree(MetadataImageReplay(metadata_dir).catch_up())
    segment.write_bytes(data)
    replay = MetadataImageReplay(metadata_dir)
    assert tree(replay.catch_up()) != half
    segment.write_bytes(data[:len(data) // 2])
    assert tree(replay.catch_up()) == half
