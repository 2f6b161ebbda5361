"""kfs against a real Kafka broker (4.1.1's jars in ``.cache/kafka/lib``, started on loopback by
``tests/helpers/kafka.py``) as the peer: the same data, the same work, medians of interleaved
rounds, ratios printed. One sub-command per figure:

* ``spark``: Spark's own Kafka source (``spark.read.format("kafka")``, the
  ``spark-sql-kafka-0-10`` jar and its dependencies: ``scripts/spark-kafka/pom.xml``, fetched
  into ``.cache/spark-kafka/lib`` by ``scripts/setup.sh test`` as the tests' peer) reading a
  topic of ``--records`` records (100-byte values, keyed) from the broker, against
  ``spark.read.format("kfs")`` reading the broker's log directory directly, and Parquet of the
  same rows beside both. Rows checked equal (count, offsets, bytes, hash sums over (offset,
  key, value) and the other columns). Target: kfs >= 1.5x Kafka's rows/s.
* ``compact``: the broker's own log cleaner (one forced pass: a compacted topic held back by
  ``min.compaction.lag.ms`` until the copy is taken, then released; its figures read from the
  cleaner's stats in ``server.log``) against ``kfs compact`` on a copy of the same directory
  taken before the broker cleaned. Checked: both leave the same records (offsets, keys,
  values, timestamps). Target: kfs MB/s >= 1x Kafka's.
* ``recovery``: the broker's start on a log directory left by ``kill -9`` after producing
  ``--size`` bytes (start to serving the last record; its log load time from ``server.log``)
  against ``kfs mount`` (writable) of a copy (start to serving the last record). Target:
  Kafka's time / kfs's >= 1.
* ``coordinator``: a ``__consumer_offsets`` partition of ``--size`` bytes of offset commits from
  a few groups through the broker (its log cleaner off, so the partition stays that large),
  then the group coordinator's load on a broker restart (start to ``describeGroups`` answering
  for every group; the load time from ``server.log``) against the first ``ls consumer-groups``
  of a ``--read-only`` mount of a copy. Checked: every committed offset the same on both.
* ``tiered``: a topic of ``--size`` bytes (100-byte values, keyed) on a broker with tiered
  storage on (Kafka's LocalTieredStorage, 64 MiB segments, ``local.retention.bytes`` of two),
  produced, then waited for until every rolled segment is ``COPY_SEGMENT_FINISHED`` in
  ``__remote_log_metadata`` and all but the last few are remote-only. S3Proxy serves
  LocalTieredStorage's directory as a bucket (its filesystem backend's base directory is that
  directory's parent: no copy). Spark reads the whole topic, interleaved: Spark's Kafka source
  through the broker (which serves the remote segments), ``format("kfs")`` with ``path`` = the
  broker's log directory and ``remote.path`` = ``s3://tiered/rsm`` (credentials and endpoint as
  the standard AWS_* variables), and the same with ``remote.path`` = the directory's
  ``file://`` URI; Parquet of the same rows beside them (what the aggregate costs the JVM
  alone). Rows checked equal as ``spark`` does. Printed: rows/s and MB/s, the ratios
  (targets: kfs from the bucket >= 3x Kafka's, >= 0.5x kfs from the local directory),
  and ``format("kfs")`` over the broker as a cluster (``kafka.bootstrap.servers`` and
  ``remote.path``, no log directory: the history from the bucket, the tail through the broker;
  target >= 3x Kafka's), with the bytes the broker sent for one such read (its
  ``BytesOutPerSec`` of the topic, by Kafka's ``JmxTool`` over JMX on loopback) beside the
  tail's ``.log`` bytes (target <= 1.1x);
  S3Proxy's request counts (its own metrics, by S3 operation) and bytes sent (its ``wchar``)
  per kfs read from the bucket, the same for a 1% time range, and the peak RSS of the
  executors' Python workers and of the Spark JVM during the bucket reads (target: <= 400 MB
  a worker).

    .venv/bin/python benchmarks/bench_kafka_peer.py spark [--records 1000000] [--rounds 3]
    .venv/bin/python benchmarks/bench_kafka_peer.py compact [--size 1G] [--keys 1000000]
    .venv/bin/python benchmarks/bench_kafka_peer.py recovery [--size 1G] [--checkpoint]
    .venv/bin/python benchmarks/bench_kafka_peer.py coordinator [--size 1G] [--groups 4]
    .venv/bin/python benchmarks/bench_kafka_peer.py tiered [--size 1G] [--master local[2]]
    (each also takes --rounds N, --dir DIR, --keep; a quick look: --size 64M, --records 100000)

Spark's Kafka source is the release ``scripts/spark-kafka/pom.xml`` pins (the newest on Maven
Central; pyspark 4.3.0's own is not there), and the run says so when it is not pyspark's.
``recovery`` sets the broker's ``log.flush.offset.checkpoint.interval.ms`` to a day, so
that the kill -9 leaves no recovery point and both sides revalidate every segment (kfs reads the
same checkpoint file); ``--checkpoint`` keeps Kafka's 60 s. Its start-to-serving time includes
the KRaft controller refusing the restarted broker's registration until the killed
incarnation's session expires (``broker.session.timeout.ms``, 9 s), so it also prints the time
to Kafka's "Loaded N logs" line and that log load alone.

The broker runs with Kafka's own ``kafka-server-start.sh`` JVM settings (1 GiB heap, G1, full
JIT), not the tests' small, C1-only ones. Page caches are warm for both sides (every copy was
just written). Everything lives in a temp dir (``--dir`` to choose, ``--keep`` to keep it);
every broker, Spark JVM and mount this run started is stopped in ``finally`` blocks (also on
Ctrl-C and SIGTERM).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

from helpers import kafka as kafka_broker  # noqa: E402  (tests/helpers/kafka.py)
from bench import Mounts, Table, log, med, ratio, spread  # noqa: E402
from helpers.s3 import S3Server, spark_executor_env  # noqa: E402  (tests/helpers/s3.py)

# kafka-server-start.sh's defaults (KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS): a fair peer,
# where the tests' broker is capped for many brokers at once (512 MiB, SerialGC, C1 only).
KAFKA_JVM = ["-Xmx1G", "-Xms1G", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
             "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
             "-Djava.awt.headless=true"]
VALUE = 100  # bytes per value
MB = 1 << 20  # Kafka's cleaner stats and kfs's print MB of 2^20 bytes
TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    unit = text[-1].upper()
    return int(float(text[:-1]) * units[unit]) if unit in units else int(text)


def value(i: int) -> bytes:
    return b"%0*d" % (VALUE, i)


def copy_dir(src: Path, dst: Path) -> None:
    shutil.rmtree(dst, ignore_errors=True)
    subprocess.run(["cp", "-a", "--reflink=auto", str(src), str(dst)], check=True)


def log_bytes(partition_dir: Path) -> int:
    return sum(p.stat().st_size for p in partition_dir.glob("*.log"))


def secs(xs: list[float]) -> str:
    return spread(xs, lambda x: f"{x:.2f} s")


def mbps(xs: list[float]) -> str:
    return spread(xs, lambda x: f"{x:,.1f} MB/s")


class Failures(list):
    def check(self, ok: bool, what: str) -> bool:
        if not ok:
            self.append(what)
            print(f"!! {what}", flush=True)
        return ok

    def report(self) -> int:
        if self:
            print(f"\n{len(self)} check(s) FAILED:")
            for f in self:
                print(f"  {f}")
            return 1
        print("\nevery check passed")
        return 0


# --------------------------------------------------------------------------- the broker

class Broker(kafka_broker.KafkaBroker):
    """The tests' broker, with Kafka's default JVM settings, a finer wait for it to serve,
    and ``again(log_dir, work_dir)``: the same node (ports, cluster id) over another copy of
    its log directory."""

    live: list["Broker"] = []

    def __init__(self, log_dir: Path, work_dir: Path, overrides: dict[str, str] | None = None,
                 remote_storage_dir: Path | None = None):
        # JMX on loopback (no auth): the broker's own metrics, read by Kafka's JmxTool
        self.jmx_port = kafka_broker.free_port()
        jmx = ["-Dcom.sun.management.jmxremote", "-Dcom.sun.management.jmxremote.authenticate=false",
               "-Dcom.sun.management.jmxremote.ssl=false", "-Djava.rmi.server.hostname=127.0.0.1",
               f"-Dcom.sun.management.jmxremote.port={self.jmx_port}",
               f"-Dcom.sun.management.jmxremote.rmi.port={self.jmx_port}"]
        super().__init__(log_dir, work_dir, overrides, java_opts=[*KAFKA_JVM, *jmx],
                         start_timeout_s=600, remote_storage_dir=remote_storage_dir)

    def bytes_out(self, topic: str) -> int:
        """The broker's ``BytesOutPerSec`` count of ``topic`` (what its fetch responses sent to
        consumers, remote-tier reads included; replication is counted apart), by Kafka's own
        ``JmxTool``."""
        out = kafka_broker.run_tool(
            "org.apache.kafka.tools.JmxTool", "--jmx-url",
            f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{self.jmx_port}/jmxrmi", "--object-name",
            f"kafka.server:type=BrokerTopicMetrics,name=BytesOutPerSec,topic={topic}",
            "--attributes", "Count", "--one-time", "true", "--report-format", "properties",
            check=False, timeout=120)
        text = out.stdout.decode(errors="replace")
        counts = [line.rsplit("=", 1)[1] for line in text.splitlines() if ":Count=" in line]
        return int(float(counts[-1])) if counts else 0

    def start(self) -> "Broker":
        Broker.live.append(self)
        return super().start()

    def again(self, log_dir: Path, work_dir: Path) -> "Broker":
        other = Broker(log_dir, work_dir, self.overrides)
        other.port, other.controller_port, other.cluster_id = (
            self.port, self.controller_port, self.cluster_id)
        return other

    def server_log_text(self) -> str:
        try:
            return self.server_log.read_text(errors="replace")
        except OSError:
            return ""

    @classmethod
    def stop_all(cls) -> None:
        while cls.live:
            b = cls.live.pop()
            try:
                b.kill()
            except Exception as exc:  # noqa: BLE001 - keep stopping the others
                print(f"warning: killing the broker on {b.log_dir} failed: {exc!r}",
                      file=sys.stderr)


def producer(broker: Broker):
    from confluent_kafka import Producer

    # The Java producer's batch.size (16 KiB), no compression, every record acknowledged.
    return Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 20,
                     "batch.size": 16384, "compression.type": "none", "acks": "all",
                     "queue.buffering.max.messages": 1_000_000,
                     "queue.buffering.max.kbytes": 1 << 20})


def produce(p, topic: str, first: int, count: int, keyed) -> None:
    """Records ``first .. first+count-1``: value ``value(i)``, key per ``keyed``."""
    for i in range(first, first + count):
        k = None if keyed is None else keyed(i)
        while True:
            try:
                p.produce(topic, value(i), k)
                break
            except BufferError:
                p.poll(0.05)
        if i % 10000 == 0:
            p.poll(0)


def produce_until(broker: Broker, topic: str, size: int, keyed, chunk: int = 200_000,
                  size_of=None) -> int:
    """Produce to ``topic``-0 until its .log files hold ``size`` bytes (``size_of()``, by
    default those in the broker's log directory); the record count."""
    p = producer(broker)
    n, started = 0, time.perf_counter()
    part = broker.log_dir / f"{topic}-0"
    size_of = size_of or (lambda: log_bytes(part))
    while size_of() < size:
        produce(p, topic, n, chunk, keyed)
        n += chunk
        left = p.flush(300)
        if left:
            raise RuntimeError(f"{left} records not acknowledged")
        log(f"produced {n:,} records, {size_of() / 1e6:,.0f} MB "
            f"({time.perf_counter() - started:.0f} s)")
    return n


def last_record(bootstrap: str, topic: str, offset: int, timeout: float = 600):
    """Fetch the record at ``offset`` of ``topic``-0 (retrying until the broker serves it);
    (key, value)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-kafka-peer-probe",
                  "enable.auto.commit": False, "log_level": 0, "fetch.wait.max.ms": 10,
                  "reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50,
                  "topic.metadata.refresh.interval.ms": 100})
    try:
        c.assign([TopicPartition(topic, 0, offset)])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.05)
            if m is not None and m.error() is None:
                return m.key(), m.value(), m.offset()
        raise TimeoutError(f"offset {offset} of {topic}-0 not served within {timeout:.0f} s")
    finally:
        c.close()


def grep_ms(pattern: str, text: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(pattern, text)]


def logged_at(pattern: str, text: str) -> float | None:
    """The epoch time (s) of the last server.log line matching ``pattern`` (log4j's
    ``[yyyy-MM-dd HH:mm:ss,SSS]``, local time)."""
    import datetime

    found = re.findall(rf"^\[([\d\- :,]+)\] .*{pattern}", text, re.M)
    if not found:
        return None
    return datetime.datetime.strptime(found[-1], "%Y-%m-%d %H:%M:%S,%f").timestamp()


# --------------------------------------------------------------------------- spark

# Every column, so no reader skips one; the hash sums are the rows' checksum.
AGG = ["count(*)", "count(key)", "sum(length(value))", "min(offset)", "max(offset)",
       "sum(hash(offset, key, value))", "sum(hash(offset, value))",
       "sum(hash(timestamp, timestampType, topic, partition))"]


def kafka_source(spark, broker: Broker, topic: str, kfs, failures: Failures):
    """Spark's Kafka source over ``topic`` from earliest to latest, in as many input partitions
    as the kfs DataFrame ``kfs`` has; its schema checked to be kfs's."""
    kafka = (spark.read.format("kafka").option("kafka.bootstrap.servers", broker.bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest")
             .option("endingOffsets", "latest")
             .option("minPartitions", str(kfs.rdd.getNumPartitions())).load())
    failures.check(kafka.schema == kfs.schema, f"schemas differ: kafka "
                   f"{kafka.schema.simpleString()} != kfs {kfs.schema.simpleString()}")
    return kafka


def spark_kafka_jars_told(args, list_jars: bool = False) -> list[str]:
    """Spark's Kafka source's jars (``scripts/spark-kafka/pom.xml``, fetched by
    ``scripts/setup.sh test`` into ``.cache/spark-kafka/lib``, the tests' peer too) less what
    pyspark ships, printed with the versions and the master (``list_jars``: each jar's name
    too), and a note when the connector's release is not this Spark's. SystemExit naming the
    set-up when they were not fetched."""
    import pyspark

    if why := kafka_broker.spark_kafka_missing():
        raise SystemExit(f"bench: {why}")
    jars = kafka_broker.spark_kafka_jars()
    connector = next(Path(j).stem for j in jars if "spark-sql-kafka" in Path(j).name)
    kafka_version = connector.rsplit("-", 1)[1]
    names = f": {', '.join(Path(j).name for j in jars)}" if list_jars else ""
    print(f"pyspark {pyspark.__version__}, spark-sql-kafka-0-10_2.13 {kafka_version} "
          f"({len(jars)} jars{names}), master {args.master}")
    if kafka_version != pyspark.__version__:
        print(f"note: Spark's Kafka source {kafka_version} (scripts/spark-kafka/pom.xml) runs "
              f"on this Spark {pyspark.__version__}")
    return jars


def cmd_spark(args, tmp: Path, failures: Failures) -> None:
    from pyspark.sql import SparkSession

    n, rounds, topic = args.records, args.rounds, "bench"
    jars = spark_kafka_jars_told(args, list_jars=True)

    broker = Broker(tmp / "kafka-logs", tmp / "broker").start()
    broker.create_topic(topic, 1)
    t = time.perf_counter()
    p = producer(broker)
    produce(p, topic, 0, n, lambda i: b"key-%d" % i)
    if p.flush(300):
        raise RuntimeError("records not acknowledged")
    part = broker.log_dir / f"{topic}-0"
    print(f"topic {topic}-0: {n:,} records of {VALUE} B values, keyed, produced in "
          f"{time.perf_counter() - t:.1f} s; {log_bytes(part) / 1e6:,.1f} MB of .log in "
          f"{len(list(part.glob('*.log')))} segment(s); the broker keeps running")

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        q for q in (str(REPO), os.environ.get("PYTHONPATH")) if q)
    spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").config("spark.jars", ",".join(jars))
             .config("spark.ui.showConsoleProgress", "false")
             .getOrCreate())
    try:
        spark.sparkContext.setLogLevel("ERROR")
        kfs = (spark.read.format("kfs").option("subscribe", topic)
               .load(str(broker.log_dir)))
        parts = kfs.rdd.getNumPartitions()
        kafka = kafka_source(spark, broker, topic, kfs, failures)
        parquet_dir = str(tmp / "parquet")
        kfs.write.parquet(parquet_dir)
        pq = spark.read.parquet(parquet_dir)
        readers = {"kafka": kafka, "kfs": kfs, "parquet": pq}
        results = {}
        for name, frame in readers.items():  # warm JVM, Python workers, consumers, page cache
            results[name] = tuple(frame.selectExpr(*AGG).collect()[0])
        print(f"rows (count, keys, value bytes, min/max offset, hash sums): {results['kafka']}")
        failures.check(results["kafka"][:5] == (n, n, VALUE * n, 0, n - 1),
                       f"kafka read {results['kafka'][:5]}, expected {(n, n, VALUE * n, 0, n - 1)}")
        for name in ("kfs", "parquet"):
            failures.check(results[name] == results["kafka"],
                           f"{name} rows differ from Kafka's: {results[name]} != "
                           f"{results['kafka']}")
        times: dict[str, list[float]] = {k: [] for k in readers}
        for r in range(rounds):
            log(f"spark round {r + 1}/{rounds}")
            order = list(readers) if r % 2 == 0 else list(reversed(readers))
            for name in order:
                t = time.perf_counter()
                got = tuple(readers[name].selectExpr(*AGG).collect()[0])
                times[name].append(time.perf_counter() - t)
                failures.check(got == results["kafka"], f"{name} round {r + 1}: {got}")
    finally:
        spark.stop()
        broker.stop()

    rates = {k: [n / s for s in v] for k, v in times.items()}
    table = Table(f"Spark read of {n:,} records ({VALUE} B values, keyed), {parts} input "
                  f"partitions each, {args.master}; medians of {rounds} interleaved rounds",
                  ("what", "rows/s", "kfs / it"))
    table.add('kfs   format("kfs") on the broker\'s log dir', spread(rates["kfs"]), "")
    table.add(f'Kafka format("kafka") from the broker (minPartitions={parts})',
              spread(rates["kafka"]), ratio(med(rates["kfs"]), med(rates["kafka"])))
    table.add("Parquet of the same rows", spread(rates["parquet"]),
              ratio(med(rates["kfs"]), med(rates["parquet"])))
    table.print()
    k = med(rates["kfs"]) / med(rates["kafka"])
    print(f"kfs / Kafka: {k:.2f}x (target >= 1.5x: {'met' if k >= 1.5 else 'NOT met'})")


