"""Checkpoint files (§1.4): the text format, the log-dir offset checkpoints, the leader-epoch
cache, and how the recovery point bounds recovery after an unclean shutdown (§8.4)."""

import pytest

from helpers.paths import KAFKA_WRITTEN
from helpers.waits import DEADLINE_S, joined
from storage import LogManager
from storage.checkpoint import (parse_offsets, read_epochs, read_offsets, write_epochs,
                                write_offsets)
from storage.errors import CorruptCheckpointError
from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.log_files import RECOVERY_POINT_CHECKPOINT
from storage.records import build_batch
from storage.segment import LogSegment

FIXTURES = KAFKA_WRITTEN


def test_offset_checkpoint_text_is_kafkas(tmp_path):
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    write_offsets(path, {"orders-0": 42, "my-topic-12": 7})
    assert path.read_text() == "0\n2\nmy-topic 12 7\norders 0 42\n"
    assert read_offsets(path) == {"orders-0": 42, "my-topic-12": 7}
    assert not (tmp_path / (RECOVERY_POINT_CHECKPOINT + ".tmp")).exists()


@pytest.mark.needs_fixture("kafka-written/plain-0")
def test_leader_epoch_checkpoint_round_trips_kafkas_file(tmp_path):
    source = FIXTURES / "plain-0" / "leader-epoch-checkpoint"
    entries = read_epochs(source)
    assert entries == [(0, 0), (1, 2503), (3, 4208)]
    write_epochs(tmp_path / "leader-epoch-checkpoint", entries)
    assert (tmp_path / "leader-epoch-checkpoint").read_bytes() == source.read_bytes()


@pytest.mark.parametrize("text", ["1\n0\n", "0\n2\nt 0 1\n", "0\n1\nt x 1\n", "0\n1\nt 0\n"])
def test_malformed_checkpoints_raise(tmp_path, text):
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    path.write_text(text)
    with pytest.raises(CorruptCheckpointError):
        read_offsets(path)


@pytest.mark.parametrize("text, says", [
    ("1\n0\n", "unsupported version '1'"),
    ("0\n2\nt 0 1\n", "expected 2 entries, found 1"),
    ("0\n1\nt 0 1\nt 1 2\n", "expected 1 entries, found 2"),
    ("0\n1\nt 0\n", "malformed line (not enough values to unpack (expected 3, got 2))"),
])
def test_malformed_checkpoints_say_which_file_and_why(tmp_path, text, says):
    with pytest.raises(CorruptCheckpointError) as e:
        parse_offsets(text, "the-checkpoint")
    assert str(e.value) == f"the-checkpoint: {says}"


def test_parse_offsets_reads_a_checkpoints_text():
    """A checkpoint read from elsewhere (an object store's copy) parses as a local file."""
    assert parse_offsets("0\n2\nmy-topic 12 7\norders 0 42\n", "x") == \
        {"my-topic-12": 7, "orders-0": 42}
    assert parse_offsets("", "x") == {}


def test_a_checkpoint_write_replaces_a_temp_file_a_crash_left(tmp_path):
    """Written as ``<name>.tmp`` then renamed over the checkpoint, as Kafka's
    ``CheckpointFile`` does: a ``.tmp`` left by a crash mid-write is written over and gone."""
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    (tmp_path / (RECOVERY_POINT_CHECKPOINT + ".tmp")).write_text("0\n1\nhalf")
    write_offsets(path, {"t-0": 5})
    assert sorted(p.name for p in tmp_path.iterdir()) == [RECOVERY_POINT_CHECKPOINT]
    assert read_offsets(path) == {"t-0": 5}


