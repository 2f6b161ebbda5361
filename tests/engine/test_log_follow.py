"""A read-only log following another writer's files (``Log.catch_up``), without a broker: the
writer here is the engine itself, appending, rolling, deleting and being cut back."""

from __future__ import annotations

import os
import time

import pytest

from storage import LogConfig, LogManager, log_segments
from storage.clock import FixedClock, SystemClock
from storage.dir_watch import RACY_NS, RETIRED_S, DirectoryWatch
from storage.log import Log
from storage.records import build_batch
from storage.segment import LogSegment


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


# -- LogSegments' following, one rule at a time (issue 41) ----------------------------------

HOUR = 3_600_000


def rolled_writer(directory, count=40, **config):
    """A writable log of ``count`` one-record batches in segments of 400 bytes."""
    directory.mkdir()
    writer = Log(directory, "t", 0, LogConfig(segment_bytes=400, file_delete_delay_ms=0, **config))
    for i in range(count):
        writer.append([b"v%d" % i])
    writer.flush()
    return writer


@pytest.fixture
def monotonic(monkeypatch):
    """The system clock's monotonic time (what retires a follower's segments), set by the
    test: [now in seconds]."""
    now = [1000.0]
    monkeypatch.setattr(SystemClock, "monotonic", lambda self: now[0])
    return now


def test_segments_a_writer_deleted_stay_open_until_no_reader_can_be_in_them(tmp_path, monotonic):
    """Retention on the writer's side deletes segments: the reader drops them from its view
    at once, but closes them only ``RETIRED_S`` later (a reader that took the view just before
    reads on); the segments still in the view stay open."""
    writer = rolled_writer(tmp_path / "t-0")
    reader = LogManager(tmp_path, read_only=True)
    try:
        segments = reader.catch_up("t-0").segments
        before = segments.all()
        writer.config = LogConfig(segment_bytes=400, retention_bytes=800, file_delete_delay_ms=0)
        assert writer.delete_old_segments() > 0
        writer.delete_due_files(now=2**62)
        assert segments.follow_files(os.listdir(tmp_path / "t-0"))
        live = segments.all()
        gone = [s for s in before if s not in live]
        assert gone and live[0].base_offset == writer.log_start_offset
        assert all(a is b for a, b in zip(live, before[len(gone):]))  # kept, not opened anew
        assert segments.floor(live[0].base_offset - 1) is None
        assert segments.floor(live[0].base_offset) is live[0]
        closed = lambda group: [s._file.closed for s in group]  # noqa: E731
        segments.close_retired()
        monotonic[0] += RETIRED_S - 0.001
        segments.close_retired()
        assert not any(closed(gone) + closed(live))
        monotonic[0] += 0.001  # the deadline itself: due
        segments.close_retired()
        assert all(closed(gone)) and not any(closed(live))
        extra = LogSegment(tmp_path / "t-0", live[0].base_offset, LogConfig(), False)
        segments.retire([extra])
        segments.close_retired(everything=True)  # as at close: whatever the time
        assert closed([extra]) == [True] and not any(closed(live))
    finally:
        reader.close()
        writer.close()


