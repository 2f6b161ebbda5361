"""Spark's ``format("kfs")`` with ``path`` a URI: a log directory read through an object
store's API (pyarrow.fs) gives the rows the same directory gives from disk, at both isolation
levels, with ranges planned from the index objects."""

import pytest

from helpers.paths import KAFKA_WRITTEN

needs_fixtures = pytest.mark.needs_fixture("kafka-written")

TOPICS = "plain,codecs,compacted,txn,legacy"


def rows(spark, path, **options):
    reader = spark.read.format("kfs").option("path", path).option("subscribe", TOPICS)
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
