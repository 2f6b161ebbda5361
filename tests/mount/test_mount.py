"""The mount, driven through a real FUSE mount with real shell commands (``bash -c``).

Covers the "What a user does" session of issue 2 (except the fixture and 1M-line lines, which
live with the engine tests): mkdir, ``echo >>``, ``printf >>``, ``ls``, ``cat``, ``stat``,
``getfattr``, ``by-time``, keyed appends, errnos, read-only mounts, freshness and remounts.
"""

from __future__ import annotations

import base64
import hashlib
import json
import errno
import os
import signal
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.kfs import kfs_command, kfs_env
from helpers.mounts import is_mounted
from helpers.paths import KAFKA_WRITTEN, REPO
from helpers.shell import sh
from helpers.waits import wait_for_exit, wait_until
from kfs.mount.inodes import PARTITION_ENTRIES, WINDOW_ENTRIES

# Tests using the ``mount`` fixture are marked ``fuse`` by conftest; the CLI's own checks are not.
FIXTURES = KAFKA_WRITTEN


# --------------------------------------------------------------------------- helpers


def out(script: str, cwd: Path) -> str:
    return sh(script, cwd).out


def fails_with(script: str, cwd: Path, message: str) -> subprocess.CompletedProcess:
    """Assert ``script`` fails and its stderr carries the strerror text ``message``."""
    res = sh(script, cwd, check=False)
    assert res.returncode != 0, f"{script!r} unexpectedly succeeded: {res.stdout!r}"
    assert message in res.stderr.decode(errors="replace"), res.stderr
    return res


def xattr(path: Path | str, name: str, cwd: Path) -> bytes:
    return sh(f"getfattr --only-values -n {name} {path}", cwd).stdout


def xattr_names(path: Path | str, cwd: Path) -> set[str]:
    text = out(f"getfattr -m - --absolute-names {path}", cwd)
    return {line for line in text.splitlines() if line and not line.startswith("#")}


def log_end(part: str, cwd: Path) -> int:
    return int(xattr(part, "user.kafka.logEndOffset", cwd))


def listed_offsets(part: str, cwd: Path) -> list[int]:
    """``ls -f`` keeps the mount's own order (no sorting by ls)."""
    return [int(n) for n in out(f"ls -f {part}/by-offset", cwd).split() if n not in (".", "..")]


def new_partition(m, name: str = "orders-0") -> Path:
    sh(f"mkdir {name}", m.path)
    return m.path / name


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def tree_digest(root: Path) -> dict[str, tuple]:
    """Every file under ``root`` with size, mtime and content hash (to prove nothing changed)."""
    digest = {}
    for path in sorted(root.rglob("*")):
        st = path.stat()
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
        digest[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns, st.st_mode, content)
    return digest


# --------------------------------------------------------------------------- the user session


def test_user_session(mount):
    m = mount()
    cwd = m.path.parent
    mnt = m.path.name
    sh(f"mkdir {mnt}/orders-0", cwd)
    sh(f"echo hello >> {mnt}/orders-0/append", cwd)
    sh(f"printf 'a\\nb\\nc\\n' >> {mnt}/orders-0/append", cwd)
    assert out(f"ls {mnt}/", cwd).split() == ["orders-0"]
    assert out(f"ls {mnt}/orders-0", cwd).split() == [
        "append", "append-batches", "append-keyed", "append.jsonl", "by-offset", "by-time", "from",
        "keyed-values", "records.jsonl", "values"]
    assert out(f"ls {mnt}/orders-0/by-offset | head", cwd).split() == ["0", "1", "2", "3"]
    assert sh(f"cat {mnt}/orders-0/by-offset/2", cwd).stdout == b"b"
    assert sh(f"cat {mnt}/orders-0/by-offset/0", cwd).stdout == b"hello"
    assert out(f"stat -c %s {mnt}/orders-0/by-offset/2", cwd).strip() == "1"
    assert out(f"stat -c %s {mnt}/orders-0/by-offset/0", cwd).strip() == "5"
    dump = out(f"getfattr -d {mnt}/orders-0/by-offset/2", cwd)
    for name in ("user.kafka.timestamp=", "user.kafka.offset=\"2\"", "user.kafka.headers=",
                 "user.kafka.timestampType=\"CreateTime\"", "user.kafka.key.null=\"true\""):
        assert name in dump, dump
    # Every record is newer than 2023-11-14, so ListOffsets answers the first one.
    assert sh(f"cat {mnt}/orders-0/by-time/1700000000000", cwd).stdout == b"hello"
    m_backing = m.backing
    sh(f"fusermount3 -u {mnt}", cwd)
    assert wait_for_exit(m.pid, 30)
    m.mounted = False
    files = sorted(p.name for p in (m_backing / "orders-0").iterdir())
    assert {"00000000000000000000.log", "00000000000000000000.index", "00000000000000000000.timeindex"} <= set(files)
    assert (m_backing / "orders-0" / "00000000000000000000.log").stat().st_size > 0


# --------------------------------------------------------------------------- mkdir


def test_the_lines_of_one_write_share_a_batch_and_a_timestamp_and_printf_makes_one_per_line(
        mount):
    """Issue 37 item 11: the README said the three lines of one ``printf`` always share a
    timestamp; bash line-buffers its builtin ``printf``, which makes one ``write()`` per line,
    so each line is its own append (its own batch, its own millisecond). The lines of one
    ``write()`` are one append: one batch, one timestamp."""
    from storage.records.batch import iter_batches

    m = mount()
    new_partition(m)
    sh("printf 'a\\nb\\nc\\n' >> orders-0/append", m.path)
    with open(m.path / "orders-0" / "append", "ab", buffering=0) as f:
        f.write(b"d\ne\nf\n")
    batches = list(iter_batches((m.backing / "orders-0" / "00000000000000000000.log").read_bytes()))
    assert [(b.base_offset, b.last_offset) for b in batches] == [(0, 0), (1, 1), (2, 2), (3, 5)]
    stamps = {int(xattr(f"orders-0/by-offset/{o}", "user.kafka.timestamp", m.path))
              for o in range(3, 6)}
    assert len(stamps) == 1


def test_mkdir_creates_a_partition_visible_at_once(mount):
    m = mount()
    assert out("ls", m.path).split() == []
    sh("mkdir clicks-3 && ls", m.path)
    assert out("ls", m.path).split() == ["clicks-3"]
    sh("mkdir orders-0", m.path)
    assert out("ls", m.path).split() == ["clicks-3", "orders-0"]
    assert (m.backing / "clicks-3").is_dir() and (m.backing / "orders-0").is_dir()
    assert xattr("clicks-3", "user.kafka.logEndOffset", m.path) == b"0"
    assert out("stat -c %F clicks-3", m.path).strip() == "directory"


@pytest.mark.parametrize(
    "name",
    ["orders", "orders-x", "orders-01", "'bad name-0'", "..-0", "-0", "'caf\u00e9-0'",
     "orders-0-delete", "x" * 250 + "-0", "orders-2147483648"],
)
def test_mkdir_illegal_name_is_einval_and_creates_nothing(mount, name):
    m = mount()
    before = sorted(os.listdir(m.backing))
    fails_with(f"mkdir -- {name}", m.path, "Invalid argument")
    assert sorted(os.listdir(m.backing)) == before
    assert out("ls -A", m.path).split() == []


def test_mkdir_of_a_topic_colliding_with_another_is_einval(mount):
    """Issue 37 item 12: ``mkdir a.b-0`` beside ``a_b-0`` succeeded, where Kafka refuses a
    topic whose name equals another's once ``.`` is read as ``_`` (``Topic.hasCollision``).
    Another partition of the same topic is no collision."""
    m = mount()
    sh("mkdir a_b-0", m.path)
    before = sorted(os.listdir(m.backing))
    for name in ("a.b-0", "a.b-1"):
        fails_with(f"mkdir {name}", m.path, "Invalid argument")
    assert sorted(os.listdir(m.backing)) == before
    assert "Topic 'a.b' collides with existing topics: a_b" in m.log_text()
    sh("mkdir a_b-1 a.c-0", m.path)
    assert out("ls", m.path).split() == ["a.c-0", "a_b-0", "a_b-1"]


