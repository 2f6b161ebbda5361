"""``append.jsonl`` through a real mount, driven from a shell: records in ``records.jsonl``'s own
shape (kcat ``-J``'s fields) carry keys, null values (tombstones), headers and timestamps, so
``jq`` over one partition's ``records.jsonl`` appended to another's ``append.jsonl`` copies the
records as they are; a tombstone written so deletes a key of a compacted topic; bad lines are
EINVAL (nothing of that write stored, the reason in the mount's log), a record too large EFBIG;
lines are framed as ``append``'s."""

from __future__ import annotations

import errno
import json
import os

import pytest

from helpers.compaction import active_base, cleaned_to
from helpers.shell import sh
from helpers.waits import wait_until
from storage import LogConfig
from storage.log import Log
from storage.records import build_batch

pytestmark = pytest.mark.fuse

T0 = 1763805600000  # 2025-11-22T10:00:00Z


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def without_place(record: dict) -> dict:
    """A records.jsonl object without what says where it is (not the record's own)."""
    return {k: v for k, v in record.items() if k not in ("topic", "partition", "offset")}


@pytest.fixture
def source(tmp_path):
    """``src-0``: 40 records with every kind of key, value and header records.jsonl shows:
    UTF-8 text (with newlines, tabs, quotes), bytes that are not UTF-8, null keys, null
    values, headers with null and binary values and a non-ASCII key, timestamps of their own."""
    backing = tmp_path / "data"
    (backing / "src-0").mkdir(parents=True)
    log = Log(backing / "src-0", "src", 0, LogConfig())
    for lo in range(0, 40, 10):
        rows = range(lo, lo + 10)
        log.append_as_leader(build_batch(
            0,
            [None if i % 9 == 4 else b"\xff\x00line\n%d" % i if i % 3 == 0
             else 'v%d "q"\t\\ é\n'.encode() % i for i in rows],
            [None if i % 5 == 0 else b"\x80k%d" % i if i % 4 == 0 else b"k%d" % i for i in rows],
            [T0 + 1000 * i for i in rows],
            [[] if i % 2 else [("h", b"x"), ("nul", None), ("bin", b"\xfe\n"), ("ü", b"")]
             for i in rows]))
    log.close()
    return backing


def test_jq_over_records_jsonl_appended_copies_records(source, mount):
    m = mount(source)
    sh("mkdir dst-0 all-0 && jq -c 'select(.offset % 2 == 0)' src-0/records.jsonl "
       ">> dst-0/append.jsonl && cat src-0/records.jsonl >> all-0/append.jsonl", m.path)
    src = lines(m.path / "src-0" / "records.jsonl")
    assert len(src) == 40
    assert [without_place(r) for r in lines(m.path / "dst-0" / "records.jsonl")] == \
        [without_place(r) for r in src if r["offset"] % 2 == 0]
    copied = lines(m.path / "all-0" / "records.jsonl")
    assert [without_place(r) for r in copied] == [without_place(r) for r in src]
    assert [r["offset"] for r in copied] == list(range(40))  # offsets are the partition's own
    for offset in range(40):  # the bytes themselves, and what getfattr shows
        a, b = (m.path / name / "by-offset" / str(offset) for name in ("src-0", "all-0"))
        assert a.read_bytes() == b.read_bytes()
        assert {n: os.getxattr(a, n) for n in os.listxattr(a)} == \
            {n: os.getxattr(b, n) for n in os.listxattr(b)} | {
                "user.kafka.topic": b"src"}  # (all else equal)
        assert os.stat(a).st_mtime == os.stat(b).st_mtime == (T0 + 1000 * offset) / 1000
    # the by-time index follows the records' own timestamps
    assert os.readlink(m.path / "all-0" / "by-time" / str(T0 + 12_500)) == "../by-offset/13"