# --------------------------------------------------------------------------- compact

STATS = re.compile(
    r"cleaned log (?P<log>\S+) \(dirty section = \[(?P<start>\d+), (?P<end>\d+)\]\)\s+"
    r"(?P<mb>[\d,.]+) MB of log processed in (?P<secs>[\d,.]+) seconds \((?P<rate>[\d,.]+) "
    r"MB/sec\)\.\s+Indexed (?P<imb>[\d,.]+) MB in (?P<isecs>[\d,.]+) seconds.*?"
    r"Start size: (?P<smb>[\d,.]+) MB \((?P<smsg>[\d,]+) messages\)\s+"
    r"End size: (?P<emb>[\d,.]+) MB \((?P<emsg>[\d,]+) messages\)", re.S)


def cleaner_stats(text: str, name: str) -> dict | None:
    """The last stats block of LogCleaner for log ``name`` in ``text`` (Kafka's server.log or
    kfs compact's output, in the same words)."""
    found = [m for m in STATS.finditer(text) if m.group("log") == name]
    if not found:
        return None
    g = found[-1].groupdict()
    num = {k: float(v.replace(",", "")) for k, v in g.items() if k != "log"}
    return num


def partition_rows(backing: Path, name: str):
    """(offset, timestamp, key, value) of every record of ``name`` in ``backing``, as an Arrow
    table, read through kfs's engine (read-only)."""
    import pyarrow as pa

    from storage import LogManager

    mgr = LogManager(backing, read_only=True)
    try:
        log_ = mgr.get(name)
        batches = list(log_.reader.read_columns(log_.log_start_offset))
    finally:
        mgr.close()
    table = pa.Table.from_batches(batches) if batches else None
    return table.select(["offset", "timestamp", "key", "value"]) if table is not None else None


