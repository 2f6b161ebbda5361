"""``kfs verify`` run as a command: Kafka-written and engine-written directories are clean,
each kind of damage (a flipped byte, a torn .log, a zeroed .index, a lost .timeindex, bad index
entries, overlapping segments, leftovers) makes it exit 1 naming the file and the problem, and
``--repair --yes`` recovers so that a second verify is clean and every intact batch reads
back (tests/tools/test_repair.py: what a repair keeps and where)."""

import base64
import json
import os
import random
import shutil
import signal
import struct
import subprocess

import pytest
from helpers.damage import flip_bit
from helpers.kfs import kfs_command, kfs_env
from helpers.shell import sh
from helpers.waits import wait_for_exit
from helpers.paths import KAFKA_WRITTEN, REPO
from crc32c import crc32c

from storage import LogConfig, LogManager
from storage.log import Log
from storage.log_files import offset_file, offset_from_file_name
from storage.records import CompressionType, build_batch, iter_batches

FIXTURES = KAFKA_WRITTEN
TS = 1700000000000

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def kfs_verify(*args):
    return subprocess.run(kfs_command("verify", *map(str, args)), cwd=REPO, env=kfs_env(),
                          capture_output=True, text=True, timeout=300)


def problems(res):
    """The problem lines of a run (everything before the summary)."""
    lines = res.stdout.splitlines()
    summary = next(i for i, line in enumerate(lines) if " checked in " in line)
    return lines[:summary]


def copy_fixture(tmp_path, name="plain-0"):
    backing = tmp_path / "data"
    shutil.copytree(FIXTURES / name, backing / name)
    for path in [backing / name, *(backing / name).iterdir()]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return backing, backing / name


def engine_dir(tmp_path):
    """A partition written by the engine: 12 segments of batches in every codec, with keys,
    headers and a tombstone, closed cleanly."""
    backing = tmp_path / "data"
    part = backing / "orders-0"
    part.mkdir(parents=True)
    log = Log(part, "orders", 0, LogConfig(segment_bytes=6000, index_interval_bytes=700))
    offset = 0
    for i in range(120):
        n = 1 + i % 5
        values = [None if (i, j) == (7, 0) else random.Random(i * 10 + j).randbytes(60 * (1 + j))
                  for j in range(n)]
        keys = [f"key-{offset + j}".encode() for j in range(n)]
        headers = [[("h", bytes([j]))] for j in range(n)]
        log.append_batches(build_batch(offset, values, keys, [TS + 10 * i + j for j in range(n)],
                                       headers, codec=CompressionType(i % 5)))
        offset += n
    log.close()
    return backing, part


def segment(part, base, suffix):
    return offset_file(part, base, suffix)


def bases(part):
    return sorted(offset_from_file_name(p.name) for p in part.glob("*.log"))


def batch_spans(path):
    """(position, base offset, last offset, size) of every whole batch of a .log."""
    data = path.read_bytes()
    return [(b.position, b.base_offset, b.last_offset, b.size_in_bytes) for b in iter_batches(data)]


def records_by_offset(backing, name):
    mgr = LogManager(backing, read_only=True)
    try:
        log = mgr.get(name)
        out, offset = {}, 0
        while chunk := log.reader.records_from(offset, 500):
            out.update((r.offset, (r.key, r.value)) for r in chunk)
            offset = chunk[-1].offset + 1
        return out
    finally:
        mgr.close()


# -- clean directories ---------------------------------------------------------------------


