"""One segment (storage.segment.LogSegment), modelled on Kafka's LogSegmentTest: appends and
their index entries, offset and timestamp lookups, truncation, recovery of a damaged .log or
index, roll rules at their bounds, and renames."""

import pytest

from storage.clock import FixedClock
from storage.config import LogConfig
from storage.errors import InvalidRecordError
from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.log_files import log_file
from storage.offset_index import IndexOffsetOverflowError
from storage.records import batch_at, build_batch
from storage.records.control import ControlRecordType, build_control_batch
from storage.records.framing import RECORD_BATCH_OVERHEAD
from storage.segment import LogSegment
from storage.transaction_index import AbortedTxn

NOW = 1_700_000_000_000
# LogSegmentTest's segment: an index entry after every 10 bytes, so one per batch
CONFIG = LogConfig(index_interval_bytes=10, segment_index_bytes=1000)


def records(offset, *values, timestamp=None):
    """One batch of ``values`` from ``offset``, each stamped ``timestamp`` (default offset*10,
    as LogSegmentTest's records)."""
    return build_batch(offset, [v.encode() for v in values], None,
                       offset * 10 if timestamp is None else timestamp)


def append(segment, batch_bytes, last_offset, max_timestamp=-1, offset_of_max=-1):
    segment.append(last_offset, max_timestamp, offset_of_max, batch_bytes)


@pytest.fixture
def segments(tmp_path):
    """Opens segments in ``tmp_path``; closes them after the test."""
    opened = []

    def open_segment(base, config=CONFIG, writable=True, clock=None, **kwargs):
        segment = LogSegment(tmp_path, base, config, writable, clock or FixedClock(NOW), **kwargs)
        opened.append(segment)
        return segment
    yield open_segment
    for segment in opened:
        segment.close()


def offsets_in(segment, position=0):
    return [batch.last_offset for _, batch in segment.scan_batches(position)]


# -- appends ------------------------------------------------------------------------------

@pytest.mark.parametrize("base, largest", [
    (0, -2**31), (0, 2**31), (1, 0), (100, 10), (2**31, 0), (2**31, 2**32),
])
def test_append_refuses_offsets_outside_the_segments_relative_range(segments, base, largest):
    """testAppendForLogSegmentOffsetOverflowException: largest - base must be in
    [0, Integer.MAX_VALUE]; nothing is written."""
    segment = segments(base)
    with pytest.raises(IndexOffsetOverflowError):
        append(segment, records(0, "hello"), largest)
    assert segment.size == 0 and log_file(segment.dir, base).stat().st_size == 0


def test_next_offset_follows_the_last_batch(segments):
    """testNextOffsetCalculation."""
    segment = segments(40)
    assert segment.read_next_offset() == 40
    append(segment, records(50, "hello", "there", "you"), 52)
    assert segment.read_next_offset() == 53


# -- finding a batch by offset --------------------------------------------------------------

def test_find_batch_on_an_empty_segment_is_none(segments):
    """testReadOnEmptySegment."""
    assert segments(40).find_batch(40) is None


def test_find_batch_before_the_first_offset_is_the_first_batch(segments):
    """testReadBeforeFirstOffset."""
    segment = segments(40)
    append(segment, records(50, "hello", "there", "little", "bee"), 53)
    position, batch = segment.find_batch(41)
    assert (position, batch.base_offset, batch.last_offset) == (0, 50, 53)


def test_find_batch_after_the_last_offset_is_none(segments):
    """testReadAfterLast."""
    segment = segments(40)
    append(segment, records(50, "hello", "there"), 51)
    assert segment.find_batch(51)[1].last_offset == 51
    assert segment.find_batch(52) is None


def test_find_batch_in_a_gap_is_the_next_batch(segments):
    """testReadFromGap: an offset no batch holds finds the first batch above it."""
    segment = segments(40)
    first = records(50, "hello", "there")
    append(segment, first, 51)
    append(segment, records(60, "alpha", "beta"), 61)
    position, batch = segment.find_batch(55)
    assert (position, batch.base_offset) == (len(first), 60)
    assert [r.value for r in segment.read_records(position, batch)] == [b"alpha", b"beta"]


