"""One damaged partition never takes the others down, through real FUSE mounts driven from a
shell: a lying batchLength in one partition (with Kafka's clean-shutdown marker) still lets
the whole backing directory mount, read-only and writable; that partition is served up to the
damage (EIO past it, ``user.kfs.damage`` and a log line say what is wrong, appends EIO until
``kfs verify --repair``), the other one as usual; a listing of ``by-offset/`` with a corrupt
batch in the middle gives every offset that can be read, then EIO."""

import hashlib
import json
import os
import subprocess
import sys

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
from helpers.kfs import kfs_env, kfs_verify
from helpers.paths import REPO
from helpers.shell import sh
from storage import LogManager

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def cat_digest(path):
    """`cat` of a file in a shell: (exit status, sha256 of what it printed, stderr)."""
    res = sh('set -o pipefail; cat "$F" | sha256sum', env={"F": str(path)}, check=False)
    return res.returncode, res.out.split()[0], res.err


def sha256(data):
    return hashlib.sha256(data).hexdigest()


def listed(path):
    """`ls -U` of a directory: (exit status, the names as ints, stderr)."""
    res = sh('ls -U "$D"', env={"D": str(path)}, check=False)
    return res.returncode, sorted(int(n) for n in res.out.split()), res.err


@pytest.fixture
def damaged_backing(tmp_path):
    """plain-0 with a lying batchLength in its last segment (the batch at ``first_lost``),
    and a healthy codecs-0, closed cleanly."""
    backing = copy_partitions(tmp_path / "data", "plain-0", "codecs-0")
    last = backing / "plain-0" / LAST
    first_lost = batches(last)[-3][1]
    lie_about_length(last, -3)
    return backing, first_lost


@needs_fixtures
@pytest.mark.parametrize("mode", ["--read-only", "writable"])
def test_the_other_partitions_work_and_the_damaged_one_reads_up_to_the_damage(
        mount, damaged_backing, mode):
    backing, first_lost = damaged_backing
    before = digests(backing / "plain-0")
    m = mount(backing, *([mode] if mode == "--read-only" else []))
    res = sh('ls "$M"', env={"M": str(m.path)}, check=False)
    assert res.returncode == 0 and {"codecs-0", "plain-0"} <= set(res.out.split())

    status, offsets, err = listed(m.path / "codecs-0" / "by-offset")
    assert status == 0 and offsets == list(range(2000))
    assert cat_digest(m.path / "codecs-0/by-offset/1999")[:2] == \
        (0, sha256(expected("codecs-0")[1999][1]))

    status, offsets, err = listed(m.path / "plain-0" / "by-offset")
    assert offsets == list(range(first_lost))  # every offset before the damage...
    assert status != 0 and "Input/output error" in err  # ...then the damage is reported
    assert cat_digest(m.path / f"plain-0/by-offset/{first_lost - 1}")[:2] == \
        (0, sha256(expected()[first_lost - 1][1]))
    status, _, err = cat_digest(m.path / f"plain-0/by-offset/{first_lost}")
    assert status == 1 and "Input/output error" in err
    res = sh('getfattr --only-values -n user.kfs.damage "$M/plain-0"', env={"M": str(m.path)},
             check=False)
    assert res.returncode == 0
    assert res.out.startswith(f"{LAST}:") and "smaller than minimum record overhead" in res.out
    assert f"offsets from {first_lost} cannot be read" in res.out
    res = sh('getfattr -n user.kfs.damage "$M/codecs-0" 2>&1', env={"M": str(m.path)}, check=False)
    assert res.returncode == 1 and "No such attribute" in res.out
    assert f"plain-0 is damaged: {LAST}:" in m.log_text()

    if mode == "writable":
        assert "appends are refused until `kfs verify --repair`" in \
            os.getxattr(m.path / "plain-0", "user.kfs.damage").decode()
        res = sh('echo lost >> "$M/plain-0/append"', env={"M": str(m.path)}, check=False)
        assert res.returncode == 1 and "Input/output error" in res.err
        res = sh('echo kept >> "$M/codecs-0/append"', env={"M": str(m.path)}, check=False)
        assert res.returncode == 0
        assert (m.path / "codecs-0" / "by-offset" / "2000").read_bytes() == b"kept"
    else:
        res = sh('echo x >> "$M/codecs-0/append"', env={"M": str(m.path)}, check=False)
        assert res.returncode == 1 and "Read-only file system" in res.err
    mount.unmount(m)
    assert digests(backing / "plain-0") == before  # left as it was, for the repair


