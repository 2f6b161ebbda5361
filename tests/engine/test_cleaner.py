"""The log cleaner on the engine: what a pass keeps (latest value per key, offsets and timestamps
unchanged, tombstones until their delete horizon), a map smaller than the dirty section, the
selection of logs, keyless appends, and failure: a corrupt batch, a full disk, a crash at every
step of writing and swapping in a cleaned segment."""

import json
import logging
import os
import subprocess
import sys
import textwrap

import pytest

from helpers.paths import REPO
from storage import LogManager
from storage.errors import CorruptRecordError, KeylessRecordError
from storage.log_cleaner import LogCleaner, for_log_manager
from storage.log_files import CLEANER_OFFSET_CHECKPOINT
from storage.records import build_batch

NOW = 1_800_000_000_000
DAY = 86_400_000


def make_dir(tmp_path, topic_props="", server_props=""):
    backing = tmp_path / "backing"
    backing.mkdir()
    (backing / "c.topic.properties").write_text("cleanup.policy=compact\n" + topic_props)
    if server_props:
        (backing / "server.properties").write_text(server_props)
    return backing


def fill(log, rounds=4, keys=20, rolls=True):
    """``rounds`` writes of every key, a segment per round; a tombstone for key 0 at the end,
    then one more record in the active segment."""
    for r in range(rounds):
        log.append([b"v%d-%d" % (r, k) for k in range(keys)], [b"k%d" % k for k in range(keys)])
        if rolls:
            log.roll()
    log.append_as_leader(build_batch(0, [None], [b"k0"]))  # a tombstone
    log.roll()
    log.append([b"active"], [b"k1"])


def contents(log):
    """{offset: (key, value, timestamp)} of every record."""
    return {r.offset: (r.key, r.value, r.timestamp)
            for batch in log.reader.record_lists(log.log_start_offset) for r in batch}


def latest_per_key(records):
    out = {}
    for offset in sorted(records):
        key, value, _ = records[offset]
        out[key] = (offset, value)
    return out


def test_a_pass_keeps_the_latest_record_of_each_key(tmp_path):
    mgr = LogManager(make_dir(tmp_path))
    log = mgr.create("c-0")
    fill(log)
    before = contents(log)
    leo = log.log_end_offset
    result = for_log_manager(mgr).clean_log("c-0", NOW)
    after = contents(log)
    assert result.start == 0 and result.end == log.segments.active.base_offset
    assert log.log_end_offset == leo
    # offsets and timestamps never change; every kept record is what it was
    assert all(before[o] == rec for o, rec in after.items())
    assert latest_per_key(after) == latest_per_key(before)
    assert len(after) == 20 + 1  # one per key, the tombstone (kept: horizon not passed), active
    assert log.reader.read(0) is None  # compacted away: a gap
    assert [s.base_offset for s in log.segments.all()] == [0, log.segments.active.base_offset]
    checkpoint = (mgr.dir / CLEANER_OFFSET_CHECKPOINT).read_text().split("\n")
    assert checkpoint[2] == f"c 0 {result.end}"
    mgr.close()
    mgr = LogManager(mgr.dir)  # reopens as it was left
    assert contents(mgr.get("c-0")) == after
    mgr.close()


def test_a_batch_decoded_from_a_segment_swapped_out_is_never_served_for_its_successor(tmp_path):
    """A reader listing records while the cleaner swaps the cleaned segment in (the mount's
    worker threads beside its cleaner): the batches it decodes from the old segment after the
    swap are never taken for the new segment's, which sit at the same base offset and, here,
    at the same positions."""
    mgr = LogManager(make_dir(tmp_path))
    log = mgr.create("c-0")
    for r in range(3):  # a batch per record, all of one size
        for k in range(10):
            log.append([b"v%d-%d" % (r, k)], [b"k%d" % k])
    log.roll()
    listing = log.reader.record_lists(0)
    assert [r.offset for r in next(listing)] == [0]  # the reader is in the old segment
    for_log_manager(mgr).clean_log("c-0", NOW)  # keeps the last round: offsets 20..29
    assert [r.offset for r in next(listing)] == [1]  # decoded from the old segment, after
    assert [None if r is None else r.value for r in map(log.reader.read, range(20, 30))] == \
        [b"v2-%d" % k for k in range(10)]
    assert log.reader.read(1) is None
    mgr.close()


