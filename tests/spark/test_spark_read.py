"""Batch reads through Spark (``format("kfs")``) of the Kafka-written fixtures, compared with
the ``.expected.jsonl`` Kafka's verifier wrote, plus ranges, splitting, pushdown and errors."""

import base64
import bisect
import datetime as dt
import json
import shutil

import pytest

import kfs.spark
from kfs.reading.offsets import OffsetRange, open_log, split_by_bytes
from helpers.paths import KAFKA_WRITTEN
from storage import LogManager
from storage.log_files import filename_prefix

FIXTURES = KAFKA_WRITTEN
needs_fixtures = pytest.mark.needs_fixture("kafka-written")
TYPES = {"CREATE_TIME": 0, "LOG_APPEND_TIME": 1, "NO_TIMESTAMP_TYPE": -1}


FIXTURE_TOPICS = ["plain", "codecs", "compacted", "txn", "legacy"]


def b64(text):
    return None if text is None else base64.b64decode(text)


def expected(topic):
    """Data records (control records excluded) as the rows Spark's Kafka source gives."""
    with open(FIXTURES / f"{topic}-0.expected.jsonl") as f:
        rows = [json.loads(line) for line in f]
    return [(b64(r["key"]), b64(r["value"]), topic, 0, r["offset"], r["timestamp"],
             TYPES[r["timestampType"]], [(k, b64(v)) for k, v in r["headers"]] or None)
            for r in rows if not r["isControl"]]


def as_tuples(rows):
    """Spark rows as tuples; the timestamp back to epoch ms (the session is in UTC)."""
    out = []
    for r in rows:
        ts = r.timestamp.replace(tzinfo=dt.timezone.utc)
        millis = round(ts.timestamp() * 1000)
        headers = [(h.key, h.value) for h in r.headers] if r.headers is not None else None
        out.append((r.key, r.value, r.topic, r.partition, r.offset, millis, r.timestampType,
                    headers))
    return sorted(out, key=lambda t: (t[2], t[3], t[4]))


def load(spark, **options):
    reader = spark.read.format("kfs").option("path", str(FIXTURES))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def first_offset_at(rows, timestamp):
    """ListOffsets: the first offset whose timestamp is >= ``timestamp`` (None: none)."""
    hits = [r[4] for r in rows if r[5] >= timestamp]
    return min(hits) if hits else None


@needs_fixtures
@pytest.mark.parametrize("topic", FIXTURE_TOPICS)
def test_fixture_reads_as_kafka_wrote_it(spark, topic):
    df = load(spark, subscribe=topic, includeHeaders="true")
    assert as_tuples(df.collect()) == expected(topic)


@needs_fixtures
def test_schema_is_spark_kafka_source_schema(spark):
    df = load(spark, subscribe="plain")
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    with_headers = load(spark, subscribe="plain", includeHeaders="true").schema
    assert with_headers["headers"].dataType.simpleString() == "array<struct<key:string,value:binary>>"


@needs_fixtures
@pytest.mark.needs_modules("pyspark")
def test_arrow_batches_have_sparks_exact_arrow_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    from kfs.spark.reader import read_range, spark_schema

    for headers in (False, True):
        batches = list(read_range(str(FIXTURES), OffsetRange("codecs", 0, 0, 2000), headers,
                                  rows_per_batch=500))
        assert len(batches) > 1 and sum(b.num_rows for b in batches) == 2000
        for batch in batches:
            assert batch.schema == to_arrow_schema(spark_schema(headers), timezone="UTC")


@needs_fixtures
def test_offset_range_as_json(spark):
    df = load(spark, subscribe="plain", startingOffsets='{"plain":{"0":1000}}',
              endingOffsets='{"plain":{"0":1500}}', includeHeaders="true")
    assert as_tuples(df.collect()) == [r for r in expected("plain") if 1000 <= r[4] < 1500]


@needs_fixtures
def test_compacted_range_starting_in_a_gap(spark):
    rows = expected("compacted")
    df = load(spark, subscribe="compacted", startingOffsets='{"compacted":{"0":141}}',
              endingOffsets='{"compacted":{"0":-1}}', includeHeaders="true")
    assert as_tuples(df.collect()) == [r for r in rows if r[4] >= 141]


