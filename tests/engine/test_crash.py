"""Crashes and damaged files, engine level: a writer killed with SIGKILL, torn tails, damaged
indexes, flipped bytes, leftovers of interrupted deletions and cleanings, and the one-writer
lock (§8.4, §10.5 and pitfall 12 of the reference).

"Acknowledged" means ``Log.append`` returned: the batch is in the page cache, which outlives the
process. Every acknowledged record must come back after a kill -9 and a reopen, with its exact
content, offsets contiguous from 0, nothing torn served.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.log_writer import KEYED, acknowledged, key_for, value_for
from helpers.paths import REPO, TESTS
from helpers.waits import Lines

from storage import LogManager
from storage.errors import CorruptRecordError, LogDirLockedError
from storage.log_files import (
    CLEAN_SHUTDOWN_FILE,
    filename_prefix,
    offset_file,
    offset_from_file_name,
)
from storage.records import RecordBatch, build_batch, iter_batches

# --------------------------------------------------------------------------- helpers

# The writer a kill -9 trial kills, its records' contents and its acknowledgements:
# helpers/log_writer.py.

# partition -> <topic>.topic.properties: several segments, dense indexes, codecs, LogAppendTime,
# flush.messages (a recovery point that moves, so recovery starts mid-log)
TOPICS = {
    "plain-0": "segment.bytes=6000\nindex.interval.bytes=300\n",
    "lat-0": "segment.bytes=9000\nmessage.timestamp.type=LogAppendTime\ncompression.type=lz4\n",
    "zstd-0": "segment.bytes=5000\ncompression.type=zstd\nflush.messages=150\nindex.interval.bytes=0\n",
    KEYED: "segment.bytes=7000\ncompression.type=gzip\nbatch.size=900\n",
}


def check_log(log, name: str, keyed: bool) -> None:
    """Offsets contiguous from 0 to the log end offset, every record its exact content, and
    by-time lookups answering ListOffsets for sampled timestamps."""
    leo = log.log_end_offset
    records = log.reader.records_from(0, leo + 1)
    assert [r.offset for r in records] == list(range(leo)), name
    for r in records:
        assert r.value == value_for(name, r.offset), (name, r.offset)
        assert r.key == (key_for(name, r.offset) if keyed else None), (name, r.offset)
    for r in random.Random(leo).sample(records, min(len(records), 20)):
        assert log.reader.read(r.offset) == r
        expected = next(x for x in records if x.timestamp >= r.timestamp)
        assert log.reader.find_offset_by_timestamp(r.timestamp).offset == expected.offset, (name, r)


def files_of(directory: Path) -> dict[str, bytes]:
    """The segment files (.log, .index, .timeindex) of ``directory`` by name. Producer
    snapshots are left out: recovery rebuilds the producer state and may drop later ones."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())
            if p.suffix in (".log", ".index", ".timeindex")}


def batches_of(path: Path) -> list[tuple[int, RecordBatch]]:
    data = path.read_bytes()
    return [(b.position, b) for b in iter_batches(data)]


def seg(directory: Path, base: int, suffix: str) -> Path:
    return offset_file(directory, base, suffix)


def crash(backing: Path) -> None:
    """What a kill -9 leaves: no clean-shutdown marker."""
    (backing / CLEAN_SHUTDOWN_FILE).unlink()


# --------------------------------------------------------------------------- kill -9 loop


TRIALS = 16
MIN_ACKS = 20  # a trial kills after 1..2x this many acknowledged appends (most trials)
HANG_S = 120  # ends a hung wait only: the writer reports at its own pace


def kill_point(rng: random.Random) -> int:
    """The crash point of a trial, in lines of the writer: ``loading`` and ``ready`` come
    first, then one line per acknowledged append. Sometimes the kill comes as soon as the
    writer says it is loading: while it opens (and recovers) the directory."""
    if rng.random() < 0.15:
        return 1
    return 2 + rng.randint(1, 2 * MIN_ACKS)


