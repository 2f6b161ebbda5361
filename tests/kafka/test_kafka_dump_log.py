"""``kfs dump`` equals Kafka's own ``kafka-dump-log`` line for line on segments a real broker
wrote.

One broker (``tests/helpers/kafka.py``, Kafka 4.1.1's jars) per module takes, through its
clients: a topic written by one producer per codec (none, gzip, snappy, lz4, zstd) with keys
(text, empty, null, not UTF-8), null values (tombstones), empty and binary values, text that is
not valid UTF-8 and headers, enough of it to roll its 1 MiB segments; an idempotent producer;
a transactional producer with committed and aborted transactions (so ``.txnindex`` files and
control batches exist) that also commits a group's offsets inside its transactions; a
LogAppendTime topic; consumer groups of the classic and the KIP-848 protocol committing
offsets, and a classic member joining a KIP-848 group. The broker is then stopped cleanly (the
files are final; the shutdown writes the ``.snapshot`` of every partition) and each kind of
segment file of every partition, the broker's own ``__consumer_offsets`` /
``__transaction_state`` / ``__cluster_metadata`` included, is dumped by both tools with each
option both have: stdout must be equal line for line, stderr too.

Normalised, each where it is done and why: the order of the per-file reports on stderr
(report_blocks), and ``--transaction-log-decoder``'s key and payload text, compared by their
facts (test_transaction_log_decoder). Segments written here with the engine's batch builder
cover what this broker does not write (every malformed UTF-8 sequence, KRaft's other control
records), and the older Kafka's fixtures v0/v1 messages and index and offset-gap reports.

Kafka's tool is run as ``kafka-dump-log.sh`` runs it: main class ``kafka.tools.DumpLogSegments``
(Scala, in the core jar; Kafka 4.1.1 has no ``org.apache.kafka.tools.DumpLogSegments``), the
files given as ``--files a,b,c``. Both run under a UTF-8 locale (Java 17 encodes System.out in
the locale's charset; kfs always writes UTF-8).
"""

from __future__ import annotations

import difflib
import json
import os
import random
import re
import struct
import subprocess
import time
from pathlib import Path

import pytest
from helpers.kafka import KafkaBroker, flushed, kafka_missing, run_tool
from helpers.kfs import kfs_command, kfs_env
from helpers.needs import unavailable
from helpers.paths import KAFKA_WRITTEN, REPO
from helpers.remote_metadata import uvarint
from helpers.waits import DEADLINE_S, Deadline

from storage.records import CompressionType, build_batch

pytestmark = pytest.mark.kafka

DUMP_LOG = "kafka.tools.DumpLogSegments"  # what bin/kafka-dump-log.sh runs
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
LOCALE = {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}

# Byte strings that are not valid UTF-8 in the ways Java's decoder and Python's differ on
# (a UTF-16 surrogate encoded in three bytes, overlong forms, sequences cut short, a code
# point past U+10FFFF, stray continuation bytes), and valid multi-byte text.
ODD_BYTES = (
    b"\xed\xa0\x80", b"\xed\xbf\xbf\xed\xb0\x80", b"\xe0\x80\x80", b"\xc0\xaf", b"\xc1\xbf",
    b"\xe2\x82", b"\xe2\x82A", b"\xf0\x9f\x98", b"\xf0\x9f\x98A", b"\xf0\x80\x80\x80",
    b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xff\xfe\x80\xbf",
    b"caf\xc3", b"\xc3", b"\xe2", b"\xf0", b"\xf0\x9f", b"\xe0\xa0", b"\xed\x9f\xbf",
    b"\xef\xbf\xbf", b"\xf4\x8f\xbf\xbf", "ünïcødé ✓ 😀 \u2028 \r".encode(),
)


def producer(broker: KafkaBroker, **config):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 5,
                     **{k.replace("_", "."): v for k, v in config.items()}})


def consumer(broker: KafkaBroker, **config):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False,
                     **{k.replace("_", "."): v for k, v in config.items()}})


