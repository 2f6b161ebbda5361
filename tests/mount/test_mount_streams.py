"""A partition as one stream through a real mount, driven by the real unix tools: ``cat``,
``wc``, ``grep``, ``jq``, ``head``, ``tail -n``, ``tail -f`` on ``values`` and
``records.jsonl``, windows under ``from/<start>/``, ISO-8601 names, and the errnos of bad
starts."""

from __future__ import annotations

import errno
import fcntl
import json
import os
import pty
import struct
import subprocess
import termios
from datetime import datetime, timezone

import pytest

from helpers.shell import sh
from helpers.waits import Lines, wait_until
from storage import LogConfig
from storage.log import Log
from storage.records import build_batch

pytestmark = pytest.mark.fuse

T0 = 1763805600000  # 2025-11-22T10:00:00Z


@pytest.fixture
def orders(tmp_path, mount):
    """A mounted partition ``orders-0`` of 3,000 records over many segments: value ``v<i>``
    (null every 500th), key ``k<i % 7>``, one header, timestamps T0 + i seconds."""
    backing = tmp_path / "data"
    (backing / "orders-0").mkdir(parents=True)
    log = Log(backing / "orders-0", "orders", 0, LogConfig(segment_bytes=16384))
    for lo in range(0, 3000, 100):
        values = [None if i % 500 == 499 else b"v%d" % i for i in range(lo, lo + 100)]
        log.append_as_leader(build_batch(0, values, [b"k%d" % (i % 7) for i in range(lo, lo + 100)],
                                         [T0 + 1000 * i for i in range(lo, lo + 100)],
                                         [[("h", b"x")]] * 100))
    assert len(log.segments) > 3
    log.close()
    m = mount(backing)
    return m.path / "orders-0"


def expected_values(lo: int = 0, hi: int = 3000) -> str:
    return "".join("null\n" if i % 500 == 499 else f"v{i}\n" for i in range(lo, hi))


def test_values_and_records_read_by_unix_tools(orders):
    assert sh("cat values", orders).out == expected_values()
    assert sh("wc -l < values", orders).out.strip() == "3000"
    assert sh("grep -c '^v1' values", orders).out.strip() == str(
        sum(1 for i in range(3000) if str(i).startswith("1") and i % 500 != 499))
    assert sh("head -n 2 values", orders).out == "v0\nv1\n"
    assert sh("tail -n 3 values", orders).out == "v2997\nv2998\nnull\n"
    assert os.stat(orders / "values").st_size == len(expected_values().encode())
    lines = sh("jq -c . records.jsonl", orders).out.splitlines()
    assert len(lines) == 3000
    first = json.loads(lines[0])
    assert first == {"topic": "orders", "partition": 0, "offset": 0, "tstype": "create",
                     "ts": T0, "headers": ["h", "x"], "key": "k0", "payload": "v0"}
    assert json.loads(lines[499])["payload"] is None
    assert sh("jq -r 'select(.key == \"k3\") | .offset' records.jsonl | wc -l", orders).out.strip() \
        == str(sum(1 for i in range(3000) if i % 7 == 3))
    listing = sh("ls -l", orders).out
    for name in ("values", "records.jsonl", "from"):
        assert name in listing



def test_stream_files_are_read_a_mib_at_a_time(orders):
    # st_blksize 1 MiB: cat sizes its reads by it (coreutils' io_blksize), one request a MiB
    for name in ("values", "keyed-values", "records.jsonl", "from/2990/values"):
        assert os.stat(orders / name).st_blksize == 1 << 20, name
    assert sh("stat -c %o values", orders).out.strip() == str(1 << 20)
    assert os.stat(orders / "by-offset" / "7").st_blksize == 4096  # records: one page

