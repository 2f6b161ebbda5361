"""``kfs compact`` held to Kafka's own cleaner: tests/fixtures/kafka-cleaned holds a partition
Kafka's log code wrote (compact-in-4) and what Kafka's Cleaner left after one pass and after a
second pass a day later, with the clock fixed (see its README.txt). With the same settings and
clocks, kfs must leave the same files, batches, records and index entries; uncompressed batches
byte for byte (the compressed ones were recompressed by Java's codec libraries: only their
compressed bytes may differ).

One version difference: the fixtures' Kafka (commit 1eb7644, October 2024) indexed the cleaned
segment per append (one entry at most per read buffer the cleaner copied), Kafka 4.1.1 (the
pinned broker; its Cleaner appends through the same ``LogSegment.append``) per batch. The
segments kfs's cleaner writes are held to 4.1.1's rule (``kafka_41_indexes``, over kfs's own
``.log``: recompressed batches may differ in size), the untouched ones to the fixture's files."""

import base64
import contextlib
import io
import json
import logging
import shutil

import pytest

from helpers.kafka_written import kafka_41_indexes
from helpers.paths import KAFKA_CLEANED
from storage import LogManager
from storage.log_files import offset_from_file_name
from storage.records import RecordBatch, iter_batches
from storage.offset_index import OffsetIndex

PASS1_NOW = 1700000473223  # README: largest timestamp + 1
PASS2_NOW = 1700086874222  # README: largest timestamp + 1 day + 1 s
NAME = "compact-4"
CLEANED_BASES = {0}  # README: each pass wrote one cleaned segment at 0; 7459 stays as it was

needs_cleaned = pytest.mark.needs_fixture("kafka-cleaned")


def _b64(text):
    return None if text is None else base64.b64decode(text)


def prepare(tmp_path, source: str):
    """A backing directory holding a copy of ``source`` as partition compact-4, with Kafka's
    clean-shutdown marker (the fixtures were closed as at broker shutdown). The topic keeps
    Kafka's default segment.bytes for the pass: Kafka's run merged all 14 source segments
    (~450 KB) into one, which grouping by the input's segment.bytes=32768 could not have done."""
    backing = tmp_path / "backing"
    backing.mkdir()
    shutil.copytree(KAFKA_CLEANED / source, backing / NAME)
    for path in (backing / NAME).iterdir():
        path.chmod(0o644)
    (backing / NAME).chmod(0o755)
    (backing / "compact.topic.properties").write_text("cleanup.policy=compact\n")
    (backing / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":0}')
    return backing


def kfs(*argv: str) -> str:
    """``kfs ARGV...`` run in this process (its stdout): the cleaner's code is then the code
    the test runs, which mutation testing (scripts/mutation.sh) needs; the console script
    itself is run as a process by tests/tools/test_cli_messages.py."""
    from kfs.cli import main

    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # (verify writes its bytes)
    with contextlib.redirect_stdout(out):
        status = main(list(argv))
    out.flush()
    text = out.buffer.getvalue().decode()
    assert status == 0, text
    return text


def compact(backing, now: int) -> str:
    return kfs("compact", str(backing), "--now-ms", str(now))


def batches(path):
    return list(iter_batches(path.read_bytes()))


def header(batch: RecordBatch):
    return (batch.base_offset, batch.last_offset, batch.records_count, batch.attributes,
            batch.base_timestamp, batch.max_timestamp, batch.producer_id, batch.producer_epoch,
            batch.base_sequence, batch.partition_leader_epoch)


def raw(batch: RecordBatch) -> bytes:
    return bytes(batch._buf[batch._pos:batch._pos + batch.size_in_bytes])


def records_as_kafka_lists_them(directory):
    """Every record of the partition's .log files as the expected.jsonl rows name them."""
    rows = []
    for path in sorted(directory.glob("*.log")):
        for batch in batches(path):
            for r in batch.records():
                rows.append({
                    "offset": r.offset, "timestamp": r.timestamp, "key": r.key,
                    "value": r.value, "headers": [[k, v] for k, v in r.headers],
                    "batchBaseOffset": batch.base_offset,
                    "compression": batch.compression_type.kafka_name,
                    "isControl": batch.is_control_batch,
                    "isTransactional": batch.is_transactional,
                    "producerId": batch.producer_id})
    return rows


def expected_rows(name):
    rows = []
    for line in (KAFKA_CLEANED / f"{name}.expected.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.append({
            "offset": row["offset"], "timestamp": row["timestamp"], "key": _b64(row["key"]),
            "value": _b64(row["value"]),
            "headers": [[k, _b64(v)] for k, v in row["headers"]],
            "batchBaseOffset": row["batchBaseOffset"], "compression": row["compression"],
            "isControl": row["isControl"], "isTransactional": row["isTransactional"],
            "producerId": row["producerId"]})
    return rows


def index_offsets(path, base):
    index = OffsetIndex(path, base, 10 << 20, writable=False)
    return [index.entry(i)[0] for i in range(index.entries)]