def record_for(rng: random.Random, codec: str, i: int) -> dict:
    """The i-th record a codec's producer sends: every shape of key, value and header."""
    key = [None, b"", b"key-%d" % (i % 17), rng.choice(ODD_BYTES), "kéy-✓".encode()][i % 5]
    kind = i % 6
    if i % 23 == 7:
        value = None  # a tombstone
    elif kind == 0:
        value = b"%s record %d " % (codec.encode(), i) * rng.randrange(1, 40)
    elif kind in (1, 4):
        value = rng.randbytes(rng.randrange(0, 2500))  # binary, incompressible: rolls segments
    elif kind == 2:
        value = b"|".join(rng.choice(ODD_BYTES) + b"text" for _ in range(rng.randrange(1, 8)))
    elif kind == 3:
        value = b"" if i % 12 == 3 else b"line one\nline two"
    else:
        value = "wert ünïcødé ✓ 😀".encode() * rng.randrange(1, 5)
    headers = None
    if i % 3 == 1:
        headers = [("codec", codec.encode()), ("null", None), ("bin", b"\xff\x00"),
                   ("ünï", b"x")]
    elif i % 3 == 2:
        headers = [("only", b"one")]
    return {"key": key, "value": value, "headers": headers}


def poll_some(c, n: int) -> int:
    """Poll until n records arrived; TimeoutError past the deadline. Returns n."""
    got, deadline = 0, Deadline(DEADLINE_S, f"{n} records polled")
    while got < n:
        deadline.check(f"{got} so far")
        message = c.poll(0.5)
        if message is not None and not message.error():
            got += 1
    return got


def produce_everything(broker: KafkaBroker) -> None:
    """Every kind of batch a broker stores, through its clients (see the module docstring)."""
    from confluent_kafka import TopicPartition

    segment = {"segment.bytes": "1048576"}  # Kafka 4's minimum, rolled a few times here
    broker.create_topic("codecs", 1, segment)
    broker.create_topic("txn", 1, segment)
    broker.create_topic("idempotent", 1)
    broker.create_topic("appendtime", 1, {"message.timestamp.type": "LogAppendTime"})
    rng = random.Random(4_1_1)
    now = int(time.time() * 1000)
    for codec in CODECS:
        p = producer(broker, compression_type=codec, batch_num_messages=40)
        for i in range(700):
            # some CreateTimes from the past, out of order within and across batches
            timestamp = now - rng.randrange(0, 86_400_000) if i % 10 == 9 else 0
            p.produce("codecs", **record_for(rng, codec, i), timestamp=timestamp)
            if i % 150 == 149:
                flushed(p)
        flushed(p)
    idem = producer(broker, enable_idempotence=True, compression_type="zstd",
                    batch_num_messages=25)
    for i in range(300):
        topic = "idempotent" if i % 3 else "codecs"
        idem.produce(topic, key=b"idem-%d" % (i % 9), value=b"idempotent %d" % i,
                     headers=[("seq", b"%d" % i)] if i % 4 == 0 else None)
        if i % 50 == 49:
            flushed(idem)
    flushed(idem)

    # a consumer group whose offsets a transactional producer commits (TxnOffsetCommit: the
    # group's transactional offset records and their markers land in __consumer_offsets)
    c = consumer(broker, group_id="txn-group", isolation_level="read_committed")
    c.subscribe(["idempotent"])
    poll_some(c, 50)
    txn = producer(broker, transactional_id="dump-log-txn", compression_type="lz4",
                   batch_num_messages=30)
    txn.init_transactions(60)
    for n, commit in enumerate((True, False, True, False, True)):
        txn.begin_transaction()
        for i in range(150):
            txn.produce("txn" if i % 5 else "codecs", key=b"t%d" % (i % 4),
                        value=b"txn %d %s record %d" % (n, b"commit" if commit else b"abort", i),
                        headers=[("txn", b"%d" % n)] if i % 7 == 0 else None)
        flushed(txn)  # what an abort has not sent yet is dropped: the aborted records must land
        txn.send_offsets_to_transaction(
            [TopicPartition("idempotent", 0, 10 * (n + 1))], c.consumer_group_metadata(), 60)
        (txn.commit_transaction if commit else txn.abort_transaction)(60)
    c.close()

    # classic and KIP-848 consumer groups (GroupMetadata with the consumer protocol's
    # subscriptions and assignments; ConsumerGroup* records), each committing offsets
    for group, protocol in (("classic-group", "classic"), ("consumer-group", "consumer")):
        c = consumer(broker, group_id=group, group_protocol=protocol)
        c.subscribe(["codecs", "appendtime", "idempotent"])
        poll_some(c, 200)
        c.commit(asynchronous=False)
        poll_some(c, 100)
        c.commit(asynchronous=False)
        c.close()
    # offsets committed without joining (an empty group's OffsetCommit records)
    c = consumer(broker, group_id="standalone")
    c.commit(offsets=[TopicPartition("codecs", 0, 5), TopicPartition("txn", 0, 7)],
             asynchronous=False)
    c.close()

    # a classic member joining a KIP-848 group (its ClassicMemberMetadata in the member's record)
    broker.create_topic("mixed", 2)
    p = producer(broker)
    for i in range(100):
        p.produce("mixed", key=b"m%d" % i, value=b"mixed %d" % i, partition=i % 2)
    flushed(p)
    modern = consumer(broker, group_id="mixed-group", group_protocol="consumer")
    modern.subscribe(["mixed"])
    poll_some(modern, 10)
    classic = consumer(broker, group_id="mixed-group", group_protocol="classic")
    classic.subscribe(["mixed"])
    deadline = time.monotonic() + DEADLINE_S
    while not classic.assignment() and time.monotonic() < deadline:
        modern.poll(0.2)
        classic.poll(0.2)
    assert classic.assignment(), "the classic member never joined the consumer group"
    classic.commit(offsets=[TopicPartition("mixed", tp.partition, 3) for tp in classic.assignment()],
                   asynchronous=False)
    classic.close()
    modern.close()

    p = producer(broker, compression_type="gzip")
    for i in range(120):
        p.produce("appendtime", key=b"lat", value=b"log append time %d" % i, timestamp=1)
        if i % 40 == 39:
            flushed(p)
    flushed(p)


