"""Unit tests of kfs.mount.inodes: the computed inode numbering (no FUSE, no disk)."""

import pytest

from kfs.mount import inodes
from kfs.mount.inodes import Kind, Node


# Every per-partition node with a fixed number, and its low bits (the design's table).
FIXED_SLOTS = {Kind.PARTITION: 1, Kind.BY_OFFSET: 2, Kind.BY_TIME: 3, Kind.APPEND: 4,
               Kind.APPEND_KEYED: 5, Kind.APPEND_BATCHES: 6, Kind.VALUES: 7,
               Kind.RECORDS_JSONL: 8, Kind.FROM: 9, Kind.APPEND_JSONL: 10,
               Kind.KEYED_VALUES: 11}
FIXED = list(FIXED_SLOTS)
PER_OFFSET = [Kind.RECORD, Kind.TIME_LINK, Kind.WINDOW, Kind.WINDOW_VALUES,
              Kind.WINDOW_RECORDS_JSONL, Kind.WINDOW_KEYED_VALUES]


def test_every_kind_is_numbered_here():
    assert set(Kind) == {Kind.ROOT, *FIXED, *PER_OFFSET}


def test_root_is_fuse_root_inode():
    assert inodes.ROOT_INO == 1
    assert inodes.decode(1) == Node(Kind.ROOT)


@pytest.mark.parametrize("pid", [1, 2, 77, inodes.MAX_PID])
@pytest.mark.parametrize("kind", FIXED)
def test_fixed_nodes_round_trip(pid, kind):
    ino = inodes.fixed_ino(pid, kind)
    assert inodes.decode(ino) == Node(kind, pid)
    assert ino < 2**64


@pytest.mark.parametrize("pid", [1, 3, inodes.MAX_PID])
@pytest.mark.parametrize("offset", [0, 1, 2, 12345, 2**31, inodes.MAX_OFFSET - 1])
def test_record_and_time_link_round_trip(pid, offset):
    rec = inodes.record_ino(pid, offset)
    link = inodes.time_link_ino(pid, offset)
    assert link == rec + 1
    assert inodes.decode(rec) == Node(Kind.RECORD, pid, offset)
    assert inodes.decode(link) == Node(Kind.TIME_LINK, pid, offset)
    assert rec < 2**64 and link < 2**64


def test_example_numbering_from_the_design():
    # ino = (pid << 44) | (16 + 8*offset) for the record file, +1 for the by-time symlink,
    # +2..5 for the window starting at the offset and its three stream files.
    assert inodes.record_ino(1, 0) == (1 << 44) | 16
    assert inodes.record_ino(2, 5) == (2 << 44) | (16 + 8 * 5)
    assert inodes.time_link_ino(2, 5) == (2 << 44) | (17 + 8 * 5)
    assert inodes.offset_ino(2, Kind.WINDOW_VALUES, 5) == (2 << 44) | (19 + 8 * 5)
    assert inodes.offset_ino(2, Kind.WINDOW_KEYED_VALUES, 5) == (2 << 44) | (21 + 8 * 5)
    for kind, slot in FIXED_SLOTS.items():
        assert inodes.fixed_ino(3, kind) == (3 << 44) | slot, kind


def test_all_numbers_distinct_across_partitions_and_kinds():
    seen = {inodes.ROOT_INO: Node(Kind.ROOT)}
    for pid in (1, 2, 3, inodes.MAX_PID):
        for kind in FIXED:
            seen[inodes.fixed_ino(pid, kind)] = Node(kind, pid)
        for offset in [*range(0, 200), inodes.MAX_OFFSET - 1]:
            for kind in PER_OFFSET:
                seen[inodes.offset_ino(pid, kind, offset)] = Node(kind, pid, offset)
    assert len(seen) == 1 + 4 * (len(FIXED) + len(PER_OFFSET) * 201)
    assert all(inodes.decode(ino) == node for ino, node in seen.items())


def test_offset_beyond_inode_space_overflows():
    with pytest.raises(OverflowError):
        inodes.record_ino(1, inodes.MAX_OFFSET)
    with pytest.raises(OverflowError):
        inodes.time_link_ino(1, 2**62)


