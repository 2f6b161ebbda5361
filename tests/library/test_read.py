"""``kfs.read`` / ``kfs.read_table`` (the Python library) on the Kafka-written fixtures,
compared with the ``.expected.jsonl`` Kafka's verifier wrote: rows, ranges by offset and time,
isolation, columns, errors, and the tools people read Arrow with (DuckDB, Polars, pandas,
``pyarrow.dataset``), each the real library."""

import base64
import datetime as dt
import json
import shutil
import subprocess
import sys

import pyarrow as pa
import pytest

import kfs
from helpers.kfs import kfs_env
from helpers.paths import KAFKA_WRITTEN
from storage import LogManager
from storage.isolation import IsolationLevel
from storage.log_reader import LogReader

needs_fixtures = pytest.mark.needs_fixture("kafka-written")
TYPES = {"CREATE_TIME": 0, "LOG_APPEND_TIME": 1, "NO_TIMESTAMP_TYPE": -1}
TOPICS = ["plain", "codecs", "compacted", "txn", "legacy"]
UTC = dt.timezone.utc


def b64(text):
    return None if text is None else base64.b64decode(text)


def expected(topic):
    """(key, value, topic, partition, offset, timestamp ms, timestampType, headers) of every
    data record Kafka wrote (control records are never rows)."""
    with open(KAFKA_WRITTEN / f"{topic}-0.expected.jsonl") as f:
        rows = [json.loads(line) for line in f]
    return [(b64(r["key"]), b64(r["value"]), topic, 0, r["offset"], r["timestamp"],
             TYPES[r["timestampType"]], [(k, b64(v)) for k, v in r["headers"]] or None)
            for r in rows if not r["isControl"]]


def as_tuples(table: pa.Table):
    out = []
    for r in table.to_pylist():
        ts = r["timestamp"]
        millis = None if ts is None else round(ts.timestamp() * 1000)
        headers = None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]]
        out.append((r["key"], r["value"], r["topic"], r["partition"], r["offset"], millis,
                    r["timestampType"], headers or None))
    return out


@needs_fixtures
@pytest.mark.parametrize("topic", TOPICS)
def test_fixture_reads_as_kafka_wrote_it(topic):
    table = kfs.read_table(KAFKA_WRITTEN, topics=topic, includeHeaders=True)
    assert table.schema == kfs.SCHEMA
    assert as_tuples(table) == expected(topic)


@needs_fixtures
def test_schema_is_the_spark_sources_and_batches_are_streamed():
    reader = kfs.read(KAFKA_WRITTEN, topics="plain", batch_rows=500)
    assert reader.schema.names == ["key", "value", "topic", "partition", "offset", "timestamp",
                                   "timestampType"]
    sizes = [batch.num_rows for batch in reader]
    assert len(sizes) >= 5 and max(sizes) < 1500 and sum(sizes) == 5000  # (about 500 each)


@needs_fixtures
def test_several_topics_in_topic_partition_order():
    table = kfs.read_table(KAFKA_WRITTEN, topics=["txn", "codecs"], columns=["topic", "offset"])
    assert table.column("topic").to_pylist() == ["codecs"] * 2000 + ["txn"] * 392
    assert kfs.read_table(KAFKA_WRITTEN, subscribePattern="c.*", columns=["offset"]).num_rows \
        == 2000 + 941


@needs_fixtures
def test_offset_ranges():
    rows = expected("plain")
    table = kfs.read_table(KAFKA_WRITTEN, topics="plain", partitions=[0], start=1000, end=1500,
                           includeHeaders=True)
    assert as_tuples(table) == [r for r in rows if 1000 <= r[4] < 1500]
    by_map = kfs.read_table(KAFKA_WRITTEN, topics="plain", start={("plain", 0): 4990},
                            columns=["offset"])
    assert by_map.column("offset").to_pylist() == list(range(4990, 5000))
    spark_json = kfs.read_table(KAFKA_WRITTEN, subscribe="plain", columns=["offset"],
                                startingOffsets='{"plain":{"0":4990}}')
    assert spark_json.equals(by_map)
    compacted = expected("compacted")
    gap = kfs.read_table(KAFKA_WRITTEN, topics="compacted", partitions=[0], start=141,
                         columns=["offset"])
    assert gap.column("offset").to_pylist() == [r[4] for r in compacted if r[4] >= 141]