@pytest.fixture(scope="module")
def broker_logs(tmp_path_factory) -> Path:
    """The log directory of a broker that took produce_everything() and was then stopped
    cleanly (one broker for the module; always stopped, killed if its shutdown hangs)."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    root = tmp_path_factory.mktemp("kafka-dump-log")
    broker = KafkaBroker(root / "logs", root / "broker")
    try:
        broker.start()
        produce_everything(broker)
    finally:
        broker.tear_down()  # a clean shutdown: the files are final, every .snapshot written
    assert (root / "logs" / ".kafka_cleanshutdown").exists(), broker.log_tail()
    return root / "logs"


# -- running both tools -------------------------------------------------------------------


def kafka_dump_log(files, *options) -> subprocess.CompletedProcess:
    return run_tool(DUMP_LOG, "--files", ",".join(map(str, files)), *options, check=False,
                    env={**os.environ, **LOCALE}, timeout=600)


def kfs_dump(files, *options, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run(kfs_command("dump", *options, *map(str, files)), cwd=cwd,
                          env={**kfs_env(), **LOCALE}, capture_output=True, timeout=600)


def lines(output: bytes) -> list[str]:
    # Split on "\n" only: printed keys and values may hold "\r" or U+2028, which both print.
    return output.decode("utf-8").split("\n")


def report_blocks(stderr: list[str]) -> list[tuple[str, ...]]:
    """The reports both tools print on stderr after the last file (index mismatches, time
    index errors, non-consecutive offsets), one block per file: its header line and the
    indented lines after it, sorted. Normalised because Kafka prints a kind's blocks in the
    iteration order of the Scala ``mutable.HashMap`` holding them (by the hash of the file's
    absolute path), kfs in the order the files were given, which tests/tools/test_dump.py holds it
    to; the lines within a block are compared as printed."""
    blocks: list[list[str]] = []
    for line in stderr:
        if blocks and (line.startswith(" ") or line.startswith("Indexed offset: ")):
            blocks[-1].append(line)
        elif line:
            blocks.append([line])
    return sorted(tuple(b) for b in blocks)


def first_difference(expected: list[str], got: list[str]) -> str:
    diff = list(difflib.unified_diff(expected, got, "kafka-dump-log", "kfs dump",
                                     lineterm="", n=1))
    return "\n".join(line[:600] for line in diff[:40])


def assert_same(files, *options, cwd=REPO) -> list[str]:
    """Both tools on ``files`` with ``options``: stdout equal line for line, stderr equal (its
    reports' order normalised, see report_blocks), both exit 0. Returns Kafka's lines."""
    kafka = kafka_dump_log(files, *options)
    kfs = kfs_dump(files, *options, cwd=cwd)
    assert kafka.returncode == 0, kafka.stderr.decode(errors="replace")[-3000:]
    expected, got = lines(kafka.stdout), lines(kfs.stdout)
    assert got == expected, first_difference(expected, got)
    assert report_blocks(lines(kfs.stderr)) == report_blocks(lines(kafka.stderr)), (
        f"kafka-dump-log's stderr:\n{kafka.stderr.decode()[-3000:]}\n"
        f"kfs dump's:\n{kfs.stderr.decode()[-3000:]}")
    assert kfs.returncode == 0, kfs.stderr.decode()
    return expected


def partition_files(log_dir: Path, partition: str, suffix: str) -> list[Path]:
    files = sorted((log_dir / partition).glob(f"*{suffix}"))
    assert files, f"{partition} has no {suffix} file"
    return files


# -- the broker's segments --------------------------------------------------------------

PARTITIONS = ["codecs-0", "txn-0", "idempotent-0", "appendtime-0", "mixed-0", "mixed-1",
              "__consumer_offsets-0", "__transaction_state-0", "__cluster_metadata-0"]
LOG_OPTIONS = [
    (),
    ("--deep-iteration",),
    ("--print-data-log",),
    ("--print-data-log", "--skip-record-metadata"),
    ("--deep-iteration", "--skip-record-metadata"),
    ("--max-bytes", "3000"),  # cuts every segment inside a batch
    ("--max-bytes", "700000", "--print-data-log"),  # inside codecs-0's first segment only
]
INDEX_OPTIONS = [(), ("--verify-index-only",), ("--index-sanity-check",)]


def test_the_broker_wrote_every_kind_of_batch(broker_logs):
    """What the comparisons below cover, checked on kafka-dump-log's own output."""
    out = "\n".join(assert_same(partition_files(broker_logs, "codecs-0", ".log"),
                                "--deep-iteration"))
    for codec in CODECS:
        assert f"compresscodec: {codec} " in out
    assert len(partition_files(broker_logs, "codecs-0", ".log")) >= 2  # rolled
    assert "valueSize: -1 " in out and "keySize: -1 " in out and "keySize: 0 " in out
    assert "headerKeys: [codec,null,bin,ünï]" in out
    assert "isTransactional: true isControl: true" in out and "endTxnMarker: ABORT" in out
    assert "producerId: -1 " in out and "baseSequence: 0 " in out  # plain and idempotent
    txn = "\n".join(lines(kafka_dump_log(partition_files(broker_logs, "txn-0", ".log"),
                                         "--deep-iteration").stdout))
    assert "endTxnMarker: COMMIT" in txn and "endTxnMarker: ABORT" in txn
    appendtime = lines(kafka_dump_log(partition_files(broker_logs, "appendtime-0", ".log")).stdout)
    assert any("LogAppendTime: " in line for line in appendtime)
    for partition in ("codecs-0", "txn-0", "__consumer_offsets-0"):
        assert partition_files(broker_logs, partition, ".txnindex")
    for partition in PARTITIONS:
        assert partition_files(broker_logs, partition, ".snapshot")
    offsets = "\n".join(lines(kafka_dump_log(
        partition_files(broker_logs, "__consumer_offsets-0", ".log"), "--offsets-decoder").stdout))
    for record_type in (1, 2, 3, 5, 6, 7, 8):  # commits, classic groups, KIP-848 groups
        assert f'key: {{"type":"{record_type}",' in offsets
    assert '"classicMemberMetadata":{"sessionTimeoutMs":' in offsets
    assert "LeaderChange: " in "\n".join(lines(kafka_dump_log(
        partition_files(broker_logs, "__cluster_metadata-0", ".log"), "--deep-iteration").stdout))


@pytest.mark.parametrize("options", LOG_OPTIONS, ids=" ".join)
@pytest.mark.parametrize("partition", PARTITIONS)
def test_log(broker_logs, partition, options):
    assert_same(partition_files(broker_logs, partition, ".log"), *options)


@pytest.mark.parametrize("options", INDEX_OPTIONS, ids=" ".join)
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("partition", PARTITIONS)
def test_index(broker_logs, partition, suffix, options):
    assert_same(partition_files(broker_logs, partition, suffix), *options)


@pytest.mark.parametrize("partition", PARTITIONS)
def test_snapshot(broker_logs, partition):
    assert_same(partition_files(broker_logs, partition, ".snapshot"))


@pytest.mark.parametrize("partition", ["codecs-0", "txn-0", "__consumer_offsets-0"])
def test_txnindex(broker_logs, partition):
    out = assert_same(partition_files(broker_logs, partition, ".txnindex"))
    assert any(line.startswith("version: 0 producerId: ") for line in out)


@pytest.mark.parametrize("options", [(), ("--skip-record-metadata",)], ids=" ".join)
def test_offsets_decoder(broker_logs, options):
    assert_same(partition_files(broker_logs, "__consumer_offsets-0", ".log"),
                "--offsets-decoder", *options)


def test_every_file_at_once_and_relative_paths(broker_logs):
    """All files of every kind in one run (Kafka's reports come after the last file), given as
    relative paths, some untidy (``./``, ``//``), as a user types them, and to kfs in
    kafka-dump-log's own ``--files a,b,...`` form."""
    files = sorted(p for p in broker_logs.rglob("*")
                   if p.suffix in (".log", ".index", ".timeindex", ".snapshot", ".txnindex"))
    relative = ",".join(f"./{p.parent.name}//{p.name}" for p in files)
    kafka = run_tool(DUMP_LOG, "--files", relative, "--deep-iteration", check=False,
                     env={**os.environ, **LOCALE}, timeout=600, cwd=broker_logs)
    kfs = kfs_dump([], "--deep-iteration", "--files", relative, cwd=broker_logs)
    assert kafka.returncode == kfs.returncode == 0, kfs.stderr
    assert lines(kfs.stdout) == lines(kafka.stdout), first_difference(lines(kafka.stdout),
                                                                      lines(kfs.stdout))
    assert report_blocks(lines(kfs.stderr)) == report_blocks(lines(kafka.stderr))
    assert f"Dumping ./{files[0].parent.name}/{files[0].name}" in lines(kafka.stdout)


# --transaction-log-decoder: Kafka 4.1.1 prints a __transaction_state record as the JSON of its
# key and value ({"type":"0","data":{"transactionalId":...}} / {"version":"1","data":{...}}),
# where the Kafka that dumped tests/fixtures/internal-topics (commit 1eb7644, Oct 2024) printed
# TransactionLog.formatRecordKeyAndValue's text (transaction_metadata::transactionalId=... /
# producerId:...,state=...,partitions=[...],...). kfs prints the latter, which
# tests/tools/test_coordinator_dump.py holds it to against that fixture's dump; this test holds every
# other line equal and each record's key and payload to the same facts as Kafka 4.1.1's JSON.

TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit",
                      "CompleteAbort", "Dead", "PrepareEpochFence")
