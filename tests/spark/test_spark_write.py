"""Batch writes through Spark (``df.write.format("kfs")``): the columns of Spark's Kafka sink,
Kafka's default partitioner, and each task a transaction the driver commits or aborts."""

from pathlib import Path

import pytest
from kafka.partitioner.default import murmur2 as oracle_murmur2

from kfs.spark.partitioner import StickyPartitioner, murmur2, partition_for_key
from helpers.shell import sh
from helpers.waits import Lines, wait_until
from storage import LogManager
from storage.records.control import ControlRecordType, end_transaction_marker


def batches(backing, name):
    """(header, records) of every batch of a partition, in offset order."""
    mgr = LogManager(backing, read_only=True)
    try:
        out = []
        for segment in mgr.get(name).segments.all():
            for pos, header in segment.scan_batches(0):
                batch = segment.read_batch(pos, header)
                out.append((batch, batch.records()))
        return out
    finally:
        mgr.close()


def data_records(backing, name):
    return [r for b, rs in batches(backing, name) if not b.is_control_batch for r in rs]


def new_topic(backing, name, partitions):
    mgr = LogManager(backing)
    for p in range(partitions):
        mgr.create(f"{name}-{p}")
    mgr.close()


def test_murmur2_matches_kafka(tmp_path):
    import random

    rnd = random.Random(7)
    for n in range(64):
        data = bytes(rnd.randrange(256) for _ in range(n))
        assert murmur2(data) & 0xFFFFFFFF == oracle_murmur2(data) & 0xFFFFFFFF
    # values Kafka's own tests pin (UtilsTest.testMurmur2 / DefaultPartitionerTest)
    assert partition_for_key(b"21", 3) == (murmur2(b"21") & 0x7FFFFFFF) % 3
    assert murmur2(b"21") == -973932308


def test_sticky_partitioner_spreads_keyless_records():
    sticky = StickyPartitioner(4, batch_size=100)
    seen = [sticky.next(10) for _ in range(1000)]
    assert set(seen) == {0, 1, 2, 3}
    assert all(len(set(seen[i:i + 10])) == 1 for i in range(0, 1000, 10))


def test_write_then_read_back(spark, tmp_path):
    backing = tmp_path / "backing"
    new_topic(backing, "orders", 3)
    rows = [(f"k{i % 17}", f"value {i}", [("h", b"x")] if i % 5 == 0 else []) for i in range(300)]
    df = spark.createDataFrame(rows, "key string, value string, headers array<struct<key:string,value:binary>>")
    df.repartition(4).write.format("kfs").option("path", str(backing)).option(
        "topic", "orders").mode("append").save()
    got = {}
    for p in range(3):
        for record in data_records(backing, f"orders-{p}"):
            key = record.key.decode()
            assert partition_for_key(record.key, 3) == p  # Kafka's default partitioner
            got[record.value.decode()] = (key, list(record.headers))
    assert got == {v: (k, list(h)) for k, v, h in rows}
    read = spark.read.format("kfs").option("path", str(backing)).option(
        "subscribe", "orders").option("includeHeaders", "true").load()
    assert sorted(r.value.decode() for r in read.collect()) == sorted(v for _, v, _ in rows)


def test_each_task_is_a_committed_transaction(spark, tmp_path):
    backing = tmp_path / "backing"
    new_topic(backing, "events", 1)
    df = spark.range(0, 1000, numPartitions=3).selectExpr("cast(id as string) as value")
    df.write.format("kfs").option("path", str(backing)).option("topic", "events").mode("append").save()
    all_batches = batches(backing, "events-0")
    data = [b for b, _ in all_batches if not b.is_control_batch]
    markers = [b for b, _ in all_batches if b.is_control_batch]
    producers = {b.producer_id for b in data}
    assert len(producers) == 3 and all(b.is_transactional for b in data)
    assert {m.producer_id for m in markers} == producers  # one marker per task's transaction
    assert all(end_transaction_marker(m).control_type == ControlRecordType.COMMIT for m in markers)
    for pid in producers:  # each marker follows its transaction's data
        last_data = max(b.last_offset for b in data if b.producer_id == pid)
        assert [m.base_offset for m in markers if m.producer_id == pid][0] > last_data
    values = sorted(int(r.value) for r in data_records(backing, "events-0"))
    assert values == list(range(1000))


