"""The partition log's boundaries, modelled on Kafka's ``UnifiedLogTest``/``LogTest``: appends
as a leader and as a follower, rolls, timestamps, truncation, flushes and refusals (issue 41:
each test pins a rule a mutation of ``storage/log.py`` would break)."""

import errno
import logging
import threading

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from helpers.waits import DEADLINE_S, joined
from storage import LogConfig
from storage.clock import FixedClock
from storage.errors import (
    KeySeparatorMissingError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KeylessRecordError,
    RecordTooLargeError,
)
from storage.log import Log
from storage.log_files import log_file
from storage.log_reader import decoded_batch_cache
from storage.records import RecordBatch, build_batch, iter_batches
from storage.records.control import ControlRecordType, build_control_batch

NOW = 1_700_000_000_000


def open_log(path, clock=None, **config):
    path.mkdir(parents=True, exist_ok=True)
    return Log(path, "t", 0, LogConfig(**config), clock=clock or FixedClock(NOW))


def producer_batch(seq, n=1, pid=1, size=100, ts=NOW, epoch=0, **kw):
    """An idempotent producer's batch of ``n`` records from sequence ``seq``."""
    return build_batch(0, [b"v" * size] * n, [b"k"] * n, ts, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, **kw)


def legacy_message(offset):
    """A magic v1 message (Kafka before 0.11) at ``offset``."""
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    builder.append(offset, NOW, None, b"v")
    return bytes(builder.build())


def bases(log):
    return [s.base_offset for s in log.segments.all()]


# -- append_as_leader ---------------------------------------------------------------------------

@pytest.mark.parametrize("sync", [False, True])
def test_leader_batches_that_roll_are_appended_one_by_one(tmp_path, sync):
    """UnifiedLogTest.testSizeBasedLogRoll with several batches in one write: each batch has its
    own roll check, so the segments break between batches as a broker's do."""
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    size = len(producer_batch(0, 2))
    assert 600 // size == 2  # two batches fit a segment, three do not
    data = b"".join(producer_batch(seq, 2) for seq in (0, 2, 4, 6))
    assert log.append_as_leader(data, sync=sync) == (0, 7)
    assert log.log_end_offset == 8 and bases(log) == [0, 4]
    assert log.recovery_point == (8 if sync else 0)
    assert [r.offset for r in log.reader.records_from(0, 100)] == list(range(8))
    assert log.producer_state.active_producers[1].last_seq == 7
    # the producer snapshot of the roll holds the batches before it
    assert (tmp_path / "t-0" / "00000000000000000004.snapshot").exists()
    # a retry of the last batch is found: its sequence range was applied batch by batch
    assert log.append_as_leader(producer_batch(6, 2)) == (6, 7) and log.log_end_offset == 8
    log.close()


def test_leader_batches_that_fail_to_roll_are_all_taken_back(tmp_path, monkeypatch):
    from storage.segment import LogSegment

    log = open_log(tmp_path / "t-0", segment_bytes=400)
    log.append([b"kept"], keys=[b"k"])
    appended = []

    def second_fails(self, *args):
        appended.append(args)
        if len(appended) == 2:
            raise OSError(errno.EIO, "Input/output error")
        return real(self, *args)

    real = LogSegment.append
    monkeypatch.setattr(LogSegment, "append", second_fails)
    with pytest.raises(OSError):
        log.append_as_leader(b"".join(producer_batch(seq, 2) for seq in (0, 2)) +
                             producer_batch(4, 3))
    monkeypatch.undo()
    assert log.log_end_offset == 1 and log.offline
    assert [r.value for r in log.reader.records_from(0, 10)] == [b"kept"]
    assert 1 not in log.producer_state.active_producers
    log.close()


def test_a_producer_retry_is_answered_with_its_first_offsets_and_stored_once(tmp_path, caplog):
    log = open_log(tmp_path / "t-0")
    assert log.append_as_leader(producer_batch(0, 3)) == (0, 2)
    size = log.segments.size_in_bytes
    with caplog.at_level(logging.INFO, logger="storage.log"):
        assert log.append_as_leader(producer_batch(0, 3)) == (0, 2)
    assert log.log_end_offset == 3 and log.segments.size_in_bytes == size
    assert "t-0: a producer retried the batch at offsets 0-2; not stored twice" in caplog.messages
    log.close()


