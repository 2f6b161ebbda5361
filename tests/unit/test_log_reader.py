"""The reads of a partition's log (storage.log_reader) around damage and over whole batches:
records read around a batch that cannot be read, where intact batches end and start again
(Kafka's ``LogSegment.recover`` checks, as LogSegmentTest's recovery tests corrupt a batch),
a bare ``.log``'s whole batches read a block at a time (``FileLogInputStream``), and errors
naming the segment they come from."""

import os

import pyarrow as pa
import pytest

from storage import LogConfig
from storage.damage import LogDamage
from storage.errors import CorruptRecordError
from storage.isolation import IsolationLevel
from storage.log import Log
from storage.log_reader import _COLUMN_BLOCK, LogReader
from storage.records import build_batch
from storage.records.framing import base_offset_at
from storage.segment import LogSegment

NAME = "00000000000000000000.log"


def batches(*bases):
    """A 2-record batch at each base offset (values ``value-N``)."""
    return [build_batch(o, [b"value-%d" % o, b"value-%d" % (o + 1)], None, 1000) for o in bases]


def write_segment(tmp_path, damage=None):
    """A .log of four 2-record batches (offsets 0-1, 2-3, 4-5, 6-7), ``damage`` applied to its
    bytes; the opened segment and the batches' start positions (and the end)."""
    built = batches(0, 2, 4, 6)
    starts = [sum(len(b) for b in built[:i]) for i in range(5)]
    data = bytearray(b"".join(built))
    if damage:
        damage(data, starts)
    (tmp_path / NAME).write_bytes(bytes(data))
    return LogSegment(tmp_path, 0, LogConfig(), False), starts


def flip_last_byte_of(k):
    """Damage the k-th batch's CRC (its last byte: a record's)."""
    def damage(data, starts):
        data[starts[k + 1] - 1] ^= 1
    return damage


def base_offset_of(k, offset):
    """The k-th batch's header says base offset ``offset`` (not under its CRC)."""
    def damage(data, starts):
        data[starts[k]:starts[k] + 8] = offset.to_bytes(8, "big")
    return damage


# -- where intact batches end ---------------------------------------------------------------

def test_intact_end_of_an_intact_segment_is_its_size(tmp_path):
    segment, starts = write_segment(tmp_path)
    end, problem = LogReader.intact_end(segment, 0)
    assert (end, problem) == (starts[4], None)
    assert LogReader.intact_end(segment, starts[2])[0] == starts[4]
    segment.close()


def test_intact_end_stops_before_a_corrupt_batch(tmp_path):
    """LogSegmentTest.testRecoveryWithCorruptMessage: the batches before the bad one are
    intact; from the bad one nothing is."""
    segment, starts = write_segment(tmp_path, flip_last_byte_of(1))
    end, problem = LogReader.intact_end(segment, 0)
    assert end == starts[1] and problem is not None and "crc" in problem
    end, problem = LogReader.intact_end(segment, starts[1])
    assert end == starts[1] and "crc" in problem
    assert LogReader.intact_end(segment, starts[2])[0] == starts[4]  # intact again after it
    segment.close()


def test_intact_end_expects_the_offsets_the_first_batch_names(tmp_path):
    """From a position the offsets must follow on from the batch found there, not from the
    segment's base offset."""
    segment, starts = write_segment(tmp_path, base_offset_of(3, 5))  # 4-5 then 5-6: overlap
    end, problem = LogReader.intact_end(segment, starts[2])
    assert end == starts[3] and problem is not None
    assert LogReader.intact_end(segment, starts[3])[0] == starts[4]  # alone it is intact
    segment.close()


# -- the damaged run and where batches start again --------------------------------------------

def test_a_damaged_run_names_the_offsets_lost_and_where_reading_resumes(tmp_path):
    segment, starts = write_segment(tmp_path, flip_last_byte_of(1))
    damage, resume, after = LogReader.damaged_run(segment, starts[1], 2, "CRC mismatch")
    assert damage == LogDamage(NAME, starts[1], 2, "CRC mismatch", 3)
    assert (resume, after) == (starts[2], 4)
    segment.close()


def test_a_damaged_run_to_the_end_of_the_segment(tmp_path):
    segment, starts = write_segment(tmp_path, flip_last_byte_of(3))
    damage, resume, after = LogReader.damaged_run(segment, starts[3], 6, "bad")
    assert damage == LogDamage(NAME, starts[3], 6, "bad", None)
    assert (resume, after) == (starts[4], None)
    segment.close()


