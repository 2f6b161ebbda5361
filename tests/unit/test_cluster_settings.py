"""A live cluster's client settings as Spark's Kafka source takes them (``kafka.``-prefixed
options, Java client names) turned into librdkafka's (``storage.cluster.client``), and the
source's options around them (``kfs.reading.options``). The settings reaching a real cluster:
tests/kafka/test_kafka_cluster_read.py."""

from __future__ import annotations

import pytest

from kfs.reading.options import parse_options
from storage.cluster.client import api_timeout_s, client_config

JAAS = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
        'username="alice" password="s3cr\\"et";')


def test_a_jaas_login_becomes_librdkafkas_username_and_password():
    settings = client_config({"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                              "sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config": JAAS})
    # (a backslash escapes the quote, as Kafka's JaasConfig reads it with StreamTokenizer)
    assert settings["sasl.username"] == "alice" and settings["sasl.password"] == 's3cr"et'
    assert "sasl.jaas.config" not in settings and settings["security.protocol"] == "SASL_SSL"


@pytest.mark.parametrize("jaas", [
    "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;",
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="u";', ""])
def test_other_jaas_logins_are_refused_without_the_text(jaas):
    with pytest.raises(ValueError, match="kafka.sasl.jaas.config") as e:
        client_config({"bootstrap.servers": "b:9092", "sasl.jaas.config": jaas})
    assert jaas == "" or jaas not in str(e.value)


def test_the_api_timeout_is_kfss_wait_not_a_client_setting():
    config = {"bootstrap.servers": "b:9092", "default.api.timeout.ms": "2500"}
    assert api_timeout_s(config) == 2.5 and "default.api.timeout.ms" not in client_config(config)
    assert api_timeout_s({"bootstrap.servers": "b"}) == 60.0
    with pytest.raises(ValueError, match="default.api.timeout.ms"):
        api_timeout_s({"default.api.timeout.ms": "soon"})


def test_source_options_of_a_cluster():
    opts = parse_options({"kafka.bootstrap.servers": "b:9092", "subscribe": "t",
                          "kafka.sasl.password": "hunter2", "kafka.isolation.level":
                          "read_committed"})
    assert opts.cluster and opts.path == "" and opts.kafka == {
        "bootstrap.servers": "b:9092", "sasl.password": "hunter2"}
    assert opts.isolation_level.read_committed
    assert "hunter2" not in repr(opts)  # (a plan or an error printing the options)
    with pytest.raises(ValueError, match="not both"):
        parse_options({"kafka.bootstrap.servers": "b", "path": "/x", "subscribe": "t"})
    with pytest.raises(ValueError, match="one of them"):
        parse_options({"subscribe": "t"})
    for refused in ("kafka.auto.offset.reset", "kafka.enable.auto.commit",
                    "kafka.value.deserializer"):
        with pytest.raises(ValueError, match=refused):
            parse_options({"kafka.bootstrap.servers": "b", "subscribe": "t", refused: "x"})
