"""A running Kafka broker writes, kfs reads: every record the broker's own consumer returns
(read_uncommitted and read_committed) equals what kfs serves from the broker's log directory,
through the engine while the broker runs and after it stops, and through a ``--read-only``
mount that follows the broker live (new batches, rolled and deleted segments, new
partitions), never writing a byte of the broker's directory."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from helpers.kafka import KafkaBroker, consume_all, flushed, records_of
from helpers.shell import sh
from helpers.waits import DEADLINE_S, Deadline, Lines, wait_until
from storage import LogManager

pytestmark = pytest.mark.kafka

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def producer(broker: KafkaBroker, **config) -> Producer:
    return Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 5,
                     **{k.replace("_", "."): v for k, v in config.items()}})


def produce_everything(broker: KafkaBroker) -> dict[str, int]:
    """Through the broker: every codec with keys, null values and headers; an idempotent
    producer; transactions committed and aborted; a LogAppendTime topic. Returns
    {partition name: records produced}."""
    broker.create_topic("mixed", 1, {"segment.bytes": "1048576"})
    broker.create_topic("appendtime", 1, {"message.timestamp.type": "LogAppendTime"})
    for codec in CODECS:
        p = producer(broker, compression_type=codec, enable_idempotence=codec == "zstd")
        for i in range(600):
            p.produce("mixed", key=None if i % 5 == 0 else b"k%d" % (i % 13),
                      value=None if i % 50 == 7 else (b"%s-%d-" % (codec.encode(), i)) * (i % 40),
                      headers=[("codec", codec.encode()), ("n", None)] if i % 3 else None)
        flushed(p)
    txn = producer(broker, transactional_id="t1", compression_type="lz4")
    txn.init_transactions(60)
    for commit in (True, False, True):
        txn.begin_transaction()
        for i in range(200):
            txn.produce("mixed", key=b"t", value=b"txn-%s-%d" % (b"c" if commit else b"a", i))
        flushed(txn)  # (an abort drops what was not sent yet: the aborted records must land)
        (txn.commit_transaction if commit else txn.abort_transaction)(60)
    p = producer(broker)
    for i in range(100):
        p.produce("appendtime", value=b"lat-%d" % i, timestamp=1)
    flushed(p)
    return {"mixed-0": 3600, "appendtime-0": 100}


@pytest.fixture(scope="module")
def everything(tmp_path_factory):
    """One broker for the module, with produce_everything() done."""
    from helpers.kafka import kafka_missing
    from helpers.needs import unavailable

    if kafka_missing():
        unavailable(kafka_missing())
    root = tmp_path_factory.mktemp("kafka")
    broker = KafkaBroker(root / "logs", root / "work")
    try:
        broker.start()
        produce_everything(broker)
        yield broker
    finally:
        broker.stop()
        broker.kill()


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_the_engine_reads_what_the_brokers_consumer_reads(everything, isolation):
    manager = LogManager(everything.log_dir, read_only=True)
    try:
        assert "__cluster_metadata-0" not in manager.partition_names()
        for topic in ("mixed", "appendtime"):
            expected = consume_all(everything, topic, 0, isolation)
            got = records_of(manager.catch_up(f"{topic}-0"), isolation)
            assert got == expected, topic
        mixed = consume_all(everything, "mixed", 0, isolation)
        assert len(mixed) == 3000 + (400 if isolation == "read_committed" else 600)
        assert {r[2] for r in consume_all(everything, "appendtime", 0, isolation)} == {1}
    finally:
        manager.close()


def test_a_live_log_follows_the_broker_through_rolls(everything):
    manager = LogManager(everything.log_dir, read_only=True)
    try:
        log = manager.catch_up("mixed-0")
        before_end, before_segments = log.log_end_offset, len(log.segments)
        p = producer(everything)
        for i in range(3000):
            p.produce("mixed", value=b"late-%d-" % i + b"x" * 500)
        flushed(p)
        log = manager.catch_up("mixed-0")
        assert log.log_end_offset == before_end + 3000
        assert len(log.segments) > before_segments  # 1.5 MB more than a 1 MiB segment
        assert records_of(log, "read_uncommitted") == consume_all(everything, "mixed", 0, "read_uncommitted")
        everything.create_topic("newer", 2)
        assert manager.catch_up_partitions()
        assert {"newer-0", "newer-1"} <= set(manager.partition_names())
    finally:
        manager.close()


def tree_digest(directory: Path) -> dict[str, str]:
    """{relative path: sha256 (or 'dir')} of everything under ``directory``, mtimes aside."""
    out = {}
    for path in sorted(directory.rglob("*")):
        rel = str(path.relative_to(directory))
        out[rel] = "dir" if path.is_dir() else hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def test_a_read_only_mount_follows_a_live_broker(kafka_broker, mount):
    broker = kafka_broker(log_retention_check_interval_ms=200)
    broker.create_topic("orders", 1, {"segment.bytes": "1048576", "file.delete.delay.ms": "1000"})
    p = producer(broker)

    def produce(n: int, tag: str, size: int = 0) -> None:
        for i in range(n):
            p.produce("orders", key=b"k%d" % (i % 7), value=f"{tag}-{i}".encode() + b"x" * size)
        flushed(p)

    produce(100, "a")
    m = mount(broker.log_dir, "--read-only")
    part = m.path / "orders-0"
    # the metadata log is no partition: its image is /__cluster_metadata
    assert sh("ls", m.path).out.split() == ["__cluster_metadata", "orders-0"]
    assert len(os.listdir(part / "by-offset")) == 100
    tail = subprocess.Popen(["tail", "-n", "0", "-f", str(part / "values")],
                            stdout=subprocess.PIPE)
    try:
        produce(10, "b")
        wait_until(lambda: len(os.listdir(part / "by-offset")) == 110, "ls by-offset to grow")
        assert (part / "by-offset" / "105").read_bytes() == b"b-5"
        assert sh("getfattr --only-values -n user.kafka.logEndOffset .", part).out == "110"
        assert sh("tail -n 2 values", part).out == "b-8\nb-9\n"
        assert sh("jq -r .payload records.jsonl | tail -n 1", part).out == "b-9\n"
        assert sh("cat from/-3/values", part).out == "b-7\nb-8\nb-9\n"
        lines = Lines(tail.stdout, "tail -f", tail)
        got = [lines.readline().decode() for _ in range(10)]  # tail -f follows the broker
        assert got == [f"b-{i}\n" for i in range(10)]
    finally:
        tail.kill()
        tail.wait(timeout=30)
    # a partition the broker creates appears
    broker.create_topic("later", 1)
    wait_until(lambda: "later-0" in os.listdir(m.path), "the new partition in ls")
    # rolls, then retention by size deleting the first segments: the log start moves on
    produce(3000, "c", 1000)
    wait_until(lambda: int(sh("getfattr --only-values -n user.kafka.segmentCount .", part).out) >= 3,
               "rolled segments")
    sh("test -s by-offset/3109", part)
    admin_config(broker, "orders", {"retention.bytes": "1048576"})
    start = wait_until(lambda: int(sh("getfattr --only-values -n user.kafka.logStartOffset .",
                                      part).out) or None, "retention to move the log start")
    missing = subprocess.run(["cat", str(part / "by-offset" / "0")], capture_output=True,
                             timeout=120)
    assert missing.returncode == 1 and b"No such file" in missing.stderr
    lines = sh("cat values", part).out.splitlines()
    assert lines[0] == f"c-{start - 110}" + "x" * 1000 and lines[-1] == "c-2999" + "x" * 1000
    assert len(lines) == 3110 - start
    # a topic the broker deletes is gone by path too, though the kernel had it cached
    sh("stat later-0 later-0/values >/dev/null && ls -la later-0 >/dev/null", m.path)
    admin = broker.admin()
    for future in admin.delete_topics(["later"]).values():
        future.result(60)
    wait_until(lambda: sh("stat later-0", m.path, check=False).returncode != 0,
               "stat later-0 to fail", timeout=30)
    assert b"No such file" in sh("stat later-0/values", m.path, check=False).stderr
    assert "later-0" not in os.listdir(m.path)
    assert "Traceback" not in m.log_text()


def admin_config(broker: KafkaBroker, topic: str, config: dict[str, str]) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    admin = broker.admin()
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in config.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(60)


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_spark_reads_what_the_brokers_consumer_reads(everything, spark, isolation):
    """``format("kfs")`` over the running broker's log directory, both isolation levels."""
    rows = (spark.read.format("kfs").option("path", str(everything.log_dir))
            .option("subscribe", "mixed").option("includeHeaders", "true")
            .option("isolation.level", isolation).load()
            .select("offset", "key", "value", "timestampType", "headers").collect())
    got = sorted((r.offset, r.key and bytes(r.key), r.value and bytes(r.value), r.timestampType,
                  tuple((h.key, h.value and bytes(h.value)) for h in r.headers or ()))
                 for r in rows)
    expected = [(o, k, v, t, h) for o, _, t, k, v, h in consume_all(everything, "mixed", 0, isolation)]
    assert got == expected