def cmd_compact(args, tmp: Path, failures: Failures) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic, name, rounds = "compact", "compact-0", args.rounds
    seg = args.segment_bytes
    overrides = {"log.cleaner.dedupe.buffer.size": str(128 << 20),  # Kafka's and kfs's default
                 "log.cleaner.backoff.ms": "200"}  # the wait for a pass, not its figures
    topic_config = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": "0.01",
                    "segment.bytes": str(seg), "min.compaction.lag.ms": str(TEN_YEARS_MS)}
    build = Broker(tmp / "kafka-logs", tmp / "broker-build", overrides).start()
    build.create_topic(topic, 1, topic_config)
    t = time.perf_counter()
    keys = args.keys
    n = produce_until(build, topic, args.size, lambda i: b"key-%07d" % ((i * 7919) % keys))

    def alter(broker: Broker, entries: dict[str, str]) -> None:
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in entries.items()])
        admin = broker.admin()  # kept until the answer: a dropped client cancels it
        for f in admin.incremental_alter_configs([res]).values():
            f.result(60)

    # Roll, so the active segment holds one record and all the rest is cleanable: segment.ms
    # is checked at the next append.
    alter(build, {"segment.ms": "1"})
    time.sleep(0.2)
    p = producer(build)
    p.produce(topic, value(n), b"active")
    p.flush(60)
    n += 1
    alter(build, {"segment.ms": str(7 * 24 * 3600 * 1000)})
    build.stop()  # clean shutdown: the directory before any cleaning
    pristine = build.log_dir
    part = pristine / name
    size = log_bytes(part)
    segments = len(list(part.glob("*.log")))
    print(f"{name}: {n:,} records over {keys:,} keys, {VALUE} B values, {size / 1e6:,.1f} MB "
          f"of .log in {segments} segments of <= {seg / MB:.0f} MiB (the last holds one "
          f"record), produced in {time.perf_counter() - t:.0f} s")
    print(f"Kafka: min.compaction.lag.ms released on a restarted broker; kfs: kfs compact on a "
          f"copy; both {128} MiB dedupe buffer, min.cleanable.dirty.ratio 0.01")

    kafka_rate, kafka_secs, kfs_rate, kfs_secs, kfs_wall = [], [], [], [], []
    kafka_idx, kfs_idx = [], []
    reference = None  # the records left in round 1
    digests: dict[str, dict[str, str]] = {}  # sha256 of each .log left, per side
    for r in range(rounds):
        for side in (("kafka", "kfs") if r % 2 == 0 else ("kfs", "kafka")):
            work = tmp / f"{side}-{r}"
            copy_dir(pristine, work)
            if side == "kafka":
                log(f"compact round {r + 1}/{rounds}: Kafka's cleaner")
                broker = build.again(work, tmp / f"broker-{r}").start()
                alter(broker, {"min.compaction.lag.ms": "0"})
                deadline = time.monotonic() + 3600
                while (stats := cleaner_stats(broker.server_log_text(), name)) is None:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"Kafka's cleaner did not clean {name}")
                    time.sleep(0.2)
                broker.stop()
                kafka_rate.append(stats["rate"])
                kafka_secs.append(stats["secs"])
                kafka_idx.append(stats["isecs"])
            else:
                log(f"compact round {r + 1}/{rounds}: kfs compact")
                (work / f"{topic}.topic.properties").write_text(
                    "".join(f"{k}={v}\n" for k, v in {**topic_config,
                                                      "min.compaction.lag.ms": "0"}.items()))
                (work / "server.properties").write_text(
                    f"log.cleaner.dedupe.buffer.size={128 << 20}\n")
                now = int(time.time() * 1000)
                t = time.perf_counter()
                res = subprocess.run([sys.executable, "-m", "kfs", "compact", str(work), name,
                                      "--now-ms", str(now), "--no-progress"],
                                     capture_output=True, text=True, cwd=REPO)
                wall = time.perf_counter() - t
                if not failures.check(res.returncode == 0, f"kfs compact exited "
                                      f"{res.returncode}: {res.stderr.strip()[-500:]}"):
                    continue
                stats = cleaner_stats(res.stdout, name)
                if not failures.check(stats is not None, f"no stats in kfs compact's output: "
                                      f"{res.stdout[-500:]}"):
                    continue
                kfs_rate.append(stats["rate"])
                kfs_secs.append(stats["secs"])
                kfs_idx.append(stats["isecs"])
                kfs_wall.append(wall)
            print(f"round {r + 1} {side}: dirty section [{stats['start']:.0f}, "
                  f"{stats['end']:.0f}], {stats['mb']:,.1f} MB in {stats['secs']:.1f} s = "
                  f"{stats['rate']:,.1f} MB/s; {stats['smsg']:,.0f} -> {stats['emsg']:,.0f} "
                  f"messages", flush=True)
            failures.check(stats["start"] == 0 and stats["end"] == n - 1,
                           f"round {r + 1} {side}: dirty section [{stats['start']:.0f}, "
                           f"{stats['end']:.0f}], expected [0, {n - 1}]")
            rows = partition_rows(work, name)
            if reference is None:
                reference = rows
                print(f"left: {rows.num_rows:,} records (expected {min(keys, n - 1) + 1:,}: one "
                      f"per key and the active segment's)")
                failures.check(rows.num_rows == min(keys, n - 1) + 1,
                               f"{rows.num_rows:,} records left")
            else:
                failures.check(rows.equals(reference), f"round {r + 1}: the records {side} "
                               f"left differ from round 1's")
            if side not in digests:  # the files themselves, for the record (not a check)
                digests[side] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest()
                                 for f in sorted((work / name).glob("*.log"))}
                if len(digests) == 2:
                    a, b = digests["kafka"], digests["kfs"]
                    print(f"segments left: Kafka {len(a)}, kfs {len(b)}; .log files "
                          + ("byte-identical" if a == b else
                             f"not byte-identical (same names: {sorted(a) == sorted(b)})"))
            shutil.rmtree(work, ignore_errors=True)

    table = Table(f"one cleaner pass over {name}: {size / 1e6:,.0f} MB, {n:,} records, "
                  f"{keys:,} keys; medians of {rounds} interleaved rounds",
                  ("what", "MB/s (as LogCleaner logs it)", "pass", "offset map", "kfs / it"))
    table.add("kfs compact (its stats line)", mbps(kfs_rate), secs(kfs_secs), secs(kfs_idx), "")
    table.add("Kafka's LogCleaner (server.log)", mbps(kafka_rate), secs(kafka_secs),
              secs(kafka_idx), ratio(med(kfs_rate), med(kafka_rate)) if kfs_rate else "n/a")
    if kfs_wall:
        table.add("kfs compact, whole command (wall)",
                  mbps([size / MB / w for w in kfs_wall]), secs(kfs_wall), "", "")
    table.print()
    if kfs_rate:
        k = med(kfs_rate) / med(kafka_rate)
        print(f"kfs / Kafka: {k:.2f}x (target >= 1x: {'met' if k >= 1 else 'NOT met'})")