@pytest.mark.parametrize("setting, reason", [
    ("bogus.key=1", "unknown topic config 'bogus.key'"),
    ("retention.ms=abc", "retention.ms='abc': not an integer"),
])
def test_mkdir_with_bad_topic_settings_is_einval_and_the_log_says_why(mount, tmp_path, setting, reason):
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "orders.topic.properties").write_text(setting + "\n")
    m = mount(backing, "--log-level=warning")  # (the default level)
    fails_with("mkdir orders-0", m.path, "Invalid argument")
    assert not (backing / "orders-0").exists()
    warnings = [line for line in m.log_text().splitlines() if " WARNING " in line]
    assert any("mkdir orders-0" in line and reason in line
               and str(backing / "orders.topic.properties") in line for line in warnings), m.log_text()
    sh("mkdir clicks-0", m.path)  # another topic's partition is not concerned


@pytest.mark.parametrize("length", [238, 239, 249])
def test_mkdir_of_a_topic_name_up_to_kafkas_limit_works(mount, length):
    """Topic names of 239 to 249 characters are legal, but ``<topic>.topic.properties`` would
    be over 255 bytes (issue 25): no such file can exist, so the topic has no overrides; mkdir
    creates the partition, appends read back, and a read-only mount serves it."""
    topic = "t" * length
    m = mount()
    sh(f"mkdir {topic}-0 && echo long >> {topic}-0/append", m.path)
    assert out(f"cat {topic}-0/by-offset/0", m.path) == "long"
    assert out("ls", m.path).split() == [f"{topic}-0"]
    mount.unmount(m)
    ro = mount(m.backing, "--read-only")
    assert out(f"cat {topic}-0/values", ro.path) == "long\n"


def test_a_segment_bytes_kafka_refuses_is_taken_with_a_warning(mount, tmp_path):
    """segment.bytes=2000 (Kafka 4.1.1's minimum is 1048576): kfs rolls at 2000 bytes as
    asked, and its log says once that a broker would refuse it (issue 25)."""
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "orders.topic.properties").write_text("segment.bytes=2000\n")
    m = mount(backing, "--log-level=warning")
    sh("mkdir orders-0 orders-1 && for i in $(seq 60); do echo record-$i-xxxxxxxxxxxxxxxxxxxxxx"
       " >> orders-0/append; done", m.path)
    assert int(xattr("orders-0", "user.kafka.segmentCount", m.path)) > 1
    warnings = [line for line in m.log_text().splitlines() if " WARNING " in line]
    assert len(warnings) == 1, m.log_text()
    assert warnings[0].endswith(
        f"{backing / 'orders.topic.properties'}: segment.bytes=2000 is below Kafka 4.1.1's "
        "minimum of 1048576: kfs uses it, but a Kafka broker refuses it (kfs adopt refuses the "
        "topic)")


def test_mkdir_existing_partition_is_eexist(mount):
    m = mount()
    new_partition(m)
    fails_with("mkdir orders-0", m.path, "File exists")


def test_mkdir_below_the_root_is_refused(mount):
    m = mount()
    new_partition(m)
    fails_with("mkdir orders-0/sub", m.path, "Operation not permitted")
    fails_with("mkdir orders-0/by-offset/7", m.path, "Operation not permitted")


# --------------------------------------------------------------------------- record files


def test_record_content_is_the_value_byte_exact(mount):
    m = mount()
    part = new_partition(m)
    # UTF-8, control bytes, a tab and a CR: only the newline ends the line.
    sh("printf 'caf\\xc3\\xa9 \\x01\\x02\\ttab\\r\\n\\n\\xff\\xfe\\n' >> orders-0/append", m.path)
    assert sh("cat orders-0/by-offset/0", m.path).stdout == b"caf\xc3\xa9 \x01\x02\ttab\r"
    assert out("stat -c %s orders-0/by-offset/0", m.path).strip() == str(len(b"caf\xc3\xa9 \x01\x02\ttab\r"))
    assert sh("cat orders-0/by-offset/1", m.path).stdout == b""
    assert out("stat -c %s orders-0/by-offset/1", m.path).strip() == "0"
    assert sh("cat orders-0/by-offset/2", m.path).stdout == b"\xff\xfe"
    assert sh("xxd -p orders-0/by-offset/2", m.path).stdout.strip() == b"fffe"
    # An empty value is not a null value.
    fails_with("getfattr -n user.kafka.value.null orders-0/by-offset/1", m.path, "No such attribute")
    assert out("stat -c '%A' orders-0/by-offset/0", m.path).strip() == "-r--r--r--"
    assert part.is_dir()