@needs_fixtures
@pytest.mark.parametrize("topic", ["plain", "codecs"])
def test_timestamp_range_through_the_time_index(spark, topic):
    rows = expected(topic)
    times = sorted(r[5] for r in rows)
    t1, t2 = times[len(times) // 3] + 1, times[2 * len(times) // 3]
    start, end = first_offset_at(rows, t1), first_offset_at(rows, t2)
    df = load(spark, subscribe=topic, startingTimestamp=str(t1), endingTimestamp=str(t2),
              includeHeaders="true")
    assert as_tuples(df.collect()) == [r for r in rows if start <= r[4] < end]
    by_partition = load(spark, subscribe=topic, includeHeaders="true",
                        startingOffsetsByTimestamp=json.dumps({topic: {"0": t1}}),
                        endingOffsetsByTimestamp=json.dumps({topic: {"0": t2}}))
    assert as_tuples(by_partition.collect()) == as_tuples(df.collect())


@needs_fixtures
def test_starting_timestamp_past_every_record(spark):
    late = str(max(r[5] for r in expected("plain")) + 1)
    with pytest.raises(Exception, match="No offset matched"):
        load(spark, subscribe="plain", startingTimestamp=late).collect()
    df = load(spark, subscribe="plain", startingTimestamp=late,
              startingOffsetsByTimestampStrategy="latest")
    assert df.count() == 0


@needs_fixtures
def test_split_reads_equal_whole_read(spark):
    whole = load(spark, subscribe="plain,codecs", includeHeaders="true")
    split = load(spark, subscribe="plain,codecs", includeHeaders="true",
                 maxBytesPerPartition="20000")
    assert whole.rdd.getNumPartitions() == 2
    assert split.rdd.getNumPartitions() > 40
    assert as_tuples(split.collect()) == as_tuples(whole.collect())
    counted = load(spark, subscribe="plain", minPartitions="7")
    assert counted.rdd.getNumPartitions() == 7
    assert counted.count() == 5000
    capped = load(spark, subscribe="plain", maxRecordsPerPartition="1000")
    assert capped.rdd.getNumPartitions() == 5


@needs_fixtures
def test_split_by_bytes_cuts_at_index_entries_and_segment_bases():
    log = open_log(str(FIXTURES), "plain", 0)
    try:
        pieces = split_by_bytes(log, OffsetRange("plain", 0, 10, 4990), 8192)
        assert pieces[0].start == 10 and pieces[-1].end == 4990
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
        marks = {s.base_offset for s in log.segments.all()} | {
            s.offset_index.entry(i)[0] for s in log.segments.all()
            for i in range(s.offset_index.entries)}
        assert all(p.start in marks for p in pieces[1:])
        assert len(pieces) > 21  # more than one per segment: the index splits segments
    finally:
        log.close()


def test_split_by_bytes_makes_equal_parts(tmp_path):
    """110 KB of like batches cut at 32 KB: four parts of about a quarter each (so the tasks
    finish together), not three of 32 KB and a short fourth."""
    manager = LogManager(tmp_path)
    log = manager.create("even-0")
    for first in range(0, 1000, 10):  # 100 batches of 10 records of ~100 B
        log.append_lines(b"".join(b"%099d\n" % i for i in range(first, first + 10)))
    total = log.segments.size_in_bytes
    try:
        pieces = split_by_bytes(log, OffsetRange("even", 0, 0, 1000), 32_000)
        assert len(pieces) == -(-total // 32_000) == 4
        assert pieces[0].start == 0 and pieces[-1].end == 1000
        assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))
        # cuts fall on offset-index entries, one per ~4 KiB (~40 records here)
        assert all(abs(p.size - 250) <= 40 for p in pieces), [p.size for p in pieces]
    finally:
        manager.close()


@needs_fixtures
def test_multiple_topics_and_assign(spark):
    df = load(spark, assign='{"plain":[0],"txn":[0]}')
    assert {r.topic: r["count"] for r in df.groupBy("topic").count().collect()} == {
        "plain": 5000, "txn": 392}
    pattern = load(spark, subscribePattern="c.*")
    assert {r.topic for r in pattern.select("topic").distinct().collect()} == {
        "codecs", "compacted"}