# -- truncation -----------------------------------------------------------------------------

def test_truncate_to_cuts_the_batch_holding_the_offset_and_after(segments):
    """testTruncate: append two batches, cut the second, read the first alone, again and
    again; the bytes removed are the second batch's."""
    segment = segments(40)
    offset = 40
    for _ in range(30):
        first, second = records(offset, "hello"), records(offset + 1, "hello")
        append(segment, first, offset)
        append(segment, second, offset + 1)
        assert offsets_in(segment)[-2:] == [offset, offset + 1]
        assert segment.truncate_to(offset + 1) == len(second)
        assert offsets_in(segment)[-1] == offset and segment.read_next_offset() == offset + 1
        offset += 1


def test_truncate_to_an_offset_in_a_gap_cuts_the_batch_above_it(segments):
    """shouldTruncateEvenIfOffsetPointsToAGapInTheLog."""
    segment = segments(40)
    append(segment, records(40, "first message"), 40)
    append(segment, records(43, "message after gap"), 43)
    segment.truncate_to(41)
    assert offsets_in(segment) == [40]


def test_truncate_to_past_the_end_removes_nothing(segments):
    segment = segments(40)
    batch = records(40, "hello", "there")
    append(segment, batch, 41)
    assert segment.truncate_to(42) == 0
    assert segment.size == len(batch) and offsets_in(segment) == [41]


def test_truncating_an_empty_segment_leaves_room_in_its_indexes(tmp_path, segments):
    """testTruncateEmptySegment: a follower truncating to an empty segment must not roll it
    for a full (trimmed) index, nor for time: only an offset its index cannot hold rolls it."""
    clock = FixedClock(NOW)
    segments(0, clock=clock).close()  # trims its indexes to 0 bytes
    reopened = segments(0, clock=clock)
    assert reopened.offset_index.size_in_bytes == 0 and reopened.time_index.size_in_bytes == 0
    clock.ms += 500
    reopened.truncate_to(57)
    assert reopened.time_waited_for_roll(clock.ms, -1) == 0
    assert not reopened.offset_index.is_full() and not reopened.time_index.is_full()
    max_segment_ms = 300_000
    config = LogConfig(segment_ms=max_segment_ms, index_interval_bytes=10, segment_index_bytes=1000)
    reopened.config = config
    assert not reopened.should_roll(1024, -1, 100, clock.ms)
    clock.ms += max_segment_ms + 1
    assert reopened.time_waited_for_roll(clock.ms, -1) == max_segment_ms + 1
    assert not reopened.should_roll(1024, -1, 100, clock.ms)  # empty: never rolled for time
    assert reopened.should_roll(1024, -1, 2**31 - 1 + 200, clock.ms)


def test_truncating_the_whole_segment_restarts_its_roll_clock(segments):
    """testTruncateFull: an empty segment after truncation is as if created now, and takes
    the same offsets again."""
    clock = FixedClock(NOW)
    segment = segments(40, clock=clock)
    append(segment, records(40, "hello", "there", timestamp=-1), 41)
    clock.ms += 500
    assert segment.time_waited_for_roll(clock.ms, -1) == 500
    segment.truncate_to(0)
    assert segment.size == 0 and segment.find_batch(0) is None
    assert segment.time_waited_for_roll(clock.ms, -1) == 0
    assert not segment.offset_index.is_full() and not segment.time_index.is_full()
    append(segment, records(40, "hello", "there"), 41)
    assert offsets_in(segment) == [41]


def test_truncation_reloads_the_largest_timestamp_and_next_offset(tmp_path, segments):
    """testReloadLargestTimestampAndNextOffsetAfterTruncation: an index entry every second
    batch; after cutting to 41 no time-index entry remains and the largest timestamp is the
    remaining batch's."""
    size = len(records(0, "hello"))
    segment = segments(40, LogConfig(index_interval_bytes=2 * size - 1, segment_index_bytes=1000))
    for offset in range(40, 70):
        append(segment, records(offset, "hello"), offset, offset * 10, offset)
    assert segment.read_next_offset() == 70
    assert segment.time_index.entries == 30 // 2 - 1
    segment.truncate_to(41)
    assert segment.time_index.entries == 0
    assert segment.largest_timestamp == 400
    assert segment.read_next_offset() == 41


