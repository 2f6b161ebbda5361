"""A live cluster behind SASL (issue 36): Spark's Kafka source's security options reach the
client, and the secret is never printed.

One Kafka 4.1.1 broker with a SASL_PLAINTEXT listener (SCRAM-SHA-512, user ``alice`` made through
the admin client) beside its PLAINTEXT one. kfs reads a topic through the SASL listener with the
options a Spark job against Spark's Kafka source gives (``kafka.security.protocol``,
``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``): the library and Spark equal the consumer;
Spark's plan, the error of a wrong password and what a failed read prints hold no secret.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.java_server import free_port
from helpers.kafka import KafkaBroker, consume_all, flushed, kafka_missing
from helpers.kfs import kfs_env
from helpers.needs import unavailable
from helpers.paths import REPO
from helpers.waits import DEADLINE_S

pytestmark = [pytest.mark.kafka, pytest.mark.needs_modules("pyspark", "pyarrow",
                                                             "confluent_kafka")]

TOPIC = "guarded"
SECRET = "alice-s3cret-pw"
MECHANISM = "SCRAM-SHA-512"


def jaas(password: str) -> str:
    return ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{password}";')


@pytest.fixture(scope="module")
def sasl(tmp_path_factory):
    """(the broker, the options of a client of its SASL listener as ``alice``)."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    root = tmp_path_factory.mktemp("sasl")
    broker = KafkaBroker(root / "logs", root / "broker")
    port = free_port()
    broker.overrides = {
        "listeners": f"PLAINTEXT://127.0.0.1:{broker.port},SASL_PLAINTEXT://127.0.0.1:{port},"
                     f"CONTROLLER://127.0.0.1:{broker.controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{broker.port},"
                                f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
                                          "CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": MECHANISM,
        f"listener.name.sasl_plaintext.{MECHANISM.lower()}.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
    }
    try:
        broker.start()
        from confluent_kafka import Producer
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            ScramMechanism,
            UserScramCredentialUpsertion,
        )

        upsert = UserScramCredentialUpsertion(
            "alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), SECRET.encode())
        admin = broker.admin()  # (kept: a dropped client fails its futures)
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(60)
        broker.create_topic(TOPIC, 2)
        p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
        for i in range(500):
            p.produce(TOPIC, partition=i % 2, key=b"k%d" % i, value=b"v%d" % i)
        flushed(p)
        yield broker, {"kafka.bootstrap.servers": f"127.0.0.1:{port}",
                       "kafka.security.protocol": "SASL_PLAINTEXT",
                       "kafka.sasl.mechanism": MECHANISM, "kafka.sasl.jaas.config": jaas(SECRET)}
    finally:
        broker.tear_down()


def _consumed(broker) -> list[tuple]:
    return sorted((p, r[0], r[3], r[4]) for p in range(2)
                  for r in consume_all(broker, TOPIC, p, "read_uncommitted"))


def test_the_library_reads_through_the_sasl_listener(sasl):
    import kfs

    broker, options = sasl
    table = kfs.read_table(None, topics=TOPIC, **options).to_pylist()
    got = sorted((r["partition"], r["offset"], r["key"], r["value"]) for r in table)
    assert got == _consumed(broker) and len(got) == 500


def test_spark_reads_through_the_sasl_listener_and_its_plan_holds_no_secret(sasl, spark):
    broker, options = sasl
    reader = spark.read.format("kfs").option("subscribe", TOPIC)
    for key, value in options.items():
        reader = reader.option(key, value)
    df = reader.load()
    plan = df._jdf.queryExecution().toString()
    assert SECRET not in plan
    rows = df.selectExpr("partition", "offset", "key", "value").collect()
    got = sorted((r.partition, r.offset, bytes(r.key), bytes(r.value)) for r in rows)
    assert got == _consumed(broker)


def test_a_wrong_password_is_one_line_without_the_secret(sasl):
    _, options = sasl
    wrong = {**options, "kafka.sasl.jaas.config": jaas("not-" + SECRET),
             "kafka.default.api.timeout.ms": "15000"}
    script = f"import kfs\nkfs.read(None, topics={TOPIC!r}, **{wrong!r})\n"
    out = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=kfs_env(),
                         capture_output=True, text=True, timeout=DEADLINE_S)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode != 0 and options["kafka.bootstrap.servers"] in last, out.stderr
    assert "ClusterError" in last
    assert SECRET not in out.stderr + out.stdout, out.stderr