def test_failed_job_leaves_only_aborted_transactions(spark, tmp_path):
    """One task writes its transaction to events-0, then the append to small-0 is refused
    (max.message.bytes): the job fails and the driver aborts what was written. One task, so
    the outcome does not depend on how tasks interleave with the driver's abort (a task
    attempt still writing after it is the mount's transaction.timeout.ms to end)."""
    backing = tmp_path / "backing"
    new_topic(backing, "events", 1)
    new_topic(backing, "small", 1)
    (backing / "small.topic.properties").write_text("max.message.bytes=200\n")
    rows = [("events", str(i)) for i in range(100)] + [("small", "x" * 500)]
    df = spark.createDataFrame(rows, "topic string, value string").coalesce(1)
    with pytest.raises(Exception, match="exceeds max.message.bytes=200"):
        df.write.format("kfs").option("path", str(backing)).mode("append").save()
    all_batches = batches(backing, "events-0")
    data = [b for b, _ in all_batches if not b.is_control_batch]
    markers = [b for b, _ in all_batches if b.is_control_batch]
    assert sum(len(rs) for b, rs in all_batches if not b.is_control_batch) == 100
    assert {m.producer_id for m in markers} == {b.producer_id for b in data}
    assert all(end_transaction_marker(m).control_type == ControlRecordType.ABORT for m in markers)
    assert batches(backing, "small-0") == []


def test_topic_and_partition_columns_and_auto_create(spark, tmp_path):
    backing = tmp_path / "backing"
    new_topic(backing, "a", 2)
    rows = [("a", 1, b"to a-1"), ("b", None, b"to new topic b"), ("a", 0, b"to a-0")]
    df = spark.createDataFrame(rows, "topic string, partition int, value binary")
    df.write.format("kfs").option("path", str(backing)).mode("append").save()
    assert [r.value for r in data_records(backing, "a-1")] == [b"to a-1"]
    assert [r.value for r in data_records(backing, "a-0")] == [b"to a-0"]
    assert [r.value for r in data_records(backing, "b-0")] == [b"to new topic b"]
    assert data_records(backing, "b-0")[0].key is None


@pytest.mark.parametrize("ddl, message", [
    ("key string", "Required attribute 'value' not found"),
    ("value int", "value attribute type must be a string or binary"),
    ("value string, partition string", "partition attribute type must be a integer"),
    ("value string", "topic option required"),
])
def test_bad_columns_raise_and_write_nothing(spark, tmp_path, ddl, message):
    backing = tmp_path / "backing"
    new_topic(backing, "t", 1)
    df = spark.createDataFrame([], ddl)
    with pytest.raises(Exception, match=message):
        df.write.format("kfs").option("path", str(backing)).mode("append").save()
    assert batches(backing, "t-0") == []


@pytest.mark.parametrize("uri", ["s3://bucket/logs", "file:///tmp/kfs-never-written"])
def test_a_write_to_a_uri_is_refused_before_any_task_runs(spark, tmp_path, monkeypatch, uri):
    """An object store is read-only to kfs: the driver refuses it, so no task ever takes the
    URI for a local path (a directory named ``s3:`` in some node's working directory)."""
    monkeypatch.chdir(tmp_path)
    df = spark.createDataFrame([(b"v",)], "value binary")
    with pytest.raises(Exception, match="an object store is read-only to kfs"):
        df.write.format("kfs").option("path", uri).option("topic", "t").mode("append").save()
    assert list(tmp_path.iterdir()) == []
    assert not Path("/tmp/kfs-never-written").exists()


def test_tail_f_follows_a_spark_write_through_the_mount(spark, mount, tmp_path):
    """``tail -f values`` shows what a Spark write hands to ``append-batches`` (read_committed:
    once the driver commits), then goes on following shell appends."""
    import subprocess

    backing = tmp_path / "backing"
    new_topic(backing, "events", 1)
    m = mount(backing, "--isolation-level", "read_committed")
    tail = subprocess.Popen(["tail", "-f", "-n", "+1", str(m.path / "events-0" / "values")],
                            stdout=subprocess.PIPE)
    printed = Lines(tail.stdout, "tail -f", tail)
    seen = 0

    def lines(n):
        """The lines tail printed since the last call, once there are ``n`` more."""
        nonlocal seen
        printed.wait_for(seen + n, timeout=120)
        new, seen = printed.lines[seen:], len(printed.lines)
        return b"".join(new).decode().splitlines()

    try:
        df = spark.createDataFrame([(f"k{i}", f"spark-{i}") for i in range(100)],
                                   "key string, value string")
        df.repartition(2).write.format("kfs").option("path", str(backing)).option(
            "topic", "events").mode("append").save()
        assert sorted(lines(100)) == sorted(f"spark-{i}" for i in range(100))
        sh("echo shell-after >> events-0/append", m.path)
        assert lines(1) == ["shell-after"]
    finally:
        tail.kill()
        tail.wait(timeout=30)