def test_windows_start_at_an_offset_the_last_n_or_a_time(orders):
    assert sh("cat from/2990/values", orders).out == expected_values(2990)
    assert sh("cat from/-4/values", orders).out == expected_values(2996)
    iso = datetime.fromtimestamp((T0 + 2995_000) / 1000, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    assert sh(f"cat from/{iso}/values", orders).out == expected_values(2995)
    assert sh(f"cat from/@{T0 + 2997_500}/values", orders).out == expected_values(2998)
    assert json.loads(sh("head -n 1 from/1234/records.jsonl", orders).out)["offset"] == 1234
    assert sh("ls from/7", orders).out.split() == ["keyed-values", "records.jsonl", "values"]
    assert sh(f"cat by-time/{iso}", orders).out == "v2995"
    assert sh(f"wc -l < from/@{T0 - 5000}/values", orders).out.strip() == "3000"  # head never lost


def test_a_time_before_a_moved_log_start_is_enoent(tmp_path, mount):
    """Once retention moved the log start, a time before the first record left names records
    that may be gone: ENOENT, not a window that silently starts later."""
    backing = tmp_path / "data"
    (backing / "old-0").mkdir(parents=True)
    log = Log(backing / "old-0", "old", 0, LogConfig(segment_bytes=4096, retention_ms=1000_000))
    for lo in range(0, 1000, 50):
        log.append_as_leader(build_batch(0, [b"v%d" % i for i in range(lo, lo + 50)], None,
                                         [T0 + 1000 * i for i in range(lo, lo + 50)]))
    assert log.delete_old_segments(now=T0 + 1500_000) > 0
    first = log.log_start_offset
    assert 0 < first < 1000
    log.close()
    old = mount(backing).path / "old-0"
    for name in (f"@{T0}", f"@{T0 + 1000 * first - 1}"):
        with pytest.raises(OSError) as info:
            os.stat(old / "from" / name / "values")
        assert info.value.errno == errno.ENOENT
    assert sh(f"head -n 1 from/@{T0 + 1000 * first}/values", old).out == f"v{first}\n"


@pytest.mark.parametrize("name, code", [("abc", errno.EINVAL), ("--1", errno.EINVAL),
                                        ("-0x3", errno.EINVAL), ("@-5", errno.EINVAL),
                                        ("3001", errno.ENOENT), ("@99999999999999", errno.ENOENT),
                                        ("2099-01-01T00:00:00Z", errno.ENOENT)])
def test_bad_starts_give_clear_errnos(orders, name, code):
    with pytest.raises(OSError) as info:
        os.stat(orders / "from" / name / "values")
    assert info.value.errno == code


def test_streams_are_read_only(orders):
    for path in (orders / "values", orders / "from" / "5" / "records.jsonl"):
        with pytest.raises(OSError) as info:
            open(path, "ab")
        assert info.value.errno in (errno.EACCES, errno.EPERM)


def test_tail_f_follows_appends(orders):
    tail = subprocess.Popen(["tail", "-f", "-n", "1", str(orders / "values")],
                            stdout=subprocess.PIPE)
    # each line waited for on tail's pipe, not on a clock; the deadline only ends a hung test
    lines = Lines(tail.stdout, "tail -f", tail)
    try:
        assert lines.readline(timeout=60) == b"null\n"
        for text in ("first new", "second new"):
            sh(f"echo '{text}' >> append", orders)
            assert lines.readline(timeout=60) == text.encode() + b"\n"
    finally:
        tail.kill()
        tail.wait(timeout=30)


def test_less_follows_appends(orders):
    """``less +F`` on a terminal: it shows the end of ``values`` and each appended record."""
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    less = subprocess.Popen(["less", "+F", "values"], cwd=orders, stdin=follower,
                            stdout=follower, stderr=follower, start_new_session=True,
                            env={**os.environ, "TERM": "xterm", "LESS": "", "LESSOPEN": ""})
    os.close(follower)
    try:
        # what less writes to its terminal, read until each text appears after the last one
        # (waiting on the pty, not on a clock; the deadline only ends a hung test)
        screen = Lines(leader, "less on its terminal")
        screen.until(b"v2998", timeout=60)
        for text in (b"first-followed", b"second-followed"):
            sh(f"echo {text.decode()} >> append", orders)
            screen.until(text, timeout=60)
    finally:
        less.kill()
        less.wait(timeout=30)
        os.close(leader)


def test_a_reader_whose_records_retention_removed_gets_eio_not_spliced_lines(tmp_path, mount):
    """Byte positions name the text the reader was reading: once retention removed records
    under it, a read inside the stream is EIO, and reading again from byte 0 starts at the
    new log start (as tail -f does after it sees st_size shrink)."""
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "server.properties").write_text("log.retention.check.interval.ms=200\n")
    (backing / "r.topic.properties").write_text("retention.bytes=2048\nsegment.bytes=1024\n")
    m = mount(backing)
    sh("mkdir r-0 && seq -f 'line-%03g' 0 9 >> r-0/append", m.path)  # one segment: kept
    with open(m.path / "r-0" / "values", "rb", buffering=0) as f:
        assert f.read(9) == b"line-000\n"
        with open(m.path / "r-0" / "append", "ab", buffering=0) as append:
            # one write, stored in one append: one retention pass then has all it deletes
            append.write(b"".join(b"line-%03d\n" % i for i in range(10, 300)))
        # the retention check runs every 200 ms
        wait_until(lambda: int(os.getxattr(m.path / "r-0", "user.kafka.logStartOffset")),
                   "retention to move the log start", timeout=60)
        with pytest.raises(OSError) as info:
            f.read(9)
        assert info.value.errno == errno.EIO
        f.seek(0)
        start = int(os.getxattr(m.path / "r-0", "user.kafka.logStartOffset"))
        assert f.read(9) == b"line-%03d\n" % start
        assert f.read(9) == b"line-%03d\n" % (start + 1)
    assert "read at byte 9 after records under it were removed" in m.log_text()