FILTERS = [
    ("partition = 0 and offset >= 100 and offset < 110", lambda r: 100 <= r[4] < 110),
    ("offset = 4999 or offset = 3", lambda r: r[4] in (3, 4999)),
    ("partition in (1, 2)", lambda r: False),
    ("offset > 4990", lambda r: r[4] > 4990),
    ("offset <= 2", lambda r: r[4] <= 2),
    ("timestamp >= timestamp_millis(1700000400000) and timestamp < timestamp_millis(1700000450000)",
     lambda r: 1700000400000 <= r[5] < 1700000450000),
    ("timestamp > timestamp_millis(1700000498000)", lambda r: r[5] > 1700000498000),
    ("timestamp = timestamp_millis(1700000000063)", lambda r: r[5] == 1700000000063),
]


@needs_fixtures
@pytest.mark.parametrize("pushdown", [False, True])
def test_filters_with_and_without_pushdown(spark, pushdown):
    rows = expected("plain")
    spark.conf.set(kfs.spark.PUSHDOWN_CONF, str(pushdown).lower())
    kfs.spark.register(spark)
    try:
        for condition, keep in FILTERS:
            df = load(spark, subscribe="plain", includeHeaders="true").where(condition)
            assert as_tuples(df.collect()) == [r for r in rows if keep(r)], condition
    finally:
        spark.conf.set(kfs.spark.PUSHDOWN_CONF, "false")
        kfs.spark.register(spark)


@needs_fixtures
def test_pushdown_narrows_the_planned_ranges(spark):
    from kfs.reading.options import parse_options
    from kfs.spark.pushdown import push
    from kfs.spark.source import plan_batch
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    rows = expected("plain")
    since = dt.datetime.fromtimestamp(1700000400, dt.timezone.utc)
    filters = [GreaterThanOrEqual(("timestamp",), since), LessThan(("offset",), 4900)]
    pushed, remaining = push(filters)
    assert remaining == [filters[0]]  # timestamps need not increase: Spark re-checks them
    opts = parse_options({"path": str(FIXTURES), "subscribe": "plain"})
    ranges = plan_batch(opts, 1 << 30, pushed)
    assert [(r.start, r.end) for r in ranges] == [(first_offset_at(rows, 1700000400000), 4900)]


@needs_fixtures
@pytest.mark.parametrize("options, message", [
    ({}, "exactly one of"),
    ({"subscribe": "plain", "assign": '{"plain":[0]}'}, "exactly one of"),
    ({"subscribe": "plain", "startingOffsets": "latest"}, "not allowed for batch"),
    ({"subscribe": "plain", "endingOffsets": '{"plain":{"0":-2}}'}, "not allowed for batch"),
    ({"subscribe": "plain,txn", "startingOffsets": '{"plain":{"0":5}}'}, "every partition"),
    ({"subscribe": "plain", "startingOffsets": "{bad"}, "not valid JSON"),
    ({"subscribe": "plain", "endingOffsets": '{"plain":{"0":6000}}'}, "past its log end offset"),
    ({"subscribe": "plain", "startingOffsets": '{"plain":{"0":50}}',
      "endingOffsets": '{"plain":{"0":40}}'}, "ending offset 40 < starting offset 50"),
    ({"assign": '{"plain":[3]}'}, "do not exist"),
    ({"subscribe": "plain", "minPartitions": "0"}, "positive integer"),
])
def test_bad_options_raise_clear_errors(spark, options, message):
    with pytest.raises(Exception, match=message):
        load(spark, **options).collect()


def test_data_loss(spark, tmp_path):
    backing = tmp_path / "backing"
    (backing).mkdir()
    (backing / "server.properties").write_text("log.segment.bytes=1024\n")
    mgr = LogManager(backing)
    log = mgr.create("events-0")
    for i in range(40):
        log.append([b"record %03d" % i + b"." * 100])
    bases = [s.base_offset for s in log.segments.all()]
    mgr.close()
    for path in (backing / "events-0").glob(f"{filename_prefix(bases[0])}.*"):
        path.unlink()  # as retention deletes the oldest segment
    options = dict(subscribe="events", startingOffsets='{"events":{"0":0}}')
    reader = spark.read.format("kfs").option("path", str(backing))
    with pytest.raises(Exception, match="failOnDataLoss"):
        reader.options(**options).load().collect()
    rows = reader.options(**options, failOnDataLoss="false").load().collect()
    assert [r.offset for r in rows] == list(range(bases[1], 40))
    shutil.rmtree(backing)


