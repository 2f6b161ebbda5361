"""A partition's records fetched through the brokers by a consumer assigned to it (librdkafka:
its fetches follow the leader, decompress, and at read_committed leave out aborted transactions
and control records), from an offset up to an end fixed beforehand."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping

from storage.clock import SYSTEM_CLOCK
from storage.isolation import IsolationLevel

from .client import ClusterError

__all__ = ["fetch"]

POLL_RECORDS = 10_000
POLL_S = 0.2  # one poll's wait: consume() waits this long for a full batch, then returns


def fetch(config: Mapping[str, str], topic: str, partition: int, start: int, end: int,
          timeout_s: float, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
          ) -> Iterator:
    """The consumed messages (confluent-kafka ``Message``) of the data records of offsets
    ``[start, end)`` (``start`` -2: the log start), ``end`` at most the high watermark (the last
    stable offset at read_committed); ``config`` librdkafka's settings. Raises ClusterError when
    the brokers refuse the fetch or send nothing for ``timeout_s`` before ``end``."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    if end <= max(start, 0):
        return
    consumer = Consumer({"group.id": f"kfs-{uuid.uuid4()}", **config,
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": isolation.value})
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        deadline = SYSTEM_CLOCK.monotonic() + timeout_s
        while True:
            messages = consumer.consume(POLL_RECORDS, timeout=POLL_S)
            if messages:
                deadline = SYSTEM_CLOCK.monotonic() + timeout_s
            elif SYSTEM_CLOCK.monotonic() > deadline:
                raise ClusterError(f"{topic}-{partition} of the cluster at "
                                   f"{config['bootstrap.servers']} sent nothing in "
                                   f"{timeout_s:g} s before offset {end}")
            for m in messages:
                error = m.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    if m.offset() >= end:  # (at the end: what is left below it is markers)
                        return
                    continue
                if error is not None:
                    raise ClusterError(f"{topic}-{partition}: {error.str()}")
                if m.offset() >= end:
                    return
                yield m
                if m.offset() + 1 >= end:
                    return
    finally:
        consumer.close()
