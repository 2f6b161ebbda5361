"""A real S3 API server as the tests' object store: S3Proxy (``org.gaul:s3proxy``, the pinned
release of ``scripts/s3proxy/pom.xml``, one self-contained jar fetched into
``.cache/s3proxy/lib`` by ``scripts/setup.sh test``) with its filesystem backend.

The backend serves a directory, ``base_dir``, as buckets: each sub-directory is a bucket and
the files under it are its objects, a file's path below the bucket its key (``a/b/x.log``:
sub-directories are key prefixes, listed as pyarrow's directories). A test lays out objects by
writing files there, and reads what a client wrote from there; a broker's LocalTieredStorage
writing under ``base_dir / bucket`` is served as that bucket with no copy.

The server listens on a free loopback port, checks AWS signatures (v2 or v4) of one
identity/credential pair, accepts any region (the signature's own) and path-style addressing
(pyarrow's with an ``endpoint_override``). S3Proxy 4.x takes the aws-chunked uploads with a
trailing CRC64NVME checksum pyarrow's AWS SDK sends; it returns no checksum on GET, so
pyarrow's response validation (``x-amz-checksum-mode: enabled``) has nothing to check.
S3Proxy 2.6.0 refused those uploads (``XAmzContentSHA256Mismatch``), failed pyarrow's GETs
("Failed to flush response stream") and listed a key prefix as a 4096-byte file:
tests/engine/test_s3_server.py fails against it.

``S3Server.start()`` returns once the server answers an S3 request; ``stop()`` (also on leaving
``with``) ends it, killed if it hangs. The ``s3_server`` fixture (conftest) starts one per test
run. Nothing here is used by kfs itself.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from .java_server import JavaServer, free_port
from .paths import REPO

S3PROXY_LIB = REPO / ".cache" / "s3proxy" / "lib"
S3PROXY_JAR = "s3proxy-*-jar-with-dependencies.jar"
JAVA_OPTS = ["-Xms64m", "-Xmx512m", "-XX:+UseSerialGC", "-Djava.awt.headless=true"]
START_TIMEOUT_S = 120.0  # a JVM on a loaded 2-core machine: seconds, sometimes tens of them

ACCESS_KEY = "kfs-test-access"
SECRET_KEY = "kfs-test-secret"
REGION = "us-east-1"  # any region signs: S3Proxy checks the signature, not the region


def s3proxy_jar() -> Path | None:
    """S3Proxy's jar in ``.cache/s3proxy/lib``, or None."""
    return next(iter(sorted(S3PROXY_LIB.glob(S3PROXY_JAR))), None)


def s3proxy_missing() -> str | None:
    """Why S3Proxy cannot be run here, or None."""
    if s3proxy_jar() is None:
        return f"S3Proxy's jar is not in {S3PROXY_LIB} (run scripts/setup.sh test)"
    try:
        if subprocess.run(["java", "-version"], capture_output=True, timeout=120).returncode != 0:
            return "java does not run"
    except FileNotFoundError:
        return "no java on the PATH"
    return None


