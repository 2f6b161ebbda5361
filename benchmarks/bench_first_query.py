"""The first query of a fresh Spark session, as ``spark-submit`` runs one (a new Python process,
its own driver JVM): ``spark.read.format("kfs")`` reading a topic from ``s3://`` (S3Proxy on
loopback) against Spark's Kafka source (``spark-sql-kafka-0-10``, fetched by
``scripts/setup.sh test`` as ``bench_kafka_peer.py`` uses it) reading the same records from a broker (Kafka 4.1.1 on loopback).

    .venv/bin/python benchmarks/bench_first_query.py [--records 200000] [--rounds 3]

The records: ``--records`` keyed records of 100-byte values produced to the broker's topic; the
topic's partition directory copied into a bucket for kfs (the same bytes). Each round starts
one fresh process per side (alternating which goes first), each timing (seconds):

* ``import``: ``import pyspark.sql``;
* ``session``: ``SparkSession.builder...getOrCreate()`` (the driver JVM's start, Kafka's jars on
  ``spark.jars`` for the Kafka side);
* ``load``: ``spark.read.format(...)...load()`` (kfs: Spark's lookup of Python data sources and
  the data source's creation, each in a Python process of its own, a fresh ``pyspark.daemon``
  forking a worker);
* ``plan``: the aggregate's physical plan (Spark's side alone: a Python source's
  ``partitions()`` run at ``collect()``);
* ``run``: ``collect()`` of ``count(*), sum(length(value))`` (kfs: ``partitions()`` in a
  planning Python process, then the tasks in a Python worker; Kafka: the offsets by the admin
  client, then the tasks' consumers);
* ``first query``: load + plan + run; ``total``: the process's start to the first query's result;
* ``second``: the same query again in that session (for comparison).

Printed: the medians, and the first query's ratio kfs / Kafka (target <= 1.5x). Everything
lives in a temp dir, removed at the end; S3Proxy and the broker are stopped on every exit.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STARTED = time.perf_counter()
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

TOPIC = "first"
AGG = ["count(*)", "sum(length(value))"]
PHASES = ("import", "session", "load", "plan", "run", "first query", "total", "second")


def child(args) -> None:
    """One fresh session's first query (this process was just started); its times as JSON."""
    t = {}
    began = time.perf_counter()
    from pyspark.sql import SparkSession

    t["import"] = time.perf_counter() - began
    began = time.perf_counter()
    builder = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false"))
    if args.jars:
        builder = builder.config("spark.jars", args.jars)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    t["session"] = time.perf_counter() - began
    began = time.perf_counter()
    if args.child == "kfs":
        frame = spark.read.format("kfs").option("subscribe", TOPIC).load(args.source)
    else:
        frame = (spark.read.format("kafka").option("kafka.bootstrap.servers", args.source)
                 .option("subscribe", TOPIC).option("startingOffsets", "earliest")
                 .option("endingOffsets", "latest").load())
    t["load"] = time.perf_counter() - began
    began = time.perf_counter()
    query = frame.selectExpr(*AGG)
    query._jdf.queryExecution().executedPlan()  # (the physical plan: Spark's side alone)
    t["plan"] = time.perf_counter() - began
    began = time.perf_counter()
    rows = tuple(query.collect()[0])
    t["run"] = time.perf_counter() - began
    t["first query"] = t["load"] + t["plan"] + t["run"]
    t["total"] = time.perf_counter() - STARTED
    began = time.perf_counter()
    again = tuple(frame.selectExpr(*AGG).collect()[0])
    t["second"] = time.perf_counter() - began
    assert again == rows
    spark.stop()
    print(json.dumps({"times": t, "rows": rows}))


def fresh(side: str, source: str, jars: str, master: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", side, "--source", source,
                          "--jars", jars, "--master", master],
                         env=env, capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"{side}'s process failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--child", choices=("kfs", "kafka"), help=argparse.SUPPRESS)
    p.add_argument("--source", help=argparse.SUPPRESS)
    p.add_argument("--jars", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return 0

    from bench_kafka_peer import Broker, producer, produce, spark_kafka_jars_told
    from helpers import kafka as kafka_broker
    from helpers.s3 import S3Server, s3proxy_missing

    if (why := s3proxy_missing() or kafka_broker.kafka_missing()) is not None:
        print(f"bench_first_query: {why}", file=sys.stderr)
        return 2
    jars = ",".join(spark_kafka_jars_told(args))
    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-first-"))
    server = S3Server(tmp / "s3", tmp / "s3proxy")
    broker = Broker(tmp / "kafka-logs", tmp / "broker")
    try:
        server.start()
        broker.start()
        broker.create_topic(TOPIC, 1)
        prod = producer(broker)
        produce(prod, TOPIC, 0, args.records, lambda i: b"key-%d" % i)
        if prod.flush(300):
            raise RuntimeError("records not acknowledged")
        bucket = server.new_bucket()
        shutil.copytree(broker.log_dir / f"{TOPIC}-0",
                        server.base_dir / bucket / "logs" / f"{TOPIC}-0")
        uri = f"s3://{bucket}/logs"
        env = {**os.environ, **server.env(),
               "PYTHONPATH": os.pathsep.join(q for q in (str(REPO), os.environ.get("PYTHONPATH"))
                                             if q),
               "PYSPARK_PYTHON": sys.executable}
        sides = {"kfs": (uri, ""), "kafka": (broker.bootstrap, jars)}
        times: dict[str, list[dict]] = {s: [] for s in sides}
        rows = {}
        for r in range(args.rounds):
            for side in (("kfs", "kafka") if r % 2 == 0 else ("kafka", "kfs")):
                got = fresh(side, *sides[side], args.master, env)
                times[side].append(got["times"])
                rows.setdefault(side, got["rows"])
                print(f"  … round {r + 1} {side}: " + ", ".join(
                    f"{k} {v:.2f}" for k, v in got["times"].items()), file=sys.stderr,
                    flush=True)
    finally:
        broker.stop()
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    assert rows["kfs"] == rows["kafka"], rows
    print(f"\n== the first query of a fresh session ({args.master}, a new Python process "
          f"each; {args.records:,} records of 100 B values, count and sum of value lengths; "
          f"medians of {args.rounds} processes per side, alternating), seconds")
    print(f"{'':<8}" + "".join(f"{k:>13}" for k in PHASES))
    medians = {}
    for side, runs in times.items():
        medians[side] = {k: statistics.median(t[k] for t in runs) for k in PHASES}
        print(f"{side:<8}" + "".join(f"{medians[side][k]:>13.2f}" for k in PHASES))
    first = medians["kfs"]["first query"] / medians["kafka"]["first query"]
    total = medians["kfs"]["total"] / medians["kafka"]["total"]
    print(f"first query kfs / Kafka source: {first:.2f}x (target <= 1.5x: "
          f"{'met' if first <= 1.5 else 'NOT met'}); process start to first result: "
          f"{total:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
