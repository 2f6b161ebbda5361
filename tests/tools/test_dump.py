"""``kfs dump`` run as a command (``python -m kfs dump ...``): kafka-dump-log's lines for the
reference's worked examples (§2.7, §2.8, §12), batch and record lines checked against kafka-python
(an independent reader) on the Kafka-written fixtures, ``--json`` against the fixtures'
``.expected.jsonl`` and through ``jq``, index and time-index checks, and errors."""

import base64
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from helpers.kfs import kfs_command, kfs_env
from helpers.paths import KAFKA_WRITTEN, REPO
from helpers.records import EXAMPLE_2_7, EXAMPLE_2_8, TS
from kafka.record.memory_records import MemoryRecords

from storage import LogConfig
from storage.log import Log
from storage.log_files import log_file, offset_from_file_name
from storage.records import CompressionType, build_batch

FIXTURES = KAFKA_WRITTEN
V2_FIXTURES = ["plain-0", "codecs-0", "compacted-0", "txn-0"]
needs_fixtures = pytest.mark.needs_fixture("kafka-written")

# §12.1, the batch line of the §2.7 batch
LINE_2_7 = ("baseOffset: 0 lastOffset: 0 count: 1 baseSequence: -1 lastSequence: -1 producerId: -1 "
            "producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false isControl: false "
            "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 70 "
            "magic: 2 compresscodec: none crc: 3919285720 isvalid: true")


def kfs_dump(*args, input=None):
    """Run ``python -m kfs dump ARGS``; returns the CompletedProcess (text)."""
    return subprocess.run(kfs_command("dump", *map(str, args)), cwd=REPO, env=kfs_env(),
                          capture_output=True, text=True, timeout=120, input=input)


def segment_files(name, suffix):
    return sorted(str(p) for p in (FIXTURES / name).glob(f"*{suffix}"))


def write_segment(directory, base, data):
    directory.mkdir(parents=True, exist_ok=True)
    path = log_file(directory, base)
    path.write_bytes(data)
    return path


def java_bool(value):
    return "true" if value else "false"


CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
TS_NAMES = {0: "CreateTime", 1: "LogAppendTime"}


def oracle_lines(path):
    """kafka-dump-log's batch and deep-iteration lines for a .log, built from kafka-python's
    reading of the bytes."""
    records = MemoryRecords(Path(path).read_bytes())
    lines, position = [], 0
    while (batch := records.next_batch()) is not None:
        lines.append(
            f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
            f"count: {batch.records_count} baseSequence: {batch.base_sequence} "
            f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} partitionLeaderEpoch: {batch.leader_epoch} "
            f"isTransactional: {java_bool(batch.is_transactional)} "
            f"isControl: {java_bool(batch.is_control_batch)} deleteHorizonMs: "
            f"{f'OptionalLong[{batch.first_timestamp}]' if batch.attributes & 0x40 else 'OptionalLong.empty'} "
            f"position: {position} {TS_NAMES[batch.timestamp_type]}: {batch.max_timestamp} "
            f"size: {batch.size_in_bytes} magic: {batch.magic} "
            f"compresscodec: {CODEC_NAMES[batch.compression_type]} crc: {batch.crc} "
            f"isvalid: {java_bool(batch.validate_crc())}")
        for record in batch:
            sequence = -1 if batch.base_sequence < 0 else batch.base_sequence + record.offset - batch.base_offset
            line = (f"| offset: {record.offset} {TS_NAMES[batch.timestamp_type]}: {record.timestamp} "
                    f"keySize: {-1 if record.key is None else len(record.key)} "
                    f"valueSize: {-1 if record.value is None else len(record.value)} "
                    f"sequence: {sequence} headerKeys: [{','.join(k for k, _ in record.headers)}]")
            if batch.is_control_batch:
                kind, = struct.unpack(">h", record.key[2:4])
                _, epoch = struct.unpack(">hi", record.value[:6])
                line += f" endTxnMarker: {['ABORT', 'COMMIT'][kind]} coordinatorEpoch: {epoch}"
            lines.append(line)
        position += batch.size_in_bytes
    return lines


# -- kafka-dump-log's lines ----------------------------------------------------------------


