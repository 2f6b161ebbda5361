"""Spark's ``format("kfs")`` reading ``s3://`` paths from a real S3 API server (S3Proxy, the
``s3_server`` fixture), with credentials and endpoint given the way a user gives them: the
standard AWS_* variables in the executors' environment, never a data source option.

The session is built as docs/spark.md tells a user: ``spark.executorEnv.AWS_ACCESS_KEY_ID`` (and
the secret, endpoint and region) set when building it, then ``kfs.spark.register``. A
registered Python data source hands ``SparkContext.environment`` (the ``spark.executorEnv.*``
settings) to every Python process that runs it: the driver's planning processes and the
executors' readers. This process's own environment holds no AWS_* variable, nor does the JVM's
(one JVM serves every Spark module of a pytest run; variables set after it started reach no
worker), so the rows prove the credentials travelled that way."""

import os
import re
import shutil
import sys

import pytest

from helpers.kfs import kfs_env
from helpers.paths import KAFKA_WRITTEN
from helpers.s3 import (
    AWS_VARIABLES,
    copy_into_bucket,
    load_kfs,
    spark_executor_env,
    start_spark_jvm,
)
from helpers.tiered import bases_of, tier

needs_fixtures = pytest.mark.needs_fixture("kafka-written")

NOWHERE = "http://127.0.0.1:9"  # the discard port: nothing listens there


@pytest.fixture(scope="module")
def s3_spark(s3_server):
    """A local[2] SparkSession whose executors (and planning processes) get the S3 server's
    AWS_* variables from ``spark.executorEnv.*``, the ``kfs`` format registered after the
    build; this process's environment has none of them while it runs."""
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    import kfs.spark

    saved = {k: os.environ.pop(k) for k in AWS_VARIABLES if k in os.environ}
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = kfs_env()["PYTHONPATH"]
    start_spark_jvm()  # this module's settings stay out of the later modules' sessions
    builder = (SparkSession.builder.master("local[2]")
               .appName("kfs-s3-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in spark_executor_env(s3_server).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    try:
        session.sparkContext.setLogLevel("ERROR")
        kfs.spark.register(session, filter_pushdown=False)
        yield session
    finally:
        session.stop()
        os.environ.update(saved)


def rows(df):
    return sorted((tuple(r) for r in df.collect()), key=lambda t: (t[2], t[3], t[4]))


def test_no_credentials_in_this_process_or_the_jvm(s3_spark):
    """What the reads below prove: the driver's environment, the JVM's too, has no AWS_*
    variable; only the session's executor environment has them."""
    getenv = s3_spark._jvm.java.lang.System.getenv
    assert not [k for k in AWS_VARIABLES if k in os.environ]
    assert getenv("AWS_SECRET_ACCESS_KEY") is None and getenv("AWS_ENDPOINT_URL") is None
    assert s3_spark.sparkContext.environment["AWS_ENDPOINT_URL"].startswith("http://127.0.0.1:")


@needs_fixtures
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_directory_in_a_bucket_reads_as_on_disk(s3_spark, s3_server, isolation):
    uri = copy_into_bucket(s3_server, KAFKA_WRITTEN)[0]
    local = rows(load_kfs(s3_spark, str(KAFKA_WRITTEN), **{"isolation.level": isolation}))
    df = load_kfs(s3_spark, uri, **{"isolation.level": isolation, "maxRecordsPerPartition": "1000"})
    assert df.rdd.getNumPartitions() >= 10  # planned from the bucket's index objects
    got = rows(df)
    assert len(local) > 8000 and got == local
    if isolation == "read_committed":  # the aborted transaction's records are not read
        assert len(got) < len(rows(load_kfs(s3_spark, uri)))


@needs_fixtures
def test_a_range_by_offsets_from_the_bucket(s3_spark, s3_server):
    uri = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0"])[0]
    df = load_kfs(s3_spark, uri, "plain", startingOffsets='{"plain": {"0": 1200}}',
              endingOffsets='{"plain": {"0": 1300}}', maxRecordsPerPartition="30")
    assert df.rdd.getNumPartitions() == 4
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(1200, 1300))


@needs_fixtures
def test_refused_credentials_are_the_line_every_front_end_prints(s3_spark, s3_server):
    """Issue 37 item 21: executors with a wrong secret: the failure's message is the store's
    URI and the same words ``kfs verify``, ``kfs dump`` and ``kfs mount`` print
    (``REFUSED_CREDENTIALS``), not the AWS SDK's code of whichever call met it."""
    import kfs.spark
    from storage.remote.object_store import REFUSED_CREDENTIALS

    uri = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0"])[0]
    sc = s3_spark.sparkContext
    right = sc.environment["AWS_SECRET_ACCESS_KEY"]
    sc.environment["AWS_SECRET_ACCESS_KEY"] = "not-the-secret-1234"
    kfs.spark.register(s3_spark, filter_pushdown=False)
    try:
        with pytest.raises(Exception) as failed:
            load_kfs(s3_spark, uri, "plain").count()
        assert f"ObjectStoreError: {uri}: {REFUSED_CREDENTIALS}\n" in str(failed.value)
        assert "not-the-secret-1234" not in str(failed.value)
    finally:
        sc.environment["AWS_SECRET_ACCESS_KEY"] = right
        kfs.spark.register(s3_spark, filter_pushdown=False)


@needs_fixtures
def test_endpoint_and_region_options_override_the_environment(s3_spark, s3_server):
    """Executors whose AWS_ENDPOINT_URL points nowhere: the read fails, naming the bucket's
    URI; with the ``endpoint`` and ``region`` options it reads the bucket (the keys still from
    the environment)."""
    import kfs.spark

    uri = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0"])[0]
    sc = s3_spark.sparkContext
    right = sc.environment["AWS_ENDPOINT_URL"]
    sc.environment["AWS_ENDPOINT_URL"] = NOWHERE  # what the next registration hands on
    kfs.spark.register(s3_spark, filter_pushdown=False)
    try:
        with pytest.raises(Exception, match=re.escape(uri)) as failed:
            load_kfs(s3_spark, uri, "plain").count()
        assert s3_server.secret_key not in str(failed.value)
        df = load_kfs(s3_spark, uri, "plain", endpoint=s3_server.endpoint, region=s3_server.region,
                  maxRecordsPerPartition="1000")
        assert df.rdd.getNumPartitions() == 5
        assert sorted(r.offset for r in df.select("offset").collect()) == list(range(5000))
    finally:
        sc.environment["AWS_ENDPOINT_URL"] = right
        kfs.spark.register(s3_spark, filter_pushdown=False)


@needs_fixtures
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_a_tiered_topic_with_its_remote_tier_in_a_bucket(s3_spark, s3_server, tmp_path,
                                                         isolation):
    """``path`` the broker's local log directory, ``remote.path`` LocalTieredStorage's root in
    the bucket: the remote segments below the local log, then the local log (a segment in
    both read once), as the whole partition reads from disk."""
    bases = bases_of(KAFKA_WRITTEN / "txn-0")
    root, local = tier(tmp_path, "txn-0", bases[:3], bases[2:])
    bucket = s3_server.new_bucket()
    shutil.copytree(root, s3_server.base_dir / bucket / "rsm")
    want = rows(load_kfs(s3_spark, str(KAFKA_WRITTEN), "txn", **{"isolation.level": isolation}))
    df = load_kfs(s3_spark, str(local), "txn", **{"isolation.level": isolation,
                                                "remote.path": f"s3://{bucket}/rsm",
                                                "maxRecordsPerPartition": "50"})
    assert df.rdd.getNumPartitions() > 3
    assert rows(df) == want and want
