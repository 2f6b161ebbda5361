"""A whole topic of a live multi-broker cluster, read with no broker's disk: the cluster is the
source of truth for partitions and offsets, the history comes straight from the bucket and only
the offsets after the remote tier through the brokers (issue 36). Equal to what Kafka's consumer
reads through the brokers.

The module's cluster (:class:`helpers.kafka.KafkaCluster`): three combined broker+controller
nodes of Kafka 4.1.1, replication factor 3, ``min.insync.replicas=2``, tiered storage on every
node into one directory S3Proxy serves as a bucket (LocalTieredStorage), ``__remote_log_metadata``
of three partitions. Its topic ``history`` of three partitions, led by different nodes, takes
records with keys and null keys, headers, null values, lz4 and zstd batches, and a committed and
an aborted transaction, until most of each partition is remote-only.

kfs reads it as the Python library (``kfs.read(None, **{"kafka.bootstrap.servers": ...,
"remote.path": "s3://..."})``) and as Spark ``format("kfs")`` on the standalone cluster (a master
and two workers, the bucket's credentials as ``spark.executorEnv.AWS_*``), at both isolation
levels; the consumer (confluent-kafka, from each partition's log start to its high watermark)
is the peer, and on the Spark cluster Spark's own Kafka source (``format("kafka")``, its jars
from ``scripts/spark-kafka/pom.xml``) running the same job.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import types
from pathlib import Path

import pytest
from helpers.kafka import (
    SEGMENT_BYTES,
    TIERED_TOPIC_CONFIG,
    KafkaCluster,
    consume_all,
    flushed,
    kafka_missing,
    spark_kafka_jars,
    spark_kafka_missing,
)
from helpers.java_server import free_port
from helpers.kfs import kfs_command, kfs_env
from helpers.mounts import Mounter
from helpers.needs import unavailable
from helpers.paths import REPO
from helpers.waits import DEADLINE_S, Lines, wait_until, within

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900),
              pytest.mark.needs_modules("pyspark", "pyarrow", "confluent_kafka")]

TOPIC = "history"
PARTITIONS = 3
ISOLATIONS = ("read_uncommitted", "read_committed")
RECORDS_PER_PARTITION = 25_000  # ~6 segments of 1 MiB: most of each partition remote-only


def _producer(cluster: KafkaCluster, **config):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0, "linger.ms": 5,
                     "acks": "all", **config})


def _record(n: int) -> dict:
    """The n-th plain record: a null key every 11th, a null value every 97th, headers every
    5th (a null header value every 13th)."""
    headers = [("n", b"%d" % n)] if n % 5 == 0 else []
    if n % 13 == 0:
        headers.append(("empty", None))
    return {"key": None if n % 11 == 0 else b"k%d" % (n % 17),
            "value": None if n % 97 == 0 else os.urandom(150).hex().encode(),
            "headers": headers or None}


def produce(cluster: KafkaCluster, count: int, start: int = 0) -> None:
    """``count`` records into each partition, lz4 and zstd by turns of 1000; before them (on
    the first call) a committed and an aborted transaction into every partition."""
    lz4 = _producer(cluster, **{"compression.type": "lz4"})
    zstd = _producer(cluster, **{"compression.type": "zstd"})
    if start == 0:
        txn = _producer(cluster, **{"compression.type": "zstd", "transactional.id": "cluster"})
        txn.init_transactions(60)
        for commit in (True, False):
            txn.begin_transaction()
            for i in range(90):
                txn.produce(TOPIC, partition=i % PARTITIONS, key=b"t%d" % i, value=b"%s-%d" % (
                    b"committed" if commit else b"aborted", i), headers=[("txn", b"%d" % commit)])
            flushed(txn)
            (txn.commit_transaction if commit else txn.abort_transaction)(60)
    for n in range(start, start + count):
        p = (lz4, zstd)[n // 1000 % 2]
        for partition in range(PARTITIONS):
            p.produce(TOPIC, partition=partition, **_record(n))
        if n % 1000 == 999:
            flushed(p)
    flushed(lz4)
    flushed(zstd)


@pytest.fixture(scope="module")
def live(s3_server, tmp_path_factory):
    """The module's cluster (``.cluster``) with ``history`` produced and mostly remote-only;
    ``.remote`` the bucket URI of its remote tier."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    root = tmp_path_factory.mktemp("kafka-cluster")
    bucket = s3_server.new_bucket("cluster")
    cluster = KafkaCluster(root, 3, remote_storage_dir=s3_server.base_dir / bucket / "rsm")
    try:
        cluster.start()
        cluster.create_topic(TOPIC, PARTITIONS, TIERED_TOPIC_CONFIG)
        produce(cluster, RECORDS_PER_PARTITION)
        leaders = cluster.leaders(TOPIC)
        assert len(set(leaders.values())) > 1, leaders  # led by different nodes
        for partition, leader in leaders.items():
            cluster.node(leader).wait_tiered(TOPIC, partition, segments=2)
        yield types.SimpleNamespace(cluster=cluster, remote=f"s3://{bucket}/rsm",
                                    bucket_dir=s3_server.base_dir / bucket / "rsm")
    finally:
        cluster.tear_down()