def test_record_mtime_is_the_record_timestamp(mount):
    m = mount()
    new_partition(m)
    sh("echo x >> orders-0/append", m.path)
    ts = int(xattr("orders-0/by-offset/0", "user.kafka.timestamp", m.path))
    assert out("stat -c %Y orders-0/by-offset/0", m.path).strip() == str(ts // 1000)
    # Nanosecond-exact: stat %y prints the fraction.
    frac = out("stat -c %y orders-0/by-offset/0", m.path).split()[1].split(".")[1]
    assert frac.startswith(f"{ts % 1000:03d}000000")


def test_large_record_reads_in_many_requests(mount):
    m = mount()
    new_partition(m)
    # 600 KB value: cat needs several 128 KiB reads, each at its offset.
    sh("head -c 300000 /dev/urandom | xxd -p | tr -d '\\n' > /tmp/kfs-big.$$ && "
       "cat /tmp/kfs-big.$$ >> orders-0/append && echo >> orders-0/append && "
       "cmp /tmp/kfs-big.$$ orders-0/by-offset/0; rc=$?; rm -f /tmp/kfs-big.$$; exit $rc", m.path)
    assert out("stat -c %s orders-0/by-offset/0", m.path).strip() == "600000"


# --------------------------------------------------------------------------- attributes


def test_xattrs_of_an_unkeyed_record(mount):
    m = mount()
    new_partition(m, "orders-7")
    before = now_ms()
    sh("echo hello >> orders-7/append", m.path)
    after = now_ms()
    rec = "orders-7/by-offset/0"
    assert xattr_names(rec, m.path) == {
        "user.kafka.topic", "user.kafka.partition", "user.kafka.offset", "user.kafka.timestamp",
        "user.kafka.timestampType", "user.kafka.key.null", "user.kafka.headers",
    }
    assert xattr(rec, "user.kafka.topic", m.path) == b"orders"
    assert xattr(rec, "user.kafka.partition", m.path) == b"7"
    assert xattr(rec, "user.kafka.offset", m.path) == b"0"
    assert before <= int(xattr(rec, "user.kafka.timestamp", m.path)) <= after
    assert xattr(rec, "user.kafka.timestampType", m.path) == b"CreateTime"
    assert xattr(rec, "user.kafka.key.null", m.path) == b"true"
    assert json.loads(xattr(rec, "user.kafka.headers", m.path)) == []
    fails_with(f"getfattr -n user.kafka.key {rec}", m.path, "No such attribute")
    fails_with(f"getfattr -n user.kafka.value.null {rec}", m.path, "No such attribute")
    fails_with(f"getfattr -n user.kafka.header.x {rec}", m.path, "No such attribute")
    fails_with(f"getfattr -n user.nonsense {rec}", m.path, "No such attribute")
    dump = out(f"getfattr -d {rec}", m.path)
    assert 'user.kafka.topic="orders"' in dump and 'user.kafka.key.null="true"' in dump


def test_xattrs_of_a_keyed_record(mount):
    m = mount()
    new_partition(m)
    sh("printf 'user-42\\tclicked\\n' >> orders-0/append-keyed", m.path)
    rec = "orders-0/by-offset/0"
    assert xattr(rec, "user.kafka.key", m.path) == b"user-42"
    assert sh(f"cat {rec}", m.path).stdout == b"clicked"
    names = xattr_names(rec, m.path)
    assert "user.kafka.key" in names and "user.kafka.key.null" not in names
    fails_with(f"getfattr -n user.kafka.key.null {rec}", m.path, "No such attribute")


def test_xattrs_of_a_partition_directory(mount):
    m = mount()
    new_partition(m)
    assert xattr("orders-0", "user.kafka.logEndOffset", m.path) == b"0"
    sh("printf 'a\\nb\\nc\\n' >> orders-0/append", m.path)
    assert xattr_names("orders-0", m.path) == {
        "user.kafka.logStartOffset", "user.kafka.logEndOffset", "user.kafka.lastStableOffset",
        "user.kafka.sizeInBytes", "user.kafka.segmentCount",
    }
    assert xattr("orders-0", "user.kafka.lastStableOffset", m.path) == b"3"
    assert xattr("orders-0", "user.kafka.logStartOffset", m.path) == b"0"
    assert xattr("orders-0", "user.kafka.logEndOffset", m.path) == b"3"
    assert xattr("orders-0", "user.kafka.segmentCount", m.path) == b"1"
    on_disk = sum(p.stat().st_size for p in (m.backing / "orders-0").glob("*.log"))
    assert on_disk > 0
    assert int(xattr("orders-0", "user.kafka.sizeInBytes", m.path)) == on_disk


def test_xattrs_cannot_be_set(mount):
    m = mount()
    new_partition(m)
    sh("echo x >> orders-0/append", m.path)
    fails_with("setfattr -n user.kafka.key -v evil orders-0/by-offset/0", m.path, "Operation not permitted")
    assert xattr_names("orders-0/by-offset/0", m.path) >= {"user.kafka.key.null"}


@pytest.mark.needs_fixture("kafka-written/plain-0", "kafka-written/plain-0.expected.jsonl")
def test_headers_and_null_values_from_kafka_written_data(mount):
    m = mount(FIXTURES, "--read-only")
    expected = [json.loads(line) for line in (FIXTURES / "plain-0.expected.jsonl").read_text().splitlines()]
    by_offset = {r["offset"]: r for r in expected}

    def header_json(value):
        if value is None:
            return None
        raw = base64.b64decode(value)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            return {"base64": base64.b64encode(raw).decode()}

    with_headers = [r for r in expected if r["headers"]][:3]
    with_null_header = next(r for r in expected if any(v is None for _, v in r["headers"]))
    for r in with_headers + [with_null_header]:
        rec = f"plain-0/by-offset/{r['offset']}"
        got = json.loads(xattr(rec, "user.kafka.headers", m.path))
        assert got == [[k, header_json(v)] for k, v in r["headers"]]
        last = {}
        for k, v in r["headers"]:
            last[k] = v
        for k, v in last.items():
            name = "user.kafka.header." + k
            if v is None:
                assert name not in xattr_names(rec, m.path)
            else:
                res = subprocess.run(["getfattr", "--only-values", "-n", name, rec], cwd=m.path,
                                     capture_output=True, timeout=120)
                assert res.returncode == 0, res.stderr
                assert res.stdout == base64.b64decode(v)
    # The tombstone: null value -> empty file, said by an attribute; its key is raw bytes.
    tomb = by_offset[3333]
    assert tomb["value"] is None
    assert sh("cat plain-0/by-offset/3333", m.path).stdout == b""
    assert xattr("plain-0/by-offset/3333", "user.kafka.value.null", m.path) == b"true"
    assert xattr("plain-0/by-offset/3333", "user.kafka.key", m.path) == base64.b64decode(tomb["key"])
    # An empty key is not a null key.
    empty_key = next(r for r in expected if r["key"] == "")
    assert xattr(f"plain-0/by-offset/{empty_key['offset']}", "user.kafka.key", m.path) == b""
    assert "user.kafka.key.null" not in xattr_names(f"plain-0/by-offset/{empty_key['offset']}", m.path)
    assert int(xattr("plain-0", "user.kafka.logEndOffset", m.path)) == 5000
    assert int(xattr("plain-0", "user.kafka.segmentCount", m.path)) == 21


# --------------------------------------------------------------------------- by-time


def test_by_time_follows_kafka_list_offsets(mount):
    m = mount()
    new_partition(m)
    for i in range(6):
        sh(f"echo r{i} >> orders-0/append; sleep 0.003", m.path)
    stamps = [int(xattr(f"orders-0/by-offset/{o}", "user.kafka.timestamp", m.path)) for o in range(6)]
    assert stamps == sorted(stamps) and stamps[-1] > stamps[0]

    def expected_offset(t):  # ListOffsets: first record (in offset order) with timestamp >= t
        return next((o for o, ts in enumerate(stamps) if ts >= t), None)

    targets = {0, 1700000000000, stamps[-1], *stamps, *(ts + 1 for ts in stamps[:-1]), *(ts - 1 for ts in stamps)}
    for t in sorted(targets):
        o = expected_offset(t)
        assert out(f"readlink orders-0/by-time/{t}", m.path).strip() == f"../by-offset/{o}", t
        assert sh(f"cat orders-0/by-time/{t}", m.path).stdout == f"r{o}".encode(), t
    # Past the last record: nothing.
    fails_with(f"cat orders-0/by-time/{stamps[-1] + 1}", m.path, "No such file or directory")
    fails_with(f"readlink -e orders-0/by-time/{stamps[-1] + 1}", m.path, "")
    fails_with("cat orders-0/by-time/soon", m.path, "Invalid argument")  # not a time: EINVAL as from/
    fails_with("cat orders-0/by-time/-5", m.path, "Invalid argument")
    assert out("ls -A orders-0/by-time", m.path) == ""
    # The answer past the end appears as soon as a newer record does.
    sh("sleep 0.002; echo late >> orders-0/append", m.path)
    assert sh(f"cat orders-0/by-time/{stamps[-1] + 1}", m.path).stdout == b"late"


# --------------------------------------------------------------------------- appending


def test_line_spanning_write_calls(mount):
    m = mount()
    new_partition(m)
    text = b"first line\nsecond, a bit longer\n\nfourth\xe2\x82\xac\nfifth\n"
    # dd with bs=7 turns the stream into 7-byte write() calls: lines span them anywhere.
    (m.path.parent / "lines.txt").write_bytes(text)
    sh(f"dd if={m.path.parent}/lines.txt of=orders-0/append bs=7 oflag=append conv=notrunc status=none", m.path)
    expected = text.split(b"\n")[:-1]
    assert listed_offsets("orders-0", m.path) == list(range(len(expected)))
    for o, value in enumerate(expected):
        assert sh(f"cat orders-0/by-offset/{o}", m.path).stdout == value
    # Odd-sized chunks from one process, one open file.
    writer = (
        "import os, sys\n"
        "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
        "data = b''.join(b'line-%d-' % i + b'x' * (i % 37) + b'\\n' for i in range(500))\n"
        "sizes = [1, 3, 13, 64, 1000, 4097]\n"
        "pos = i = 0\n"
        "while pos < len(data):\n"
        "    n = os.write(fd, data[pos:pos + sizes[i % len(sizes)]]); pos += n; i += 1\n"
        "os.close(fd)\n"
    )
    res = sh(f'{sys.executable} -c "$W" orders-0/append', m.path, env={"W": writer}, check=False)
    assert res.returncode == 0, res.stderr
    base = len(expected)
    assert log_end("orders-0", m.path) == base + 500
    for i in (0, 1, 36, 37, 250, 499):
        assert sh(f"cat orders-0/by-offset/{base + i}", m.path).stdout == b"line-%d-" % i + b"x" * (i % 37)


def test_cat_of_many_lines_keeps_every_line_whole_and_lists_in_order(mount):
    m = mount()
    new_partition(m)
    n = 20000
    lines = [b"%d:" % i + b"v" * (i * 7919 % 150) for i in range(n)]
    src = m.path.parent / "many.txt"
    src.write_bytes(b"\n".join(lines) + b"\n")
    sh(f"cat {src} >> orders-0/append", m.path)
    assert log_end("orders-0", m.path) == n
    # readdir in many requests, cookies = offset + 1: every offset once, in order.
    assert listed_offsets("orders-0", m.path) == list(range(n))
    dump = out("cd orders-0/by-offset && for o in 0 1 2 4095 4096 9999 12345 19999; do cat $o; echo; done", m.path)
    assert dump.encode().split(b"\n")[:-1] == [lines[o] for o in (0, 1, 2, 4095, 4096, 9999, 12345, 19999)]
    sizes = out("stat -c '%n %s' orders-0/by-offset/1 orders-0/by-offset/19999", m.path).split()
    assert sizes == ["orders-0/by-offset/1", str(len(lines[1])), "orders-0/by-offset/19999", str(len(lines[19999]))]


def test_trailing_partial_line_is_stored_on_close(mount):
    m = mount()
    new_partition(m)
    sh("printf 'x\\ny' >> orders-0/append", m.path)
    assert listed_offsets("orders-0", m.path) == [0, 1]
    assert sh("cat orders-0/by-offset/1", m.path).stdout == b"y"
    # One open file, three writes: one line, ended by the last write.
    sh("{ printf 'par'; printf 'tial'; printf '\\n'; } >> orders-0/append", m.path)
    assert sh("cat orders-0/by-offset/2", m.path).stdout == b"partial"
    sh("{ printf 'no'; printf ' newline'; } >> orders-0/append", m.path)
    assert sh("cat orders-0/by-offset/3", m.path).stdout == b"no newline"
    assert log_end("orders-0", m.path) == 4


def test_keyed_appends(mount):
    m = mount()
    new_partition(m)
    sh("printf 'k1\\tv1\\nk2\\tv2\\twith tab\\n\\tempty key\\n' >> orders-0/append-keyed", m.path)
    assert log_end("orders-0", m.path) == 3
    assert [sh(f"cat orders-0/by-offset/{o}", m.path).stdout for o in range(3)] == [b"v1", b"v2\twith tab", b"empty key"]
    assert [xattr(f"orders-0/by-offset/{o}", "user.kafka.key", m.path) for o in range(3)] == [b"k1", b"k2", b""]
    # A line without the separator: EINVAL, and nothing of that write is stored (cat makes
    # one write() of the two lines; bash's printf would write line by line).
    (m.path.parent / "mixed.txt").write_bytes(b"k3\tgood\nno separator\n")
    fails_with(f"cat {m.path.parent}/mixed.txt >> orders-0/append-keyed", m.path, "Invalid argument")
    assert log_end("orders-0", m.path) == 3
    fails_with("echo 'no separator' >> orders-0/append-keyed", m.path, "Invalid argument")
    assert log_end("orders-0", m.path) == 3
    # The plain append file takes such lines as values with a null key.
    sh("printf 'k\\tv\\n' >> orders-0/append", m.path)
    assert sh("cat orders-0/by-offset/3", m.path).stdout == b"k\tv"
    assert xattr("orders-0/by-offset/3", "user.kafka.key.null", m.path) == b"true"
    sh("printf 'k4\\tlast' >> orders-0/append-keyed", m.path)  # partial keyed line, stored on close
    assert xattr("orders-0/by-offset/4", "user.kafka.key", m.path) == b"k4"
    assert sh("cat orders-0/by-offset/4", m.path).stdout == b"last"


def test_key_separator_option(mount):
    m = mount(None, "--key-separator=:")
    new_partition(m)
    sh("echo 'user1:clicked:twice' >> orders-0/append-keyed", m.path)
    assert xattr("orders-0/by-offset/0", "user.kafka.key", m.path) == b"user1"
    assert sh("cat orders-0/by-offset/0", m.path).stdout == b"clicked:twice"
    fails_with("printf 'tab\\tonly\\n' >> orders-0/append-keyed", m.path, "Invalid argument")


def test_oversized_line_is_efbig_and_stores_nothing(mount, tmp_path):
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "server.properties").write_text("message.max.bytes=2000\n")
    m = mount(backing)
    new_partition(m)
    sh("echo before >> orders-0/append", m.path)
    # One write carrying a complete line that is too large.
    fails_with("head -c 5000 /dev/zero | tr '\\0' x > /tmp/kfs-l.$$; echo >> /tmp/kfs-l.$$; "
               "cat /tmp/kfs-l.$$ >> orders-0/append; rc=$?; rm /tmp/kfs-l.$$; exit $rc", m.path, "File too large")
    # A line growing past the limit over many small writes, without a newline.
    fails_with("head -c 5000 /dev/zero | tr '\\0' y | dd of=orders-0/append bs=100 oflag=append conv=notrunc status=none",
               m.path, "File too large")
    # A line just over the limit once the batch overhead counts.
    fails_with("head -c 1990 /dev/zero | tr '\\0' z >> orders-0/append", m.path, "File too large")
    assert log_end("orders-0", m.path) == 1
    sh("echo after >> orders-0/append", m.path)
    assert listed_offsets("orders-0", m.path) == [0, 1]
    assert sh("cat orders-0/by-offset/1", m.path).stdout == b"after"
    assert max(int(out(f"stat -c %s orders-0/by-offset/{o}", m.path)) for o in (0, 1)) < 10