def test_fields_as_records_jsonl_writes_them(tmp_path, mount):
    m = mount(tmp_path / "data")
    part = m.path / "p-0"
    os.mkdir(part)
    sh("""printf '%s\\n' \
        '{"payload":"plain"}' \
        '{"key":"k","payload":{"base64":"AAEK/w=="},"headers":["a","1","a",null],"ts":5}' \
        '{"key":{"base64":"/w=="},"payload":null,"tstype":"logappend","ts":1000,"offset":99,"topic":"x","partition":7,"extra":[1]}' \
        '{"key":null,"payload":"é\\u0000\\n","headers":null,"ts":null}' \
        >> p-0/append.jsonl""", m.path)
    got = lines(part / "records.jsonl")
    assert [r["offset"] for r in got] == [0, 1, 2, 3]
    assert got[0]["key"] is None and got[0]["payload"] == "plain" and got[0]["headers"] == []
    assert got[1]["ts"] == 5 and got[1]["tstype"] == "create"
    assert (part / "by-offset" / "1").read_bytes() == b"\x00\x01\n\xff"
    assert got[1]["headers"] == ["a", "1", "a", None]
    assert json.loads(os.getxattr(part / "by-offset" / "1", "user.kafka.headers")) == \
        [["a", "1"], ["a", None]]
    assert os.getxattr(part / "by-offset" / "2", "user.kafka.key") == b"\xff"
    assert os.getxattr(part / "by-offset" / "2", "user.kafka.value.null") == b"true"
    assert got[2]["ts"] == 1000 and got[2]["tstype"] == "create"  # ts is a CreateTime
    assert (part / "by-offset" / "3").read_bytes() == "é\x00\n".encode()
    assert abs(got[3]["ts"] - got[0]["ts"]) < 60_000  # no ts: the time of the append


def test_a_tombstone_deletes_a_key_of_a_compacted_topic(tmp_path, mount):
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "c.topic.properties").write_text(
        "cleanup.policy=compact\nsegment.bytes=1024\nmin.cleanable.dirty.ratio=0.01\n"
        "delete.retention.ms=0\n")
    (backing / "server.properties").write_text(
        "log.cleaner.backoff.ms=50\nlog.cleaner.dedupe.buffer.size=1048576\n")
    m = mount(backing)
    sh("mkdir c-0 && for i in $(seq 0 9); do printf 'user-%d\\tv%d\\n' $((i % 3)) $i "
       ">> c-0/append-keyed; done", m.path)
    # an empty value is not a delete: append-keyed can only store empty strings
    assert (m.path / "c-0" / "by-offset" / "9").read_bytes() == b"v9"
    sh("""echo '{"key":"user-1","payload":null}' >> c-0/append.jsonl""", m.path)
    assert os.getxattr(m.path / "c-0" / "by-offset" / "10", "user.kafka.value.null") == b"true"
    for i in range(60):  # roll segments past the tombstone, so the cleaner reaches it
        sh(f"printf 'user-%d\\tw{i}\\n' {i % 3 * 2} >> c-0/append-keyed", m.path)
    wait_until(lambda: cleaned_to(backing, "c 0") == active_base(backing) and
               cleaned_to(backing, "c 0") > 10, "the cleaner to pass the tombstone", timeout=60)
    left = [json.loads(line) for line in sh("jq -c 'select(.key == \"user-1\")' "
                                            "c-0/records.jsonl", m.path).stdout.splitlines()]
    # its values are gone; the tombstone itself stays until a pass after delete.retention.ms
    assert [r["payload"] for r in left] in ([], [None]), left
    keys = sh("jq -r '.key' c-0/records.jsonl", m.path).stdout.decode().split()
    assert {"user-0", "user-2", "user-4"} <= set(keys)


def test_a_null_key_is_refused_on_a_compacted_topic(tmp_path, mount):
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "c.topic.properties").write_text("cleanup.policy=compact\n")
    m = mount(backing)
    os.mkdir(m.path / "c-0")
    res = sh("""echo '{"key":"a","payload":"x"}{"payload":"y"}' >> c-0/append.jsonl""", m.path,
             check=False)
    assert res.returncode != 0 and b"Invalid argument" in res.stderr  # (not one object)
    with pytest.raises(OSError) as info:  # one write: all or nothing
        with open(m.path / "c-0" / "append.jsonl", "ab", buffering=0) as f:
            f.write(b'{"key":"a","payload":"x"}\n{"payload":"y"}\n')
    assert info.value.errno == errno.EINVAL
    assert "Compacted topic cannot accept message without key" in m.log_text()
    assert os.listdir(m.path / "c-0" / "by-offset") == []


