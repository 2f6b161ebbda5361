"""The cluster's answers about partitions, through librdkafka's admin client: topic ids,
partitions and their leaders (``DescribeTopics``), and offsets (``ListOffsets``: the log start
offset, the high watermark or, at read_committed, the last stable offset; the first offset at
or after a timestamp).

``config`` is librdkafka's client settings (``bootstrap.servers``, ``security.protocol``,
``sasl.mechanism``, ``sasl.username``/``sasl.password``, ...), as Spark's Kafka source passes
its ``kafka.``-prefixed options on; they are never logged (errors name the bootstrap servers
only).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping

from storage.errors import KafkaStorageError, UnknownTopicOrPartitionError
from storage.isolation import IsolationLevel

__all__ = ["ClusterClient", "ClusterError", "PartitionInfo", "client_config"]

TIMEOUT_S = 60.0  # one request's answer (librdkafka retries within it)


class ClusterError(KafkaStorageError):
    """The cluster could not answer (unreachable, refused, timed out): one line naming the
    bootstrap servers and librdkafka's reason."""


@dataclasses.dataclass(frozen=True)
class PartitionInfo:
    """A partition as the cluster describes it: its topic's id (``Uuid.toString()``), the
    leader's broker id (-1: none)."""

    topic: str
    partition: int
    topic_id: str
    leader: int


def client_config(config: Mapping[str, str]) -> dict[str, str]:
    """librdkafka settings from ``config``, a Java client's settings as Spark's Kafka source
    takes them (``kafka.`` taken off): ``sasl.jaas.config`` (PLAIN or SCRAM login module)
    becomes librdkafka's ``sasl.username``/``sasl.password``; ``default.api.timeout.ms`` is
    kfs's wait for an answer (:func:`api_timeout_s`), not passed on. Raises ValueError without
    ``bootstrap.servers`` or for a JAAS config that is not a username and password login."""
    settings = dict(config)
    if not settings.get("bootstrap.servers"):
        raise ValueError('option "kafka.bootstrap.servers" is required to read a cluster')
    settings.pop("default.api.timeout.ms", None)
    jaas = settings.pop("sasl.jaas.config", None)
    if jaas is not None:
        settings.update(_jaas_login(jaas))
    return {"log_level": "0", **settings}


_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
_LOGIN_MODULES = ("PlainLoginModule", "ScramLoginModule")


def _jaas_login(jaas: str) -> dict[str, str]:
    """``sasl.username``/``sasl.password`` of a PLAIN or SCRAM ``sasl.jaas.config`` (the
    ``username="..." password="..."`` of its login module)."""
    module = jaas.split(None, 1)[0] if jaas.strip() else ""
    # (a quoted value's backslash escapes a character, as Java's StreamTokenizer reads it)
    options = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS_OPTION.findall(jaas)}
    if not module.endswith(_LOGIN_MODULES) or not {"username", "password"} <= set(options):
        raise ValueError("option kafka.sasl.jaas.config: kfs takes a PlainLoginModule or "
                         "ScramLoginModule with username and password (or give "
                         "kafka.sasl.username and kafka.sasl.password)")
    return {"sasl.username": options["username"], "sasl.password": options["password"]}


def api_timeout_s(config: Mapping[str, str]) -> float:
    """How long kfs waits for the cluster's answer: ``default.api.timeout.ms`` (the Java
    client's setting, as Spark's Kafka source passes it), else TIMEOUT_S."""
    value = config.get("default.api.timeout.ms")
    try:
        return TIMEOUT_S if value is None else max(int(value), 1) / 1000
    except ValueError:
        raise ValueError(f"option kafka.default.api.timeout.ms must be a number of "
                         f"milliseconds, not {value!r}") from None