OLD_PAYLOAD = re.compile(r"producerId:(-?\d+),producerEpoch:(-?\d+),state=(\w+),"
                         r"partitions=\[(.*)\],txnLastUpdateTimestamp=(-?\d+),txnTimeoutMs=(-?\d+)")


def key_and_payload(line: str) -> tuple[str, str, str | None]:
    """(the line up to " key: ", the key, the payload or None)."""
    head, _, rest = line.partition(" key: ") if " key: " in line else line.partition("key: ")
    key, sep, payload = rest.partition(" payload: ")
    return head, key, payload if sep else None


def as_kafka_411(key: str, payload: str | None) -> tuple[str, str | None]:
    """kfs's pre-4.1 text of a transaction log record as the JSON facts Kafka 4.1.1 prints
    (partitions sorted: the old text has them in a Scala HashSet's order)."""
    txn_id = key.removeprefix("transaction_metadata::transactionalId=")
    if payload is None or payload == "<DELETE>":
        return txn_id, payload
    m = OLD_PAYLOAD.fullmatch(payload)
    assert m, payload
    pid, epoch, state, partitions, updated, timeout = m.groups()
    return txn_id, repr((int(pid), int(epoch), state, sorted(filter(None, partitions.split(","))),
                         int(updated), int(timeout)))