def assert_same_as_kafka(ours, expected: str, snapshots: bool = True):
    """``snapshots=False`` after a load with recovery: kfs's recovery keeps fewer producer
    snapshots than Kafka's rebuild writes (they hold producer state, not records)."""
    theirs = KAFKA_CLEANED / expected

    def files(directory):
        return {p.name for p in directory.iterdir() if snapshots or p.suffix != ".snapshot"}
    assert files(ours) == files(theirs)
    for log_file in sorted(theirs.glob("*.log")):
        mine, kafka = batches(ours / log_file.name), batches(log_file)
        assert [header(b) for b in mine] == [header(b) for b in kafka], log_file.name
        for a, b in zip(mine, kafka):
            if not b.attributes & 0x07:
                assert raw(a) == raw(b), (log_file.name, b.base_offset)
        base = offset_from_file_name(log_file.name)
        index = log_file.with_suffix(".index")
        if base in CLEANED_BASES:  # Kafka 4.1.1's rule, not the fixture's (module docstring)
            want_index, want_time_index = kafka_41_indexes(ours / log_file.name)
            assert (ours / index.name).read_bytes() == want_index, index.name
            assert (ours / (log_file.stem + ".timeindex")).read_bytes() == want_time_index
        else:
            assert index_offsets(ours / index.name, base) == index_offsets(index, base)
        for suffix in (".timeindex", ".txnindex"):
            if suffix == ".timeindex" and base in CLEANED_BASES:
                continue
            if log_file.with_suffix(suffix).exists():
                assert (ours / (log_file.stem + suffix)).read_bytes() == \
                    log_file.with_suffix(suffix).read_bytes(), suffix
    for name in ("leader-epoch-checkpoint", "partition.metadata",
                 "00000000000000007459.snapshot", "00000000000000008000.snapshot"):
        if (theirs / name).exists() and (snapshots or not name.endswith(".snapshot")):
            assert (ours / name).read_bytes() == (theirs / name).read_bytes(), name
    assert records_as_kafka_lists_them(ours) == expected_rows(expected)


def assert_reopens_without_recovery(backing, caplog):
    files = {p.name: p.read_bytes() for p in (backing / NAME).iterdir()
             if p.suffix in (".log", ".index", ".timeindex", ".txnindex")}
    with caplog.at_level(logging.INFO, logger="storage"):
        mgr = LogManager(backing)
        mgr.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not [r for r in caplog.records if "recover" in r.getMessage()
                or "rebuild" in r.getMessage()], caplog.text
    assert {p.name: p.read_bytes() for p in (backing / NAME).iterdir()
            if p.suffix in (".log", ".index", ".timeindex", ".txnindex")} == files


def verify(backing):
    kfs("verify", str(backing))


@needs_cleaned
def test_pass1_leaves_what_kafkas_cleaner_left(tmp_path, caplog):
    backing = prepare(tmp_path, "compact-in-4")
    out = compact(backing, PASS1_NOW)
    assert "cleaned log compact-4 (dirty section = [0, 7459])" in out
    assert "End size:" in out and "(401 messages)" in out
    assert_same_as_kafka(backing / NAME, "compact-out-4-pass1")
    assert (backing / "cleaner-offset-checkpoint").read_text() == "0\n1\ncompact 4 7459\n"
    verify(backing)
    assert_reopens_without_recovery(backing, caplog)


@needs_cleaned
def test_pass2_from_kafkas_pass1_leaves_what_kafka_left(tmp_path, caplog):
    # Kafka's pass-2 input was loaded with recovery (its rebuilt .txnindex names first offset
    # 4604, the first batch of producer 7000 left in the cleaned log): load it so here too
    backing = prepare(tmp_path, "compact-out-4-pass1")
    (backing / ".kafka_cleanshutdown").unlink()
    compact(backing, PASS2_NOW)
    assert_same_as_kafka(backing / NAME, "compact-out-4-pass2", snapshots=False)
    verify(backing)
    assert_reopens_without_recovery(backing, caplog)


@needs_cleaned
def test_two_kfs_passes_leave_what_kafkas_two_passes_left(tmp_path):
    backing = prepare(tmp_path, "compact-in-4")
    compact(backing, PASS1_NOW)
    # as Kafka's pass 2 ran: its input loaded with recovery, no cleaner checkpoint (the pass
    # recopies [0, 7459) again; a broker would wait for new dirty data to do that)
    for name in (".kafka_cleanshutdown", "recovery-point-offset-checkpoint",
                 "cleaner-offset-checkpoint"):
        (backing / name).unlink()
    compact(backing, PASS2_NOW)
    mine = batches(backing / NAME / "00000000000000000000.log")
    kafka = batches(KAFKA_CLEANED / "compact-out-4-pass2" / "00000000000000000000.log")
    assert [header(b) for b in mine] == [header(b) for b in kafka]
    assert records_as_kafka_lists_them(backing / NAME) == expected_rows("compact-out-4-pass2")
    verify(backing)


@needs_cleaned
def test_a_pass_with_nothing_dirty_changes_nothing(tmp_path):
    backing = prepare(tmp_path, "compact-in-4")
    compact(backing, PASS1_NOW)
    before = {p.name: p.read_bytes() for p in (backing / NAME).iterdir()}
    out = compact(backing, PASS1_NOW)
    assert "nothing to clean" in out
    after = {p.name: p.read_bytes() for p in (backing / NAME).iterdir()}
    assert {n: b for n, b in after.items() if not n.endswith(".snapshot")} == \
        {n: b for n, b in before.items() if not n.endswith(".snapshot")}
