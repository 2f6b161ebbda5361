"""Kafka itself as the tests' peer: a single-node KRaft broker (combined broker and controller)
of the pinned release's jars (``scripts/kafka/pom.xml``, fetched into ``.cache/kafka/lib`` by
``scripts/setup.sh test``), and Kafka's own command-line tools run from the same jars.

A broker listens on free loopback ports and keeps its ``log.dirs`` where the test says (under
``tmp_path``); the ``kafka_broker`` fixture (conftest) always stops it in teardown. Its JVM
heap is 512 MiB at most.

A broker given a ``remote_storage_dir`` has Kafka's tiered storage (KIP-405) on: rolled segments
of a topic with :data:`TIERED_TOPIC_CONFIG` are copied by Kafka's reference RemoteStorageManager,
``LocalTieredStorage`` (only in ``kafka-storage``'s test jar, which scripts/kafka/pom.xml
fetches into ``.cache/kafka/lib`` with the rest), under ``<remote_storage_dir>/kafka-tiered-storage``,
and recorded in ``__remote_log_metadata`` by the ``TopicBasedRemoteLogMetadataManager``; the
local copies beyond ``local.retention.bytes`` are then deleted (the ``tiered_broker`` fixture). Nothing here is used by kfs itself; the benchmarks use the broker as
their peer (benchmarks/bench_kafka_peer.py, bench_dump.py).
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import subprocess
import time
import uuid
from pathlib import Path

from storage.isolation import IsolationLevel

from .java_server import JavaServer, free_port
from .paths import REPO
from .waits import DEADLINE_S, wait_until

KAFKA_LIB = REPO / ".cache" / "kafka" / "lib"
LOG4J_CONFIG = REPO / "scripts" / "kafka" / "log4j2.properties"
JAVA_OPTS = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-Djava.awt.headless=true"]
START_TIMEOUT_S = 180.0  # a loaded 2-core machine takes tens of seconds to start a JVM broker


LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
REMOTE_LOG_METADATA_TOPIC = "__remote_log_metadata"
TIERED_STORAGE_DIR = "kafka-tiered-storage"  # LocalTieredStorage's root under its rsm.config.dir


def tiered_storage_settings(remote_storage_dir: Path) -> dict[str, str]:
    """``server.properties`` settings of a broker whose remote tier is LocalTieredStorage
    writing under ``remote_storage_dir``, tiering quickly: the remote log manager's tasks
    (copy, expiry) every 500 ms, the local retention checked every second, one partition of
    ``__remote_log_metadata`` (``__remote_log_metadata-0``) with one replica."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": LOCAL_TIERED_STORAGE,
        "rsm.config.dir": str(remote_storage_dir),
        "rsm.config.delete.on.close": "false",  # the remote segments outlive the broker
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": "1",
        "remote.log.manager.task.interval.ms": "500",
        "log.retention.check.interval.ms": "1000",
    }


SEGMENT_BYTES = 1048576  # Kafka 4.1.1's minimum segment.bytes
# A topic whose rolled segments are copied to the remote tier and deleted locally past two
# segments' worth (the active segment is never copied; a deleted local segment's files go
# after a second).
TIERED_TOPIC_CONFIG = {"remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                       "local.retention.bytes": str(2 * SEGMENT_BYTES),
                       "file.delete.delay.ms": "1000"}


def kafka_missing() -> str | None:
    """Why Kafka's jars cannot be run here, or None."""
    if not any(KAFKA_LIB.glob("kafka_2.13-*.jar")):
        return f"Kafka's jars are not in {KAFKA_LIB} (run scripts/setup.sh test)"
    if subprocess.run(["java", "-version"], capture_output=True, timeout=120).returncode != 0:
        return "no java on the PATH"
    return None


def classpath() -> str:
    return f"{KAFKA_LIB}/*"


SPARK_KAFKA_LIB = REPO / ".cache" / "spark-kafka" / "lib"
_VERSIONED_JAR = re.compile(r"-\d[\w.\-]*\.jar$")  # an artifact's version and suffix


def spark_kafka_missing() -> str | None:
    """Why Spark's Kafka source cannot be handed to Spark here, or None."""
    if not any(SPARK_KAFKA_LIB.glob("spark-sql-kafka-0-10_*.jar")):
        return f"Spark's Kafka source is not in {SPARK_KAFKA_LIB} (run scripts/setup.sh test)"
    return None