def from_kafka_411(key: str, payload: str | None) -> tuple[str, str | None]:
    txn_id = json.loads(key)["data"]["transactionalId"]
    if payload is None or payload == "<DELETE>":
        return txn_id, payload
    v = json.loads(payload)["data"]
    state = TRANSACTION_STATES[v["transactionStatus"]]
    partitions = [] if state == "Empty" else sorted(
        f"{t['topic']}-{p}" for t in v["transactionPartitions"] or [] for p in t["partitionIds"])
    return txn_id, repr((v["producerId"], v["producerEpoch"], state, partitions,
                         v["transactionLastUpdateTimestampMs"], v["transactionTimeoutMs"]))


@pytest.mark.parametrize("options", [(), ("--skip-record-metadata",)], ids=" ".join)
def test_transaction_log_decoder(broker_logs, options):
    files = partition_files(broker_logs, "__transaction_state-0", ".log")
    kafka = kafka_dump_log(files, "--transaction-log-decoder", *options)
    kfs = kfs_dump(files, "--transaction-log-decoder", *options)
    assert kafka.returncode == kfs.returncode == 0 and kfs.stderr == b""
    expected, got = lines(kafka.stdout), lines(kfs.stdout)
    assert len(got) == len(expected)
    records = 0
    for e, g in zip(expected, got):
        if e == g:
            continue
        records += 1
        e_head, e_key, e_payload = key_and_payload(e)
        g_head, g_key, g_payload = key_and_payload(g)
        assert g_head == e_head
        assert as_kafka_411(g_key, g_payload) == from_kafka_411(e_key, e_payload), (e, g)
    assert records >= 20  # every record line took this path: the formats do differ