@needs_fixtures
def test_after_kfs_verify_repair_the_partition_takes_appends_again(mount, damaged_backing):
    backing, first_lost = damaged_backing
    done = kfs_verify("--repair", "--yes", backing)
    assert done.returncode == 0, done.stdout + done.stderr
    m = mount(backing)
    res = sh('echo again >> "$M/plain-0/append"', env={"M": str(m.path)}, check=False)
    assert res.returncode == 0, res.err
    status, offsets, _ = listed(m.path / "plain-0" / "by-offset")
    assert status == 0
    # the damaged batch alone is gone: the intact ones after it stay, then the new record
    lost = set(range(first_lost, offsets[offsets.index(first_lost - 1) + 1]))
    assert 0 < len(lost) < 10 and offsets[-1] == 5000
    assert offsets == [o for o in range(5001) if o not in lost]
    assert (m.path / "plain-0" / "by-offset" / "4999").read_bytes() == expected()[4999][1]
    assert (m.path / "plain-0" / "by-offset" / "5000").read_bytes() == b"again"
    assert "user.kfs.damage" not in os.listxattr(m.path / "plain-0")


@needs_fixtures
@pytest.mark.parametrize("mode", ["--read-only", "writable"])
def test_listing_gives_every_readable_offset_around_a_corrupt_batch(mount, tmp_path, mode):
    backing = copy_partitions(tmp_path / "data", "plain-0")
    flip_bit(backing / "plain-0" / FIRST, 1032 + 100)  # the batch at offsets 8-25
    m = mount(backing, *([mode] if mode == "--read-only" else []))
    status, offsets, err = listed(m.path / "plain-0" / "by-offset")
    assert offsets == [o for o in range(5000) if not 8 <= o <= 25]
    assert status != 0 and "Input/output error" in err
    plain = expected()
    for offset in (7, 26, 4999):
        assert cat_digest(m.path / f"plain-0/by-offset/{offset}")[:2] == \
            (0, sha256(plain[offset][1]))
    status, _, err = cat_digest(m.path / "plain-0/by-offset/8")
    assert status == 1 and "by-offset/8: Input/output error" in err
    damage = os.getxattr(m.path / "plain-0", "user.kfs.damage").decode()
    assert damage.startswith(f"{FIRST}:1032: Record batch at offset 8 is corrupt")
    assert "plain-0: damaged: " in m.log_text()


@needs_fixtures
def test_a_mount_after_a_crash_keeps_every_intact_batch_around_a_corrupt_one(mount, tmp_path):
    """kfs has no replica to fetch from, so a writable mount after a crash never truncates at
    a corrupt batch as Kafka would: only the corrupt batch goes to the quarantine, offsets
    26-4999 stay where they were, the next append lands after 4999 (no offset reused), and
    the mount says so on stderr, in its log and in ``user.kfs.damage``."""
    backing = copy_partitions(tmp_path / "data", "plain-0", clean_shutdown=False)
    flip_bit(backing / "plain-0" / FIRST, 1032 + 100)
    logs = {p.name: p.read_bytes() for p in (backing / "plain-0").glob("*.log")}
    (tmp_path / "first").mkdir()
    launched = subprocess.run(
        [sys.executable, "-m", "kfs", "mount", f"--log-file={tmp_path / 'first.log'}",
         str(backing), str(tmp_path / "first")], capture_output=True, text=True, timeout=150,
        env=kfs_env(), cwd=REPO)
    try:
        assert launched.returncode == 0, launched.stderr
        assert "plain-0: offsets 8-25" in launched.stderr
        assert "26-4999 after them are kept" in launched.stderr
    finally:
        subprocess.run([sys.executable, "-m", "kfs", "umount", str(tmp_path / "first")],
                       env=kfs_env(), cwd=REPO, timeout=150)
    m = mount(backing)  # (recovered already: the second mount finds nothing to salvage)
    status, offsets, _ = listed(m.path / "plain-0" / "by-offset")
    assert status == 0 and offsets == [*range(8), *range(26, 5000)]
    assert "offsets 8-25" in (tmp_path / "first.log").read_text()
    (run,) = (tmp_path / "data.quarantine").iterdir()
    kept = {p.name: p.read_bytes() for p in (run / "plain-0").iterdir()}
    assert sorted(kept) == [f"{FIRST}.1032-9421"]  # the corrupt bytes only
    assert kept[f"{FIRST}.1032-9421"] == logs[FIRST][1032:9421]
    res = sh('echo next >> "$F"', env={"F": str(m.path / "plain-0" / "append")}, check=False)
    assert res.returncode == 0, res.err
    assert (m.path / "plain-0" / "by-offset" / "5000").read_bytes() == b"next"


