"""Where ``storage.batch_planning`` cuts appended records into batches, and what it refuses:
the boundaries themselves (a batch exactly ``batch.size``, the offset and timestamp deltas
whose varints grow by a byte, a first record larger than ``batch.size``, a record exactly
``max.message.bytes``, timestamps 0 and 2**63 - 1), so that a change of one byte in a size shows
(issue 41).

The rule is Kafka's producer's (``MemoryRecordsBuilder.hasRoomFor`` in a batch allocated by
``RecordAccumulator.append``): a batch takes the next record while its header and its records,
the next one at its exact offset and timestamp deltas, stay within ``batch.size``; a first record
larger than that gets a batch of its upper bound (``DefaultRecord.recordSizeUpperBound``: 21
bytes over its key, value and headers) and takes what else fits there.
``tests/kafka/test_kafka_batch_cuts.py`` holds the same cuts against a real producer's batches.
Expected sizes here come from whole batches built by ``build_batch`` (the encoder the fixture
tests hold to Kafka's bytes), not from the planner. A record alone is measured exactly, as the
broker measures the batch against ``max.message.bytes`` (``LogValidator``: a batch over it is
``RecordTooLargeException``)."""

from __future__ import annotations

import pytest

from storage.batch_planning import max_batch_bytes, plan_batches, record_sections
from storage.config import LogConfig
from storage.errors import RecordTooLargeError
from storage.records import build_batch, iter_batches
from storage.records.framing import RECORD_BATCH_OVERHEAD

TS = 1_700_000_000_000
V100 = b"x" * 100
MAX_RECORD_OVERHEAD = 21  # DefaultRecord.MAX_RECORD_OVERHEAD


def one_record_batch(key, value) -> int:
    """Bytes of the batch holding only this record, as Kafka's producer would send it."""
    return len(build_batch(0, [value], None if key is None else [key], TS))


def batch_bytes(values, keys=None, stamps=TS, headers=None) -> int:
    """Bytes of one batch of these records (offset deltas from 0, timestamp deltas from the
    first)."""
    return len(build_batch(0, values, keys, stamps, headers))


def sizes(runs):
    return [end - start for start, end in runs]


def planners(values, keys, config):
    """The batches (records in each) that both planners give for records stamped at once."""
    sections = record_sections(values, keys, None, None, TS, config)
    return sizes(plan_batches(values, keys, config)), [count for _, count, _, _ in sections]


@pytest.mark.parametrize("fill, expected", [(0, [10] * 5), (-1, [9] * 5 + [5])])
def test_a_batch_fills_batch_size_to_the_byte(fill, expected):
    """Ten records whose batch is exactly ``batch.size`` are one batch; a byte less and the
    tenth goes to the next."""
    config = LogConfig(batch_size=batch_bytes([V100] * 10) + fill)
    assert planners([V100] * 50, None, config) == (expected, expected)


@pytest.mark.parametrize("fill, expected", [(0, [5, 5]), (-1, [4, 4, 2])])
def test_keys_count_exactly(fill, expected):
    keys = [b"k" * 20, None, b"", b"k" * 300, b"k"] * 2
    config = LogConfig(batch_size=batch_bytes([V100] * 5, keys[:5]) + fill)
    assert planners([V100] * 10, keys, config) == (expected, expected)


@pytest.mark.parametrize("fill, expected", [(0, [65, 65]), (-1, [64, 64, 2])])
def test_the_offset_delta_64_takes_a_byte_more(fill, expected):
    """An empty record is 7 bytes at offset deltas 0..63 and 8 from 64 (its zigzag varint):
    a batch.size of 65 records' batch takes 65, a byte less 64."""
    assert batch_bytes([b""] * 65) - batch_bytes([b""] * 64) == 8
    assert batch_bytes([b""] * 64) - batch_bytes([b""] * 63) == 7
    config = LogConfig(batch_size=batch_bytes([b""] * 65) + fill)
    assert planners([b""] * 130, None, config) == (expected, expected)


@pytest.mark.parametrize("step, fits", [(63, 3), (64, 2)])
def test_the_timestamp_delta_64_takes_a_byte_more(step, fits):
    """Records 63 ms apart keep 1-byte timestamp deltas; 64 ms and the second record's delta
    takes 2 bytes: a batch.size of three records at deltas 0, 63 and 0 takes three only then."""
    config = LogConfig(batch_size=batch_bytes([V100] * 3, stamps=[TS, TS + 63, TS]))
    stamps = [TS, TS + step, TS] * 2
    sections = record_sections([V100] * 6, None, None, stamps, TS, config)
    assert [count for _, count, _, _ in sections][0] == fits


def test_a_record_larger_than_batch_size_takes_what_fits_its_upper_bound():
    """A 500-byte record's batch is its upper bound (header, 21 bytes and its key, value and
    headers: 586 bytes): two empty records after it fit there, a third does not; then
    batch.size again."""
    big = b"y" * 500
    bound = RECORD_BATCH_OVERHEAD + MAX_RECORD_OVERHEAD + (1 + 2 + 500 + 1)  # key -1, value, 0 headers
    assert batch_bytes([big, b"", b""]) <= bound < batch_bytes([big, b"", b"", b""])
    config = LogConfig(batch_size=batch_bytes([V100] * 2))
    values = [V100, big, b"", b"", b"", V100, V100]
    assert plan_batches(values, None, config) == [(0, 1), (1, 4), (4, 6), (6, 7)]
    sections = record_sections(values, None, None, None, TS, config)
    assert [count for _, count, _, _ in sections] == [1, 3, 2, 1]


