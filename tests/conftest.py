"""Shared fixtures, hooks and markers; the functions tests share are in ``helpers/``.

``mount``: a factory that mounts a backing directory through the real CLI in background mode
(``python -m kfs mount ...``, so every use also proves the command returns only once the mount
serves) and ALWAYS unmounts in teardown: ``fusermount3 -u``, then ``-uz``, then the daemon is
ended by its pid.

What a test needs beyond the checkout is declared per test, so a missing piece skips only the
tests that need it, never a whole module:

* ``@pytest.mark.fuse``: a real FUSE mount (``/dev/fuse`` and ``fusermount3``); every test
  using the ``mount`` fixture gets this mark by itself;
* ``@pytest.mark.needs_fixture("kafka-written/txn-0", ...)``: directories or files under
  ``tests/fixtures`` (``helpers.paths.FIXTURES_ROOT``), the data Kafka's own code wrote;
* ``@pytest.mark.needs_modules("pyspark", ...)``: modules of the test extras (pyspark,
  atheris), which the test imports itself; the ``spark`` fixture asks for pyspark by itself;
* ``@pytest.mark.root``: root (the ``small_disk`` fixture asks for it itself).

``spark_cluster``: a SparkSession of a Spark standalone cluster on loopback (a master and two
one-core workers as separate processes, ``helpers.spark_cluster``), one session per test module
over one cluster per test run; a failed test's report ends with the cluster's logs.

Under CI (environment variable ``CI=true``) a missing requirement fails the test instead: a CI
run never passes by skipping (``helpers.needs``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.kafka import KafkaBroker, kafka_missing
from helpers.kfs import kfs_env
from helpers.mounts import Mounter
from helpers.needs import fixture_path, require_fuse, require_modules, unavailable


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    # A SIGTERM (a CI timeout, ``kill``) ends the run as Ctrl-C does: pytest then runs every
    # fixture's teardown, so brokers, S3Proxy, Spark clusters and mounts are stopped too
    # (by default a SIGTERM ends the process at once and leaves them running).
    signal.signal(signal.SIGTERM, _interrupted)
    config.addinivalue_line("markers", "fuse: drives a real FUSE mount (needs /dev/fuse and fusermount3)")
    config.addinivalue_line("markers", "needs_fixture(*paths): reads these paths under tests/fixtures")
    config.addinivalue_line("markers", "needs_modules(*names): imports these modules of the test extras")
    config.addinivalue_line("markers", "root: needs to run as root")
    config.addinivalue_line("markers", "kafka: runs Kafka's own jars (a broker or its tools)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "mount" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.fuse)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture is set up: the test's declared needs (skip, or fail under CI)."""
    for mark in item.iter_markers("needs_fixture"):
        for part in mark.args:
            fixture_path(part)
    for mark in item.iter_markers("needs_modules"):
        require_modules(*mark.args)
    if item.get_closest_marker("fuse") is not None:
        require_fuse()
    if item.get_closest_marker("kafka") is not None and kafka_missing() is not None:
        unavailable(kafka_missing())
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        unavailable("needs root")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test that used the Spark standalone cluster: its daemons' and executors' logs
    in the report."""
    report = yield
    standalone = getattr(item, "funcargs", {}).get("spark_standalone")
    if report.failed and standalone is not None:
        report.sections.append((f"spark cluster logs ({report.when})", standalone.logs()))
    return report


@pytest.fixture
def mount(tmp_path):
    """Factory: ``mount(backing=None, *cli_options)`` -> Mount (see helpers.mounts.Mounter)."""
    require_fuse()
    mounter = Mounter(tmp_path)
    try:
        yield mounter
    finally:
        mounter.close_all()


@pytest.fixture
def kafka_broker(tmp_path):
    """Factory: ``kafka_broker(log_dir=None, **server_properties)`` -> a started
    ``KafkaBroker`` (``tests/helpers/kafka.py``) on loopback with ``log.dirs`` under
    ``tmp_path``; every broker it started is stopped in teardown, even on failure (killed if a
    clean shutdown hangs), and its log printed (pytest shows it for a failed test)."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    brokers: list[KafkaBroker] = []

    def start(log_dir: Path | None = None, **overrides: str) -> KafkaBroker:
        n = len(brokers)
        broker = KafkaBroker(log_dir or tmp_path / f"kafka-logs{n}", tmp_path / f"broker{n}",
                             {k.replace("_", "."): str(v) for k, v in overrides.items()})
        brokers.append(broker)
        return broker.start()

    try:
        yield start
    finally:
        for broker in brokers:
            broker.tear_down()


