"""Salvage (storage.salvage): only the bytes that are not intact batches are cut into the
quarantine; every intact batch around them stays, offsets only increasing. Where Kafka's
LogLoaderTest recovery deletes everything after the first bad batch, salvage keeps the rest,
so these tests pin what is cut, kept, renamed and moved whole."""

import json

from storage.clock import FixedClock
from storage.damage import Cut
from storage.log_files import log_file, offset_index_file, time_index_file
from storage.quarantine import MANIFEST, Quarantine
from storage.records import build_batch
from storage.salvage import PartitionPlan, SegmentPlan, _records, plan_partition, salvage_partition


def batch(offset):
    return build_batch(offset, [b"v%d" % offset, b"v%d" % (offset + 1)], None, 1000)


def write(directory, base, offsets, corrupt=()):
    """A segment file at ``base`` of 2-record batches at ``offsets``; those in ``corrupt`` get
    their last byte flipped. Returns the batches' bytes."""
    parts = []
    for o in offsets:
        b = bytearray(batch(o))
        if o in corrupt:
            b[-1] ^= 1
        parts.append(bytes(b))
    log_file(directory, base).write_bytes(b"".join(parts))
    offset_index_file(directory, base).write_bytes(b"")
    time_index_file(directory, base).write_bytes(b"")
    return parts


def quarantine(tmp_path):
    return Quarantine(tmp_path / "q", keep_all=False, clock=FixedClock(0))


def test_a_corrupt_batch_is_cut_and_the_rest_kept(tmp_path):
    part = tmp_path / "t-0"
    part.mkdir()
    first = write(part, 0, [0, 2, 4], corrupt={2})
    write(part, 6, [6, 8])
    before = {p.name: p.read_bytes() for p in part.iterdir()}
    plan = plan_partition(part)
    assert {p.name: p.read_bytes() for p in part.iterdir()} == before  # planning reads only
    assert plan.changed and [s.changed for s in plan.segments] == [True, False]
    seg = plan.segments[0]
    (cut,) = seg.cuts
    assert (cut.start, cut.end) == (len(first[0]), len(first[0]) + len(first[1]))
    assert plan.lost_offsets(seg, cut) == (2, 3)
    assert plan.kept_after(seg, cut) == (4, 9)
    assert seg.kept_bytes == len(first[0]) + len(first[2])
    q = quarantine(tmp_path)
    lines = salvage_partition(plan, q)
    assert lines == [f"t-0/00000000000000000000.log: {len(first[1])} bytes cut into the "
                     f"quarantine, {seg.kept_bytes} bytes of intact batches kept"]
    assert log_file(part, 0).read_bytes() == first[0] + first[2]
    assert not offset_index_file(part, 0).exists() and not time_index_file(part, 0).exists()
    assert offset_index_file(part, 6).exists()  # an unchanged segment keeps its indexes
    (entry,) = [json.loads(line) for line in (q.directory / MANIFEST).read_text().splitlines()]
    assert (entry["firstOffset"], entry["lastOffset"], entry["records"], entry["reason"]) == \
        (2, 3, 2, cut.reason)
    assert not plan_partition(part).changed


def test_a_cut_at_a_segments_end_loses_offsets_up_to_the_next_segment(tmp_path):
    """A cut with nothing intact after it in its segment loses offsets up to the first intact
    batch of a later segment."""
    part = tmp_path / "t-0"
    part.mkdir()
    write(part, 0, [0, 2], corrupt={2})
    write(part, 4, [4])
    plan = plan_partition(part)
    seg = plan.segments[0]
    (cut,) = seg.cuts
    assert plan.lost_offsets(seg, cut) == (2, 3)
    assert plan.kept_after(seg, cut) == (4, 5)
    last = plan.segments[1]
    assert plan.lost_offsets(last, Cut(0, 1, 6, None, None, "r", True)) == (6, None)
    assert plan.kept_after(last, Cut(0, 1, 6, None, None, "r", True)) is None