# --------------------------------------------------------------------------- recovery

def kfs_recovered_segments(backing: Path) -> tuple[list[str], float]:
    """Which .log files kfs's LogManager recovers when it opens ``backing`` (a throwaway
    copy; LogSegment.recover counted as bench_recovery.py counts it), and how long the open
    took in this process."""
    from storage import LogManager
    from storage.segment import LogSegment

    seen: list[str] = []
    original = LogSegment.recover

    def counting(self, *a, **kw):
        out = original(self, *a, **kw)
        seen.append(f"{Path(self.log_path).parent.name}/{Path(self.log_path).name}")
        return out

    LogSegment.recover = counting
    try:
        t = time.perf_counter()
        mgr = LogManager(backing)
        opened = time.perf_counter() - t
        mgr.close()
    finally:
        LogSegment.recover = original
    return seen, opened


def cmd_recovery(args, tmp: Path, failures: Failures) -> None:
    topic, name, rounds = "bench", "bench-0", args.rounds
    overrides = {}
    if not args.checkpoint:
        # the recovery-point checkpoint is left unwritten until the crash, so the broker (and
        # kfs, which reads the same checkpoint file) revalidates every segment
        overrides["log.flush.offset.checkpoint.interval.ms"] = str(24 * 3600 * 1000)
    build = Broker(tmp / "kafka-logs", tmp / "broker-build", overrides).start()
    build.create_topic(topic, 1, {"segment.bytes": str(args.segment_bytes)})
    t = time.perf_counter()
    n = produce_until(build, topic, args.size, None)
    produced_s = time.perf_counter() - t
    build.kill()  # kill -9: no clean-shutdown marker, no final checkpoint
    crashed = build.log_dir
    part = crashed / name
    size = log_bytes(part)
    segments = len(list(part.glob("*.log")))
    checkpoint = crashed / "recovery-point-offset-checkpoint"
    point = "absent"
    if checkpoint.exists():
        point = next((line.split()[2] for line in checkpoint.read_text().splitlines()
                      if line.startswith(f"{topic} 0 ")), "no entry")
    print(f"{name}: {n:,} records of {VALUE} B values, {size / 1e6:,.1f} MB of .log in "
          f"{segments} segments of <= {args.segment_bytes / MB:.0f} MiB, produced in "
          f"{produced_s:.0f} s, then kill -9; recovery point checkpointed for it: {point}")
    probe = tmp / "kfs-probe"
    copy_dir(crashed, probe)
    seen, opened = kfs_recovered_segments(probe)
    shutil.rmtree(probe)
    print(f"kfs recovers {len([s for s in seen if s.startswith(name)])} of {segments} segments "
          f"of {name} ({len(seen)} in the whole directory; LogManager's open took "
          f"{opened:.2f} s in process)")

    kafka_wall, kafka_load, kafka_loaded_at, kfs_wall, kfs_mount = [], [], [], [], []
    kafka_recovering = []
    mounts = Mounts(tmp)
    try:
        for r in range(rounds):
            for side in (("kafka", "kfs") if r % 2 == 0 else ("kfs", "kafka")):
                work = tmp / f"{side}-{r}"
                copy_dir(crashed, work)
                os.sync()
                if side == "kafka":
                    log(f"recovery round {r + 1}/{rounds}: broker start")
                    broker = build.again(work, tmp / f"broker-{r}")
                    t, epoch = time.perf_counter(), time.time()
                    broker.start()
                    got = last_record(broker.bootstrap, topic, n - 1)
                    kafka_wall.append(time.perf_counter() - t)
                    broker.kill()
                    text = broker.server_log_text()
                    loaded = grep_ms(r"Loaded \d+ logs in (\d+)ms", text)
                    at = logged_at(r"Loaded \d+ logs in", text)
                    if not failures.check(bool(loaded) and at is not None,
                                          "no 'Loaded N logs in' line in server.log"):
                        continue
                    kafka_load.append(loaded[-1] / 1000)
                    kafka_loaded_at.append(at - epoch)
                    kafka_recovering.append(len(re.findall(
                        rf"Recovering unflushed segment \d+\. [\d/]+ recovered for {name}\.",
                        text)))
                    waits = len(re.findall("DuplicateBrokerRegistrationException", text))
                    print(f"round {r + 1} kafka: serving offset {n - 1:,} after "
                          f"{kafka_wall[-1]:.2f} s; logs loaded {kafka_loaded_at[-1]:.2f} s "
                          f"after the start, in {kafka_load[-1]:.2f} s; "
                          f"{kafka_recovering[-1]} segments of {name} recovered; "
                          f"{waits} registrations refused while the killed broker's session "
                          f"lasted", flush=True)
                else:
                    log(f"recovery round {r + 1}/{rounds}: kfs mount")
                    mnt = tmp / f"mnt-{r}"
                    t = time.perf_counter()
                    proc = mounts.start([sys.executable, "-m", "kfs", "mount", "-f",
                                         "--log-level=warning",
                                         f"--log-file={tmp / f'kfs-{r}.log'}", str(work),
                                         str(mnt)], mnt, f"kfs-{r}")
                    mounted = time.perf_counter() - t
                    data = (mnt / name / "by-offset" / str(n - 1)).read_bytes()
                    kfs_wall.append(time.perf_counter() - t)
                    kfs_mount.append(mounted)
                    got = (None, data, n - 1)
                    mounts.stop(proc)
                    print(f"round {r + 1} kfs: serving offset {n - 1:,} after "
                          f"{kfs_wall[-1]:.2f} s (mounted after {mounted:.2f} s)", flush=True)
                failures.check(got[1] == value(n - 1) and got[2] == n - 1,
                               f"round {r + 1} {side}: the last record read {got!r}")
                shutil.rmtree(work, ignore_errors=True)
    finally:
        mounts.close()

    mbs = size / 1e6
    table = Table(f"after kill -9: {name} {size / 1e6:,.0f} MB of .log, {segments} segments; "
                  f"medians of {rounds} interleaved rounds",
                  ("what", "seconds", "MB/s", "kfs vs it"))
    table.add("kfs mount (writable), start to serving the last record", secs(kfs_wall),
              mbps([mbs / x for x in kfs_wall]), "")
    table.add("  of which: until mounted", secs(kfs_mount), "", "")
    table.add("Kafka broker, start to serving the last record", secs(kafka_wall),
              mbps([mbs / x for x in kafka_wall]), ratio(med(kafka_wall), med(kfs_wall)))
    table.add("  start to its logs loaded (server.log's clock)", secs(kafka_loaded_at),
              mbps([mbs / x for x in kafka_loaded_at]), ratio(med(kafka_loaded_at), med(kfs_wall)))
    table.add("  its log load alone ('Loaded N logs in')", secs(kafka_load),
              mbps([mbs / x for x in kafka_load]), ratio(med(kafka_load), med(kfs_wall)))
    table.print()
    print("(Kafka serves only once its controller lets the restarted broker register: after "
          "a kill -9 that waits for the killed incarnation's session to expire, "
          "broker.session.timeout.ms = 9 s by default)")
    k = med(kafka_wall) / med(kfs_wall)
    print(f"Kafka's time / kfs's (start to serving): {k:.2f}x (target >= 1: "
          f"{'met' if k >= 1 else 'NOT met'}); Kafka's start to logs loaded / kfs's: "
          f"{med(kafka_loaded_at) / med(kfs_wall):.2f}x; Kafka's log load alone / kfs's "
          f"whole start: {med(kafka_load) / med(kfs_wall):.2f}x")