def kcat_bytes(field):
    """A records.jsonl key/payload/header value back to bytes (UTF-8 text or base64)."""
    if field is None:
        return None
    if isinstance(field, dict):
        return base64.b64decode(field["base64"])
    return field.encode()


@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_live_mount_serves_what_the_brokers_consumer_reads(everything, mount, isolation):
    m = mount(everything.log_dir, "--read-only", f"--isolation-level={isolation}")
    for topic in ("mixed", "appendtime"):
        lines = (m.path / f"{topic}-0" / "records.jsonl").read_text().splitlines()
        got = []
        for line in lines:
            r = json.loads(line)
            flat = r["headers"]
            got.append((r["offset"], r["ts"], r["tstype"] == "logappend", kcat_bytes(r["key"]),
                        kcat_bytes(r["payload"]),
                        tuple((flat[i], kcat_bytes(flat[i + 1])) for i in range(0, len(flat), 2))))
        expected = [(o, ts, t == 1, k, v, h)
                    for o, ts, t, k, v, h in consume_all(everything, topic, 0, isolation)]
        assert got == expected, topic


def test_the_mount_never_changes_the_brokers_directory(everything, mount, tmp_path):
    """After the broker stopped: a read-only mount read through and through leaves every file
    as it was, and serves what the consumer read."""
    everything.stop()
    before = tree_digest(everything.log_dir)
    m = mount(everything.log_dir, "--read-only")
    part = m.path / "mixed-0"
    sh("cat values records.jsonl > /dev/null; ls -l by-offset > /dev/null; getfattr -d . ; "
       "cat by-offset/1 > /dev/null", part)
    manager = LogManager(everything.log_dir, read_only=True)
    try:
        values = [r[4] for r in records_of(manager.get("mixed-0"), "read_uncommitted")]
    finally:
        manager.close()
    assert sh("wc -l < values", part).out.strip() == str(len(values))
    assert tree_digest(everything.log_dir) == before
    assert not (everything.log_dir / ".kfs").exists()