def test_kill9_loop_every_acknowledged_record_survives(tmp_path):
    backing = tmp_path / "data"
    backing.mkdir()
    mgr = LogManager(backing)
    for name, props in TOPICS.items():
        (backing / f"{name.rsplit('-', 1)[0]}.topic.properties").write_text(props)
        mgr.create(name)
    mgr.close()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS)]))
    rng = random.Random(2024)
    verified = dict.fromkeys(TOPICS, 0)  # log end offsets seen by the previous check
    for trials in range(1, TRIALS + 1):
        proc = subprocess.Popen([sys.executable, "-m", "helpers.log_writer", str(backing), str(trials)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
        out = Lines(proc.stdout, f"the writer of trial {trials}", proc)
        try:
            # the kill comes once the writer reported the chosen line (however slow the
            # machine is), while it goes on appending: the crash lands in what it does next
            out.wait_for(kill_point(rng), timeout=HANG_S)
            assert proc.poll() is None, proc.stderr.read().decode()
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=HANG_S)
        assert proc.returncode == -signal.SIGKILL
        text = out.rest().decode()  # the pipe keeps what it printed before the kill
        proc.stdout.close()
        proc.stderr.close()
        acked = acknowledged(text)
        if "\nready\n" in text:  # else it may have died before consuming the marker
            assert not (backing / CLEAN_SHUTDOWN_FILE).exists()
        mgr = LogManager(backing)
        try:
            for name in TOPICS:
                log = mgr.get(name)
                assert log.log_end_offset >= max(acked.get(name, -1) + 1, verified[name]), name
                check_log(log, name, name == KEYED)
                verified[name] = log.log_end_offset
        finally:
            mgr.close()
    assert sum(verified.values()) > 1000, verified
    segments = {n: len(list((backing / n).glob("*.log"))) for n in TOPICS}
    assert all(count > 1 for count in segments.values()), segments


# --------------------------------------------------------------------------- torn tail


def build_log(backing: Path, name: str = "t-0", props: str = "", batches: int = 12) -> Path:
    """A closed log with one batch per append (timestamps 1000 ms apart) and a last batch of
    two records."""
    backing.mkdir(exist_ok=True)
    if props:
        (backing / f"{name.rsplit('-', 1)[0]}.topic.properties").write_text(props)
    mgr = LogManager(backing)
    log = mgr.create(name)
    for i in range(batches):
        leo = log.log_end_offset
        count = i % 4 + 1 if i < batches - 1 else 2  # a short last batch: tests cut it everywhere
        values = [b"value %d " % (leo + j) * (i % 5) for j in range(count)]
        log.append_batches(build_batch(leo, values, None, 1_700_000_000_000 + 1000 * i))
    mgr.close()
    return backing / name


def records_of(log) -> list[tuple[int, bytes, int]]:
    return [(r.offset, r.value, r.timestamp) for r in log.reader.records_from(0, log.log_end_offset + 1)]


@pytest.mark.parametrize("clean", [True, False], ids=["clean-shutdown", "crash"])
def test_torn_tail_at_every_byte_of_the_last_batch(tmp_path, clean):
    # small preallocated indexes: the log is opened twice per cut
    pristine = build_log(tmp_path / "pristine", props="segment.bytes=1500\nindex.interval.bytes=200\n"
                                                      "segment.index.bytes=4096\n")
    mgr = LogManager(pristine.parent)
    before = records_of(mgr.get("t-0"))
    mgr.close()
    last_base = max(offset_from_file_name(p.name) for p in pristine.glob("*.log"))
    position, last = batches_of(seg(pristine, last_base, ".log"))[-1]
    assert last_base < last.base_offset  # the cut is inside the active segment, not at its start
    kept = [r for r in before if r[0] < last.base_offset]
    for cut in range(position, position + last.size_in_bytes):
        backing = tmp_path / f"cut{cut}"
        shutil.copytree(pristine.parent, backing)
        os.truncate(seg(backing / "t-0", last_base, ".log"), cut)
        if not clean:
            crash(backing)
        mgr = LogManager(backing)
        log = mgr.get("t-0")
        assert log.log_end_offset == last.base_offset, cut
        assert records_of(log) == kept, cut
        # no index entry of the cut batch is trusted (the time index drives by-time and retention)
        assert log.segments.active.largest_timestamp == max(t for o, _, t in kept if o >= last_base)
        assert log.append([b"after"]) == last.base_offset
        mgr.close()
        mgr = LogManager(backing)
        log = mgr.get("t-0")
        assert records_of(log)[:-1] == kept and log.reader.read(last.base_offset).value == b"after"
        mgr.close()
        shutil.rmtree(backing)


# --------------------------------------------------------------------------- index damage


def check_reads(log, expected: list[tuple[int, bytes, int]]) -> None:
    """Every offset reads its record; every timestamp (and one below each) answers ListOffsets."""
    assert records_of(log) == expected
    for offset, value, _ in expected:
        assert log.reader.read(offset).value == value
    for _, _, ts in expected:
        for target in (ts - 1, ts):
            first = next(o for o, _, t in expected if t >= target)
            assert log.reader.find_offset_by_timestamp(target).offset == first, target
    assert log.reader.find_offset_by_timestamp(expected[-1][2] + 1) is None


def damage_zero(path: Path, log_path: Path, base: int, next_offset: int) -> None:
    path.write_bytes(bytes(path.stat().st_size))


def damage_odd_length(path: Path, log_path: Path, base: int, next_offset: int) -> None:
    os.truncate(path, path.stat().st_size - 3)


def damage_delete(path: Path, log_path: Path, base: int, next_offset: int) -> None:
    path.unlink()


def damage_past_end(path: Path, log_path: Path, base: int, next_offset: int) -> None:
    """The last entry points past the .log: a position beyond its end, an offset past its last."""
    data = bytearray(path.read_bytes())
    if path.suffix == ".index":
        struct.pack_into(">i", data, len(data) - 4, log_path.stat().st_size + 40)
    else:
        struct.pack_into(">i", data, len(data) - 4, next_offset - base + 5)
    path.write_bytes(bytes(data))


DAMAGES = [damage_zero, damage_odd_length, damage_delete, damage_past_end]


@pytest.mark.parametrize("damage", DAMAGES, ids=lambda f: f.__name__[7:])
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("which", ["first", "active"])
def test_damaged_index_reads_stay_right(tmp_path, damage, suffix, which):
    directory = build_log(tmp_path / "data", props="segment.bytes=1500\nindex.interval.bytes=150\n",
                          batches=30)
    pristine = files_of(directory)
    mgr = LogManager(directory.parent)
    expected = records_of(mgr.get("t-0"))
    mgr.close()
    bases = sorted(offset_from_file_name(p.name) for p in directory.glob("*.log"))
    assert len(bases) >= 3
    base = bases[0] if which == "first" else bases[-1]
    next_offset = bases[1] if which == "first" else expected[-1][0] + 1
    path = seg(directory, base, suffix)
    entry_size = 8 if suffix == ".index" else 12
    assert len(pristine[path.name]) >= 2 * entry_size, "the damaged index has several entries"
    damage(path, seg(directory, base, ".log"), base, next_offset)

    mgr = LogManager(directory.parent)
    log = mgr.get("t-0")
    check_reads(log, expected)
    segment = next(s for s in log.segments.all() if s.base_offset == base)
    largest = max(t for o, _, t in expected if base <= o < next_offset)
    assert segment.largest_timestamp == largest
    mgr.close()
    after = files_of(directory)
    assert after == pristine  # rebuilt as the appends first wrote them
    mgr = LogManager(directory.parent)
    check_reads(mgr.get("t-0"), expected)
    mgr.close()


# --------------------------------------------------------------------------- flipped bytes


def flip_inside(path: Path, position: int, batch: RecordBatch) -> None:
    """Flip a byte of the records of the batch at ``position`` (its CRC no longer matches)."""
    data = bytearray(path.read_bytes())
    data[position + 61 + (batch.size_in_bytes - 61) // 2] ^= 0x5A
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["active", "middle", "middle-bad-checkpoint"])
def test_flipped_byte_after_the_recovery_point_cuts_that_batch_only(tmp_path, where):
    """Kafka truncates at the first bad batch after the recovery point (a follower fetches the
    rest from the leader); kfs has no replica, so recovery at open salvages instead: the bad
    batch goes to the quarantine, every intact batch after it stays at its offsets (an offset
    gap, never a reused offset), and the next append goes after the old log end."""
    directory = build_log(tmp_path / "data", props="segment.bytes=1500\nindex.interval.bytes=150\n",
                          batches=30)
    mgr = LogManager(directory.parent)
    expected = records_of(mgr.get("t-0"))
    end = mgr.get("t-0").log_end_offset
    mgr.close()
    bases = sorted(offset_from_file_name(p.name) for p in directory.glob("*.log"))
    base = bases[-1] if where == "active" else bases[1]
    batches = batches_of(seg(directory, base, ".log"))
    assert len(batches) >= 3
    position, bad = batches[len(batches) // 2]
    flip_inside(seg(directory, base, ".log"), position, bad)
    crash(directory.parent)
    checkpoint = directory.parent / "recovery-point-offset-checkpoint"
    if where == "middle":  # a crash before any flush: everything is after the recovery point
        checkpoint.unlink()
    elif where == "middle-bad-checkpoint":  # a checkpoint that does not parse counts as none
        checkpoint.write_text("0\n1\nt 0\n")
    mgr = LogManager(directory.parent)
    log = mgr.get("t-0")
    kept = [r for r in expected if not bad.base_offset <= r[0] <= bad.last_offset]
    assert log.log_end_offset == end and records_of(log) == kept
    assert seg(directory, base, ".log").stat().st_size == \
        sum(b.size_in_bytes for _, b in batches) - bad.size_in_bytes
    assert sorted(offset_from_file_name(p.name) for p in directory.glob("*.log")) == bases
    assert any(f"offsets {bad.base_offset}-{bad.last_offset}" in line for line in mgr.notices)
    assert log.salvaged and mgr.notices
    (run,) = (directory.parent.parent / "data.quarantine").iterdir()
    (piece,) = (run / "t-0").iterdir()
    assert piece.stat().st_size == bad.size_in_bytes
    assert log.append([b"next"]) == end
    mgr.close()
    mgr = LogManager(directory.parent)
    assert records_of(mgr.get("t-0"))[:-1] == kept
    assert mgr.notices == []  # nothing more to salvage
    mgr.close()


@pytest.mark.parametrize("how", ["clean-shutdown", "crash-after-the-recovery-point"])
def test_flipped_byte_below_the_recovery_point_fails_that_batch_only(tmp_path, how):
    directory = build_log(tmp_path / "data", props="segment.bytes=1500\nindex.interval.bytes=150\n",
                          batches=30)
    mgr = LogManager(directory.parent)
    expected = records_of(mgr.get("t-0"))
    mgr.close()
    bases = sorted(offset_from_file_name(p.name) for p in directory.glob("*.log"))
    middle = seg(directory, bases[1], ".log")
    batches = batches_of(middle)
    position, bad = batches[len(batches) // 2]
    flip_inside(middle, position, bad)
    damaged = files_of(directory)
    if how != "clean-shutdown":
        crash(directory.parent)  # the recovery point checkpoint is past the middle segment
    mgr = LogManager(directory.parent)
    log = mgr.get("t-0")
    assert log.recovery_point == log.log_end_offset == expected[-1][0] + 1
    bad_offsets = range(bad.base_offset, bad.last_offset + 1)
    for offset, value, ts in expected:
        if offset in bad_offsets:
            with pytest.raises(CorruptRecordError):
                log.reader.read(offset)
        else:
            assert log.reader.read(offset).value == value
    with pytest.raises(CorruptRecordError):
        log.reader.records_from(bases[1], 1000)
    with pytest.raises(CorruptRecordError):
        log.reader.find_offset_by_timestamp(bad.max_timestamp)
    last_ts = expected[-1][2]
    assert log.reader.find_offset_by_timestamp(last_ts).offset == next(o for o, _, t in expected if t == last_ts)
    assert log.append([b"next"]) == expected[-1][0] + 1
    mgr.close()
    assert seg(directory, bases[1], ".log").read_bytes() == damaged[middle.name]  # never cut


# --------------------------------------------------------------------------- leftovers (§10.5)


SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")


def merged_segment(tmp_path: Path, directory: Path, bases: list[int]) -> dict[str, bytes]:
    """The files a cleaning of the segments at ``bases`` into one would write: their batches
    appended one by one to a new segment at the first base (the cleaner appends as a log does)."""
    scratch = tmp_path / "cleaner"
    build = LogManager(scratch)
    log = build.create("t-0")
    for base in bases:
        for _, batch in batches_of(seg(directory, base, ".log")):
            data = seg(directory, base, ".log").read_bytes()
            log.append_batches(data[_:_ + batch.size_in_bytes])
    build.close()
    out = {suffix: seg(scratch / "t-0", bases[0], suffix).read_bytes() for suffix in SEGMENT_SUFFIXES}
    shutil.rmtree(scratch)
    return out


def leftover_log(tmp_path: Path) -> tuple[Path, list[int], list]:
    directory = build_log(tmp_path / "data", props="segment.bytes=1500\nindex.interval.bytes=150\n",
                          batches=30)
    mgr = LogManager(directory.parent)
    expected = records_of(mgr.get("t-0"))
    mgr.close()
    bases = sorted(offset_from_file_name(p.name) for p in directory.glob("*.log"))
    assert len(bases) >= 3
    return directory, bases, expected


def rename(directory: Path, base: int, suffix: str) -> None:
    for kind in SEGMENT_SUFFIXES:
        path = seg(directory, base, kind)
        path.rename(path.with_name(path.name + suffix))


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir()
                  if p.suffix in (".deleted", ".cleaned", ".swap"))


@pytest.mark.parametrize("renamed", [SEGMENT_SUFFIXES, (".log",)], ids=["all", "log-only"])
def test_deleted_files_of_an_interrupted_retention_are_removed(tmp_path, renamed):
    directory, bases, expected = leftover_log(tmp_path)
    for suffix in renamed:  # retention renamed the segment's files (or some), then the crash
        path = seg(directory, bases[0], suffix)
        path.rename(path.with_name(path.name + ".deleted"))
    crash(directory.parent)
    mgr = LogManager(directory.parent)
    log = mgr.get("t-0")
    assert leftovers(directory) == []
    assert not [p for p in directory.glob(f"{filename_prefix(bases[0])}.*")
                if p.suffix in SEGMENT_SUFFIXES]  # nor orphan indexes
    assert log.log_start_offset == bases[1]
    assert records_of(log) == [r for r in expected if r[0] >= bases[1]]
    mgr.close()


@pytest.mark.parametrize("old", ["kept", "first-deleted", "all-deleted"])
def test_swap_files_of_a_finished_cleaning_replace_the_old_segments(tmp_path, old):
    directory, bases, expected = leftover_log(tmp_path)
    merged = merged_segment(tmp_path, directory, bases[:2])
    for suffix, data in merged.items():
        seg(directory, bases[0], suffix + ".swap").write_bytes(data)
    if old != "kept":  # the crash came while the old segments were being renamed .deleted
        for base in bases[:1] if old == "first-deleted" else bases[:2]:
            rename(directory, base, ".deleted")
    crash(directory.parent)
    mgr = LogManager(directory.parent)
    log = mgr.get("t-0")
    assert leftovers(directory) == []
    assert sorted(offset_from_file_name(p.name) for p in directory.glob("*.log")) == [bases[0]] + bases[2:]
    assert records_of(log) == expected
    mgr.close()
    for suffix, data in merged.items():
        assert seg(directory, bases[0], suffix).read_bytes() == data
    assert not [p for p in directory.glob(f"{filename_prefix(bases[1])}.*")
                if p.suffix in SEGMENT_SUFFIXES]


@pytest.mark.parametrize("state", ["cleaned-only", "cleaned-and-swap"])
def test_files_of_an_unfinished_cleaning_are_dropped(tmp_path, state):
    directory, bases, expected = leftover_log(tmp_path)
    before = files_of(directory)
    # A cleaning into two output segments (bases[0], bases[1]) renames them .cleaned -> .swap
    # in descending order; "cleaned-and-swap" crashed between the two renames.
    for base in bases[:2]:
        kind = ".swap" if state == "cleaned-and-swap" and base == bases[1] else ".cleaned"
        for suffix in SEGMENT_SUFFIXES:
            seg(directory, base, suffix + kind).write_bytes(seg(directory, base, suffix).read_bytes())
    crash(directory.parent)
    mgr = LogManager(directory.parent)
    assert leftovers(directory) == []
    assert records_of(mgr.get("t-0")) == expected
    mgr.close()
    after = files_of(directory)
    assert {k: v for k, v in after.items() if k.endswith(".log")} == \
        {k: v for k, v in before.items() if k.endswith(".log")}


# --------------------------------------------------------------------------- one writer


def test_a_second_writer_is_refused_and_readers_may_share(tmp_path):
    mgr = LogManager(tmp_path)
    mgr.create("t-0").append([b"x"])
    with pytest.raises(LogDirLockedError) as refused:
        LogManager(tmp_path)
    message = str(refused.value)
    assert str(tmp_path) in message and ".lock" in message and "--read-only" in message
    reader = LogManager(tmp_path, read_only=True)
    assert reader.get("t-0").reader.read(0).value == b"x"
    reader.close()
    mgr.close()
    LogManager(tmp_path).close()  # released by close


def test_kill9_releases_the_lock(tmp_path):
    # the child holds the directory until it is killed (it waits on its stdin, which stays open)
    script = ("import sys; from storage import LogManager; LogManager(sys.argv[1]); "
              "print('ready', flush=True); sys.stdin.read()")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env)
    try:
        assert Lines(proc.stdout, "the lock holder", proc).readline() == b"ready\n"
        with pytest.raises(LogDirLockedError):
            LogManager(tmp_path)
    finally:
        proc.kill()
        proc.wait(timeout=HANG_S)
        proc.stdin.close()
        proc.stdout.close()
    LogManager(tmp_path).close()