# -- segments written here, for what the broker above does not write ------------------------


def test_text_that_is_not_utf8_prints_as_java_decodes_it(tmp_path):
    """Every way bytes can fail to be UTF-8, in keys and values: kfs replaces them as Java's
    ``new String(bytes, UTF_8)`` does, U+FFFD for U+FFFD."""
    rng = random.Random(17)
    alphabet = bytes([0x00, 0x0A, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1,
                      0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE, 0xEF, 0xF0, 0xF1, 0xF3, 0xF4,
                      0xF5, 0xF7, 0xF8, 0xFB, 0xFC, 0xFF])
    values = [bytes(rng.choices(alphabet, k=rng.randrange(0, 10))) for _ in range(12_000)]
    values += list(ODD_BYTES)
    part = tmp_path / "utf8-0"
    part.mkdir()
    data, offset = b"", 0
    for i in range(0, len(values), 400):
        chunk = values[i:i + 400]
        data += build_batch(offset, chunk, [v[::-1] for v in chunk], 1_700_000_000_000,
                            codec=CompressionType.LZ4 if i % 800 else CompressionType.NONE)
        offset += len(chunk)
    (part / "00000000000000000000.log").write_bytes(data)
    assert_same([part / "00000000000000000000.log"], "--print-data-log")


def _compact(items: list[bytes]) -> bytes:
    return uvarint(len(items) + 1) + b"".join(items)


