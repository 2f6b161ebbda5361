"""Repair never throws good data away, and one damaged partition never takes the others down
(the engine and ``kfs verify --repair`` run as a command).

* ``kfs verify --repair`` says what it would cut and changes nothing without ``--yes``; with it,
  only the damaged batch goes, byte for byte into a quarantine beside the backing directory,
  with a manifest saying where it came from, and every intact batch after it stays.
* A writable open after an unclean shutdown cuts a corrupt batch as Kafka does, but keeps
  what it cuts, and the segments after it, in the quarantine when intact data follows; a torn
  tail alone is cut.
* A partition whose end cannot be read opens up to the damage (read-only or writable, with a
  clean-shutdown marker) and refuses appends; the others open as usual.
"""

import hashlib
import json
import os
import subprocess

import pytest
from helpers.damage import (
    FIRST,
    LAST,
    batches,
    copy_partitions,
    digests,
    expected,
    flip_bit,
    lie_about_length,
)
from helpers.kfs import kfs_command, kfs_env, kfs_verify
from helpers.paths import REPO
from kfs.tools.verify import describe_plan, plan_repair
from helpers.waits import Lines

from storage import LogManager
from storage.clock import FixedClock
from storage.errors import DamagedLogError
from storage.quarantine import Quarantine

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def read_all(backing, name):
    """offset -> (key, value) of every record a read-only open of ``backing`` serves."""
    mgr = LogManager(backing, read_only=True)
    try:
        log = mgr.get(name)
        return {r.offset: (r.key, r.value) for records in log.reader.record_lists(0) for r in records}
    finally:
        mgr.close()


def manifest(quarantine_root):
    """The manifest entries of the one run under ``quarantine_root``, and that run's dir."""
    (run,) = quarantine_root.iterdir()
    return [json.loads(line) for line in (run / "manifest.jsonl").read_text().splitlines()], run


# -- kfs verify --repair -------------------------------------------------------------------


@needs_fixtures
def test_one_flipped_bit_costs_one_batch_and_the_cut_bytes_are_kept(tmp_path):
    backing = copy_partitions(tmp_path / "data", "plain-0", clean_shutdown=False)
    part = backing / "plain-0"
    position, base, size = batches(part / FIRST)[1]
    assert (position, base, size) == (1032, 8, 8389)  # the batch at offset 8
    flip_bit(part / FIRST, position + 100)
    damaged = (part / FIRST).read_bytes()
    before = digests(backing)

    asked = kfs_verify("--repair", backing)
    assert asked.returncode == 1, asked.stdout + asked.stderr
    assert (f"plain-0/{FIRST}: cut bytes 1032-9421 (8389 bytes, offsets 8-25, 18 records by "
            "the headers; the intact batches after it stay: offsets 26-4999)") in asked.stdout
    assert "nothing changed: run with --yes to repair" in asked.stdout
    assert digests(backing) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # no quarantine made yet

    done = kfs_verify("--repair", "--yes", backing)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].endswith(": no problems")
    entries, run = manifest(tmp_path / "data.quarantine")
    assert f"quarantine manifest: {run / 'manifest.jsonl'}" in done.stdout
    assert entries == [{
        "partition": "plain-0", "source": f"plain-0/{FIRST}", "start": 1032, "end": 9421,
        "bytes": 8389, "firstOffset": 8, "lastOffset": 25, "records": 18,
        "reason": entries[0]["reason"], "file": f"plain-0/{FIRST}.1032-9421",
        "sha256": hashlib.sha256(damaged[1032:9421]).hexdigest()}]
    assert "Record batch at offset 8 is corrupt" in entries[0]["reason"]
    kept = run / entries[0]["file"]
    assert f"kept plain-0/{FIRST} bytes 1032-9421 as {kept}" in done.stdout
    assert kept.read_bytes() == damaged[1032:9421]  # byte for byte what was cut
    assert (part / FIRST).read_bytes() == damaged[:1032] + damaged[9421:]
    # nothing was added at the top of the backing directory (a broker would refuse a
    # directory there that is not a partition)
    assert [p.name for p in backing.iterdir() if p.is_dir()] == ["plain-0"]

    assert kfs_verify(backing).returncode == 0
    want = {o: kv for o, kv in expected().items() if not 8 <= o <= 25}
    assert len(want) == 4982
    assert read_all(backing, "plain-0") == want
    mgr = LogManager(backing)  # opens writable, and takes appends at the old log end
    try:
        assert mgr.get("plain-0").append([b"after the repair"]) == 5000
    finally:
        mgr.close()