def test_worked_example_batch_and_record_lines(tmp_path):
    path = write_segment(tmp_path / "t-0", 0, EXAMPLE_2_7)
    res = kfs_dump(path)
    assert res.returncode == 0 and res.stderr == ""
    assert res.stdout.splitlines() == [f"Dumping {path}", "Log starting offset: 0", LINE_2_7]
    res = kfs_dump("--deep-iteration", path)
    assert res.stdout.splitlines()[2:] == [
        LINE_2_7,
        "| offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: []"]
    res = kfs_dump("--print-data-log", path)
    assert res.stdout.splitlines()[3] == (
        "| offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 1 sequence: -1 headerKeys: [] "
        "key: k payload: v")
    res = kfs_dump("--print-data-log", "--skip-record-metadata", path)
    assert res.stdout.splitlines()[3] == "| key: k payload: v"


def test_control_record_line(tmp_path):
    path = write_segment(tmp_path / "t-0", 5, EXAMPLE_2_8)
    res = kfs_dump("--print-data-log", path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[1:] == [
        "Log starting offset: 5",
        "baseOffset: 5 lastOffset: 5 count: 1 baseSequence: -1 lastSequence: -1 producerId: 1000 "
        "producerEpoch: 0 partitionLeaderEpoch: 0 isTransactional: true isControl: true "
        "deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1700000000000 size: 78 magic: 2 "
        "compresscodec: none crc: 2712422815 isvalid: true",
        # no key/payload for control records, even with --print-data-log
        "| offset: 5 CreateTime: 1700000000000 keySize: 4 valueSize: 6 sequence: -1 headerKeys: [] "
        "endTxnMarker: COMMIT coordinatorEpoch: 0"]


@needs_fixtures
def test_abort_marker_of_the_txn_fixture():
    res = kfs_dump("--deep-iteration", FIXTURES / "txn-0" / "00000000000000000184.log")
    assert ("| offset: 262 CreateTime: 1700000003873 keySize: 4 valueSize: 6 sequence: -1 "
            "headerKeys: [] endTxnMarker: ABORT coordinatorEpoch: 7") in res.stdout.splitlines()


@needs_fixtures
@pytest.mark.parametrize("name", V2_FIXTURES)
def test_every_line_matches_kafka_python(name):
    files = segment_files(name, ".log")
    res = kfs_dump("--deep-iteration", *files)
    assert res.returncode == 0
    assert (res.stderr == "") == (name != "compacted-0")  # compaction gaps: tested below
    expected = []
    for path in files:
        expected += [f"Dumping {path}", f"Log starting offset: {offset_from_file_name(Path(path).name)}"]
        expected += oracle_lines(path)
    assert res.stdout.splitlines() == expected


def test_delete_horizon_and_log_append_time(tmp_path):
    data = build_batch(0, [b"a", None], [b"k1", b"k2"], TS, timestamp_type=1,
                       log_append_time=TS + 5, delete_horizon_ms=TS - 1000)
    path = write_segment(tmp_path / "t-0", 0, data)
    lines = kfs_dump("--deep-iteration", path).stdout.splitlines()
    assert "deleteHorizonMs: OptionalLong[1699999999000]" in lines[2]
    assert "LogAppendTime: 1700000000005" in lines[2]
    assert lines[3].startswith("| offset: 0 LogAppendTime: 1700000000005 keySize: 2 valueSize: 1 ")
    assert lines[4].startswith("| offset: 1 LogAppendTime: 1700000000005 keySize: 2 valueSize: -1 ")


@needs_fixtures
def test_non_consecutive_offsets_are_reported_per_file(tmp_path):
    rows = [json.loads(line) for line in open(FIXTURES / "compacted-0.expected.jsonl")]
    files = segment_files("compacted-0", ".log")
    bases = [offset_from_file_name(Path(f).name) for f in files]
    res = kfs_dump("--deep-iteration", *files)
    expected_gaps = []
    for i, path in enumerate(files):
        end = bases[i + 1] if i + 1 < len(bases) else float("inf")
        offsets = [r["offset"] for r in rows if bases[i] <= r["offset"] < end]
        gaps = [(a, b) for a, b in zip(offsets, offsets[1:]) if b != a + 1]
        if gaps:
            # Kafka prepends each pair to a list: they print last first
            expected_gaps += [f"Non-consecutive offsets in {path}"]
            expected_gaps += [f"  {a} is followed by {b}" for a, b in reversed(gaps)]
    assert res.stderr.splitlines() == expected_gaps
    assert len([line for line in expected_gaps if "followed" in line]) > 100


def test_torn_tail_and_max_bytes(tmp_path):
    batch = build_batch(0, [b"x" * 50], None, TS)
    path = write_segment(tmp_path / "t-0", 0, batch + build_batch(1, [b"y"], None, TS)[:30])
    res = kfs_dump(path)
    assert res.returncode == 0
    assert res.stdout.splitlines()[-1] == f"Found 30 invalid bytes at the end of {path.name}"
    res = kfs_dump("--max-bytes", len(batch) - 1, path)
    assert res.stdout.splitlines()[2:] == []  # the first batch does not fit, nothing more said


# -- indexes -------------------------------------------------------------------------------


@needs_fixtures
def test_index_entries_and_kafkas_mismatches():
    # plain-0 has 21 follower-style entries naming the last offset of a later batch than the one
    # at their position: kafka-dump-log reports those as mismatches
    files = segment_files("plain-0", ".index")
    res = kfs_dump(*files)
    assert res.returncode == 0
    printed = [line for line in res.stdout.splitlines() if line.startswith("offset: ")]
    raw = []
    for path in files:
        data = Path(path).read_bytes()
        base = offset_from_file_name(Path(path).name)
        raw += [f"offset: {base + rel} position: {pos}"
                for rel, pos in struct.iter_unpack(">ii", data)]
    assert printed == raw
    mismatches = [line for line in res.stderr.splitlines() if line.startswith("  Index offset: ")]
    assert len(mismatches) == 21
    verify_only = kfs_dump("--verify-index-only", *files)
    assert [line for line in verify_only.stdout.splitlines() if line.startswith("offset")] == []
    assert verify_only.stderr == res.stderr


@needs_fixtures
def test_time_index_entries_and_mismatch_report(tmp_path):
    src = FIXTURES / "codecs-0"
    res = kfs_dump(*segment_files("codecs-0", ".timeindex"))
    assert res.returncode == 0 and res.stderr == ""
    data = (src / "00000000000000000090.timeindex").read_bytes()
    expected = [f"timestamp: {ts} offset: {90 + rel}" for ts, rel in struct.iter_unpack(">qi", data)]
    one = kfs_dump(src / "00000000000000000090.timeindex")
    assert one.stdout.splitlines()[1:] == expected
    # a copy whose first entry claims a timestamp the batch does not hold
    part = tmp_path / "codecs-0"
    shutil.copytree(src, part)
    ts, rel = struct.unpack_from(">qi", data)
    bad = part / "00000000000000000090.timeindex"
    os.chmod(bad, 0o644)
    bad.write_bytes(struct.pack(">qi", ts + 1, rel) + data[12:])
    res = kfs_dump(bad)
    assert res.returncode == 0
    assert res.stderr.splitlines() == [
        f"Found timestamp mismatch in :{bad}", f"  Index timestamp: {ts + 1}, log timestamp: {ts}"]


@needs_fixtures
def test_index_sanity_check(tmp_path):
    good = FIXTURES / "plain-0" / "00000000000000000000.index"
    res = kfs_dump("--index-sanity-check", good, good.with_suffix(".timeindex"))
    assert res.returncode == 0
    assert f"{good} passed sanity check." in res.stdout.splitlines()
    part = tmp_path / "p-0"
    part.mkdir()
    shutil.copy(FIXTURES / "plain-0" / "00000000000000000000.log", part)
    (part / "00000000000000000000.index").write_bytes(good.read_bytes() + b"\0\0\0")
    res = kfs_dump("--index-sanity-check", part / "00000000000000000000.index")
    assert res.returncode == 1
    assert "not a multiple of 8" in res.stderr or "multiple of 8" in res.stderr
    empty = FIXTURES / "compacted-0" / "00000000000000004807.index"
    assert kfs_dump(empty).stdout.splitlines()[1] == f"{empty} is empty."


# -- JSON ----------------------------------------------------------------------------------


def from_json_bytes(value):
    if value is None or isinstance(value, str):
        return None if value is None else value.encode("utf-8")
    return base64.b64decode(value["base64"])


@needs_fixtures
@pytest.mark.parametrize("name", V2_FIXTURES)
def test_json_records_equal_the_expected_jsonl(name):
    res = kfs_dump("--json", "--deep-iteration", *segment_files(name, ".log"))
    assert res.returncode == 0
    got = [json.loads(line) for line in res.stdout.splitlines()]
    expected = [json.loads(line) for line in open(FIXTURES / f"{name}.expected.jsonl")]
    assert len(got) == len(expected)
    topic = name.rsplit("-", 1)[0]
    for g, e in zip(got, expected):
        assert (g["topic"], g["partition"]) == (topic, 0)
        assert g["offset"] == e["offset"] and g["ts"] == e["timestamp"]
        assert g["tstype"] == {"CREATE_TIME": "create", "LOG_APPEND_TIME": "logappend"}[e["timestampType"]]
        assert from_json_bytes(g["key"]) == (None if e["key"] is None else base64.b64decode(e["key"]))
        assert from_json_bytes(g["payload"]) == (None if e["value"] is None else base64.b64decode(e["value"]))
        pairs = list(zip(g["headers"][::2], g["headers"][1::2]))
        assert [(k, from_json_bytes(v)) for k, v in pairs] == [
            (k, None if v is None else base64.b64decode(v)) for k, v in e["headers"]]
        assert (g["batchBaseOffset"], g["isControl"], g["isTransactional"], g["producerId"]) == (
            e["batchBaseOffset"], e["isControl"], e["isTransactional"], e["producerId"])


@needs_fixtures
def test_json_piped_to_jq():
    if shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    files = " ".join(segment_files("txn-0", ".log"))
    cmd = " ".join(kfs_command("dump", "--json", "--print-data-log")) + f" {files} | jq -c " \
          "'select(.isControl) | [.offset, .controlType, .coordinatorEpoch]'"
    res = subprocess.run(cmd, shell=True, cwd=REPO, env=kfs_env(), capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        '[153,"COMMIT",7]', '[262,"ABORT",7]', '[267,"COMMIT",7]', '[368,"COMMIT",7]']


@needs_fixtures
def test_json_batches_match_the_text_lines():
    path = segment_files("codecs-0", ".log")[3]
    batches = [json.loads(line) for line in kfs_dump("--json", path).stdout.splitlines()]
    text = kfs_dump(path).stdout.splitlines()[2:]
    assert len(batches) == len(text) > 1
    for obj, line in zip(batches, text):
        assert (f"baseOffset: {obj['baseOffset']} lastOffset: {obj['lastOffset']} "
                f"count: {obj['count']} ") in line
        assert (f"position: {obj['position']} {obj['timestampType']}: {obj['maxTimestamp']} "
                f"size: {obj['size']} magic: 2 compresscodec: {obj['compresscodec']} "
                f"crc: {obj['crc']} isvalid: true") in line


def test_json_of_an_engine_written_log(tmp_path):
    part = tmp_path / "orders-3"
    part.mkdir()
    log = Log(part, "orders", 3, LogConfig())
    batches = [
        build_batch(0, [b"caf\xc3\xa9", b"\xff\xfe binary", None], [b"k", None, b"\x80"],
                    [TS, TS + 1, TS + 2], [[("h", b"v"), ("bin", b"\xc0")], [], [("n", None)]],
                    codec=CompressionType.ZSTD),
        build_batch(3, [b"next"], None, TS + 3, codec=CompressionType.GZIP),
    ]
    log.append_batches(b"".join(batches))
    log.close()
    res = kfs_dump("--json", "--print-data-log", part / "00000000000000000000.log")
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [(r["offset"], r["key"], r["payload"], r["headers"]) for r in rows] == [
        (0, "k", "café", ["h", "v", "bin", {"base64": "wA=="}]),
        (1, None, {"base64": base64.b64encode(b"\xff\xfe binary").decode()}, []),
        (2, {"base64": "gA=="}, None, ["n", None]),
        (3, None, "next", []),
    ]
    assert all((r["topic"], r["partition"], r["tstype"]) == ("orders", 3, "create") for r in rows)
    assert [r["ts"] for r in rows] == [TS, TS + 1, TS + 2, TS + 3]
    batches = [json.loads(line) for line in kfs_dump("--json", part / "00000000000000000000.log").stdout.splitlines()]
    assert [(b["baseOffset"], b["compresscodec"], b["count"]) for b in batches] == [
        (0, "zstd", 3), (3, "gzip", 1)]


# -- errors --------------------------------------------------------------------------------


@needs_fixtures
def test_missing_and_unknown_files_are_errors_and_the_rest_is_dumped(tmp_path):
    good = FIXTURES / "plain-0" / "00000000000000000000.timeindex"
    odd = tmp_path / "notes.txt"
    odd.write_text("hello")
    missing = tmp_path / "00000000000000000000.log"
    res = kfs_dump(missing, odd, good, FIXTURES / "plain-0" / "leader-epoch-checkpoint")
    assert res.returncode == 1
    assert f"kfs dump: {missing}: No such file or directory" in res.stderr
    assert f"Ignoring unknown file {odd}" in res.stderr
    assert "leader-epoch-checkpoint" in res.stderr
    assert f"Dumping {good}" in res.stdout and "timestamp: " in res.stdout
    assert kfs_dump().returncode == 2


@needs_fixtures
def test_index_without_its_log(tmp_path):
    part = tmp_path / "p-0"
    part.mkdir()
    shutil.copy(FIXTURES / "plain-0" / "00000000000000000000.index", part)
    res = kfs_dump(part / "00000000000000000000.index")
    assert res.returncode == 1
    assert "00000000000000000000.log: No such file or directory" in res.stderr


def test_a_corrupt_batch_is_reported_and_the_walk_goes_on(tmp_path):
    good = build_batch(0, [b"a" * 100], None, TS, codec=CompressionType.GZIP)
    corrupt = bytearray(good)
    corrupt[57:61] = struct.pack(">i", 2)  # recordsCount: the one record is not enough
    tail = build_batch(1, [b"b"], None, TS)
    path = write_segment(tmp_path / "t-0", 0, bytes(corrupt) + tail)
    res = kfs_dump("--deep-iteration", path)
    assert res.returncode == 1
    lines = res.stdout.splitlines()
    assert lines[2].endswith("isvalid: false") and lines[3].startswith("baseOffset: 1 ")
    assert lines[4].startswith("| offset: 1 ")
    assert f"kfs dump: {path}: batch at position 0 (offset 0): " in res.stderr


@needs_fixtures
def test_files_option_as_kafka_takes_it():
    a, b = segment_files("txn-0", ".index")[:2]
    res = kfs_dump("--files", f"{a},{b}")
    assert res.returncode == 0
    assert [line for line in res.stdout.splitlines() if line.startswith("Dumping")] == [
        f"Dumping {a}", f"Dumping {b}"]


# -- producer snapshots and transaction indexes ----------------------------------------------


def snapshot_oracle(path):
    """kafka-dump-log's lines for a .snapshot, decoded here with struct from the §7.3 layout."""
    data = Path(path).read_bytes()
    version, _crc, count = struct.unpack_from(">hIi", data)
    assert version == 1
    lines = []
    for pid, epoch, last_seq, last_offset, delta, ts, coordinator, txn in struct.iter_unpack(
            ">qhiqiqiq", data[10:10 + 46 * count]):
        line = (f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coordinator} "
                f"currentTxnFirstOffset: {'OptionalLong.empty' if txn < 0 else f'OptionalLong[{txn}]'} "
                f"lastTimestamp: {ts} ")
        if last_offset >= 0:
            first_seq = last_seq - delta if last_seq - delta >= 0 else last_seq - delta + 2**31
            line += (f"firstSequence: {first_seq} lastSequence: {last_seq} lastOffset: {last_offset} "
                     f"offsetDelta: {delta} timestamp: {ts}")
        lines.append(line)
    return lines