# -- timestamps -----------------------------------------------------------------------------

def test_find_offset_by_timestamp(segments):
    """testFindOffsetByTimestamp: a time-index entry every second batch; indexed and
    un-indexed targets, before the first and past the last."""
    size = len(records(0, "msg00"))
    segment = segments(40, LogConfig(index_interval_bytes=2 * size - 1, segment_index_bytes=1000))
    for offset in range(40, 50):
        append(segment, records(offset, "msg%d" % offset), offset, offset * 10, offset)
    assert segment.largest_timestamp == 490

    def found(timestamp, starting_offset=0):
        record = segment.find_offset_by_timestamp(timestamp, starting_offset)
        return None if record is None else record.offset
    assert (found(420), found(421)) == (42, 43)  # indexed
    assert (found(430), found(431)) == (43, 44)  # not indexed
    assert found(491) is None
    assert found(401) == 41
    assert found(399) == 40
    assert found(399, 45) == 45  # and at or after the starting offset


def test_first_batch_timestamp_is_the_first_batchs_max_timestamp(segments):
    """testGetFirstBatchTimestamp (kfs says -1 where Kafka says Long.MAX_VALUE: none)."""
    segment = segments(1)
    assert segment.first_batch_timestamp() == -1
    append(segment, build_batch(1, [b"one"], None, [1000]), 1, 1000, 1)
    append(segment, build_batch(2, [b"two"], None, [2000]), 2, 2000, 2)
    assert segment.first_batch_timestamp() == 1000


def test_first_batch_timestamp_of_a_reopened_segment_is_read_from_its_log(segments):
    segment = segments(1)
    append(segment, build_batch(1, [b"a", b"b"], None, [1000, 3000]), 2, 3000, 2)
    assert segments(1, writable=False).first_batch_timestamp() == 3000


# -- renames --------------------------------------------------------------------------------

def test_change_file_suffixes_renames_the_files_there_are(tmp_path, segments):
    """testChangeFileSuffixes: every file of the segment gets the new suffix, the .log first;
    a file not there (no transaction was aborted: no .txnindex) is not created."""
    segment = segments(40)
    append(segment, records(40, "hello"), 40)
    steps = []
    segment.change_file_suffixes(".deleted", steps.append)
    names = ["00000000000000000040" + kind for kind in (".log", ".index", ".timeindex")]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(n + ".deleted" for n in names)
    assert steps == ["renamed .log to .log.deleted", "renamed .index to .index.deleted",
                     "renamed .timeindex to .timeindex.deleted"]
    assert segment.log_path.name == names[0] + ".deleted"
    assert segment.offset_index.path.name == names[1] + ".deleted"
    assert segment.time_index.path.name == names[2] + ".deleted"
    assert segment.txn_index.path.name == "00000000000000000040.txnindex.deleted"
    assert segment.file_suffix == ".deleted" and offsets_in(segment) == [40]
    segment.change_file_suffixes("")  # and back, from the segment's own suffix
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


def test_a_cleaned_segment_is_named_by_its_suffix(tmp_path, segments):
    """The cleaner writes ``<base>.log.cleaned`` and so on (``LogSegment.open(..., fileSuffix)``)."""
    segment = segments(40, file_suffix=".cleaned")
    append(segment, records(40, "hello"), 40)
    assert segment.log_path.name == "00000000000000000040.log.cleaned"
    assert (tmp_path / "00000000000000000040.index.cleaned").exists()
    segment.rename_to_deleted()
    assert segment.log_path.name == "00000000000000000040.log.deleted"
    assert segment.is_file_on_disk()  # the same file under its new name


def test_delete_removes_every_file(tmp_path):
    segment = LogSegment(tmp_path, 40, CONFIG, True, FixedClock(NOW))
    append(segment, records(40, "hello"), 40)
    segment.delete()
    assert list(tmp_path.iterdir()) == []