def test_tombstones_stay_until_their_delete_horizon(tmp_path):
    mgr = LogManager(make_dir(tmp_path, "delete.retention.ms=1000\n"))
    log = mgr.create("c-0")
    fill(log, rounds=2)
    tombstone = max(o for o, (k, v, _) in contents(log).items() if k == b"k0")
    cleaner = for_log_manager(mgr)
    cleaner.clean_log("c-0", NOW)
    batch = log.segments.floor(tombstone).find_batch(tombstone)[1]
    assert batch.has_delete_horizon and batch.base_timestamp == NOW + 1000
    assert log.reader.read(tombstone).value is None
    (mgr.dir / CLEANER_OFFSET_CHECKPOINT).unlink()  # recopy the clean section again
    cleaner.clean_log("c-0", NOW + 999)
    assert log.reader.read(tombstone) is not None  # before the horizon
    (mgr.dir / CLEANER_OFFSET_CHECKPOINT).unlink()
    cleaner.clean_log("c-0", NOW + 1000)
    assert log.reader.read(tombstone) is None and b"k0" not in {k for k, _, _ in contents(log).values()}
    mgr.close()


def test_a_map_smaller_than_the_dirty_section_ends_the_pass_early(tmp_path):
    # 24 bytes per slot, filled to 90%: 30 slots take 27 keys
    backing = make_dir(tmp_path, server_props="log.cleaner.dedupe.buffer.size=720\n")
    mgr = LogManager(backing)
    log = mgr.create("c-0")
    for r in range(3):
        log.append([b"v%d-%d" % (r, k) for k in range(20)], [b"r%dk%d" % (r, k) for k in range(20)])
        log.roll()
    log.append([b"x"], [b"x"])
    before = contents(log)
    cleaner = for_log_manager(mgr)
    first = cleaner.clean_log("c-0", NOW)
    assert first.end == 27  # the last offset mapped + 1: the next pass goes on from there
    assert first.stats.buffer_utilization == pytest.approx(27 / 30)
    second = cleaner.clean_log("c-0", NOW)
    assert (second.start, second.end) == (27, 54)
    third = cleaner.clean_log("c-0", NOW)
    assert (third.start, third.end) == (54, 60)  # up to the active segment
    assert contents(log) == before  # every key distinct: nothing to remove
    mgr.close()


def test_selection_follows_ratio_and_lags(tmp_path):
    mgr = LogManager(make_dir(tmp_path))
    log = mgr.create("c-0")
    fill(log)
    cleaner = for_log_manager(mgr)
    assert cleaner.manager.log_to_clean(log, NOW).cleanable_ratio == 1.0  # nothing clean yet
    assert cleaner.clean_filthiest_log(NOW).name == "c-0"
    log.append([b"new"], [b"k5"])  # a little dirty data beside the clean section
    log.roll()
    ltc = cleaner.manager.log_to_clean(log, NOW)
    assert 0 < ltc.cleanable_ratio < 0.5
    assert cleaner.clean_filthiest_log(NOW) is None  # below min.cleanable.dirty.ratio
    mgr.close()
    (mgr.dir / "c.topic.properties").write_text("cleanup.policy=compact\n"
                                                "max.compaction.lag.ms=1000\n")
    mgr = LogManager(mgr.dir)
    result = for_log_manager(mgr).clean_filthiest_log(NOW)  # overdue: cleaned anyway
    assert result is not None and result.name == "c-0"
    mgr.close()


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path):
    mgr = LogManager(make_dir(tmp_path, f"min.compaction.lag.ms={DAY}\n"))
    log = mgr.create("c-0")
    fill(log)
    cleaner = for_log_manager(mgr)
    # the records are stamped now: within the lag, nothing is cleanable
    assert cleaner.clean_log("c-0") is None
    assert cleaner.clean_log("c-0", NOW + 2 * DAY) is not None
    mgr.close()


def test_a_compacted_topic_refuses_records_without_a_key(tmp_path):
    mgr = LogManager(make_dir(tmp_path))
    log = mgr.create("c-0")
    with pytest.raises(KeylessRecordError, match="without key"):
        log.append([b"v"])
    with pytest.raises(KeylessRecordError):
        log.append_lines(b"v\n")
    assert log.log_end_offset == 0
    assert log.append_lines(b"k\tv\n", b"\t") == range(0, 1)
    mgr.close()


def corrupt_first_batch(path):
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF  # a byte of the first batch's records: its CRC no longer matches
    path.write_bytes(bytes(data))