# --------------------------------------------------------------------------- coordinator

def cmd_coordinator(args, tmp: Path, failures: Failures) -> None:
    from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition

    name, rounds = "__consumer_offsets-0", args.rounds
    groups = [f"group-{g}" for g in range(args.groups)]
    topics = [f"topic-{t}" for t in range(args.topics)]
    # The cleaner off, so that the partition keeps every commit (it would compact it to one
    # record per key); the same on every restart, so no pass runs beside the load.
    overrides = {"log.cleaner.enable": "false"}
    build = Broker(tmp / "kafka-logs", tmp / "broker-build", overrides).start()
    for tp in topics:
        build.create_topic(tp, args.partitions)
    pending = [0]  # commits sent, not yet answered

    def done(err, _partitions):
        pending[0] -= 1
        if err is not None:
            raise RuntimeError(f"commit failed: {err}")

    consumers = {g: Consumer({"bootstrap.servers": build.bootstrap, "group.id": g,
                              "enable.auto.commit": False, "log_level": 0,
                              "on_commit": done}) for g in groups}
    part = build.log_dir / name
    t = time.perf_counter()
    commits = 0
    expected: dict[tuple[str, str, int], int] = {}
    while True:
        for _ in range(200):
            for g, c in consumers.items():
                offs = [TopicPartition(tp, p, commits * 1000 + p)
                        for tp in topics for p in range(args.partitions)]
                c.commit(offsets=offs, asynchronous=True)
                pending[0] += 1
                while pending[0] > 64:
                    for cc in consumers.values():
                        cc.poll(0.001)
            commits += 1
        while pending[0]:
            for cc in consumers.values():
                cc.poll(0.01)
        size = log_bytes(part)
        log(f"{commits * len(groups):,} commits, {name} {size / 1e6:,.0f} MB "
            f"({time.perf_counter() - t:.0f} s)")
        if size >= args.size:
            break
    for c in consumers.values():
        c.close()
    last = commits - 1
    for g in groups:
        for tp in topics:
            for p in range(args.partitions):
                expected[(g, tp, p)] = last * 1000 + p
    build.stop()
    size = log_bytes(part)
    segments = len(list(part.glob("*.log")))
    records = commits * len(groups) * len(topics) * args.partitions
    print(f"{name}: {records:,} offset commits ({commits * len(groups):,} OffsetCommit requests "
          f"of {len(topics) * args.partitions} partitions, {len(groups)} groups) through the "
          f"broker in {time.perf_counter() - t:.0f} s: {size / 1e6:,.1f} MB of .log in "
          f"{segments} segments (log cleaner off)")
    copy = tmp / "kfs-copy"
    copy_dir(build.log_dir, copy)

    kafka_wall, kafka_load, kfs_wall, kfs_mount, kfs_ls = [], [], [], [], []
    mounts = Mounts(tmp)
    try:
        for r in range(rounds):
            for side in (("kafka", "kfs") if r % 2 == 0 else ("kfs", "kafka")):
                if side == "kafka":
                    log(f"coordinator round {r + 1}/{rounds}: broker restart")
                    broker = build.again(build.log_dir, tmp / f"broker-{r}")
                    t = time.perf_counter()
                    broker.start()
                    admin = broker.admin()
                    states = describe_until_loaded(admin, groups)
                    kafka_wall.append(time.perf_counter() - t)
                    if r == 0:
                        check_kafka_offsets(admin, groups, expected, failures,
                                            ConsumerGroupTopicPartitions)
                    broker.stop()
                    text = broker.server_log_text()
                    loads = re.findall(rf"Finished loading of metadata from {name} with epoch "
                                       rf"\d+ in (\d+)ms where (\d+)ms was spent in the "
                                       rf"scheduler\. Loaded (\d+) records which total to "
                                       rf"(\d+) bytes", text)
                    if failures.check(bool(loads), f"no coordinator load line for {name} in "
                                      f"server.log"):
                        ms, _sched, recs, nbytes = map(int, loads[-1])
                        kafka_load.append(ms / 1000)
                        print(f"round {r + 1} kafka: describeGroups answered for "
                              f"{len(groups)} groups ({sorted(set(states))}) after "
                              f"{kafka_wall[-1]:.2f} s; coordinator load {ms / 1000:.2f} s "
                              f"({recs:,} records, {nbytes / 1e6:,.0f} MB)", flush=True)
                else:
                    log(f"coordinator round {r + 1}/{rounds}: kfs read-only mount")
                    mnt = tmp / f"mnt-{r}"
                    t = time.perf_counter()
                    proc = mounts.start([sys.executable, "-m", "kfs", "mount", "-f",
                                         "--read-only", "--log-level=warning",
                                         f"--log-file={tmp / f'kfs-{r}.log'}", str(copy),
                                         str(mnt)], mnt, f"kfs-{r}")
                    mounted = time.perf_counter()
                    listed = sorted(os.listdir(mnt / "consumer-groups"))
                    end = time.perf_counter()
                    kfs_wall.append(end - t)
                    kfs_mount.append(mounted - t)
                    kfs_ls.append(end - mounted)
                    failures.check(listed == sorted(groups), f"ls consumer-groups: {listed}")
                    if r == 0:
                        wrong = [(g, tp, p, got) for (g, tp, p), want in expected.items()
                                 if (got := (mnt / "consumer-groups" / g / f"{tp}-{p}")
                                     .read_text().strip()) != str(want)]
                        failures.check(not wrong, f"kfs's committed offsets differ: {wrong[:5]}")
                        if not wrong:
                            print(f"kfs: all {len(expected):,} committed offsets as committed")
                    mounts.stop(proc)
                    print(f"round {r + 1} kfs: ls consumer-groups listed {len(listed)} groups "
                          f"after {kfs_wall[-1]:.2f} s (mounted {kfs_mount[-1]:.2f} s, first "
                          f"ls {kfs_ls[-1]:.2f} s)", flush=True)
    finally:
        mounts.close()

    mbs = size / 1e6
    table = Table(f"{name}: {size / 1e6:,.0f} MB, {records:,} commits, {len(groups)} groups; "
                  f"medians of {rounds} interleaved rounds",
                  ("what", "seconds", "MB/s", "kfs vs it"))
    table.add("kfs: mount --read-only + first ls consumer-groups", secs(kfs_wall),
              mbps([mbs / x for x in kfs_wall]), "")
    table.add("  of which: the first ls (the replay)", secs(kfs_ls),
              mbps([mbs / x for x in kfs_ls]), "")
    table.add("Kafka: broker start to describeGroups answering", secs(kafka_wall),
              mbps([mbs / x for x in kafka_wall]), ratio(med(kafka_wall), med(kfs_wall)))
    if kafka_load:
        table.add("  of which: the coordinator's load (server.log)", secs(kafka_load),
                  mbps([mbs / x for x in kafka_load]), ratio(med(kafka_load), med(kfs_ls)))
    table.print()
    print(f"Kafka's time / kfs's (start to answering): {med(kafka_wall) / med(kfs_wall):.2f}x; "
          + (f"the coordinator's load alone / kfs's first ls alone: "
             f"{med(kafka_load) / med(kfs_ls):.2f}x" if kafka_load else ""))


def describe_until_loaded(admin, groups: list[str], timeout: float = 600) -> list[str]:
    """describeGroups until the coordinator answers for every group (no
    COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR); their states."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            futures = admin.describe_consumer_groups(groups, request_timeout=5)
            return [str(f.result().state).split(".")[-1] for f in futures.values()]
        except Exception as exc:  # noqa: BLE001 - loading, not the coordinator yet, not up
            if time.monotonic() > deadline:
                raise TimeoutError(f"describeGroups did not answer: {exc}") from exc
            time.sleep(0.01)


def check_kafka_offsets(admin, groups, expected, failures: Failures, request_cls) -> None:
    got = {}
    for g in groups:
        res = admin.list_consumer_group_offsets([request_cls(g)])[g].result(60)
        for tp in res.topic_partitions:
            got[(g, tp.topic, tp.partition)] = tp.offset
    failures.check(got == expected, f"Kafka's committed offsets differ from those committed "
                   f"({len(got)} vs {len(expected)})")


# --------------------------------------------------------------------------- tiered

TIERED_BUCKET = "tiered"  # S3Proxy's bucket: the directory LocalTieredStorage writes under


class MeteredS3Server(S3Server):
    """The tests' S3Proxy (tests/helpers/s3.py) with its own Prometheus metrics on
    (``s3proxy.metrics.*``: every request it answered, by S3 operation and status), and
    :meth:`counters` to read them with the bytes it wrote (``wchar`` of ``/proc/<pid>/io``: the
    responses' bodies and headers, its log lines)."""

    metrics_port = 0

    def _properties(self) -> Path:
        path = super()._properties()
        self.metrics_port = kafka_broker.free_port()
        path.write_text(path.read_text() + "s3proxy.metrics.enabled=true\n"
                        "s3proxy.metrics.host=127.0.0.1\n"
                        f"s3proxy.metrics.port={self.metrics_port}\n")
        return path

    def counters(self) -> dict[str, int]:
        """``{"<S3 operation>[ <non-2xx status>]": requests answered so far, "bytes out":
        bytes written}``."""
        import urllib.request

        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics",
                                    timeout=30) as r:
            text = r.read().decode()
        out: dict[str, int] = {}
        for m in re.finditer(r"^http_server_request_duration_seconds_count\{([^}]*)\} (\S+)$",
                             text, re.M):
            labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
            code = labels.get("http_response_status_code", "200")
            key = labels.get("s3_operation", "?") + ("" if code.startswith("2") else f" {code}")
            out[key] = out.get(key, 0) + int(float(m.group(2)))
        io = dict(line.split(": ") for line in
                  Path(f"/proc/{self.proc.pid}/io").read_text().splitlines())
        out["bytes out"] = int(io["wchar"])
        return out