def test_write_beside_a_read_only_mount_takes_the_lock(spark, mount, tmp_path):
    """A --read-only mount of the directory takes no writes (EROFS) and holds no lock: the
    tasks write under the .lock themselves, and the read-only mount follows what they wrote."""
    backing = tmp_path / "backing"
    new_topic(backing, "t", 1)
    m = mount(backing, "--read-only")
    df = spark.createDataFrame([(f"k{i}", f"spark-{i}") for i in range(100)],
                               "key string, value string")
    df.repartition(2).write.format("kfs").option("path", str(backing)).option(
        "topic", "t").mode("append").save()
    assert sorted(r.value for r in data_records(backing, "t-0")) == sorted(
        f"spark-{i}".encode() for i in range(100))
    wait_until(lambda: sh("grep -c spark- t-0/values", m.path, check=False).out.strip() == "100",
               "the read-only mount to follow the write")


def test_write_to_a_directory_a_broker_holds_says_so(spark, mount, tmp_path):
    """A process holding .lock with a POSIX lock (a broker's FileChannel.tryLock) beside a
    --read-only mount: the write fails at once naming that process and its lock, not with the
    read-only mount's EROFS, and writes nothing."""
    import subprocess
    import sys

    backing = tmp_path / "backing"
    new_topic(backing, "t", 1)
    m = mount(backing, "--read-only")
    broker = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
         "fcntl.lockf(fd, fcntl.LOCK_EX); print('locked', flush=True); sys.stdin.read()",
         str(backing / ".lock")], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert Lines(broker.stdout, "the lock holder", broker).readline() == b"locked\n"
        df = spark.createDataFrame([("k", "v")], "key string, value string")
        with pytest.raises(Exception) as info:
            df.write.format("kfs").option("path", str(backing)).option("topic", "t").option(
                "lockTimeoutMs", "600000").mode("append").save()
        text = str(info.value)
        assert f"process {broker.pid} (python" in text and "with a POSIX lock" in text, text
        assert "Read-only file system" not in text
    finally:
        broker.stdin.close()
        broker.wait(timeout=30)
    assert data_records(backing, "t-0") == []
    assert sh("cat t-0/values", m.path).stdout == b""


def test_write_beside_a_running_mount_goes_through_it(spark, mount, tmp_path):
    """The mount holds the .lock (one writer): tasks hand their batches to its append-batches
    files, so mount appends and Spark writes interleave without torn or duplicated offsets."""
    backing = tmp_path / "backing"
    new_topic(backing, "orders", 2)
    m = mount(backing)
    sh("seq 1 50 | sed 's/^/shell-/' >> orders-0/append", m.path)
    df = spark.createDataFrame([(f"k{i}", f"spark-{i}") for i in range(200)], "key string, value string")
    df.repartition(2).write.format("kfs").option("path", str(backing)).option(
        "topic", "orders").mode("append").save()
    sh("echo shell-last >> orders-0/append", m.path)
    values = []
    for p in range(2):
        names = sorted(int(n.name) for n in (m.path / f"orders-{p}" / "by-offset").iterdir())
        values += [(m.path / f"orders-{p}" / "by-offset" / str(o)).read_bytes() for o in names]
    assert sorted(v for v in values if v.startswith(b"spark-")) == sorted(
        f"spark-{i}".encode() for i in range(200))
    assert sum(v.startswith(b"shell-") for v in values) == 51
    read = spark.read.format("kfs").option("path", str(backing)).option("subscribe", "orders") \
        .option("isolation.level", "read_committed").load()
    assert sorted(r.value for r in read.collect()) == sorted(values)


def test_the_indexes_do_not_depend_on_how_many_tasks_wrote(spark, tmp_path):
    """Issue 25, item 14: 6 tasks (each opening the directory for its transaction, then the
    driver for the markers) writing into one partition leave the .index and .timeindex that
    recovery's rebuild of the same .log makes (Kafka's LogSegment.recover, per batch, as one
    uninterrupted writer), not an index interval restarted at 0 by every writer."""
    import shutil

    from storage import LogConfig
    from storage.log import Log

    backing = tmp_path / "backing"
    (tmp_path / "backing").mkdir()
    (backing / "t.topic.properties").write_text("index.interval.bytes=200\n")
    new_topic(backing, "t", 1)
    df = spark.range(0, 600, numPartitions=6).selectExpr("cast(id as string) as key",
                                                          "repeat('v', 40) as value")
    df.write.format("kfs").option("path", str(backing)).option("topic", "t").mode(
        "append").save()
    part = backing / "t-0"
    written = {p.name: p.read_bytes() for p in part.iterdir()
               if p.suffix in (".index", ".timeindex")}
    assert len(written["00000000000000000000.index"]) >= 6 * 8
    rebuilt = tmp_path / "rebuilt" / "t-0"
    rebuilt.mkdir(parents=True)
    for log_path in part.glob("*.log"):
        shutil.copyfile(log_path, rebuilt / log_path.name)
    Log(rebuilt, "t", 0, LogConfig(index_interval_bytes=200), had_clean_shutdown=False).close()
    assert {name: (rebuilt / name).read_bytes() for name in written} == written