def crash_with_a_corrupt_last_batch(backing):
    """Partition t-0 of ``backing`` after two appends and an unclean stop, the 5th byte from
    the end of its .log flipped: (the .log, its bytes now, where its second, corrupt batch
    starts)."""
    mgr = LogManager(backing)
    log = mgr.create("t-0")
    log.append([b"one"])
    log.append([b"two"])
    mgr.close()
    (backing / ".kafka_cleanshutdown").unlink()
    segment = backing / "t-0" / FIRST
    data = bytearray(segment.read_bytes())
    data[-5] ^= 0x01
    segment.write_bytes(data)
    return segment, bytes(data), batches(segment)[1][0]


def test_a_corrupt_last_batch_cut_by_recovery_is_kept_and_said(mount, tmp_path):
    """Issue 25, item 1: two appends, an unclean stop, the 5th byte from the end of the .log
    flipped: the writable mount's recovery cuts the second batch (as Kafka does) but keeps the
    bytes in BACKING.quarantine/ with a manifest, and says so on stderr, in its log and in
    ``user.kfs.damage``; the first record is served, the next append takes offset 1."""
    backing = tmp_path / "data"
    segment, data, cut_at = crash_with_a_corrupt_last_batch(backing)
    (tmp_path / "first").mkdir()
    launched = subprocess.run(
        [sys.executable, "-m", "kfs", "mount", f"--log-file={tmp_path / 'first.log'}",
         str(backing), str(tmp_path / "first")], capture_output=True, text=True, timeout=150,
        env=kfs_env(), cwd=REPO)
    try:
        assert launched.returncode == 0, launched.stderr
        said = f"t-0: recovery cut bytes {cut_at}-{len(data)} of {FIRST}"
        assert said in launched.stderr and "Record batch at offset 1 is corrupt" in \
            launched.stderr
        damage = os.getxattr(tmp_path / "first" / "t-0", "user.kfs.damage").decode()
        assert damage.startswith(f"recovery cut bytes {cut_at}-{len(data)} of {FIRST}")
        assert "kept in the quarantine" in damage
        assert (tmp_path / "first" / "t-0" / "by-offset" / "0").read_bytes() == b"one"
    finally:
        subprocess.run([sys.executable, "-m", "kfs", "umount", str(tmp_path / "first")],
                       env=kfs_env(), cwd=REPO, timeout=150)
    assert f"recovery cut bytes {cut_at}-{len(data)}" in (tmp_path / "first.log").read_text()
    assert segment.stat().st_size == cut_at
    (run,) = (tmp_path / "data.quarantine").iterdir()
    assert (run / "t-0" / f"{FIRST}.{cut_at}-{len(data)}").read_bytes() == data[cut_at:]
    assert "Record batch at offset 1 is corrupt" in (run / "manifest.jsonl").read_text()


@needs_fixtures
@pytest.mark.parametrize("mode", ["--read-only", "writable"])
def test_user_kfs_damage_is_there_from_the_mount_on(mount, tmp_path, mode):
    """Issue 25, item 2: a corrupt batch (offsets 8-25) in the middle, after a clean shutdown
    (nothing recovered): ``user.kfs.damage`` is there right after the mount, before any read
    tripped over the damage, and a read of it later adds nothing."""
    backing = copy_partitions(tmp_path / "data", "plain-0", "codecs-0")
    flip_bit(backing / "plain-0" / FIRST, 1032 + 100)
    m = mount(backing, *([mode] if mode == "--read-only" else []))
    damage = os.getxattr(m.path / "plain-0", "user.kfs.damage").decode()
    assert damage.startswith(f"{FIRST}:1032: Record batch at offset 8 is corrupt"), damage
    assert "offsets 8-25 cannot be read; those after them can" in damage
    assert "plain-0: damaged: " in m.log_text()
    assert "user.kfs.damage" in os.listxattr(m.path / "plain-0")
    with pytest.raises(OSError, match="No data available"):
        os.getxattr(m.path / "codecs-0", "user.kfs.damage")
    status, _, err = cat_digest(m.path / "plain-0/by-offset/8")
    assert status == 1 and "Input/output error" in err
    assert os.getxattr(m.path / "plain-0", "user.kfs.damage").decode() == damage