def counter_delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


class PeakRss(threading.Thread):
    """The peak RSS of the Spark JVM ``root`` and of each Python process under it (the
    executors' workers, the data source's planning processes) over a phase: ``begin()`` resets
    every one's high-water mark (``/proc/<pid>/clear_refs`` ← 5) and samples ``VmHWM`` (``VmRSS``
    where a high-water mark cannot be reset) every ``interval`` s until ``end()``, which returns
    (the largest Python process's peak, the JVM's peak, Python processes seen), in bytes."""

    def __init__(self, root: int, interval: float = 0.1):
        super().__init__(daemon=True, name="peak-rss")
        self.root, self.interval = root, interval
        self.lock = threading.Lock()
        self.on, self.done = False, threading.Event()
        self.python = self.jvm = 0
        self.seen: set[int] = set()
        self.resettable = True

    @staticmethod
    def _status(pid: int) -> dict[str, str]:
        try:
            return dict(line.split(":", 1) for line in
                        Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
        except OSError:
            return {}

    def _tree(self) -> list[int]:
        out, i = [self.root], 0
        while i < len(out):
            try:
                for task in os.listdir(f"/proc/{out[i]}/task"):
                    out += [int(c) for c in
                            Path(f"/proc/{out[i]}/task/{task}/children").read_text().split()]
            except OSError:
                pass
            i += 1
        return out

    def _sample(self) -> None:
        for pid in self._tree():
            st = self._status(pid)
            kb = st.get("VmHWM" if self.resettable else "VmRSS", "0 kB").split()[0]
            rss = int(kb) * 1024
            with self.lock:
                if pid == self.root:
                    self.jvm = max(self.jvm, rss)
                elif st.get("Name", "").strip().startswith("python"):
                    self.python = max(self.python, rss)
                    self.seen.add(pid)

    def begin(self) -> None:
        for pid in self._tree():
            try:
                Path(f"/proc/{pid}/clear_refs").write_text("5")
            except OSError:
                self.resettable = False
        with self.lock:
            self.python = self.jvm = 0
            self.seen = set()
            self.on = True

    def end(self) -> tuple[int, int, int]:
        self._sample()
        with self.lock:
            self.on = False
            return self.python, self.jvm, len(self.seen)

    def run(self) -> None:
        while not self.done.wait(self.interval):
            if self.on:
                self._sample()


def tiered_sizes(broker: Broker, topic: str) -> tuple[dict[int, int], dict[int, int]]:
    """(.log bytes by base offset of the partition's remote segments, as __remote_log_metadata
    says are live; the same of its local segments)."""
    from storage.remote.metadata import read_metadata_log_dir

    live = read_metadata_log_dir(broker.log_dir).live_by_name(topic, 0)
    remote = {m.start_offset: m.segment_size_in_bytes for m in live}
    part = broker.log_dir / f"{topic}-0"
    local = {}
    for base in broker.local_segment_offsets(topic):
        try:
            local[base] = (part / f"{base:020d}.log").stat().st_size
        except FileNotFoundError:
            pass  # (deleted meanwhile)
    return remote, local


def wait_all_but_last_tiered(broker: Broker, topic: str, local_segments: int,
                             timeout: float = 900) -> tuple[dict[int, int], dict[int, int]]:
    """Wait until every rolled segment of ``topic``-0 is COPY_SEGMENT_FINISHED in
    __remote_log_metadata, contiguous from offset 0, and local retention left at most
    ``local_segments`` local segments; tiered_sizes()."""
    deadline = time.monotonic() + timeout
    while True:
        remote, local = tiered_sizes(broker, topic)
        live = sorted(tiered_ends(broker, topic))
        covered = 0
        for start, end in live:
            if start == covered:
                covered = end + 1
        bases = sorted(local)
        if bases and covered >= bases[-1] and bases[0] <= covered and \
                len(bases) <= local_segments:
            return remote, local
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic}-0 not tiered within {timeout:.0f} s: remote segments "
                               f"cover [0, {covered}), local base offsets {bases}\n"
                               f"{broker.log_tail()}")
        time.sleep(1)


def tiered_ends(broker: Broker, topic: str) -> list[tuple[int, int]]:
    from storage.remote.metadata import read_metadata_log_dir

    return [(m.start_offset, m.end_offset) for m in
            read_metadata_log_dir(broker.log_dir).live_by_name(topic, 0)]


def tiered_log_bytes(broker: Broker, topic: str) -> int:
    """The .log bytes of ``topic``-0 in either tier, each segment once."""
    sizes = {int(p.name[:20]): p.stat().st_size
             for p in broker.remote_root.glob(f"{topic}-0-*/*.log")}
    for base in broker.local_segment_offsets(topic):
        try:
            sizes[base] = (broker.log_dir / f"{topic}-0" / f"{base:020d}.log").stat().st_size
        except FileNotFoundError:
            pass
    return sum(sizes.values())


