"""``format("kfs")`` on a Spark standalone cluster (a master and two one-core workers as
separate processes, ``spark_standalone``), the job submitted to ``spark://127.0.0.1:PORT`` both
ways docs/spark.md tells a user: ``spark-submit`` of a script, and a SparkSession of that master
(``spark_cluster``). A read of the Kafka-written fixtures, cut into many input partitions, runs
tasks on both workers' executors and gives the rows the engine reads from the same directory.

The spark-submit test comes first: an application holds both workers' cores while it lives, so
it runs before this module's session starts (it waits for the master to have no application)."""

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.paths import KAFKA_WRITTEN, REPO, TESTS
from helpers.spark_cluster import EXECUTOR_JAVA_OPTS, EXECUTOR_MEMORY
from helpers.waits import wait_until
from storage import LogManager
from storage.isolation import IsolationLevel

needs_fixtures = pytest.mark.needs_fixture("kafka-written")

TOPICS = "plain,codecs,compacted,txn,legacy"


def engine_rows(isolation):
    """The data records of every partition of the directory, read by the engine (read-only),
    as the rows ``format("kfs")`` gives: key, value, topic, partition, offset, timestamp (epoch
    ms), timestampType, headers (None for none)."""
    manager = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        rows = []
        for name in manager.partition_names():
            topic, partition = name.rsplit("-", 1)
            reader = manager.get(name).reader
            for records in reader.record_lists(0, isolation=IsolationLevel.parse(isolation)):
                rows += [(r.key, r.value, topic, int(partition), r.offset, r.timestamp,
                          r.timestamp_type, [tuple(h) for h in r.headers] or None)
                         for r in records]
        return sorted(rows, key=lambda t: (t[2], t[3], t[4]))
    finally:
        manager.close()


def b64(text):
    return None if text is None else base64.b64decode(text)


@needs_fixtures
def test_spark_submit_as_the_readme_says(spark_standalone, tmp_path):
    """``export PYSPARK_PYTHON=<venv>/bin/python; <venv>/bin/spark-submit --master spark://…
    --conf spark.executorEnv.PYTHONPATH=<checkout> job.py …``, in an environment with no
    PYTHONPATH and no SPARK_* of the test's."""
    wait_until(lambda: not (spark_standalone.status() or {"activeapps": [1]})["activeapps"],
               "no application on the master (one holds both workers' cores)")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_DRIVER_PYTHON") and not k.startswith("SPARK_")}
    env["PYSPARK_PYTHON"] = sys.executable
    out = tmp_path / "rows.jsonl"
    with open(tmp_path / "spark-submit.log", "wb") as log:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "spark-submit"), "--master", spark_standalone.url,
             "--conf", f"spark.executorEnv.PYTHONPATH={REPO}",
             # loopback only, and no web UI on 4040 to clash with another driver's
             "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
             "--conf", "spark.ui.enabled=false",
             # less CPU for short-lived JVMs (as the spark_cluster session's)
             "--driver-java-options", EXECUTOR_JAVA_OPTS,
             "--conf", f"spark.executor.extraJavaOptions={EXECUTOR_JAVA_OPTS}",
             "--conf", f"spark.executor.memory={EXECUTOR_MEMORY}",
             str(TESTS / "helpers" / "cluster_read_job.py"), str(KAFKA_WRITTEN), TOPICS,
             "read_committed", str(out)],
            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            timeout=300)
    assert done.returncode == 0, (tmp_path / "spark-submit.log").read_text()[-5000:]

    *lines, last = out.read_text().splitlines()
    assert json.loads(last)["partitions"] >= 8
    rows = sorted(((b64(k), b64(v), t, p, o, ts, tt,
                    None if h is None else [(hk, b64(hv)) for hk, hv in h])
                   for k, v, t, p, o, ts, tt, h in map(json.loads, lines)),
                  key=lambda t: (t[2], t[3], t[4]))
    assert rows == engine_rows("read_committed")
    # the application had an executor on each worker
    apps = [a["id"] for a in spark_standalone.status()["completedapps"]
            if a["name"] == "kfs-cluster-read-job"]
    assert len(apps) == 1, apps
    ran = {worker for key, worker in spark_standalone.worker_executors().items()
           if key.startswith(f"{apps[0]}/")}
    assert ran == {0, 1}, spark_standalone.worker_executors()


def cluster_read(spark, isolation):
    """The fixtures read on the cluster, cut into input partitions of at most 500 records."""
    df = (spark.read.format("kfs").option("path", str(KAFKA_WRITTEN)).option("subscribe", TOPICS)
          .option("isolation.level", isolation).option("maxRecordsPerPartition", "500")
          .option("includeHeaders", "true").load())
    # the timestamp as epoch ms in Spark: no conversion to the driver's local time
    return df.selectExpr("key", "value", "topic", "partition", "offset",
                         "unix_millis(timestamp) AS timestamp", "timestampType", "headers")


@needs_fixtures
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_read_runs_on_both_workers_with_the_engines_rows(spark_cluster, isolation):
    df = cluster_read(spark_cluster.session, isolation)
    partitions = df.rdd.getNumPartitions()
    assert partitions >= 8  # at least 4 tasks for each of the two one-core executors

    collected, tasks = spark_cluster.tasks_by_executor(df.collect)

    rows = sorted(((r.key, r.value, r.topic, r.partition, r.offset, r.timestamp, r.timestampType,
                    [(h.key, h.value) for h in r.headers] if r.headers is not None else None)
                   for r in collected), key=lambda t: (t[2], t[3], t[4]))
    expected = engine_rows(isolation)
    assert len(expected) > 8000
    assert rows == expected
    # one task per input partition, every one on an executor of the cluster, both of them busy
    workers = spark_cluster.executor_workers()
    assert sorted(workers.values()) == [0, 1], workers  # an executor on each worker
    assert sum(tasks.values()) == partitions, tasks
    assert set(tasks) == set(workers), (tasks, workers)
    assert all(count > 0 for count in tasks.values()), tasks
    print(f"cluster started in {spark_cluster.standalone.start_seconds:.1f} s, "
          f"the session with its executors in {spark_cluster.start_seconds:.1f} s; tasks {tasks}")