class ClusterClient:
    """Admin requests to the cluster at ``config["bootstrap.servers"]``. Raises ClusterError
    when the cluster does not answer within TIMEOUT_S, saying why when librdkafka said it (an
    authentication that failed, a broker refusing connections)."""

    def __init__(self, config: Mapping[str, str]) -> None:
        from confluent_kafka.admin import AdminClient

        self.timeout_s = api_timeout_s(config)
        self.config = client_config(config)
        self.bootstrap = self.config["bootstrap.servers"]
        self._last_error: str | None = None
        try:
            self._admin = AdminClient({**self.config, "error_cb": self._errored})
        except Exception as e:  # KafkaException: a setting librdkafka does not take
            raise ValueError(f"the cluster's client settings (kafka.* options): {_reason(e)}"
                             ) from None

    def _errored(self, error) -> None:
        """librdkafka's error callback: the latest error kept for a request that gets no
        answer (a wrong password only ends in the request's timeout)."""
        self._last_error = error.str()

    def _failed(self, what: str, e: BaseException) -> ClusterError:
        """One line: the request, librdkafka's reason (or the timeout) and its last error."""
        self._admin.poll(0)  # (serves the error callbacks queued meanwhile)
        reason = _reason(e) or f"no answer within {self.timeout_s:g} s"
        if self._last_error and self._last_error not in reason:
            reason += f"; last error: {' '.join(self._last_error.split())}"
        return ClusterError(f"the cluster at {self.bootstrap} did not answer {what}: {reason}")

    def _wait(self, futures, what: str) -> dict:
        try:
            return {key: future.result(self.timeout_s) for key, future in futures.items()}
        except Exception as e:  # KafkaException and its kin: librdkafka's reason
            raise self._failed(what, e) from None

    def topic_names(self) -> list[str]:
        """Every topic's name, internal ones included."""
        try:
            metadata = self._admin.list_topics(timeout=self.timeout_s)
        except Exception as e:
            raise self._failed("a metadata request", e) from None
        return sorted(metadata.topics)

    def partitions(self, topics: Iterable[str]) -> list[PartitionInfo]:
        """Every partition of ``topics``. Raises UnknownTopicOrPartitionError naming a topic
        the cluster does not have."""
        from confluent_kafka import TopicCollection

        topics = sorted(set(topics))
        if not topics:
            return []
        try:
            described = self._wait(self._admin.describe_topics(TopicCollection(topics)),
                                   "DescribeTopics")
        except ClusterError as e:
            if "UNKNOWN_TOPIC" in str(e):
                raise UnknownTopicOrPartitionError(f"{e}: a topic is not in the cluster") \
                    from None
            raise
        return [PartitionInfo(name, p.id, str(d.topic_id), -1 if p.leader is None else p.leader.id)
                for name, d in sorted(described.items()) for p in d.partitions]

    def offsets(self, partitions: Iterable[tuple[str, int]], which: str,
                isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
                ) -> dict[tuple[str, int], int]:
        """Offsets of ``partitions`` in one ``ListOffsets``: ``which`` "earliest" (the log
        start offset, remote tier included) or "latest" (the high watermark; the last stable
        offset at read_committed)."""
        from confluent_kafka.admin import OffsetSpec

        spec = {"earliest": OffsetSpec.earliest, "latest": OffsetSpec.latest}[which]()
        return self._list_offsets({tp: spec for tp in partitions}, isolation)

    def offsets_for_times(self, timestamps: Mapping[tuple[str, int], int],
                          isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
                          ) -> dict[tuple[str, int], int | None]:
        """The first offset whose timestamp is >= each partition's timestamp (epoch ms), in
        one ``ListOffsets``; None where no record is that late."""
        from confluent_kafka.admin import OffsetSpec

        found = self._list_offsets({tp: OffsetSpec.for_timestamp(ts)
                                    for tp, ts in timestamps.items()}, isolation)
        return {tp: None if offset < 0 else offset for tp, offset in found.items()}

    def _list_offsets(self, specs: Mapping[tuple[str, int], object],
                      isolation: IsolationLevel) -> dict[tuple[str, int], int]:
        from confluent_kafka import IsolationLevel as Level
        from confluent_kafka import TopicPartition

        if not specs:
            return {}
        level = Level.READ_COMMITTED if isolation.read_committed else Level.READ_UNCOMMITTED
        asked = {TopicPartition(t, p): spec for (t, p), spec in specs.items()}
        answers = self._wait(self._admin.list_offsets(asked, isolation_level=level),
                             "ListOffsets")
        return {(tp.topic, tp.partition): r.offset for tp, r in answers.items()}


def _reason(e: BaseException) -> str:
    """librdkafka's reason, one line."""
    text = str(e.args[0]) if e.args else str(e)
    return " ".join(text.split())