def spark_kafka_jars() -> list[str]:
    """The paths of Spark's Kafka source's jars (the connector, kafka-clients, ...) less the
    artifacts the installed pyspark ships already (Hadoop's client, Scala, the codecs, slf4j:
    two versions of one on a class path clash), sorted: what ``spark.jars`` or ``ADD JAR``
    takes."""
    import pyspark

    shipped = {_VERSIONED_JAR.sub("", p.name)
               for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return [str(p) for p in sorted(SPARK_KAFKA_LIB.glob("*.jar"))
            if _VERSIONED_JAR.sub("", p.name) not in shipped]


def run_tool(main_class: str, *args: str, timeout: float = 300, check: bool = True,
             **kwargs) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line tools (its main class, e.g.
    ``org.apache.kafka.tools.DumpLogSegments`` for kafka-dump-log) from the pinned jars."""
    cmd = ["java", *JAVA_OPTS, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
           "-Dkafka.logs.dir=/tmp", "-cp", classpath(), main_class, *args]
    return subprocess.run(cmd, capture_output=True, timeout=timeout, check=check, **kwargs)


class KafkaBroker(JavaServer):
    """One broker+controller process over ``log_dir``; ``work_dir`` holds its config, its
    metadata log (``__cluster_metadata-0`` lives in ``log_dir`` as a broker keeps it) and its
    own log (``server.log``). ``overrides`` are more ``server.properties`` settings.

    ``start()`` formats ``log_dir`` when it has no ``meta.properties`` yet, launches the JVM and
    returns once the broker answers a metadata request; ``stop()`` shuts it down cleanly (the
    clean-shutdown marker written), ``kill()`` as ``kill -9`` would.

    With ``remote_storage_dir`` tiered storage is on (:func:`tiered_storage_settings`, before
    ``overrides``): :attr:`remote_root` is where LocalTieredStorage writes.

    ``stop()`` is a controlled shutdown (SIGTERM, as ``kafka-server-stop`` does), SIGKILL if it
    hangs 120 s; ``kill()``, ``tear_down()``, ``log_tail()`` (``broker.out`` and
    ``server.log``): :class:`helpers.java_server.JavaServer`'s.
    """

    what = "the broker"
    output_name = "broker.out"
    log_names = ("server.log",)
    stop_timeout_s = 120.0
    poll_s = 0.0  # the probe's list_topics waits 0.5 s itself

    def __init__(self, log_dir: Path, work_dir: Path, overrides: dict[str, str] | None = None,
                 java_opts: list[str] = JAVA_OPTS, start_timeout_s: float = START_TIMEOUT_S,
                 remote_storage_dir: Path | None = None):
        self.java_opts, self.start_timeout_s = java_opts, start_timeout_s
        self.log_dir = Path(log_dir)
        self.work_dir = Path(work_dir)
        self.remote_storage_dir = None if remote_storage_dir is None else Path(remote_storage_dir)
        self.overrides = dict(overrides or {})
        self.port = free_port()
        self.controller_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.cluster_id = uuid.uuid4().hex[:22]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def address(self) -> str:
        return self.bootstrap

    @property
    def server_log(self) -> Path:
        return self.work_dir / "server.log"

    def _properties(self) -> Path:
        settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.log_dir),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "auto.create.topics.enable": "false",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(16 << 20),
            "log.initial.task.delay.ms": "0",
        }
        if self.remote_storage_dir is not None:
            settings.update(tiered_storage_settings(self.remote_storage_dir))
        settings.update(self.overrides)
        path = self.work_dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        return path

    @property
    def remote_root(self) -> Path | None:
        """LocalTieredStorage's root, ``<remote_storage_dir>/kafka-tiered-storage`` (None
        without tiered storage); one ``<topic>-<N>-<topic id>`` directory per partition."""
        return None if self.remote_storage_dir is None else self.remote_storage_dir / TIERED_STORAGE_DIR

    def start(self) -> "KafkaBroker":
        began = time.monotonic()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.remote_storage_dir is not None:
            self.remote_storage_dir.mkdir(parents=True, exist_ok=True)
        props = self._properties()
        if not (self.log_dir / "meta.properties").exists():
            run_tool("kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(props),
                     "--ignore-formatted")
        env = {**os.environ, "KAFKA_HEAP_OPTS": ""}
        self._run(["java", *self.java_opts, f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
                   f"-Dkafka.logs.dir={self.work_dir}", "-cp", classpath(), "kafka.Kafka",
                   str(props)], env=env, began=began)
        return self

    def admin(self, **config):
        """A confluent-kafka AdminClient of this broker (``config``: more client settings)."""
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0, **config})

    def _wait_serving(self) -> None:
        # librdkafka's reconnect backoff kept short: its default grows to 10 s, which would
        # delay seeing the broker up (and be timed as its start by the benchmarks)
        self._probe = self.admin(**{"reconnect.backoff.ms": 10, "reconnect.backoff.max.ms": 50})
        try:
            super()._wait_serving()
        finally:
            self._probe = None

    def _answers(self) -> bool:
        try:
            return bool(self._probe.list_topics(timeout=0.5).brokers)
        except Exception:  # KafkaException while it is not up yet
            return False

    # -- the admin client's few calls the tests need ------------------------------------------

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None
                     ) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        futures = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})])
        futures[name].result(60)
        wait_until(lambda: all((self.log_dir / f"{name}-{p}").is_dir() for p in range(partitions)),
                   f"topic {name}'s partition directories", timeout=60)

    def topic_id(self, name: str) -> str:
        """The topic ID the cluster assigned, as ``partition.metadata`` spells it."""
        path = self.log_dir / f"{name}-0" / "partition.metadata"
        # written by the broker shortly after the directory
        wait_until(lambda: "topic_id:" in (path.read_text() if path.exists() else ""),
                   f"a topic ID in {path}", timeout=60)
        return path.read_text().split("topic_id:")[1].split()[0]

    # -- tiered storage -----------------------------------------------------------------------

    def remote_segment_files(self, topic: str, partition: int = 0) -> dict[str, list[Path]]:
        """The files LocalTieredStorage holds for the partition now, by the name before their
        suffix (``<20-digit base offset>-<segment id>``); {} without its directory."""
        out: dict[str, list[Path]] = {}
        for directory in self.remote_root.glob(f"{topic}-{partition}-*"):
            for path in directory.iterdir():
                out.setdefault(path.name.split(".")[0], []).append(path)
        return out

    def local_segment_offsets(self, topic: str, partition: int = 0) -> list[int]:
        """The base offsets of the partition's local segments (``.log`` files) now, sorted."""
        return sorted(int(p.name.split(".")[0])
                      for p in (self.log_dir / f"{topic}-{partition}").glob("*.log"))

    def wait_tiered(self, topic: str, partition: int = 0, segments: int = 2,
                    timeout: float = DEADLINE_S * 2) -> None:
        """Wait until at least ``segments`` of the partition's segments have a ``.log`` in
        the remote tier and the local log start moved up (the first local segment's base
        offset above 0: local retention deleted what was copied). TimeoutError saying what
        was seen otherwise. (Whether a copy is finished is the metadata's to say.)"""
        def state() -> tuple[int, list[int]]:
            files = self.remote_segment_files(topic, partition).values()
            return (sum(any(p.suffix == ".log" for p in f) for f in files),
                    self.local_segment_offsets(topic, partition))

        def done() -> bool:
            copied, local = state()
            return copied >= segments and bool(local) and local[0] > 0

        try:
            wait_until(done, f"{segments} segments of {topic}-{partition} tiered", timeout)
        except TimeoutError as exc:
            copied, local = state()
            raise TimeoutError(f"{exc}: {copied} remote segments, local base offsets {local}\n"
                               f"{self.log_tail()}") from None


