"""CoordinatorReplay: a coordinator partition's state caught up with its log, one new record
at a time, committed records only, replayed afresh after the log was cut back."""

import struct

import pytest

from storage import LogConfig
from storage.clock import now_ms
from storage.coordinator.replay import CoordinatorReplay
from storage.log import Log
from storage.records import build_batch


def commit(group, partition, offset, **kwargs):
    def string(s):
        return struct.pack(">h", len(s)) + s.encode()
    key = struct.pack(">h", 1) + string(group) + string("t") + struct.pack(">i", partition)
    value = None if offset is None else (
        struct.pack(">hq", 1, offset) + string("") + struct.pack(">qq", 1, -1))
    return build_batch(0, [value], [key], **kwargs)


@pytest.fixture
def log(tmp_path):
    (tmp_path / "__consumer_offsets-0").mkdir()
    log = Log(tmp_path / "__consumer_offsets-0", "__consumer_offsets", 0, LogConfig())
    yield log
    log.close()


def offsets(replay, group):
    return {tp: c.offset for tp, c in replay.states.offsets(group).items()}


def test_catch_up_reads_only_what_is_new(log):
    replay = CoordinatorReplay(log)
    log.append_as_leader(commit("g", 0, 5))
    assert replay.catch_up() == 1 and offsets(replay, "g") == {("t", 0): 5}
    assert replay.is_current() and replay.catch_up() == 0
    log.append_as_leader(commit("g", 0, 9))
    log.append_as_leader(commit("g", 1, 3))
    assert not replay.is_current()
    assert replay.catch_up() == 2 and offsets(replay, "g") == {("t", 0): 9, ("t", 1): 3}
    log.append_as_leader(commit("g", 0, None))
    assert replay.catch_up() == 1 and offsets(replay, "g") == {("t", 1): 3}


def test_only_committed_transactional_commits_count(log):
    from storage.records.control import ControlRecordType, build_control_batch
    replay = CoordinatorReplay(log)
    log.append_as_leader(commit("g", 0, 7, producer_id=3, producer_epoch=0, base_sequence=0,
                                is_transactional=True))
    replay.catch_up()
    assert offsets(replay, "g") == {}  # not yet committed: past the last stable offset
    log.append_as_leader(build_control_batch(0, 3, 0, ControlRecordType.COMMIT, timestamp_ms=now_ms()))
    replay.catch_up()
    assert offsets(replay, "g") == {("t", 0): 7}
    log.append_as_leader(commit("g", 0, 8, producer_id=3, producer_epoch=0, base_sequence=1,
                                is_transactional=True))
    log.append_as_leader(build_control_batch(0, 3, 0, ControlRecordType.ABORT, timestamp_ms=now_ms()))
    replay.catch_up()
    assert offsets(replay, "g") == {("t", 0): 7} and replay.is_current()


def test_a_log_cut_back_is_replayed_from_its_start(log):
    replay = CoordinatorReplay(log)
    log.append_as_leader(commit("g", 0, 1))
    log.append_as_leader(commit("g", 0, 2))
    replay.catch_up()
    log.truncate_to(1)
    replay.catch_up()
    assert offsets(replay, "g") == {("t", 0): 1}


def test_other_topics_are_refused(tmp_path):
    (tmp_path / "t-0").mkdir()
    plain = Log(tmp_path / "t-0", "t", 0, LogConfig())
    with pytest.raises(ValueError):
        CoordinatorReplay(plain)
    plain.close()