def consumed(cluster: KafkaCluster, isolation: str) -> dict[int, list[tuple]]:
    """{partition: the consumer's records from its log start}: (offset, timestamp, timestamp
    type, key, value, headers)."""
    return {p: consume_all(cluster, TOPIC, p, isolation) for p in range(PARTITIONS)}


def as_records(table) -> dict[int, list[tuple]]:
    """kfs's rows (``kfs.read``'s or Spark's columns) in the consumer's shape."""
    out: dict[int, list[tuple]] = {p: [] for p in range(PARTITIONS)}
    for row in table:
        headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
        out[row["partition"]].append((row["offset"], row["timestamp"], row["timestampType"],
                                      row["key"], row["value"], headers))
    return {p: sorted(rows) for p, rows in out.items()}


def library_records(live, isolation: str, **options) -> dict[int, list[tuple]]:
    import kfs

    table = kfs.read_table(None, topics=TOPIC, isolation_level=isolation, includeHeaders=True,
                           **{"kafka.bootstrap.servers": live.cluster.bootstrap,
                              "remote.path": live.remote, **options})
    rows = table.to_pylist()
    for row in rows:
        row["timestamp"] = int(row["timestamp"].timestamp() * 1000)
    return as_records(rows)


def spark_records(frame) -> dict[int, list[tuple]]:
    """A Spark read's rows (a DataFrame of the Kafka source's schema) as :func:`consumed`
    gives the consumer's."""
    def b(value):
        return None if value is None else bytes(value)

    rows = frame.selectExpr("partition", "offset", "unix_millis(timestamp) AS timestamp",
                            "timestampType", "key", "value", "headers").collect()
    return as_records([{**row.asDict(recursive=True), "key": b(row.key), "value": b(row.value),
                        "headers": [{"key": h.key, "value": b(h.value)}
                                    for h in row.headers or ()]} for row in rows])