@pytest.mark.parametrize("line, reason", [
    (b"not json", "line 2: not JSON"),
    (b"[1, 2]", "line 2: a JSON array, not an object"),
    (b'{"key": "k"}', 'line 2: no "payload"'),
    (b'{"payload": 42}', 'line 2: "payload" is a JSON number'),
    (b'{"payload": {"base64": "***"}}', 'line 2: "payload" is not base64'),
    (b'{"payload": "x", "headers": ["only-a-key"]}', 'line 2: "headers" is not a flat'),
    (b'{"payload": "x", "ts": -1}', 'line 2: "ts" is -1, not epoch milliseconds'),
    (b'{"payload": "x", "ts": "yesterday"}', 'line 2: "ts" is "yesterday"'),
    (b'{"payload": "\\udc80"}', 'line 2: "payload" holds a lone surrogate'),
    (b"", "line 2: an empty line"),
])
def test_a_line_that_is_not_a_record_object_is_einval_and_nothing_of_the_write_is_stored(
        tmp_path, mount, line, reason):
    m = mount(tmp_path / "data")
    part = m.path / "p-0"
    os.mkdir(part)
    with pytest.raises(OSError) as info:
        with open(part / "append.jsonl", "ab", buffering=0) as f:
            f.write(b'{"payload": "good"}\n' + line + b"\n")
    assert info.value.errno == errno.EINVAL
    assert os.listdir(part / "by-offset") == []  # the good line of that write neither
    assert "append.jsonl write refused (EINVAL)" in m.log_text()
    assert reason in m.log_text(), m.log_text()
    sh("""echo '{"payload":"next"}' >> p-0/append.jsonl""", m.path)  # a new open starts afresh
    assert (part / "by-offset" / "0").read_bytes() == b"next"


def test_a_record_too_large_is_efbig(tmp_path, mount):
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "big.topic.properties").write_text("max.message.bytes=2000\n")
    m = mount(backing)
    part = m.path / "big-0"
    os.mkdir(part)
    for record in ({"payload": "x" * 3000}, {"payload": "x", "headers": ["h", "y" * 3000]},
                   {"key": "k" * 3000, "payload": None}):
        with pytest.raises(OSError) as info:
            with open(part / "append.jsonl", "ab", buffering=0) as f:
                f.write(json.dumps(record).encode() + b"\n")
        assert info.value.errno == errno.EFBIG
    # a line no record under max.message.bytes can take is refused before it is whole
    with pytest.raises(OSError) as info:
        with open(part / "append.jsonl", "ab", buffering=0) as f:
            f.write(b'{"payload": "' + b"\\u0041" * 14000)  # 6 bytes each, for 1 of the record
    assert info.value.errno == errno.EFBIG
    sh("""echo '{"payload":"fits"}' >> big-0/append.jsonl""", m.path)
    assert os.listdir(part / "by-offset") == ["0"]


def test_a_timestamp_kafka_refuses_is_einval(tmp_path, mount):
    """Issue 37 item 12: ``append.jsonl`` took ``"ts": 9223372036854775807``. As Kafka 4's
    LogValidator, a CreateTime record more than ``message.timestamp.after.max.ms`` (1 h by
    default) after now, or more than ``message.timestamp.before.max.ms`` (unlimited by default)
    before it, is refused: EINVAL, nothing of the write stored, the reason in the log; the same
    for a producer's batch through ``append-batches``. A LogAppendTime topic stamps now."""
    backing = tmp_path / "data"
    backing.mkdir()
    (backing / "day.topic.properties").write_text("message.timestamp.before.max.ms=86400000\n")
    (backing / "lat.topic.properties").write_text("message.timestamp.type=LogAppendTime\n")
    m = mount(backing)
    now = int(__import__("time").time() * 1000)
    for name in ("p-0", "day-0", "lat-0"):
        os.mkdir(m.path / name)

    def refused(name: str, data: bytes, file: str = "append.jsonl") -> None:
        with pytest.raises(OSError) as info:
            with open(m.path / name / file, "ab", buffering=0) as f:
                f.write(data)
        assert info.value.errno == errno.EINVAL

    for ts in (9223372036854775807, now + 2 * 3_600_000):
        refused("p-0", b'{"payload": "ok"}\n{"payload": "x", "ts": %d}\n' % ts)
        assert f"Timestamp {ts} of record 2 of the append is out of range" in m.log_text()
    refused("p-0", bytes(build_batch(0, [b"late"], None, [now + 2 * 3_600_000])),
            "append-batches")
    refused("day-0", b'{"payload": "x", "ts": 5}\n')
    assert os.listdir(m.path / "p-0" / "by-offset") == []
    assert os.listdir(m.path / "day-0" / "by-offset") == []
    with open(m.path / "p-0" / "append.jsonl", "ab", buffering=0) as f:  # within the bounds
        f.write(b'{"payload": "old", "ts": 5}\n{"payload": "soon", "ts": %d}\n'
                % (now + 1_800_000))
    with open(m.path / "lat-0" / "append.jsonl", "ab", buffering=0) as f:
        f.write(b'{"payload": "x", "ts": 9223372036854775807}\n')
    assert sorted(os.listdir(m.path / "p-0" / "by-offset")) == ["0", "1"]
    assert lines(m.path / "lat-0" / "records.jsonl")[0]["ts"] < now + 3_600_000