@pytest.mark.parametrize("claimed, lost", [
    (3, 3),    # between the offsets read and the next intact batch: believed
    (2, 2),
    (4, 4),    # at the next intact batch's own offset: still believable
    (99, 2),   # past the next intact batch: the offsets read are the bound
    (1, 2),    # below the offsets read: not believed
])
def test_a_damaged_headers_offset_is_believed_only_between_its_neighbours(tmp_path, claimed,
                                                                         lost):
    def damage(data, starts):
        flip_last_byte_of(1)(data, starts)
        base_offset_of(1, claimed)(data, starts)

    segment, starts = write_segment(tmp_path, damage)
    damage_found, resume, after = LogReader.damaged_run(segment, starts[1], 2, "bad")
    assert damage_found.offset == lost and damage_found.last_offset == 3
    assert (resume, after) == (starts[2], 4)
    segment.close()


def test_a_damaged_headers_offset_with_nothing_after_it(tmp_path):
    def damage(data, starts):
        flip_last_byte_of(3)(data, starts)
        base_offset_of(3, 9)(data, starts)

    segment, starts = write_segment(tmp_path, damage)
    assert LogReader.damaged_run(segment, starts[3], 6, "bad")[0].offset == 9
    segment.close()


# -- whole batches and blocks -----------------------------------------------------------------

@pytest.mark.parametrize("block_size", [1 << 20, 100, 1])
def test_whole_batches_start_in_the_range_given(tmp_path, block_size):
    """FileLogInputStream: every batch starting in [position, end), read a block at a time
    (a batch larger than the block is still whole)."""
    segment, starts = write_segment(tmp_path)
    got = [b.base_offset for b in LogReader.whole_batches(segment, 0, starts[4], block_size)]
    assert got == [0, 2, 4, 6]
    got = [b.base_offset for b in LogReader.whole_batches(segment, starts[1], starts[3],
                                                          block_size)]
    assert got == [2, 4]
    got = [b.base_offset for b in LogReader.whole_batches(segment, starts[1], starts[3] - 1,
                                                          block_size)]
    assert got == [2, 4]  # the last starts before the end: whole, though it crosses it
    segment.close()


def test_whole_batches_stop_at_a_torn_batch(tmp_path):
    def torn(data, starts):
        del data[starts[4] - 5:]

    segment, starts = write_segment(tmp_path, torn)
    assert [b.base_offset for b in LogReader.whole_batches(segment, 0, segment.size, 64)] == \
        [0, 2, 4]
    segment.close()


def test_whole_batches_reuse_the_buffer_given(tmp_path):
    segment, starts = write_segment(tmp_path)
    buffer = bytearray(starts[1])
    values = []
    for batch in LogReader.whole_batches(segment, 0, starts[4], buffer=buffer):
        values.append([r.value for r in batch.records()])
    assert values == [[b"value-%d" % o, b"value-%d" % (o + 1)] for o in (0, 2, 4, 6)]
    segment.close()


@pytest.mark.parametrize("block_size", [1 << 20, 64])
def test_blocks_start_at_a_batch_and_cover_the_range(tmp_path, block_size):
    segment, starts = write_segment(tmp_path)
    data = (tmp_path / NAME).read_bytes()
    blocks = LogReader.blocks(segment, starts[1], starts[3], block_size=block_size)
    firsts, read = [], b""
    for block in blocks:
        firsts.append(base_offset_at(block))
        size = int.from_bytes(bytes(block[8:12]), "big") + 12  # the first batch, whole
        read += bytes(block[:size])
        blocks.advance(size)
    assert read == data[starts[1]:starts[3]]
    assert firsts == [2, 4]
    buffer = bytearray(block_size)
    blocks = LogReader.blocks(segment, 0, None, block_size=block_size, buffer=buffer)
    total = 0
    for block in blocks:
        size = int.from_bytes(bytes(block[8:12]), "big") + 12
        total += size
        blocks.advance(size)
    assert total == starts[4]
    segment.close()


# -- reading around damage in a log -----------------------------------------------------------

def open_log(tmp_path, *segments):
    """A log of the given segments, each a list of batch base offsets (2 records a batch)."""
    path = tmp_path / "t-0"
    path.mkdir()
    log = Log(path, "t", 0, LogConfig())
    for i, bases in enumerate(segments):
        if i:
            log.roll()
        log.append_batches(b"".join(batches(*bases)))
    log.flush()
    return log