@pytest.mark.parametrize("bad", [0, -1, inodes.MAX_PID + 1])
def test_bad_partition_ids_are_refused(bad):
    with pytest.raises(ValueError):
        inodes.record_ino(bad, 0)
    with pytest.raises(ValueError):
        inodes.fixed_ino(bad, Kind.APPEND)


def test_negative_offset_refused():
    with pytest.raises(ValueError):
        inodes.record_ino(1, -1)


def test_fixed_ino_refuses_non_fixed_kinds():
    with pytest.raises(ValueError):
        inodes.fixed_ino(1, Kind.RECORD)
    with pytest.raises(ValueError):
        inodes.fixed_ino(1, Kind.ROOT)


@pytest.mark.parametrize("ino", [0, 2, 15, (1 << 44) - 1, (1 << 44) | 0, (1 << 44) | 12,
                                 (1 << 44) | 15, (1 << 44) | (16 + 6), (1 << 44) | (16 + 8 + 7)])
def test_decode_rejects_numbers_no_encoder_produces(ino):
    with pytest.raises(ValueError):
        inodes.decode(ino)


@pytest.mark.parametrize(
    "name, expected",
    [(b"0", 0), (b"7", 7), (b"10", 10), (b"123456789", 123456789),
     (b"9223372036854775807", 2**63 - 1)],
)
def test_parse_offset_name_accepts_canonical_decimals(name, expected):
    assert inodes.parse_offset_name(name) == expected
    assert inodes.parse_timestamp_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [b"", b"abc", b"-1", b"+1", b"01", b"00", b" 1", b"1 ", b"1.0", b"1e3", b"0x10",
     b"\xd9\xa1",  # ARABIC-INDIC DIGIT ONE in UTF-8: str.isdigit() would accept it
     b"9223372036854775808", b"99999999999999999999"],
)
def test_parse_offset_name_rejects_everything_else(name):
    assert inodes.parse_offset_name(name) is None
    assert inodes.parse_timestamp_name(name) is None


def test_partition_entries_have_fixed_slots():
    assert [name for name, _ in inodes.PARTITION_ENTRIES] == [
        b"by-offset", b"by-time", b"append", b"append-keyed", b"append-batches", b"append.jsonl",
        b"values", b"keyed-values", b"records.jsonl", b"from"]
    assert [name for name, _ in inodes.WINDOW_ENTRIES] == [b"values", b"keyed-values",
                                                           b"records.jsonl"]
    for name, kind in inodes.PARTITION_ENTRIES:
        assert inodes.PARTITION_ENTRY_KINDS[name] is kind
        assert inodes.decode(inodes.fixed_ino(5, kind)).kind is kind


def test_stream_files_follow_the_table_of_stream_kinds():
    # Each row of StreamFormat gives a file in every partition and in every from/<start>/
    # window, named and numbered by the row, rendering that format.
    from kfs.record_format import StreamFormat

    for fmt in StreamFormat:
        name = fmt.value.encode()
        whole, window = inodes.PARTITION_ENTRY_KINDS[name], inodes.WINDOW_ENTRY_KINDS[name]
        assert whole in inodes.STREAM_KINDS and window in inodes.STREAM_KINDS
        assert inodes.STREAM_FORMATS[whole] is fmt and inodes.STREAM_FORMATS[window] is fmt
        assert inodes.fixed_ino(4, whole) == (4 << 44) | fmt.slot
        assert inodes.offset_ino(4, window, 9) == (4 << 44) | (16 + 8 * 9 + fmt.window_slot)
    assert len(inodes.STREAM_KINDS) == 2 * len(StreamFormat)


def test_partition_ids_are_stable_and_first_seen_ordered():
    ids = inodes.PartitionIds()
    assert ids.get("orders-0") is None
    assert ids.id_for("orders-0") == 1
    assert ids.id_for("clicks-3") == 2
    assert ids.id_for("orders-0") == 1  # stable
    assert ids.get("clicks-3") == 2
    assert ids.name_of(1) == "orders-0"
    assert ids.name_of(2) == "clicks-3"
    assert len(ids) == 2
    for bad in (0, 3, -1):
        with pytest.raises(KeyError):
            ids.name_of(bad)
