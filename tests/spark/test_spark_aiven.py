"""PySpark over Kafka's tiered storage as Aiven's RemoteStorageManager wrote it (Kafka 4.1.1 with
the plugin, ``tests/fixtures/aiven-tiered``): option ``remote.config`` (the broker's properties)
says which layout, where the remote tier is and its key ring; every topic at both isolation
levels equals what a real KafkaConsumer read, headers included."""

import base64
import json

import pytest

from helpers.aiven import TOPICS, expected
from helpers.paths import AIVEN_TIERED

needs_fixtures = pytest.mark.needs_fixture("aiven-tiered")
TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def b64(value):
    return None if value is None else base64.b64encode(bytes(value)).decode("ascii")


def as_expected(row):
    epoch_ms = round(row.timestamp.timestamp() * 1000)
    return {"partition": row.partition, "offset": row.offset, "timestamp": epoch_ms,
            "timestampType": TIMESTAMP_TYPES[row.timestampType], "key_b64": b64(row.key),
            "value_b64": b64(row.value),
            "headers": [[h.key, b64(h.value)] for h in row.headers or []]}


@needs_fixtures
@pytest.mark.parametrize("run", ["B", "C"])
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_spark_reads_the_aiven_tier_configured_by_the_broker_properties(spark, run,
                                                                         isolation):
    reader = (spark.read.format("kfs").option("path", str(AIVEN_TIERED / run / "logdir"))
              .option("remote.config", str(AIVEN_TIERED / run / "broker.properties"))
              .option("subscribe", ",".join(TOPICS)).option("includeHeaders", "true")
              .option("isolation.level", isolation))
    rows = reader.load().collect()
    for topic in TOPICS:
        got = sorted((as_expected(r) for r in rows if r.topic == topic),
                     key=lambda r: (r["partition"], r["offset"]))
        assert got == expected(run, topic, isolation), (run, topic)


@needs_fixtures
def test_the_standalone_cluster_reads_the_encrypted_tier_on_both_workers(spark_cluster):
    """Run C on a standalone master and two one-core workers: each task opens its partition's
    remote tier itself, configured by the broker's properties (the file and the key ring at
    the same path on every node)."""
    run = AIVEN_TIERED / "C"
    df = (spark_cluster.session.read.format("kfs")
          .option("path", str(run / "logdir"))
          .option("remote.config", str(run / "broker.properties"))
          .option("subscribe", ",".join(TOPICS)).option("includeHeaders", "true")
          .option("isolation.level", "read_committed")
          .option("maxRecordsPerPartition", "400").load())
    assert df.rdd.getNumPartitions() >= 4
    rows, tasks = spark_cluster.tasks_by_executor(df.collect)
    for topic in TOPICS:
        got = sorted((as_expected(r) for r in rows if r.topic == topic),
                     key=lambda r: (r["partition"], r["offset"]))
        assert got == expected("C", topic, "read_committed"), topic
    assert len(tasks) == 2 and all(n > 0 for n in tasks.values()), tasks


@needs_fixtures
def test_a_stream_reads_the_remote_tier_then_the_local_log(spark):
    """``readStream`` from earliest with ``remote.config`` (run B, zstd chunks): the
    micro-batches hold the remote segments' records below the local log's, as the consumer
    read them."""
    from helpers.waits import DEADLINE_S, within

    run = AIVEN_TIERED / "B"
    query = (spark.readStream.format("kfs").option("path", str(run / "logdir"))
             .option("remote.config", str(run / "broker.properties"))
             .option("subscribe", "plain").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "1000").load()
             .selectExpr("offset", "value")
             .writeStream.format("memory").queryName("aiven_stream").start())
    try:
        within(DEADLINE_S, "the stream's micro-batches", query.processAllAvailable)
        rows = spark.sql("select offset, value from aiven_stream order by offset").collect()
        assert [(r.offset, b64(r.value)) for r in rows] == \
            [(r["offset"], r["value_b64"]) for r in expected("B", "plain", "read_uncommitted")]
        assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"plain": {"0": 3174}}
    finally:
        query.stop()


@needs_fixtures
def test_spark_reads_the_plugins_root_alone(spark):
    """``path`` = the plugin's storage root the properties name (no broker log directory):
    the remote segments, by listing, up to where the remote tier ends."""
    run = AIVEN_TIERED / "A"
    rows = (spark.read.format("kfs").option("path", str(run / "remote"))
            .option("remote.config", str(run / "broker.properties"))
            .option("subscribe", "plain").option("includeHeaders", "true").load().collect())
    got = sorted((as_expected(r) for r in rows), key=lambda r: r["offset"])
    assert got == [r for r in expected("A", "plain", "read_uncommitted") if r["offset"] < 2881]