def test_a_large_first_records_room_stops_at_max_message_bytes():
    """The upper bound's room never makes a batch a broker refuses: a record just under
    ``max.message.bytes`` stays alone."""
    big = b"y" * 500
    config = LogConfig(batch_size=100, max_message_bytes=one_record_batch(None, big) + 5)
    assert plan_batches([big, b""], None, config) == [(0, 1), (1, 2)]
    sections = record_sections([big, b""], None, None, None, TS, config)
    assert [count for _, count, _, _ in sections] == [1, 1]


@pytest.mark.parametrize("key", [None, b"k" * 30])
def test_a_record_of_exactly_max_message_bytes_is_taken(key):
    """A record whose one-record batch is exactly ``max.message.bytes`` is taken; a byte more
    is RecordTooLargeError naming its line, its size and the limit."""
    limit = one_record_batch(key, V100)
    keys = None if key is None else [key, key]
    config = LogConfig(max_message_bytes=limit)
    assert plan_batches([b"", V100], keys, config) == [(0, 1), (1, 2)]
    with pytest.raises(RecordTooLargeError) as e:
        plan_batches([b"", V100 + b"x"], keys, config)
    assert str(e.value) == (f"the record at line 2 is {limit + 1} bytes as a batch, more than "
                            f"max.message.bytes={limit} (segment.bytes=1073741824)")


def test_segment_bytes_below_max_message_bytes_is_the_limit():
    limit = one_record_batch(None, V100)
    config = LogConfig(segment_bytes=limit, max_message_bytes=10 * limit)
    assert max_batch_bytes(config) == limit
    assert plan_batches([V100], None, config) == [(0, 1)]
    with pytest.raises(RecordTooLargeError, match=f"segment.bytes={limit}"):
        plan_batches([V100 + b"x"], None, config)
    # a batch.size over the limit is cut to it
    assert sizes(plan_batches([b""] * 8, None, LogConfig(batch_size=1 << 20,
                                                        max_message_bytes=61 + 3 * 9))) == [3] * 2 + [2]


def test_a_record_appended_to_the_log_at_max_message_bytes(tmp_path):
    """Through ``Log.append``: the record at the limit is stored in one batch of exactly
    ``max.message.bytes``; one byte more stores nothing."""
    from storage.log import Log

    limit = one_record_batch(None, V100)
    (tmp_path / "t-0").mkdir()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(max_message_bytes=limit))
    try:
        with pytest.raises(RecordTooLargeError):
            log.append([V100 + b"x"])
        assert log.log_end_offset == 0
        log.append([V100])
        data = log.segments.active.log_path.read_bytes()
        assert [b.size_in_bytes for b in iter_batches(data)] == [limit]
    finally:
        log.close()


def test_record_sections_stamp_deltas_from_each_sections_first():
    stamps = [TS + 5, TS + 1, None, TS + 9]
    config = LogConfig(batch_size=batch_bytes([V100] * 2, stamps=[TS + 5, TS + 1]))
    sections = record_sections([V100] * 4, None, None, stamps, TS, config)
    assert [(count, first, top) for _, count, first, top in sections] == \
        [(2, TS + 5, TS + 5), (2, TS, TS + 9)]


@pytest.mark.parametrize("stamp, taken", [(0, True), (2**63 - 1, True), (-1, False),
                                          (2**63, False)])
def test_record_timestamps_are_epoch_ms_from_0_to_2_63_minus_1(stamp, taken):
    """A record's timestamp is a non-negative int64 (a negative one is Kafka's NO_TIMESTAMP
    or invalid): 0 and 2**63 - 1 are taken, -1 and 2**63 are ValueError naming it."""
    call = lambda: record_sections([b"a", b"b"], None, None, [TS, stamp], TS, LogConfig())  # noqa: E731
    if taken:
        [(_, count, first, top)] = call()
        assert (count, first, top) == (2, TS, max(TS, stamp))
    else:
        with pytest.raises(ValueError, match=f"^invalid timestamp {stamp}: epoch ms from 0 to "
                                             r"2\*\*63 - 1$"):
            call()


def test_a_timestamp_out_of_range_is_named_whichever_end():
    with pytest.raises(ValueError, match=f"^invalid timestamp {2**63}: "):
        record_sections([b"a", b"b"], None, None, [0, 2**63], TS, LogConfig())
    with pytest.raises(ValueError, match="^invalid timestamp -1: "):
        record_sections([b"a", b"b"], None, None, [-1, 2**63], TS, LogConfig())


@pytest.mark.parametrize("values, headers", [
    # empty and null values: no value bytes; a record without headers: the count's byte only
    ([b"", None, b"", None], [None, [], None, []]),
    # a header key's UTF-8 bytes (é is two), a null header value one byte (its length, -1)
    ([b""] * 4, [[("é", None)]] * 4),
])
def test_record_sections_size_null_and_empty_values_and_headers(values, headers):
    """Each record's size exactly: four fill ``batch.size`` to the byte, a byte less and the
    fourth goes on."""
    exact = batch_bytes(values, headers=[h or [] for h in headers])
    for fill, expected in ((0, [4]), (-1, [3, 1])):
        config = LogConfig(batch_size=exact + fill)
        sections = record_sections(values, None, headers, None, TS, config)
        assert [count for _, count, _, _ in sections] == expected