def cmd_tiered(args, tmp: Path, failures: Failures) -> None:
    from pyspark.sql import SparkSession

    rounds, topic = args.rounds, "tiered"
    jars = spark_kafka_jars_told(args)

    # S3Proxy's base directory holds the bucket LocalTieredStorage writes into: the broker's
    # remote tier is served as s3://tiered/rsm with no copy, and read as file://…/rsm.
    s3_base = tmp / "s3"
    rsm = s3_base / TIERED_BUCKET / "rsm"
    broker = Broker(tmp / "kafka-logs", tmp / "broker", remote_storage_dir=rsm).start()
    seg = args.segment_bytes
    broker.create_topic(topic, 1, {**kafka_broker.TIERED_TOPIC_CONFIG,
                                   "segment.bytes": str(seg),
                                   "local.retention.bytes": str(2 * seg)})

    t = time.perf_counter()
    first_ms = int(time.time() * 1000)
    n = produce_until(broker, topic, args.size, lambda i: b"key-%d" % i,
                      size_of=lambda: tiered_log_bytes(broker, topic))
    last_ms = int(time.time() * 1000)
    produced_s = time.perf_counter() - t
    t = time.perf_counter()
    remote, local = wait_all_but_last_tiered(broker, topic, 3)
    below = {b: s for b, s in remote.items() if b < min(local)}
    topic_bytes = sum(below.values()) + sum(local.values())
    remote_bytes = sum(below.values())
    print(f"topic {topic}-0: {n:,} records of {VALUE} B values, keyed, produced in "
          f"{produced_s:.0f} s; {topic_bytes / 1e6:,.1f} MB of .log in {len(below) + len(local)} "
          f"segments of {seg >> 20} MiB: {len(below)} remote-only ({remote_bytes / 1e6:,.1f} MB, "
          f"{remote_bytes / topic_bytes:.0%}; COPY_SEGMENT_FINISHED in __remote_log_metadata "
          f"{time.perf_counter() - t:.0f} s after the last record), {len(local)} local "
          f"(base offsets {sorted(local)}); the broker keeps running")

    server = MeteredS3Server(s3_base, tmp / "s3proxy")
    spark = None
    sampler = None
    try:
        server.start()
        print(f"S3Proxy {server.endpoint} (filesystem backend over {s3_base}) serves "
              f"s3://{TIERED_BUCKET}/rsm: LocalTieredStorage's own directory, no copy")
        # The standard chain's variables, exported before the JVM starts: local mode's
        # workers inherit them; a cluster's executors get them as spark.executorEnv.*.
        os.environ.update(server.env())
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            q for q in (str(REPO), os.environ.get("PYTHONPATH")) if q)
        builder = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
                   .config("spark.sql.session.timeZone", "UTC")
                   .config("spark.jars", ",".join(jars))
                   .config("spark.ui.showConsoleProgress", "false"))
        for key, val in spark_executor_env(server).items():
            builder = builder.config(key, val)
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        sampler = PeakRss(spark.sparkContext._gateway.proc.pid)
        sampler.start()

        def kfs_read(remote_path: str, **options):
            reader = (spark.read.format("kfs").option("subscribe", topic)
                      .option("remote.path", remote_path))
            for k, v in options.items():
                reader = reader.option(k, v)
            return reader.load(str(broker.log_dir))

        bucket = kfs_read(f"s3://{TIERED_BUCKET}/rsm")
        local_dir = kfs_read(rsm.as_uri())
        parts = bucket.rdd.getNumPartitions()
        kafka = kafka_source(spark, broker, topic, bucket, failures)
        # Parquet of the same rows: what the aggregate costs the JVM with no decoding to do
        parquet_dir = str(tmp / "parquet")
        local_dir.write.parquet(parquet_dir)
        # the cluster as the source of truth, no broker directory: history from the bucket,
        # only the tail through the broker (kfs.reading.cluster)
        cluster = (spark.read.format("kfs").option("kafka.bootstrap.servers", broker.bootstrap)
                   .option("subscribe", topic).option("remote.path", f"s3://{TIERED_BUCKET}/rsm")
                   .option("maxBytesPerPartition", str(32 << 20)).load())
        readers = {"kafka": kafka, "bucket": bucket, "cluster": cluster, "local": local_dir,
                   "parquet": spark.read.parquet(parquet_dir)}
        results = {}
        for name, frame in readers.items():  # warm JVM, workers, consumers, page cache
            log(f"tiered warm-up: {name}")
            results[name] = tuple(frame.selectExpr(*AGG).collect()[0])
        print(f"rows (count, keys, value bytes, min/max offset, hash sums): {results['kafka']}")
        want = (n, n, VALUE * n, 0, n - 1)
        failures.check(results["kafka"][:5] == want,
                       f"kafka read {results['kafka'][:5]}, expected {want}")
        for name in ("bucket", "cluster", "local", "parquet"):
            failures.check(results[name] == results["kafka"],
                           f"{name} rows differ from Kafka's: {results[name]} != "
                           f"{results['kafka']}")
        times: dict[str, list[float]] = {k: [] for k in readers}
        requests: list[dict[str, int]] = []
        peaks: list[tuple[int, int, int]] = []
        for r in range(rounds):
            log(f"tiered round {r + 1}/{rounds}")
            order = list(readers) if r % 2 == 0 else list(reversed(readers))
            for name in order:
                if name == "bucket":
                    before = server.counters()
                    sampler.begin()
                t = time.perf_counter()
                got = tuple(readers[name].selectExpr(*AGG).collect()[0])
                times[name].append(time.perf_counter() - t)
                if name == "bucket":
                    peaks.append(sampler.end())
                    requests.append(counter_delta(server.counters(), before))
                failures.check(got == results["kafka"], f"{name} round {r + 1}: {got}")
                log(f"  {name}: {times[name][-1]:.1f} s")

        # What the broker sent for one read of each (its BytesOutPerSec of the topic), beside
        # the .log bytes of the tail after the remote tier (the local segments above it)
        remote_end = max(end for _, end in tiered_ends(broker, topic)) + 1
        _, local_now = tiered_sizes(broker, topic)
        tail_bytes = sum(size for base, size in local_now.items() if base >= remote_end)
        served = {}
        for name in ("cluster", "kafka"):
            before_out = broker.bytes_out(topic)
            readers[name].selectExpr(*AGG).collect()
            served[name] = broker.bytes_out(topic) - before_out

        # A 1% time range from the bucket: what S3Proxy served for it (planning included).
        lo = first_ms + (last_ms - first_ms) // 2
        hi = lo + max((last_ms - first_ms) // 100, 1)
        before = server.counters()
        narrow = tuple(kfs_read(f"s3://{TIERED_BUCKET}/rsm", startingTimestamp=str(lo),
                                endingTimestamp=str(hi)).selectExpr(*AGG[:5]).collect()[0])
        narrow_req = counter_delta(server.counters(), before)
    finally:
        if sampler is not None:
            sampler.done.set()
        if spark is not None:
            spark.stop()
        server.stop()
        broker.stop()

    mb = topic_bytes / 1e6
    rates = {k: [n / s for s in v] for k, v in times.items()}
    mbs = {k: [mb / s for s in v] for k, v in times.items()}
    table = Table(f"Spark read of tiered {topic}-0 from earliest to latest: {n:,} records, "
                  f"{mb:,.0f} MB of .log, {remote_bytes / topic_bytes:.0%} remote-only; {parts} "
                  f"input partitions each, {args.master}; medians of {rounds} interleaved "
                  f"rounds", ("what", "rows/s", "MB/s", "ratio"))
    table.add('kfs    format("kfs"), remote.path=s3:// (S3Proxy)', spread(rates["bucket"]),
              mbps(mbs["bucket"]), "")
    table.add(f'Kafka  format("kafka") through the broker (minPartitions={parts})',
              spread(rates["kafka"]), mbps(mbs["kafka"]),
              "kfs bucket / it " + ratio(med(rates["bucket"]), med(rates["kafka"])))
    table.add('kfs    format("kfs"), kafka.bootstrap.servers + remote.path=s3:// (no broker '
              'dir)', spread(rates["cluster"]), mbps(mbs["cluster"]),
              "it / Kafka " + ratio(med(rates["cluster"]), med(rates["kafka"])))
    table.add('kfs    format("kfs"), remote.path=file:// (local dir)', spread(rates["local"]),
              mbps(mbs["local"]),
              "kfs bucket / it " + ratio(med(rates["bucket"]), med(rates["local"])))
    table.add("Parquet of the same rows (the aggregate alone, no decoding)",
              spread(rates["parquet"]), mbps(mbs["parquet"]),
              "kfs bucket / it " + ratio(med(rates["bucket"]), med(rates["parquet"])))
    table.print()
    ops = sorted({k for d in requests for k in d if k != "bytes out"})
    print("S3Proxy per kfs bucket read (planning and reading; medians): " + ", ".join(
        f"{k} {med([d.get(k, 0) for d in requests]):,.0f}" for k in ops)
          + f"; {med([d.get('bytes out', 0) for d in requests]) / 1e6:,.1f} MB sent "
          f"(remote-only .log: {remote_bytes / 1e6:,.1f} MB)")
    gets = med([d.get("GetObject", 0) for d in requests])
    if gets:
        print(f"  = {med([d.get('bytes out', 0) for d in requests]) / gets / MB:,.2f} MiB "
              f"per GetObject on average")
    print(f"1% time range [{lo}, {hi}) from the bucket: {narrow[0]:,} records "
          f"({narrow[0] / n:.2%} of them); S3Proxy sent {narrow_req.get('bytes out', 0) / 1e6:,.1f} "
          f"MB = {narrow_req.get('bytes out', 0) / topic_bytes:.2%} of the topic's .log bytes in "
          + ", ".join(f"{k} {v}" for k, v in sorted(narrow_req.items()) if k != "bytes out")
          + " (target <= 3%)")
    py = [p[0] for p in peaks]
    jvm = [p[1] for p in peaks]
    print(f"peak RSS during the kfs bucket reads: the largest Python worker "
          f"{spread([x / MB for x in py], lambda x: f'{x:,.0f} MiB')} "
          f"({max(p[2] for p in peaks)} Python processes under the JVM), the Spark JVM "
          f"{spread([x / MB for x in jvm], lambda x: f'{x:,.0f} MiB')}"
          f"{'' if sampler.resettable else ' (VmRSS samples: high-water marks not resettable)'}")
    print(f"the broker sent (BytesOutPerSec of {topic}) {served['cluster'] / 1e6:,.1f} MB to "
          f"kfs's read of the cluster, against {tail_bytes / 1e6:,.1f} MB of .log after the "
          f"remote tier ({served['cluster'] / max(tail_bytes, 1):.2f}x; target <= 1.1x), and "
          f"{served['kafka'] / 1e6:,.1f} MB to Spark's Kafka source")
    k = med(rates["bucket"]) / med(rates["kafka"])
    b = med(rates["bucket"]) / med(rates["local"])
    rss = med(py) / MB
    print(f"kfs bucket / Kafka: {k:.2f}x (target >= 3x: {'met' if k >= 3 else 'NOT met'}); "
          f"bucket / local dir: {b:.2f}x (target >= 0.5x: {'met' if b >= 0.5 else 'NOT met'}); "
          f"Python worker peak {rss:,.0f} MiB (target <= 400 MB: "
          f"{'met' if rss * MB <= 400e6 else 'NOT met'})")


# --------------------------------------------------------------------------- main

# --------------------------------------------------------------------------- stream

def cmd_stream(args, tmp: Path, failures: Failures) -> None:
    """Two streaming queries at once over one tiered topic, Spark's Kafka source and
    ``format("kfs")`` over the cluster (``kafka.bootstrap.servers`` + ``remote.path``), both
    from latest with the default trigger and a ``foreachBatch`` sink; records produced one at
    a time (the next once both queries saw the last, after a random pause so that a record
    comes at any phase of the queries' polling): each one's latency, from the producer's call
    to the sink holding it."""
    import random
    import threading

    from pyspark.sql import SparkSession

    topic = "live"
    jars = spark_kafka_jars_told(args)
    s3_base = tmp / "s3"
    rsm = s3_base / TIERED_BUCKET / "rsm"
    broker = Broker(tmp / "kafka-logs", tmp / "broker", remote_storage_dir=rsm).start()
    seg = args.segment_bytes
    broker.create_topic(topic, 1, {**kafka_broker.TIERED_TOPIC_CONFIG, "segment.bytes": str(seg),
                                   "local.retention.bytes": str(2 * seg)})
    n = produce_until(broker, topic, args.size, lambda i: b"key-%d" % i,
                      size_of=lambda: tiered_log_bytes(broker, topic))
    remote, local = wait_all_but_last_tiered(broker, topic, 3)
    print(f"topic {topic}-0: {n:,} records of history, {len(remote)} segments remote, "
          f"{len(local)} local; the broker keeps running")
    server = S3Server(s3_base, tmp / "s3proxy")
    spark = None
    queries = []
    seen: dict[str, dict[bytes, int]] = {"kafka": {}, "kfs": {}}
    arrived = threading.Condition()

    def sink(name: str):
        def on_batch(frame, batch_id) -> None:
            values = [bytes(r.value) for r in frame.select("value").collect()]
            now = time.monotonic_ns()
            with arrived:
                for v in values:
                    seen[name][v] = now
                arrived.notify_all()
        return on_batch

    latencies: dict[str, list[float]] = {"kafka": [], "kfs": []}
    try:
        server.start()
        os.environ.update(server.env())
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            q for q in (str(REPO), os.environ.get("PYTHONPATH")) if q)
        spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
                 .config("spark.sql.session.timeZone", "UTC").config("spark.jars", ",".join(jars))
                 .config("spark.ui.showConsoleProgress", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        sources = {
            "kafka": spark.readStream.format("kafka"),
            "kfs": spark.readStream.format("kfs").option("remote.path",
                                                         f"s3://{TIERED_BUCKET}/rsm"),
        }
        for name, reader in sources.items():
            frame = (reader.option("kafka.bootstrap.servers", broker.bootstrap)
                     .option("subscribe", topic).option("startingOffsets", "latest").load())
            queries.append(frame.writeStream.foreachBatch(sink(name))
                           .option("checkpointLocation", str(tmp / f"checkpoint-{name}"))
                           .start())
        deadline = time.monotonic() + 300
        while any(q.lastProgress is None for q in queries):  # (both past their first batch)
            if time.monotonic() > deadline:
                raise TimeoutError("the streaming queries did not start")
            time.sleep(0.1)
        p = producer(broker)
        for i in range(args.samples + args.warmup):
            time.sleep(random.uniform(0, args.pause))
            value = b"sample-%d" % i
            sent = time.monotonic_ns()
            p.produce(topic, value)
            p.flush(60)
            with arrived:
                if not arrived.wait_for(lambda: all(value in s for s in seen.values()), 120):
                    raise TimeoutError(f"{value!r} did not reach both queries: "
                                       f"{[name for name, s in seen.items() if value in s]}")
            if i >= args.warmup:
                for name in latencies:
                    latencies[name].append((seen[name][value] - sent) / 1e6)
            log(f"sample {i + 1}/{args.samples + args.warmup}: kafka "
                f"{(seen['kafka'][value] - sent) / 1e6:.0f} ms, kfs "
                f"{(seen['kfs'][value] - sent) / 1e6:.0f} ms")
        for q in queries:
            failures.check(q.exception() is None, f"query failed: {q.exception()}")
    finally:
        for q in queries:
            q.stop()
        if spark is not None:
            spark.stop()
        server.stop()
        broker.stop()

    def pct(xs: list[float], q: float) -> float:
        return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]

    table = Table(f"a record produced to a streaming query's foreachBatch, {args.samples} "
                  f"records after {args.warmup} to warm up, {args.master}, default trigger",
                  ("what", "median ms", "p90 ms", "kfs / it"))
    k = med(latencies["kfs"])
    table.add('kfs   format("kfs"), kafka.bootstrap.servers + remote.path', f"{k:.0f}",
              f"{pct(latencies['kfs'], 0.9):.0f}", "")
    table.add('Kafka format("kafka")', f"{med(latencies['kafka']):.0f}",
              f"{pct(latencies['kafka'], 0.9):.0f}", f"{k / med(latencies['kafka']):.2f}x")
    table.print()
    print(f"kfs's median latency / Kafka's: {k / med(latencies['kafka']):.2f}x (target <= 1x: "
          f"{'met' if k <= med(latencies['kafka']) else 'NOT met'})")