@needs_fixtures
def test_repair_steps_over_a_lying_batch_length_to_the_next_intact_batch(tmp_path):
    backing = copy_partitions(tmp_path / "data", "plain-0")
    part = backing / "plain-0"
    spans = batches(part / "00000000000000002209.log")
    position = lie_about_length(part / "00000000000000002209.log", 2, length=5)
    resume, resume_offset = spans[3][0], spans[3][1]
    done = kfs_verify("--repair", "--yes", backing)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (f"plain-0/00000000000000002209.log: cut bytes {position}-{resume} "
            f"({resume - position} bytes, offsets {spans[2][1]}-{resume_offset - 1}, record "
            "count unknown (a header is damaged)") in done.stdout
    want = {o: kv for o, kv in expected().items() if not spans[2][1] <= o < resume_offset}
    assert read_all(backing, "plain-0") == want


@needs_fixtures
def test_a_torn_tail_is_kept_too_and_quarantine_goes_where_asked(tmp_path):
    backing = copy_partitions(tmp_path / "data", "plain-0")
    last = backing / "plain-0" / LAST
    position, base, _ = batches(last)[-1]
    data = last.read_bytes()
    os.truncate(last, position + 30)
    inside = kfs_verify("--repair", "--yes", "--quarantine", backing / "q", backing)
    assert inside.returncode == 2 and "outside the backing directory" in inside.stderr
    assert not (backing / "q").exists()

    done = kfs_verify("--repair", "--yes", "--quarantine", tmp_path / "kept", backing)
    assert done.returncode == 0, done.stdout + done.stderr
    entries, run = manifest(tmp_path / "kept")
    assert [(e["start"], e["end"], e["firstOffset"]) for e in entries] == \
        [(position, position + 30, base)]
    assert (run / entries[0]["file"]).read_bytes() == data[position:position + 30]
    assert max(read_all(backing, "plain-0")) == base - 1


@pytest.mark.needs_fixture("kafka-written/codecs-0")
@needs_fixtures
def test_the_repair_plan_lists_every_file_the_repair_changes(tmp_path):
    """The repair recovers the whole directory, so an undamaged partition beside the damaged
    one loses its producer snapshots too (a replay from the first segment keeps only the one
    at the log end): the plan says so, file by file, and every file the repair then changes,
    in any partition or at the top, is named in the plan (index files by their partition's
    'rebuilt' line)."""
    backing = copy_partitions(tmp_path / "data", "plain-0", "codecs-0", clean_shutdown=False)
    flip_bit(backing / "plain-0" / FIRST, batches(backing / "plain-0" / FIRST)[1][0] + 100)
    snapshots = sorted(p.name for p in (backing / "codecs-0").glob("*.snapshot"))
    assert len(snapshots) == 23
    asked = kfs_verify("--repair", backing)
    assert asked.returncode == 1, asked.stdout + asked.stderr
    plan = asked.stdout.split("repair plan (nothing has changed yet):\n")[1].split(
        "nothing changed")[0]
    assert (f"codecs-0: 22 producer snapshots deleted ({', '.join(snapshots[:-1])}): the "
            "producer state is replayed from the first segment; "
            f"{snapshots[-1]} written again at the close") in plan, plan
    assert "codecs-0: no problem, recovered too" in plan
    before = digests(backing)
    done = kfs_verify("--repair", "--yes", backing)
    assert done.returncode == 0, done.stdout + done.stderr
    after = digests(backing)
    changed = sorted(name for name in before.keys() | after.keys()
                     if before.get(name) != after.get(name))
    assert "codecs-0/" + snapshots[0] in changed
    rebuilt = [line.split(":")[0].strip() for line in plan.splitlines() if "indexes" in line]
    for name in changed:
        partition, _, file = name.rpartition("/")
        if file.endswith((".index", ".timeindex", ".txnindex")):
            assert partition in rebuilt, (name, plan)
        elif file.endswith(".log"):
            assert f"{name}:" in plan, (name, plan)
        else:
            assert file in plan, (name, plan)
    assert sorted(p.name for p in (backing / "codecs-0").glob("*.snapshot")) == snapshots[-1:]


