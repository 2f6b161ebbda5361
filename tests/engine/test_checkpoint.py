"""Checkpoint files (§1.4): the text format, the log-dir offset checkpoints, the leader-epoch
cache, and how the recovery point bounds recovery after an unclean shutdown (§8.4)."""

import pytest

from helpers.paths import KAFKA_WRITTEN
from helpers.waits import DEADLINE_S, joined
from storage import LogManager
from storage.checkpoint import read_epochs, read_offsets, write_epochs, write_offsets
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
