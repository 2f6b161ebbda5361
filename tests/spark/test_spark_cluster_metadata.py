"""``spark.read.format("kfs").option("subscribe", "__cluster_metadata")``: KRaft's metadata log
as rows (offset, timestamp, type, apiKey, version, record JSON, error), held to what Kafka
4.1.1's ``kafka-dump-log --cluster-metadata-decoder`` prints for the same log
(tests/fixtures/cluster-metadata, written by a real 4.1.1 broker)."""

from __future__ import annotations

import datetime as dt
import json
import os

import pytest
from helpers.kafka import kafka_missing, run_tool
from helpers.needs import unavailable
from helpers.paths import FIXTURES_ROOT

FIXTURE = FIXTURES_ROOT / "cluster-metadata"
LOG = FIXTURE / "__cluster_metadata-0" / "00000000000000000000.log"

pytestmark = pytest.mark.needs_fixture("cluster-metadata/__cluster_metadata-0")


def kafka_records() -> dict[int, tuple[int, dict]]:
    """offset -> (timestamp, the decoded record) as kafka-dump-log prints them."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    out = run_tool("kafka.tools.DumpLogSegments", "--files", str(LOG), "--cluster-metadata-decoder",
                   env={**os.environ, "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}).stdout.decode()
    found = {}
    for line in out.split("\n"):
        if line.startswith("| offset: ") and " payload: " in line:
            fields = line.split()
            found[int(fields[2])] = (int(fields[4]), json.loads(line.split(" payload: ", 1)[1]))
    return found


def test_rows_are_the_records_kafka_dump_log_decodes(spark):
    expected = kafka_records()
    rows = (spark.read.format("kfs").option("path", str(FIXTURE))
            .option("subscribe", "__cluster_metadata").load().orderBy("offset").collect())
    assert [r.offset for r in rows] == sorted(expected)
    for row in rows:
        timestamp, record = expected[row.offset]
        assert row.error is None
        assert (row.type, row.version, json.loads(row.record)) == (
            record["type"], record["version"], record["data"])
        assert row.timestamp == dt.datetime.fromtimestamp(timestamp / 1000, dt.timezone.utc).replace(tzinfo=None)
        assert isinstance(row.apiKey, int)


def test_a_query_over_the_clusters_history(spark):
    """Topic creations are a filter away: the names Kafka's tool shows in TOPIC_RECORDs."""
    expected = sorted(r["data"]["name"] for _, r in kafka_records().values()
                      if r["type"] == "TOPIC_RECORD")
    df = (spark.read.format("kfs").option("path", str(FIXTURE))
          .option("subscribe", "__cluster_metadata").load())
    df.createOrReplaceTempView("cluster_history")
    names = spark.sql("SELECT get_json_object(record, '$.name') AS name FROM cluster_history "
                      "WHERE type = 'TOPIC_RECORD' ORDER BY name").collect()
    assert [r.name for r in names] == expected and expected
