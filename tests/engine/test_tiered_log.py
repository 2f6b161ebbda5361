"""Kafka's tiered storage read directly (``storage.remote.tiered``): segments Kafka wrote, laid
out as LocalTieredStorage lays out remote segments, joined with the rest of the partition as
a broker's local log keeps it, read as the original partition reads, at both isolation levels;
a segment in both tiers is read once, a gap between them is an error naming the offsets (or
stepped over without failOnDataLoss), and a layout that is not LocalTieredStorage's is named."""

import pytest

from helpers.paths import KAFKA_WRITTEN
from helpers.tiered import bases_of, kafka_id, tier
from storage import LogManager
from storage.isolation import IsolationLevel
from storage.remote.object_store import ObjectStore
from storage.remote.tiered import (
    TIERED_ROOT,
    OffsetGapError,
    TieredLogDirectory,
    UnifiedLog,
    UnsupportedRemoteLayoutError,
)

needs_fixtures = pytest.mark.needs_fixture("kafka-written")
def rows(log, isolation=IsolationLevel.READ_UNCOMMITTED, start=0):
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
            for batch in log.reader.record_lists(start, isolation=isolation) for r in batch]


def unified(root, local_dir, name, **kwargs):
    remote = TieredLogDirectory(ObjectStore.from_uri(root.as_uri()))
    local = LogManager(local_dir, read_only=True)
    return UnifiedLog(remote.get(name), local.get(name), **kwargs), (remote, local)


@needs_fixtures
@pytest.mark.parametrize("name", ["txn-0", "plain-0", "codecs-0"])
@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_remote_below_local_reads_as_the_whole_partition(tmp_path, name, isolation):
    bases = bases_of(KAFKA_WRITTEN / name)
    assert len(bases) >= 4
    split = len(bases) // 2  # one segment in both tiers: read once
    root, local_dir = tier(tmp_path, name, bases[:split + 1], bases[split:])
    log, opened = unified(root, local_dir, name)
    original = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        want = original.get(name)
        assert (log.log_start_offset, log.log_end_offset) == (0, want.log_end_offset)
        assert log.local.log_start_offset == bases[split] > 0
        assert rows(log, isolation) == rows(want, isolation)
        assert [t.to_pylist() for t in log.reader.read_columns(0, None, isolation)] == \
            [t.to_pylist() for t in want.reader.read_columns(0, None, isolation)]
        middle = want.log_end_offset // 3
        assert rows(log, isolation, middle) == rows(want, isolation, middle)
    finally:
        original.close()
        for manager in opened:
            manager.close()


@needs_fixtures
def test_the_remote_tier_alone_is_listed_and_read(tmp_path):
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, _ = tier(tmp_path, "plain-0", bases[:3], [])
    remote = TieredLogDirectory(ObjectStore.from_uri(root.as_uri()))
    original = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        assert remote.partition_names() == ["plain-0"]
        log = remote.get("plain-0")
        assert log.log_end_offset == bases[3]
        assert rows(log) == [r for r in rows(original.get("plain-0")) if r[0] < bases[3]]
    finally:
        remote.close()
        original.close()


@needs_fixtures
def test_a_gap_between_the_tiers_names_the_offsets_or_is_skipped(tmp_path):
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, local_dir = tier(tmp_path, "plain-0", bases[:2], bases[3:])
    with pytest.raises(OffsetGapError, match=f"plain-0: offsets {bases[2]}..{bases[3] - 1} "):
        unified(root, local_dir, "plain-0")
    log, opened = unified(root, local_dir, "plain-0", fail_on_data_loss=False)
    original = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        assert rows(log) == [r for r in rows(original.get("plain-0"))
                             if not bases[2] <= r[0] < bases[3]]
    finally:
        original.close()
        for manager in opened:
            manager.close()