@needs_fixtures
def test_read_committed_hides_the_aborted_transaction(spark):
    rows = [json.loads(line) for line in open(FIXTURES / "txn-0.expected.jsonl")]
    aborted = {r["offset"] for r in rows if r["producerId"] == 2000 and 189 <= r["offset"] <= 262}
    data = [r["offset"] for r in rows if not r["isControl"]]
    committed = load(spark, subscribe="txn", **{"isolation.level": "read_committed"})
    assert sorted(r.offset for r in committed.select("offset").collect()) == [
        o for o in data if o not in aborted]
    everything = load(spark, subscribe="txn")
    assert sorted(r.offset for r in everything.select("offset").collect()) == data


@needs_fixtures
def test_a_read_that_finds_no_topic_says_so_and_where_it_looked(spark, tmp_path):
    """A topic that is not there, in a log directory, an empty directory or one that is no
    log directory at all, fails naming the topic and the path (Spark's Kafka source fails with
    UnknownTopicOrPartitionException), instead of giving 0 rows and no word."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "docs" / "notes").mkdir(parents=True)
    for path in (FIXTURES, tmp_path / "empty", tmp_path / "docs", FIXTURES.as_uri()):
        reader = spark.read.format("kfs").option("path", str(path))
        with pytest.raises(Exception, match=r"topics? nosuch(, plain)? not found in \S*"
                                            + str(path).rpartition("/")[2]):
            reader.option("subscribe", "plain,nosuch").load().collect()
    # a pattern that matches nothing is no error, as with Spark's Kafka source
    assert load(spark, subscribePattern="nosuch.*").collect() == []


@needs_fixtures
def test_a_tiered_topic_read_without_its_remote_tier_fails_naming_the_option(spark, tmp_path):
    """``path`` = a tiered broker's log directory, no ``remote.path``: the history in the
    remote tier is not silently left out (nor its first local offset called the log start);
    the error says which offsets are remote and which option reads them."""
    from helpers.tiered import bases_of, tier, write_remote_log_metadata

    bases = bases_of(FIXTURES / "plain-0")
    root, local = tier(tmp_path, "plain-0", bases[:2], bases[2:])
    write_remote_log_metadata(root, local, "plain-0")
    def read(**options):  # (a reader of its own: option() changes the reader it is called on)
        reader = spark.read.format("kfs").option("path", str(local)).option("subscribe", "plain")
        return reader.options(**options).load().select("offset").collect()

    for options in ({}, {"startingOffsets": '{"plain":{"0":0}}'}):
        with pytest.raises(Exception, match=rf"plain-0 is tiered: offsets {bases[0]}\.\."
                                            rf"{bases[2] - 1} are in its remote tier.*remote\.path"):
            read(**options)
    assert min(r.offset for r in read(failOnDataLoss="false")) == bases[2]
    whole = read(**{"remote.path": root.as_uri()})
    assert sorted(r.offset for r in whole) == sorted(r[4] for r in expected("plain"))


@pytest.mark.needs_fixture("kafka-written")
def test_a_python_worker_reads_without_importing_pandas():
    """Issue 37 item 20: every Python process Spark starts for the source (planners and
    readers) imports ``kfs.spark``; pyarrow's conversion of a Python object imports pandas on
    its first call (0.3-1 s a process), which the source never uses: its Arrow scalars are
    built from buffers. A read's batches are those ``pa.scalar`` would make."""
    import subprocess
    import sys

    from helpers.kfs import kfs_env

    code = (
        "import sys\n"
        "import kfs.spark.source, kfs.spark.writer\n"
        "from kfs.spark.reader import read_range\n"
        "from kfs.reading.offsets import OffsetRange\n"
        f"batches = list(read_range({str(KAFKA_WRITTEN)!r}, OffsetRange('plain', 0, 0, 100), "
        "True))\n"
        "print(sum(b.num_rows for b in batches), 'pandas' in sys.modules)\n"
        "import pyarrow as pa\n"
        "assert all(b.column('topic').equals(pa.array(['plain'] * b.num_rows)) for b in batches)\n"
        "assert all(b.column('partition').equals(pa.array([0] * b.num_rows, pa.int32())) "
        "for b in batches)\n")
    done = subprocess.run([sys.executable, "-c", code], env=kfs_env(), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["100", "False"]
