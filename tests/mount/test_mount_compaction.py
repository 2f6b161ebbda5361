"""A compacted topic through a real mount: records without a key are refused (EINVAL, and the
mount's log says why), append-keyed works, and the mount's log cleaner compacts the partition on
its own (small settings): the latest value of each key stays at its offset, the offsets it
removed read ENOENT, listings and streams show the gaps, and the directory it leaves passes
``kfs verify`` and reopens without recovery. ``kfs compact`` runs beside a --read-only mount,
which follows its swap: the offsets removed read ENOENT there too, even one just read."""

import errno
import json
import logging
import os
import subprocess

import pytest

from helpers.compaction import active_base, cleaned_to
from helpers.kfs import kfs_command, kfs_env
from helpers.waits import wait_until
from storage import LogManager

pytestmark = pytest.mark.fuse

KEYS = 5


def write(path, data: bytes):
    with open(path, "ab", buffering=0) as f:
        f.write(data)


def test_the_mount_compacts_a_compacted_topic(tmp_path, mount):
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "c.topic.properties").write_text(
        "cleanup.policy=compact\nsegment.bytes=1024\nmin.cleanable.dirty.ratio=0.01\n")
    (backing / "server.properties").write_text(
        "log.cleaner.backoff.ms=50\nlog.cleaner.dedupe.buffer.size=1048576\n")
    m = mount(backing)
    part = m.path / "c-0"
    os.mkdir(part)
    with pytest.raises(OSError) as info:
        write(part / "append", b"no key\n")
    assert info.value.errno == errno.EINVAL
    assert "Compacted topic cannot accept message without key" in m.log_text()

    latest = {}
    for i in range(120):  # one batch per write; segments of 1 KiB roll every few writes
        key = b"k%d" % (i % KEYS)
        write(part / "append-keyed", key + b"\tvalue-%d\n" % i)
        latest[key] = (i, b"value-%d" % i)
    # the cleaner goes on while the dirty ratio passes 0.01: until all below the active segment
    # (the cleaner runs on its own schedule)
    wait_until(lambda: cleaned_to(backing) == active_base(backing),
               "the cleaner to reach the active segment", timeout=60)

    offsets = sorted(int(n) for n in os.listdir(part / "by-offset"))
    assert len(offsets) < 120 and offsets[-1] == 119  # gaps, the end unchanged
    for key, (offset, value) in latest.items():
        assert (part / "by-offset" / str(offset)).read_bytes() == value
    removed = next(o for o in range(120) if o not in offsets)
    with pytest.raises(FileNotFoundError):
        (part / "by-offset" / str(removed)).stat()
    values = (part / "values").read_bytes().splitlines()
    assert len(values) == len(offsets)
    rows = [json.loads(line) for line in (part / "records.jsonl").read_bytes().splitlines()]
    assert [r["offset"] for r in rows] == offsets

    subprocess.run(["fusermount3", "-u", str(m.path)], check=True, timeout=30)
    m.mounted = False
    from helpers.waits import wait_for_exit
    assert wait_for_exit(m.pid, 30)
    res = subprocess.run(kfs_command("verify", str(backing)), env=kfs_env(), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stdout
    files = {p.name: p.read_bytes() for p in (backing / "c-0").iterdir() if p.suffix == ".log"}
    mgr = LogManager(backing)  # a clean close: nothing to recover
    assert mgr.get("c-0").reader.read(latest[b"k1"][0]).value == latest[b"k1"][1]
    mgr.close()
    assert {p.name: p.read_bytes() for p in (backing / "c-0").iterdir()
            if p.suffix == ".log"} == files


def test_kfs_compact_beside_a_read_only_mount(tmp_path, mount):
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "c.topic.properties").write_text("cleanup.policy=compact\nsegment.bytes=1024\n")
    mgr = LogManager(backing)
    log = mgr.create("c-0")
    for i in range(60):
        log.append([b"value-%d" % i], [b"k%d" % (i % KEYS)])
    mgr.close()
    m = mount(backing, "--read-only")
    part = m.path / "c-0"
    before = sorted(int(n) for n in os.listdir(part / "by-offset"))
    assert len(before) == 60
    # read, so that the mount and the kernel hold offset 0 (k0's first value)
    assert (part / "by-offset" / "0").read_bytes() == b"value-0"
    assert (part / "by-offset" / "0").stat().st_size == 7
    res = subprocess.run(kfs_command("compact", str(backing), "--no-progress"), env=kfs_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "cleaned log c-0" in res.stdout and "fewer messages" in res.stdout
    mgr = LogManager(backing, read_only=True)
    records = [(r.offset, r.value) for batch in mgr.get("c-0").reader.record_lists(0)
               for r in batch]
    mgr.close()
    kept = [offset for offset, _ in records]
    assert len(kept) < 60 and kept[-1] == 59 and 0 not in kept
    # the mount follows the swap at its next look at the directory (FOLLOW_INTERVAL_S)
    wait_until(lambda: sorted(int(n) for n in os.listdir(part / "by-offset")) == kept,
               "ls by-offset to show the compacted partition")
    # what it listed is what it serves: the removed offset it had just read is gone for open
    # at once, and by path once the kernel's entry times out
    with pytest.raises(FileNotFoundError):
        (part / "by-offset" / "0").read_bytes()
    wait_until(lambda: not (part / "by-offset" / "0").exists(), "stat by-offset/0 to fail")
    assert (part / "values").read_bytes() == b"".join(v + b"\n" for _, v in records)