def main() -> int:
    def common(p: argparse.ArgumentParser, default) -> None:
        # before or after the sub-command; the sub-command's copies only set what is given
        p.add_argument("--rounds", type=int, default=default(3),
                       help="interleaved rounds (default 3)")
        p.add_argument("--dir", type=Path, default=default(None),
                       help="where to work (default: a temp dir)")
        p.add_argument("--keep", action="store_true", default=default(False),
                       help="keep the work directory")

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    common(parser, lambda d: d)
    sub = parser.add_subparsers(dest="cmd", required=True)
    shared = argparse.ArgumentParser(add_help=False)
    common(shared, lambda d: argparse.SUPPRESS)
    p = sub.add_parser("spark", parents=[shared],
                       help="Spark's Kafka source against format('kfs')")
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--master", default="local[2]")
    p = sub.add_parser("compact", parents=[shared], help="Kafka's log cleaner against kfs compact")
    p.add_argument("--size", type=parse_size, default=1 << 30, help=".log bytes (default 1G)")
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--segment-bytes", type=parse_size, default=64 << 20)
    p = sub.add_parser("recovery", parents=[shared],
                       help="the broker's recovery against kfs mount's")
    p.add_argument("--size", type=parse_size, default=1 << 30, help=".log bytes (default 1G)")
    p.add_argument("--segment-bytes", type=parse_size, default=128 << 20)
    p.add_argument("--checkpoint", action="store_true",
                   help="keep Kafka's 60 s recovery-point checkpoints (then only what came "
                        "after the last one is recovered)")
    p = sub.add_parser("coordinator", parents=[shared],
                       help="the group coordinator's load against kfs's view")
    p.add_argument("--size", type=parse_size, default=1 << 30,
                   help="__consumer_offsets .log bytes (default 1G)")
    p.add_argument("--groups", type=int, default=4)
    p.add_argument("--topics", type=int, default=2)
    p.add_argument("--partitions", type=int, default=50, help="per topic")
    p = sub.add_parser("tiered", parents=[shared],
                       help="a tiered topic: Spark's Kafka source against format('kfs') from "
                            "the bucket and from a local directory")
    p.add_argument("--size", type=parse_size, default=1 << 30,
                   help=".log bytes in both tiers (default 1G)")
    p.add_argument("--segment-bytes", type=parse_size, default=64 << 20)
    p.add_argument("--master", default="local[2]")
    p = sub.add_parser("stream", parents=[shared],
                       help="a record's latency to a streaming query: Spark's Kafka source "
                            "against format('kfs') over the cluster")
    p.add_argument("--size", type=parse_size, default=32 << 20,
                   help="the topic's history, .log bytes (default 32M)")
    p.add_argument("--segment-bytes", type=parse_size, default=4 << 20)
    p.add_argument("--samples", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--pause", type=float, default=0.5,
                   help="at most this many seconds between samples, at random (default 0.5)")
    p.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    if why := kafka_broker.kafka_missing():
        print(f"bench_kafka_peer: {why}", file=sys.stderr)
        return 2

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    if args.dir:
        args.dir.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"kfs-bench-kafka-{args.cmd}-", dir=args.dir))
    print(f"machine: nproc={os.cpu_count()}; broker: Kafka "
          f"{next(kafka_broker.KAFKA_LIB.glob('kafka_2.13-*.jar')).stem.split('-')[1]}, "
          f"JVM {' '.join(KAFKA_JVM[:4])}; work dir {tmp}")
    failures = Failures()
    try:
        {"spark": cmd_spark, "compact": cmd_compact, "recovery": cmd_recovery,
         "coordinator": cmd_coordinator, "tiered": cmd_tiered,
         "stream": cmd_stream}[args.cmd](args, tmp, failures)
    finally:
        Broker.stop_all()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    return failures.report()


if __name__ == "__main__":
    sys.exit(main())