# -- recovery -------------------------------------------------------------------------------

def test_recovery_fixes_a_corrupt_index(segments):
    """testRecoveryFixesCorruptIndex / testRecoveryFixesCorruptTimeIndex: nonsense written
    over both indexes; recovery rebuilds them from the .log, and every offset and timestamp
    is found again."""
    segment = segments(0, LogConfig(index_interval_bytes=10))  # room for 100 entries
    for offset in range(100):
        append(segment, records(offset, str(offset)), offset, offset * 10, offset)
    for index in (segment.offset_index, segment.time_index):
        index.flush()
        with open(index.path, "r+b") as f:
            f.seek(5)
            f.write(bytes(range(7, 250)) * 4)
    assert segment.recover() == 0
    for offset in range(100):
        assert segment.find_batch(offset)[1].last_offset == offset
        assert segment.find_offset_by_timestamp(offset * 10, 0).offset == offset
        if offset < 99:
            assert segment.find_offset_by_timestamp(offset * 10 + 1, 0).offset == offset + 1


def test_recovery_rebuilds_the_epoch_cache(tmp_path, segments):
    """testRecoveryRebuildsEpochCache: each epoch from the first batch carrying it."""
    segment = segments(100)
    for base, epoch in [(104, 0), (106, 1), (108, 1), (110, 2)]:
        append(segment, build_batch(base, [b"a", b"b"], None, 1000, partition_leader_epoch=epoch),
               base + 1)
    cache = LeaderEpochFileCache(tmp_path, True)
    segment.recover(cache)
    assert cache.entries == [(0, 104), (1, 106), (2, 110)]


@pytest.mark.parametrize("tail", [1, 15, 61])
def test_recovery_cuts_a_torn_tail_however_short(segments, tail):
    """testRecoveryWithCorruptMessage's tail: bytes after the last whole batch, even one, are
    cut, after ``before_cut`` is told where and that the batch is torn (no problem)."""
    segment = segments(0)
    for offset in range(3):
        append(segment, records(offset, "v"), offset, offset * 10, offset)
    size = segment.size
    with open(segment.log_path, "ab") as f:
        f.write(records(3, "v")[:tail])
    cuts = []
    assert segment.recover(before_cut=lambda *cut: cuts.append(cut)) == tail
    assert cuts == [(size, 3, None)]
    assert segment.size == size == segment.log_path.stat().st_size
    assert segment.read_next_offset() == 3


def test_recovery_of_records_stamped_zero_indexes_their_time(segments):
    """Timestamp 0 is a time (-1 is none): the final time-index entry names it."""
    segment = segments(0, LogConfig())  # one index entry per 4096 bytes: none from the batches
    append(segment, records(0, "a", "b", timestamp=0), 1, 0, 0)
    segment.recover()
    assert segment.time_index.entries == 1 and segment.time_index.last_entry == (0, 1)
    assert segment.max_timestamp_and_offset_so_far == (0, 1)


def test_recovery_without_any_timestamp_leaves_the_time_index_empty(segments):
    segment = segments(0, LogConfig())
    append(segment, records(0, "a", "b", timestamp=-1), 1)
    segment.recover()
    assert segment.time_index.entries == 0
    assert segment.largest_timestamp == segment.modified_ms()


# -- reads ------------------------------------------------------------------------------------

@pytest.mark.parametrize("interval, value_size", [
    (10, 1),  # every batch indexed: found by the index alone
    (10**6, 1),  # none: found by a scan
    (10**6, 40_000),  # batches larger than a scan's read block: read whole again
])
def test_lookups_pass_nowait_to_every_read(segments, monkeypatch, interval, value_size):
    """A lookup on an event loop (``nowait=True``) must never wait for the disk in any of its
    reads, and a plain one never asks not to."""
    segment = segments(40, LogConfig(index_interval_bytes=interval))
    for offset in (40, 42, 44):
        append(segment, records(offset, "a" * value_size, "b"), offset + 1, offset * 10, offset)
    asked = []
    read_at = segment.source.read_at
    monkeypatch.setattr(segment.source, "read_at",
                        lambda position, size, nowait=False: asked.append(nowait)
                        or read_at(position, size, nowait))
    for nowait in (False, True):
        asked.clear()
        kwargs = {"nowait": True} if nowait else {}
        position, batch = segment.find_batch(43, **kwargs)
        header = batch_at(read_at(position, RECORD_BATCH_OVERHEAD))  # not the whole batch
        assert not header.is_complete
        read = segment.read_batch(position, header, **kwargs)
        assert (read.base_offset, [r.value for r in read.records()]) == (42, [b"a" * value_size, b"b"])
        assert segment.find_offset_by_timestamp(420, 0, **kwargs).offset == 42
        assert asked and set(asked) == {nowait}


