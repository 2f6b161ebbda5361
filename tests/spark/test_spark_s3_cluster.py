"""``format("kfs")`` reading ``s3://`` from a real S3 API server (S3Proxy) on a Spark standalone
cluster (a master and two one-core workers as separate processes, ``spark_standalone``): the
credentials and endpoint given as a user gives them, ``spark.executorEnv.AWS_*`` set when
building the session and ``kfs.spark.register`` after it, none in the driver's environment.
The executors are JVMs of their own, started by the workers: what they read, they read with the
variables the session handed them. A read cut into many input partitions runs tasks on both
workers and gives the rows the same session reads from the local directory.

Its own module: a process has one SparkContext, and this one is the cluster's."""

import os
import shutil

import pytest

from helpers.paths import KAFKA_WRITTEN
from helpers.s3 import copy_into_bucket, load_kfs
from helpers.tiered import bases_of, tier

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def rows(collected):
    return sorted((tuple(r) for r in collected), key=lambda t: (t[2], t[3], t[4]))


def check_both_workers_ran(cluster, tasks, partitions):
    workers = cluster.executor_workers()
    assert sorted(workers.values()) == [0, 1], workers  # an executor on each worker
    assert sum(tasks.values()) == partitions, tasks
    assert set(tasks) == set(workers), (tasks, workers)
    assert all(count > 0 for count in tasks.values()), tasks


@needs_fixtures
def test_a_bucket_read_on_the_cluster_runs_on_both_workers(s3_cluster, spark_standalone,
                                                           s3_server):
    session = s3_cluster.session
    assert "AWS_SECRET_ACCESS_KEY" not in os.environ
    assert session._jvm.java.lang.System.getenv("AWS_SECRET_ACCESS_KEY") is None
    uri = copy_into_bucket(s3_server, KAFKA_WRITTEN)[0]
    options = {"isolation.level": "read_committed", "maxRecordsPerPartition": "500"}
    df = load_kfs(session, uri, **options)
    partitions = df.rdd.getNumPartitions()
    assert partitions >= 8  # at least 4 tasks for each of the two one-core executors
    collected, tasks = s3_cluster.tasks_by_executor(df.collect)
    local = rows(load_kfs(session, str(KAFKA_WRITTEN), **options).collect())
    assert len(local) > 8000 and rows(collected) == local
    check_both_workers_ran(s3_cluster, tasks, partitions)


@needs_fixtures
def test_a_tiered_topic_on_the_cluster(s3_cluster, spark_standalone, s3_server, tmp_path):
    """``path`` the local tier (on a disk every worker sees: here, the one machine's),
    ``remote.path`` LocalTieredStorage's root in the bucket."""
    session = s3_cluster.session
    bases = bases_of(KAFKA_WRITTEN / "txn-0")
    root, local = tier(tmp_path, "txn-0", bases[:3], bases[2:])
    bucket = s3_server.new_bucket()
    shutil.copytree(root, s3_server.base_dir / bucket / "rsm")
    df = load_kfs(session, str(local), "txn", **{"remote.path": f"s3://{bucket}/rsm",
                                               "maxRecordsPerPartition": "50"})
    partitions = df.rdd.getNumPartitions()
    assert partitions >= 4
    collected, tasks = s3_cluster.tasks_by_executor(df.collect)
    want = rows(load_kfs(session, str(KAFKA_WRITTEN), "txn").collect())
    assert rows(collected) == want and want
    check_both_workers_ran(s3_cluster, tasks, partitions)
