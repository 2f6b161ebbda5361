"""Offset and time index files against the reference (§5, §6): layout, preallocation,
lookups, truncation, and the rules Kafka's AbstractIndex/OffsetIndex/TimeIndex enforce."""

import struct

import pytest

from storage.offset_index import IndexOffsetOverflowError, InvalidOffsetError, OffsetIndex
from storage.time_index import TimeIndex


def test_offset_index_entry_layout_matches_reference(tmp_path):
    # §5.1: base 1000, (offset 1057, position 4210) -> 00 00 00 39 00 00 10 72
    index = OffsetIndex(tmp_path / "x.index", 1000, 10_485_760, writable=True)
    index.append(1057, 4210)
    index.close()
    assert (tmp_path / "x.index").read_bytes() == bytes.fromhex("0000003900001072")


def test_new_index_files_are_preallocated_to_max_size_rounded_down(tmp_path):
    offset_index = OffsetIndex(tmp_path / "a.index", 0, 10_485_760, writable=True)
    time_index = TimeIndex(tmp_path / "a.timeindex", 0, 10_485_760, writable=True)
    assert (tmp_path / "a.index").stat().st_size == 10_485_760
    assert (tmp_path / "a.timeindex").stat().st_size == 10_485_756
    assert offset_index.max_entries == 1_310_720 and time_index.max_entries == 873_813
    assert offset_index.entries == time_index.entries == 0


def test_trim_then_reopen_counts_every_slot(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 100, 4096, writable=True)
    for i in range(5):
        index.append(100 + 10 * i, 1000 * i)
    index.close()
    assert (tmp_path / "a.index").stat().st_size == 40
    reopened = OffsetIndex(tmp_path / "a.index", 100, 4096, writable=False)
    assert reopened.entries == 5
    assert [reopened.entry(i) for i in range(5)] == [(100 + 10 * i, 1000 * i) for i in range(5)]


def test_offset_lookup_is_largest_entry_at_or_below_target(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 50, 4096, writable=True)
    for offset, position in [(60, 100), (70, 200), (90, 300)]:
        index.append(offset, position)
    assert index.lookup(49) == (50, 0)  # below everything: (base, 0)
    assert index.lookup(59) == (50, 0)
    assert index.lookup(60) == (60, 100)
    assert index.lookup(89) == (70, 200)
    assert index.lookup(10**9) == (90, 300)


def test_offset_index_rejects_non_increasing_and_overflowing_offsets(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 0, 4096, writable=True)
    index.append(5, 0)
    with pytest.raises(InvalidOffsetError):
        index.append(5, 10)
    with pytest.raises(IndexOffsetOverflowError):
        index.append(2**31, 20)


def test_encoded_entries_must_rise_above_the_last_entry(tmp_path):
    # append_entries takes an append's entries as bytes (LogSegment.append_each): the order
    # check OffsetIndex.append makes per entry is made for the first of them
    index = OffsetIndex(tmp_path / "a.index", 0, 4096, writable=True)
    index.append(5, 0)
    with pytest.raises(ValueError, match="keys only rise"):
        index.append_entries((5).to_bytes(4, "big") + (10).to_bytes(4, "big"))
    index.append_entries((6).to_bytes(4, "big") + (10).to_bytes(4, "big"))
    assert index.entries == 2 and index.lookup(6) == (6, 10)


def test_offset_index_full_at_max_entries(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 0, 20, writable=True)  # 20 -> 16 bytes, 2 slots
    index.append(1, 0)
    assert not index.is_full()
    index.append(2, 10)
    assert index.is_full()
    with pytest.raises(IndexError):
        index.append(3, 20)


