"""The cleaner's choice of what to clean and its record of it (``storage/log_cleaner.py``), after
Kafka's ``LogCleanerManagerTest`` and ``LogCleanerTest``: the cleanable range (the checkpoint
reset to the log start when it is invalid, ``min.compaction.lag.ms`` at its bound), how overdue a
log is by ``max.compaction.lag.ms``, which log is the filthiest, the checkpoint file, the
cleaner's buffers, what a pass that fails or is aborted leaves, and the summary a pass logs in
Kafka's words."""

import logging

import pytest

from storage import LogManager
from storage.cleaner import Cleaner, CleanerStats
from storage.clock import FixedClock
from storage.errors import CorruptRecordError, LogCleaningAbortedError
from storage.log_cleaner import (
    CleanResult,
    LogCleaner,
    LogCleanerManager,
    LogToClean,
    cleanable_offsets,
    for_log_manager,
    max_compaction_delay,
    stats_message,
)
from storage.log_files import CLEANER_OFFSET_CHECKPOINT

NOW = 1_800_000_000_000
HOUR = 3_600_000
ANY_TIME = "message.timestamp.after.max.ms=9223372036854775807\n"


@pytest.fixture
def backing(tmp_path):
    path = tmp_path / "backing"
    path.mkdir()
    return path


def open_dir(backing, topic_props: str = "", server_props: str = "", **kwargs) -> LogManager:
    """A LogManager of ``backing`` whose topic ``c`` compacts with ``topic_props`` (records
    may be stamped past the wall clock: the tests' time is ``NOW``)."""
    (backing / "c.topic.properties").write_text(
        f"cleanup.policy=compact\n{ANY_TIME}" + topic_props)
    if server_props:
        (backing / "server.properties").write_text(server_props)
    return LogManager(backing, **kwargs)


def segments(log, stamps: list[int], keys: int = 5) -> None:
    """A segment per timestamp (every key written at it), then an active segment with one
    record at the last timestamp."""
    for stamp in stamps:
        log.append([b"v%d" % k for k in range(keys)], [b"k%d" % k for k in range(keys)],
                   timestamps=[stamp] * keys)
        log.roll()
    log.append([b"active"], [b"k0"], timestamps=[stamps[-1]])


def dirty_log(backing, stamps: list[int], topic_props: str = ""):
    """(the LogManager, its log ``c-0`` of :func:`segments` at ``stamps``, a
    LogCleanerManager of that one log)."""
    mgr = open_dir(backing, topic_props)
    log = mgr.create("c-0")
    segments(log, stamps)
    return mgr, log, LogCleanerManager(backing, lambda: {"c-0": log})


def checkpoint(backing) -> str:
    return (backing / CLEANER_OFFSET_CHECKPOINT).read_text()


# -- cleanableOffsets ---------------------------------------------------------------------------


def test_the_cleanable_range_ends_at_the_active_segment(backing):
    mgr = open_dir(backing)
    log = mgr.create("c-0")
    segments(log, [NOW] * 4)
    offsets = cleanable_offsets(log, 0, NOW)
    assert (offsets.first_dirty_offset, offsets.first_uncleanable_dirty_offset) == \
        (0, log.segments.active.base_offset)
    assert not offsets.force_update_checkpoint
    mgr.close()


@pytest.mark.parametrize("lag", [0, 1])
def test_min_compaction_lag_at_its_bound(backing, lag):
    """A segment whose records are as old as the lag is cleanable, a younger one is not;
    ``min.compaction.lag.ms`` 0 keeps no segment back, not even one stamped after now."""
    mgr = open_dir(backing, f"min.compaction.lag.ms={lag}\n")
    log = mgr.create("c-0")
    segments(log, [NOW - 5, NOW - lag, NOW + 5])
    bases = [s.base_offset for s in log.segments.all()]
    assert cleanable_offsets(log, 0, NOW).first_uncleanable_dirty_offset == \
        (bases[2] if lag else bases[3])
    mgr.close()


