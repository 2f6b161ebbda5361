"""Streaming reads (``spark.readStream.format("kfs")``): per-partition Kafka offsets, new
appends in the next micro-batch, ``maxOffsetsPerTrigger``."""

import json

import pytest

from kfs.reading.options import parse_options
from helpers.waits import DEADLINE_S, within
from storage import LogManager


def append(backing, name, values):
    mgr = LogManager(backing)
    try:
        log = mgr.get(name) if name in mgr.partition_names() else mgr.create(name)
        log.append([v.encode() for v in values])
    finally:
        mgr.close()


def stream_reader(backing, **options):
    from kfs.spark.reader import spark_schema
    from kfs.spark.source import KfsStreamReader

    opts = {"path": str(backing), "subscribe": "orders", **options}
    return KfsStreamReader(opts, spark_schema(False))


@pytest.mark.needs_modules("pyspark")
def test_offsets_are_kafka_json_and_follow_appends(tmp_path):
    append(tmp_path, "orders-0", ["a", "b"])
    append(tmp_path, "orders-1", ["c"])
    reader = stream_reader(tmp_path, startingOffsets="earliest")
    start = reader.initialOffset()
    assert start == {"orders": {"0": 0, "1": 0}}
    end = reader.latestOffset(start, None)
    assert end == {"orders": {"0": 2, "1": 1}}
    parts = reader.partitions(start, end)
    assert sorted((p.rng.partition, p.rng.start, p.rng.end) for p in parts) == [(0, 0, 2), (1, 0, 1)]
    append(tmp_path, "orders-0", ["d"])
    append(tmp_path, "orders-2", ["e"])  # a new partition starts at its earliest offset
    later = reader.latestOffset(end, None)
    assert later == {"orders": {"0": 3, "1": 1, "2": 1}}
    assert sorted((p.rng.partition, p.rng.start, p.rng.end)
                  for p in reader.partitions(end, later)) == [(0, 2, 3), (2, 0, 1)]
    assert json.loads(json.dumps(later)) == later
    assert stream_reader(tmp_path).initialOffset() == {"orders": {"0": 3, "1": 1, "2": 1}}


@pytest.mark.needs_modules("pyspark")
def test_rate_limit_shares_by_backlog():
    from kfs.spark.source import _rate_limit

    begin = {("t", 0): 0, ("t", 1): 10}
    latest = {("t", 0): 100, ("t", 1): 20}
    limited = _rate_limit(begin, latest, 55)
    assert limited == {("t", 0): 50, ("t", 1): 15}
    assert _rate_limit(begin, latest, 1000) == latest


def test_ending_offsets_refused_for_streams(tmp_path):
    with pytest.raises(ValueError, match="not supported by streaming"):
        parse_options({"path": str(tmp_path), "subscribe": "x", "endingOffsets": "latest"},
                      streaming=True)


def test_micro_batches_see_new_appends(spark, tmp_path):
    backing = tmp_path / "backing"
    # One writer stays open across the query, as a running mount does (a writer that closes
    # trims its index files, which a reader opening them at that moment must not race).
    writer = LogManager(backing)
    log = writer.create("orders-0")
    log.append([b"first", b"second"])
    query = (spark.readStream.format("kfs").option("path", str(backing))
             .option("subscribe", "orders").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "2").load()
             .selectExpr("cast(value as string) as value", "offset")
             .writeStream.format("memory").queryName("orders_stream").start())
    try:  # (processAllAvailable takes no timeout: bounded by within(), query.stop() ends it)
        within(DEADLINE_S, "the stream's first micro-batches", query.processAllAvailable)
        log.append([b"third", b"fourth", b"fifth"])
        within(DEADLINE_S, "the micro-batches of the new appends", query.processAllAvailable)
        rows = spark.sql("select value, offset from orders_stream order by offset").collect()
        assert [(r.value, r.offset) for r in rows] == [
            ("first", 0), ("second", 1), ("third", 2), ("fourth", 3), ("fifth", 4)]
        sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sizes and max(sizes) <= 2  # maxOffsetsPerTrigger
        assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"orders": {"0": 5}}
    finally:
        query.stop()
        writer.close()


@pytest.mark.needs_modules("pyspark")
def test_rate_limit_never_starves_a_partition():
    from kfs.spark.source import _rate_limit

    begin = {("t", 0): 0, ("t", 1): 0}
    # one offset for two partitions with a backlog each: Spark rounds small shares up
    assert _rate_limit(begin, {("t", 0): 1, ("t", 1): 1}, 1) == {("t", 0): 1, ("t", 1): 1}
    assert _rate_limit(begin, {("t", 0): 90, ("t", 1): 10}, 10) == {("t", 0): 9, ("t", 1): 1}


@pytest.mark.needs_fixture("kafka-written")
@pytest.mark.needs_modules("pyspark")
def test_a_stream_of_a_tiered_topic_without_its_remote_tier_says_where_its_history_is(tmp_path):
    """Issue 37, item 16, for streams: a stream starting at earliest in a tiered broker's log
    directory without ``remote.path`` fails naming the remote offsets and the option (or, under
    ``failOnDataLoss=false``, starts at the local log); from latest it is no error."""
    from helpers.paths import KAFKA_WRITTEN
    from helpers.tiered import bases_of, tier, write_remote_log_metadata
    from kfs.reading.offsets import DataLossError

    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, local = tier(tmp_path, "plain-0", bases[:2], bases[2:])
    write_remote_log_metadata(root, local, "plain-0")
    reader = stream_reader(local, subscribe="plain", startingOffsets="earliest")
    with pytest.raises(DataLossError, match=rf"plain-0 is tiered: offsets {bases[0]}\.\."
                                            rf"{bases[2] - 1} are in its remote tier.*remote\.path"):
        reader.initialOffset()
    tolerant = stream_reader(local, subscribe="plain", startingOffsets="earliest",
                             failOnDataLoss="false")
    assert tolerant.initialOffset() == {"plain": {"0": bases[2]}}
    whole = stream_reader(local, subscribe="plain", startingOffsets="earliest",
                          **{"remote.path": root.as_uri()})
    assert whole.initialOffset() == {"plain": {"0": 0}}
    assert stream_reader(local, subscribe="plain").initialOffset()["plain"]["0"] > bases[2]