def test_repair_of_a_clean_directory_asks_nothing_and_keeps_nothing(tmp_path):
    backing = tmp_path / "data"
    mgr = LogManager(backing)
    mgr.create("t-0").append([b"a", b"b"])
    mgr.close()
    res = kfs_verify("--repair", backing)
    assert res.returncode == 0 and "repair" not in res.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_an_empty_segment_before_the_last_is_no_damage_and_no_repair_moves_it(tmp_path):
    """Kafka keeps an empty segment (compaction can leave one): a healthy directory holding
    one needs no repair, and a repair of another segment's damage leaves it where it is."""
    backing = tmp_path / "data"
    mgr = LogManager(backing)
    log = mgr.create("t-0")
    log.append([b"a", b"b"])
    log.roll()
    log.append([b"c", b"d"])
    log.roll()
    log.append([b"e"])
    mgr.close()
    part = backing / "t-0"
    empty = part / "00000000000000000002.log"
    for suffix in (".log", ".index", ".timeindex"):  # as if compaction emptied it
        empty.with_suffix(suffix).write_bytes(b"")
    res = kfs_verify("--repair", backing)
    assert res.returncode == 0 and "repair" not in res.stdout, res.stdout + res.stderr
    flip_bit(part / "00000000000000000000.log", 70)
    plan = plan_repair([part])
    assert "t-0/00000000000000000002.log" not in "\n".join(describe_plan(plan))
    assert plan.cut_bytes > 0
    done = kfs_verify("--repair", "--yes", backing)
    assert done.returncode == 0, done.stdout + done.stderr
    assert empty.exists() and empty.read_bytes() == b""


# -- recovery after an unclean shutdown ----------------------------------------------------


@needs_fixtures
def test_recovery_keeps_every_intact_batch_after_a_corrupt_one(tmp_path, caplog):
    """Recovery after a crash salvages, where Kafka's rule would end the log before the
    corrupt batch: only its bytes go to the quarantine, the 20 segments after it stay."""
    backing = copy_partitions(tmp_path / "data", "plain-0", clean_shutdown=False)
    part = backing / "plain-0"
    flip_bit(part / FIRST, 1032 + 100)
    originals = {p.name: p.read_bytes() for p in part.glob("*.log")}
    mgr = LogManager(backing)
    try:
        log = mgr.get("plain-0")
        assert log.log_end_offset == 5000
        assert [r.offset for r in log.reader.records_from(0, 30)] == [*range(8), *range(26, 48)]
    finally:
        mgr.close()
    entries, run = manifest(tmp_path / "data.quarantine")
    assert [(e["source"], e["start"], e["end"]) for e in entries] == [
        (f"plain-0/{FIRST}", 1032, 9421)]
    assert (run / entries[0]["file"]).read_bytes() == originals[FIRST][1032:9421]
    assert (part / FIRST).read_bytes() == originals[FIRST][:1032] + originals[FIRST][9421:]
    assert all((part / name).read_bytes() == data for name, data in originals.items()
               if name != FIRST)
    assert "offsets 8-25" in caplog.text and "26-4999 after them are kept" in caplog.text


@needs_fixtures
def test_recovery_cuts_a_torn_tail_as_kafka_does_and_keeps_it(tmp_path):
    # cut as Kafka cuts it, but kept and said (issue 25, item 1): every byte cut is kept
    backing = copy_partitions(tmp_path / "data", "plain-0", clean_shutdown=False)
    last = backing / "plain-0" / LAST
    position, base, _ = batches(last)[-1]
    os.truncate(last, position + 30)
    torn = last.read_bytes()[position:]
    mgr = LogManager(backing)
    try:
        assert mgr.get("plain-0").log_end_offset == base
        assert [line.split(":")[0] for line in mgr.notices] == ["plain-0"]
    finally:
        mgr.close()
    assert last.stat().st_size == position
    entries, run = manifest(tmp_path / "data.quarantine")
    assert [(e["source"], e["start"], e["end"], e["firstOffset"]) for e in entries] == [
        (f"plain-0/{LAST}", position, position + 30, base)]
    assert (run / entries[0]["file"]).read_bytes() == torn


