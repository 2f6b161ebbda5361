"""The partition log's boundaries, modelled on Kafka's ``UnifiedLogTest``/``LogTest``: appends
as a leader and as a follower, rolls, timestamps, truncation, flushes and refusals (issue 41:
each test pins a rule a mutation of ``storage/log.py`` would break)."""

import errno
import logging

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from helpers.waits import held_by_another_thread
from storage import LogConfig
from storage.clock import FixedClock, now_ms
from storage.dir_watch import RACY_NS
from storage.errors import (
    KeySeparatorMissingError,
    LogCleaningAbortedError,
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
    assert log.epochs.entries == [(0, 0)]  # the leader's epoch from the append's first offset
    # the producer snapshot of the roll holds the batches before it
    assert (tmp_path / "t-0" / "00000000000000000004.snapshot").exists()
    # a retry of the last batch is found: its sequence range was applied batch by batch
    assert log.append_as_leader(producer_batch(6, 2)) == (6, 7) and log.log_end_offset == 8
    log.close()


def test_two_leader_batches_break_where_the_second_would_not_fit(tmp_path):
    """Both fit an empty segment, but after the first the active one is full: a broker taking
    one batch per request rolls between them, not before the first."""
    log = open_log(tmp_path / "t-0", segment_bytes=600)
    log.append_as_leader(producer_batch(0, 2))
    assert log.append_as_leader(producer_batch(2, 2) + producer_batch(4, 2)) == (2, 5)
    assert bases(log) == [0, 4]
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
    assert log.recovery_point == 0  # not flushed unless asked (sync) or flush.messages says so
    log.append_as_leader(producer_batch(1), sync=True)
    assert log.recovery_point == 3
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
    line = b"x" * 300 + b"\n"  # larger than batch.size: it goes alone (a producer's rule)
    probe = open_log(tmp_path / "probe", batch_size=100)
    probe.append_lines(line)
    size = probe.segments.active.size
    probe.close()
    log = open_log(tmp_path / "a", max_message_bytes=size, batch_size=100)
    assert log.append_lines(line) == range(0, 1)
    log.close()
    log = open_log(tmp_path / "b", max_message_bytes=size - 1, batch_size=100)
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
    with held_by_another_thread(log._lock):
        with pytest.raises(BlockingIOError, match="^.Errno 11. t-0 is busy$") as info:
            log.append_lines(b"a\n", nowait=True)
    assert info.value.errno == errno.EAGAIN
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

@pytest.mark.parametrize("batch_size", [16384, 1], ids=["one batch", "a batch a record"])
def test_an_oversized_record_is_named_by_its_line(tmp_path, batch_size):
    probe = open_log(tmp_path / "probe")
    probe.append([b"x" * 600], timestamps=[NOW])
    size = probe.segments.active.size  # the record alone as a batch
    probe.close()
    log = open_log(tmp_path / "t-0", max_message_bytes=500, batch_size=batch_size)
    with pytest.raises(RecordTooLargeError, match=rf"^the record at line 3 is {size} bytes as a "
                                                  r"batch, more than max.message.bytes=500 "):
        log.append([b"a", b"b", b"x" * 600], timestamps=[NOW, NOW, NOW])
    assert log.log_end_offset == 0
    log.close()
    log = open_log(tmp_path / "u-0", max_message_bytes=size, batch_size=batch_size)
    assert log.append([b"a", b"b", b"x" * 600], timestamps=[NOW, NOW, NOW]) == 0  # exactly
    log.close()


def test_appends_are_stamped_with_the_leader_epoch(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_batches(build_batch(0, [b"a"], None, NOW, partition_leader_epoch=3))
    log.append([b"b"], timestamps=[NOW])  # (records sections)
    log.append([b"c"])
    log.append_lines(b"d\n")
    log.append_as_leader(build_batch(0, [b"e"], None, NOW))
    assert [b.partition_leader_epoch for b in iter_batches(
        log_file(tmp_path / "t-0", 0).read_bytes())] == [3] * 5
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
    assert log.recovery_point == 0  # a follower's append is not flushed by itself
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


def test_no_timestamp_passes_and_the_range_starts_at_0(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_before_max_ms=0,
                   message_timestamp_after_max_ms=0)
    assert log.append_as_leader(build_batch(0, [b"a"], None, -1)) == (0, 0)  # NO_TIMESTAMP
    log.close()
    log = open_log(tmp_path / "u-0", message_timestamp_after_max_ms=500)
    with pytest.raises(InvalidTimestampError, match=rf"should be within \[0, {NOW + 500}\] "):
        log.append([b"a"], timestamps=[NOW + 501])
    log.close()


# -- transactions and producers -----------------------------------------------------------------

def markers(log):
    from storage.records.control import decode_control_record_key, decode_end_txn_marker_value

    return [(decode_control_record_key(r.key).type, decode_end_txn_marker_value(r.value)[1],
             r.offset, r.timestamp)
            for b in iter_batches(log.segments.active.log_path.read_bytes())
            if b.is_control_batch for r in b.records()]


def test_abort_transaction_writes_the_coordinator_epoch_at_the_log_clock(tmp_path):
    clock = FixedClock(NOW)
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(producer_batch(0, 2, is_transactional=True))
    clock.ms = NOW + 7
    assert log.abort_transaction(1, 0, coordinator_epoch=3) == 2
    log.append_as_leader(producer_batch(2, is_transactional=True, pid=2))
    assert log.abort_transaction(2, 0) == 4
    assert markers(log) == [(ControlRecordType.ABORT, 3, 2, NOW + 7),
                            (ControlRecordType.ABORT, 0, 4, NOW + 7)]
    log.close()


def test_timed_out_transactions_are_aborted_with_a_bumped_epoch(tmp_path):
    """TransactionCoordinator.abortTimedOutTransactions at the given time, the producer fenced."""
    clock = FixedClock(NOW)
    log = open_log(tmp_path / "t-0", clock)
    log.append_as_leader(producer_batch(0, is_transactional=True, epoch=4))
    assert log.abort_timed_out_transactions(1000, now=NOW + 1000) == []
    clock.ms = NOW + 5000  # the given time, not the clock's, decides
    assert log.abort_timed_out_transactions(1000, now=NOW + 1000) == []
    aborted = log.abort_timed_out_transactions(1000, now=NOW + 1001)
    assert [(t.producer_id, t.producer_epoch) for t in aborted] == [(1, 4)]
    assert markers(log) == [(ControlRecordType.ABORT, 0, 1, NOW + 5000)]
    assert log.producer_state.active_producers[1].producer_epoch == 5
    # the coordinator's epoch stays; without a time given, the log's clock is now
    log.append_as_leader(producer_batch(0, pid=2, is_transactional=True))
    log.abort_transaction(2, 0, coordinator_epoch=2)
    log.append_as_leader(producer_batch(1, pid=2, is_transactional=True))
    clock.ms = NOW + 6001
    assert [t.producer_id for t in log.abort_timed_out_transactions(1000)] == [2]
    assert markers(log)[-1] == (ControlRecordType.ABORT, 2, 5, NOW + 6001)
    log.close()


def test_idle_producers_expire_at_the_given_time_or_the_clock(tmp_path):
    clock = FixedClock(NOW)
    log = open_log(tmp_path / "t-0", clock)
    log.producer_state.producer_id_expiration_ms = 1000
    log.append_as_leader(producer_batch(0))
    log.remove_expired_producers(now=NOW + 999)
    assert 1 in log.producer_state.active_producers
    clock.ms = NOW + 999
    log.remove_expired_producers(now=NOW + 1000)
    assert 1 not in log.producer_state.active_producers
    log.append_as_leader(producer_batch(0, pid=2))
    log.remove_expired_producers()
    assert 2 in log.producer_state.active_producers
    clock.ms = NOW + 2000
    log.remove_expired_producers()
    assert 2 not in log.producer_state.active_producers
    log.close()


def test_last_records_of_active_producers_start_at_offset_0(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append_as_leader(producer_batch(0, epoch=2))
    log.abort_transaction(9, 0)  # a producer with a marker and no data
    assert log.last_records_of_active_producers() == {1: (0, 2), 9: (None, 0)}
    log.close()


# -- following another writer -------------------------------------------------------------------

def test_catch_up_says_whether_anything_changed(tmp_path, caplog):
    part = tmp_path / "t-0"
    writer = open_log(part, segment_bytes=600)
    writer.append([b"a"])
    follower_clock = FixedClock(NOW)
    follower = Log(part, "t", 0, LogConfig(), writable=False, clock=follower_clock)
    assert not writer.catch_up() and not follower.catch_up()
    writer.append([b"b" * 200])
    writer.append([b"c" * 200])  # rolls
    with caplog.at_level(logging.INFO, logger="storage.log"):
        assert follower.catch_up()
    assert "t-0 follows its directory: segments 0..2, offsets 0..3" in caplog.messages
    assert follower.log_end_offset == 3 and not follower.catch_up()
    # past the directory's racy window (storage.dir_watch): it is not listed again, and the
    # active segment alone says what was appended
    follower_clock.ms = now_ms() + 2 * RACY_NS // 1_000_000
    writer.append([b"d"])  # into the active segment: no file changes
    assert follower.catch_up() and follower.log_end_offset == 4
    assert follower.catch_up(log_start_offset=1)  # DeleteRecords moved it (the checkpoint)
    assert follower.log_start_offset == 1 and not follower.catch_up(log_start_offset=1)
    assert follower.catch_up(log_start_offset=9) and follower.log_start_offset == 4
    with open(writer.segments.active.log_path, "ab") as torn:
        torn.write(b"\0" * 8 + b"\xff" * 60)  # not a batch
    with caplog.at_level(logging.WARNING, logger="storage.log"):
        assert not follower.catch_up()
    warned = [r for r in caplog.records if r.msg.startswith("%s: new bytes that are not whole")]
    assert warned[0].args[0] == "t-0"
    assert isinstance(warned[0].args[1], (CorruptRecordError, InvalidRecordError))
    follower.close()
    writer.close()


def test_catch_up_of_a_directory_gone_changes_nothing(tmp_path):
    import shutil

    part = tmp_path / "t-0"
    open_log(part).close()
    follower = Log(part, "t", 0, LogConfig(), writable=False, clock=FixedClock(NOW))
    shutil.rmtree(part)
    assert not follower.catch_up()
    follower.close()


# -- retention and swapping in ------------------------------------------------------------------

def test_deleted_segments_go_after_file_delete_delay_ms(tmp_path, caplog):
    clock = FixedClock(NOW)
    log = open_log(tmp_path / "t-0", clock, segment_bytes=300, retention_bytes=250,
                   file_delete_delay_ms=1000)
    assert log.delete_old_segments() == 0
    for i in range(3):
        log.append([b"v" * 200])
    with caplog.at_level(logging.INFO, logger="storage.log"):
        assert log.delete_old_segments() == 2
    assert "deleting segment 0 of t-0 by retention" in caplog.messages
    deleted = sorted(p.name for p in (tmp_path / "t-0").glob("*.log.deleted"))
    assert deleted == ["00000000000000000000.log.deleted", "00000000000000000001.log.deleted"]
    log.delete_due_files(NOW + 999)
    assert len(list((tmp_path / "t-0").glob("*.log.deleted"))) == 2
    clock.ms = NOW + 1000
    log.delete_due_files(NOW + 999)  # the given time, not the clock's
    assert len(list((tmp_path / "t-0").glob("*.log.deleted"))) == 2
    log.delete_due_files(NOW + 1000)
    assert list((tmp_path / "t-0").glob("*.deleted")) == []
    log.close()


def test_close_removes_the_files_still_waiting_for_their_delay(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=300, retention_bytes=250,
                   file_delete_delay_ms=2**62)
    for i in range(3):
        log.append([b"v" * 200])
    assert log.delete_old_segments() == 2 and list((tmp_path / "t-0").glob("*.deleted"))
    log.close()
    assert list((tmp_path / "t-0").glob("*.deleted")) == []


def swap_in(log, old, step, replacing=None):
    """The cleaner's side: ``old``'s batches copied into a ``.cleaned`` segment, swapped in for
    ``replacing`` (default ``old``)."""
    from storage.segment import LogSegment

    cleaned = LogSegment(log.dir, old[0].base_offset, log.config, True, log.clock,
                         file_suffix=".cleaned")
    for segment in old:
        data = segment.log_path.read_bytes()
        cleaned.append(segment.read_next_offset() - 1, NOW, 0, data)
    try:
        return log.replace_segments(cleaned, old if replacing is None else replacing, step)
    except LogCleaningAbortedError:
        cleaned.delete()  # as the cleaner drops its output
        raise


KINDS = (".log", ".index", ".timeindex")  # (a segment without aborted transactions)


def test_replace_segments_renames_in_kafkas_order_and_delays_the_delete(tmp_path):
    clock = FixedClock(NOW)
    log = open_log(tmp_path / "t-0", clock, file_delete_delay_ms=1000)
    for i in range(3):
        log.append([b"%d" % i], keys=[b"k"])
        log.roll()
    old = log.segments.all()[:2]
    assert (tmp_path / "t-0" / "00000000000000000001.snapshot").exists()
    with pytest.raises(LogCleaningAbortedError, match="^t-0 changed while it was cleaned$"):
        swap_in(log, old, lambda _: None, replacing=old[::-1])
    steps = []
    new = swap_in(log, old, steps.append)
    assert steps == [f"renamed {kind}.cleaned to {kind}.swap" for kind in KINDS] + [
        "renamed segment 0 to .deleted", "renamed segment 1 to .deleted"] + [
        f"renamed {kind}.swap to {kind}" for kind in KINDS] + ["swapped in"]
    assert bases(log) == [0, 2, 3] and log.segments.all()[0] is new
    assert [r.value for r in log.reader.records_from(0, 10)] == [b"0", b"1", b"2"]
    assert new.log_path.name == "00000000000000000000.log" and new.log_path.exists()
    # the producer snapshot of the segment that went goes with it; the kept base's stays
    assert not (tmp_path / "t-0" / "00000000000000000001.snapshot").exists()
    log.delete_due_files(NOW + 999)
    assert len(list((tmp_path / "t-0").glob("*.log.deleted"))) == 2
    log.delete_due_files(NOW + 1000)
    assert list((tmp_path / "t-0").glob("*.deleted")) == []
    with pytest.raises(LogCleaningAbortedError):  # they are gone now
        swap_in(log, [new], steps.append, replacing=old)
    log.close()


# -- offline, damaged, read-only ----------------------------------------------------------------

def test_a_failed_flush_takes_the_log_offline_and_says_why(tmp_path, monkeypatch, caplog):
    import storage.log
    from storage.errors import OfflineLogError

    log = open_log(tmp_path / "t-0")
    log.append([b"a"])

    def eio(path):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(storage.log, "fsync_directory", eio)
    with caplog.at_level(logging.ERROR, logger="storage.log"), pytest.raises(OSError):
        log.flush()
    assert log.offline == "[Errno 5] Input/output error"
    assert caplog.messages == ["t-0 is offline for writes until the next mount recovers it "
                               "(reads go on): [Errno 5] Input/output error"]
    monkeypatch.undo()
    with pytest.raises(OfflineLogError, match=r"^\[Errno 5\] t-0 is offline for writes after an I/O error "
                                              r"\(\[Errno 5\] Input/output error\) until"):
        log.append([b"b"])
    with pytest.raises(OfflineLogError):
        log.delete_old_segments()
    log.flush_if_due(2**62)  # an offline log is not flushed: no error either
    assert log.reader.read(0).value == b"a"
    log.close()  # no error: an offline log's disk is known to fail


def test_the_directory_is_fsynced_when_the_active_segment_starts_at_the_recovery_point(
        tmp_path, monkeypatch):
    import storage.log

    log = open_log(tmp_path / "t-0")
    log.append([b"a"])
    log.flush()
    log.roll()  # its .log name must survive a power loss too
    log.append([b"b"])
    synced = []
    monkeypatch.setattr(storage.log, "fsync_directory", synced.append)
    log.flush()
    assert synced == [tmp_path / "t-0"]
    log.close()


def test_refusals_of_a_read_only_log_name_it(tmp_path):
    from storage.errors import ReadOnlyLogError

    open_log(tmp_path / "t-0").close()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(), writable=False)
    with pytest.raises(ReadOnlyLogError, match="^t-0 is read-only$"):
        log.append([b"a"])
    with pytest.raises(ReadOnlyLogError, match="^t-0 is read-only$"):
        log.delete_old_segments()
    log.close()
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log",
        "00000000000000000000.timeindex"]  # (what the writer's clean close left)


def test_close_snapshots_producers_and_raises_the_first_error_after_closing_all(
        tmp_path, monkeypatch):
    from storage.segment import LogSegment

    log = open_log(tmp_path / "t-0")
    log.append_as_leader(producer_batch(0))
    log.roll()
    log.append([b"b"])
    closed = []

    def fails(self):
        closed.append(self.base_offset)
        raise OSError(errno.ENOSPC, f"No space left on device ({self.base_offset})")

    monkeypatch.setattr(LogSegment, "close", fails)
    with pytest.raises(OSError, match=r"\(0\)$"):
        log.close()
    assert closed == [0, 1]
    assert (tmp_path / "t-0" / "00000000000000000002.snapshot").exists()  # at the log end


def test_a_damaged_log_refuses_appends_until_repaired(tmp_path):
    from storage.errors import DamagedLogError

    log = open_log(tmp_path / "t-0")
    log.append([b"a"])
    log.damage = "a torn batch at position 70"  # (what opening a damaged log sets)
    with pytest.raises(DamagedLogError, match=r"^t-0 is damaged \(a torn batch at position 70\): "
                                              r"appends are refused until `kfs verify --repair`$"):
        log.append([b"b"])
    log.close()
    assert not (tmp_path / "t-0" / "00000000000000000001.snapshot").exists()  # nothing written


def test_a_failed_retention_pass_takes_the_log_offline(tmp_path, monkeypatch):
    from storage.segment import LogSegment

    log = open_log(tmp_path / "t-0", segment_bytes=300, retention_bytes=250)
    for i in range(3):
        log.append([b"v" * 200])

    def eio(self):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(LogSegment, "rename_to_deleted", eio)
    with pytest.raises(OSError):
        log.delete_old_segments()
    assert log.offline == "[Errno 5] Input/output error"
    monkeypatch.undo()
    log.close()


def test_close_raises_a_failed_producer_snapshot(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0")
    log.append([b"a"])

    def enospc():
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(log.producer_state, "take_snapshot", enospc)
    with pytest.raises(OSError, match="No space left on device"):
        log.close()
    assert log.offline is None and len(log.segments) == 0  # every segment closed all the same


def test_a_rolled_segment_without_timestamps_rolls_on_the_log_clock(tmp_path):
    """Kafka's LogSegment.timeWaitedForRoll: with no record timestamp the segment's creation
    time on the log's clock (Time) counts."""
    clock = FixedClock(NOW)
    log = open_log(tmp_path / "t-0", clock, segment_ms=1000)
    log.append_batches(build_batch(0, [b"a"], None, -1))
    log.roll()
    log.append_batches(build_batch(1, [b"b"], None, -1))
    clock.ms = NOW + 1001
    log.append_batches(build_batch(2, [b"c"], None, -1))
    assert bases(log) == [0, 1, 2]
    log.close()


def test_a_batch_of_exactly_segment_bytes_is_taken(tmp_path):
    data = build_batch(0, [b"x" * 200], None, NOW)
    log = open_log(tmp_path / "a", segment_bytes=len(data))
    assert log.append_batches(data) == 1
    log.close()
    log = open_log(tmp_path / "b", segment_bytes=len(data) - 1)
    with pytest.raises(RecordTooLargeError, match=f"^a {len(data)}-byte append exceeds "
                                                  f"segment.bytes={len(data) - 1}$"):
        log.append_batches(data)
    log.close()


def test_a_write_that_rolls_midway_starts_each_segment_at_its_first_batch(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=1000, batch_size=300)
    log.append_lines(b"".join(b"%03d" % i + b"x" * 97 + b"\n" for i in range(30)))
    assert len(log.segments) > 2
    for segment in log.segments.all():
        assert next(iter_batches(segment.log_path.read_bytes())).base_offset == segment.base_offset
    log.close()


def test_batches_are_planned_with_their_keys(tmp_path):
    log = open_log(tmp_path / "t-0", batch_size=4096)
    log.append([b"v"] * 40, keys=[b"k" * 500] * 40)
    sizes = [b.size_in_bytes for b in iter_batches(log_file(tmp_path / "t-0", 0).read_bytes())]
    assert len(sizes) > 1 and max(sizes) <= 4096
    log.close()


def test_the_record_at_fault_is_named_by_its_offset_delta(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_before_max_ms=1000)
    with pytest.raises(InvalidTimestampError, match="of the record at offset delta 1 is out"):
        log.append_as_leader(build_batch(5, [b"a", b"b"], None, [NOW, NOW - 1001]))
    log.close()


def test_append_lines_compresses_at_the_topic_level(tmp_path):
    sizes = []
    for level in (1, 9):
        log = open_log(tmp_path / str(level), compression_type="gzip",
                       compression_gzip_level=level)
        log.append_lines(b"".join(bytes(range(i % 50, i % 50 + 100)) * 3 + b"\n"
                                  for i in range(200)))
        sizes.append(log.segments.active.size)
        log.close()
    assert sizes[1] < sizes[0]


def test_a_key_separator_missing_past_the_first_line_of_a_batch(tmp_path):
    log = open_log(tmp_path / "t-0")
    with pytest.raises(KeySeparatorMissingError, match="in line 2$"):
        log.append_lines(b"a\t1\nb 2\nc\t3\n", b"\t")
    log.close()


def test_markers_that_roll_index_their_aborted_transactions(tmp_path):
    """A coordinator's append of several markers that rolls goes batch by batch too, each
    ABORT's transaction into the .txnindex of the segment the marker lands in."""
    from storage.isolation import IsolationLevel

    log = open_log(tmp_path / "t-0", segment_bytes=600)
    log.append_as_leader(producer_batch(0, 2, pid=1, is_transactional=True))
    log.append_as_leader(producer_batch(0, 1, pid=2, size=150, is_transactional=True))
    data = b"".join(build_control_batch(0, pid, 0, ControlRecordType.ABORT, timestamp_ms=NOW)
                    for pid in (1, 2))
    assert log.append_as_leader(data) == (3, 4) and bases(log) == [0, 4]
    assert [t.producer_id for t in log.segments.all()[0].txn_index.all_aborted_txns()] == [1]
    assert [t.producer_id for t in log.segments.active.txn_index.all_aborted_txns()] == [2]
    assert log.reader.records_from(0, 10, IsolationLevel.READ_COMMITTED) == []
    log.close()
