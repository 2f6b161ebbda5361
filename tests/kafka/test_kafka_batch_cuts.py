"""Batches cut where Kafka's own producer cuts them: the same records sent by a real
``KafkaProducer`` (``helpers/ProduceRecords.java``: its ``RecordAccumulator`` closes a batch when
the next record does not fit ``batch.size``, ``MemoryRecordsBuilder.hasRoomFor``) and appended
by kfs with the same ``batch.size`` leave the same record batches, byte for byte: the same cuts,
the same records, the same headers and CRCs.

Three ways into kfs's engine, each with the records that way takes: ``Log.append`` with keys,
headers and timestamps of their own (``record_sections``); ``Log.append`` of non-null values
stamped at once (``plan_batches``); ``Log.append_lines`` (``echo >> append``: one stamp per
write, the compiled line encoder). The values' lengths and timestamps' steps sit on the
varint boundaries that change a record's size by a byte (63/64, 8191/8192 for lengths and
offset deltas, ms steps back and forth), and one record is larger than ``batch.size`` (a batch
alone). The producer's ``linger.ms`` is long, so only the size cuts a batch; its idempotence is
off, as kfs's appends carry no producer id; compression is off (a compressed batch is cut by
the producer's running estimate of the ratio, which depends on when its sender drains).
"""

from __future__ import annotations

import base64
import random
import subprocess
from pathlib import Path

import pytest
from helpers.kafka import JAVA_OPTS, KafkaBroker, classpath, kafka_missing
from helpers.needs import unavailable
from helpers.paths import REPO

from storage.clock import FixedClock
from storage.config import LogConfig
from storage.log import Log
from storage.records import iter_batches

pytestmark = pytest.mark.kafka

PRODUCER = REPO / "tests" / "helpers" / "ProduceRecords.java"
NOW = 1_764_000_000_000  # the stamp of a write's records without a timestamp of their own
LENGTHS = (0, 1, 62, 63, 64, 65, 127, 128, 300, 1000, 8190, 8191, 8192, 8193)


def records(seed: int, n: int, *, keys: bool, headers: bool, stamps: bool) -> list[tuple]:
    """``n`` (timestamp, key, value, headers) records; a key, headers or a timestamp of their
    own where asked (else None: the record has none)."""
    rng = random.Random(seed)
    ts, out = NOW - 10_000_000, []
    for i in range(n):
        ts += rng.choice((0, 1, 63, 64, -1, -64, 8191, 8192, 1 << 20, -(1 << 20)))
        value = bytes(rng.randrange(256) for _ in range(rng.choice(LENGTHS)))
        key = (None if rng.random() < 0.2 else b"k%d" % rng.randrange(1 << rng.randrange(20))
               ) if keys else None
        hs = [(rng.choice(("a", "trace-id", "é")), None if rng.random() < 0.3 else b"v" * rng.randrange(70))
              for _ in range(rng.randrange(3))] if headers else None
        out.append((ts if stamps else None, key, value, hs))
    out.insert(n // 2, (NOW if not stamps else ts, None, b"L" * 20_000, None))  # over batch.size
    return out


def b64(data: bytes | None) -> str:
    return "-" if data is None else base64.b64encode(data).decode("ascii")


def produce(broker, topic: str, batch_size: int, recs: list[tuple]) -> None:
    """Send ``recs`` with Kafka's producer (stamped NOW where a record has no timestamp, as
    kfs stamps one write) and wait for every acknowledgement."""
    lines = []
    for ts, key, value, hs in recs:
        header_field = ",".join(f"{b64(name.encode())}:{b64(v)}" for name, v in hs or ())
        lines.append(f"{NOW if ts is None else ts}\t{b64(key)}\t{b64(value)}\t{header_field}\n")
    out = subprocess.run(["java", *JAVA_OPTS, "-cp", classpath(), str(PRODUCER), broker.bootstrap,
                          topic, str(batch_size)], input="".join(lines), text=True,
                         capture_output=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == str(len(recs))


def batches_of(partition_dir: Path) -> list[bytes]:
    """The whole batches of a partition's segments, in offset order."""
    found = []
    for log_file in sorted(partition_dir.glob("*.log")):
        data, position = log_file.read_bytes(), 0
        for batch in iter_batches(data):
            found.append(data[position:position + batch.size_in_bytes])
            position += batch.size_in_bytes
    return found


def kfs_log(tmp_path: Path, topic: str, batch_size: int) -> Log:
    directory = tmp_path / "kfs" / f"{topic}-0"
    directory.mkdir(parents=True)
    return Log(directory, topic, 0, LogConfig(batch_size=batch_size), clock=FixedClock(NOW))


def broker_batches(broker, topic: str) -> list[bytes]:
    return batches_of(broker.log_dir / f"{topic}-0")


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    """One broker for the module (each case its own topic); stopped in teardown, even on
    failure."""
    if kafka_missing():
        unavailable(kafka_missing())
    root = tmp_path_factory.mktemp("kafka")
    broker = KafkaBroker(root / "logs", root / "work")
    try:
        yield broker.start()
    finally:
        broker.tear_down()


WAYS = {
    # name: (records' shape, how kfs appends them)
    "own-timestamps-keys-headers": (dict(keys=True, headers=True, stamps=True), "append"),
    "stamped-at-once": (dict(keys=True, headers=False, stamps=False), "append"),
    "lines": (dict(keys=False, headers=False, stamps=False), "append_lines"),
}


@pytest.mark.parametrize("batch_size", [1000, 16384])
@pytest.mark.parametrize("way", sorted(WAYS))
def test_kfs_cuts_batches_where_kafkas_producer_does(broker, tmp_path, way, batch_size):
    shape, how = WAYS[way]
    recs = records(batch_size, 600, **shape)
    if how == "append_lines":  # (a line holds no newline)
        recs = [(ts, key, value.replace(b"\n", b" "), hs) for ts, key, value, hs in recs]
    topic = f"cuts-{batch_size}-{way}"
    broker.create_topic(topic, 1, {"max.message.bytes": "1048588"})
    produce(broker, topic, batch_size, recs)

    log = kfs_log(tmp_path, topic, batch_size)
    values = [value for _, _, value, _ in recs]
    if how == "append_lines":
        log.append_lines(b"".join(v + b"\n" for v in values))
    else:
        log.append(values, [key for _, key, _, _ in recs],
                   None if not shape["headers"] else [hs for *_, hs in recs],
                   None if not shape["stamps"] else [ts for ts, *_ in recs])
    log.close()

    ours, kafkas = batches_of(log.dir), broker_batches(broker, topic)
    assert [len(b) for b in ours] == [len(b) for b in kafkas]
    assert ours == kafkas