@needs_fixtures
@pytest.mark.parametrize("first_read", ["by-offset/8", "by-offset/20"])
def test_user_kfs_damage_is_one_description_whoever_found_it_first(mount, tmp_path, first_read):
    """Issue 37, item 8: a read that trips over the damage before anyone asked for
    ``user.kfs.damage`` leaves the same description the attribute gives otherwise (file, byte,
    the offsets lost), not the read's bare error, and counts it once (as ``kfs verify``)."""
    backing = copy_partitions(tmp_path / "data", "plain-0")
    flip_bit(backing / "plain-0" / FIRST, 1032 + 100)  # the batch at offsets 8-25
    m = mount(backing, "--read-only")
    status, _, err = cat_digest(m.path / "plain-0" / first_read)
    assert status == 1 and "Input/output error" in err
    damage = os.getxattr(m.path / "plain-0", "user.kfs.damage").decode()
    assert damage.startswith(f"{FIRST}:1032: Record batch at offset 8 is corrupt"), damage
    assert damage.endswith("(offsets 8-25 cannot be read; those after them can)"), damage
    assert m.log_text().count("plain-0: damaged: ") == 1, m.log_text()
    assert f"plain-0: damaged: {damage} (reads of it give EIO" in m.log_text()


def test_a_read_only_mount_of_a_crashed_partition_says_its_damage_at_once(mount, tmp_path):
    """Issue 25, item 2: two appends, an unclean stop, the 5th byte from the end flipped, a
    read-only mount (which recovers nothing): ``user.kfs.damage`` names the corrupt batch
    before any read; ``records.jsonl`` gives the first record and then EIO."""
    backing = tmp_path / "data"
    segment, data, cut_at = crash_with_a_corrupt_last_batch(backing)
    m = mount(backing, "--read-only")
    damage = os.getxattr(m.path / "t-0", "user.kfs.damage").decode()
    assert damage.startswith(f"{FIRST}:{cut_at}: Record batch at offset 1 is corrupt"), damage
    assert "offsets from 1 cannot be read" in damage
    # (`wc -l` would print 0: GNU wc drops its counts on a read error)
    res = subprocess.run(["cat", str(m.path / "t-0" / "records.jsonl")], capture_output=True,
                         timeout=120)
    assert res.returncode == 1 and b"Input/output error" in res.stderr
    assert [json.loads(line)["payload"] for line in res.stdout.splitlines()] == ["one"]
    assert segment.read_bytes() == data  # a read-only mount cuts nothing


@needs_fixtures
@pytest.mark.parametrize("mode", ["--read-only", "writable"])
def test_streams_serve_up_to_the_damage_then_eio_and_every_window_after_it(
        mount, tmp_path, mode):
    """A corrupt batch (offsets 8-25) in the middle: ``values`` and ``records.jsonl`` open and
    read up to it, then EIO; a window starting after it reads to the end; the damage note names
    the offsets lost and says those after them can be read."""
    backing = copy_partitions(tmp_path / "data", "plain-0")
    flip_bit(backing / "plain-0" / FIRST, 1032 + 100)
    m = mount(backing, *([mode] if mode == "--read-only" else []))
    part = m.path / "plain-0"
    plain = expected()
    line = lambda o: (b"null" if plain[o][1] is None else plain[o][1]) + b"\n"  # noqa: E731
    res = subprocess.run(["cat", str(part / "values")], capture_output=True, timeout=120)
    assert res.returncode == 1 and b"Input/output error" in res.stderr
    assert res.stdout == b"".join(line(o) for o in range(8))
    res = subprocess.run(["cat", str(part / "records.jsonl")], capture_output=True, timeout=120)
    assert res.returncode == 1 and len(res.stdout.splitlines()) == 8
    after = subprocess.run(["cat", str(part / "from" / "26" / "values")], capture_output=True,
                           timeout=120)
    assert after.returncode == 0, after.stderr
    assert after.stdout == b"".join(line(o) for o in sorted(plain) if o >= 26)
    jsonl = subprocess.run(["cat", str(part / "from" / "4000" / "records.jsonl")],
                           capture_output=True, timeout=120)
    assert jsonl.returncode == 0 and len(jsonl.stdout.splitlines()) == 1000
    damage = os.getxattr(part, "user.kfs.damage").decode()
    assert "offsets 8-25 cannot be read; those after them can" in damage, damage
