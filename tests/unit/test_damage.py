"""Damage in a segment's .log (storage.damage): where intact batches stop, where they start
again, and what is cut between, as Kafka's LogSegment.recover checks batches (whole, CRC,
offsets following) - modelled on LogSegmentTest's recovery tests with a corrupt or torn tail."""

import pytest

from storage import LogConfig, damage
from storage.damage import (
    Cut, LogDamage, header_records, map_segment, next_intact_batch, readable_end)
from storage.records import build_batch
from storage.segment import LogSegment

NAME = "00000000000000000000.log"


def write_segment(tmp_path, damage=None):
    """A .log of four 2-record batches (offsets 0-1, 2-3, 4-5, 6-7), ``damage`` applied to its
    bytes; returns the opened segment and the batches' start positions (and the end)."""
    batches = [build_batch(o, [b"value-%d" % o, b"value-%d" % (o + 1)], None, 1000)
               for o in (0, 2, 4, 6)]
    starts = [sum(len(b) for b in batches[:i]) for i in range(5)]
    data = bytearray(b"".join(batches))
    if damage:
        data = damage(data, starts)
    (tmp_path / NAME).write_bytes(bytes(data))
    return LogSegment(tmp_path, 0, LogConfig(), False), starts


def flip_last_byte_of_second_batch(data, starts):
    data[starts[2] - 1] ^= 1
    return data


def test_an_intact_segment_has_no_cut(tmp_path):
    segment, starts = write_segment(tmp_path)
    m = map_segment(segment, 0)
    assert (m.intact, m.cuts, m.first_offset, m.last_offset, m.next_offset) == \
        ([(0, starts[4])], [], 0, 7, 8)
    assert readable_end(segment) == (starts[4], 8, "0 bytes after the last whole batch (a torn write)")
    segment.close()


def test_a_corrupt_batch_is_cut_and_the_intact_batches_after_it_kept(tmp_path):
    """A CRC mismatch in the second batch: offsets 2-3 are lost, 4-7 read again."""
    segment, starts = write_segment(tmp_path, flip_last_byte_of_second_batch)
    m = map_segment(segment, 0)
    assert m.intact == [(0, starts[1]), (starts[2], starts[4])]
    (cut,) = m.cuts
    end, next_offset, reason = readable_end(segment)
    assert (end, next_offset) == (starts[1], 2)
    assert cut == Cut(starts[1], starts[2], 2, 4, 2, reason, False)
    assert cut.size == starts[2] - starts[1]
    assert (m.first_offset, m.last_offset, m.next_offset) == (0, 7, 8)
    segment.close()


def test_a_torn_last_batch_is_a_torn_cut(tmp_path):
    """The last batch runs past the end of the file: cut as torn, its header's 2 records."""
    segment, starts = write_segment(tmp_path, lambda data, starts: data[:starts[4] - 5])
    m = map_segment(segment, 0)
    assert m.intact == [(0, starts[3])]
    size = starts[4] - starts[3]
    assert m.cuts == [Cut(starts[3], starts[4] - 5, 6, None, 2,
                          f"a batch of {size} bytes starts here but only {size - 5} bytes "
                          "follow (a torn write, or a corrupt batch size)", True)]
    assert (m.first_offset, m.last_offset, m.next_offset) == (0, 5, 6)
    segment.close()


def test_a_few_bytes_after_the_last_batch_are_a_torn_write(tmp_path):
    segment, starts = write_segment(tmp_path, lambda data, starts: data + b"\x00\x01\x02")
    assert readable_end(segment) == (starts[4], 8, "3 bytes after the last whole batch (a torn write)")
    (cut,) = map_segment(segment, 0).cuts
    assert (cut.start, cut.end, cut.torn, cut.resume_offset) == (starts[4], starts[4] + 3, True, None)
    segment.close()


def test_next_intact_batch_finds_a_batch_at_or_after_an_offset(tmp_path):
    """Resynchronising after damage: the first intact batch at or after a byte whose offsets
    are at or after the expected one; none past the last."""
    segment, starts = write_segment(tmp_path)
    assert next_intact_batch(segment, 0, 0) == 0
    assert next_intact_batch(segment, 1, 0) == starts[1]
    assert next_intact_batch(segment, starts[1], 2) == starts[1]
    assert next_intact_batch(segment, 1, 3) == starts[2]  # offsets 2-3 start below 3
    assert next_intact_batch(segment, 1, 6) == starts[3]
    assert next_intact_batch(segment, 1, 8) is None
    assert next_intact_batch(segment, starts[3] + 1, 0) is None
    segment.close()