def test_a_torn_batch_is_not_there_yet_then_whole(everything, tmp_path):
    """Bytes appended to the active segment as a broker appends them, a batch at a time, but
    stopped halfway: the half batch is not served; once whole, it is."""
    copy = tmp_path / "logs"
    (copy / "t-0").mkdir(parents=True)
    source = everything.log_dir / "appendtime-0"
    for f in source.iterdir():
        (copy / "t-0" / f.name).write_bytes(f.read_bytes())
    log_file = copy / "t-0" / "00000000000000000000.log"
    data = log_file.read_bytes()
    from storage.records import iter_batches
    batches = list(iter_batches(data))
    first = sum(b.size_in_bytes for b in batches[:-1])
    log_file.write_bytes(data[:first])  # the last batch is not written yet
    manager = LogManager(copy, read_only=True)
    try:
        log = manager.catch_up("t-0")
        end = log.log_end_offset
        assert end == batches[-1].base_offset
        with open(log_file, "ab") as f:
            f.write(data[first:first + 30])  # half a header: a broker mid-write
            f.flush()
            assert manager.catch_up("t-0").log_end_offset == end
            f.write(data[first + 30:])
        log = manager.catch_up("t-0")
        assert log.log_end_offset == batches[-1].last_offset + 1
        assert [r[4] for r in records_of(log, "read_uncommitted")] == [b"lat-%d" % i for i in range(100)]
    finally:
        manager.close()


def test_a_broker_killed_mid_write_under_a_live_mount(kafka_broker, mount):
    """kill -9 of the broker while it takes writes: the mount serves every acknowledged
    record, whole, and changes nothing in the directory it follows."""
    broker = kafka_broker()
    broker.create_topic("events", 1)
    m = mount(broker.log_dir, "--read-only")
    acked: list[int] = []
    p = producer(broker, acks="all", linger_ms=1)

    def delivered(err, msg):
        if err is None:
            acked.append(int(msg.value().split(b"-")[1]))

    i = 0
    deadline = Deadline(DEADLINE_S, "5000 acknowledged records")
    while len(acked) < 5000:
        deadline.check(f"{len(acked)} so far")
        p.produce("events", value=b"event-%d-" % i + b"y" * 200, on_delivery=delivered)
        p.poll(0)
        i += 1
    broker.kill()
    p.flush(1)  # (whatever was in flight stays unacknowledged)
    before = tree_digest(broker.log_dir)
    part = m.path / "events-0"
    lines = sh("cat values", part).out.splitlines()
    numbers = [int(line.split("-")[1]) for line in lines]
    assert all(line == f"event-{n}-" + "y" * 200 for line, n in zip(lines, numbers))
    assert numbers == list(range(len(numbers)))  # in order, nothing torn or spliced
    assert set(acked) <= set(numbers)
    assert sh("ls by-offset | wc -l", part).out.strip() == str(len(numbers))
    assert tree_digest(broker.log_dir) == before
    assert "Traceback" not in m.log_text()