def _answered(futures, timeout: float = 60) -> bool:
    """Whether an admin request's ``futures`` all succeeded; False when librdkafka dropped the
    request with the connection it was on (seen: a new client replaces its bootstrap
    connections once it knows the brokers' ids, failing a request sent meanwhile with
    ``_DESTROY_BROKER``) or it failed with a retriable error; any other error raised."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        for future in futures.values():
            future.result(timeout)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() == KafkaError._DESTROY_BROKER or error.retriable():
            return False
        raise
    return True


def sasl_listener(broker: KafkaBroker, port: int, scram: str) -> dict[str, str]:
    """``server.properties`` settings of ``broker`` adding a SASL_PLAINTEXT listener on
    ``127.0.0.1:port`` for the SCRAM mechanism ``scram`` (its users: the cluster's SCRAM
    credentials) beside its PLAINTEXT and CONTROLLER listeners, which inter-broker,
    controller and ``__remote_log_metadata`` traffic keep using."""
    plain = f"PLAINTEXT://127.0.0.1:{broker.port}"
    return {
        "listeners": f"{plain},SASL_PLAINTEXT://127.0.0.1:{port},"
                     f"CONTROLLER://127.0.0.1:{broker.controller_port}",
        "advertised.listeners": f"{plain},SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": scram,
        f"listener.name.sasl_plaintext.{scram.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    }


class KafkaCluster:
    """``nodes`` combined broker+controller processes of one KRaft cluster (node ids 1..n, all
    voters), on loopback, each a :class:`KafkaBroker` over ``root/node<i>``: replication
    factor and ``min.insync.replicas`` as a production cluster sets them (3 and 2), the
    internal topics replicated alike. With ``remote_storage_dir``, tiered storage on every
    node into that one directory (LocalTieredStorage: the shared bucket), and
    ``__remote_log_metadata`` of ``metadata_partitions`` partitions. With ``scram`` (a SCRAM
    mechanism, ``SCRAM-SHA-512``), each node also has a SASL_PLAINTEXT listener of it
    (:func:`sasl_listener`, :attr:`sasl_bootstrap`; users by :meth:`add_scram_user`).
    ``start()`` launches them together (a quorum forms only when a majority runs) and returns
    once each answers; ``tear_down()`` stops every one, even after a failure."""

    STOP_TOGETHER_S = 30.0

    def __init__(self, root: Path, nodes: int = 3, remote_storage_dir: Path | None = None,
                 metadata_partitions: int = 3, overrides: dict[str, str] | None = None,
                 scram: str | None = None):
        self.brokers = [KafkaBroker(root / f"node{i}" / "logs", root / f"node{i}",
                                    remote_storage_dir=remote_storage_dir)
                        for i in range(1, nodes + 1)]
        self.scram = scram
        self.sasl_ports = [free_port() for _ in self.brokers] if scram else []
        voters = ",".join(f"{i}@127.0.0.1:{b.controller_port}"
                          for i, b in enumerate(self.brokers, 1))
        replicas, isr = str(min(nodes, 3)), str(min(nodes, 2))
        for i, broker in enumerate(self.brokers, 1):
            broker.cluster_id = self.brokers[0].cluster_id
            broker.overrides = {
                "node.id": str(i), "controller.quorum.voters": voters,
                "default.replication.factor": replicas, "min.insync.replicas": isr,
                "offsets.topic.replication.factor": replicas,
                "transaction.state.log.replication.factor": replicas,
                "transaction.state.log.min.isr": isr,
                "rlmm.config.remote.log.metadata.topic.replication.factor": replicas,
                "rlmm.config.remote.log.metadata.topic.num.partitions": str(metadata_partitions),
                **(sasl_listener(broker, self.sasl_ports[i - 1], scram) if scram else {}),
                **(overrides or {})}

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def sasl_bootstrap(self) -> str:
        """Every node's SASL_PLAINTEXT listener (``HOST:PORT,...``): a client bootstrapped
        there is told only those addresses (the brokers advertise the listener asked)."""
        return ",".join(f"127.0.0.1:{port}" for port in self.sasl_ports)

    def add_scram_user(self, user: str, password: str, iterations: int = 4096) -> None:
        """``user``'s SCRAM credential of the cluster's mechanism, made through the admin
        client (PLAINTEXT); returns once every node's SASL listener authenticates it (each
        broker learns it from the metadata log, a moment after the controller took it)."""
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        mechanism = ScramMechanism[self.scram.replace("-", "_")]
        upsert = UserScramCredentialUpsertion(
            user, ScramCredentialInfo(mechanism, iterations), password.encode())
        admin = self.admin()  # (kept: a dropped client fails its futures)
        wait_until(lambda: _answered(admin.alter_user_scram_credentials([upsert])),
                   f"{user}'s SCRAM credential upserted")
        for port in self.sasl_ports:
            wait_until(lambda: self._authenticates(port, user, password),
                       f"{user} authenticated on 127.0.0.1:{port}")

    def _authenticates(self, port: int, user: str, password: str) -> bool:
        """Whether the SASL listener on ``port`` answers a metadata request of ``user`` (a
        new client each time: librdkafka backs off after a failed authentication)."""
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient

        client = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}", "log_level": 0,
                              "security.protocol": "SASL_PLAINTEXT",
                              "sasl.mechanism": self.scram, "sasl.username": user,
                              "sasl.password": password})
        try:
            return bool(client.list_topics(timeout=2).brokers)
        except KafkaException:
            return False

    def start(self) -> KafkaCluster:
        with concurrent.futures.ThreadPoolExecutor(len(self.brokers)) as pool:
            for started in [pool.submit(b.start) for b in self.brokers]:
                started.result()
        return self

    def admin(self, **config):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 0, **config})

    def create_topic(self, name: str, partitions: int = 1, config: dict[str, str] | None = None
                     ) -> None:
        """The topic, replicated on every node (up to 3), once each partition has a leader."""
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        replicas = min(len(self.brokers), 3)
        admin.create_topics([NewTopic(name, partitions, replicas, config=config or {})])[
            name].result(60)
        wait_until(lambda: self.leaders(name) and len(self.leaders(name)) == partitions
                   and -1 not in self.leaders(name).values(), f"leaders of {name}", timeout=60)

    def leaders(self, topic: str) -> dict[int, int]:
        """{partition: its leader's node id (-1: none)} now."""
        found = self.admin().list_topics(topic, timeout=10).topics.get(topic)
        return {} if found is None or found.error else {
            p: meta.leader for p, meta in found.partitions.items()}

    def node(self, node_id: int) -> KafkaBroker:
        return self.brokers[node_id - 1]

    def tear_down(self) -> None:
        """Every node stopped at once (one by one, the last would wait for a quorum that is
        gone), killed after STOP_TOGETHER_S; then each one's log tail printed."""
        with concurrent.futures.ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(lambda b: b.stop(self.STOP_TOGETHER_S), self.brokers))
        for broker in self.brokers:
            broker.tear_down()