@pytest.fixture
def tiered_broker(tmp_path):
    """A started ``KafkaBroker`` with tiered storage on (``tests/helpers/kafka.py``:
    ``tiered_storage_settings``; topics created with ``TIERED_TOPIC_CONFIG`` tier within
    seconds): ``log.dirs`` at ``tmp_path/kafka-logs``, Kafka's LocalTieredStorage writing under
    ``tmp_path/remote`` (``broker.remote_root`` is its ``kafka-tiered-storage`` directory).
    Stopped in teardown, even on failure (killed if a clean shutdown hangs), its log printed."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    broker = KafkaBroker(tmp_path / "kafka-logs", tmp_path / "broker",
                         remote_storage_dir=tmp_path / "remote")
    try:
        broker.start()
        yield broker
    finally:
        broker.tear_down()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """A real S3 API server on loopback (``tests/helpers/s3.py``: S3Proxy's filesystem
    backend), one per test run (a JVM's start takes seconds): ``.endpoint``
    (``http://127.0.0.1:PORT``), ``.access_key``, ``.secret_key``, ``.region``, ``.base_dir``
    (each sub-directory a bucket, the files under it its objects, ``a/b/x.log`` the key of
    ``<base_dir>/<bucket>/a/b/x.log``), ``.new_bucket()`` (a fresh bucket's name: tests share
    the server, never a bucket), ``.filesystem(**options)`` (a ``pyarrow.fs.S3FileSystem`` of
    it), ``.env()`` (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL, AWS_REGION for
    a subprocess). Returned once it answers an S3 request; always stopped in teardown (killed
    if it hangs). unavailable() without java or S3Proxy's jar (scripts/setup.sh test)."""
    require_modules("pyarrow")
    from helpers.s3 import S3Server, s3proxy_missing

    missing = s3proxy_missing()
    if missing:
        unavailable(missing)
    root = tmp_path_factory.mktemp("s3proxy")
    server = S3Server(root / "base", root / "server")
    try:
        yield server.start()
    finally:
        server.tear_down()


@pytest.fixture(scope="session")
def gcs_server(tmp_path_factory):
    """A GCS JSON API server on loopback (``tests/helpers/gcs.py``: gcp-storage-emulator, in
    memory, no credentials asked), one per test run: ``.endpoint``, ``.new_bucket()``,
    ``.upload(directory, bucket)``, ``.filesystem()``. Always stopped in teardown.
    unavailable() when the emulator is not installed (scripts/setup.sh test)."""
    require_modules("pyarrow")
    from helpers.gcs import GcsServer, gcs_emulator_missing

    missing = gcs_emulator_missing()
    if missing:
        unavailable(missing)
    server = GcsServer(tmp_path_factory.mktemp("gcs"))
    try:
        yield server.start()
    finally:
        server.stop()


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: a real disk that fills up (unavailable() where mounting one is not
    allowed: it needs root)."""
    path = tmp_path / "disk"
    path.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
                         capture_output=True, timeout=30)
    if res.returncode != 0:
        unavailable(f"cannot mount a tmpfs here (needs root): {res.stderr.decode(errors='replace').strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True, timeout=30)


@pytest.fixture(scope="module")
def spark():
    """A local[2] SparkSession with the ``kfs`` format registered, one per test module (a cold
    session takes seconds). Filter pushdown starts off; tests that turn it on re-register.
    Unavailable (a skip, or a failure under CI) when pyspark is not importable."""
    require_modules("pyspark", "pyarrow")
    from pyspark.sql import SparkSession

    import kfs.spark

    # Python workers must import this checkout with this interpreter's packages.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = kfs_env()["PYTHONPATH"]
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kfs-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    kfs.spark.register(session, filter_pushdown=False)
    yield session
    session.stop()


@pytest.fixture(scope="session")
def spark_standalone(tmp_path_factory):
    """A Spark standalone cluster on loopback (``helpers.spark_cluster.SparkStandalone``): a
    master and two workers (one core, 1 GiB each, their own work directories), started once per
    test run and waited for until the master lists both ALIVE; always stopped in teardown (their
    process groups ended, killed after a deadline). Logs under the run's basetemp
    (``spark-standalone0/``)."""
    require_modules("pyspark", "pyarrow")
    from helpers.spark_cluster import SparkStandalone

    standalone = SparkStandalone(tmp_path_factory.mktemp("spark-standalone"))
    try:
        yield standalone.start()
    finally:
        standalone.stop()


@pytest.fixture(scope="module")
def s3_cluster(spark_standalone, s3_server):
    """A ``helpers.spark_cluster.SparkCluster`` of ``spark_standalone`` whose session was built
    with ``s3_server``'s AWS_* variables as ``spark.executorEnv.*`` and the ``kfs`` format
    registered after the build (the credentials given as a user gives them, docs/spark.md); this
    process's environment (and the driver JVM's) has none of them while the module runs. One
    per test module, as ``spark_cluster`` (a module cannot use both)."""
    import time

    import kfs.spark
    from helpers.s3 import AWS_VARIABLES, spark_executor_env, start_spark_jvm
    from helpers.spark_cluster import SparkCluster, cluster_session

    saved = {k: os.environ.pop(k) for k in AWS_VARIABLES if k in os.environ}
    try:
        start_spark_jvm()  # this module's settings stay out of the later modules' sessions
        began = time.monotonic()
        session = cluster_session(spark_standalone, "kfs-s3-cluster-tests",
                                  spark_executor_env(s3_server))
        try:
            kfs.spark.register(session, filter_pushdown=False)
            yield SparkCluster(session, spark_standalone, time.monotonic() - began)
        finally:
            session.stop()
    finally:
        os.environ.update(saved)


@pytest.fixture(scope="module")
def spark_cluster(spark_standalone):
    """A ``helpers.spark_cluster.SparkCluster``: ``.session``, a SparkSession submitted to
    ``spark_standalone``'s master as docs/spark.md tells a user (the executors run this
    interpreter and import this checkout), returned once an executor of each worker registered;
    ``.tasks_by_executor(action)``: ``(action(), {executor id: tasks it ran})``;
    ``.executor_workers()``: ``{executor id: worker number}``. One per test module (a process
    has one SparkContext: a module cannot use both this and ``spark``). The ``kfs`` format is
    found by Spark's lookup (``pyspark_kfs``), not registered."""
    import time

    from helpers.spark_cluster import SparkCluster, cluster_session

    began = time.monotonic()
    session = cluster_session(spark_standalone)
    try:
        yield SparkCluster(session, spark_standalone, time.monotonic() - began)
    finally:
        session.stop()