def test_header_records_counts_what_the_headers_claim(tmp_path):
    segment, starts = write_segment(tmp_path)
    assert header_records(segment, 0, starts[4]) == 8
    assert header_records(segment, starts[1], starts[2]) == 2
    assert header_records(segment, starts[1], starts[1] + 1) == 2  # a batch running past end
    assert header_records(segment, 0, 0) == 0
    assert header_records(segment, 1, starts[1]) is None  # no header there
    segment.close()


@pytest.mark.parametrize("damage,text", [
    (LogDamage(NAME, 42, 3, "corrupt"), f"{NAME}:42: corrupt (offsets from 3 cannot be read)"),
    (LogDamage(NAME, None, 3, "corrupt", 5),
     f"{NAME}: corrupt (offsets 3-5 cannot be read; those after them can)"),
    (LogDamage("", None, 3, "gone"), "gone (offsets from 3 cannot be read)"),
])
def test_log_damage_says_where_and_what_is_lost(damage, text):
    assert str(damage) == text


@pytest.mark.parametrize("block", [64, 80, 97])
def test_next_intact_batch_finds_batches_across_read_blocks(tmp_path, monkeypatch, block):
    """The search reads the .log in blocks (4 MiB): a header across a block boundary, and a
    batch longer than the rest of its block, are found as in one read (blocks made small)."""
    monkeypatch.setattr(damage, "_RESYNC_BLOCK", block)
    segment, starts = write_segment(tmp_path, flip_last_byte_of_second_batch)
    for start in range(0, starts[4] + 1):
        want = next(p for p in (*starts[:4], None) if p is None or p >= start and p != starts[1])
        assert next_intact_batch(segment, start, 0) == want, start
    m = map_segment(segment, 0)
    assert m.intact == [(0, starts[1]), (starts[2], starts[4])]
    assert [(c.start, c.end) for c in m.cuts] == [(starts[1], starts[2])]
    segment.close()


def test_a_corrupt_last_batch_is_cut_but_not_torn(tmp_path):
    """A CRC mismatch with nothing intact after it is damage, not a torn write."""
    def flip_last(data, starts):
        data[starts[4] - 1] ^= 1
        return data
    segment, starts = write_segment(tmp_path, flip_last)
    (cut,) = map_segment(segment, 0).cuts
    assert (cut.start, cut.end, cut.resume_offset, cut.torn) == (starts[3], starts[4], None, False)
    segment.close()


def test_twelve_bytes_after_the_last_batch_are_read_as_a_batch_size(tmp_path):
    """12 bytes hold a whole offset and size field: the reason names the size they claim."""
    tail = b"\x00" * 8 + (256).to_bytes(4, "big")
    segment, starts = write_segment(tmp_path, lambda data, starts: data + tail)
    assert readable_end(segment)[2] == ("a batch of 268 bytes starts here but only 12 bytes "
                                        "follow (a torn write, or a corrupt batch size)")
    segment.close()


def test_a_batch_up_to_int32_max_offsets_ahead_is_found_again(tmp_path):
    """A segment's offsets are 32-bit relative: a batch 2**31-1 past the expected offset is
    still the segment's, one further is not."""
    for base, found in ((2**31 - 1, True), (2**31, False)):
        batch = build_batch(base, [b"far"], None, 1000)
        (tmp_path / NAME).write_bytes(b"\xff" * 7 + batch)
        segment = LogSegment(tmp_path, 0, LogConfig(), False)
        assert next_intact_batch(segment, 0, 0) == (7 if found else None)
        segment.close()


def test_batches_below_the_expected_offset_are_cut(tmp_path):
    """The batches must start at or after the offset the segment before ends at: those below
    it are cut up to the first batch at or after it."""
    segment, starts = write_segment(tmp_path)
    m = map_segment(segment, 4)
    assert m.intact == [(starts[2], starts[4])]
    assert [(c.start, c.end, c.first_offset, c.resume_offset) for c in m.cuts] == \
        [(0, starts[2], 4, 4)]
    segment.close()


def test_one_stray_byte_costs_no_batch(tmp_path):
    """A stray byte between two batches is cut alone: the intact batch right after it (one
    byte on) is found again."""
    segment, starts = write_segment(
        tmp_path, lambda data, starts: data[:starts[1]] + b"\x00" + data[starts[1]:])
    m = map_segment(segment, 0)
    assert [(c.start, c.end, c.resume_offset) for c in m.cuts] == [(starts[1], starts[1] + 1, 2)]
    assert m.intact == [(0, starts[1]), (starts[1] + 1, starts[4] + 1)]
    segment.close()