def test_a_bytearray_is_stamped_in_place(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append([b"first"])
    buf = bytearray(producer_batch(0))
    log.append_as_leader(buf)
    assert RecordBatch(buf, 0).base_offset == 1  # the caller's buffer holds the stored batch
    log.close()


def test_leader_append_refusals_say_why(tmp_path):
    log = open_log(tmp_path / "t-0")
    with pytest.raises(CorruptRecordError, match="^no record batch in the data$"):
        log.append_as_leader(b"")
    with pytest.raises(CorruptRecordError, match="^3 bytes of a partial batch at the end$"):
        log.append_as_leader(producer_batch(0) + b"\0\0\0")
    marker = build_control_batch(0, 1, 0, ControlRecordType.ABORT, timestamp_ms=NOW)
    with pytest.raises(InvalidRecordError,
                       match="^transaction markers and data batches in one append$"):
        log.append_as_leader(producer_batch(0) + marker)
    # producer id 0 is a producer: its batch needs a sequence number (LogValidator)
    with pytest.raises(InvalidRecordError, match="^producer 0 sent a batch without a sequence"):
        log.append_as_leader(build_batch(0, [b"v"], None, NOW, producer_id=0,
                                         producer_epoch=0, base_sequence=-1))
    with pytest.raises(InvalidRecordError, match="^magic v1 entry: producers append magic 2$"):
        log.append_as_leader(legacy_message(0))
    assert log.log_end_offset == 0 and log.segments.active.size == 0
    log.close()


def test_a_batch_of_exactly_max_message_bytes_is_taken(tmp_path):
    data = producer_batch(0, 2)
    log = open_log(tmp_path / "a", max_message_bytes=len(data))
    assert log.append_as_leader(data) == (0, 1)
    log.close()
    log = open_log(tmp_path / "b", max_message_bytes=len(data) - 1)
    with pytest.raises(RecordTooLargeError, match=f"^a {len(data)}-byte record batch exceeds "
                                                  f"max.message.bytes={len(data) - 1}$"):
        log.append_as_leader(data)
    log.close()


def test_a_compacted_topic_refuses_keyless_data_but_takes_markers(tmp_path):
    log = open_log(tmp_path / "t-0", cleanup_policy="compact")
    with pytest.raises(KeylessRecordError, match="^Compacted topic cannot accept message without "
                                                 "key in topic partition t-0.$"):
        log.append_as_leader(build_batch(0, [b"v"], None, NOW))
    log.append_as_leader(producer_batch(0, is_transactional=True))
    assert log.abort_transaction(1, 0) == 1  # a marker has no key
    log.close()


# -- timestamps (LogValidator.validateTimestamp) ------------------------------------------------

def test_create_time_bounds_are_inclusive_and_named(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_before_max_ms=1000,
                   message_timestamp_after_max_ms=500)
    assert log.append([b"a", b"b"], timestamps=[NOW - 1000, NOW + 500]) == 0
    with pytest.raises(InvalidTimestampError, match=(
            rf"^Timestamp {NOW - 1001} of record 2 of the append is out of range. The timestamp "
            rf"should be within \[{NOW - 1000}, {NOW + 500}\] "
            r"\(message.timestamp.before.max.ms=1000, message.timestamp.after.max.ms=500\)$")):
        log.append([b"c", b"d"], timestamps=[NOW, NOW - 1001])
    with pytest.raises(InvalidTimestampError, match=f"^Timestamp {NOW + 501} of record 1 "):
        log.append([b"e"], timestamps=[NOW + 501])
    assert log.log_end_offset == 2
    log.close()


def test_a_producer_batch_is_checked_by_its_max_timestamp_and_each_record(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_before_max_ms=1000,
                   message_timestamp_after_max_ms=500)
    assert log.append_as_leader(build_batch(0, [b"a", b"b"], None, [NOW - 1000, NOW + 500])) == (0, 1)
    with pytest.raises(InvalidTimestampError,
                       match=f"^Timestamp {NOW - 1001} of the record at offset delta 1 is out"):
        log.append_as_leader(build_batch(0, [b"a", b"b"], None, [NOW, NOW - 1001]))
    with pytest.raises(InvalidTimestampError,
                       match=f"^Timestamp {NOW + 501} of the batch with base sequence 4 is out"):
        log.append_as_leader(producer_batch(4, ts=NOW + 501))
    assert log.log_end_offset == 2
    log.close()


def test_log_append_time_takes_any_timestamp_and_stamps_now(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime",
                   message_timestamp_before_max_ms=0, message_timestamp_after_max_ms=0)
    log.append([b"a"], timestamps=[5])
    log.append_as_leader(build_batch(0, [b"b"], None, 5))
    log.append_lines(b"c\n")
    assert [(r.timestamp, r.timestamp_type) for r in log.reader.records_from(0, 10)] == \
        [(NOW, 1)] * 3
    log.close()


def test_append_refuses_columns_of_other_lengths_by_name(tmp_path):
    log = open_log(tmp_path / "t-0")
    for name in ("keys", "headers", "timestamps"):
        with pytest.raises(ValueError, match=f"^{name} and values differ in length$"):
            log.append([b"a", b"b"], **{name: [None]})
    log.close()


def test_a_compacted_topic_refuses_a_null_key_among_keys(tmp_path):
    log = open_log(tmp_path / "t-0", cleanup_policy="compact")
    with pytest.raises(KeylessRecordError):
        log.append([b"a", b"b"], keys=[b"k", None])
    assert log.append([b"a", None], keys=[b"k", b"k"]) == 0  # a tombstone has its key
    assert log.reader.read(1).value is None
    log.close()


# -- append_lines -------------------------------------------------------------------------------

def test_append_lines_of_nothing_is_an_empty_range_at_the_log_end(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_lines(b"a\nb\n")
    assert log.append_lines(b"") == range(2, 2)
    with pytest.raises(ValueError, match="^lines must end with a newline$"):
        log.append_lines(b"c")
    log.close()


def test_append_lines_compresses_with_the_topic_codec(tmp_path):
    log = open_log(tmp_path / "t-0", compression_type="gzip")
    log.append_lines(b"".join(b"line %d " % i + b"x" * 200 + b"\n" for i in range(20)))
    batches = list(iter_batches(log_file(tmp_path / "t-0", 0).read_bytes()))
    assert [b.compression_type for b in batches] == [1]
    assert batches[0].size_in_bytes < 20 * 200 // 4
    assert [r.value for r in log.reader.records_from(0, 100)] == \
        [b"line %d " % i + b"x" * 200 for i in range(20)]
    log.close()


def test_append_lines_cuts_batches_at_batch_size(tmp_path):
    log = open_log(tmp_path / "t-0", batch_size=1000)
    log.append_lines(b"".join(b"%04d" % i + b"x" * 96 + b"\n" for i in range(100)))
    sizes = [b.size_in_bytes for b in iter_batches(log_file(tmp_path / "t-0", 0).read_bytes())]
    assert max(sizes) <= 1000 and sizes[0] > 1000 - 110  # full batches, as a producer's
    log.close()


def test_a_line_of_exactly_max_message_bytes_is_taken(tmp_path):
    line = b"x" * 300 + b"\n"
    probe = open_log(tmp_path / "probe")
    probe.append_lines(line)
    size = probe.segments.active.size
    probe.close()
    log = open_log(tmp_path / "a", max_message_bytes=size)
    assert log.append_lines(line) == range(0, 1)
    log.close()
    log = open_log(tmp_path / "b", max_message_bytes=size - 1)
    with pytest.raises(RecordTooLargeError, match=f"^a line is {size} bytes as a batch, more than "
                                                  f"max.message.bytes={size - 1} "):
        log.append_lines(line)
    assert log.log_end_offset == 0
    log.close()


def test_a_keyed_line_without_separator_past_the_first_of_its_batch(tmp_path):
    log = open_log(tmp_path / "t-0", batch_size=64)
    with pytest.raises(KeySeparatorMissingError, match="in line 3$") as info:
        log.append_lines(b"a\t1\nb\t2\nc 3\n", b"\t")
    assert info.value.line == 3
    log.close()


def test_a_busy_log_refuses_a_nowait_append_with_eagain(tmp_path):
    log = open_log(tmp_path / "t-0")
    held, done = threading.Event(), threading.Event()

    def hold_the_lock():
        with log._lock:
            held.set()
            done.wait(DEADLINE_S)  # (set by the test once it tried; the bound ends a hang only)

    holder = threading.Thread(target=hold_the_lock, name="lock holder")
    holder.start()
    assert held.wait(DEADLINE_S), "the holder thread never took the lock"
    try:
        with pytest.raises(BlockingIOError, match="^.Errno 11. t-0 is busy$") as info:
            log.append_lines(b"a\n", nowait=True)
        assert info.value.errno == errno.EAGAIN
    finally:
        done.set()
        joined(holder)
    log.close()


def test_nowait_refusals_say_what_would_wait(tmp_path):
    log = open_log(tmp_path / "a", segment_bytes=2000)
    log.append_lines(b"x" * 1500 + b"\n")
    with pytest.raises(BlockingIOError, match="^.Errno 11. t-0 would roll$"):
        log.append_lines(b"y" * 1500 + b"\n", nowait=True)
    log.close()
    log = open_log(tmp_path / "b", flush_messages=3)
    log.append_lines(b"1\n2\n")
    log.flush()
    assert log.append_lines(b"3\n4\n", nowait=True) == range(2, 4)  # 2 unflushed: no flush
    with pytest.raises(BlockingIOError, match="^.Errno 11. t-0 would flush$"):
        log.append_lines(b"5\n", nowait=True)
    log.close()


# -- append (records sections) ------------------------------------------------------------------

def test_an_oversized_record_is_named_by_its_line(tmp_path):
    log = open_log(tmp_path / "t-0", max_message_bytes=500, batch_size=16384)
    with pytest.raises(RecordTooLargeError, match=r"^the record at line 3 is \d+ bytes as a batch"):
        log.append([b"a", b"b", b"x" * 600], timestamps=[NOW, NOW, NOW])
    assert log.log_end_offset == 0
    log.close()


def test_append_sections_compress_at_the_topic_level(tmp_path):
    fast = open_log(tmp_path / "1", compression_type="zstd", compression_zstd_level=1)
    best = open_log(tmp_path / "2", compression_type="zstd", compression_zstd_level=19)
    values = [bytes(range(i % 50, i % 50 + 200)) * 3 for i in range(200)]
    for log in (fast, best):
        log.append(values, timestamps=[NOW] * 200)
    assert best.segments.active.size < fast.segments.active.size
    assert [r.value for r in best.reader.records_from(0, 1000)] == values
    fast.close()
    best.close()


# -- append_batches (a follower's append) -------------------------------------------------------

def test_follower_batches_keep_their_epochs_and_producers(tmp_path):
    log = open_log(tmp_path / "t-0")
    data = producer_batch(0, 2, partition_leader_epoch=3) + \
        build_batch(2, [b"x"], None, NOW, partition_leader_epoch=5)
    assert log.append_batches(data) == 3
    assert log.epochs.entries == [(3, 0), (5, 2)]
    assert log.leader_epoch == 5
    assert log.producer_state.active_producers[1].last_seq == 1
    log.close()


def test_follower_batches_that_roll_start_the_segment_at_the_first_one(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=500)
    log.append_batches(build_batch(0, [b"x" * 300], None, NOW))
    log.append_batches(build_batch(10, [b"y"], None, NOW) + build_batch(11, [b"z" * 200], None, NOW))
    assert bases(log) == [0, 10] and log.log_end_offset == 12
    log.close()


def test_follower_batches_must_increase_and_be_whole(tmp_path):
    log = open_log(tmp_path / "t-0")
    one = build_batch(5, [b"a", b"b"], None, NOW)
    with pytest.raises(CorruptRecordError, match="^batch at offset 6 does not follow offset 6$"):
        log.append_batches(one + build_batch(6, [b"c"], None, NOW))
    with pytest.raises(CorruptRecordError, match="^2 bytes of a partial batch at the end$"):
        log.append_batches(one + b"\0\0")
    assert log.append_batches(one + build_batch(7, [b"c"], None, NOW)) == 8
    with pytest.raises(ValueError, match="^offset 7 is below the log end offset 8$"):
        log.append_batches(build_batch(7, [b"c"], None, NOW))
    with pytest.raises(InvalidRecordError, match="^magic v1 entry at offset 8: only magic 2 "):
        log.append_batches(legacy_message(8))
    log.close()


# -- roll ---------------------------------------------------------------------------------------

def test_roll_reuses_an_empty_active_segment_at_the_same_base(tmp_path, caplog):
    log = open_log(tmp_path / "t-0")
    empty = log.segments.active
    assert log.roll() is empty and bases(log) == [0]
    log.append([b"a", b"b"])
    with caplog.at_level(logging.INFO, logger="storage.log"):
        rolled = log.roll()
    assert "rolled t-0 to a new segment at offset 2" in caplog.messages
    assert log.roll() is rolled and bases(log) == [0, 2]
    assert log.roll(5) is not rolled and bases(log) == [0, 2, 5]  # an empty one at another base
    log.close()


def test_roll_deletes_a_leftover_file_of_the_new_base(tmp_path, caplog):
    log = open_log(tmp_path / "t-0")
    log.append([b"a"])
    leftover = log_file(tmp_path / "t-0", 1)
    leftover.write_bytes(b"junk of a rolled-back append")
    with caplog.at_level(logging.WARNING, logger="storage.log"):
        log.roll()
    assert f"deleting leftover {leftover} before rolling to it" in caplog.messages
    assert leftover.stat().st_size == 0
    log.append([b"b"])
    assert [r.value for r in log.reader.records_from(0, 10)] == [b"a", b"b"]
    log.close()


def test_a_rolled_segment_rolls_by_time_on_the_log_clock(tmp_path):
    clock = FixedClock(NOW)
    log = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    log.append([b"a"])
    log.roll()
    log.append([b"b"])  # stamped NOW: the new segment's first batch
    clock.ms = NOW + 1000
    log.append([b"c"])
    clock.ms = NOW + 1001
    log.append([b"d"])
    assert bases(log) == [0, 1, 3]
    log.close()


# -- truncation ---------------------------------------------------------------------------------

def test_truncate_to_a_segment_base_keeps_that_segment_empty(tmp_path):
    """LocalLog.truncateTo: segments whose base offset is above the target go; the one at it
    stays as the active segment."""
    log = open_log(tmp_path / "t-0")
    for i in range(3):
        log.append([b"%d" % i])
        log.append([b"%d" % i])
        log.roll()
    assert bases(log) == [0, 2, 4, 6]
    log.truncate_to(4)
    assert bases(log) == [0, 2, 4] and log.log_end_offset == 4
    log.truncate_to(3)
    assert bases(log) == [0, 2] and log.log_end_offset == 3
    log.close()


# -- flushing -----------------------------------------------------------------------------------

def test_flush_if_due_waits_for_flush_ms(tmp_path):
    clock = FixedClock(NOW)
    log = open_log(tmp_path / "t-0", clock, flush_ms=1000)
    log.append([b"a"])
    log.flush_if_due(NOW + 999)
    assert log.recovery_point == 0
    log.flush_if_due(NOW + 1000)
    assert log.recovery_point == 1
    log.append([b"b"])
    clock.ms = NOW + 1500
    log.flush()  # the last flush is now NOW + 1500
    log.append([b"c"])
    log.flush_if_due(NOW + 2499)
    assert log.recovery_point == 2
    log.flush_if_due(NOW + 2500)
    assert log.recovery_point == 3
    log.close()


# -- the log's parts ----------------------------------------------------------------------------

def test_reads_fill_the_cache_the_log_was_given(tmp_path):
    cache = decoded_batch_cache()
    tmp = tmp_path / "t-0"
    tmp.mkdir()
    log = Log(tmp, "t", 0, LogConfig(), clock=FixedClock(NOW), decoded_batches=cache)
    log.append([b"a"])
    assert [r.value for r in log.reader.records_from(0, 10)] == [b"a"]
    assert len(cache._entries) == 1
    log.close()


def test_leader_epochs_and_producer_snapshots_are_written(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_batches(producer_batch(0, partition_leader_epoch=2))
    log.roll()
    assert (tmp_path / "t-0" / "00000000000000000001.snapshot").exists()
    log.close()
    assert (tmp_path / "t-0" / "leader-epoch-checkpoint").read_text().split("\n")[2] == "2 0"