@needs_fixtures
@pytest.mark.parametrize("topic", ["plain", "codecs"])
def test_time_range_through_the_time_index(topic):
    rows = expected(topic)
    times = sorted(r[5] for r in rows)
    t1, t2 = times[len(times) // 3] + 1, times[2 * len(times) // 3]
    first = lambda t: min(r[4] for r in rows if r[5] >= t)  # noqa: E731 - ListOffsets
    start, end = first(t1), first(t2)
    table = kfs.read_table(KAFKA_WRITTEN, topics=topic, includeHeaders=True,
                           start=dt.datetime.fromtimestamp(t1 / 1000, UTC),
                           end=dt.datetime.fromtimestamp(t2 / 1000, UTC))
    assert as_tuples(table) == [r for r in rows if start <= r[4] < end]
    millis = kfs.read_table(KAFKA_WRITTEN, topics=topic, startingTimestamp=t1,
                            endingTimestamp=t2, includeHeaders=True)
    assert millis.equals(table)


@needs_fixtures
def test_read_committed_leaves_out_aborted_transactions():
    manager = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        log = manager.get("txn-0")
        committed = [r.offset for records in log.reader.record_lists(
            0, isolation=IsolationLevel.READ_COMMITTED) for r in records]
    finally:
        manager.close()
    table = kfs.read_table(KAFKA_WRITTEN, topics="txn", isolation_level="read_committed",
                           columns=["offset"])
    assert table.column("offset").to_pylist() == committed
    assert len(committed) < 392  # the aborted transaction is not there
    assert kfs.read_table(KAFKA_WRITTEN, topics="txn", columns=["offset"],
                          **{"isolation.level": "read_committed"}).equals(table)


@needs_fixtures
def test_columns_are_projected_and_headers_decoded_only_when_asked(monkeypatch):
    asked = []
    real = LogReader.read_columns

    def spy(self, start, end=None, isolation=IsolationLevel.READ_UNCOMMITTED, headers=False,
            max_rows=32768, read_ahead=False):
        asked.append((headers, read_ahead))
        return real(self, start, end, isolation, headers, max_rows, read_ahead)

    monkeypatch.setattr(LogReader, "read_columns", spy)
    table = kfs.read_table(KAFKA_WRITTEN, topics="plain", columns=["offset", "value"])
    # (the library reads each next block ahead: its one stream leaves a core idle)
    assert table.schema.names == ["offset", "value"] and asked == [(False, True)]
    rows = expected("plain")
    assert table.column("value").to_pylist() == [r[1] for r in rows]
    with_headers = kfs.read_table(KAFKA_WRITTEN, topics="plain", columns=["headers"])
    assert asked == [(False, True), (True, True)]
    assert [h or None for h in with_headers.column("headers").to_pylist()] == [
        None if r[7] is None else [{"key": k, "value": v} for k, v in r[7]] for r in rows]


@needs_fixtures
def test_reading_imports_no_pyspark():
    code = ("import sys, kfs; kfs.read_table(sys.argv[1], topics='plain'); "
            "assert 'pyspark' not in sys.modules, 'pyspark was imported'")
    subprocess.run([sys.executable, "-c", code, str(KAFKA_WRITTEN)], check=True, env=kfs_env())


@needs_fixtures
@pytest.mark.parametrize("kwargs, error, words", [
    ({"topics": "nope"}, kfs.UnknownTopicOrPartitionError, "topic nope not found"),
    ({"topics": "plain", "partitions": [7]}, ValueError, "assign names partitions"),
    ({"topics": "plain", "startingoffset": "earliest"}, ValueError, "unknown kfs option"),
    ({"topics": "plain", "start": "latest"}, ValueError, "latest (-1) is not allowed"),
    ({"topics": "plain", "start": dt.datetime(2024, 1, 1)}, ValueError, "no time zone"),
    ({"topics": "plain", "start": 5}, ValueError, "needs topics= and partitions="),
    ({"topics": "plain", "isolation_level": "dirty"}, ValueError, "isolation.level"),
    ({"topics": "plain", "columns": ["offset", "nope"]}, ValueError, "columns must be"),
    ({"topics": "plain", "subscribe": "plain"}, ValueError, "not both"),
    ({"partitions": [0]}, ValueError, "needs topics="),
])
def test_bad_reads_fail_before_reading_as_the_spark_source(kwargs, error, words):
    with pytest.raises(error, match=None) as info:
        kfs.read(KAFKA_WRITTEN, **kwargs)
    assert words in str(info.value)


@needs_fixtures
def test_offsets_retention_removed_are_data_loss(tmp_path):
    shutil.copytree(KAFKA_WRITTEN / "plain-0", tmp_path / "plain-0")
    for path in (tmp_path / "plain-0").glob("00000000000000000000.*"):
        path.unlink()  # as retention deletes the oldest segment: the log starts at 253
    with pytest.raises(kfs.DataLossError, match="failOnDataLoss"):
        kfs.read(tmp_path, topics="plain", partitions=[0], start=0)
    table = kfs.read_table(tmp_path, topics="plain", partitions=[0], start=0,
                           failOnDataLoss=False, columns=["offset"])
    assert table.column("offset").to_pylist() == list(range(253, 5000))


# -- where users are: each the real library over the reader --------------------------------

@needs_fixtures
@pytest.mark.needs_modules("duckdb")
def test_duckdb_queries_the_reader():
    import duckdb

    reader = kfs.read(KAFKA_WRITTEN, topics=["plain", "codecs"])  # noqa: F841 - DuckDB finds it by name
    got = duckdb.sql("SELECT topic, count(*), sum(octet_length(value)), max(\"offset\") "
                     "FROM reader GROUP BY topic ORDER BY topic").fetchall()
    want = [(t, len(rows), sum(len(r[1]) for r in rows if r[1] is not None), rows[-1][4])
            for t, rows in (("codecs", expected("codecs")), ("plain", expected("plain")))]
    assert got == want


@needs_fixtures
@pytest.mark.needs_modules("polars")
def test_polars_from_arrow():
    import polars as pl

    frame = pl.from_arrow(kfs.read(KAFKA_WRITTEN, topics="compacted"))
    rows = expected("compacted")
    assert frame.height == len(rows)
    assert frame["offset"].to_list() == [r[4] for r in rows]
    assert frame.filter(pl.col("value").is_null()).height == sum(r[1] is None for r in rows)
    assert frame["key"].to_list() == [r[0] for r in rows]


@needs_fixtures
@pytest.mark.needs_modules("pandas")
def test_pandas_read_pandas():
    frame = kfs.read(KAFKA_WRITTEN, topics="legacy", includeHeaders=True).read_pandas()
    rows = expected("legacy")
    assert list(frame["offset"]) == [r[4] for r in rows]
    assert list(frame["value"]) == [r[1] for r in rows]  # bytes, None for a null value
    assert str(frame["timestamp"].dtype).startswith("datetime64[us, UTC]")
    assert list(frame["timestampType"]) == [r[6] for r in rows]


@needs_fixtures
def test_pyarrow_dataset_scans_the_reader():
    import pyarrow.dataset as ds

    scanner = ds.Scanner.from_batches(kfs.read(KAFKA_WRITTEN, topics="plain"),
                                      columns=["offset", "key"],
                                      filter=ds.field("offset") >= 4000)
    table = scanner.to_table()
    rows = [r for r in expected("plain") if r[4] >= 4000]
    assert table.column("offset").to_pylist() == [r[4] for r in rows]
    assert table.column("key").to_pylist() == [r[0] for r in rows]


@needs_fixtures
def test_an_object_store_uri_reads_as_the_directory():
    """The one door's object-store layout (a log directory copied into a store; here pyarrow's
    local file system behind a file:// URI): the same rows as the directory."""
    uri = KAFKA_WRITTEN.resolve().as_uri()
    table = kfs.read_table(uri, topics="codecs", includeHeaders=True)
    assert as_tuples(table) == expected("codecs")


@needs_fixtures
def test_a_one_percent_time_range_reads_a_few_percent_of_the_log(monkeypatch):
    """Bounds resolve through the time and offset indexes: reading 1% of plain's time span
    (21 segments of up to 64 KiB) reads about a segment's bytes for each of the two time
    lookups and the records, not the partition."""
    from storage.segment_source import LocalSegmentSource

    read = []
    read_into, read_at = LocalSegmentSource.read_into, LocalSegmentSource.read_at
    monkeypatch.setattr(LocalSegmentSource, "read_into",
                        lambda self, view, pos: read.append(len(v := read_into(self, view, pos)))
                        or v)
    monkeypatch.setattr(LocalSegmentSource, "read_at",
                        lambda self, pos, size, nowait=False: read.append(
                            len(b := read_at(self, pos, size, nowait))) or b)
    rows = expected("plain")
    times = sorted(r[5] for r in rows)
    t1, t2 = times[2500], times[2550]
    table = kfs.read_table(KAFKA_WRITTEN, topics="plain", columns=["offset"],
                           start=dt.datetime.fromtimestamp(t1 / 1000, UTC),
                           end=dt.datetime.fromtimestamp(t2 / 1000, UTC))
    assert 30 <= table.num_rows <= 100
    total = sum(p.stat().st_size for p in (KAFKA_WRITTEN / "plain-0").glob("*.log"))
    assert sum(read) <= 3 * 65536 and sum(read) < total * 0.15, (sum(read), total)
