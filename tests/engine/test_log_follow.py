"""A read-only log following another writer's files (``Log.catch_up``), without a broker: the
writer here is the engine itself, appending, rolling, deleting and being cut back."""

from __future__ import annotations

import os

from storage import LogConfig, LogManager
from storage.clock import FixedClock
from storage.dir_watch import DirectoryWatch
from storage.log import Log


def values(log) -> list[bytes]:
    return [r.value for batch in log.reader.record_lists(log.log_start_offset) for r in batch]


def test_a_reader_follows_appends_rolls_retention_and_a_cut_back_log(tmp_path):
    (tmp_path / "t-0").mkdir()
    writer = Log(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=400, file_delete_delay_ms=0))
    writer.append([b"v%d" % i for i in range(3)])
    writer.flush()
    reader = LogManager(tmp_path, read_only=True)
    try:
        log = reader.catch_up("t-0")
        assert values(log) == [b"v0", b"v1", b"v2"]
        assert not log.catch_up()  # nothing new: nothing changes
        for i in range(3, 40):
            writer.append([b"v%d" % i])
        log = reader.catch_up("t-0")
        assert log.log_end_offset == 40 and values(log) == [b"v%d" % i for i in range(40)]
        assert len(log.segments) == len(writer.segments) > 1
        writer.config = LogConfig(segment_bytes=400, retention_bytes=800, file_delete_delay_ms=0)
        assert writer.delete_old_segments() > 0
        writer.delete_due_files(now=2**62)
        log = reader.catch_up("t-0")
        assert log.log_start_offset == writer.log_start_offset > 0
        assert log.reader.read(0) is None and log.reader.read(39).value == b"v39"
        # the writer's last batch cut off (a broker truncating its log): the reader follows
        active = writer.segments.active
        cut = active.size - 80
        os.truncate(active.log_path, cut)
        log = reader.catch_up("t-0")
        assert log.log_end_offset < 40
        assert values(log)[-1] == b"v%d" % (log.log_end_offset - 1)
    finally:
        reader.close()
        writer.close()


def test_a_log_cut_back_and_written_past_its_old_size_between_two_looks(tmp_path):
    """A broker's follower truncates to its leader (``LocalLog.truncateTo``) and fetches other
    records before the reader looks again: the .log is longer than what was read, but the
    batches read are gone. The reader takes the new ones in, at the offsets they now have."""
    (tmp_path / "t-0").mkdir()
    writer = Log(tmp_path / "t-0", "t", 0, LogConfig())
    for i in range(10):
        writer.append([b"a-%d" % i])
    reader = LogManager(tmp_path, read_only=True)
    try:
        log = reader.catch_up("t-0")
        size = log.segments.active.size
        assert values(log) == [b"a-%d" % i for i in range(10)]
        writer.truncate_to(3)
        for i in range(3, 12):
            writer.append([b"bb-%d" % i])
        assert writer.segments.active.size > size  # nothing shorter to see
        assert reader.catch_up("t-0") is log and log.log_end_offset == 12
        assert values(log) == [b"a-0", b"a-1", b"a-2"] + [b"bb-%d" % i for i in range(3, 12)]
        assert log.reader.read(5).value == b"bb-5"
        writer.append([b"c-12"])  # and goes on following
        assert reader.catch_up("t-0").log_end_offset == 13
    finally:
        reader.close()
        writer.close()


def test_a_swap_in_progress_is_taken_in_once_complete(tmp_path):
    (tmp_path / "t-0").mkdir()
    writer = Log(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=400))
    for i in range(20):
        writer.append([b"v%d" % i])
    writer.flush()
    reader = LogManager(tmp_path, read_only=True)
    try:
        log = reader.catch_up("t-0")
        before = values(log)
        first = log.segments.all()[0].log_path
        swap = first.with_name(first.name + ".swap")
        swap.write_bytes(first.read_bytes())  # a cleaner mid-swap: the view stays as it was
        os.rename(first, first.with_name(first.name + ".deleted"))
        assert not reader.get("t-0").catch_up() and values(log) == before
        os.rename(swap, first)  # the swap done: the same records, a new file
        log = reader.catch_up("t-0")
        assert values(log) == before
        assert log.segments.all()[0].is_file_on_disk()
    finally:
        reader.close()
        writer.close()


def test_a_directory_watch_takes_now_from_its_clock(tmp_path):
    (tmp_path / "a").touch()
    mtime_ms = os.stat(tmp_path).st_mtime_ns // 1_000_000
    racy = DirectoryWatch(tmp_path, FixedClock(mtime_ms))  # now is the mtime: listed every time
    settled = DirectoryWatch(tmp_path, FixedClock(mtime_ms + 2_000))  # 2 s after it
    assert racy.names() == settled.names() == ["a"]
    assert racy.names() == ["a"] and settled.names() is None
