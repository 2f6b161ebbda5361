"""Where ``storage.batch_planning`` cuts appended records into batches, and what it refuses:
the boundaries themselves (a batch exactly ``batch.size``, a record exactly
``max.message.bytes``, timestamps 0 and 2**63 - 1), so that a change of one byte in a size
estimate shows (issue 41).

The planner bounds a record's size from above (``plan_batches``: the overhead of the longest
value; ``record_sections``: timestamp and offset deltas at their longest), so a batch it plans
never exceeds ``batch.size``; it may close a batch a record earlier than Kafka's producer, whose
``MemoryRecordsBuilder.hasRoomFor`` counts each record's exact deltas. A record alone is
measured exactly, as the broker measures the batch against ``max.message.bytes``
(``LogValidator``: a batch over it is ``RecordTooLargeException``)."""

from __future__ import annotations

import pytest

from storage.batch_planning import max_batch_bytes, plan_batches, record_sections
from storage.config import LogConfig
from storage.errors import RecordTooLargeError
from storage.records import build_batch, iter_batches
from storage.records.framing import RECORD_BATCH_OVERHEAD

TS = 1_700_000_000_000
V100 = b"x" * 100  # a 100-byte value: 7 bits of length, 11 bytes of overhead at most
PER_V100 = 100 + 11  # its size in plan_batches' bound
PER_V100_SECTION = 109 + 14  # record_sections': alone 109 bytes, deltas 14 more at most


def one_record_batch(key, value) -> int:
    """Bytes of the batch holding only this record, as Kafka's producer would send it."""
    return len(build_batch(0, [value], None if key is None else [key], TS))


def sizes(runs):
    return [end - start for start, end in runs]


@pytest.mark.parametrize("fill, expected", [(0, [10] * 5), (-1, [9] * 5 + [5])])
def test_plan_batches_fills_batch_size_to_the_byte(fill, expected):
    """Ten records whose bound fills ``batch.size`` exactly are one batch; a byte less and
    the tenth goes to the next."""
    config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + 10 * PER_V100 + fill)
    assert sizes(plan_batches([V100] * 50, None, config)) == expected


@pytest.mark.parametrize("fill, expected", [(0, [5, 5]), (-1, [4, 4, 2])])
def test_plan_batches_counts_the_longest_key(fill, expected):
    """Keys add the longest key and 5 bytes (its length varint, bounded) to every record."""
    per = PER_V100 + 20 + 5
    config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + 5 * per + fill)
    keys = [b"k" * 20] * 9 + [None]
    assert sizes(plan_batches([V100] * 10, keys, config)) == expected


@pytest.mark.parametrize("length, overhead", [(0, 9), (1, 9), (63, 10), (127, 11), (128, 11),
                                              (16383, 13), (16384, 13)])
def test_plan_batches_bounds_the_overhead_by_the_longest_value(length, overhead):
    """A record's bound is its value plus the overhead of a value as long as the longest
    one's bit length allows: three of them fit a batch of three bounds, not a byte less."""
    values = [b"v" * length] * 3
    exact = RECORD_BATCH_OVERHEAD + 3 * (length + overhead)
    assert sizes(plan_batches(values, None, LogConfig(batch_size=exact))) == [3]
    assert sizes(plan_batches(values, None, LogConfig(batch_size=exact - 1))) == [2, 1]
    # and the bound holds: the batch built is no larger
    assert len(build_batch(0, values, None, TS)) <= exact


def test_plan_batches_puts_a_record_larger_than_batch_size_alone():
    config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + 3 * PER_V100)
    values = [V100, V100, b"y" * 500, V100, V100, V100, V100]
    # (9 bits of length bound the overhead at 11 bytes still: the others' bounds are as before)
    assert plan_batches(values, None, config) == [(0, 2), (2, 3), (3, 6), (6, 7)]


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


@pytest.mark.parametrize("fill, expected", [(0, [4, 4, 2]), (-1, [3, 3, 3, 1])])
def test_record_sections_fill_batch_size_to_the_byte(fill, expected):
    """A section takes records while their sizes (alone, plus 14 bytes of deltas at most)
    fit ``batch.size``: four fill it exactly, a byte less and the fourth goes on."""
    config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + 4 * PER_V100_SECTION + fill)
    sections = record_sections([V100] * 10, None, None, [TS + i for i in range(10)], TS, config)
    assert [count for _, count, _, _ in sections] == expected


def test_record_sections_count_keys_and_headers():
    headers = [[("h", b"vv")]] * 4  # 5 bytes beyond the empty header count
    keys = [b"k" * 20, None, b"", b"k" * 20]
    per = [109 + 20 + 14 + 5, 109 + 14 + 5, 109 + 14 + 5, 109 + 20 + 14 + 5]
    config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + per[0] + per[1])
    sections = record_sections([V100] * 4, keys, headers, None, TS, config)
    assert [count for _, count, _, _ in sections] == [2, 2]
    config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + per[0] + per[1] - 1)
    sections = record_sections([V100] * 4, keys, headers, None, TS, config)
    assert [count for _, count, _, _ in sections] == [1, 2, 1]


def test_record_sections_stamp_deltas_from_each_sections_first():
    config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + 2 * PER_V100_SECTION)
    stamps = [TS + 5, TS + 1, None, TS + 9]
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


@pytest.mark.parametrize("fill, expected", [(0, [4, 4]), (-1, [3, 3, 2])])
def test_plan_batches_with_only_null_keys(fill, expected):
    """Keys given, all null: 5 bytes more per record (the key length), no key bytes."""
    config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + 4 * (PER_V100 + 5) + fill)
    assert sizes(plan_batches([V100] * 8, [None] * 8, config)) == expected


def test_a_timestamp_out_of_range_is_named_whichever_end():
    with pytest.raises(ValueError, match=f"^invalid timestamp {2**63}: "):
        record_sections([b"a", b"b"], None, None, [0, 2**63], TS, LogConfig())
    with pytest.raises(ValueError, match="^invalid timestamp -1: "):
        record_sections([b"a", b"b"], None, None, [-1, 2**63], TS, LogConfig())


@pytest.mark.parametrize("values, headers, per", [
    # empty and null values: no value bytes; a record without headers: the count's byte only
    ([b"", None, b"", None], [None, [], None, []], 7 + 14),
    # a header key's UTF-8 bytes (é is two), a null header value one byte (its length, -1)
    ([b""] * 4, [[("é", None)]] * 4, 7 + 14 + 4),
])
def test_record_sections_size_null_and_empty_values_and_headers(values, headers, per):
    """Each record's size as alone in a batch, exactly: four fill ``batch.size`` to the
    byte, a byte less and the fourth goes on."""
    for fill, expected in ((0, [4]), (-1, [3, 1])):
        config = LogConfig(batch_size=RECORD_BATCH_OVERHEAD + 4 * per + fill)
        sections = record_sections(values, None, headers, None, TS, config)
        assert [count for _, count, _, _ in sections] == expected