def test_a_corrupt_batch_makes_its_partition_uncleanable_and_others_go_on(tmp_path, caplog):
    backing = make_dir(tmp_path)
    mgr = LogManager(backing)
    for name in ("c-0", "c-1"):
        fill(mgr.create(name))
    mgr.close()
    corrupt_first_batch(backing / "c-0" / "00000000000000000020.log")
    (backing / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":0}')
    mgr = LogManager(backing)
    before = contents(mgr.get("c-1"))
    cleaner = for_log_manager(mgr)
    with caplog.at_level(logging.WARNING, logger="storage.log_cleaner"):
        results = [cleaner.clean_filthiest_log(NOW) for _ in range(3)]
    assert [r.name for r in results if r] == ["c-1"]
    assert cleaner.manager.uncleanable == {"c-0"}
    assert "Marking its partition (c-0) as uncleanable" in caplog.text
    assert "corrupt" in caplog.text
    assert latest_per_key(contents(mgr.get("c-1"))) == latest_per_key(before)
    assert not list((backing / "c-0").glob("*.cleaned"))
    with pytest.raises(CorruptRecordError):
        LogCleaner(backing, lambda: {"c-0": mgr.get("c-0")}, mgr.config).clean_log("c-0", NOW)
    mgr.close()


@pytest.mark.root
def test_a_full_disk_leaves_the_partition_as_it_was(small_disk):
    backing = small_disk / "backing"
    backing.mkdir()
    (backing / "c.topic.properties").write_text("cleanup.policy=compact\nsegment.index.bytes=4096\n")
    mgr = LogManager(backing)
    log = mgr.create("c-0")
    value = b"x" * 300
    for r in range(6):  # ~770 KB of distinct keys: a pass rewrites nearly all of it
        log.append([value] * 400, [b"r%dk%d" % (r, k) for k in range(400)])
        log.roll()
    log.append([b"a"], [b"a"])
    before = contents(log)
    files = sorted(p.name for p in (backing / "c-0").iterdir())
    with pytest.raises(OSError):
        for_log_manager(mgr).clean_log("c-0", NOW)
    assert sorted(p.name for p in (backing / "c-0").iterdir()) == files
    assert contents(log) == before
    mgr.close()
    mgr = LogManager(backing)
    assert contents(mgr.get("c-0")) == before
    mgr.close()


# -- a crash at every step -------------------------------------------------------------------

CHILD = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {repo!r})
    import storage.cleaner as cleaner
    from storage import LogManager
    from storage.log_cleaner import for_log_manager
    from storage.records import build_batch
    steps, crash_at = [], int(sys.argv[2])
    def step(name):
        steps.append(name)
        if len(steps) == crash_at:
            os._exit(9)  # as kill -9: no cleanup, no close
    cleaner.crash_point = step
    mgr = LogManager(sys.argv[1])
    for_log_manager(mgr).clean_log("c-0", {now})
    mgr.close()
    print(json.dumps(steps))
""")


def run_child(backing, crash_at):
    script = CHILD.format(repo=str(REPO), now=NOW)
    return subprocess.run([sys.executable, "-c", script, str(backing), str(crash_at)],
                          capture_output=True, text=True, timeout=120)


def crash_fixture(tmp_path, name):
    backing = tmp_path / name
    backing.mkdir()
    (backing / "c.topic.properties").write_text("cleanup.policy=compact\n")
    mgr = LogManager(backing)
    fill(mgr.create("c-0"))
    mgr.close()
    return backing


def snapshot(backing):
    mgr = LogManager(backing)
    try:
        return contents(mgr.get("c-0"))
    finally:
        mgr.close()


def kv(records):
    return {o: (k, v) for o, (k, v, _) in records.items()}


def test_a_crash_at_every_step_reopens_before_or_after(tmp_path):
    before = kv(snapshot(crash_fixture(tmp_path, "model")))
    full = crash_fixture(tmp_path, "full")
    res = run_child(full, 0)
    assert res.returncode == 0, res.stderr
    steps = json.loads(res.stdout.strip().splitlines()[-1])
    after = kv(snapshot(full))
    assert after != before and latest_per_key(snapshot(full)) == {
        k: v for k, v in latest_per_key({o: (*r, 0) for o, r in before.items()}).items()}
    assert "renamed .log.cleaned to .log.swap" in steps and "swapped in" in steps
    for n, name in enumerate(steps, 1):
        backing = crash_fixture(tmp_path, f"crash{n}")
        stamps = {o: t for o, (_, _, t) in snapshot(backing).items()}
        res = run_child(backing, n)
        assert res.returncode == 9, (name, res.stderr)
        state = snapshot(backing)  # reopened by the loader, after a crash: with recovery
        assert kv(state) in (before, after), f"a crash after {name!r} left a mix"
        assert all(stamps[o] == t for o, (_, _, t) in state.items())
        leftovers = [p.name for p in (backing / "c-0").iterdir()
                     if p.suffix in (".cleaned", ".swap", ".deleted")]
        assert not leftovers, (name, leftovers)
        if kv(state) == before:  # a later pass still cleans it
            assert run_child(backing, 0).returncode == 0 and kv(snapshot(backing)) == after