def _cstring(text: str) -> bytes:
    data = text.encode()
    return uvarint(len(data) + 1) + data


def test_kraft_control_records(tmp_path):
    """The metadata log's control records (a static-quorum broker writes only LeaderChange):
    LeaderChange (its Version field 0 and 1), SnapshotHeader, SnapshotFooter, KRaftVersion,
    KRaftVoters and a type Kafka does not know."""
    voter = lambda i: struct.pack(">i", i) + b"\0"  # noqa: E731  (Voter, no tagged fields)
    values = {
        2: struct.pack(">hi", 0, 1) + _compact([voter(1), voter(2)]) + _compact([voter(1)]) + b"\0",
        3: struct.pack(">hq", 0, 1_700_000_123_456) + b"\0",
        4: struct.pack(">h", 0) + b"\0",
        5: struct.pack(">hh", 0, 1) + b"\0",
        6: struct.pack(">h", 0) + _compact([
            struct.pack(">i", 3) + bytes(range(16))
            + _compact([_cstring("CONTROLLER") + _cstring("host-ü.example") + struct.pack(">H", 9093)
                        + b"\0"])
            + struct.pack(">hh", 0, 1) + b"\0" + b"\0"]) + b"\0",
        42: b"\x00\x00anything",
    }
    values[12] = struct.pack(">hi", 1, 7) + _compact([voter(7)]) + _compact([]) + b"\0"
    part = tmp_path / "__cluster_metadata-0"
    part.mkdir()
    data = b""
    for offset, (control_type, value) in enumerate(values.items()):
        key = struct.pack(">hh", 0, 2 if control_type == 12 else control_type)
        data += build_batch(offset, [value], [key], 1_700_000_000_000 + offset, is_control=True,
                            partition_leader_epoch=1)
    (part / "00000000000000000000.log").write_bytes(data)
    out = assert_same([part / "00000000000000000000.log"], "--print-data-log")
    assert [line.split("headerKeys: [] ")[1].split(" ")[0] for line in out if "| offset" in line] == [
        "LeaderChange:", "SnapshotHeader", "SnapshotFooter", "KRaftVersion", "KRaftVoters",
        "controlType:", "LeaderChange:"]


# -- the older Kafka's fixtures -----------------------------------------------------------


@pytest.mark.needs_fixture("kafka-written/legacy-0")
@pytest.mark.parametrize("options", LOG_OPTIONS, ids=" ".join)
def test_legacy_messages(options):
    """Magic v0/v1 messages (a Kafka 4 broker reads them, never writes them): kafka-dump-log
    prints their own lines (``offset: N position: ...``, ``isValid: true crc: N}``)."""
    assert_same(sorted((KAFKA_WRITTEN / "legacy-0").glob("*.log")), *options)


@pytest.mark.needs_fixture("kafka-written")
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
def test_fixture_indexes_and_their_reports(suffix):
    """Every index of the older Kafka's fixtures in one run: plain-0's .index has entries
    whose offset is not the last of the batch at their position (Kafka before 4.1 indexed a
    multi-batch append once): both report the same mismatches."""
    files = sorted(KAFKA_WRITTEN.glob(f"*/*{suffix}"))
    assert_same(files)
    assert_same(files, "--verify-index-only")


@pytest.mark.needs_fixture("kafka-written/compacted-0")
def test_compaction_gaps_are_reported_as_kafka_does():
    assert_same(sorted((KAFKA_WRITTEN / "compacted-0").glob("*.log")), "--deep-iteration")