def test_read_into_stops_at_the_segment_size(segments):
    segment = segments(0)
    append(segment, records(0, "hello"), 0)
    size = segment.size
    with open(segment.log_path, "ab") as f:
        f.write(b"x" * 100)  # another writer's bytes, not yet taken in
    buffer = bytearray(1000)
    assert bytes(segment.read_into(buffer, 10)) == segment.read_at(10, size - 10)
    assert len(segment.read_into(buffer, size)) == 0
    assert len(segment.read_into(bytearray(4), 0)) == 4


def test_index_room_is_the_fuller_index_s_with_one_time_slot_spare(segments):
    """Offset entries are 8 bytes, time entries 12, and the time index keeps a slot for its
    final entry (``TimeIndex.isFull``: one early)."""
    segment = segments(0, LogConfig(index_interval_bytes=10, segment_index_bytes=120))
    assert segment.index_room() == min(120 // 8, 120 // 12 - 1)
    for offset in range(3):
        append(segment, records(offset, "v"), offset, offset * 10, offset)
    # the first batch is not indexed (nothing was appended before it): 2 entries each
    assert (segment.offset_index.entries, segment.time_index.entries) == (2, 2)
    assert segment.index_room() == min(120 // 8 - 2, 120 // 12 - 2 - 1)
    for offset in range(3, 10):
        append(segment, records(offset, "v"), offset, offset * 10, offset)
    assert segment.index_room() == 0 and segment.should_roll(1, 90, 10, NOW)


# -- roll rules -------------------------------------------------------------------------------

def test_should_roll_by_size_past_segment_bytes_only(segments):
    batch = records(0, "hello")
    segment = segments(0, LogConfig(segment_bytes=len(batch) + 100))
    append(segment, batch, 0, 0, 0)
    assert not segment.should_roll(100, 0, 1, NOW)  # exactly segment.bytes: fits
    assert segment.should_roll(101, 0, 1, NOW)


def test_should_roll_by_time_past_segment_ms_minus_jitter(segments):
    segment = segments(0, LogConfig(segment_ms=1000))
    append(segment, records(0, "hello", timestamp=5000), 0, 5000, 0)
    assert segment.roll_jitter_ms == 0
    assert not segment.should_roll(1, 6000, 1, NOW)  # exactly segment.ms waited
    assert segment.should_roll(1, 6001, 1, NOW)
    segment.roll_jitter_ms = 100
    assert not segment.should_roll(1, 5900, 1, NOW)
    assert segment.should_roll(1, 5901, 1, NOW)


def test_roll_jitter_is_drawn_below_the_smaller_of_jitter_and_segment_ms(segments, monkeypatch):
    drawn = []
    monkeypatch.setattr("storage.segment.random.randrange", lambda n: drawn.append(n) or n - 1)
    segment = segments(0, LogConfig(segment_ms=100, segment_jitter_ms=1000))
    assert drawn == [100] and segment.roll_jitter_ms == 99


def test_time_waited_counts_from_a_first_batch_stamped_zero(segments):
    segment = segments(0, clock=FixedClock(NOW))
    append(segment, records(0, "hello", timestamp=0), 0, 0, 0)
    assert segment.time_waited_for_roll(NOW + 7, 500) == 500


def test_truncate_to_drops_the_aborted_transactions_from_the_offset(segments):
    segment = segments(0)
    for offset in range(0, 6, 2):
        append(segment, records(offset, "a", "b"), offset + 1)
    segment.txn_index.append(AbortedTxn(7, 0, 1, 0))
    segment.txn_index.append(AbortedTxn(8, 2, 5, 2))
    segment.truncate_to(4)
    assert [t.producer_id for t in segment.txn_index.all_aborted_txns()] == [7]


def test_delete_of_a_segment_whose_log_is_gone(tmp_path):
    segment = LogSegment(tmp_path, 0, CONFIG, True, FixedClock(NOW))
    segment.log_path.unlink()
    segment.delete()
    assert list(tmp_path.iterdir()) == []


# -- following another writer -----------------------------------------------------------------

def test_a_followed_segment_s_tail(segments):
    """Nothing taken in yet: the tail is unchanged; an empty segment's whole batches end at 0."""
    writer = segments(0)
    reader = segments(0, writable=False)
    assert reader.tail_unchanged() and reader.last_whole_batch_end() == 0
    append(writer, records(0, "a"), 0)
    assert reader.catch_up() == 1 and reader.tail_unchanged()
    assert reader.catch_up() is None


def test_resume_appends_keeps_the_earlier_batch_of_a_tied_largest_timestamp(tmp_path, segments):
    """``loadLargestTimestamp``: the first batch with the largest timestamp names it."""
    writer = LogSegment(tmp_path, 0, LogConfig(), True, FixedClock(NOW))
    append(writer, records(0, "a", timestamp=500), 0, 500, 0)
    append(writer, records(1, "b", timestamp=500), 1, 500, 0)
    writer.close()
    segment = segments(0, LogConfig())
    segment.resume_appends()
    assert segment.max_timestamp_and_offset_so_far == (500, 0)


def test_producer_batches_are_those_with_a_producer_id_or_control(segments):
    segment = segments(0)
    parts = [records(0, "plain"),
             build_batch(1, [b"p"], None, 10, producer_id=7, producer_epoch=0, base_sequence=0,
                         is_transactional=True),
             records(2, "plain"),
             build_control_batch(3, 7, 0, ControlRecordType.ABORT, timestamp_ms=30)]
    for offset, part in enumerate(parts):
        append(segment, part, offset)
    starts = [sum(len(p) for p in parts[:i]) for i in range(4)]
    found = [(p, b.base_offset, b.size_in_bytes) for p, b in segment.producer_batches(0)]
    assert found == [(starts[1], 1, len(parts[1])), (starts[3], 3, len(parts[3]))]
    assert [r.value for _, b in segment.producer_batches(0) for r in b.records()][0] == b"p"
    assert [p for p, _ in segment.producer_batches(starts[2])] == [starts[3]]
    known = [(p, b.base_offset) for p, b in segment.producer_batches(starts[2], [starts[1], starts[3]])]
    assert known == [(starts[3], 3)]


def test_producer_batches_raise_kafka_s_error_for_bytes_that_are_not_batches(segments):
    segment = segments(0)
    append(segment, records(0, "plain"), 0)
    with open(segment.log_path, "r+b") as f:
        f.seek(16)
        f.write(b"\x09")  # magic 9
    with pytest.raises(InvalidRecordError, match="magic 9"):
        list(segment.producer_batches(0))


# -- legacy (v0/v1) entries -------------------------------------------------------------------

def legacy_entries(count, value_size=10, base=0):
    """``count`` uncompressed v1 entries from offset ``base`` (kafka-python, an independent
    writer), stamped 1000 + 10 * offset; their bytes and start positions (and the end)."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder
    builder = LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 30)
    for offset in range(base, base + count):
        builder.append(offset, 1000 + 10 * offset, None, b"%0*d" % (value_size, offset))
    data = bytes(builder.build())
    starts, position = [], 0
    while position < len(data):
        starts.append(position)
        position += int.from_bytes(data[position + 8:position + 12], "big") + 12
    return data, starts + [len(data)]


def test_recovery_indexes_each_legacy_entry_as_a_shallow_batch(tmp_path, segments):
    """Kafka's ``LogSegment.recover`` over v1 entries: each is a batch of its own, indexed by
    its offset at its position once 10 bytes were passed (all but the first)."""
    data, starts = legacy_entries(20)
    log_file(tmp_path, 0).write_bytes(data)
    segment = segments(0)
    assert segment.recover() == 0 and segment.size == len(data)
    offset_index = [segment.offset_index.entry(s) for s in range(segment.offset_index.entries)]
    assert offset_index == [(o, starts[o]) for o in range(1, 20)]
    time_index = [segment.time_index.entry(s) for s in range(segment.time_index.entries)]
    assert time_index == [(1000 + 10 * o, o) for o in range(1, 20)]
    assert segment.max_timestamp_and_offset_so_far == (1190, 19)


def test_recovery_reads_a_legacy_entry_across_its_block(tmp_path, segments):
    """Entries are checked a 1 MiB block at a time: the one crossing a block's end is read
    whole."""
    data, starts = legacy_entries(400, value_size=3000)
    assert len(data) > 1 << 20
    log_file(tmp_path, 0).write_bytes(data)
    segment = segments(0, LogConfig(index_interval_bytes=10))
    assert segment.recover() == 0
    assert segment.offset_index.entries == 399 and segment.read_next_offset() == 400


@pytest.mark.parametrize("damage", ["crc", "torn"])
def test_recovery_cuts_at_a_damaged_legacy_entry(tmp_path, segments, damage):
    data, starts = legacy_entries(5)
    if damage == "crc":
        data = bytearray(data)
        data[starts[4] - 1] ^= 1  # the 4th entry's value
        data = bytes(data)
    else:
        data = data[:starts[4] - 1]
    log_file(tmp_path, 0).write_bytes(data)
    segment = segments(0)
    cuts = []
    assert segment.recover(before_cut=lambda *cut: cuts.append(cut)) == len(data) - starts[3]
    position, next_offset, problem = cuts[0]
    assert (position, next_offset) == (starts[3], 3)
    assert (problem is None) if damage == "torn" else "corrupt" in problem
    assert segment.size == starts[3] and segment.read_next_offset() == 3


def test_an_append_may_end_at_2_gib_but_not_past_it(segments):
    """A segment's positions are int32s: it may reach 2**31 - 1 bytes (a sparse file here)."""
    batch = records(0, "hello")
    segment = segments(0)
    segment.size = 2**31 - len(batch)
    with pytest.raises(ValueError, match=f"{segment.log_path} would exceed 2 GiB"):
        append(segment, batch, 0)
    assert segment.log_path.stat().st_size == 0
    segment.size -= 1
    append(segment, batch, 0)
    assert segment.size == 2**31 - 1 == segment.log_path.stat().st_size


def test_scan_batches_across_its_read_blocks(segments):
    """Headers cut where a 32 KiB read block ends are read again from their start."""
    segment = segments(0, LogConfig(index_interval_bytes=10**6))
    starts, offset = [], 0
    while segment.size < 100_000:
        starts.append(segment.size)
        append(segment, records(offset, "x" * (offset * 37 % 1500)), offset)
        offset += 1
    assert [p for p, _ in segment.scan_batches(0)] == starts
    assert [p for p, _ in segment.scan_batches(starts[5], starts[-3])] == starts[5:-3]
    assert [b.last_offset for _, b in segment.scan_batches(starts[-2])] == [offset - 2, offset - 1]


def test_a_read_only_segment_never_creates_its_log(tmp_path):
    with pytest.raises(FileNotFoundError):
        LogSegment(tmp_path, 0, CONFIG, False, FixedClock(NOW))
    assert list(tmp_path.iterdir()) == []


def test_a_new_segment_counts_index_bytes_from_zero(segments):
    """``LogSegment.append``: an entry once more than ``index.interval.bytes`` were appended
    since the last; with the interval one batch, the third batch is the first indexed."""
    size = len(records(0, "v"))
    segment = segments(0, LogConfig(index_interval_bytes=size))
    for offset in range(3):
        append(segment, records(offset, "v"), offset, offset * 10, offset)
    assert [segment.offset_index.entry(s) for s in range(segment.offset_index.entries)] == [
        (2, 2 * size)]


@pytest.mark.parametrize("torn", [False, True])
def test_recovery_of_legacy_entries_after_v2_batches_in_one_block(tmp_path, segments, torn):
    """Entries written after v2 batches (a broker whose message format was lowered) are
    checked inside the block the v2 batches came in: the one crossing the 1 MiB block's end is
    read whole, and a torn one at the end is cut as torn."""
    v2, offset = [], 0
    while sum(map(len, v2)) < (1 << 20) - 2000:
        v2.append(records(offset, "x" * 1000))
        offset += 1
    legacy, starts = legacy_entries(2, value_size=3000, base=offset)
    data = b"".join(v2) + legacy
    assert sum(map(len, v2)) + starts[1] > 1 << 20  # the first entry crosses the block's end
    log_file(tmp_path, 0).write_bytes(data[:-1] if torn else data)
    segment = segments(0, LogConfig(index_interval_bytes=10**6))
    cuts = []
    truncated = segment.recover(before_cut=lambda *cut: cuts.append(cut))
    if torn:
        assert truncated == starts[2] - starts[1] - 1
        assert cuts == [(len(data) - starts[2] + starts[1], offset + 1, None)]
    else:
        assert truncated == 0 and segment.read_next_offset() == offset + 2


def test_recovery_says_what_it_found_and_cut(tmp_path, segments, caplog):
    data, starts = legacy_entries(3)
    log_file(tmp_path, 0).write_bytes(data)
    segment = segments(0)
    with caplog.at_level("WARNING", logger="storage.segment"):
        segment.recover()
        assert caplog.messages == []  # intact: nothing found, nothing cut
        with open(segment.log_path, "r+b") as f:
            f.seek(starts[2] + 16)
            f.write(b"\x09")  # the third entry's magic
        segment.recover()
    path = segment.log_path
    assert caplog.messages[0].startswith(f"found invalid data in {path} at byte {starts[2]}: ")
    assert "magic" in caplog.messages[0]
    assert caplog.messages[1] == f"truncating {path} from {starts[3]} to {starts[2]} bytes"


def test_find_offset_by_timestamp_skips_control_batches(segments):
    """No consumer sees a transaction marker: a marker stamped after the target is no answer."""
    segment = segments(0)
    append(segment, build_batch(0, [b"p"], None, 10, producer_id=7, producer_epoch=0,
                                base_sequence=0, is_transactional=True), 0)
    append(segment, build_control_batch(1, 7, 0, ControlRecordType.COMMIT, timestamp_ms=50), 1)
    assert segment.find_offset_by_timestamp(20, 0) is None
    append(segment, records(2, "after", timestamp=60), 2)
    assert segment.find_offset_by_timestamp(20, 0).offset == 2


def test_recovery_of_a_legacy_entry_inside_a_v2_block(tmp_path, segments):
    """The first entry after v2 batches is checked where it lies in their block."""
    v2 = b"".join(records(offset, "v2") for offset in range(3))
    legacy, starts = legacy_entries(2, base=3)
    log_file(tmp_path, 0).write_bytes(v2 + legacy)
    segment = segments(0)
    assert segment.recover() == 0 and segment.read_next_offset() == 5
    assert segment.offset_index.entry(segment.offset_index.entries - 2) == (3, len(v2))


def test_resume_appends_drops_a_final_time_entry_past_the_last_indexed_batch(tmp_path, segments):
    """A close's final time-index entry names a batch after the last offset-index entry; the
    next writer drops it (it writes it again at its own close)."""
    size = len(records(0, "v"))
    config = LogConfig(index_interval_bytes=size)  # batches 0, 1 and 3 not indexed
    writer = LogSegment(tmp_path, 0, config, True, FixedClock(NOW))
    for offset in range(4):
        append(writer, records(offset, "v"), offset, offset * 10, offset)
    writer.close()  # the final entry: (30, 3)
    segment = segments(0, config)
    assert segment.time_index.last_entry == (30, 3)
    segment.resume_appends()
    assert segment.offset_index.last_offset == 2 and segment.time_index.last_entry == (20, 2)
    assert segment.max_timestamp_and_offset_so_far == (30, 3)