# -- a damaged partition opens, up to the damage ---------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("read_only", [True, False])
def test_a_partition_whose_end_cannot_be_read_opens_up_to_it(tmp_path, read_only):
    backing = copy_partitions(tmp_path / "data", "plain-0", "codecs-0")
    part = backing / "plain-0"
    first_lost = batches(part / LAST)[-3][1]
    position = lie_about_length(part / LAST, -3)
    before = digests(part)
    mgr = LogManager(backing, read_only=read_only)
    try:
        assert mgr.partition_names() == ["codecs-0", "plain-0"]
        log = mgr.get("plain-0")
        assert (log.damage.file, log.damage.position, log.damage.offset) == \
            (LAST, position, first_lost)
        assert "smaller than minimum record overhead" in log.damage.reason
        assert log.log_end_offset == first_lost
        assert log.reader.read(first_lost - 1).value == expected()[first_lost - 1][1]
        with pytest.raises(DamagedLogError, match="appends are refused until `kfs verify"):
            log.append([b"x"])
        if not read_only:
            assert mgr.get("codecs-0").append([b"fine"]) == 2000
        assert mgr.get("codecs-0").damage is None
    finally:
        mgr.close()
    assert digests(part) == before  # a damaged partition is left as it is, for a repair


@needs_fixtures
def test_a_partition_whose_cut_cannot_be_kept_is_left_alone_and_served(tmp_path):
    backing = copy_partitions(tmp_path / "data", "plain-0", "codecs-0", clean_shutdown=False)
    part = backing / "plain-0"
    flip_bit(part / FIRST, 1032 + 100)
    logs_before = {p.name: p.read_bytes() for p in part.glob("*.log")}
    nowhere = Quarantine("/proc/kfs-cannot-be-made", keep_all=False)
    mgr = LogManager(backing, quarantine=nowhere)
    try:
        log = mgr.get("plain-0")
        assert "cannot create a quarantine directory" in log.damage.reason
        assert log.reader.read(7).value == expected()[7][1]
        with pytest.raises(DamagedLogError):
            log.append([b"x"])
        assert mgr.get("codecs-0").append([b"fine"]) == 2000
    finally:
        mgr.close()
    assert {p.name: p.read_bytes() for p in part.glob("*.log")} == logs_before


def run_on_a_terminal(args, answer):
    """``kfs *args`` with a pty as stdin and stdout: ``answer`` is typed once it asks."""
    import pty

    master, slave = pty.openpty()
    proc = subprocess.Popen(kfs_command(*map(str, args)), cwd=REPO, env=kfs_env(), stdin=slave,
                            stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    terminal = Lines(master, "kfs on its terminal", proc)  # (EIO once the child closed it)
    try:
        terminal.until(b"repair now? [y/N] ", timeout=120)
        os.write(master, answer + b"\n")
        out = terminal.rest(timeout=120)
    finally:
        os.close(master)
        proc.wait(timeout=120)
    return proc.returncode, out.decode(errors="replace")


@needs_fixtures
def test_repair_asks_on_a_terminal(tmp_path):
    backing = copy_partitions(tmp_path / "data", "plain-0")
    flip_bit(backing / "plain-0" / FIRST, 1032 + 100)
    before = digests(backing)
    status, out = run_on_a_terminal(["verify", "--repair", backing], b"n")
    assert status == 1 and "nothing changed" in out
    assert digests(backing) == before
    status, out = run_on_a_terminal(["verify", "--repair", backing], b"y")
    assert status == 0, out
    assert "repair done" in out and out.rstrip().endswith("no problems")
    assert len(read_all(backing, "plain-0")) == 4982


def test_a_quarantine_is_named_by_its_clock_and_a_second_run_of_that_millisecond_numbered(tmp_path):
    source = tmp_path / "t-0" / "00000000000000000000.log"
    source.parent.mkdir()
    source.write_bytes(b"abcdef")
    runs = [Quarantine(tmp_path / "q", keep_all=True, clock=FixedClock(1_735_787_045_678))
            for _ in range(2)]
    for run in runs:
        run.keep_bytes(source, 0, 3, reason="test")
    assert [run.directory.name for run in runs] == ["20250102T030405.678Z",
                                                     "20250102T030405.678Z.2"]