def corrupt(log, segment_index, batch_index, at=-1, value=None):
    """Damage a batch of a segment of ``log`` on disk: its byte ``at`` (from the batch's start;
    -1: its last) flipped or set to ``value``."""
    segment = log.segments.all()[segment_index]
    positions = [pos for pos, _ in segment.scan_batches(0)] + [segment.size]
    where = positions[batch_index] + at if at >= 0 else positions[batch_index + 1] + at
    fd = os.open(segment.log_path, os.O_RDWR)
    try:
        old = os.pread(fd, 1, where)[0]
        os.pwrite(fd, bytes([old ^ 1 if value is None else value]), where)
    finally:
        os.close(fd)
    return positions[batch_index]


def flat(items):
    out = []
    for item in items:
        out.append(item if isinstance(item, LogDamage) else [r.offset for r in item])
    return out


def test_readable_records_of_an_intact_log_are_its_records(tmp_path):
    log = open_log(tmp_path, [0, 2], [4, 6], [8])
    reader = log.reader
    assert flat(reader.readable_record_lists(0)) == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
    assert flat(reader.readable_record_lists(3)) == [[3], [4, 5], [6, 7], [8, 9]]
    assert flat(reader.readable_record_lists(5)) == [[5], [6, 7], [8, 9]]
    assert flat(reader.readable_record_lists(8)) == [[8, 9]]
    assert flat(reader.readable_record_lists(10)) == []
    assert flat(reader.readable_record_lists(-5)) == flat(reader.readable_record_lists(0))
    log.close()


def test_readable_records_step_over_a_corrupt_batch(tmp_path):
    """A batch failing its CRC comes as a LogDamage in its place, naming its segment, position
    and offsets; the records go on after it."""
    log = open_log(tmp_path, [0, 2, 4], [6, 8])
    position = corrupt(log, 0, 1)
    got = flat(log.reader.readable_record_lists(0))
    assert got[:1] == [[0, 1]] and got[2:] == [[4, 5], [6, 7], [8, 9]]
    damage = got[1]
    assert (damage.file, damage.position, damage.offset, damage.last_offset) == \
        (NAME, position, 2, 3)
    assert "crc" in damage.reason
    got = flat(log.reader.readable_record_lists(3))
    assert got[0].offset == 3 and got[1:] == [[4, 5], [6, 7], [8, 9]]  # from where it starts
    log.close()


def test_readable_records_go_on_in_the_next_segment_after_headers_that_cannot_be_walked(
        tmp_path):
    """A batch whose length is below any batch's cannot be stepped over: the rest of that
    segment is one LogDamage without a position, and reading goes on in the next one."""
    log = open_log(tmp_path, [0, 2, 4], [6, 8])
    corrupt(log, 0, 1, at=11, value=5)  # its length: 5 bytes
    got = flat(log.reader.readable_record_lists(0))
    assert got == [[0, 1], LogDamage(NAME, None, 2, "Found record size 5 smaller than minimum "
                                     "record overhead (14) at position 89"), [6, 7], [8, 9]]
    got = flat(log.reader.readable_record_lists(3))
    assert got[0].offset == 3 and got[1:] == [[6, 7], [8, 9]]
    log.close()


def test_readable_records_stop_at_the_visible_end(tmp_path):
    log = open_log(tmp_path, [0, 2], [4])
    assert flat(log.reader.readable_record_lists(0, IsolationLevel.READ_COMMITTED)) == \
        [[0, 1], [2, 3], [4, 5]]
    log.close()


def test_a_corrupt_batch_read_names_its_segment_and_position(tmp_path):
    """A reader of many partitions says which .log and byte the error comes from."""
    log = open_log(tmp_path, [0, 2, 4])
    position = corrupt(log, 0, 1)
    log.reader.clear_cache()
    with pytest.raises(CorruptRecordError) as err:
        list(log.reader.record_lists(0))
    assert str(err.value).startswith(f"{NAME}, from byte {position}: ")
    log.close()


def test_a_read_committed_timestamp_lookup_takes_a_record_stamped_exactly_the_target(tmp_path):
    """ListOffsets: the first record with timestamp >= the target, the target included, as a
    read_committed consumer sees it too (UnifiedLog.fetchOffsetByTimestamp)."""
    path = tmp_path / "t-0"
    path.mkdir()
    log = Log(path, "t", 0, LogConfig())
    log.append_batches(build_batch(0, [b"a", b"b"], None, [1000, 2000]) +
                       build_batch(2, [b"c"], None, 3000))
    for isolation in IsolationLevel:
        assert log.reader.find_offset_by_timestamp(2000, isolation).offset == 1
        assert log.reader.find_offset_by_timestamp(2001, isolation).offset == 2
        assert log.reader.find_offset_by_timestamp(3001, isolation) is None
    log.close()