def test_lines_are_framed_as_appends_are(tmp_path, mount):
    """A line may span writes; a last line without a newline is stored at close."""
    m = mount(tmp_path / "data")
    part = m.path / "p-0"
    os.mkdir(part)
    with open(part / "append.jsonl", "ab", buffering=0) as f:
        f.write(b'{"key": "a", "pay')
        assert os.listdir(part / "by-offset") == []
        f.write(b'load": "1"}\n{"key": "b", "payload": "2"}\n{"key": "c",')
        assert sorted(os.listdir(part / "by-offset")) == ["0", "1"]
        f.write(b' "payload": "3"}')
    assert sh("cat keyed-values", part).stdout == b"a\t1\nb\t2\nc\t3\n"


def test_a_bulk_copy_refused_midway_names_the_line_from_the_open_and_resumes(tmp_path, mount):
    """``cat file >> append.jsonl`` of 20,000 lines with line 12,346 not JSON: cat's writes
    before the one holding that line are stored, that write and the rest are not. The log
    names the line counted from the open (not within the refused write), the last line stored
    and its offset, and the line to resume from; fixing the line and appending from there
    (docs/writing.md's recipe) leaves every line stored once, in order."""
    m = mount(tmp_path / "data")
    part = m.path / "p-0"
    os.mkdir(part)
    rows = [b'{"key":"k%d","payload":"value %d with some padding to fill the writes"}' % (i, i)
            for i in range(1, 20_001)]
    rows[12_345] = b"{oops"
    source = tmp_path / "import.jsonl"
    source.write_bytes(b"\n".join(rows) + b"\n")
    res = sh(f"cat {source} >> p-0/append.jsonl", m.path, check=False)
    assert res.returncode != 0 and b"Invalid argument" in res.stderr
    stored = lines(part / "records.jsonl")
    assert 0 < len(stored) < 12_345  # whole writes before the bad line's (128 KiB each)
    text = m.log_text()
    assert "line 12346: not JSON" in text, text
    assert (f"p-0/append.jsonl: write refused (EINVAL), nothing of it stored (lines "
            f"{len(stored) + 1}-") in text, text
    assert (f"stored from this open file: up to line {len(stored)}, the last stored offset "
            f"{len(stored) - 1}; to resume, append again from line {len(stored) + 1}") in text
    # docs/writing.md's recipe: fix the line, append from the line the log names
    sh(f"sed -i '12346s/.*/{{\"key\":\"k12346\",\"payload\":\"fixed\"}}/' {source} && "
       f"tail -n +{len(stored) + 1} {source} >> p-0/append.jsonl", m.path)
    got = lines(part / "records.jsonl")
    assert [r["offset"] for r in got] == list(range(20_000))
    assert [r["key"] for r in got] == [f"k{i}" for i in range(1, 20_001)]
    assert got[12_345]["payload"] == "fixed"


def test_a_refused_write_after_stored_ones_counts_lines_from_the_open(tmp_path, mount):
    """Writes of one open file: the refusal's line numbers continue across writes (a line
    spanning writes counted once), for append.jsonl and for append-keyed alike."""
    m = mount(tmp_path / "data")
    part = m.path / "p-0"
    os.mkdir(part)
    with pytest.raises(OSError) as info:
        with open(part / "append.jsonl", "ab", buffering=0) as f:
            f.write(b'{"payload": "1"}\n{"payl')
            f.write(b'oad": "2"}\n{"payload": "3"}\n')
            f.write(b'{"payload": "4"}\n[5]\n')
    assert info.value.errno == errno.EINVAL
    text = m.log_text()
    assert "line 5: a JSON array, not an object" in text, text
    assert ("p-0/append.jsonl: write refused (EINVAL), nothing of it stored (lines 4-5, counted "
            "from the open; each write() is all or nothing); stored from this open file: up to "
            "line 3, the last stored offset 2; to resume, append again from line 4") in text
    with pytest.raises(OSError) as info:
        with open(part / "append-keyed", "ab", buffering=0) as f:
            f.write(b"a\t1\nb\t2\n")
            f.write(b"c\t3\nno separator\n")
    assert info.value.errno == errno.EINVAL
    assert ("p-0/append-keyed: write refused (EINVAL): line 4 has no key separator b'\\t', "
            "nothing of it stored (lines 3-4, "
            "counted from the open; each write() is all or nothing); stored from this open "
            "file: up to line 2, the last stored offset 4") in m.log_text(), m.log_text()