def test_offset_index_truncate_to(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", 0, 4096, writable=True)
    for offset in (10, 20, 30):
        index.append(offset, offset * 10)
    index.truncate_to(20)
    assert index.entries == 1 and index.last_offset == 10
    index.truncate_to(15)
    assert index.entries == 1
    index.truncate_to(0)
    assert index.entries == 0 and index.last_offset == 0


def test_time_index_entry_layout_and_strictly_larger_rule(tmp_path):
    index = TimeIndex(tmp_path / "a.timeindex", 1000, 4096, writable=True)
    index.maybe_append(1700000000000, 1005)
    index.maybe_append(1700000000000, 1009)  # same timestamp: no entry
    index.maybe_append(1700000000500, 1012)
    assert index.entries == 2
    index.close()
    data = (tmp_path / "a.timeindex").read_bytes()
    assert data == struct.pack(">qi", 1700000000000, 5) + struct.pack(">qi", 1700000000500, 12)


def test_time_index_empty_has_virtual_last_entry_and_ignores_no_timestamp(tmp_path):
    index = TimeIndex(tmp_path / "a.timeindex", 7, 4096, writable=True)
    assert index.last_entry == (-1, 7)
    index.maybe_append(-1, 9)  # v0 data (ts -1) never produces entries
    assert index.entries == 0
    assert index.lookup(123) == (-1, 7)


def test_time_index_rejects_going_backwards(tmp_path):
    index = TimeIndex(tmp_path / "a.timeindex", 0, 4096, writable=True)
    index.maybe_append(100, 10)
    with pytest.raises(InvalidOffsetError):
        index.maybe_append(200, 9)
    with pytest.raises(ValueError):
        index.maybe_append(50, 11)


def test_time_index_reserves_last_slot(tmp_path):
    index = TimeIndex(tmp_path / "a.timeindex", 0, 36, writable=True)  # 3 slots
    index.maybe_append(10, 1)
    assert not index.is_full()
    index.maybe_append(20, 2)
    assert index.is_full()  # entries >= max_entries - 1
    with pytest.raises(IndexError):
        index.maybe_append(30, 3)
    index.maybe_append(30, 3, skip_full_check=True)  # the final entry on roll still fits
    assert index.entries == 3


def test_time_index_lookup_and_truncate(tmp_path):
    index = TimeIndex(tmp_path / "a.timeindex", 0, 4096, writable=True)
    for ts, offset in [(100, 3), (200, 7), (300, 12)]:
        index.maybe_append(ts, offset)
    assert index.lookup(99) == (-1, 0)
    assert index.lookup(250) == (200, 7)
    assert index.lookup(300) == (300, 12)
    index.truncate_to(7)  # drops entries whose offset >= 7
    assert index.entries == 1 and index.last_entry == (100, 3)


def test_read_only_index_never_creates_files(tmp_path):
    index = OffsetIndex(tmp_path / "missing.index", 0, 4096, writable=False)
    assert index.entries == 0 and index.lookup(5) == (0, 0)
    assert not (tmp_path / "missing.index").exists()


def test_sanity_check_detects_bad_length(tmp_path):
    path = tmp_path / "bad.index"
    path.write_bytes(b"\0" * 12)
    with pytest.raises(ValueError):
        OffsetIndex(path, 0, 4096, writable=False).sanity_check()


def test_compiled_search_is_the_largest_lower_bound_of_either_key_width():
    from storage.records._c.scan import largest_lower_bound

    offsets = b"".join(struct.pack(">ii", rel, 7) for rel in (0, 5, 9, 20))
    assert [largest_lower_bound(offsets, 4, 8, 0, 4, t) for t in (-1, 0, 4, 5, 19, 20, 99)] == \
        [-1, 0, 0, 1, 2, 3, 3]
    assert largest_lower_bound(offsets, 2, 8, 0, 4, 99) == 1  # only the first 2 count
    assert largest_lower_bound(offsets, 0, 8, 0, 4, 99) == -1
    times = b"".join(struct.pack(">qi", ts, rel) for ts, rel in ((-5, 0), (2**40, 1), (2**62, 2)))
    assert [largest_lower_bound(times, 3, 12, 0, 8, t) for t in (-6, -5, 2**40 - 1, 2**63 - 1)] \
        == [-1, 0, 0, 2]
    assert largest_lower_bound(times, 3, 12, 8, 4, 1) == 1  # the offset field of a time entry
    for bad in ((offsets, 5, 8, 0, 4), (offsets, 4, 8, 6, 4), (offsets, 4, 8, 0, 3),
                (offsets, -1, 8, 0, 4)):
        with pytest.raises(ValueError):
            largest_lower_bound(*bad, 0)


# -- boundaries Kafka's OffsetIndexTest and TimeIndexTest pin (issue 41) -------------------

BASE = 45  # a segment whose base offset is not 0, as OffsetIndexTest's index is


def test_offset_index_truncate_to_in_a_segment_not_at_offset_zero(tmp_path):
    """``OffsetIndex.truncateTo`` takes an absolute offset: at an entry's offset that entry goes,
    past the last one nothing does, before the first everything does."""
    index = OffsetIndex(tmp_path / "a.index", BASE, 4096, writable=True)
    for offset in range(BASE + 1, BASE + 10):
        index.append(offset, offset - BASE)
    index.truncate_to(BASE + 12)
    assert index.last_offset == BASE + 9 and index.lookup(BASE + 12) == (BASE + 9, 9)
    index.truncate_to(BASE + 9)
    assert index.last_offset == BASE + 8 and index.lookup(BASE + 12) == (BASE + 8, 8)
    index.truncate_to(BASE + 5)
    assert index.entries == 4 and index.lookup(BASE + 12) == (BASE + 4, 4)
    index.append(BASE + 5, 5)  # appends go on from there
    index.truncate_to(BASE + 1)
    assert index.entries == 0 and index.lookup(BASE + 3) == (BASE, 0)


@pytest.mark.parametrize("offset, fits", [(BASE, True), (BASE - 1, False),
                                          (BASE + 2**31 - 1, True), (BASE + 2**31, False)])
def test_offset_index_takes_offsets_whose_relative_offset_is_an_int32(tmp_path, offset, fits):
    """``AbstractIndex.canAppendOffset``/``toRelative``: 0 <= offset - base <= Integer.MAX_VALUE."""
    index = OffsetIndex(tmp_path / "a.index", BASE, 4096, writable=True)
    assert index.can_append_offset(offset) is fits
    if fits:
        index.append(offset, 0)
        assert index.lookup(offset) == (offset, 0)
    else:
        with pytest.raises(IndexOffsetOverflowError):
            index.append(offset, 0)


@pytest.mark.parametrize("last, rolls", [(BASE + 2**31 - 1, False), (BASE + 2**31, True)])
def test_segment_rolls_when_an_offset_would_overflow_its_index(tmp_path, last, rolls):
    """``LogSegment.shouldRoll``: the incoming batch's last offset must fit the segment's
    indexes as a relative int32, or the log rolls a new segment first."""
    from storage.config import LogConfig
    from storage.segment import LogSegment

    segment = LogSegment(tmp_path, BASE, LogConfig(), writable=True)
    try:
        assert segment.should_roll(100, 1_700_000_000_000, last, 1_700_000_000_000) is rolls
    finally:
        segment.close()


def test_offset_index_position_after(tmp_path):
    """The position no batch below an offset reaches past: the second entry after the one
    at or below it (an entry names a batch by its last offset)."""
    index = OffsetIndex(tmp_path / "a.index", BASE, 4096, writable=True)
    for offset, position in [(BASE + 4, 0), (BASE + 9, 100), (BASE + 14, 200), (BASE + 19, 300)]:
        index.append(offset, position)
    assert index.position_after(BASE) == 100
    assert index.position_after(BASE + 4) == 200
    assert index.position_after(BASE + 9) == 300
    assert index.position_after(BASE + 14) is None


def test_time_index_truncate_to_in_a_segment_not_at_offset_zero(tmp_path):
    """``TimeIndex.truncateTo``: by offset, absolute, the entry at that offset included."""
    index = TimeIndex(tmp_path / "a.timeindex", BASE, 4096, writable=True)
    for ts, offset in [(100, BASE + 3), (200, BASE + 7), (300, BASE + 12)]:
        index.maybe_append(ts, offset)
    index.truncate_to(BASE + 13)
    assert index.entries == 3
    index.truncate_to(BASE + 12)
    assert index.entries == 2 and index.last_entry == (200, BASE + 7)
    index.truncate_to(BASE + 4)
    assert index.entries == 1 and index.last_entry == (100, BASE + 3)
    index.truncate_to(BASE)
    assert index.entries == 0 and index.last_entry == (-1, BASE)


def test_offset_index_errors_say_what_and_where(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", BASE, 3 * 8, writable=True)
    with pytest.raises(IndexOffsetOverflowError, match=rf"^offset {BASE + 2**31} cannot be "
                                                       rf"stored in the index of segment {BASE}$"):
        index.append(BASE + 2**31, 0)
    index.append(BASE + 5, 0)
    with pytest.raises(InvalidOffsetError) as e:
        index.append(BASE + 5, 10)
    assert str(e.value) == (f"attempt to append offset {BASE + 5} to position 1 no larger than "
                            f"the last offset appended ({BASE + 5}) to {index.path}")
    index.append(BASE + 6, 10)
    index.append(BASE + 7, 20)
    with pytest.raises(IndexError, match=r"^attempt to append to a full index \(size = 3\)$"):
        index.append(BASE + 8, 30)


def test_offset_index_sanity_check(tmp_path):
    """``OffsetIndex.sanityCheck``: an entry at the base offset itself is sane
    (OffsetIndexTest's "sanity last offset equal to base offset"); a last offset below the
    base offset, or a length that is not whole entries, is corrupt."""
    index = OffsetIndex(tmp_path / "a.index", BASE, 4096, writable=True)
    index.sanity_check()  # empty, preallocated
    index.append(BASE, 0)
    index.sanity_check()
    index.close()
    below = tmp_path / "below.index"
    below.write_bytes(struct.pack(">ii", -1, 0))
    with pytest.raises(ValueError) as e:
        OffsetIndex(below, BASE, 4096, writable=False).sanity_check()
    assert str(e.value) == (f"corrupt index found, index file ({below}) has non-zero size but "
                            f"the last offset is {BASE - 1} which is less than the base offset "
                            f"{BASE}.")
    torn = tmp_path / "torn.index"
    torn.write_bytes(struct.pack(">ii", 1, 0) + b"\0\0\0")
    with pytest.raises(ValueError) as e:
        OffsetIndex(torn, BASE, 4096, writable=False).sanity_check()
    assert str(e.value) == (f"index file {torn} is corrupt, found 11 bytes which is neither "
                            f"positive nor a multiple of 8.")


def test_time_index_lookup_finds_its_first_entry(tmp_path):
    """``TimeIndex.lookup``: a timestamp at or past the first entry's finds it; only one
    before it gives (-1, base offset)."""
    index = TimeIndex(tmp_path / "a.timeindex", BASE, 4096, writable=True)
    index.maybe_append(100, BASE + 3)
    index.maybe_append(200, BASE + 7)
    assert index.lookup(99) == (-1, BASE)
    assert index.lookup(100) == index.lookup(199) == (100, BASE + 3)
    assert index.lookup(200) == (200, BASE + 7)


def test_time_index_errors_say_what_and_where(tmp_path):
    index = TimeIndex(tmp_path / "a.timeindex", BASE, 3 * 12, writable=True)
    index.maybe_append(100, BASE + 3)
    with pytest.raises(InvalidOffsetError) as e:
        index.maybe_append(200, BASE + 2)
    assert str(e.value) == (f"attempt to append an offset ({BASE + 2}) to slot 1 no larger than "
                            f"the last offset appended ({BASE + 3}) to {index.path}")
    with pytest.raises(ValueError) as e:
        index.maybe_append(99, BASE + 4)
    assert str(e.value) == (f"attempt to append a timestamp (99) to slot 1 no larger than the "
                            f"last timestamp appended (100) to {index.path}")
    index.maybe_append(200, BASE + 4)
    with pytest.raises(IndexError, match=r"^attempt to append to a full time index \(size = 2\)$"):
        index.maybe_append(300, BASE + 5)


def test_time_index_sanity_check(tmp_path):
    """``TimeIndex.sanityCheck``: one entry at the base offset is sane, whatever its timestamp
    against its offset; a last timestamp below the first, a last offset below the base
    offset, or a length that is not whole entries, is corrupt."""
    index = TimeIndex(tmp_path / "a.timeindex", BASE, 4096, writable=True)
    index.maybe_append(1, BASE)
    index.sanity_check()
    index.close()
    cases = {
        "back": (struct.pack(">qi", 200, 1) + struct.pack(">qi", 100, 2),
                 "last timestamp 100 is less than the first timestamp 200"),
        "below": (struct.pack(">qi", 100, -1), f"last offset {BASE - 1} is less than the base "
                                               f"offset {BASE}"),
    }
    for name, (data, says) in cases.items():
        path = tmp_path / f"{name}.timeindex"
        path.write_bytes(data)
        with pytest.raises(ValueError) as e:
            TimeIndex(path, BASE, 4096, writable=False).sanity_check()
        assert str(e.value) == f"corrupt time index {path}: {says}"
    torn = tmp_path / "torn.timeindex"
    torn.write_bytes(struct.pack(">qi", 100, 1) + b"\0")
    with pytest.raises(ValueError) as e:
        TimeIndex(torn, BASE, 4096, writable=False).sanity_check()
    assert str(e.value) == f"time index file {torn} is corrupt, found 13 bytes which is not a " \
                           f"multiple of 12."


@pytest.mark.parametrize("writable", [True, False], ids=["writable", "read-only"])
@pytest.mark.parametrize("used, slots", [(0, 1), (1, 1), (0, 4), (1, 4), (2, 4), (3, 4), (4, 4),
                                         (1, 2), (2, 2), (2, 3), (5, 9), (8, 9)])
def test_an_untrimmed_index_counts_the_slots_before_its_zero_tail(tmp_path, writable, used,
                                                                   slots):
    """A file a crash left preallocated ends in zero-filled slots: its entries are the slots
    before the first one past slot 0 whose relative offset is 0 (slot 0 may be the base offset
    itself; relative offsets only rise)."""
    path = tmp_path / "a.index"
    path.write_bytes(b"".join(struct.pack(">ii", i, i * 10) for i in range(used))
                     + bytes(8 * (slots - used)))
    index = OffsetIndex(path, BASE, 4096, writable=writable)
    assert index.entries == max(used, 1)
    assert index.raw_entries() == path.read_bytes()[:8 * max(used, 1)]


@pytest.mark.parametrize("count", range(1, 8))
def test_truncate_to_each_offset_of_indexes_of_each_size(tmp_path, count):
    """``truncateTo`` at, between, before and past the entries of indexes of 1 to 7 entries:
    what stays is exactly the entries below the offset."""
    offsets = [BASE + 1 + 2 * i for i in range(count)]
    for target in range(BASE, offsets[-1] + 2):
        path = tmp_path / f"{target}.index"
        index = OffsetIndex(path, BASE, 4096, writable=True)
        for slot, offset in enumerate(offsets):
            index.append(offset, slot)
        index.truncate_to(target)
        assert [index.entry(s)[0] for s in range(index.entries)] == \
            [o for o in offsets if o < target], target
        index.delete()
        assert not path.exists()
        index.delete()  # already gone: nothing to do


def test_encoded_entries_fill_every_slot_and_no_more(tmp_path):
    """``append_entries``: entries that fill the index to its last slot fit; one more, or one
    into the slots kept spare, is IndexError saying so; the file holds them as given."""
    index = OffsetIndex(tmp_path / "a.index", BASE, 4 * 8, writable=True)
    data = b"".join(struct.pack(">ii", rel, rel * 10) for rel in (1, 2, 3))
    index.append_entries(data)
    with pytest.raises(IndexError) as e:
        index.append_entries(struct.pack(">ii", 4, 40), spare=1)
    assert str(e.value) == f"1 entries do not fit {index.path} (3 of 4 slots used)"
    index.append_entries(struct.pack(">ii", 4, 40))
    assert index.entries == 4 and index.raw_entries() == data + struct.pack(">ii", 4, 40)
    with pytest.raises(IndexError, match=r"\(4 of 4 slots used\)$"):
        index.append_entries(struct.pack(">ii", 5, 50))
    index.close()
    assert (tmp_path / "a.index").read_bytes() == data + struct.pack(">ii", 4, 40)


def test_encoded_time_entries_compare_signed_keys(tmp_path):
    """Keys are signed big-endian: a time index whose last timestamp is -1 (no timestamp, as
    a legacy segment's) takes an entry of timestamp 0."""
    index = TimeIndex(tmp_path / "a.timeindex", BASE, 4096, writable=True)
    index.append_entries(struct.pack(">qi", -1, 1))
    index.append_entries(struct.pack(">qi", 0, 2))
    with pytest.raises(ValueError) as e:
        index.append_entries(struct.pack(">qi", -2, 3))
    assert str(e.value) == f"an entry with key -2 cannot follow key 0 in {index.path}: keys only rise"


def test_closing_a_read_only_index_leaves_the_file_as_it_is(tmp_path):
    """A read-only index (a broker's active segment, preallocated) is never trimmed: closing
    it writes nothing into a directory kfs does not own."""
    path = tmp_path / "a.index"
    data = struct.pack(">ii", 1, 0) + struct.pack(">ii", 2, 10) + bytes(8 * 6)
    path.write_bytes(data)
    index = OffsetIndex(path, BASE, 4096, writable=False)
    assert index.entries == 2
    index.resize(4096)
    index.close()
    assert path.read_bytes() == data


def test_resize_never_cuts_entries(tmp_path):
    index = OffsetIndex(tmp_path / "a.index", BASE, 4096, writable=True)
    for rel in (1, 2, 3):
        index.append(BASE + rel, rel)
    index.resize(8)
    assert (tmp_path / "a.index").stat().st_size == 24 and index.entries == 3
    assert index.lookup(BASE + 3) == (BASE + 3, 3)
    index.resize(4096)
    assert index.max_entries == 512 and index.entries == 3