@needs_fixtures
def test_kafka_written_fixtures_are_clean():
    res = kfs_verify(FIXTURES, "plain-0", "codecs-0", "compacted-0", "txn-0", "legacy-0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert problems(res) == []
    assert res.stdout.splitlines()[-1].startswith("5 partitions, 65 segments, ")
    assert res.stdout.splitlines()[-1].endswith(": no problems")
    assert res.stderr == ""  # no progress bar when stderr is not a terminal


def test_engine_written_directory_is_clean(tmp_path):
    backing, part = engine_dir(tmp_path)
    assert len(bases(part)) > 5
    res = kfs_verify(backing)
    assert res.returncode == 0, res.stdout
    assert "1 partition, " in res.stdout


def test_progress_bar_goes_to_stderr_only(tmp_path):
    backing, _ = engine_dir(tmp_path)
    quiet = kfs_verify(backing)
    res = kfs_verify("--progress", backing)
    assert res.returncode == 0
    assert "verify" in res.stderr and "B" in res.stderr
    assert problems(res) == problems(quiet) == []


@needs_fixtures
def test_usage_errors_exit_2(tmp_path):
    assert kfs_verify(tmp_path / "missing").returncode == 2
    res = kfs_verify(FIXTURES, "nope-0")
    assert res.returncode == 2 and "no partition nope-0" in res.stderr
    res = kfs_verify(FIXTURES / "plain-0")
    assert res.returncode == 2 and "partition directory" in res.stderr
    assert kfs_verify(FIXTURES, "bad name").returncode == 2
    assert kfs_verify().returncode == 2


def test_a_directory_that_is_not_a_kafka_log_directory_is_refused(tmp_path):
    """``kfs verify /etc/apt`` (issue 25): no partition directory, no meta.properties, none of
    the files kfs or a broker writes at the top: a usage error, not "0 partitions, no
    problems"; an empty directory too. A log directory with no partition yet is clean."""
    apt = tmp_path / "apt"
    (apt / "apt.conf.d").mkdir(parents=True)
    (apt / "sources.list.d").mkdir()
    (apt / "sources.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    (tmp_path / "empty").mkdir()
    for directory in (apt, tmp_path / "empty"):
        res = kfs_verify(directory)
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stdout == ""
        assert res.stderr == (f"kfs verify: error: {directory} is not a Kafka log directory (no "
                              "<topic>-<N> partition directory, no meta.properties, none of the "
                              "files kfs or a broker writes there)\n")
    for marker in ("meta.properties", ".kafka_cleanshutdown", "recovery-point-offset-checkpoint",
                   "orders.topic.properties"):
        fresh = tmp_path / marker.strip(".")
        fresh.mkdir()
        (fresh / marker).write_text("")
        res = kfs_verify(fresh)
        assert res.returncode == 0, (marker, res.stderr)
        assert res.stdout.splitlines()[-1].startswith("0 partitions, ")


def test_a_directory_whose_partitions_only_look_like_partitions_is_refused(tmp_path):
    """Issue 37 item 1: ``kfs verify /etc`` said "2 partitions, 0 segments ... no problems":
    ``dbus-1/`` holding ``system.conf`` and no segment is not a partition. A usage error naming
    the first foreign file, whether the directory has real partitions beside it or not, and when
    the directory is named."""
    etc = tmp_path / "etc"
    (etc / "dbus-1").mkdir(parents=True)
    (etc / "dbus-1" / "system.conf").write_text("<busconfig/>\n")
    (etc / "polkit-1").mkdir()
    (etc / "polkit-1" / "rules").write_text("")
    for args in ((etc,), (etc, "dbus-1")):
        res = kfs_verify(*args)
        assert res.returncode == 2, res.stdout + res.stderr
        assert res.stdout == ""
        assert res.stderr == (f"kfs verify: error: {etc / 'dbus-1'} is not a Kafka partition "
                              "directory: it holds system.conf, which neither kfs nor a broker "
                              "writes, and no segment or partition.metadata\n")
    (etc / "orders-0").mkdir()  # (an empty partition, as a broker's loader takes it)
    res = kfs_verify(etc)
    assert res.returncode == 2 and "dbus-1 is not a Kafka partition directory" in res.stderr
    assert kfs_verify(etc, "orders-0").returncode == 0


# -- damage --------------------------------------------------------------------------------


@needs_fixtures
def test_flipped_byte_in_a_batch(tmp_path):
    backing, part = copy_fixture(tmp_path)
    log = segment(part, 1032, ".log")
    position, base, _, size = batch_spans(log)[5]
    data = bytearray(log.read_bytes())
    data[position + size // 2] ^= 0x01
    log.write_bytes(data)
    # v2 layout: the CRC-32C at byte 17 covers everything from the attributes (byte 21) on
    stored = struct.unpack_from(">I", data, position + 17)[0]
    computed = crc32c(bytes(data[position + 21:position + size]))
    assert computed != stored
    res = kfs_verify(backing)
    assert res.returncode == 1
    assert problems(res) == [
        f"plain-0/{log.name}:{position}: Record batch at offset {base} is corrupt "
        f"(stored crc = {stored}, computed crc = {computed})"]


@needs_fixtures
def test_log_truncated_mid_batch(tmp_path):
    backing, part = copy_fixture(tmp_path)
    log = segment(part, 2950, ".log")
    spans = batch_spans(log)
    position, _, _, size = spans[-3]
    os.truncate(log, position + size // 2)
    res = kfs_verify(backing)
    assert res.returncode == 1
    lines = problems(res)
    assert lines[0] == (f"plain-0/{log.name}:{position}: {size // 2} bytes after the last whole "
                        "batch (a torn write, or a corrupt batch size)")
    # the time index still names the lost batches
    assert any(line.startswith(f"plain-0/{log.stem}.timeindex") for line in lines[1:])


@needs_fixtures
def test_zeroed_index(tmp_path):
    backing, part = copy_fixture(tmp_path)
    index = segment(part, 0, ".index")
    slots = index.stat().st_size // 8
    index.write_bytes(bytes(slots * 8))
    res = kfs_verify(backing)
    assert res.returncode == 1
    assert problems(res) == [
        f"plain-0/{index.name}:8: {slots - 1} zero-filled slots after the last entry: the index "
        "was not trimmed (Kafka would read them as entries)"]


@needs_fixtures
def test_deleted_time_index(tmp_path):
    backing, part = copy_fixture(tmp_path)
    segment(part, 446, ".timeindex").unlink()
    res = kfs_verify(backing)
    assert res.returncode == 1
    assert problems(res) == [
        "plain-0/00000000000000000446.timeindex: missing (Kafka would create it empty and lose "
        "the segment's largest timestamp; recovery rebuilds it)"]


@needs_fixtures
def test_leftovers_and_orphans(tmp_path):
    backing, part = copy_fixture(tmp_path)
    for name in ("00000000000000000253.log.cleaned", "00000000000000000253.index.swap",
                 "00000000000000000100.log.deleted", "00000000000000009999.index"):
        (part / name).write_bytes(b"")
    lines = problems(kfs_verify(backing))
    assert [line.split(":")[0] for line in lines] == [
        "plain-0/00000000000000000100.log.deleted", "plain-0/00000000000000000253.index.swap",
        "plain-0/00000000000000000253.log.cleaned", "plain-0/00000000000000009999.index"]
    assert "leftover" in lines[0] and "without its .log" in lines[3]


def test_bad_index_entries(tmp_path):
    backing, part = engine_dir(tmp_path)
    base = bases(part)[2]
    index = segment(part, base, ".index")
    entries = list(struct.iter_unpack(">ii", index.read_bytes()))
    assert len(entries) >= 2
    spans = batch_spans(segment(part, base, ".log"))
    rel, position = entries[1]
    # an entry whose position is the batch after the one holding its offset
    later = next(p for p, _, last, _ in spans if p > position and last > base + rel)
    holder = next(p for p, _, last, _ in spans if last >= base + rel)
    bad = list(entries)
    bad[1] = (rel, later)
    index.write_bytes(b"".join(struct.pack(">ii", *e) for e in bad))
    lines = problems(kfs_verify(backing))
    assert lines == [
        f"orders-0/{index.name}:8: entry (offset {base + rel}, position {later}): past the batch "
        f"holding offset {base + rel} (at position {holder}): a lookup would skip it"]
    bad[1] = (rel, position + 1)  # not a batch start
    index.write_bytes(b"".join(struct.pack(">ii", *e) for e in bad))
    assert problems(kfs_verify(backing)) == [
        f"orders-0/{index.name}:8: entry (offset {base + rel}, position {position + 1}): no batch "
        "starts at that position"]
    bad[1] = entries[0]  # not increasing
    index.write_bytes(b"".join(struct.pack(">ii", *e) for e in bad))
    assert "entries must strictly increase" in problems(kfs_verify(backing))[0]


def test_bad_time_index_entry(tmp_path):
    backing, part = engine_dir(tmp_path)
    base = bases(part)[1]
    path = segment(part, base, ".timeindex")
    entries = list(struct.iter_unpack(">qi", path.read_bytes()))
    ts, rel = entries[0]
    path.write_bytes(struct.pack(">qi", ts - 1, rel) + path.read_bytes()[12:])
    assert problems(kfs_verify(backing)) == [
        f"orders-0/{path.name}:0: entry (timestamp {ts - 1}, offset {base + rel}): the largest "
        f"timestamp up to that offset is {ts}"]
    inside = next(first for _, first, last, _ in batch_spans(segment(part, base, ".log")) if last > first)
    path.write_bytes(struct.pack(">qi", ts, inside - base) + path.read_bytes()[12:])
    assert "no batch ends at that offset" in problems(kfs_verify(backing))[0]
    path.write_bytes(b"".join(struct.pack(">qi", *e) for e in entries[:-1]))  # final entry lost
    assert problems(kfs_verify(backing)) == [
        f"orders-0/{path.name}: last entry (timestamp {entries[-2][0]}, offset "
        f"{base + entries[-2][1]}), but the segment's largest timestamp is {entries[-1][0]} (at "
        f"offset {base + entries[-1][1]}): Kafka takes it from the last entry (retention, "
        "ListOffsets)"]


def test_overlapping_segments_and_offsets_going_back(tmp_path):
    part = tmp_path / "data" / "t-0"
    part.mkdir(parents=True)
    first = build_batch(0, [b"a"] * 10, None, TS)
    second = build_batch(5, [b"b"] * 10, None, TS + 1)
    segment(part, 0, ".log").write_bytes(first)
    segment(part, 5, ".log").write_bytes(second)
    for base in (0, 5):
        segment(part, base, ".index").write_bytes(b"")
    segment(part, 0, ".timeindex").write_bytes(struct.pack(">qi", TS, 9))
    segment(part, 5, ".timeindex").write_bytes(struct.pack(">qi", TS + 1, 9))
    lines = problems(kfs_verify(tmp_path / "data"))
    assert lines == [
        "t-0/00000000000000000005.log: base offset 5 is below the end of the segment before (offset 9)",
        "t-0/00000000000000000005.log:0: offsets go back: batch at offset 5 follows one ending at offset 9"]
    segment(part, 5, ".log").rename(segment(part, 7, ".log"))
    for suffix in (".index", ".timeindex"):
        segment(part, 5, suffix).rename(segment(part, 7, suffix))
    segment(part, 7, ".timeindex").write_bytes(struct.pack(">qi", TS + 1, 7))
    assert ("t-0/00000000000000000007.log:0: first batch starts at offset 5, below the segment's "
            "base offset 7") in problems(kfs_verify(tmp_path / "data"))


# -- repair --------------------------------------------------------------------------------


def expected_records(name):
    rows = [json.loads(line) for line in open(FIXTURES / f"{name}.expected.jsonl")]
    def b64(text):
        return None if text is None else base64.b64decode(text)
    return {r["offset"]: (b64(r["key"]), b64(r["value"])) for r in rows if not r["isControl"]}


@needs_fixtures
@pytest.mark.parametrize("damage", ["flip", "truncate", "zero-index", "drop-timeindex"])
def test_repair_then_verify_is_clean_and_every_intact_batch_reads(tmp_path, damage):
    backing, part = copy_fixture(tmp_path)
    base = 2209
    log = segment(part, base, ".log")
    spans = batch_spans(log)
    position, damaged_base, damaged_last, _ = spans[len(spans) // 2]
    lost = range(0)
    if damage == "flip":
        data = bytearray(log.read_bytes())
        data[position + 30] ^= 0x80
        log.write_bytes(data)
        lost = range(damaged_base, damaged_last + 1)  # that batch alone
    elif damage == "truncate":
        os.truncate(log, position + 20)
        lost = range(damaged_base, bases(part)[bases(part).index(base) + 1])  # to the segment's end
    elif damage == "zero-index":
        index = segment(part, base, ".index")
        index.write_bytes(bytes(index.stat().st_size))
    else:
        segment(part, base, ".timeindex").unlink()
    assert kfs_verify(backing).returncode == 1
    res = kfs_verify("--repair", "--yes", backing)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "repair done" in res.stdout
    assert res.stdout.splitlines()[-1].endswith(": no problems")
    if lost:
        assert f"plain-0/{log.name}: cut bytes {position}-" in res.stdout
    assert kfs_verify(backing).returncode == 0
    got = records_by_offset(backing, "plain-0")
    expected = {o: kv for o, kv in expected_records("plain-0").items() if o not in lost}
    assert got == expected


def test_repair_of_a_clean_directory_changes_nothing(tmp_path):
    backing, part = engine_dir(tmp_path)
    before = {p.name: p.read_bytes() for p in part.iterdir()}
    res = kfs_verify("--repair", backing)
    assert res.returncode == 0 and "repair" not in res.stdout
    assert {p.name: p.read_bytes() for p in part.iterdir()} == before


@needs_fixtures
def test_corrupt_snapshot_and_transaction_index(tmp_path):
    backing, part = copy_fixture(tmp_path, "txn-0")
    snapshot = part / "00000000000000000278.snapshot"
    data = bytearray(snapshot.read_bytes())
    data[-1] ^= 0x01
    snapshot.write_bytes(data)
    txnindex = part / "00000000000000000184.txnindex"
    entry = txnindex.read_bytes()
    txnindex.write_bytes(entry + entry + b"\0" * 5)  # the same entry twice, then a partial one
    lines = problems(kfs_verify(backing))
    assert lines[0].startswith("txn-0/00000000000000000278.snapshot: Snapshot is corrupt (CRC is "
                               "no longer valid).")
    assert lines[1:] == [
        "txn-0/00000000000000000184.txnindex:34: last offset 262 does not follow the entry before "
        "(262): entries must strictly increase",
        "txn-0/00000000000000000184.txnindex:68: 5 bytes of a partial entry at the end"]


def test_a_directory_a_writable_mount_holds_is_checked_as_a_running_log(tmp_path, mount):
    """Beside a writable mount (which holds .lock, as a broker does), the active segments'
    preallocated indexes are not problems, and verify says the directory is in use; once the
    mount is gone, the same directory is clean too (its indexes trimmed at close)."""
    m = mount()
    for name in ("a-0", "b-0"):
        os.mkdir(m.path / name)
        with open(m.path / name / "append", "w") as f:
            f.write("x\ny\n")
    res = kfs_verify(str(m.backing))
    assert res.returncode == 0, res.stdout
    assert "is in use (a kfs mount or a Kafka broker holds its .lock)" in res.stdout
    assert "no problems" in res.stdout
    mount.unmount(m)
    res = kfs_verify(str(m.backing))
    assert res.returncode == 0 and "in use" not in res.stdout, res.stdout


def test_right_after_a_kill9_the_active_segments_state_is_not_a_problem(tmp_path, mount):
    """Issue 37, item 9: ``kfs verify`` right after a kill -9 of a writable mount: the active
    segment's preallocated indexes and its time index without the largest timestamp are the
    state of an uncleanly closed log, which the next start recovers as Kafka's loader does:
    said, marked, exit 0. Real damage beside them is still a problem (exit 1); after the next
    mount and a clean unmount nothing is left to say."""
    m = mount()
    sh("mkdir a-0 && for i in 1 2 3; do echo line-$i >> a-0/append; done", m.path)
    os.kill(m.pid, signal.SIGKILL)
    assert wait_for_exit(m.pid, 10)
    sh(f"fusermount3 -u -z {m.path}")
    res = kfs_verify(m.backing)
    assert res.returncode == 0, res.stdout
    assert "was not shut down cleanly (no .kafka_cleanshutdown" in res.stdout
    marked = [line for line in res.stdout.splitlines()
              if line.endswith(" [recovered at the next start]")]
    assert [line.split(":")[0] for line in marked] == [
        "a-0/00000000000000000000.index", "a-0/00000000000000000000.timeindex",
        "a-0/00000000000000000000.timeindex"], res.stdout
    assert res.stdout.splitlines()[-1].endswith(
        "no problems (3 findings marked [recovered at the next start]: an uncleanly closed "
        "log's state, not damage)"), res.stdout
    log = m.backing / "a-0" / "00000000000000000000.log"
    flip_bit(log, log.stat().st_size - 3)  # real damage: the last batch's CRC fails
    res = kfs_verify(m.backing)
    assert res.returncode == 1, res.stdout
    assert "1 problem (3 findings marked [recovered at the next start]" in res.stdout
    flip_bit(log, log.stat().st_size - 3)
    mount.unmount(mount(m.backing))  # recovers, then closes cleanly
    res = kfs_verify(m.backing)
    assert res.returncode == 0 and "recovered" not in res.stdout, res.stdout