def test_the_brokers_cleaner_swap_is_seen_whole(kafka_broker, mount):
    """A compacted topic cleaned by the broker's own log cleaner under a live mount: readers
    see the old segments or the cleaned ones, never a mix, and then exactly what Kafka's
    consumer reads; a record read before the cleaner removed it reads ENOENT then."""
    broker = kafka_broker(log_cleaner_backoff_ms=100)
    broker.create_topic("latest", 1, {"cleanup.policy": "compact", "segment.bytes": "1048576",
                                      "min.cleanable.dirty.ratio": "0.01",
                                      "delete.retention.ms": "0"})
    m = mount(broker.log_dir, "--read-only")
    part = m.path / "latest-0"
    p = producer(broker)
    p.produce("latest", key=b"key-0", value=b"v-0-" + b"z" * 1000)
    flushed(p)
    # read before newer values of its key exist: the mount and the kernel hold it
    first = wait_until(lambda: sh("cat by-offset/0", part, check=False).out, "by-offset/0")
    assert first.startswith("v-0-")
    for i in range(1, 4000):
        p.produce("latest", key=b"key-%d" % (i % 20), value=b"v-%d-" % i + b"z" * 1000)
    flushed(p)
    log_dir = broker.log_dir / "latest-0"
    cleaned = 0
    deadline = time.monotonic() + DEADLINE_S
    while cleaned < 2 or not (broker.log_dir / "cleaner-offset-checkpoint").read_text().count(
            "latest 0"):
        lines = sh("cat values", part, deadline=deadline).out.splitlines()
        offsets = [int(x) for x in sh("ls -U by-offset", part, deadline=deadline).out.split()]
        assert all(line.startswith("v-") and line.endswith("z" * 1000) for line in lines)
        assert offsets == sorted(offsets)
        if len(offsets) < 4000:  # the cleaner removed records: count the passes seen
            cleaned += 1
        if time.monotonic() > deadline:
            pytest.fail("the broker's cleaner did not clean within the deadline")
    assert any(name.endswith(".log") for name in os.listdir(log_dir))

    def same_as_the_consumer() -> bool:  # (the cleaner may pass again meanwhile: both move on)
        expected = consume_all(broker, "latest", 0, "read_uncommitted")
        got = sh("jq -c '[.offset, .payload]' records.jsonl", part).out.splitlines()
        return got == [f'[{o},"{v.decode()}"]' for o, _, _, _, v, _ in expected]

    wait_until(same_as_the_consumer, "the mount to serve what Kafka's consumer reads")
    gone = sh("cat by-offset/0", part, check=False)  # (not in what the consumer read)
    assert gone.returncode == 1 and "No such file" in gone.err
    wait_until(lambda: sh("stat by-offset/0", part, check=False).returncode, "stat to fail")
    assert "Traceback" not in m.log_text()


def test_consumer_groups_as_kafka_consumer_groups_describes_them(kafka_broker, mount):
    """A consumer group commits offsets through the broker; the live mount's
    ``consumer-groups/<group>/describe`` has the rows ``kafka-consumer-groups --describe``
    prints (columns split on whitespace: the tool pads to its own widths)."""
    from helpers.kafka import run_tool

    broker = kafka_broker()
    broker.create_topic("orders", 2)
    p = producer(broker)
    for i in range(300):
        p.produce("orders", value=b"o-%d" % i, partition=i % 2)
    flushed(p)
    m = mount(broker.log_dir, "--read-only")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "billing",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "log_level": 0})
    consumer.assign([TopicPartition("orders", 0, 0), TopicPartition("orders", 1, 0)])
    seen = 0
    deadline = Deadline(DEADLINE_S, "the consumer's 200 records")
    while seen < 200:
        deadline.check(f"{seen} so far")
        message = consumer.poll(1.0)
        if message is not None and not message.error():
            seen += 1
    consumer.commit(asynchronous=False)
    consumer.close()
    tool = run_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
                    "--bootstrap-server", broker.bootstrap, "--describe", "--group", "billing")
    expected = [line.split() for line in tool.stdout.decode().splitlines()
                if line.startswith(("GROUP ", "billing "))]
    assert len(expected) == 3
    describe = m.path / "consumer-groups" / "billing" / "describe"
    got = wait_until(lambda: [line.split() for line in describe.read_text().splitlines()]
                     if describe.exists() else None, "the group's describe file")
    assert got == expected