def test_a_layout_that_is_not_local_tiered_storage_is_named(tmp_path):
    partition = tmp_path / TIERED_ROOT / f"t-0-{kafka_id()}"
    partition.mkdir(parents=True)
    (partition / "segment-000001.chunk").write_bytes(b"\x00" * 64)
    store = ObjectStore.from_uri(tmp_path.as_uri())
    with pytest.raises(UnsupportedRemoteLayoutError, match="segment-000001.chunk.*unsupported"):
        TieredLogDirectory(store).get("t-0")
    (tmp_path / TIERED_ROOT / "not-a-partition").mkdir()
    with pytest.raises(UnsupportedRemoteLayoutError, match="not-a-partition"):
        TieredLogDirectory(store)


@needs_fixtures
def test_the_metadata_live_set_leaves_out_segments_being_copied_or_deleted(tmp_path):
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, _ = tier(tmp_path, "plain-0", bases[:3], [])
    (directory,) = (root / TIERED_ROOT).iterdir()
    stems = sorted({p.name.split(".")[0] for p in directory.iterdir()})
    live = {directory.name: {stems[0], stems[2]}}  # the middle one: being deleted
    store = ObjectStore.from_uri(root.as_uri())
    by_metadata = TieredLogDirectory(store, live=live)
    assert [s.base_offset for s in by_metadata.get("plain-0").segments.all()] == \
        [bases[0], bases[2]]
    assert by_metadata.notices == []
    by_listing = TieredLogDirectory(ObjectStore.from_uri(root.as_uri()))
    assert [s.base_offset for s in by_listing.get("plain-0").segments.all()] == bases[:3]
    assert "listing" in by_listing.notices[0]
    by_metadata.close()
    by_listing.close()


@needs_fixtures
def test_the_broker_log_start_inside_the_remote_tier(tmp_path):
    """The broker's checkpointed log start (DeleteRecords, remote retention) above the first
    remote segment: the partition starts there, from the remote segment it is in; at or past
    the local log's first segment, no remote segment is read."""
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, local_dir = tier(tmp_path, "plain-0", bases[:3], bases[3:])
    original = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        want = rows(original.get("plain-0"))
        for start in (bases[1] + 3, bases[1], bases[3] + 2):
            log, opened = unified(root, local_dir, "plain-0", log_start_offset=start)
            try:
                assert log.log_start_offset == start
                assert rows(log, start=log.log_start_offset) == [r for r in want if r[0] >= start]
                first = log.segments.all()[0].base_offset
                assert first == (bases[1] if start < bases[3] else bases[3]), start
            finally:
                for manager in opened:
                    manager.close()
        log, opened = unified(root, local_dir, "plain-0", log_start_offset=bases[1] + 3)
        try:  # the checkpoint moving on (catch_up)
            assert log.catch_up(bases[2] + 1).log_start_offset == bases[2] + 1
            assert log.segments.all()[0].base_offset == bases[2]
        finally:
            for manager in opened:
                manager.close()
    finally:
        original.close()


@needs_fixtures
def test_a_uri_of_the_tiered_root_opens_its_remote_tier(tmp_path):
    """``open_object_store_directory``: LocalTieredStorage's root is its remote tier (Spark's
    ``path``, ``kfs mount``), a copied log directory stays one."""
    from storage.remote.remote_log import RemoteLogDirectory
    from storage.remote.tiered import open_object_store_directory

    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, _ = tier(tmp_path, "plain-0", bases[:3], [])
    tiered = open_object_store_directory(ObjectStore.from_uri(root.as_uri()))
    copied = open_object_store_directory(ObjectStore.from_uri(KAFKA_WRITTEN.as_uri()))
    try:
        assert isinstance(tiered, TieredLogDirectory) and tiered.notices
        assert tiered.partition_names() == ["plain-0"]
        assert tiered.catch_up("plain-0").log_end_offset == bases[3]
        assert isinstance(copied, RemoteLogDirectory)
        assert "plain-0" in copied.partition_names()
    finally:
        tiered.close()
        copied.close()
