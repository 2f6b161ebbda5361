"""Spark's ``format("kfs")`` with ``path`` a URI: a log directory read through an object
store's API (pyarrow.fs) gives the rows the same directory gives from disk, at both isolation
levels, with ranges planned from the index objects; with ``remote.path`` a tiered topic's
remote segments and its local log read as the whole partition; an unknown option is named."""

import pytest

from helpers.paths import KAFKA_WRITTEN
from helpers.tiered import bases_of, tier

needs_fixtures = pytest.mark.needs_fixture("kafka-written")

TOPICS = "plain,codecs,compacted,txn,legacy"


def rows(spark, path, topics=TOPICS, **options):
    reader = spark.read.format("kfs").option("path", path).option("subscribe", topics)
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.option("includeHeaders", "true").load()
    return sorted((tuple(r) for r in df.collect()), key=lambda t: (t[2], t[3], t[4]))


@needs_fixtures
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_file_uri_reads_as_the_directory(spark, isolation):
    local = rows(spark, str(KAFKA_WRITTEN), **{"isolation.level": isolation})
    assert len(local) > 8000
    assert rows(spark, KAFKA_WRITTEN.as_uri(), **{"isolation.level": isolation}) == local


@needs_fixtures
def test_a_range_by_offsets_through_the_uri(spark):
    options = {"startingOffsets": '{"plain": {"0": 1200}}', "endingOffsets": '{"plain": {"0": 1300}}',
               "maxRecordsPerPartition": "30"}
    reader = spark.read.format("kfs").option("path", KAFKA_WRITTEN.as_uri()).option(
        "subscribe", "plain")
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(1200, 1300))


@needs_fixtures
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_tiered_topic_reads_as_the_whole_partition(spark, tmp_path, isolation):
    bases = bases_of(KAFKA_WRITTEN / "txn-0")
    root, local = tier(tmp_path, "txn-0", bases[:3], bases[2:])
    want = rows(spark, str(KAFKA_WRITTEN), "txn", **{"isolation.level": isolation})
    got = rows(spark, str(local), "txn", **{"isolation.level": isolation,
                                             "remote.path": root.as_uri(),
                                             "maxRecordsPerPartition": "50"})
    assert got == want and want


@needs_fixtures
def test_a_gap_between_the_tiers_fails_the_query_or_is_skipped(spark, tmp_path):
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, local = tier(tmp_path, "plain-0", bases[:2], bases[3:])
    with pytest.raises(Exception, match=f"offsets {bases[2]}..{bases[3] - 1}"):
        rows(spark, str(local), "plain", **{"remote.path": root.as_uri()})
    got = rows(spark, str(local), "plain", **{"remote.path": root.as_uri(),
                                               "failOnDataLoss": "false"})
    assert [r[4] for r in got] == [o for o in range(5000) if not bases[2] <= o < bases[3]]


def test_an_unknown_option_is_named(spark):
    with pytest.raises(Exception, match="unknown kfs option.*remotepath.*remote.path"):
        rows(spark, str(KAFKA_WRITTEN), "plain", remotePath="s3://x")
