"""A live cluster behind SASL (issue 36): Spark's Kafka source's security options reach every
client kfs makes, and the secret is never printed.

The module's cluster (:class:`helpers.kafka.KafkaCluster`): three combined broker+controller
nodes of Kafka 4.1.1 with tiered storage into one directory S3Proxy serves as a bucket
(LocalTieredStorage), each with a SASL_PLAINTEXT listener (SCRAM-SHA-512, user ``alice`` made
through the admin client) beside the PLAINTEXT one that inter-broker, controller and
``__remote_log_metadata`` traffic use, as do the test's producer and consumer. Its topic
``guarded`` of two partitions is mostly remote-only.

kfs reads it through the SASL listeners only (no PLAINTEXT address given: the brokers tell a
SASL client their SASL addresses), with ``remote.path`` and the options a Spark job against
Spark's Kafka source gives (``kafka.security.protocol``, ``kafka.sasl.mechanism``,
``kafka.sasl.jaas.config``): its admin client, its ``__remote_log_metadata`` consumer and its
fetch of the tail all authenticate. The library and Spark on the standalone cluster equal the
consumer; Spark's plan, the Spark cluster's logs, the error of a wrong password and what a
failed read prints hold no secret.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types

import pytest
from helpers.kafka import (
    SEGMENT_BYTES,
    TIERED_TOPIC_CONFIG,
    KafkaCluster,
    consume_all,
    flushed,
    kafka_missing,
)
from helpers.kfs import kfs_env
from helpers.needs import unavailable
from helpers.paths import REPO
from helpers.waits import DEADLINE_S, wait_until

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(900),
              pytest.mark.needs_modules("pyspark", "pyarrow", "confluent_kafka")]

TOPIC = "guarded"
PARTITIONS = 2
RECORDS_PER_PARTITION = 25_000  # ~8 segments of 1 MiB: most of each partition remote-only
SECRET = "alice-s3cret-pw"
MECHANISM = "SCRAM-SHA-512"


def jaas(password: str) -> str:
    return ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{password}";')


def produce(cluster: KafkaCluster) -> None:
    """RECORDS_PER_PARTITION keyed records of 300-byte values into each partition, through
    the PLAINTEXT listeners."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": cluster.bootstrap, "log_level": 0, "linger.ms": 5,
                  "acks": "all"})
    for i in range(RECORDS_PER_PARTITION):
        for partition in range(PARTITIONS):
            p.produce(TOPIC, partition=partition, key=b"k%d" % i,
                      value=os.urandom(150).hex().encode())
        if i % 1000 == 999:
            flushed(p)
    flushed(p)


def local_log_bytes(broker, partition: int) -> int:
    """The bytes of the partition's local ``.log`` files on ``broker`` now."""
    total = 0
    for path in (broker.log_dir / f"{TOPIC}-{partition}").glob("*.log"):
        try:
            total += path.stat().st_size
        except FileNotFoundError:  # deleted meanwhile (renamed .deleted)
            pass
    return total


@pytest.fixture(scope="module")
def sasl(s3_server, tmp_path_factory):
    """The module's cluster (``.cluster``) with ``guarded`` produced and mostly remote-only;
    ``.options``: what a client of its SASL listeners as ``alice`` gives kfs, Spark's Kafka
    source's options and ``remote.path``."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    root = tmp_path_factory.mktemp("kafka-sasl")
    bucket = s3_server.new_bucket("sasl")
    cluster = KafkaCluster(root, 3, remote_storage_dir=s3_server.base_dir / bucket / "rsm",
                           scram=MECHANISM)
    try:
        cluster.start()
        cluster.add_scram_user("alice", SECRET)
        cluster.create_topic(TOPIC, PARTITIONS, TIERED_TOPIC_CONFIG)
        produce(cluster)
        for partition, leader in cluster.leaders(TOPIC).items():
            node = cluster.node(leader)
            node.wait_tiered(TOPIC, partition, segments=2)
            # local retention done: what is left locally is under 2 segments (its
            # local.retention.bytes) and the one it cannot delete yet; the rest is remote
            wait_until(lambda: local_log_bytes(node, partition) < 3 * SEGMENT_BYTES,
                       f"{TOPIC}-{partition}'s local retention", timeout=DEADLINE_S * 2)
        yield types.SimpleNamespace(cluster=cluster, options={
            "kafka.bootstrap.servers": cluster.sasl_bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": MECHANISM,
            "kafka.sasl.jaas.config": jaas(SECRET), "remote.path": f"s3://{bucket}/rsm"})
    finally:
        cluster.tear_down()


@pytest.fixture
def s3_env(s3_server, monkeypatch):
    """This process's AWS_* variables for the bucket (``kfs.read`` runs here)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)


def _consumed(cluster) -> list[tuple]:
    """(partition, offset, key, value) of every record, by the consumer (PLAINTEXT)."""
    return sorted((p, r[0], r[3], r[4]) for p in range(PARTITIONS)
                  for r in consume_all(cluster, TOPIC, p, "read_uncommitted"))


def test_the_library_reads_through_the_sasl_listener(sasl, s3_env):
    """The plan (the admin client, the ``__remote_log_metadata`` consumer) holds most of each
    partition's offsets in the bucket and a tail through the brokers; the read (its tail
    fetched through SASL) equals the consumer."""
    import kfs
    from kfs.reading.cluster import plan_cluster_ranges
    from kfs.reading.options import parse_options

    ranges = plan_cluster_ranges(parse_options({**sasl.options, "subscribe": TOPIC}),
                                 SEGMENT_BYTES)
    for partition in range(PARTITIONS):
        mine = [r for r in ranges if r.partition == partition]
        tail = [r for r in mine if r.via_brokers]
        assert len(tail) == 1 and tail[0].size > 0, mine
        assert sum(r.size for r in mine if not r.via_brokers) > tail[0].size, mine
    table = kfs.read_table(None, topics=TOPIC, **sasl.options).to_pylist()
    got = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in table)
    assert got == _consumed(sasl.cluster) and len(got) == PARTITIONS * RECORDS_PER_PARTITION


def test_spark_reads_through_the_sasl_listener_and_holds_no_secret(sasl, s3_cluster):
    """On the standalone cluster: the rows equal the consumer's; neither the plan nor any
    log of the master, the workers or the executors holds the password."""
    reader = s3_cluster.session.read.format("kfs").option("subscribe", TOPIC)
    for key, value in sasl.options.items():
        reader = reader.option(key, value)
    df = reader.load()
    plan = df._jdf.queryExecution().toString()
    assert SECRET not in plan
    rows = df.selectExpr("partition", "offset", "key", "value").collect()
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows)
    assert got == _consumed(sasl.cluster)
    logged = [p for p in s3_cluster.standalone.root.rglob("*") if p.is_file()
              and SECRET.encode() in p.read_bytes()]
    assert logged == []


def test_a_wrong_password_is_one_line_without_the_secret(sasl):
    """A read with a wrong password fails; the last line printed names the cluster and says
    the authentication failed (librdkafka's reason), and nothing printed holds a password."""
    wrong = {**sasl.options, "kafka.sasl.jaas.config": jaas("not-" + SECRET),
             "kafka.default.api.timeout.ms": "15000"}
    script = f"import kfs\nkfs.read(None, topics={TOPIC!r}, **{wrong!r})\n"
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=kfs_env(),
                         capture_output=True, text=True, timeout=DEADLINE_S)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode != 0 and sasl.options["kafka.bootstrap.servers"] in last, out.stderr
    assert "ClusterError" in last and "Authentication failed" in last, last
    assert SECRET not in out.stderr + out.stdout, out.stderr
