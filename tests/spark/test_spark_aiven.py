"""PySpark over Kafka's tiered storage as Aiven's RemoteStorageManager wrote it (Kafka 4.1.1 with
the plugin, ``tests/fixtures/aiven-tiered``): option ``remote.config`` (the broker's properties)
says which layout, where the remote tier is and its key ring; every topic at both isolation
levels equals what a real KafkaConsumer read, headers included."""

import base64
import json

import pytest

from helpers.aiven import TOPICS, expected
from helpers.aiven import spark_row_as_expected as as_expected
from helpers.paths import AIVEN_TIERED

needs_fixtures = pytest.mark.needs_fixture("aiven-tiered")


def b64(value):
    return None if value is None else base64.b64encode(bytes(value)).decode("ascii")


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