def test_a_segment_without_an_intact_batch_goes_whole_unless_it_is_the_last(tmp_path):
    part = tmp_path / "t-0"
    part.mkdir()
    write(part, 0, [0])
    write(part, 2, [2], corrupt={2})
    write(part, 4, [4], corrupt={4})
    plan = plan_partition(part)
    assert [s.remove for s in plan.segments] == [False, True, False]
    q = quarantine(tmp_path)
    lines = salvage_partition(plan, q)
    size = len(batch(2))
    assert lines[0] == (f"t-0/00000000000000000002.log: moved to the quarantine whole ({size} "
                        "bytes, no intact batch in it)")
    assert not log_file(part, 2).exists() and not offset_index_file(part, 2).exists()
    assert log_file(part, 4).read_bytes() == b""  # the last stays, empty: the log end stays
    entries = [json.loads(line) for line in (q.directory / MANIFEST).read_text().splitlines()]
    assert (entries[0]["firstOffset"], entries[0]["records"], entries[0]["reason"]) == \
        (2, 2, "; ".join(c.reason for c in plan.segments[1].cuts))


def test_a_segment_whose_base_lies_below_the_end_before_it_is_renamed(tmp_path):
    """Offsets only increase: a segment named below the end of the one before is renamed to
    its first kept offset."""
    part = tmp_path / "t-0"
    part.mkdir()
    write(part, 0, [0, 2])
    kept = write(part, 2, [2, 4])  # its first batch repeats offsets 2-3
    plan = plan_partition(part)
    assert plan.segments[1].new_base == 4
    lines = salvage_partition(plan, quarantine(tmp_path))
    assert lines[0].endswith(", renamed 00000000000000000004.log")
    assert not log_file(part, 2).exists()
    assert log_file(part, 4).read_bytes() == kept[1]


def test_a_rename_onto_another_segments_name_keeps_the_old_name(tmp_path):
    """When the first kept offset names another segment's file, the segment keeps its own."""
    part = tmp_path / "t-0"
    part.mkdir()
    write(part, 0, [0, 2])
    kept = write(part, 2, [2, 4])  # offsets 2-3 repeated: renamed to 4 ...
    write(part, 4, [4, 6])  # ... which this segment's file is named
    plan = plan_partition(part)
    assert [s.new_base for s in plan.segments] == [None, 4, 6]
    lines = salvage_partition(plan, quarantine(tmp_path))
    assert lines[0] == (f"t-0/00000000000000000002.log: {len(kept[0])} bytes cut into the "
                        f"quarantine, {len(kept[1])} bytes of intact batches kept")
    assert log_file(part, 2).read_bytes() == kept[1]


def test_records_is_unknown_when_any_cut_is():
    cut = Cut(0, 1, 0, None, 3, "r", False)
    assert _records([cut, Cut(1, 2, 3, None, 4, "r", False)]) == 7
    assert _records([cut, Cut(1, 2, 3, None, None, "r", False)]) is None
    assert _records([]) == 0


def test_an_unchanged_plan_changes_nothing(tmp_path):
    segment = SegmentPlan(tmp_path / "x.log", 0, 10, [], [(0, 10)], 0, 1)
    assert not segment.changed and segment.kept_bytes == 10
    assert salvage_partition(PartitionPlan(tmp_path, [segment]), quarantine(tmp_path)) == []


def test_nothing_is_kept_after_a_cut_with_no_intact_batch_after_it(tmp_path):
    part = tmp_path / "t-0"
    part.mkdir()
    write(part, 0, [0], corrupt={0})
    plan = plan_partition(part)
    (cut,) = plan.segments[0].cuts
    assert plan.kept_after(plan.segments[0], cut) is None
    assert plan.lost_offsets(plan.segments[0], cut) == (0, None)


def test_an_empty_segment_before_the_last_stays_as_kafkas_recovery_keeps_it(tmp_path):
    """A segment with no byte at all (compaction can leave one) has nothing to cut: it is not
    removed, as LogLoader.recoverLog keeps it (LogSegment.recover truncates nothing there)."""
    part = tmp_path / "t-0"
    part.mkdir()
    write(part, 0, [0, 2, 4], corrupt={2})
    write(part, 6, [])
    write(part, 8, [8])
    plan = plan_partition(part)
    assert [(s.remove, s.changed) for s in plan.segments] == [(False, True), (False, False),
                                                              (False, False)]
    salvage_partition(plan, quarantine(tmp_path))
    assert log_file(part, 6).read_bytes() == b"" and offset_index_file(part, 6).exists()
    assert not plan_partition(part).changed