# -- the one decode of a range (Arrow columns, a stream's chunks) -----------------------------

def offsets_decoded(reader, *args, **kwargs):
    from storage.records.columns import RecordColumns

    columns = RecordColumns()
    for _ in reader.decode_range(columns, *args, **kwargs):
        pass
    return columns.to_arrow().column("offset").to_pylist()


def open_transaction_log(tmp_path):
    """Offsets 0-1 plain, 2-3 a transaction still open (the last stable offset is 2)."""
    path = tmp_path / "t-0"
    path.mkdir()
    log = Log(path, "t", 0, LogConfig())
    log.append_batches(build_batch(0, [b"a", b"b"], None, 1000) +
                       build_batch(2, [b"c", b"d"], None, 1000, producer_id=7,
                                   producer_epoch=0, base_sequence=0, is_transactional=True))
    return log


def test_a_segments_decode_ends_at_the_readers_visible_end(tmp_path):
    """With a segment (a stream's chunk) and no end: the records up to the reader's visible end
    (the last stable offset for read_committed), from the segment's first byte."""
    log = open_transaction_log(tmp_path)
    segment = log.segments.all()[0]
    reader = log.reader
    assert offsets_decoded(reader, 0, segment=segment) == [0, 1, 2, 3]
    assert offsets_decoded(reader, 0, isolation=IsolationLevel.READ_COMMITTED,
                           segment=segment) == [0, 1]
    assert offsets_decoded(reader, 0, 3, segment=segment) == [0, 1, 2]  # an end given: kept
    assert offsets_decoded(reader, 1, 3, segment=segment) == [1, 2]
    assert offsets_decoded(reader, 3, 3, segment=segment) == []
    assert offsets_decoded(reader, 0, 2) == [0, 1]
    log.close()


def test_decode_reads_into_the_buffer_given(tmp_path):
    log = open_transaction_log(tmp_path)
    buffer = bytearray(4096)
    assert offsets_decoded(log.reader, 0, buffer=buffer) == [0, 1, 2, 3]
    data = (tmp_path / "t-0" / NAME).read_bytes()
    assert bytes(buffer[:len(data)]) == data  # the blocks were read into it
    log.close()


def test_a_corrupt_batch_decoded_names_its_segment_and_position(tmp_path):
    log = open_log(tmp_path, [0, 2, 4])
    corrupt(log, 0, 1)
    with pytest.raises(CorruptRecordError) as err:
        offsets_decoded(log.reader, 0)
    assert str(err.value).startswith(f"{NAME}, from byte 0: ")  # the block's first byte
    log.close()


def test_columns_have_no_headers_unless_asked(tmp_path):
    log = open_log(tmp_path, [0])
    (plain,) = log.reader.read_columns(0)
    assert "headers" not in plain.schema.names and plain.num_rows == 2
    (with_headers,) = log.reader.read_columns(0, headers=True)
    assert "headers" in with_headers.schema.names
    log.close()


def test_a_bulk_read_leaves_the_decoded_batch_cache_alone(tmp_path):
    from storage.log_reader import decoded_batch_cache

    log = open_log(tmp_path, [0, 2])
    cache = decoded_batch_cache()
    reader = LogReader(log, cache)
    segment = log.segments.all()[0]
    first = next(pos for pos, _ in segment.scan_batches(0))
    assert [len(r) for r in reader.record_lists(0, cache=False)] == [2, 2]
    assert cache.get((reader, segment, first)) is None
    assert [len(r) for r in reader.record_lists(0)] == [2, 2]
    assert [r.offset for r in cache.get((reader, segment, first))] == [0, 1]
    other = LogReader(log, cache)  # another log's reader sharing the directory's cache
    other.clear_cache()
    assert cache.get((reader, segment, first)) is not None  # its own only
    reader.clear_cache()
    assert cache.get((reader, segment, first)) is None
    log.close()


@pytest.mark.parametrize("damaged", [1, 2])
def test_readable_records_name_the_segment_whose_headers_cannot_be_walked(tmp_path, damaged):
    """Damage in a later segment is that segment's, reported once; the segments around it are
    read whole."""
    log = open_log(tmp_path, [0, 2], [4, 6], [8, 10])
    corrupt(log, damaged, 1, at=11, value=5)
    name = log.segments.all()[damaged].log_path.name
    got = flat(log.reader.readable_record_lists(0))
    damage = [g for g in got if isinstance(g, LogDamage)]
    assert len(damage) == 1 and (damage[0].file, damage[0].position) == (name, None)
    lost = got.index(damage[0])
    if damaged == 1:  # its second batch on: 6-7
        assert got == [[0, 1], [2, 3], [4, 5], damage[0], [8, 9], [10, 11]]
        assert damage[0].offset == 6
    else:  # 10-11
        assert got == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], damage[0]]
        assert damage[0].offset == 10
    assert "smaller than minimum" in got[lost].reason
    log.close()