def test_min_compaction_lag_keeps_back_the_first_young_segment(backing):
    mgr = open_dir(backing, f"min.compaction.lag.ms={HOUR}\n")
    log = mgr.create("c-0")
    segments(log, [NOW - 3 * HOUR, NOW - 2 * HOUR, NOW - HOUR // 2, NOW - HOUR // 4])
    bases = [s.base_offset for s in log.segments.all()]
    assert cleanable_offsets(log, 0, NOW).first_uncleanable_dirty_offset == bases[2]
    mgr.close()


def test_an_invalid_checkpoint_is_reset_to_the_log_start(backing, caplog):
    """``testCleanableOffsetsNeedsCheckpointReset``: a checkpoint past the log end is reset
    and said; one below the log start is reset, said only when the log does not also delete
    (retention moves its start); one at the log end is valid."""
    deleting = f"cleanup.policy=compact,delete\nretention.ms={HOUR}\n"
    mgr = open_dir(backing, deleting)
    log = mgr.create("c-0")
    segments(log, [NOW - 3 * HOUR, NOW - 2 * HOUR, NOW])
    log.delete_old_segments(NOW)
    start, end = log.log_start_offset, log.log_end_offset
    assert start > 0
    caplog.set_level(logging.WARNING, logger="storage.log_cleaner")
    assert cleanable_offsets(log, end, NOW).force_update_checkpoint is False
    below = cleanable_offsets(log, start - 1, NOW)
    assert (below.first_dirty_offset, below.force_update_checkpoint) == (start, True)
    assert not caplog.records  # compact,delete: retention moved the start, nothing to say
    past = cleanable_offsets(log, end + 1, NOW)
    assert (past.first_dirty_offset, past.force_update_checkpoint) == (start, True)
    assert [r.getMessage() for r in caplog.records] == [
        f"Resetting first dirty offset of c-0 to log start offset {start} since the "
        f"checkpointed offset {end + 1} is invalid."]
    mgr.close()
    caplog.clear()
    mgr = open_dir(backing)
    assert cleanable_offsets(mgr.get("c-0"), start - 1, NOW).first_dirty_offset == start
    assert len(caplog.records) == 1  # compact only: said
    mgr.close()


def test_an_invalid_checkpoint_entry_is_rewritten(backing):
    mgr, log, manager = dirty_log(backing, [NOW] * 3)
    manager.update_checkpoint("c-0", log.log_end_offset + 7)
    assert manager.offsets_to_clean(log, NOW).first_dirty_offset == 0
    assert manager.all_cleaner_checkpoints() == {"c-0": 0}
    mgr.close()


# -- maxCompactionDelay -------------------------------------------------------------------------


def test_how_overdue_by_max_compaction_lag(backing):
    mgr = open_dir(backing, f"max.compaction.lag.ms={HOUR}\n")
    log = mgr.create("c-0")
    segments(log, [NOW - 3 * HOUR, NOW - 2 * HOUR, NOW])
    assert max_compaction_delay(log, 0, NOW) == 2 * HOUR  # the oldest dirty segment's wait
    assert max_compaction_delay(log, 0, NOW - 2 * HOUR) == 0  # not yet due
    assert max_compaction_delay(log, 0, NOW - 2 * HOUR + 1) == 1
    active = log.segments.active.base_offset
    assert max_compaction_delay(log, active, NOW) == 0  # no dirty segment but the active one
    mgr.close()


@pytest.mark.parametrize("first_stamp, counted", [(0, False), (1, True)])
def test_only_positive_first_batch_timestamps_count(backing, first_stamp, counted):
    """``getFirstBatchTimestampForSegments(...).filter(_ > 0)``: a segment stamped 0 has no
    age."""
    mgr = open_dir(backing, f"max.compaction.lag.ms={HOUR}\n")
    log = mgr.create("c-0")
    segments(log, [first_stamp, NOW])
    assert max_compaction_delay(log, 0, NOW) == (NOW - HOUR - first_stamp if counted else 0)
    mgr.close()


def test_an_empty_log_is_not_dirty(backing):
    mgr = open_dir(backing)
    log = mgr.create("c-0")
    ltc = LogToClean(log, 0, 0, False)
    assert (ltc.total_bytes, ltc.cleanable_ratio) == (0, 0.0)
    mgr.close()


# -- grabFilthiestCompactedLog ------------------------------------------------------------------


def test_a_ratio_equal_to_the_minimum_is_not_enough(backing):
    mgr, log, manager = dirty_log(backing, [NOW] * 3, "min.cleanable.dirty.ratio=1.0\n")
    assert manager.log_to_clean(log, NOW).cleanable_ratio == 1.0
    assert manager.grab_filthiest_compacted_log(NOW) is None
    mgr.close()


def test_overdue_by_one_millisecond_is_cleaned_whatever_the_ratio(backing):
    mgr, log, manager = dirty_log(backing, [NOW - 2 * HOUR, NOW],
                                  f"min.cleanable.dirty.ratio=1.0\nmax.compaction.lag.ms={HOUR}\n")
    due = NOW - 2 * HOUR + HOUR  # the first segment's age reaches the lag
    assert manager.grab_filthiest_compacted_log(due) is None
    assert manager.grab_filthiest_compacted_log(due + 1).log is log
    mgr.close()


def test_overdue_with_nothing_cleanable_is_not_grabbed(backing):
    """Overdue by ``max.compaction.lag.ms`` but every dirty segment younger than
    ``min.compaction.lag.ms``: no cleanable bytes, nothing to do."""
    mgr, log, manager = dirty_log(backing, [NOW - 10, NOW],
                                  "min.cleanable.dirty.ratio=1.0\nmax.compaction.lag.ms=1\n"
                                  f"min.compaction.lag.ms={HOUR}\n")
    ltc = manager.log_to_clean(log, NOW)
    assert ltc.need_compaction_now and ltc.cleanable_bytes == 0
    assert manager.grab_filthiest_compacted_log(NOW) is None
    mgr.close()


def test_a_log_in_progress_is_not_grabbed_again(backing):
    mgr, log, manager = dirty_log(backing, [NOW] * 3)
    assert manager.grab_filthiest_compacted_log(NOW).log is log
    assert manager.grab_filthiest_compacted_log(NOW) is None  # in progress
    assert manager.begin("c-0") is False
    manager.done_cleaning("c-0", None)
    assert manager.begin("c-0") is True
    assert manager.grab_filthiest_compacted_log(NOW) is None  # begun: in progress
    mgr.close()


def test_the_filthiest_of_several_is_grabbed(backing):
    mgr = open_dir(backing)
    a, b = mgr.create("c-0"), mgr.create("c-1")
    segments(a, [NOW] * 2)
    segments(b, [NOW] * 4)
    manager = LogCleanerManager(backing, lambda: {"c-0": a, "c-1": b})
    manager.update_checkpoint("c-1", b.segments.all()[1].base_offset)  # c-1 partly clean
    assert manager.grab_filthiest_compacted_log(NOW).log is a
    mgr.close()


# -- the checkpoint -----------------------------------------------------------------------------


def test_the_checkpoint_keeps_the_logs_there_are(backing):
    mgr = open_dir(backing)
    logs = {"c-0": mgr.create("c-0"), "c-1": mgr.create("c-1")}
    manager = LogCleanerManager(backing, lambda: logs)
    for name, offset in (("c-0", 3), ("c-1", 4)):
        manager.update_checkpoint(name, offset)
    del logs["c-1"]
    manager.update_checkpoint("c-0", 5)
    assert manager.all_cleaner_checkpoints() == {"c-0": 5}
    mgr.close()


def test_a_corrupt_checkpoint_is_treated_as_absent_and_said(backing, caplog):
    (backing / CLEANER_OFFSET_CHECKPOINT).write_text("0\n1\nc 0\n")
    manager = LogCleanerManager(backing, dict)
    assert manager.all_cleaner_checkpoints() == {}
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage().endswith("; treating it as absent")
    assert CLEANER_OFFSET_CHECKPOINT in record.getMessage()


# -- the cleaner and a pass ---------------------------------------------------------------------


def test_the_cleaner_takes_kafkas_buffers_and_the_throttler(backing):
    mgr = open_dir(backing)
    cleaner = for_log_manager(mgr)
    made = cleaner.cleaner()
    assert made.io_buffer_size == mgr.config.log_cleaner_io_buffer_size // 2  # one thread
    assert made.max_io_buffer_size == 1_048_588  # message.max.bytes' default
    assert made.throttler is cleaner.throttler
    assert cleaner.cleaner() is made  # one offset map, kept
    mgr.close()
    mgr = open_dir(backing, server_props="message.max.bytes=2000000\n")
    assert for_log_manager(mgr).cleaner().max_io_buffer_size == 2_000_000
    bare = LogCleaner(backing, dict, mgr.config)
    assert bare.cleaner().max_io_buffer_size == 1_048_588
    mgr.close()


def test_a_pass_reports_its_progress_and_checkpoints_its_end(backing):
    mgr = open_dir(backing)
    log = mgr.create("c-0")
    segments(log, [NOW] * 3)
    seen = []
    result = for_log_manager(mgr).clean_log("c-0", NOW, progress=seen.append)
    # (bytes read while mapping the dirty section, then while copying it)
    assert sum(seen) == result.stats.map_bytes_read + result.stats.bytes_read > 0
    assert result.end == log.segments.active.base_offset
    assert checkpoint(backing).splitlines()[2:] == [f"c 0 {result.end}"]
    mgr.close()


def test_a_pass_without_now_runs_at_the_cleaners_clock(backing):
    """``min.compaction.lag.ms`` decides: the fixed clock is two hours past the records."""
    mgr = open_dir(backing, f"min.compaction.lag.ms={HOUR}\n")
    log = mgr.create("c-0")
    segments(log, [NOW] * 3)
    early = LogCleaner(backing, lambda: {"c-0": log}, mgr.config, clock=FixedClock(NOW))
    assert early.clean_filthiest_log() is None
    late = LogCleaner(backing, lambda: {"c-0": log}, mgr.config,
                      clock=FixedClock(NOW + 2 * HOUR))
    assert late.clean_filthiest_log().name == "c-0"
    mgr.close()
    mgr = open_dir(backing, f"min.compaction.lag.ms={HOUR}\n", clock=FixedClock(NOW + 2 * HOUR))
    segments(mgr.get("c-0"), [NOW] * 2)
    assert for_log_manager(mgr).clean_filthiest_log().name == "c-0"  # the directory's clock
    mgr.close()


def test_retention_after_a_pass_applies_to_compacted_logs_only(backing):
    """``cleanFilthiestLog`` then deletes old segments of the logs that compact and delete;
    a log that only deletes is the log manager's."""
    (backing / "d.topic.properties").write_text(f"{ANY_TIME}retention.ms={HOUR}\n")
    mgr = open_dir(backing, f"cleanup.policy=compact,delete\nretention.ms={HOUR}\n")
    compacted, deleting = mgr.create("c-0"), mgr.create("d-0")
    for log in (compacted, deleting):
        segments(log, [NOW - 3 * HOUR, NOW - 2 * HOUR])  # the latest values 2 hours old
    cleaner = LogCleaner(backing, lambda: {"c-0": compacted, "d-0": deleting}, mgr.config)
    cleaner.clean_filthiest_log(NOW)
    assert compacted.log_start_offset > 0
    assert deleting.log_start_offset == 0
    mgr.close()


def test_a_log_that_does_not_compact_is_refused_by_name(backing):
    (backing / "d.topic.properties").write_text("cleanup.policy=delete\n")
    mgr = open_dir(backing)
    mgr.create("d-0")
    with pytest.raises(ValueError) as refused:
        for_log_manager(mgr).clean_log("d-0", NOW)
    assert str(refused.value) == "d-0: cleanup.policy=delete does not compact"
    mgr.close()


def failing_pass(backing, monkeypatch, error):
    """A LogCleaner of one dirty log ``c-0`` whose Cleaner raises ``error``."""
    mgr = open_dir(backing)
    log = mgr.create("c-0")
    segments(log, [NOW] * 3)

    def clean(self, log_, start, end, now):
        raise error

    monkeypatch.setattr(Cleaner, "clean", clean)
    return mgr, log, for_log_manager(mgr)


def test_an_aborted_pass_is_said_and_tried_again(backing, monkeypatch, caplog):
    mgr, log, cleaner = failing_pass(backing, monkeypatch, LogCleaningAbortedError("moved"))
    caplog.set_level(logging.INFO, logger="storage.log_cleaner")
    assert cleaner.clean_filthiest_log(NOW) is None
    assert [r.getMessage() for r in caplog.records] == ["Cleaning of log c-0 aborted: moved"]
    assert "c-0" not in cleaner.manager.uncleanable
    assert cleaner.manager.begin("c-0")  # released
    assert not (backing / CLEANER_OFFSET_CHECKPOINT).exists()
    mgr.close()


def test_a_failed_write_takes_the_log_offline(backing, monkeypatch, caplog):
    error = OSError(28, "No space left on device")
    mgr, log, cleaner = failing_pass(backing, monkeypatch, error)
    taken = []
    monkeypatch.setattr(log, "go_offline", taken.append)
    assert cleaner.clean_filthiest_log(NOW) is None
    assert taken == [error]
    assert [r.getMessage() for r in caplog.records] == [
        f"Failed to clean up log for c-0 in dir {backing} due to IOException: {error}"]
    with pytest.raises(OSError):
        cleaner.clean_log("c-0", NOW)  # kfs compact: the error is the command's
    mgr.close()


def test_bad_data_makes_the_partition_uncleanable(backing, monkeypatch, caplog):
    mgr, log, cleaner = failing_pass(backing, monkeypatch, CorruptRecordError("bad crc"))
    assert cleaner.clean_filthiest_log(NOW) is None
    assert cleaner.manager.uncleanable == {"c-0"}
    assert [r.getMessage() for r in caplog.records] == [
        "Unexpected exception thrown when cleaning log c-0. Marking its partition (c-0) as "
        "uncleanable: bad crc"]
    assert cleaner.clean_filthiest_log(NOW) is None  # not tried again
    mgr.close()


def test_a_pass_is_summed_up_as_kafka_does(backing, caplog):
    mgr = open_dir(backing)
    log = mgr.create("c-0")
    segments(log, [NOW] * 3)
    caplog.set_level(logging.INFO, logger="storage.log_cleaner")
    result = for_log_manager(mgr).clean_filthiest_log(NOW)
    assert [r.getMessage() for r in caplog.records] == [stats_message(result)]
    mgr.close()


# -- LogCleaner.recordStats ---------------------------------------------------------------------


def summary(**figures) -> list[str]:
    times = {"start_time": 100.0, "map_complete_time": 100.2, "end_time": 100.8}
    stats = CleanerStats(**{**times, **figures})
    return stats_message(CleanResult("c-0", 0, 1000, stats)).split("\n\t")


def test_the_summary_in_kafkas_words():
    """``LogCleaner.recordStats``'s lines, figures in MiB: 10 MiB read in 0.8 s, 5 MiB of it
    mapped in 0.2 s, 2.5 MiB and a quarter of the messages written."""
    assert summary(bytes_read=10 << 20, bytes_written=5 << 19, map_bytes_read=5 << 20,
                   messages_read=1000, messages_written=250, buffer_utilization=0.25) == [
        "Log cleaner thread 0 cleaned log c-0 (dirty section = [0, 1000])",
        "10.0 MB of log processed in 0.8 seconds (12.5 MB/sec).",
        "Indexed 5.0 MB in 0.2 seconds (25.0 Mb/sec, 25.0% of total time)",
        "Buffer utilization: 25.0%",
        "Cleaned 10.0 MB in 0.6 seconds (16.7 Mb/sec, 75.0% of total time)",
        "Start size: 10.0 MB (1,000 messages)",
        "End size: 2.5 MB (250 messages)",
        "75.0% size reduction (75.0% fewer messages)"]


def test_the_summary_in_mebibytes():
    lines = summary(bytes_read=2000 << 20, bytes_written=1000 << 20, messages_read=2,
                    messages_written=1)
    assert lines[1] == "2,000.0 MB of log processed in 0.8 seconds (2,500.0 MB/sec)."
    assert lines[6:] == ["End size: 1,000.0 MB (1 messages)",
                         "50.0% size reduction (50.0% fewer messages)"]


def test_the_summary_counts_invalid_messages():
    lines = summary(bytes_read=1, bytes_written=1, messages_read=1, messages_written=1,
                    invalid_messages_read=3)
    assert lines[-2:] == ["0.0% size reduction (0.0% fewer messages)",
                          "Found 3 invalid messages during compaction."]
