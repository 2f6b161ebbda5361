"""A Spark job as a user submits it (``spark-submit --master spark://… cluster_read_job.py``):
reads PATH with ``format("kfs")`` (found by Spark's lookup, not registered) at ISOLATION, cut
into input partitions of at most 500 records, and writes the rows to OUT, one JSON list a line
(bytes as base64, the timestamp in epoch ms), then the number of input partitions on the last
line as ``{"partitions": N}``. Run by tests/spark/test_spark_cluster.py; imports nothing of the
tests."""

import base64
import json
import sys

from pyspark.sql import SparkSession


def b64(data):
    return None if data is None else base64.b64encode(data).decode()


def main(path: str, topics: str, isolation: str, out: str) -> None:
    spark = SparkSession.builder.appName("kfs-cluster-read-job").getOrCreate()
    try:
        df = (spark.read.format("kfs").option("path", path).option("subscribe", topics)
              .option("isolation.level", isolation).option("maxRecordsPerPartition", "500")
              .option("includeHeaders", "true").load()
              .selectExpr("key", "value", "topic", "partition", "offset",
                          "unix_millis(timestamp) AS timestamp", "timestampType", "headers"))
        partitions = df.rdd.getNumPartitions()
        with open(out, "w") as f:
            for r in df.collect():
                headers = None if r.headers is None else [[h.key, b64(h.value)] for h in r.headers]
                f.write(json.dumps([b64(r.key), b64(r.value), r.topic, r.partition, r.offset,
                                    r.timestamp, r.timestampType, headers]) + "\n")
            f.write(json.dumps({"partitions": partitions}) + "\n")
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
