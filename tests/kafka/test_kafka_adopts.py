"""kfs writes, Kafka serves: partition directories kfs wrote (appends through the engine with
every codec and with LogAppendTime, a compacted partition, one after retention, one after
``kfs verify --repair`` salvaged a damaged segment, one after a transaction-timeout abort,
transactional and idempotent appends through ``Log.append_as_leader``, a Spark transactional
write) are handed to a real KRaft broker with ``kfs adopt``. The broker loads them with no
recovery, no truncation and no file changed (every ``.log``, ``.index``, ``.timeindex``,
``.txnindex`` and ``.snapshot`` hashes the same before its load, while it runs and after it
stops), and Kafka's consumer (confluent_kafka, read_uncommitted and read_committed) reads
exactly the records kfs wrote: offset, timestamp and its type, key, value, headers.

What the broker changes by design, asserted exactly:

* ``leader-epoch-checkpoint``: when it becomes the partition's leader, at a leader epoch the
  cluster's controller chose (creating the topic was epoch 0, the controlled shutdown before
  the adoption moved it on, the restart elects again: 2), it appends (that epoch, log end
  offset) (``UnifiedLog.maybeAssignEpochStartOffset``). For what kfs wrote (epoch 0) nothing
  else in the file changes. Records Kafka wrote under a higher epoch of another cluster (the
  repaired fixture: epochs 0, 1, 3) lose their entries at or above the new epoch, by
  ``LeaderEpochFileCache.assign``'s rule (as after an unclean election; the broker logs a
  warning); ``kfs adopt`` says so beforehand.
* While it runs, the active segment's ``.index`` and ``.timeindex`` are preallocated to
  ``segment.index.bytes`` (zeros after kfs's entries, Kafka's mmap'd indexes); its clean
  shutdown trims them back to the bytes kfs wrote.

``kfs adopt`` refuses, changing nothing in the broker's directory: a running broker, one that
did not shut down cleanly, topics the cluster lacks (it prints the ``kafka-topics.sh --create``
lines), damaged partitions, open transactions, broker partitions that hold records (without
``--overwrite``). Also here, without a broker: kfs leaves no producer snapshot that Kafka's
loader deletes (``removeStraySnapshots``, and ``truncateAndReload``'s range), whatever the
sessions did, and a writable load removes stray snapshots as Kafka's does.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from helpers.kfs import kfs_command, kfs_env
from helpers.paths import KAFKA_WRITTEN, REPO
from helpers.kafka import KafkaBroker, consume_all, records_of
from helpers.waits import wait_until
from storage import LogManager
from storage.checkpoint import read_offsets
from storage.log_cleaner import for_log_manager
from storage.log_files import (
    CLEANER_OFFSET_CHECKPOINT,
    filename_prefix,
    offset_from_file_name,
    producer_snapshot_file,
)
from storage.producer_state import list_snapshot_files
from storage.records import build_batch
from storage.clock import now_ms
from storage.records.control import ControlRecordType, build_control_batch

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
TOPIC_CODEC = {"none": "uncompressed"}  # compression.type's name where it differs
COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT


# -- what kfs writes -------------------------------------------------------------------------

def topic_properties(backing: Path, topic: str, config: dict[str, str]) -> None:
    (backing / f"{topic}.topic.properties").write_text(
        "".join(f"{k}={v}\n" for k, v in config.items()))


def headered_batch(base: int, codec: str, n: int, now: int) -> bytes:
    """A producer-built batch with keys (one null), values (one null), headers (a null header
    value, bytes that are not UTF-8) and explicit timestamps, compressed with ``codec``."""
    from storage.records import CompressionType

    return build_batch(
        base,
        [None if i == 3 else b"%s-h%d-" % (codec.encode(), i) * (i + 1) for i in range(n)],
        [None if i == 1 else b"hk%d" % i for i in range(n)],
        [now - 1000 + i for i in range(n)],
        [[("codec", codec.encode()), ("n", None), ("bin", bytes([0xFF, i]))] for i in range(n)],
        codec=CompressionType.for_name(codec), partition_leader_epoch=0)


def write_codec(backing: Path, codec: str) -> str:
    """Appends through the engine at ``compression.type=codec`` over two sessions (reopened:
    the first session's close snapshot is a stray after the second), several segments."""
    topic = f"codec-{codec}"
    topic_properties(backing, topic, KFS_CONFIG[topic])
    mgr = LogManager(backing)
    log = mgr.create(f"{topic}-0")
    for r in range(6):
        log.append([b"%s-%d-%d " % (codec.encode(), r, i) * (i % 7 + 1) for i in range(40)],
                   [None if i % 5 == 0 else b"key-%d" % (i % 9) for i in range(40)])
    log.append_batches(headered_batch(log.log_end_offset, codec, 8, now_ms()))
    mgr.close()
    mgr = LogManager(backing)
    log = mgr.get(f"{topic}-0")
    log.append([b"second session %d" % i for i in range(25)])
    log.roll()
    log.append([b"after the roll"], [b"last"])
    mgr.close()
    return topic


def write_append_time(backing: Path) -> str:
    topic = "appendtime"
    topic_properties(backing, topic, KFS_CONFIG[topic])
    mgr = LogManager(backing)
    log = mgr.create(f"{topic}-0")
    log.append([b"lat-%d" % i for i in range(30)])
    log.append_as_leader(build_batch(0, [b"from a producer"], [b"k"], 1))
    mgr.close()
    return topic


def write_compacted(backing: Path) -> str:
    """Several rounds of every key (a segment each), a tombstone, cleaned by kfs's cleaner in a
    second session, then more appends (the first session's close snapshot is a stray)."""
    topic = "compacted"
    topic_properties(backing, topic, KFS_CONFIG[topic])
    mgr = LogManager(backing)
    log = mgr.create(f"{topic}-0")
    for r in range(4):
        log.append([b"v%d-%d" % (r, k) for k in range(30)], [b"k%d" % k for k in range(30)])
        log.roll()
    log.append_as_leader(build_batch(0, [None], [b"k0"]))  # a tombstone
    log.roll()
    log.append([b"active"], [b"k1"])
    mgr.close()
    mgr = LogManager(backing)
    result = for_log_manager(mgr).clean_log(f"{topic}-0")
    assert result is not None and result.end == mgr.get(f"{topic}-0").segments.active.base_offset
    mgr.get(f"{topic}-0").append([b"after cleaning"], [b"k2"])
    mgr.close()
    assert read_offsets(backing / CLEANER_OFFSET_CHECKPOINT)[f"{topic}-0"] == result.end
    return topic


def write_retained(backing: Path) -> str:
    """Segments deleted by retention.bytes: the log start offset moves to a segment base whose
    roll snapshot Kafka's load would delete (truncateAndReload drops the one at the log
    start)."""
    topic = "retained"
    topic_properties(backing, topic, KFS_CONFIG[topic])
    mgr = LogManager(backing)
    log = mgr.create(f"{topic}-0")
    for i in range(12):
        log.append([b"retained-%d-" % i * 20 for _ in range(5)])
    assert log.delete_old_segments() > 0 and log.log_start_offset > 0
    mgr.close()
    return topic


def write_repaired(backing: Path) -> str:
    """Kafka's plain-0 fixture with one bit flipped, salvaged by ``kfs verify --repair --yes``
    (the batch at offsets 8-25 is cut: the log has an offset gap)."""
    from helpers.damage import FIRST, batches, copy_partitions, flip_bit

    copy_partitions(backing, "plain-0", clean_shutdown=False)
    topic_properties(backing, "plain", KFS_CONFIG["plain"])
    position = batches(backing / "plain-0" / FIRST)[1][0]
    flip_bit(backing / "plain-0" / FIRST, position + 100)
    done = subprocess.run(kfs_command("verify", "--repair", "--yes", str(backing), "plain-0"),
                          cwd=REPO, env=kfs_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "cut bytes 1032-9421" in done.stdout
    return "plain"


PID_COMMIT, PID_ABORT, PID_IDEMPOTENT, PID_TIMEOUT = 1000, 2000, 3000, 4242


def txn(values, pid, seq, epoch=0, codec=0, transactional=True):
    return build_batch(0, values, [b"p%d" % pid] * len(values), None, producer_id=pid,
                       producer_epoch=epoch, base_sequence=seq, is_transactional=transactional,
                       codec=codec)


def marker(pid, kind, epoch=0, coordinator_epoch=3):
    return build_control_batch(0, pid, epoch, kind, coordinator_epoch, timestamp_ms=now_ms())


def write_transactions(backing: Path) -> str:
    """Producer-built batches through ``Log.append_as_leader``: interleaved transactions of
    two producers (one committed, one aborted, over a roll and a reopen), an idempotent
    producer, plain appends, a second round of transactions after the markers."""
    topic = "txn"
    mgr = LogManager(backing)
    log = mgr.create(f"{topic}-0")
    log.append([b"before"])
    log.append_as_leader(txn([b"c0", b"c1"], PID_COMMIT, 0, codec=3))  # lz4
    log.append_as_leader(txn([b"a0"], PID_ABORT, 0))
    log.append_as_leader(txn([b"i0", b"i1", b"i2"], PID_IDEMPOTENT, 0, transactional=False))
    log.roll()
    log.append_as_leader(txn([b"c2"], PID_COMMIT, 2))
    log.append_as_leader(txn([b"a1", b"a2"], PID_ABORT, 1, codec=1))  # gzip
    mgr.close()
    mgr = LogManager(backing)
    log = mgr.get(f"{topic}-0")
    log.append([b"plain in between"])
    log.append_as_leader(marker(PID_ABORT, ABORT))
    log.append_as_leader(marker(PID_COMMIT, COMMIT))
    log.append_as_leader(txn([b"c3"], PID_COMMIT, 3))
    log.append_as_leader(txn([b"i3"], PID_IDEMPOTENT, 3, transactional=False))
    log.append_as_leader(marker(PID_COMMIT, COMMIT))
    log.append([b"after"])
    assert log.open_transactions() == []
    mgr.close()
    return topic


def write_transaction_timeout(backing: Path) -> str:
    """A transaction left open and aborted by kfs for its timeout (an ABORT with the epoch
    bumped), around a committed one of another producer."""
    topic = "txn-timeout"
    mgr = LogManager(backing)
    log = mgr.create(f"{topic}-0")
    log.append_as_leader(txn([b"t0", b"t1"], PID_TIMEOUT, 0))
    log.append_as_leader(txn([b"c0"], PID_COMMIT, 0))
    log.append_as_leader(txn([b"t2"], PID_TIMEOUT, 2))
    log.append_as_leader(marker(PID_COMMIT, COMMIT))
    mgr.close()
    mgr = LogManager(backing)
    log = mgr.get(f"{topic}-0")
    (open_txn,) = log.open_transactions()
    aborted = log.abort_timed_out_transactions(60_000, now=open_txn.start_ms + 60_001)
    assert [t.producer_id for t in aborted] == [PID_TIMEOUT]
    log.append([b"after the abort"])
    mgr.close()
    return topic


# -- Kafka's loader, as far as snapshots go ------------------------------------------------

def snapshots_a_kafka_load_deletes(partition_dir: Path, log_start_offset: int = 0) -> list[int]:
    """The snapshot offsets Kafka's LogLoader would delete loading ``partition_dir`` after a
    clean shutdown: ProducerStateManager.removeStraySnapshots (at no segment base, except the
    newest when it lies above every base), then truncateAndReload (above the log end offset,
    at or below the log start offset)."""
    mgr = LogManager(partition_dir.parent, read_only=True)
    try:
        log = mgr.get(partition_dir.name)
        leo = log.log_end_offset
        start = max(log_start_offset, log.log_start_offset)
        bases = {s.base_offset for s in log.segments.all()}
    finally:
        mgr.close()
    snapshots = [o for o, _ in list_snapshot_files(partition_dir)]
    strays = [o for o in snapshots if o not in bases]
    keep = strays[-1] if strays and strays[-1] > max(bases) else None
    deleted = [o for o in strays if o != keep]
    return sorted(deleted + [o for o in snapshots if o not in deleted
                             and (o > leo or o <= start)])


@pytest.mark.parametrize("writer", [
    lambda backing: write_codec(backing, "none"), write_compacted, write_retained,
    write_transactions, write_transaction_timeout],
    ids=["reopened", "compacted", "retained", "transactions", "transaction-timeout"])
def test_kfs_leaves_no_snapshot_kafkas_loader_deletes(tmp_path, writer):
    backing = tmp_path / "backing"  # one partition: no later load of the directory tidies it
    backing.mkdir()
    part = backing / f"{writer(backing)}-0"
    starts = read_offsets(backing / "log-start-offset-checkpoint")
    assert list_snapshot_files(part)
    assert snapshots_a_kafka_load_deletes(part, starts.get(part.name, 0)) == []


def test_a_writable_load_removes_stray_snapshots_as_kafka_does(tmp_path):
    from storage.producer_state import write_snapshot

    backing = tmp_path / "backing"
    backing.mkdir()
    write_codec(backing, "none")
    part = backing / "codec-none-0"
    bases = sorted(offset_from_file_name(p.name) for p in part.glob("*.log"))
    leo = max(o for o, _ in list_snapshot_files(part))
    for offset in (bases[1] + 1, bases[-1] - 1):  # between bases: strays (Kafka deletes them)
        write_snapshot(producer_snapshot_file(part, offset), [])
    written = list_snapshot_files(part)
    LogManager(backing, read_only=True).close()  # a read-only load changes nothing
    assert list_snapshot_files(part) == written
    mgr = LogManager(backing)
    assert {o for o, _ in list_snapshot_files(part)} == set(bases[1:]) | {leo}
    assert mgr.get("codec-none-0").reader.read(leo - 1).value == b"after the roll"
    mgr.close()


# -- the broker's side ---------------------------------------------------------------------

def digests(directory: Path) -> dict[str, bytes]:
    """{file name: content} of every file of a partition directory."""
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}


def tree(directory: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``directory``."""
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def epoch_entries(text: bytes) -> list[tuple[int, int]]:
    lines = text.decode().splitlines()
    assert lines[0] == "0" and int(lines[1]) == len(lines) - 2, text
    return [tuple(map(int, line.split())) for line in lines[2:]]


def create_topics(broker: KafkaBroker, topics: dict[str, dict[str, str]],
                  partitions: int = 1) -> None:
    for topic, config in topics.items():
        broker.create_topic(topic, partitions, config)
        for p in range(partitions):  # the directory appears before its partition.metadata
            metadata = broker.log_dir / f"{topic}-{p}" / "partition.metadata"
            wait_until(lambda: metadata.exists() and "topic_id:" in metadata.read_text(),
                       f"{topic}-{p}/partition.metadata")


def kfs_records(backing: Path, name: str, isolation: str) -> list[tuple]:
    """What kfs wrote, as the engine reads it back at ``isolation``: consume_all's tuples."""
    mgr = LogManager(backing, read_only=True)
    try:
        return records_of(mgr.get(name), isolation)
    finally:
        mgr.close()


def log_lines(broker: KafkaBroker, name: str) -> list[str]:
    """The broker's log lines about partition ``name``."""
    pattern = re.compile(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])")
    return [line for line in broker.server_log.read_text(errors="replace").splitlines()
            if pattern.search(line)]


@dataclass
class Adoption:
    """What one broker did with the directories kfs adopted into it."""

    backing: Path
    broker: KafkaBroker
    names: list[str]
    adopt_output: str
    refused_while_running: subprocess.CompletedProcess | None = None
    kfs_files: dict[str, dict[str, bytes]] = field(default_factory=dict)
    before: dict[str, dict[str, bytes]] = field(default_factory=dict)
    running: dict[str, dict[str, bytes]] = field(default_factory=dict)
    after: dict[str, dict[str, bytes]] = field(default_factory=dict)
    consumed: dict[tuple[str, str], list[tuple]] = field(default_factory=dict)
    leader_epochs: dict[str, int] = field(default_factory=dict)
    log_before_restart: int = 0  # server.log lines before the adopting start


def kfs_adopt(*args) -> subprocess.CompletedProcess:
    return subprocess.run(kfs_command("adopt", *map(str, args)), cwd=REPO, env=kfs_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def adopt_and_serve(broker: KafkaBroker, backing: Path, names: list[str]) -> Adoption:
    """With ``broker`` stopped after its topics were created: ``kfs adopt``, start the broker,
    consume every partition at both isolation levels, stop it; the partitions' files before
    its start, while it runs (after the consumers read) and after it stopped."""
    done = kfs_adopt(backing, broker.log_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    result = Adoption(backing, broker, names, done.stdout)
    for name in names:
        result.kfs_files[name] = digests(backing / name)
        result.before[name] = digests(broker.log_dir / name)
    result.log_before_restart = len(broker.server_log.read_text(errors="replace").splitlines())
    broker.start()
    for name in names:
        topic, _, partition = name.rpartition("-")
        for isolation in ("read_uncommitted", "read_committed"):
            result.consumed[name, isolation] = consume_all(broker, topic, int(partition),
                                                           isolation)
    for name in names:  # the leader epoch each partition was led at, from the broker's log
        line = wait_until(lambda: [l for l in log_lines(broker, name)[::-1]
                                   if f"Leader {name} with topic id" in l], f"{name} led")[0]
        result.leader_epochs[name] = int(re.search(r"starts at leader epoch (\d+)", line)[1])
        result.running[name] = digests(broker.log_dir / name)
    broker.stop()
    for name in names:
        result.after[name] = digests(broker.log_dir / name)
    return result


def check_files(adopted: Adoption, name: str) -> list[tuple[int, int]]:
    """Assert that the broker changed no file of partition ``name`` but what it must (see the
    module's text): returns the leader-epoch-checkpoint entries kfs wrote."""
    kfs, before = adopted.kfs_files[name], adopted.before[name]
    # kfs adopt copied every file as kfs wrote it, with the cluster's topic ID
    assert before.keys() == kfs.keys()
    assert {n: c for n, c in before.items() if n != "partition.metadata"} == \
        {n: c for n, c in kfs.items() if n != "partition.metadata"}
    assert re.fullmatch(rb"version: 0\ntopic_id: [A-Za-z0-9_-]{22}", before["partition.metadata"])
    leo = max(o for o, _ in list_snapshot_files(adopted.backing / name))
    epoch = adopted.leader_epochs[name]
    old_epochs = epoch_entries(before["leader-epoch-checkpoint"])
    # By design: the leader's epoch from the log end offset goes in (maybeAssignEpochStartOffset),
    # after the entries LeaderEpochFileCache.assign keeps: lower epochs, lower start offsets.
    expected_epochs = [(e, o) for e, o in old_epochs if e < epoch and o < leo] + [(epoch, leo)]
    active = filename_prefix(max(offset_from_file_name(n) for n in before if n.endswith('.log')))
    for state in ("running", "after"):
        files = getattr(adopted, state)[name]
        assert files.keys() == before.keys(), state
        assert epoch_entries(files["leader-epoch-checkpoint"]) == expected_epochs, state
        for file_name, content in before.items():
            if file_name == "leader-epoch-checkpoint":
                continue
            got = files[file_name]
            if state == "running" and file_name in (f"{active}.index", f"{active}.timeindex"):
                # by design: a running broker's active indexes are preallocated (mmap'd)
                assert got[:len(content)] == content and not got[len(content):].strip(b"\0")
                assert len(got) >= 10 * 1024 * 1024 - 12, file_name
                continue
            assert sha(got) == sha(content), (state, file_name)
    return old_epochs


def check_load(adopted: Adoption, name: str, allowed: re.Pattern | None = None) -> None:
    """Assert that the broker's log shows partition ``name`` loaded after a clean shutdown,
    from the snapshot at its log end offset, with no recovery, truncation or deletion, and
    nothing worth a warning (but lines matching ``allowed``)."""
    since = adopted.broker.server_log.read_text(errors="replace").splitlines()[
        adopted.log_before_restart:]
    load = [l for l in log_lines(adopted.broker, name) if l in set(since)]
    leo = max(o for o, _ in list_snapshot_files(adopted.backing / name))
    assert any("Skipping recovery of" in l and "clean shutdown file was found" in l
               for l in since)
    assert any(f"for segment recovery from offset {leo} " in l for l in load), load
    completed = [l for l in load if "Completed load of Log(" in l]
    assert completed and f"logEndOffset={leo})" in completed[0], completed
    bad = re.compile(r"(?i)truncat|stray|deleted|corrupt|invalid|rebuilding index|recovering|"
                     r"could not find|inconsistent|error|warn")
    assert [l for l in load if bad.search(l) and not (allowed and allowed.search(l))] == []


KFS_CONFIG = {  # <topic>.topic.properties: small segments, so that logs roll
    **{f"codec-{c}": {"compression.type": TOPIC_CODEC.get(c, c), "segment.bytes": "8192"}
       for c in CODECS},
    "appendtime": {"message.timestamp.type": "LogAppendTime"},
    "compacted": {"cleanup.policy": "compact"},
    "retained": {"segment.bytes": "2048", "retention.bytes": "6000"},
    "plain": {"retention.ms": "-1"},  # the fixture's records are from 2023
    "txn": {},
    "txn-timeout": {},
}
# The topics as the cluster knows them: kfs's settings, but segment.bytes (Kafka 4 refuses
# segments under 1 MiB, so kfs adopt refuses them until taken out; it matters only for the
# broker's own later rolls)
CLUSTER_CONFIG = {topic: {k: v for k, v in config.items() if k != "segment.bytes"}
                  for topic, config in KFS_CONFIG.items()}


@pytest.fixture(scope="module")
def adopted(tmp_path_factory):
    from helpers.needs import unavailable
    from helpers.kafka import kafka_missing

    if kafka_missing():
        unavailable(kafka_missing())
    if not (KAFKA_WRITTEN / "plain-0").is_dir():
        unavailable(f"fixture {KAFKA_WRITTEN / 'plain-0'} is missing")
    root = tmp_path_factory.mktemp("adopt")
    backing = root / "backing"
    backing.mkdir()
    topics = [write_codec(backing, c) for c in CODECS] + [
        write_append_time(backing), write_compacted(backing), write_retained(backing),
        write_repaired(backing), write_transactions(backing), write_transaction_timeout(backing)]
    assert sorted(topics) == sorted(CLUSTER_CONFIG)
    names = [f"{t}-0" for t in topics]
    broker = KafkaBroker(root / "logs", root / "work")
    try:
        broker.start()
        create_topics(broker, CLUSTER_CONFIG)
        refused = kfs_adopt(backing, broker.log_dir)
        broker.stop()
        untouched = tree(broker.log_dir)
        small = kfs_adopt(backing, broker.log_dir)  # kfs's segment.bytes=8192: not for Kafka
        assert small.returncode == 1 and "segment.bytes=8192 is below Kafka 4.1.1's minimum " \
            "of 1048576" in small.stderr, small.stdout + small.stderr
        assert tree(broker.log_dir) == untouched
        for topic, config in CLUSTER_CONFIG.items():  # as the user does: the cluster's settings
            topic_properties(backing, topic, config)
        dry = kfs_adopt("--dry-run", backing, broker.log_dir)
        assert dry.returncode == 0, dry.stdout + dry.stderr
        assert dry.stdout.splitlines()[-1] == "nothing changed (--dry-run)"
        assert tree(broker.log_dir) == untouched
        result = adopt_and_serve(broker, backing, names)
        result.refused_while_running = refused
        yield result
    finally:
        broker.tear_down()


NAMES = [f"{t}-0" for t in CLUSTER_CONFIG]
needs_kafka = pytest.mark.kafka


@needs_kafka
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
@pytest.mark.parametrize("name", NAMES)
def test_kafkas_consumer_reads_what_kfs_wrote(adopted, name, isolation):
    expected = kfs_records(adopted.backing, name, isolation)
    assert expected, name
    assert adopted.consumed[name, isolation] == expected


@needs_kafka
def test_the_records_are_the_ones_written(adopted):
    """A few facts about the records from the writers' side, not the engine's reading."""
    def values(name, isolation="read_uncommitted"):
        return [r[4] for r in adopted.consumed[name, isolation]]

    for codec in CODECS:
        got = values(f"codec-{codec}-0")
        assert len(got) == 6 * 40 + 8 + 25 + 1 and got[-1] == b"after the roll"
        assert got[:2] == [b"%s-0-0 " % codec.encode(), b"%s-0-1 " % codec.encode() * 2]
        headered = adopted.consumed[f"codec-{codec}-0", "read_uncommitted"][240:248]
        assert [r[3] for r in headered[:3]] == [b"hk0", None, b"hk2"] and headered[3][4] is None
        assert headered[5][5] == (("codec", codec.encode()), ("n", None), ("bin", b"\xff\x05"))
    assert {r[2] for r in adopted.consumed["appendtime-0", "read_uncommitted"]} == {1}
    assert values("txn-0", "read_committed") == [
        b"before", b"c0", b"c1", b"i0", b"i1", b"i2", b"c2", b"plain in between", b"c3", b"i3",
        b"after"]
    assert values("txn-0") == [
        b"before", b"c0", b"c1", b"a0", b"i0", b"i1", b"i2", b"c2", b"a1", b"a2",
        b"plain in between", b"c3", b"i3", b"after"]
    assert values("txn-timeout-0", "read_committed") == [b"c0", b"after the abort"]
    assert values("txn-timeout-0") == [b"t0", b"t1", b"c0", b"t2", b"after the abort"]
    repaired = [r[0] for r in adopted.consumed["plain-0", "read_uncommitted"]]
    assert len(repaired) == 5000 - 18 and not set(range(8, 26)) & set(repaired)
    compacted = {r[3]: r[4] for r in adopted.consumed["compacted-0", "read_uncommitted"]}
    assert compacted[b"k0"] is None and compacted[b"k2"] == b"after cleaning"
    # the last round but k0 (29), the tombstone, and the active segment's two
    assert len(adopted.consumed["compacted-0", "read_uncommitted"]) == 29 + 1 + 2
    assert adopted.consumed["retained-0", "read_uncommitted"][0][0] > 0


@needs_kafka
@pytest.mark.parametrize("name", NAMES)
def test_the_broker_changes_no_file_but_appends_its_leader_epoch(adopted, name):
    old_epochs = check_files(adopted, name)
    epoch = adopted.leader_epochs[name]
    if name == "plain-0":
        # Kafka's records carry the epochs of the cluster that wrote them, up to 3: a broker
        # leading at a lower epoch drops the entry of epoch 3 (as after an unclean election)
        assert old_epochs[-1] == (3, 4208) and epoch < 3
    else:  # kfs wrote at epoch 0: the leader's entry is appended, the rest stays
        # (retention moved epoch 0's start offset to the log start offset)
        assert [e for e, _ in old_epochs] == [0] and epoch > 0


@needs_kafka
@pytest.mark.parametrize("name", NAMES)
def test_the_broker_loads_them_with_no_recovery(adopted, name):
    conflict = re.compile(r"caused truncation of conflicting entries")
    if name == "plain-0":  # see test_the_broker_changes_no_file_but_appends_its_leader_epoch
        lines = [l for l in log_lines(adopted.broker, name) if conflict.search(l)]
        assert len(lines) == 1 and "[EpochEntry(epoch=3, startOffset=4208)]" in lines[0]
    check_load(adopted, name, conflict if name == "plain-0" else None)


@needs_kafka
def test_adopt_refuses_a_running_broker(adopted):
    refused = adopted.refused_while_running
    assert refused.returncode == 1 and refused.stdout == ""
    assert "a broker is running on" in refused.stderr and "stop it cleanly first" in refused.stderr


@needs_kafka
def test_adopt_says_what_it_did(adopted):
    lines = adopted.adopt_output.splitlines()
    assert lines[-1].startswith(f"adopted {len(NAMES)} partitions: start the broker")
    for name in NAMES:
        assert any(l.startswith(f"{name}: ") and f"-> {adopted.broker.log_dir / name} (topic ID "
                   in l for l in lines), name
    assert [l for l in lines if l.startswith("note: ")] == [
        "note: plain-0's records carry leader epochs up to 3, from the cluster that led it "
        "before: a broker that leads it at a lower epoch drops the higher ones from its "
        "leader-epoch-checkpoint (as after an unclean election; the records stay)"]
    # the broker's checkpoints got the partitions' offsets; kfs's cleaner checkpoint with them
    logs = adopted.broker.log_dir
    cleaner = read_offsets(logs / CLEANER_OFFSET_CHECKPOINT)
    assert cleaner["compacted-0"] == read_offsets(
        adopted.backing / CLEANER_OFFSET_CHECKPOINT)["compacted-0"]


@needs_kafka
def test_the_brokers_rebuild_makes_the_indexes_many_short_lived_kfs_writers_left(
        tmp_path, kafka_broker):
    """Issue 25, item 14: a partition appended by 30 writers, each opening the directory,
    appending one batch (explicit timestamps, some going back) and closing it, as Spark tasks
    in fresh workers do, is adopted, its .index and .timeindex deleted, and the broker started:
    Kafka 4.1.1's own rebuild (LogSegment.recover, per batch) makes, once it stopped cleanly,
    the very index files the writers left."""
    backing = tmp_path / "backing"
    backing.mkdir()
    config = {"index.interval.bytes": "700", "retention.ms": "-1"}
    topic_properties(backing, "idx", config)
    offset = 0
    for i in range(30):
        mgr = LogManager(backing)
        log = mgr.get("idx-0") if i else mgr.create("idx-0")
        n = 1 + i % 4
        stamps = [1_700_000_000_000 + 1000 * i + (-2500 if i % 5 == 3 else 0)] * n
        assert log.append([b"v%d-%d " % (i, k) * (5 + 7 * (i % 5)) for k in range(n)],
                          timestamps=stamps) == offset
        offset += n
        mgr.close()
    part = backing / "idx-0"
    kfs_indexes = {p.name: p.read_bytes() for p in part.iterdir()
                   if p.suffix in (".index", ".timeindex")}
    assert len(kfs_indexes[f"{filename_prefix(0)}.index"]) >= 3 * 8

    broker = kafka_broker()
    create_topics(broker, {"idx": config})
    broker.stop()
    done = kfs_adopt(backing, broker.log_dir, "idx-0")
    assert done.returncode == 0, done.stdout + done.stderr
    adopted = broker.log_dir / "idx-0"
    for name in kfs_indexes:
        (adopted / name).unlink()  # a missing .index: Kafka recovers the segment
    broker.start()
    broker.stop()
    assert any("rebuilding" in line.lower() or "recover" in line.lower()
               for line in log_lines(broker, "idx-0")), log_lines(broker, "idx-0")
    assert {name: (adopted / name).read_bytes() for name in kfs_indexes} == kfs_indexes


@needs_kafka
def test_adopt_refuses_what_the_broker_would_not_serve_as_kfs_wrote_it(tmp_path, kafka_broker):
    from confluent_kafka import Producer

    backing = tmp_path / "backing"
    backing.mkdir()
    write_transactions(backing)
    mgr = LogManager(backing)
    mgr.create("busy-0").append([b"kfs's record"])
    topic_properties(backing, "open", {"retention.ms": "-1", "max.message.bytes": "2000"})
    mgr.create("open-0").append_as_leader(txn([b"never ended"], 77, 0))
    damaged = mgr.create("damaged-0")
    damaged.append([b"fine"])
    mgr.close()
    # a whole batch failing its CRC after a clean shutdown: loads trust it (Kafka's too), the
    # broker would serve it and its consumers fail on it
    bad = bytearray(build_batch(1, [b"x" * 50], None, now_ms(), partition_leader_epoch=0))
    bad[-5] ^= 0xFF
    with open(backing / "damaged-0" / "00000000000000000000.log", "ab") as f:
        f.write(bad)

    broker = kafka_broker()
    create_topics(broker, {"txn": {}, "busy": {}})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    producer.produce("busy", b"the broker's record")
    assert producer.flush(60) == 0
    broker.stop()

    def refused(*args, why: str):
        untouched = tree(broker.log_dir)
        done = kfs_adopt(*args)
        assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
        assert why in done.stderr, done.stderr
        assert tree(broker.log_dir) == untouched  # nothing changed
        return done.stderr

    logs = broker.log_dir
    refused(backing, logs, why="damaged-0 is damaged (damaged-0/00000000000000000000.log:72: "
                               "Record batch at offset 1 is corrupt")
    names = ["busy-0", "open-0", "txn-0"]
    text = refused(backing, logs, *names, why="the cluster does not have these partitions")
    assert ("kafka-topics.sh --bootstrap-server HOST:PORT --create --topic open --partitions 1 "
            "--replication-factor 1 --config retention.ms=-1 --config max.message.bytes=2000\n"
            ) in text
    broker.start()
    create_topics(broker, {"open": {}})
    broker.stop()
    refused(backing, logs, *names, why="open-0 has 1 open transaction(s)")
    aborted = subprocess.run(
        kfs_command("transactions", str(backing), "abort", "--topic", "open", "--partition", "0",
                    "--start-offset", "0"), cwd=REPO, env=kfs_env(), capture_output=True,
        text=True, timeout=120)
    assert aborted.returncode == 0, aborted.stderr
    refused(backing, logs, *names, why=f"{logs / 'busy-0'} already holds records")
    done = kfs_adopt("--overwrite", backing, logs, *names)
    assert done.returncode == 0, done.stderr
    assert f"busy-0: 1 segment, offsets 0-0 -> {logs / 'busy-0'}" in done.stdout
    assert "replacing the broker's records" in done.stdout
    assert not [p for p in logs.iterdir() if p.name.endswith("-delete")]

    broker.start()
    for name in names:
        for isolation in ("read_uncommitted", "read_committed"):
            assert consume_all(broker, name[:-2], 0, isolation) == \
                kfs_records(backing, name, isolation), (name, isolation)
    assert [r[4] for r in consume_all(broker, "busy", 0, "read_committed")] == [b"kfs's record"]
    assert consume_all(broker, "open", 0, "read_committed") == []
    # the broker goes on appending to an adopted partition
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                         "enable.idempotence": True})
    producer.produce("txn", b"produced after the adoption", key=b"k")
    assert producer.flush(60) == 0
    got = consume_all(broker, "txn", 0, "read_committed")
    assert got[:-1] == kfs_records(backing, "txn-0", "read_committed")
    leo = max(o for o, _ in list_snapshot_files(backing / "txn-0"))
    assert got[-1][0] == leo and got[-1][3:5] == (b"k", b"produced after the adoption")
    broker.kill()
    refused(backing, logs, "txn-0", "--overwrite", why="did not shut down cleanly")


@needs_kafka
def test_a_spark_transactional_write_is_adopted(spark, tmp_path, kafka_broker):
    """Spark's tasks each append a transaction under the directory's lock and close it (a
    producer snapshot each), the driver appends the COMMIT markers and closes it again: the
    earlier snapshots are strays Kafka's loader would delete; kfs leaves none."""
    backing = tmp_path / "backing"
    mgr = LogManager(backing)
    for p in range(2):
        mgr.create(f"sparked-{p}")
    mgr.close()
    rows = [(f"k{i % 11}", f"value {i}", [("h", b"x")] if i % 4 == 0 else [])
            for i in range(600)]
    df = spark.createDataFrame(
        rows, "key string, value string, headers array<struct<key:string,value:binary>>")
    df.repartition(3).write.format("kfs").option("path", str(backing)).option(
        "topic", "sparked").mode("append").save()
    names = ["sparked-0", "sparked-1"]
    for name in names:
        assert len(list_snapshot_files(backing / name)) == 1
        assert snapshots_a_kafka_load_deletes(backing / name) == []
    broker = kafka_broker()
    create_topics(broker, {"sparked": {}}, partitions=2)
    broker.stop()
    adopted = adopt_and_serve(broker, backing, names)
    values = []
    for name in names:
        committed = adopted.consumed[name, "read_committed"]
        assert committed == adopted.consumed[name, "read_uncommitted"]
        assert committed == kfs_records(backing, name, "read_committed")
        values += [r[4].decode() for r in committed]
        assert check_files(adopted, name) == [(0, 0)]
        check_load(adopted, name)
    assert sorted(values) == sorted(v for _, v, _ in rows)