# -- what Kafka's consumer reads, and the same shape of what kfs serves ----------------------

def flushed(producer, what: str = "the produced messages", timeout: float = 60) -> None:
    """``producer.flush(timeout)`` (confluent-kafka), failing unless every message was delivered
    within ``timeout`` s (flush returns how many are left instead of raising)."""
    left = producer.flush(timeout)
    assert left == 0, f"{left} of {what} not delivered within {timeout:g} s"


def consume_all(broker: KafkaBroker, topic: str, partition: int, isolation: str) -> list[tuple]:
    """Every record Kafka's consumer (confluent-kafka) returns for the partition, read until
    its position reaches the high watermark: (offset, timestamp, timestamp type, key, value,
    headers), as :func:`records_of` gives kfs's."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": uuid.uuid4().hex,
                         "enable.auto.commit": False, "isolation.level": isolation,
                         "log_level": 0, "auto.offset.reset": "earliest"})
    try:
        tp = TopicPartition(topic, partition)
        low, high = wait_until(lambda: _watermarks(consumer, tp), f"{topic}-{partition} led")
        consumer.assign([TopicPartition(topic, partition, low)])
        out, deadline = [], time.monotonic() + DEADLINE_S
        while consumer.position([tp])[0].offset < high:
            if time.monotonic() > deadline:
                raise TimeoutError(f"consumer stuck at {consumer.position([tp])} below {high}")
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            ts_type, ts = message.timestamp()
            out.append((message.offset(), ts, ts_type - 1, message.key(), message.value(),
                        tuple((k, v) for k, v in message.headers() or ())))
        return out
    finally:
        consumer.close()


def _watermarks(consumer, tp) -> tuple[int, int] | None:
    """The partition's (low, high) watermarks; None while it has no leader yet (just after
    the broker started)."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        return consumer.get_watermark_offsets(tp, timeout=30)
    except KafkaException as exc:
        if exc.args[0].code() in (KafkaError.NOT_LEADER_FOR_PARTITION,
                                  KafkaError.LEADER_NOT_AVAILABLE,
                                  KafkaError.UNKNOWN_TOPIC_OR_PART):
            return None
        raise


def records_of(log, isolation: str) -> list[tuple]:
    """What a kfs ``Log`` serves from its log start to a consumer at ``isolation`` (Kafka's
    ``isolation.level`` name), as :func:`consume_all`'s tuples."""
    level = IsolationLevel.parse(isolation)
    return [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, tuple(r.headers))
            for batch in log.reader.record_lists(log.log_start_offset, isolation=level)
            for r in batch]