def test_a_failed_checkpoint_write_leaves_the_old_file(tmp_path, monkeypatch):
    from storage import disk_calls

    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    write_offsets(path, {"t-0": 5})

    def no_rename(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(disk_calls, "replace", no_rename)  # (the engine's renames)
    with pytest.raises(OSError, match="No space left"):
        write_offsets(path, {"t-0": 9})
    assert sorted(p.name for p in tmp_path.iterdir()) == [RECOVERY_POINT_CHECKPOINT]
    assert read_offsets(path) == {"t-0": 5}


def test_empty_or_missing_checkpoint_has_no_entries(tmp_path):
    assert read_offsets(tmp_path / "absent") == {}
    (tmp_path / "empty").write_text("")
    assert read_offsets(tmp_path / "empty") == {}


def test_leader_epoch_cache_rules(tmp_path):
    cache = LeaderEpochFileCache(tmp_path, writable=True)
    cache.assign(0, 0)
    cache.assign(0, 5)  # same epoch: ignored
    cache.assign(2, 10)
    cache.assign(1, 12)  # older epoch: ignored
    assert cache.entries == [(0, 0), (2, 10)]
    cache.truncate_from_start(12)
    assert cache.entries == [(2, 12)]
    cache.assign(3, 20)
    cache.truncate_from_end(20)
    assert read_epochs(tmp_path / "leader-epoch-checkpoint") == [(2, 12)]


def epochs_after(tmp_path, entries, change):
    """The cache's entries after ``change(cache)`` from ``entries``, with whether the
    checkpoint file was written again (a new inode: checkpoints are replaced, never edited)."""
    write_epochs(tmp_path / "leader-epoch-checkpoint", entries)
    before = (tmp_path / "leader-epoch-checkpoint").stat().st_ino
    cache = LeaderEpochFileCache(tmp_path, writable=True)
    change(cache)
    after = tmp_path / "leader-epoch-checkpoint"
    assert read_epochs(after) == cache.entries
    return cache.entries, after.stat().st_ino != before


@pytest.mark.parametrize("entries, epoch, start, expected", [
    ([(1, 5)], 2, 5, [(2, 5)]),  # at the start offset of the latest: replaces it
    ([(0, 0), (1, 5), (2, 9)], 3, 5, [(0, 0), (3, 5)]),  # drops every entry from there on
    ([(0, 0), (1, 5)], 2, 6, [(0, 0), (1, 5), (2, 6)]),
    ([(1, 5)], 1, 9, [(1, 5)]),  # the same epoch again: ignored
    ([(1, 5)], -1, 9, [(1, 5)]),  # no epoch (a record without one): ignored
])
def test_assign_drops_the_entries_it_conflicts_with(tmp_path, entries, epoch, start, expected):
    """``LeaderEpochFileCache.assign`` (its ``removeConflictingEntries``): an entry whose start
    offset is at or past the new epoch's start goes; LeaderEpochFileCacheTest's "should not
    overwrite offset for a leader epoch once it has been assigned" and its boundary."""
    assert epochs_after(tmp_path, entries, lambda c: c.assign(epoch, start))[0] == expected


EPOCHS = [(0, 0), (1, 5), (2, 10)]


@pytest.mark.parametrize("start, expected, written", [
    (0, EPOCHS, False),  # already starts exactly there: nothing to do
    (5, [(1, 5), (2, 10)], True),  # on an epoch's start: the ones before it go
    (7, [(1, 7), (2, 10)], True),  # between two: the earlier one now starts there
    (10, [(2, 10)], True),
    (12, [(2, 12)], True),  # past the last: the latest epoch only, from there
])
def test_truncate_from_start(tmp_path, start, expected, written):
    """``truncateFromStart`` (LeaderEpochFileCacheTest's "should not clear anything if offset
    to first offset", "should clear earliest on epoch boundary", "should update offset between
    epoch boundaries on clear earliest", "should retain latest epoch on clear all earliest and
    update its offset"); a truncation that changes nothing leaves the file as it is."""
    assert epochs_after(tmp_path, EPOCHS, lambda c: c.truncate_from_start(start)) == \
        (expected, written)


def test_truncate_from_start_before_the_first_epoch_changes_nothing(tmp_path):
    assert epochs_after(tmp_path, [(3, 5), (4, 8)], lambda c: c.truncate_from_start(4)) == \
        ([(3, 5), (4, 8)], False)


@pytest.mark.parametrize("end, expected", [(10, [(0, 0), (1, 5)]), (11, EPOCHS), (5, [(0, 0)]),
                                           (0, [])])
def test_truncate_from_end_drops_the_epochs_starting_there_or_after(tmp_path, end, expected):
    """``truncateFromEnd`` ("should drop entries on epoch boundary when removing latest
    entries"); the file is written only when an entry went."""
    assert epochs_after(tmp_path, EPOCHS, lambda c: c.truncate_from_end(end)) == \
        (expected, expected != EPOCHS)


def test_a_malformed_checkpoint_is_logged_and_rebuilt(tmp_path, caplog):
    (tmp_path / "leader-epoch-checkpoint").write_text("0\n2\n0 0\n")
    cache = LeaderEpochFileCache(tmp_path, writable=False)
    assert cache.entries == [] and cache.latest_epoch == -1
    [record] = caplog.records
    assert record.levelname == "WARNING" and record.getMessage().endswith(
        "; rebuilding it from the log") and "leader-epoch-checkpoint" in record.getMessage()


def test_a_read_only_cache_never_writes(tmp_path):
    cache = LeaderEpochFileCache(tmp_path, writable=False)
    cache.assign(1, 0)
    assert cache.entries == [(1, 0)] and not (tmp_path / "leader-epoch-checkpoint").exists()


def test_appends_stamp_and_record_leader_epoch_zero(tmp_path):
    mgr = LogManager(tmp_path)
    log = mgr.create("t-0")
    log.append([b"a"])
    log.append([b"b"])
    assert read_epochs(tmp_path / "t-0" / "leader-epoch-checkpoint") == [(0, 0)]
    position, batch = log.segments.active.find_batch(1)
    assert batch.partition_leader_epoch == 0
    mgr.close()


def test_clean_close_checkpoints_recovery_points(tmp_path):
    mgr = LogManager(tmp_path)
    mgr.create("t-0").append([b"x"] * 5)
    mgr.create("u-3")
    mgr.close()
    assert read_offsets(tmp_path / RECOVERY_POINT_CHECKPOINT) == {"t-0": 5, "u-3": 0}


def _segments_of_three(tmp_path):
    """A closed log t-0 with segments at 0, 3, 6 (3 batches of ~1 KiB each per segment)."""
    (tmp_path / "t.topic.properties").write_text("segment.bytes=3300\n")
    mgr = LogManager(tmp_path)
    log = mgr.create("t-0")
    for offset in range(8):
        log.append_batches(build_batch(offset, [b"v" * 1024], None, 1_700_000_000_000))
    mgr.close()


def recovered_bases(monkeypatch, **manager_args):
    recovered = []
    original = LogSegment.recover

    def spy(segment, *args, **kwargs):
        recovered.append(segment.base_offset)
        return original(segment, *args, **kwargs)

    monkeypatch.setattr(LogSegment, "recover", spy)
    return recovered


@pytest.mark.parametrize("recovery_point, expected", [(0, [0, 3, 6]), (4, [3, 6]), (8, [6])])
def test_unclean_start_recovers_from_the_segment_holding_the_recovery_point(
        tmp_path, monkeypatch, recovery_point, expected):
    _segments_of_three(tmp_path)
    (tmp_path / ".kafka_cleanshutdown").unlink()
    write_offsets(tmp_path / RECOVERY_POINT_CHECKPOINT, {"t-0": recovery_point})
    recovered = recovered_bases(monkeypatch)
    mgr = LogManager(tmp_path)
    assert recovered == expected
    assert mgr.get("t-0").log_end_offset == 8
    mgr.close()


def test_clean_start_recovers_nothing_and_force_recovery_everything(tmp_path, monkeypatch):
    _segments_of_three(tmp_path)
    recovered = recovered_bases(monkeypatch)
    LogManager(tmp_path).close()
    assert recovered == []
    LogManager(tmp_path, force_recovery=True).close()
    assert recovered == [0, 3, 6]


def test_one_checkpoint_written_by_two_threads_at_once(tmp_path):
    """The mount's retention job and its periodic checkpoint job both write
    log-start-offset-checkpoint from worker threads: writes of one file take turns (as Kafka's
    CheckpointFile.write is synchronized), never sharing its .tmp."""
    import threading

    path = tmp_path / "log-start-offset-checkpoint"
    start = threading.Barrier(4)
    errors = []

    def writer(n):
        start.wait(DEADLINE_S)  # (BrokenBarrierError if the others never come)
        try:
            for i in range(25):
                write_offsets(path, {f"t-{n}": i, "other-0": 7})
        except OSError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,), name=f"writer {n}") for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        joined(t)
    assert errors == []
    assert read_offsets(path)["other-0"] == 7
    assert not (tmp_path / "log-start-offset-checkpoint.tmp").exists()