def test_readable_records_as_a_read_committed_reader_sees_them(tmp_path):
    """Aborted batches are left out, and nothing at or past the last stable offset comes,
    not even the first records of an open transaction's batch that reaches past it."""
    from storage.records.control import ControlRecordType, build_control_batch

    path = tmp_path / "t-0"
    path.mkdir()
    log = Log(path, "t", 0, LogConfig())
    txn = {"producer_epoch": 0, "is_transactional": True}
    log.append_batches(
        build_batch(0, [b"a", b"b"], None, 1000) +
        build_batch(2, [b"c", b"d"], None, 1000, producer_id=7, base_sequence=0, **txn) +
        build_control_batch(4, 7, 0, ControlRecordType.ABORT, 0, timestamp_ms=1000) +
        build_batch(5, [b"e", b"f"], None, 1000) +
        build_batch(7, [b"g", b"h"], None, 1000, producer_id=8, base_sequence=0, **txn))
    committed = IsolationLevel.READ_COMMITTED
    assert log.last_stable_offset == 7
    assert flat(log.reader.readable_record_lists(0, committed)) == [[0, 1], [5, 6]]
    assert flat(log.reader.readable_record_lists(0)) == [[0, 1], [2, 3], [5, 6], [7, 8]]
    log.close()


def test_blocks_are_read_block_size_bytes_at_a_time_into_the_buffer_given(tmp_path):
    segment, starts = write_segment(tmp_path)
    data = (tmp_path / NAME).read_bytes()
    one_batch = starts[1]
    blocks = LogReader.blocks(segment, 0, None, block_size=one_batch)
    block = next(iter(blocks))
    assert bytes(block) == data[:one_batch]  # one block: one batch's bytes, not the file
    buffer = bytearray(2 * one_batch)
    blocks = LogReader.blocks(segment, starts[1], None, block_size=one_batch, buffer=buffer)
    block = next(iter(blocks))
    assert bytes(block) == data[starts[1]:starts[3]]  # the buffer's size
    assert bytes(buffer) == data[starts[1]:starts[3]]
    segment.close()


def test_columns_come_in_batches_of_about_max_rows(tmp_path):
    """A column batch is handed out once a block's records reach ``max_rows`` (records are
    decoded a block of the .log at a time)."""
    path = tmp_path / "t-0"
    path.mkdir()
    log = Log(path, "t", 0, LogConfig())
    for offset in range(3):  # 0.6 of a block each: a block holds one whole
        value = bytes([65 + offset]) * (_COLUMN_BLOCK * 6 // 10)
        log.append_batches(build_batch(offset, [value], None, 1000))
    got = [b.column("offset").to_pylist() for b in log.reader.read_columns(0, max_rows=1)]
    assert got == [[0], [1], [2]]
    got = [b.column("offset").to_pylist() for b in log.reader.read_columns(0, max_rows=2)]
    assert got == [[0, 1], [2]]
    log.close()


def test_columns_read_ahead_are_the_columns_read_in_line(tmp_path, monkeypatch):
    """read_ahead (the library's one stream) reads each segment's next block on a thread of its
    own: the same records, across blocks and segments, as the reader that reads in line."""
    import storage.log_reader

    monkeypatch.setattr(storage.log_reader, "_COLUMN_BLOCK", 4096)  # many blocks per segment
    path = tmp_path / "t-0"
    path.mkdir()
    log = Log(path, "t", 0, LogConfig(segment_bytes=40_000))
    for offset in range(200):
        log.append_batches(build_batch(offset, [bytes([65 + offset % 26]) * (offset * 7 % 900)],
                                       None, 1000 + offset))
    assert len(log.segments) >= 3
    in_line = pa.Table.from_batches(log.reader.read_columns(5, 190, max_rows=50))
    ahead = pa.Table.from_batches(log.reader.read_columns(5, 190, max_rows=50, read_ahead=True))
    # (the batches may be cut elsewhere: a block read ahead carries the last one's tail)
    assert ahead.equals(in_line) and ahead.column("offset").to_pylist() == list(range(5, 190))
    log.close()