@needs_fixtures
@pytest.mark.parametrize("name", ["txn-0", "plain-0", "compacted-0"])
def test_snapshot_lines(name):
    files = segment_files(name, ".snapshot")
    res = kfs_dump(*files)
    assert res.returncode == 0, res.stderr
    expected = []
    for path in files:
        expected += [f"Dumping {path}"] + snapshot_oracle(path)
    assert res.stdout.splitlines() == expected
    if name == "txn-0":
        assert any("producerId: 3000 " in line for line in expected)


@needs_fixtures
def test_corrupt_snapshot_is_an_error(tmp_path):
    src = FIXTURES / "txn-0" / "00000000000000000278.snapshot"
    bad = tmp_path / src.name
    data = bytearray(src.read_bytes())
    data[20] ^= 0xFF
    bad.write_bytes(data)
    res = kfs_dump(bad, src)
    assert res.returncode == 1
    assert res.stderr.startswith(f"kfs dump: {bad}: Snapshot is corrupt (CRC is no longer valid).")
    assert res.stdout.splitlines()[-1] == snapshot_oracle(src)[-1]


@needs_fixtures
def test_txnindex_lines():
    path = FIXTURES / "txn-0" / "00000000000000000184.txnindex"
    res = kfs_dump(path)
    assert res.stdout.splitlines() == [
        f"Dumping {path}",
        "version: 0 producerId: 2000 firstOffset: 189 lastOffset: 262 lastStableOffset: 184"]
    rows = [json.loads(line) for line in kfs_dump("--json", path).stdout.splitlines()]
    assert rows == [{"topic": "txn", "partition": 0, "version": 0, "producerId": 2000,
                     "firstOffset": 189, "lastOffset": 262, "lastStableOffset": 184}]