def test_keyed_values_print_key_tab_value_as_the_console_consumer(orders):
    """``keyed-values``: ``key<TAB>value`` per record as ``kafka-console-consumer --property
    print.key=true`` prints them (a null value prints ``null``), windows too."""
    want = "".join(f"k{i % 7}\t{'null' if i % 500 == 499 else f'v{i}'}\n" for i in range(3000))
    assert sh("cat keyed-values", orders).out == want
    assert os.stat(orders / "keyed-values").st_size == len(want.encode())
    assert sh("tail -n 2 from/2990/keyed-values", orders).out == "k2\tv2998\nk3\tnull\n"
    assert sh("cat from/-3/keyed-values", orders).out == "k1\tv2997\nk2\tv2998\nk3\tnull\n"
    assert sh("awk -F '\\t' '$1 == \"k3\"' keyed-values | wc -l", orders).out.strip() == \
        str(sum(1 for i in range(3000) if i % 7 == 3))
    sh("echo 'no key' >> append", orders)  # a null key prints null
    assert sh("tail -n 1 keyed-values", orders).out == "null\tno key\n"


def test_keyed_values_read_back_what_append_keyed_took(tmp_path, mount):
    """What ``append-keyed`` takes, ``keyed-values`` gives back, with the mount's
    --key-separator on both sides; so a partition's keyed records copy with ``cat >>``."""
    m = mount(tmp_path / "data", "--key-separator=::")
    text = "user-7::{\"sku\": 42}\n::empty key\nuser-8::a::b\t\nuser-9::\n"
    sh(f"mkdir a-0 b-0 && printf '%s' '{text}' >> a-0/append-keyed", m.path)
    assert sh("cat a-0/keyed-values", m.path).out == text
    sh("cat a-0/keyed-values >> b-0/append-keyed", m.path)
    for offset in range(4):
        a, b = (m.path / name / "by-offset" / str(offset) for name in ("a-0", "b-0"))
        assert a.read_bytes() == b.read_bytes()
        assert os.getxattr(a, "user.kafka.key") == os.getxattr(b, "user.kafka.key")


def test_binary_values_with_newlines_are_safe_in_records_jsonl_only(tmp_path, mount):
    """Values with newlines (binary or text) make ``values`` more lines than records;
    ``records.jsonl`` keeps one line per record, and ``jq`` gets the exact bytes back: from
    base64 for values that are not UTF-8, from the string for those that are."""
    backing = tmp_path / "data"
    (backing / "bin-0").mkdir(parents=True)
    log = Log(backing / "bin-0", "bin", 0, LogConfig())
    values = [bytes([(i * 37 + j * 11) % 256 for j in range(40)]) + b"\n\xff\n" if i % 2
              else f"line {i}\nnext é\r\n\t\x00end".encode() for i in range(65)]
    log.append_as_leader(build_batch(0, values, None, T0))
    log.close()
    m = mount(backing)
    part = m.path / "bin-0"
    assert int(sh("wc -l < values", part).out) > 65  # not one line per record
    assert sh("wc -l < records.jsonl", part).out.strip() == "65"
    for offset, value in enumerate(values):
        if offset % 2:
            got = sh(f"jq -j 'select(.offset == {offset}) | .payload.base64' "
                     "records.jsonl | base64 -d", part).stdout
        else:
            got = subprocess.run(["jq", "-j", f"select(.offset == {offset}) | .payload",
                                  "records.jsonl"], cwd=part, capture_output=True,
                                 check=True, timeout=120).stdout
        assert got == value == (part / "by-offset" / str(offset)).read_bytes(), offset
    # and they copy through jq into another partition's append.jsonl, byte for byte
    sh("mkdir ../copy-0 && jq -c . records.jsonl >> ../copy-0/append.jsonl", part)
    for offset, value in enumerate(values):
        assert (m.path / "copy-0" / "by-offset" / str(offset)).read_bytes() == value