def test_a_new_active_segment_is_taken_in_up_to_its_last_whole_batch(tmp_path):
    """The writer rolled and its new active segment ends in a batch half written (a broker
    mid-append): the reader takes the segment in without the torn batch, which comes with the
    next look once whole."""
    writer = rolled_writer(tmp_path / "t-0", count=5)
    reader = LogManager(tmp_path, read_only=True)
    try:
        segments = reader.catch_up("t-0").segments
        writer.roll()
        writer.append([b"w0"])
        writer.append([b"w1"])
        whole = writer.segments.active.size
        torn = build_batch(7, [b"w2"], None, 1_700_000_000_000)
        with open(writer.segments.active.log_path, "ab") as f:
            f.write(torn[:len(torn) // 2])
        assert segments.follow_files(os.listdir(tmp_path / "t-0"))
        assert segments.active.base_offset == 5 and segments.active.size == whole
        with open(writer.segments.active.log_path, "ab") as f:
            f.write(torn[len(torn) // 2:])
        assert segments.follow_active() == 8 and segments.active.size == whole + len(torn)
    finally:
        reader.close()
        writer.close()


def test_follow_active_takes_in_appends_and_notices_a_tail_cut_or_written_over(tmp_path, caplog):
    """``follow_active``: nothing new is nothing (no new view, no warning); appended batches
    are taken in; an active segment cut shorter than what was read, or whose last batch read
    was written over at the same size, is taken in anew (the version moves) with a warning."""
    writer = rolled_writer(tmp_path / "t-0", count=3)
    # the reader's clock an hour past the directory's mtime: its listing is not racy, so
    # unchanged names are not listed again (what follow_active must not rely on)
    reader = LogManager(tmp_path, read_only=True, clock=FixedClock(int(time.time() * 1000) + HOUR))
    try:
        log = reader.catch_up("t-0")
        segments = log.segments
        version = segments.version
        assert segments.follow_files() is False  # the directory did not change
        assert segments.follow_active() is None and segments.version == version
        writer.append([b"v3"])
        assert segments.follow_active() == 4 and segments.version == version
        assert not caplog.records
        # written over at the same size: the last batch read is another one now
        read = segments.active
        writer.truncate_to(3)
        writer.append([b"x3"])
        assert writer.segments.active.size == read.size
        assert segments.follow_active() is None and segments.version > version
        assert caplog.messages == [f"t-0: {read.log_path.name} its last batch read was written "
                                   f"over under the reader"]
        assert segments.active is not read and segments.active.size == read.size
        position, batch = segments.active.find_batch(3)
        assert [r.value for r in segments.active.read_records(position, batch)] == [b"x3"]
        # cut shorter than what was read
        version, read = segments.version, segments.active
        writer.truncate_to(2)
        assert segments.follow_active() is None and segments.version > version
        assert caplog.messages[-1] == (f"t-0: {read.log_path.name} shrank from {read.size} to "
                                       f"{writer.segments.active.size} bytes under the reader")
        assert segments.active.size == writer.segments.active.size
    finally:
        reader.close()
        writer.close()


def test_a_segment_rolled_away_from_is_read_to_its_end(tmp_path):
    """The active segment the reader had read part of was appended to, then rolled: the
    reader takes the rest of it in with the new active segment (opened read-only)."""
    writer = rolled_writer(tmp_path / "t-0", count=12)
    reader = LogManager(tmp_path, read_only=True)
    try:
        segments = reader.catch_up("t-0").segments
        read = segments.active
        assert len(segments) > 1
        writer.append([b"more"])
        writer.roll()
        writer.append([b"next"])
        assert segments.follow_files(os.listdir(tmp_path / "t-0"))
        assert segments.all()[-2] is read and read.size == read.file_size()
        assert not segments.active.writable
    finally:
        reader.close()
        writer.close()


def test_listings_that_change_nothing(tmp_path):
    """No ``.log`` listed (a listing mid-roll) or a cleaner's swap in progress: the view
    stays; a view with no segment yet takes the first ones in."""
    writer = rolled_writer(tmp_path / "t-0", count=12)
    reader = LogManager(tmp_path, read_only=True)
    try:
        segments = reader.catch_up("t-0").segments
        view, bases = segments.view, segments.view[0]
        names = os.listdir(tmp_path / "t-0")
        assert segments.follow_files([]) is False
        swap = [n for n in names if n.endswith(".log")][0] + ".swap"
        assert segments.follow_files(names + [swap]) is False
        assert segments.view is view
    finally:
        reader.close()
        writer.close()
    empty = log_segments.LogSegments(tmp_path / "t-0", LogConfig(), FixedClock(0), [])
    assert empty.last_modified_ms() == 0 and empty.follow_active() is None
    assert empty.follow_files(os.listdir(tmp_path / "t-0"))
    assert [s.base_offset for s in empty.all()] == bases and len(bases) > 1
    for segment in empty.all():
        segment.close()


def test_a_directory_changed_within_a_second_of_now_is_listed_again(tmp_path):
    """Two changes within one mtime tick look alike, so a directory whose mtime is at most
    ``RACY_NS`` before now is listed at every look; past that, only once it changed."""
    (tmp_path / "a").touch()
    mtime_ms = 1_700_000_000_000
    os.utime(tmp_path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    clock = FixedClock(mtime_ms + RACY_NS // 1_000_000)  # exactly RACY_NS after
    watch = DirectoryWatch(tmp_path, clock)
    assert watch.names() == ["a"] and watch.names() == ["a"]
    clock.ms += 1
    assert watch.names() is None
    watch.again()
    assert watch.names() == ["a"] and watch.names() is None