def test_oversized_line_with_default_limit(mount):
    m = mount()
    new_partition(m)
    # tr's write that makes the line too long fails; the rest of that line (the echo's
    # newline, through the same open file) is refused too, and nothing of it is stored.
    res = fails_with("{ head -c 1100000 /dev/zero | tr '\\0' x; s=$?; echo; exit $s; } >> orders-0/append",
                     m.path, "File too large")
    assert b"echo: write error: File too large" in res.stderr
    assert log_end("orders-0", m.path) == 0
    sh("echo fine >> orders-0/append", m.path)
    assert listed_offsets("orders-0", m.path) == [0]
    assert sh("cat orders-0/by-offset/0", m.path).stdout == b"fine"


def test_full_disk_is_enospc_and_every_stored_line_is_whole(small_disk, mount, tmp_path):
    lines = [b"%06d " % i + b"y" * 93 for i in range(20_000)]  # 2 MB: more than the disk
    (tmp_path / "big").write_bytes(b"\n".join(lines) + b"\n")
    m = mount(small_disk)
    new_partition(m)
    fails_with(f"cat {tmp_path}/big >> orders-0/append", m.path, "No space left on device")
    stored = log_end("orders-0", m.path)
    assert 0 < stored < len(lines)
    assert listed_offsets("orders-0", m.path) == list(range(stored))
    for offset in (0, stored // 2, stored - 1):
        assert sh(f"cat orders-0/by-offset/{offset}", m.path).stdout == lines[offset]
    mount.unmount(m)
    m = mount(small_disk, "--read-only")
    assert log_end("orders-0", m.path) == stored
    assert sh(f"cat orders-0/by-offset/{stored - 1}", m.path).stdout == lines[stored - 1]
    mount.unmount(m)


def test_append_files_are_write_only_and_truncation_is_a_no_op(mount):
    """--w------- as sysfs's control files; a read is refused by the mount itself (root passes
    the kernel's check of mode bits)."""
    m = mount()
    new_partition(m)
    sh("printf 'a\\nb\\n' >> orders-0/append", m.path)
    assert out("ls -l orders-0 | grep ' append'", m.path).split()[0::9] == [
        "--w-------", "--w-------", "--w-------", "--w-------"]
    for name in ("append", "append-keyed", "append-batches", "append.jsonl"):
        fails_with(f"cat orders-0/{name}", m.path, "Permission denied")
        fails_with(f"cat <> orders-0/{name}", m.path, "Permission denied")  # O_RDWR
    sh("echo c > orders-0/append", m.path)  # O_TRUNC: appends, destroys nothing
    sh("truncate -s 0 orders-0/append && : > orders-0/append", m.path)
    assert [sh(f"cat orders-0/by-offset/{o}", m.path).stdout for o in range(3)] == [b"a", b"b", b"c"]
    assert log_end("orders-0", m.path) == 3
    fails_with("truncate -s 5 orders-0/append", m.path, "Operation not permitted")
    sh("touch orders-0/append", m.path)
    assert log_end("orders-0", m.path) == 3


def test_record_files_and_tree_are_immutable(mount):
    m = mount()
    new_partition(m)
    sh("echo keep >> orders-0/append", m.path)
    fails_with("echo evil > orders-0/by-offset/0", m.path, "Permission denied")
    fails_with("echo evil >> orders-0/by-offset/0", m.path, "Permission denied")
    fails_with("rm orders-0/by-offset/0", m.path, "Operation not permitted")
    fails_with("touch orders-0/newfile", m.path, "Operation not permitted")
    fails_with("mv orders-0/by-offset/0 orders-0/by-offset/9", m.path, "Operation not permitted")
    fails_with("rmdir orders-0/by-time", m.path, "Operation not permitted")
    assert sh("cat orders-0/by-offset/0", m.path).stdout == b"keep"


# --------------------------------------------------------------------------- lookups that fail


def test_non_numeric_and_absent_offsets_are_enoent(mount):
    m = mount()
    new_partition(m)
    sh("printf 'a\\nb\\n' >> orders-0/append", m.path)
    for name in ("abc", "-1", "01", "+1", "1.0", "0x1", "2", "999", "99999999999999999999"):
        fails_with(f"cat orders-0/by-offset/{name}", m.path, "No such file or directory")
    fails_with("cat nosuch-0/by-offset/0", m.path, "No such file or directory")
    fails_with("ls orders-0/nosuch", m.path, "No such file or directory")
    fails_with("ls not-a-partition", m.path, "No such file or directory")


# --------------------------------------------------------------------------- freshness


def test_new_records_are_visible_to_the_next_ls_and_cat(mount):
    m = mount()
    new_partition(m)
    for i in range(25):
        # Looked up (and missed) before it exists: the miss must not be cached.
        fails_with(f"stat orders-0/by-offset/{i}", m.path, "No such file or directory")
        res = out(
            f"echo v{i} >> orders-0/append && ls orders-0/by-offset | sort -n | tail -1 && "
            f"cat orders-0/by-offset/{i} && echo && getfattr --only-values -n user.kafka.logEndOffset orders-0",
            m.path,
        )
        assert res.split() == [str(i), f"v{i}", str(i + 1)]
    assert listed_offsets("orders-0", m.path) == list(range(25))
    # A long-lived shell sees every new record too (its own kernel caches are warm).
    res = out("for i in 1 2 3; do echo w$i >> orders-0/append; ls -f orders-0/by-offset | wc -l; done", m.path)
    assert res.split() == ["28", "29", "30"]  # (ls -f lists . and .. too)


# --------------------------------------------------------------------------- . and ..


def test_every_directory_lists_dot_and_dot_dot(mount):
    """``ls -a``: ``.`` and ``..`` first in every directory, with the inodes ``stat`` gives the
    directory and its parent (``..`` of the root is the root: the kernel answers for the
    mountpoint's parent itself)."""
    m = mount()
    new_partition(m)
    sh("mkdir __consumer_offsets-0 && printf 'a\\nb\\n' >> orders-0/append", m.path)
    parents = {".": ".", "orders-0": ".", "orders-0/by-offset": "orders-0",
               "orders-0/by-time": "orders-0", "orders-0/from": "orders-0",
               "orders-0/from/1": "orders-0/from", "orders-0/from/-1": "orders-0/from",
               "consumer-groups": "."}
    for directory, parent in parents.items():
        names = out(f"ls -fa {directory}", m.path).split()
        assert names[:2] == [".", ".."], (directory, names)
        assert "." not in names[2:] and ".." not in names[2:], (directory, names)
        inos = dict(reversed(line.split()) for line in out(f"ls -fai {directory}", m.path).splitlines())
        assert inos["."] == out(f"stat -c %i {directory}", m.path).strip(), directory
        if directory != ".":
            assert inos[".."] == out(f"stat -c %i {parent}", m.path).strip(), directory
    assert out("ls -fa orders-0/by-offset", m.path).split() == [".", "..", "0", "1"]
    assert out("ls -fa orders-0/by-time orders-0/from consumer-groups", m.path).split() == [
        "orders-0/by-time:", ".", "..", "orders-0/from:", ".", "..", "consumer-groups:", ".", ".."]
    window = [name.decode() for name, _ in WINDOW_ENTRIES]
    assert out("ls -fa orders-0/from/0", m.path).split() == [".", "..", *window]
    root = out("ls -fa .", m.path).split()
    assert root[:2] == [".", ".."]
    assert sorted(root[2:]) == ["__consumer_offsets-0", "consumer-groups", "orders-0"]
    # what does not ask for them still does not show them
    assert out("ls orders-0/by-offset", m.path).split() == ["0", "1"]
    assert out("find orders-0/from/0", m.path).split() == [
        "orders-0/from/0", *(f"orders-0/from/0/{name}" for name in window)]


# A directory read in small pieces, from a cookie taken halfway (telldir) after more records
# were appended, and from the very start again (rewinddir): perl's readdir is readdir(3).
_RESUMED_LISTING = r"""
opendir(my $d, $ARGV[0]) or die "opendir: $!";
my (@first, $pos);
for (1 .. $ARGV[1]) { push @first, scalar readdir($d); }
$pos = telldir($d);
system("sh", "-c", $ARGV[2]) == 0 or die "append failed";
my @rest = readdir($d);
seekdir($d, $pos);
my @again = readdir($d);
rewinddir($d);
my @all = readdir($d);
print join(" ", @first), "
", join(" ", @rest), "
", join(" ", @again), "
", join(" ", @all), "
";
"""


@pytest.mark.parametrize("taken", [1, 2, 3, 2500, 4001])
def test_listings_resume_at_their_cookies_with_dot_entries(mount, taken):
    """Cookies stay valid across replies, appends and seekdir: each offset once, in order,
    after ``.`` and ``..`` (a listing resumed after one dot entry, after both, or deep into
    by-offset/, as a big directory is read in many replies)."""
    m = mount()
    new_partition(m)
    sh("seq 0 3999 >> orders-0/append", m.path)
    script = m.path.parent / "resume.pl"
    script.write_text(_RESUMED_LISTING)
    lines = out(f"perl {script} orders-0/by-offset {taken} 'seq 4000 4099 >> orders-0/append'",
                m.path).split("\n")
    names = [".", ".."] + [str(o) for o in range(4100)]
    first, rest, again, every = (line.split() for line in lines[:4])
    assert first == names[:taken]
    assert rest == names[taken:] and again == names[taken:]
    assert every == names
    # the fixed listings too
    lines = out(f"perl {script} orders-0 {min(taken, 5)} true", m.path).split("\n")
    names = [".", ".."] + [name.decode() for name, _ in PARTITION_ENTRIES]
    first, rest, again, every = (line.split() for line in lines[:4])
    assert first + rest == names and again == rest and every == names


# --------------------------------------------------------------------------- read-only mounts


def test_read_only_mount_changes_nothing(mount, tmp_path):
    m = mount()
    new_partition(m)
    sh("printf 'a\\nb\\n' >> orders-0/append", m.path)
    mount.unmount(m)
    before = tree_digest(m.backing)
    ro = mount(m.backing, "--read-only")
    assert "ro" in out(f"findmnt -no OPTIONS {ro.path}", ro.path).split(",")
    assert sh("cat orders-0/by-offset/1", ro.path).stdout == b"b"
    assert xattr("orders-0", "user.kafka.logEndOffset", ro.path) == b"2"
    fails_with("mkdir clicks-0", ro.path, "Read-only file system")
    fails_with("echo c >> orders-0/append", ro.path, "Read-only file system")
    fails_with("printf 'k\\tv\\n' >> orders-0/append-keyed", ro.path, "Read-only file system")
    fails_with("setfattr -n user.x -v y orders-0/by-offset/0", ro.path, "Read-only file system")
    assert out("ls", ro.path).split() == ["orders-0"]
    mount.unmount(ro)
    assert tree_digest(m.backing) == before


def test_a_partition_deleted_under_a_read_only_mount_is_gone_by_path_too(mount, tmp_path):
    """A broker deleting a topic removes its partition directory: the read-only mount answers
    ENOENT for it by path (the kernel had its entry, its files and a record cached) within
    a second, not after the entry timeout, and the other partitions stay; the topic made
    again under that name serves its new records, nothing of the old ones."""
    import shutil

    from storage import LogManager

    backing = tmp_path / "data"
    writer = LogManager(backing)
    writer.create("users-0").append([b"old"])
    writer.create("orders-0").append([b"order"])
    writer.close()
    ro = mount(backing, "--read-only")
    sh("stat users-0 users-0/values users-0/by-offset/0 >/dev/null && ls -la users-0 >/dev/null"
       " && cat users-0/by-offset/0 users-0/values >/dev/null", ro.path)  # all cached now
    assert (ro.path / "users-0" / "by-offset" / "0").read_bytes() == b"old"

    def gone(path):
        try:
            os.stat(path)
        except FileNotFoundError:
            return True
        return False

    shutil.rmtree(backing / "users-0")
    wait_until(lambda: gone(ro.path / "users-0"), "stat users-0 to fail with ENOENT",
               timeout=10)
    assert gone(ro.path / "users-0" / "values") and gone(ro.path / "users-0" / "by-offset" / "0")
    fails_with("ls -la users-0", ro.path, "No such file or directory")
    assert out("ls", ro.path).split() == ["orders-0"]
    assert out("cat orders-0/by-offset/0", ro.path) == "order"

    writer = LogManager(backing)  # the topic made again, with other records
    writer.create("users-0").append([b"new", b"newer"])
    writer.close()
    wait_until(lambda: not gone(ro.path / "users-0"), "users-0 to be back")
    assert (ro.path / "users-0" / "by-offset" / "0").read_bytes() == b"new"
    assert out("cat users-0/values", ro.path) == "new\nnewer\n"


def test_a_log_truncated_and_written_again_under_a_read_only_mount_serves_the_new_records(
        mount, tmp_path):
    """A broker's follower truncating its log to its leader (``LocalLog.truncateTo``) and
    fetching other records at the same offsets, past the old end, before the mount looks
    again: the read-only mount serves the new records there, not the ones it (and the
    kernel) held, and goes on following."""
    from storage import LogManager

    backing = tmp_path / "data"
    writer = LogManager(backing)
    log = writer.create("users-0")
    for i in range(10):
        log.append([b"a-%d" % i])
    ro = mount(backing, "--read-only")
    part = ro.path / "users-0"
    assert out("cat by-offset/5; echo; stat -c %s by-offset/5", part).split() == ["a-5", "3"]
    log.truncate_to(3)
    for i in range(3, 12):
        log.append([b"bb-%d" % i])
    writer.close()
    wait_until(lambda: len(os.listdir(part / "by-offset")) == 12, "ls by-offset to show 12")
    assert out("cat by-offset/5", part) == "bb-5"
    wait_until(lambda: os.stat(part / "by-offset" / "5").st_size == 4, "stat to give bb-5's size")
    assert out("cat values", part).split() == (["a-0", "a-1", "a-2"] +
                                               [f"bb-{i}" for i in range(3, 12)])


# --------------------------------------------------------------------------- persistence


def test_data_survives_unmount_and_remount(mount):
    m = mount()
    new_partition(m)
    sh("printf 'a\\nb\\nc\\n' >> orders-0/append", m.path)
    mount.unmount(m)  # fusermount3 -u, then the daemon exits after LogManager.close()
    assert not is_mounted(m.path)
    assert (m.backing / ".kafka_cleanshutdown").exists()
    files = {p.suffix for p in (m.backing / "orders-0").iterdir()}
    assert {".log", ".index", ".timeindex"} <= files

    m2 = mount(m.backing)
    assert listed_offsets("orders-0", m2.path) == [0, 1, 2]
    assert [sh(f"cat orders-0/by-offset/{o}", m2.path).stdout for o in range(3)] == [b"a", b"b", b"c"]
    sh("echo d >> orders-0/append", m2.path)
    assert xattr("orders-0/by-offset/3", "user.kafka.offset", m2.path) == b"3"
    assert sh("cat orders-0/by-offset/3", m2.path).stdout == b"d"
    mount.unmount(m2)

    m3 = mount(m.backing)
    assert listed_offsets("orders-0", m3.path) == [0, 1, 2, 3]
    sh("echo e >> orders-0/append", m3.path)
    assert listed_offsets("orders-0", m3.path) == [0, 1, 2, 3, 4]


# --------------------------------------------------------------------------- the CLI


def run_kfs(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(kfs_command(*args), cwd=REPO, env=kfs_env(), capture_output=True, timeout=timeout)


def assert_one_line_error(res: subprocess.CompletedProcess, *fragments: str) -> None:
    err = res.stderr.decode()
    assert res.returncode == 1, (res.returncode, err)
    assert err.startswith("kfs: error: ") and err.count("\n") == 1, err
    for fragment in fragments:
        assert fragment in err, err


def test_cli_help():
    res = run_kfs("mount", "--help")
    assert res.returncode == 0
    text = res.stdout.decode()
    for word in ("BACKING_DIR", "MOUNTPOINT", "--foreground", "--read-only", "--log-level", "--key-separator"):
        assert word in text


def test_cli_refuses_bad_paths(tmp_path):
    (tmp_path / "mnt").mkdir()
    (tmp_path / "file").write_text("x")
    assert_one_line_error(run_kfs("mount", str(tmp_path / "data"), str(tmp_path / "nope")), "mountpoint", "does not exist")
    assert_one_line_error(run_kfs("mount", str(tmp_path / "data"), str(tmp_path / "file")), "not a directory")
    assert_one_line_error(run_kfs("mount", str(tmp_path / "file"), str(tmp_path / "mnt")), "backing directory", "not a directory")
    assert_one_line_error(run_kfs("mount", "--read-only", str(tmp_path / "none"), str(tmp_path / "mnt")), "does not exist")
    assert_one_line_error(run_kfs("mount", str(tmp_path / "mnt" / "d"), str(tmp_path / "mnt")), "inside")
    assert_one_line_error(run_kfs("mount", "--key-separator=", str(tmp_path / "d"), str(tmp_path / "mnt")), "separator")
    assert not (tmp_path / "data").exists() and not is_mounted(tmp_path / "mnt")


@pytest.mark.parametrize("read_only", [False, True])
def test_a_mountpoint_inside_the_backing_directory_is_refused(tmp_path, read_only):
    """Issue 37 item 5: ``kfs mount DIR DIR/loop-0`` mounted, and ``echo hi >>
    DIR/loop-0/loop-0/append`` then hung in D state, the server waiting on its own mount. One
    line, nothing mounted, nothing written (deeper and through a symlink too)."""
    backing = tmp_path / "data"
    m = backing / "loop-0"
    m.mkdir(parents=True)
    (backing / "deep" / "mnt").mkdir(parents=True)
    (tmp_path / "link").symlink_to(backing)
    mode = ("--read-only",) if read_only else ()
    try:
        for mountpoint in (m, backing / "deep" / "mnt", tmp_path / "link" / "loop-0"):
            assert_one_line_error(run_kfs("mount", *mode, str(backing), str(mountpoint)),
                                  f"mountpoint {mountpoint} must not be inside the backing "
                                  f"directory {backing}")
            assert not is_mounted(mountpoint)
        assert sorted(os.listdir(backing)) == ["deep", "loop-0"]
    finally:  # (a mount made before the fix)
        for mountpoint in (m, backing / "deep" / "mnt"):
            if is_mounted(mountpoint):
                subprocess.run(["fusermount3", "-uz", str(mountpoint)], timeout=60)


def test_a_missing_backing_directory_is_created_only_when_asked(mount, tmp_path):
    """A mistyped path is not made (issue 25): a writable mount of a missing backing directory
    is refused unless ``--create``, which makes it (and its parents) and mounts it."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        assert_one_line_error(run_kfs("mount", str(tmp_path / "dta"), str(mnt)),
                              f"backing directory {tmp_path / 'dta'} does not exist",
                              "--create makes a new one")
        assert not (tmp_path / "dta").exists() and not is_mounted(mnt)
        res = run_kfs("mount", "--create", f"--log-file={tmp_path / 'kfs.log'}",
                      str(tmp_path / "new" / "data"), str(mnt))
        assert res.returncode == 0 and res.stderr == b"", res.stderr
        assert is_mounted(mnt)
        sh("mkdir orders-0 && echo x >> orders-0/append", mnt)
        assert (tmp_path / "new" / "data" / "orders-0").is_dir()
    finally:
        if is_mounted(mnt):
            assert run_kfs("umount", str(mnt)).returncode == 0


def test_a_read_only_mount_of_a_directory_that_is_not_a_log_directory_warns(mount, tmp_path):
    """``kfs mount --read-only /etc m`` (issue 25) mounts, but says on stderr and in its log
    that the directory is not a Kafka log directory, rather than show an empty tree silently;
    a broker's formatted directory with no topic yet is not warned about."""
    etc = tmp_path / "etc"
    (etc / "apt").mkdir(parents=True)
    (etc / "hostname").write_text("box\n")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "ro.log"
    try:
        res = run_kfs("mount", "--read-only", f"--log-file={log}", str(etc), str(mnt))
        assert res.returncode == 0, res.stderr
        warning = (f"{etc} is not a Kafka log directory (no <topic>-<N> partition "
                   "directory, no meta.properties, none of the files kfs or a broker writes "
                   "there): nothing to show until partitions appear there")
        assert res.stderr.decode() == f"kfs: warning: {warning}\n"
        assert f"WARNING storage.log_manager: {warning}" in log.read_text()
        assert os.listdir(mnt) == []
    finally:
        if is_mounted(mnt):
            assert run_kfs("umount", str(mnt)).returncode == 0
    assert sorted(os.listdir(etc)) == ["apt", "hostname"]  # nothing written there
    (etc / "meta.properties").write_text("version=1\n")
    m = mount(etc, "--read-only")
    assert "not a Kafka log directory" not in m.log_text()


def etc_like(root: Path) -> Path:
    """A copy of what ``/etc`` looks like to a partition-name parser: ``dbus-1/`` and
    ``polkit-1/`` named like partitions, holding files no broker writes."""
    (root / "dbus-1" / "system.d").mkdir(parents=True)
    (root / "dbus-1" / "system.conf").write_text("<busconfig/>\n")
    (root / "polkit-1").mkdir()
    (root / "polkit-1" / "rules.d").write_text("")
    (root / "hostname").write_text("box\n")
    return root


def test_a_writable_mount_never_writes_into_a_directory_that_is_not_kafkas(mount, tmp_path):
    """Issue 37 item 1: ``kfs mount`` of a copy of ``/etc`` wrote ``.lock``, checkpoints and
    segments into ``dbus-1/``. A ``<topic>-<N>`` directory holding foreign files and no segment
    is not a partition: a writable mount refuses to start (naming it), beside real partitions
    too, and a non-empty directory that is not a log directory is refused as well; nothing is
    written anywhere. A read-only mount warns and skips it."""
    etc = etc_like(tmp_path / "etc")
    before = tree_digest(etc)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        assert_one_line_error(run_kfs("mount", str(etc), str(mnt)),
                              f"{etc / 'dbus-1'} is not a Kafka partition directory: it holds "
                              "system.conf, which neither kfs nor a broker writes")
    finally:  # (a mount made without the fixture, before the fix)
        if is_mounted(mnt):
            run_kfs("umount", str(mnt))
    assert tree_digest(etc) == before and not is_mounted(mnt)
    logs = tmp_path / "logs"  # a log directory with a real partition beside a foreign one
    m = mount(logs)
    sh("mkdir orders-0 && echo kept >> orders-0/append", m.path)
    mount.unmount(m)
    (logs / "dbus-1").mkdir()
    (logs / "dbus-1" / "system.conf").write_text("<busconfig/>\n")
    with_partition = tree_digest(logs)
    assert_one_line_error(run_kfs("mount", str(logs), str(mnt)), f"{logs / 'dbus-1'} is not")
    assert tree_digest(logs) == with_partition and not is_mounted(mnt)
    plain = tmp_path / "plain"  # no partition-like name at all: still not Kafka's
    plain.mkdir()
    (plain / "notes.txt").write_text("mine\n")
    assert_one_line_error(run_kfs("mount", str(plain), str(mnt)),
                          f"{plain} is not a Kafka log directory")
    assert os.listdir(plain) == ["notes.txt"] and not is_mounted(mnt)
    ro = mount(logs, "--read-only")
    assert sorted(os.listdir(ro.path)) == ["orders-0"]
    assert (f"WARNING storage.log_manager: {logs / 'dbus-1'} is not a Kafka partition "
            "directory: it holds system.conf") in ro.log_text()
    mount.unmount(ro)
    assert tree_digest(logs) == with_partition


def test_cli_reports_a_failure_of_the_serving_process(tmp_path):
    (tmp_path / "mnt").mkdir()
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "server.properties").write_text("log.segment.bytes=not-a-number\n")
    res = run_kfs("mount", str(backing), str(tmp_path / "mnt"))
    assert_one_line_error(res, "cannot open backing directory")
    assert not is_mounted(tmp_path / "mnt")


def test_why_a_mount_failed_is_in_its_log(tmp_path):
    """Issue 37 item 10: a refused start left only the "mounting X at Y" line in the mount's
    log, and a serving process whose launcher was gone said why nowhere. The reason is logged
    as an error: a directory that cannot be opened, a URI that cannot be read, and a check the
    serving process itself refuses (run here as the launcher runs it, its launcher gone)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "server.properties").write_text("log.segment.bytes=not-a-number\n")
    for n, args in enumerate(([str(backing)], ["--read-only", "file:///nowhere"])):
        log = tmp_path / f"kfs{n}.log"
        res = run_kfs("mount", f"--log-file={log}", *args, str(mnt))
        assert_one_line_error(res, "cannot open backing directory")
        reason = res.stderr.decode().removeprefix("kfs: error: ").strip()
        assert f" ERROR kfs: {reason}" in log.read_text(), log.read_text()
        assert not is_mounted(mnt)
    (mnt / "left.txt").write_text("")  # (filled after the launcher checked it)
    log = tmp_path / "child.log"
    (tmp_path / "new").mkdir()
    read_end, write_end = os.pipe()
    os.close(read_end)  # the launcher is gone
    try:
        done = subprocess.run(
            kfs_command("mount", "--foreground", f"--ready-fd={write_end}", f"--log-file={log}",
                        "--", str(tmp_path / "new"), str(mnt)),
            cwd=REPO, env=kfs_env(), pass_fds=(write_end,), capture_output=True, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert f"ERROR kfs: mountpoint {mnt} is not empty" in log.read_text(), log.read_text()
    assert not is_mounted(mnt)


@pytest.mark.fuse
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_foreground_mount_ends_cleanly_on_signal(tmp_path, signum):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    backing = tmp_path / "data"
    proc = subprocess.Popen(kfs_command("mount", "-f", "--create", str(backing), str(mnt)), cwd=REPO, env=kfs_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_until(lambda: is_mounted(mnt), "the foreground mount to appear", timeout=60, proc=proc)
        sh("mkdir orders-0 && echo x >> orders-0/append && cat orders-0/by-offset/0", mnt)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert not is_mounted(mnt)
        assert (backing / ".kafka_cleanshutdown").exists()  # LogManager.close() ran
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        if is_mounted(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], capture_output=True, timeout=30)


def test_retention_runs_in_the_mount_and_deleted_offsets_read_enoent(mount, tmp_path):
    """retention.bytes, so that nothing is deleted before the test has read (and the kernel
    cached) offset 0: what moves the log start is the second append, not the clock."""
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "server.properties").write_text("log.retention.check.interval.ms=200\n")
    (backing / "orders.topic.properties").write_text(
        "retention.bytes=2048\nsegment.bytes=1024\nfile.delete.delay.ms=0\n")
    m = mount(backing)
    new_partition(m)
    lines = ("for i in $(seq {} {}); do printf 'record-%02d-%s\\n' $i "
             "$(head -c 60 /dev/zero | tr '\\0' x); done >> orders-0/append")
    sh(lines.format(0, 9), m.path)  # one segment: under retention.bytes
    assert sh("cat orders-0/by-offset/0", m.path).stdout.startswith(b"record-00-")  # now cached
    assert int(xattr("orders-0", "user.kafka.logStartOffset", m.path)) == 0
    sh(lines.format(10, 49), m.path)
    assert int(xattr("orders-0", "user.kafka.segmentCount", m.path)) > 2
    # the deadline only ends a hung run: retention runs every 200 ms
    start = wait_until(lambda: int(xattr("orders-0", "user.kafka.logStartOffset", m.path)),
                       "retention to move the log start", timeout=240)
    fails_with("cat orders-0/by-offset/0", m.path, "No such file or directory")
    listed = sorted(int(n) for n in sh("ls orders-0/by-offset", m.path).stdout.split())
    # retention may have run again since: the listing starts at the log start of its time
    assert listed[0] >= start > 0 and listed == list(range(listed[0], 50))
    assert not list((backing / "orders-0").glob("00000000000000000000.*"))
    sh("echo fresh >> orders-0/append", m.path)
    assert sh("cat orders-0/by-offset/50", m.path).stdout == b"fresh"


def producer_batch(values, producer_id=-1, sequence=-1, transactional=False):
    """A v2 batch as a producer builds it (kafka-python, independent of kfs), base offset 0."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=0,
                                        base_sequence=sequence, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def write_batches(path, data: bytes, chunk: int = 1000) -> None:
    """Write ``data`` to ``path`` in small write() calls (batches span them), then close."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        for i in range(0, len(data), chunk):
            os.write(fd, data[i:i + chunk])
    finally:
        os.close(fd)


def test_append_batches_takes_producer_batches_and_assigns_offsets(mount):
    m = mount()
    part = new_partition(m)
    sh("echo first >> orders-0/append", m.path)
    data = producer_batch([b"a" * 700, b"b" * 700]) + producer_batch([b"c" * 900])
    write_batches(part / "append-batches", data)
    assert [out(f"cat orders-0/by-offset/{o}", m.path)[:1] for o in range(4)] == ["f", "a", "b", "c"]
    assert xattr("orders-0/by-offset/3", "user.kafka.key", m.path) == b"k"


def test_append_batches_refuses_bad_bytes_with_einval_and_keeps_nothing(mount):
    m = mount()
    part = new_partition(m)
    bad = bytearray(producer_batch([b"x"]))
    bad[-1] ^= 0xFF
    with pytest.raises(OSError) as err:
        write_batches(part / "append-batches", bytes(bad), chunk=len(bad))
    assert err.value.errno == errno.EINVAL
    with pytest.raises(OSError) as err:  # a partial batch: the error reaches close()
        write_batches(part / "append-batches", producer_batch([b"y"])[:-5])
    assert err.value.errno == errno.EINVAL
    assert xattr("orders-0", "user.kafka.logEndOffset", m.path) == b"0"


def test_append_batches_transaction_is_hidden_from_read_committed_until_committed(mount):
    from storage.records.control import ControlRecordType, build_control_batch

    m = mount()
    part = new_partition(m)
    write_batches(part / "append-batches",
                  producer_batch([b"t1", b"t2"], producer_id=42, sequence=0, transactional=True))
    assert xattr("orders-0", "user.kafka.lastStableOffset", m.path) == b"0"
    marker = build_control_batch(0, 42, 0, ControlRecordType.COMMIT, timestamp_ms=now_ms())
    write_batches(part / "append-batches", marker)
    assert xattr("orders-0", "user.kafka.lastStableOffset", m.path) == b"3"
    assert out("ls orders-0/by-offset", m.path).split() == ["0", "1"]  # the marker is no record


def test_a_partition_copies_with_cp_tar_and_rsync(mount, tmp_path):
    """cp -r, tar and rsync -a of a partition directory carry its records; as on sysfs, the
    write-only append files are their only errors ("Permission denied"), and none with
    ``--exclude``. The streams' times stay put while nothing is appended (tar's "file changed
    as we read it")."""
    m = mount()
    new_partition(m)
    sh("printf 'a\\nb\\nc\\n' >> orders-0/append", m.path)
    times = out("stat -c '%Y %Z' orders-0/values orders-0/records.jsonl", m.path)
    copies = tmp_path / "copies"
    copies.mkdir()
    for command in (f"cp -r orders-0 {copies}/cp", f"tar -cf {copies}/o.tar orders-0",
                    f"rsync -a orders-0/ {copies}/rsync/", "grep -r zzz orders-0"):
        res = sh(command, m.path, check=False)
        errors = res.stderr.decode().splitlines()
        assert res.returncode != 0 and errors, command
        assert all("Permission denied" in e or "due to previous errors" in e
                   or "some files/attrs were not transferred" in e for e in errors), errors
        assert sorted(re.search(r"(append[-.a-z]*)", e)[1]
                      for e in errors if "Permission denied" in e) == [
            "append", "append-batches", "append-keyed", "append.jsonl"], errors
    sh(f"tar -cf {copies}/x.tar --exclude='append*' orders-0 && "
       f"rsync -a --exclude='append*' orders-0/ {copies}/x/", m.path)
    sh(f"mkdir {copies}/tar && tar -xf {copies}/o.tar -C {copies}/tar", m.path)
    for copy in (copies / "cp", copies / "tar" / "orders-0", copies / "rsync"):
        assert (copy / "values").read_text() == "a\nb\nc\n"
        assert sorted(os.listdir(copy / "by-offset")) == ["0", "1", "2"]
        assert (copy / "by-offset" / "1").read_text() == "b"
    assert out("stat -c '%Y %Z' orders-0/values orders-0/records.jsonl", m.path) == times
    sh("echo d >> orders-0/append", m.path)
    assert int(out("stat -c '%Y' orders-0/values", m.path)) >= int(times.split()[0])


def test_by_time_takes_from_s_grammar_and_errnos(mount):
    m = mount()
    new_partition(m)
    sh("echo a >> orders-0/append", m.path)
    ts = int(xattr("orders-0/by-offset/0", "user.kafka.timestamp", m.path))
    assert out(f"readlink orders-0/by-time/@{ts}", m.path) == "../by-offset/0\n"
    assert out(f"readlink orders-0/by-time/{ts}", m.path) == "../by-offset/0\n"
    fails_with("stat orders-0/by-time/abc", m.path, "Invalid argument")
    fails_with("stat orders-0/from/abc", m.path, "Invalid argument")
    fails_with(f"stat orders-0/by-time/{ts + 10**9}", m.path, "No such file")


def test_a_refused_mkdir_says_why_in_the_log(mount):
    m = mount()  # (the fixture logs at debug level)
    fails_with("mkdir 'bad name-0'", m.path, "Invalid argument")
    assert "refused (EINVAL)" in m.log_text() and "bad name" in m.log_text()