def check_shape(records: dict[int, list[tuple]], isolation: str) -> None:
    """The consumer's records hold what the module produced."""
    for rows in records.values():
        assert len(rows) >= RECORDS_PER_PARTITION
        values = [r[4] for r in rows]
        assert None in values and any(r[3] is None for r in rows)
        assert any(("empty", None) in r[5] for r in rows)
        assert (any(v and v.startswith(b"aborted-") for v in values)
                == (isolation == "read_uncommitted"))
        assert any(v and v.startswith(b"committed-") for v in values)


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """This process's AWS_* variables for the bucket (``kfs.read`` runs here)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_library_reads_the_cluster_as_the_consumer_does(live, s3_env, isolation):
    want = consumed(live.cluster, isolation)
    check_shape(want, isolation)
    assert library_records(live, isolation) == want


def test_the_history_comes_from_the_bucket(live, s3_env):
    """The plan reads every offset of the live remote segments from the bucket (most of the
    topic) and only the offsets after them through the brokers, each offset once."""
    from kfs.reading.cluster import plan_cluster_ranges
    from kfs.reading.options import parse_options

    opts = parse_options({"kafka.bootstrap.servers": live.cluster.bootstrap,
                          "subscribe": TOPIC, "remote.path": live.remote})
    ranges = plan_cluster_ranges(opts, SEGMENT_BYTES)
    for partition in range(PARTITIONS):
        mine = [r for r in ranges if r.partition == partition]
        assert all(a.end == b.start for a, b in zip(mine, mine[1:]))  # no gap, no overlap
        remote = [r for r in mine if not r.via_brokers]
        brokers = [r for r in mine if r.via_brokers]
        assert remote and all(r.remote_segments for r in remote)
        assert len(brokers) == 1 and brokers[0].start == remote[-1].end  # the tail alone
        assert sum(r.size for r in remote) > sum(r.size for r in brokers)


def test_metadata_partitions_as_the_brokers_choose_them(live):
    """Every ``__remote_log_metadata`` record is in the partition kfs computes for its
    topic-partition (Kafka's ``RemoteLogMetadataTopicPartitioner``, held against where the
    brokers put them), so reading only those misses nothing."""
    from confluent_kafka import Consumer, TopicPartition

    from storage.cluster.remote_metadata import metadata_partition
    from storage.remote.metadata import REMOTE_LOG_METADATA_TOPIC, deserialize

    seen = set()
    for n in range(3):
        consumer = Consumer({"bootstrap.servers": live.cluster.bootstrap, "log_level": 0,
                             "group.id": "kfs-test", "enable.auto.commit": False})
        try:
            tp = TopicPartition(REMOTE_LOG_METADATA_TOPIC, n)
            low, high = consumer.get_watermark_offsets(tp, timeout=30)
            consumer.assign([TopicPartition(REMOTE_LOG_METADATA_TOPIC, n, low)])
            position = low
            while position < high:
                for m in consumer.consume(1000, timeout=1):
                    if m.error() is None:
                        position = m.offset() + 1
                        metadata = deserialize(m.value())
                        tip = getattr(metadata, "topic_id_partition", None) or getattr(
                            getattr(metadata, "segment_id", None), "topic_id_partition", None)
                        if tip is not None:
                            seen.add((tip.topic, tip.partition))
                            assert metadata_partition(tip.topic_id, tip.partition, 3) == n, tip
        finally:
            consumer.close()
    assert seen == {(TOPIC, p) for p in range(PARTITIONS)}


def test_a_starting_timestamp_is_asked_of_the_cluster(live, s3_env):
    """``startingTimestamp``: each partition starts at its first record whose timestamp is at
    least it (the brokers' ListOffsets, one request for every partition), as the consumer's
    records say."""
    want = consumed(live.cluster, "read_uncommitted")
    middle = want[0][len(want[0]) // 2][1]
    got = library_records(live, "read_uncommitted", startingTimestamp=middle)
    assert got == {p: [r for r in rows if r[0] >= next(x[0] for x in rows if x[1] >= middle)]
                   for p, rows in want.items()}
    assert all(got.values())


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_spark_on_the_standalone_cluster_reads_the_cluster_as_the_consumer_does(
        live, s3_cluster, isolation):
    """No broker's directory on any node: the options are Spark's Kafka source's, with
    remote.path for the remote tier."""
    want = consumed(live.cluster, isolation)

    def read():
        df = (s3_cluster.session.read.format("kfs")
              .option("kafka.bootstrap.servers", live.cluster.bootstrap)
              .option("subscribe", TOPIC).option("remote.path", live.remote)
              .option("includeHeaders", "true").option("kafka.isolation.level", isolation)
              .option("maxRecordsPerPartition", "3000").load())
        return spark_records(df)

    got, tasks = s3_cluster.tasks_by_executor(read)
    assert got == want
    assert len(tasks) == 2 and all(tasks.values()), tasks  # read on both workers


@pytest.fixture(scope="module")
def kafka_source(s3_cluster):
    """``s3_cluster``'s session with Spark's own Kafka source (``format("kafka")``) added by
    ``ADD JAR`` (what ``spark.jars`` holds in a job's build): the executors fetch the jars from
    the driver, and the driver's lookup finds the source in the session's class loader.
    ``spark.jars`` on the build would reach only the executors here: the driver JVM was
    started before the session, with no settings (``start_spark_jvm``). This thread's class
    loader is put back after the module. unavailable() when the jars were not fetched."""
    missing = spark_kafka_missing()
    if missing:
        unavailable(missing)
    session = s3_cluster.session
    thread = session._jvm.java.lang.Thread.currentThread()
    loader = thread.getContextClassLoader()  # (ADD JAR sets the session's on this thread)
    try:
        for jar in spark_kafka_jars():
            session.sql(f"ADD JAR '{jar}'")
        yield session
    finally:
        thread.setContextClassLoader(loader)


# what the module's topic holds, per partition: counted in Spark SQL over a read's rows
SHAPE = ["count(*) AS records", "count_if(key IS NULL) AS null_keys",
         "count_if(value IS NULL) AS null_values",
         "count_if(exists(headers, h -> h.value IS NULL)) AS null_header_values",
         "count_if(CAST(value AS STRING) LIKE 'committed-%') AS committed",
         "count_if(CAST(value AS STRING) LIKE 'aborted-%') AS aborted"]


def same_job_both_sources(live, session, isolation: str = "read_uncommitted",
                          ending: str = "latest"):
    """The same job on ``session`` twice: ``format("kafka")`` with Spark's options (Spark's own
    source: everything through the brokers) and ``format("kfs")`` with the same options and
    ``remote.path``, from the earliest offsets to ``ending`` (``latest`` or Spark's JSON).
    Asserts the same schema and the same rows, each as many times (topic, partition, offset,
    key, value, timestamp, timestampType, headers); kfs's DataFrame."""
    from pyspark.sql import functions as F

    options = {"kafka.bootstrap.servers": live.cluster.bootstrap, "subscribe": TOPIC,
               "startingOffsets": "earliest", "endingOffsets": ending,
               "includeHeaders": "true", "kafka.isolation.level": isolation}

    def job(source: str, **more):
        reader = session.read.format(source)
        for key, value in {**options, **more}.items():
            reader = reader.option(key, value)
        return reader.load()

    kafka, kfs = job("kafka"), job("kfs", **{"remote.path": live.remote})
    assert kfs.schema == kafka.schema
    # each distinct row's count in Kafka's read less kfs's: 0 for every row when they agree
    differ = (kafka.withColumn("side", F.lit(1)).unionByName(kfs.withColumn("side", F.lit(-1)))
              .groupBy(*kafka.columns).agg(F.sum("side").alias("surplus"))
              .where("surplus != 0").select("partition", "offset", "surplus"))
    assert differ.limit(10).collect() == []
    return kfs




@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_spark_on_the_standalone_cluster_reads_as_spark_kafka_source_does(
        live, kafka_source, isolation):
    """The same job twice on the standalone cluster, no broker's directory on any node:
    ``format("kafka")`` with Spark's options (Spark's own source: everything through the
    brokers) and ``format("kfs")`` with the same options and ``remote.path``. Same schema;
    the same rows, each as many times (topic, partition, offset, key, value, timestamp,
    timestampType, headers): none differs; and they hold what the module produced (null
    keys, values and header values, the committed transaction, the aborted one only at
    read_uncommitted)."""
    from pyspark.sql import functions as F

    kfs = same_job_both_sources(live, kafka_source, isolation=isolation)
    shape = {r.partition: r for r in kfs.groupBy("partition").agg(
        *[F.expr(e) for e in SHAPE]).collect()}
    assert sorted(shape) == list(range(PARTITIONS))
    for r in shape.values():
        assert r.records >= RECORDS_PER_PARTITION, r
        assert r.null_keys and r.null_values and r.null_header_values and r.committed, r
        assert bool(r.aborted) == (isolation == "read_uncommitted"), r


def test_records_produced_while_reading_end_where_the_read_was_planned(live, s3_env):
    """A read is planned (ends fixed at the high watermarks), records are produced, then it is
    read: it holds exactly the consumer's records below the planned ends."""
    import kfs.library

    planned = kfs.library.plan(None, {"topics": TOPIC, "includeHeaders": True,
                                      "kafka.bootstrap.servers": live.cluster.bootstrap,
                                      "remote.path": live.remote})
    ends = {r.partition: r.end for r in planned.ranges}
    produce(live.cluster, 500, start=RECORDS_PER_PARTITION)
    table = planned.reader(1000).read_all().to_pylist()
    for row in table:
        row["timestamp"] = int(row["timestamp"].timestamp() * 1000)
    got = as_records(table)
    want = consumed(live.cluster, "read_uncommitted")
    assert got == {p: [r for r in rows if r[0] < ends[p]] for p, rows in want.items()}
    assert all(len(want[p]) > len(got[p]) for p in range(PARTITIONS))  # more came meanwhile


def test_spark_sources_agree_while_records_are_produced(live, kafka_source):
    """Both Spark sources read to the same planned ends (the high watermarks when the job was
    built, as Spark's JSON ``endingOffsets``) while a producer adds records: the same rows,
    the consumer's below those ends, none of the records produced meanwhile."""
    import threading

    ends = {p: _watermarks(live, p)[1] for p in range(PARTITIONS)}
    producing = threading.Thread(target=produce, args=(live.cluster, 300, 2 * 10**6))
    producing.start()
    try:
        kfs = same_job_both_sources(live, kafka_source,
                                    ending=json.dumps({TOPIC: {str(p): e
                                                               for p, e in ends.items()}}))
        got = spark_records(kfs)
    finally:
        producing.join()
    want = consumed(live.cluster, "read_uncommitted")
    assert got == {p: [r for r in rows if r[0] < ends[p]] for p, rows in want.items()}
    assert all(len(want[p]) > len(got[p]) for p in range(PARTITIONS))  # more came meanwhile


def test_a_stream_serves_the_history_then_new_records_and_restarts_where_it_stopped(
        live, s3_cluster, tmp_path):
    """``readStream.format("kfs")`` over the cluster from the earliest offsets, at most
    ``maxOffsetsPerTrigger`` offsets a micro-batch (the history from the bucket in the first
    ones), into Parquet with a checkpoint; stopped, records produced, started again from the
    checkpoint: the output is the consumer's records once each, and the checkpoint's offsets
    are Spark's Kafka source's JSON, ending at the high watermarks."""
    import json

    session = s3_cluster.session
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> None:
        query = (session.readStream.format("kfs")
                 .option("kafka.bootstrap.servers", live.cluster.bootstrap)
                 .option("subscribe", TOPIC).option("remote.path", live.remote)
                 .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "40000")
                 .load().selectExpr("partition", "offset", "key", "value")
                 .writeStream.format("parquet").option("path", str(out))
                 .option("checkpointLocation", str(checkpoint)).start())
        try:  # (processAllAvailable takes no timeout: bounded by within(), stop() ends it)
            within(DEADLINE_S * 2, "the stream's micro-batches", query.processAllAvailable)
        finally:
            query.stop()

    run()
    first = len(_offset_files(checkpoint))
    assert first >= 2  # the history cut into micro-batches
    produce(live.cluster, 200, start=RECORDS_PER_PARTITION + 1000)
    run()
    batches = _offset_files(checkpoint)
    assert len(batches) > first
    last = json.loads(batches[-1].read_text().splitlines()[-1])
    want = consumed(live.cluster, "read_uncommitted")
    assert last == {TOPIC: {str(p): want[p][-1][0] + 1 for p in range(PARTITIONS)}}
    rows = session.read.parquet(str(out)).collect()
    got = sorted((r.partition, r.offset, None if r.key is None else bytes(r.key),
                  None if r.value is None else bytes(r.value)) for r in rows)
    assert got == sorted((p, r[0], r[3], r[4]) for p, records in want.items() for r in records)


def _offset_files(checkpoint) -> list:
    """The checkpoint's offset log, one file per micro-batch (Spark's own ``.crc`` aside)."""
    return sorted((p for p in (checkpoint / "offsets").iterdir() if p.name.isdigit()),
                  key=lambda p: int(p.name))


def test_bad_cluster_options_are_one_clear_line(live, s3_env):
    import kfs

    with pytest.raises(ValueError, match="kafka.auto.offset.reset are not supported"):
        kfs.read(None, topics=TOPIC, **{"kafka.bootstrap.servers": live.cluster.bootstrap,
                                        "kafka.auto.offset.reset": "earliest"})
    with pytest.raises(ValueError, match='give option "path" or "kafka.bootstrap.servers"'):
        kfs.read("/tmp", topics=TOPIC, **{"kafka.bootstrap.servers": live.cluster.bootstrap})
    from storage.errors import UnknownTopicOrPartitionError

    with pytest.raises(UnknownTopicOrPartitionError):
        kfs.read(None, topics="nope", **{"kafka.bootstrap.servers": live.cluster.bootstrap})
    # a cluster that is not there: one line, naming it, with no secret in it
    script = ("import kfs\nkfs.read(None, topics='t', **{'kafka.bootstrap.servers': "
              "'127.0.0.1:1', 'kafka.sasl.jaas.config': 'org.apache.kafka.common.security."
              "plain.PlainLoginModule required username=\"u\" password=\"hunter2-secret\";', "
              "'kafka.security.protocol': 'SASL_PLAINTEXT', 'kafka.sasl.mechanism': 'PLAIN', "
              "'kafka.default.api.timeout.ms': '2000'})\n")
    out = subprocess.run([os.sys.executable, "-c", script], cwd=REPO, env=kfs_env(),
                         capture_output=True, text=True, timeout=DEADLINE_S)
    assert out.returncode != 0 and "127.0.0.1:1" in out.stderr.splitlines()[-1], out.stderr
    assert "hunter2-secret" not in out.stderr + out.stdout


def _remote_bases(live, partition: int) -> list[int]:
    """The base offsets of the partition's ``.log`` objects in the bucket now."""
    root = live.bucket_dir / "kafka-tiered-storage"
    return sorted(int(p.name[:20]) for d in root.glob(f"{TOPIC}-{partition}-*")
                  for p in d.glob("*.log"))


# -- the mount of a live cluster ---------------------------------------------------------------


def _bytes(value) -> bytes | None:
    """A records.jsonl field's bytes (a UTF-8 string, ``{"base64": ...}`` or null)."""
    if value is None or isinstance(value, bytes):
        return value
    return base64.b64decode(value["base64"]) if isinstance(value, dict) else value.encode()


def jsonl_records(path: Path) -> list[tuple]:
    """The records ``cat`` reads from a mount's ``records.jsonl``, in the consumer's shape."""
    text = subprocess.run(["cat", str(path)], capture_output=True, check=True).stdout
    out = []
    for line in text.decode().splitlines():
        r = json.loads(line)
        flat = r["headers"]
        headers = tuple((flat[i], _bytes(flat[i + 1])) for i in range(0, len(flat), 2))
        out.append((r["offset"], r["ts"], 0 if r["tstype"] == "create" else 1,
                    _bytes(r["key"]), _bytes(r["payload"]), headers))
    return out


@pytest.mark.fuse
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_mount_of_the_cluster_serves_what_the_consumer_reads(live, s3_env, tmp_path,
                                                                 isolation):
    """``kfs mount --read-only --bootstrap-server HOST:PORT --remote-path s3://… MNT``: every
    partition of the cluster's topics; each partition's ``records.jsonl`` (read by ``cat``) is
    the consumer's records at the mount's isolation level, ``by-offset`` serves the first
    offset (from the bucket) and the last (through the brokers), and only the offsets after
    the remote tier were fetched through the brokers (the mount's log says where each tail
    started)."""
    mounter = Mounter(tmp_path)
    try:
        mount = mounter(None, f"--remote-path={live.remote}", f"--isolation-level={isolation}",
                        cluster=live.cluster.bootstrap)
        names = os.listdir(mount.path)
        assert {f"{TOPIC}-{p}" for p in range(PARTITIONS)} <= set(names)
        want = consumed(live.cluster, isolation)
        for p in range(PARTITIONS):
            partition = mount.path / f"{TOPIC}-{p}"
            assert jsonl_records(partition / "records.jsonl") == want[p]
            for record in (want[p][0], want[p][-1]):
                assert (partition / "by-offset" / str(record[0])).read_bytes() == (record[4]
                                                                                    or b"")
            started = re.search(rf"{TOPIC}-{p}: offsets (\d+)\.\.(\d+) from the remote tier, "
                                rf"(\d+)\.\. through the brokers", mount.log_text())
            assert started, mount.log_text()[-3000:]
            first, last, tail = map(int, started.groups())
            assert first <= want[p][0][0] and tail == last + 1
            assert tail - first > 2 * (want[p][-1][0] - tail)  # most of it from the bucket
    finally:
        mounter.close_all()


@pytest.mark.fuse
def test_the_mount_of_the_cluster_follows_new_records_and_topics(live, s3_env, tmp_path):
    """On the mount of a live cluster, ``tail -f values`` shows records produced after it
    started, ``by-offset`` serves them, and a topic created after the mount is listed and
    read."""
    mounter = Mounter(tmp_path)
    tail = None
    try:
        mount = mounter(None, f"--remote-path={live.remote}", cluster=live.cluster.bootstrap)
        before = consume_all(live.cluster, TOPIC, 0, "read_uncommitted")[-1][4]
        tail = subprocess.Popen(["tail", "-n", "1", "-f", str(mount.path / f"{TOPIC}-0" /
                                                              "values")],
                                stdout=subprocess.PIPE)
        # each line waited for on tail's pipe, not on a clock (the deadline ends a hung test)
        lines = Lines(tail.stdout, "tail -f", tail)
        assert lines.readline() == (before or b"null") + b"\n"  # (it follows from here)
        producer = _producer(live.cluster)
        new = [b"followed-%d" % i for i in range(3)]
        for value in new:
            producer.produce(TOPIC, partition=0, value=value)
        flushed(producer)
        assert [lines.readline() for _ in new] == [value + b"\n" for value in new]
        last = consume_all(live.cluster, TOPIC, 0, "read_uncommitted")[-1]
        assert (mount.path / f"{TOPIC}-0" / "by-offset" / str(last[0])).read_bytes() == new[-1]

        live.cluster.create_topic("late", 1)
        producer.produce("late", partition=0, value=b"after the mount")
        flushed(producer)
        wait_until(lambda: "late-0" in os.listdir(mount.path), "late-0 listed")
        assert (mount.path / "late-0" / "values").read_bytes() == b"after the mount\n"
    finally:
        if tail is not None:
            tail.kill()
            tail.wait()
        mounter.close_all()


@pytest.mark.fuse
def test_the_mount_of_a_cluster_refuses_clearly_and_keeps_secrets(live, tmp_path):
    """A cluster is mounted read-only; its client settings come from ``--command-config``
    (so a password is never in a process's arguments); a cluster that does not answer fails
    the mount with one line naming it, and no secret in what is printed or logged."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(kfs_command("mount", f"--bootstrap-server={live.cluster.bootstrap}",
                                      str(mnt)), env=kfs_env(), capture_output=True, text=True,
                          timeout=120)
    assert (done.returncode, done.stderr) == (1, "kfs: error: a live cluster is mounted "
                                                 "--read-only (kfs reads a cluster, it does "
                                                 "not produce to it)\n")
    secret = "s3cret-of-the-cluster"
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\n"
                      "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule"
                      f' required username="alice" password="{secret}";\n'
                      "default.api.timeout.ms=3000\n")
    log = tmp_path / "mount.log"
    done = subprocess.run(kfs_command("mount", "--read-only", f"--log-file={log}",
                                      f"--bootstrap-server=127.0.0.1:{free_port()}",
                                      f"--command-config={config}", str(mnt)),
                          env=kfs_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and not os.path.ismount(mnt)
    assert done.stderr.startswith("kfs: error: cannot open the cluster kafka://127.0.0.1:")
    assert done.stderr.count("\n") == 1, done.stderr
    assert secret not in done.stderr + log.read_text()


def test_still_equal_after_remote_retention(live, s3_env, kafka_source):
    """``retention.bytes`` lowered: the brokers delete the oldest remote segments and move the
    log start; once the bucket holds no segment wholly below it, kfs reads from the new log
    start what the consumer reads, as the library and on the Spark cluster, where Spark's
    Kafka source reads the same rows."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    before = {p: consume_all(live.cluster, TOPIC, p, "read_uncommitted")[0][0]
              for p in range(PARTITIONS)}
    admin = live.cluster.admin()
    for future in admin.incremental_alter_configs([ConfigResource(
            "TOPIC", TOPIC, incremental_configs=[ConfigEntry(
                "retention.bytes", str(3 * SEGMENT_BYTES),
                incremental_operation=AlterConfigOpType.SET)])]).values():
        future.result(60)

    def settled(partition: int) -> bool:
        low, _ = _watermarks(live, partition)
        bases = _remote_bases(live, partition)
        return low > before[partition] and bool(bases) and bases[0] <= low and (
            len(bases) < 2 or bases[1] > low)

    for partition in range(PARTITIONS):
        wait_until(lambda: settled(partition), f"{TOPIC}-{partition}'s remote retention",
                   timeout=DEADLINE_S * 2)
    want = consumed(live.cluster, "read_uncommitted")
    assert all(want[p][0][0] > before[p] for p in range(PARTITIONS))
    assert library_records(live, "read_uncommitted") == want
    assert spark_records(same_job_both_sources(live, kafka_source)) == want