class S3Server(JavaServer):
    """One S3Proxy process serving ``base_dir`` (made if missing) as buckets; ``work_dir``
    holds its properties and its output (``s3proxy.out``). ``stop()`` sends SIGTERM (Jetty
    stops), SIGKILL if it has not ended within 30 s; ``kill()``, ``tear_down()``,
    ``log_tail()``: :class:`helpers.java_server.JavaServer`'s.

    ``endpoint`` (``http://127.0.0.1:PORT``), ``access_key``, ``secret_key``, ``region``;
    ``filesystem()`` a ``pyarrow.fs.S3FileSystem`` of it; ``env()`` the AWS_* variables a
    subprocess reads it by; ``new_bucket()`` a fresh, empty bucket (a directory of
    ``base_dir``); ``started_in`` the seconds ``start()`` took.
    """

    _buckets = itertools.count()
    what = "S3Proxy"
    output_name = "s3proxy.out"

    def __init__(self, base_dir: Path, work_dir: Path, access_key: str = ACCESS_KEY,
                 secret_key: str = SECRET_KEY, region: str = REGION,
                 java_opts: list[str] = JAVA_OPTS, start_timeout_s: float = START_TIMEOUT_S):
        self.base_dir, self.work_dir = Path(base_dir), Path(work_dir)
        self.access_key, self.secret_key, self.region = access_key, secret_key, region
        self.java_opts, self.start_timeout_s = java_opts, start_timeout_s
        self.port = free_port()
        self.proc: subprocess.Popen | None = None
        self.started_in: float | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return self.endpoint

    @property
    def output(self) -> Path:
        return self.work_dir / self.output_name

    def _properties(self) -> Path:
        settings = {
            "s3proxy.endpoint": self.endpoint,
            "s3proxy.authorization": "aws-v2-or-v4",
            "s3proxy.identity": self.access_key,
            "s3proxy.credential": self.secret_key,
            "jclouds.provider": "filesystem",
            "jclouds.filesystem.basedir": str(self.base_dir),
        }
        path = self.work_dir / "s3proxy.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    def start(self) -> "S3Server":
        began = time.monotonic()
        jar = s3proxy_jar()
        if jar is None:
            raise FileNotFoundError(s3proxy_missing())
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir.mkdir(parents=True, exist_ok=True)
        props = self._properties()
        self._run(["java", *self.java_opts, "-jar", str(jar), "--properties", str(props)],
                  began=began)
        return self

    def _answers(self) -> bool:
        """Whether S3Proxy's handler answers: an unsigned ``GET /`` (ListBuckets) is refused
        with S3's own ``AccessDenied`` error document, not just any HTTP reply."""
        try:
            with urllib.request.urlopen(self.endpoint + "/", timeout=2):
                return True  # an anonymous listing allowed: served all the same
        except urllib.error.HTTPError as e:
            return e.code == 403 and b"<Code>AccessDenied</Code>" in e.read()
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False  # not listening yet

    def __enter__(self) -> "S3Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what a client of it needs ------------------------------------------------------------

    def new_bucket(self, prefix: str = "bucket") -> str:
        """A bucket no test has used: ``prefix-N``, its directory ``base_dir / name`` made
        (S3Proxy lists it as a bucket at once). Bucket names: lower case, digits, ``-``."""
        while True:
            name = f"{prefix}-{next(self._buckets)}"
            try:
                (self.base_dir / name).mkdir()
                return name
            except FileExistsError:
                continue

    def filesystem(self, **options):
        """A ``pyarrow.fs.S3FileSystem`` of this server (path-style: pyarrow addresses an
        ``endpoint_override`` so), its keys and region; ``options`` override or add
        (``secret_key="wrong"``, ``allow_bucket_creation=True``, ...)."""
        from pyarrow import fs as pafs

        settings = dict(endpoint_override=f"127.0.0.1:{self.port}", scheme="http",
                        access_key=self.access_key, secret_key=self.secret_key,
                        region=self.region)
        settings.update(options)
        return pafs.S3FileSystem(**settings)

    def env(self) -> dict[str, str]:
        """The AWS_* variables that point the standard credential and endpoint chain at this
        server, for a subprocess (``{**os.environ, **server.env()}``). pyarrow's
        ``FileSystem.from_uri("s3://...")`` reads ``AWS_ENDPOINT_URL`` (its scheme too); a bare
        ``S3FileSystem()`` does not (it goes to AWS). Instance metadata is off: no lookup of
        169.254.169.254 delays a client."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": self.region,
            "AWS_EC2_METADATA_DISABLED": "true",
        }


def spark_executor_env(server: S3Server) -> dict[str, str]:
    """``server.env()`` as the ``spark.executorEnv.*`` settings of a SparkSession's build: the
    variables Spark sets on its Python workers (``SparkContext.environment``), which a
    registered data source hands to every Python process that runs it."""
    return {f"spark.executorEnv.{key}": value for key, value in server.env().items()}


def start_spark_jvm() -> None:
    """Start this process's driver JVM (PySpark's py4j gateway) now, if it is not running,
    with none of a session's settings. The build of the session that starts it passes its
    settings on the JVM's command line (``spark-submit --conf k=v``: a secret there shows in
    ``ps``), where they stay system properties that every later session of the process takes
    as its own (seen: a second session had the first one's ``spark.executorEnv.*``). The JVM
    inherits this process's environment as it is now, and keeps it."""
    from pyspark import SparkContext

    SparkContext._ensure_initialized()


def copy_into_bucket(server: S3Server, source: Path, names=None,
                     prefix: str = "logs") -> tuple[str, Path]:
    """A fresh bucket of ``server`` holding ``source``'s directories (``names``, default all)
    under ``prefix``: (its URI, that prefix's directory on the server's disk)."""
    bucket = server.new_bucket()
    target = server.base_dir / bucket / prefix
    target.mkdir(parents=True)
    for name in names if names is not None else [p.name for p in source.iterdir() if p.is_dir()]:
        shutil.copytree(source / name, target / name)
    return f"s3://{bucket}/{prefix}", target


# What the Spark-over-S3 tests share: the variables of the standard chain they keep out of
# this process, and a kfs read of the Kafka-written topics with headers.
AWS_VARIABLES = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
                 "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_REGION", "AWS_DEFAULT_REGION",
                 "AWS_PROFILE")
KAFKA_WRITTEN_TOPICS = "plain,codecs,compacted,txn,legacy"


def load_kfs(spark, path, topics=KAFKA_WRITTEN_TOPICS, **options):
    """``spark.read.format("kfs")`` of ``topics`` at ``path`` with headers and ``options``."""
    reader = spark.read.format("kfs").option("path", path).option("subscribe", topics)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.option("includeHeaders", "true").load()
