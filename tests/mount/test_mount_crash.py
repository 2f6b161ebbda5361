"""Crashes through real mounts: the serving process killed with SIGKILL while a writer appends,
corrupt batches read through the mount, and the one-writer lock between mounts.

A line is acknowledged when the ``write()`` that carried it returned (a trailing partial line:
when ``close()`` returned). It is then in the page cache, which outlives the killed process, so
after ``fusermount3 -u -z`` and a remount (recovery without the clean-shutdown marker) every
acknowledged line reads back whole at its offset and the log continues after it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys

from helpers.append_writer import acknowledged, line_for
from helpers.kfs import kfs_command, kfs_env
from helpers.mounts import is_mounted
from helpers.paths import REPO
from helpers.shell import sh
from helpers.waits import Lines, wait_for_exit

from storage import LogManager
from storage.log_files import CLEAN_SHUTDOWN_FILE
from storage.records import iter_batches

# The writer the kill -9 trials run, its lines and its acknowledgements: helpers/append_writer.py.
MAX_ACKS = 40  # a trial kills after 1..MAX_ACKS acknowledged writes (as benchmarks/crash_trials.py)
HANG_S = 120  # ends a hung wait only: the writer reports at its own pace


def kill9(m) -> None:
    """kill -9 the serving process and detach its dead mount."""
    os.kill(m.pid, signal.SIGKILL)
    assert wait_for_exit(m.pid, 10)
    subprocess.run(["fusermount3", "-u", "-z", str(m.path)], check=True, capture_output=True,
                   timeout=30)
    assert not is_mounted(m.path)


def test_kill9_of_the_mount_keeps_every_acknowledged_line(mount, tmp_path):
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "orders.topic.properties").write_text("segment.bytes=20000\nindex.interval.bytes=500\n")
    m = mount(backing)
    sh("mkdir orders-0", m.path, timeout=60)
    env = kfs_env(tests=True)  # the writer: helpers/append_writer.py
    rng = random.Random(7)
    leo = 0
    for trial in range(12):
        writer = subprocess.Popen(
            [sys.executable, "-m", "helpers.append_writer", str(m.path / "orders-0" / "append"),
             str(leo), str(trial)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=tmp_path)
        out = Lines(writer.stdout, f"the writer of trial {trial}", writer)
        try:
            # "ready", then the kill once the writer reported the chosen number of acknowledged
            # writes (however slow the machine is): it lands in what the writer does next
            out.wait_for(1 + rng.randint(1, MAX_ACKS), timeout=HANG_S)
            assert out.lines[0] == b"ready\n", out.lines[0]
            assert writer.poll() is None, writer.stderr.read().decode()
            kill9(m)
            text = out.rest(timeout=30).decode()  # its next write fails: the connection is gone
            writer.wait(timeout=30)
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait(timeout=30)
            writer.stdout.close()
            writer.stderr.close()
        acked = acknowledged(text)
        assert acked >= leo, "the writer got at least one write through"
        assert not (backing / CLEAN_SHUTDOWN_FILE).exists()

        m = mount(backing)  # recovers: no clean-shutdown marker
        part = m.path / "orders-0"
        new_leo = int(os.getxattr(part, "user.kafka.logEndOffset"))
        assert new_leo >= acked + 1, (trial, new_leo, acked)
        listed = sorted(int(n) for n in os.listdir(part / "by-offset"))
        assert listed == list(range(new_leo)), trial
        for offset in range(leo, new_leo):  # earlier offsets were checked by earlier trials
            assert (part / "by-offset" / str(offset)).read_bytes() == line_for(offset), offset
        sample = sorted(random.Random(trial).sample(range(new_leo), min(new_leo, 5)))
        res = sh(" && ".join(f"cat orders-0/by-offset/{o} && echo" for o in sample), m.path,
                 check=False, timeout=60)
        assert res.stdout == b"".join(line_for(o) + b"\n" for o in sample), res.stderr
        # the log continues right after the last line: the next line gets the next offset
        sh(f"echo '{line_for(new_leo).decode()}' >> orders-0/append", m.path, timeout=60)
        assert (part / "by-offset" / str(new_leo)).read_bytes() == line_for(new_leo)
        leo = new_leo + 1
    mount.unmount(m)
    mgr = LogManager(backing, read_only=True)
    log = mgr.get("orders-0")
    assert log.log_end_offset == leo and len(log.segments) > 1
    assert all(r.value == line_for(r.offset) for r in log.reader.records_from(0, leo))
    mgr.close()


def test_kill9_then_a_corrupt_batch_loses_that_batch_only(mount, tmp_path):
    """Crash trials with damage: after each kill -9 a bit flips in a batch of the active
    segment that intact batches follow. The next mount salvages: only that batch's lines are
    gone (into the quarantine), every other acknowledged line stays at its offset, and the next
    line goes after the old log end (no offset reused)."""
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "orders.topic.properties").write_text("segment.bytes=20000\n")
    m = mount(backing)
    part_dir = backing / "orders-0"
    sh("mkdir orders-0", m.path, timeout=60)
    lost: set[int] = set()
    leo, rng = 0, random.Random(11)
    for trial in range(3):
        for _ in range(30):  # one write, one batch: every one acknowledged when echo returns
            lines = [line_for(o) for o in range(leo, leo + 3)]
            with open(m.path / "orders-0" / "append", "ab") as f:
                f.write(b"".join(line + b"\n" for line in lines))
            leo += 3
        kill9(m)
        active = sorted(part_dir.glob("*.log"))[-1]
        found = [(pos, b) for pos, b in _positions(active.read_bytes())]
        position, bad = found[rng.randrange(len(found) - 1)]  # intact batches follow it
        data = bytearray(active.read_bytes())
        data[position + 61 + (bad.size_in_bytes - 61) // 2] ^= 0x10
        active.write_bytes(bytes(data))
        lost |= set(range(bad.base_offset, bad.last_offset + 1))
        m = mount(backing)  # recovers (no clean-shutdown marker): salvages the damaged batch
        part = m.path / "orders-0"
        assert int(os.getxattr(part, "user.kafka.logEndOffset")) == leo, trial
        listed = sorted(int(n) for n in os.listdir(part / "by-offset"))
        assert listed == [o for o in range(leo) if o not in lost], trial
        for offset in listed[-40:]:
            assert (part / "by-offset" / str(offset)).read_bytes() == line_for(offset)
        assert f"offsets {bad.base_offset}-{bad.last_offset}" in os.getxattr(
            part, "user.kfs.damage").decode()
    sh(f"echo '{line_for(leo).decode()}' >> orders-0/append", m.path, timeout=60)
    assert (m.path / "orders-0" / "by-offset" / str(leo)).read_bytes() == line_for(leo)
    mount.unmount(m)
    # one piece per corrupted batch, nothing more (a torn write a kill -9 may leave is kept
    # too, as every byte recovery cuts is)
    reasons = [json.loads(line)["reason"] for manifest in
               (tmp_path / "data.quarantine").rglob("manifest.jsonl")
               for line in manifest.read_text().splitlines()]
    assert len([r for r in reasons if "a torn write" not in r]) == 3, reasons


def _positions(data: bytes):
    position = 0
    for batch in iter_batches(data):
        yield position, batch
        position += batch.size_in_bytes


def test_corrupt_batch_is_eio_and_its_neighbours_read(mount, tmp_path):
    backing = tmp_path / "data"
    (tmp_path / "data").mkdir()
    (backing / "t.topic.properties").write_text("segment.bytes=1000\n")
    mgr = LogManager(backing)
    log = mgr.create("t-0")
    for i in range(40):
        log.append([b"record %d " % i * 3])
    mgr.close()
    middle = sorted((backing / "t-0").glob("*.log"))[1]
    data = bytearray(middle.read_bytes())
    batches = list(iter_batches(bytes(data)))
    bad = batches[len(batches) // 2]
    data[bad.position + 70] ^= 0xFF  # a byte of its record: the CRC no longer matches
    middle.write_bytes(bytes(data))
    m = mount(backing)
    res = sh(f"cat t-0/by-offset/{bad.base_offset}", m.path, check=False, timeout=60)
    assert res.returncode != 0 and b"Input/output error" in res.stderr, res
    for offset in (0, bad.base_offset - 1, bad.base_offset + 1, 39):
        assert (m.path / "t-0" / "by-offset" / str(offset)).read_bytes() == b"record %d " % offset * 3
    assert sh("echo more >> t-0/append && cat t-0/by-offset/40", m.path, check=False,
              timeout=60).stdout == b"more"
    mount.unmount(m)


def run_kfs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(kfs_command(*args), cwd=REPO, env=kfs_env(), capture_output=True, timeout=60,
                          check=False)


def test_one_writable_mount_per_backing_dir(mount, tmp_path):
    m = mount()
    sh("mkdir t-0 && echo x >> t-0/append", m.path, timeout=60)
    second = tmp_path / "second"
    second.mkdir()
    res = run_kfs("mount", str(m.backing), str(second))
    err = res.stderr.decode()
    assert res.returncode == 1 and err.startswith("kfs: error: ") and err.count("\n") == 1, err
    assert "in use by another writer" in err and "--read-only" in err, err
    assert not is_mounted(second)
    reader = mount(m.backing, "--read-only")  # a reader may share with the writer
    assert (reader.path / "t-0" / "by-offset" / "0").read_bytes() == b"x"
    mount.unmount(reader)
    kill9(m)  # the kernel drops the lock with the dead process
    m2 = mount(m.backing)
    assert (m2.path / "t-0" / "by-offset" / "0").read_bytes() == b"x"
    mount.unmount(m2)