def _watermarks(live, partition: int) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": live.cluster.bootstrap, "group.id": "kfs-test",
                        "log_level": 0})
    try:
        return consumer.get_watermark_offsets(TopicPartition(TOPIC, partition), timeout=30)
    finally:
        consumer.close()


def test_a_leader_gone_mid_read_changes_nothing(live, s3_env, kafka_source):
    """A read planned, then the leader of a partition stopped (its replicas take over): the
    read completes with the consumer's records (the tail fetched from the new leader); on the
    Spark cluster then, both Spark sources read the same rows, the consumer's. Last in the
    module: the cluster runs on two nodes after it."""
    import kfs.library

    planned = kfs.library.plan(None, {"topics": TOPIC, "includeHeaders": True,
                                      "kafka.bootstrap.servers": live.cluster.bootstrap,
                                      "remote.path": live.remote})
    leader = live.cluster.leaders(TOPIC)[0]
    live.cluster.node(leader).stop()
    wait_until(lambda: live.cluster.leaders(TOPIC).get(0, leader) not in (leader, -1),
               f"a new leader of {TOPIC}-0")
    table = planned.reader(1000).read_all().to_pylist()
    for row in table:
        row["timestamp"] = int(row["timestamp"].timestamp() * 1000)
    want = consumed(live.cluster, "read_uncommitted")
    assert as_records(table) == want
    assert spark_records(same_job_both_sources(live, kafka_source)) == want
