"""``kfs adopt`` and the topic settings a Kafka 4.1.1 broker refuses (issue 25): kfs takes a
``segment.bytes`` below Kafka's minimum of 1048576 (tests and demos roll small segments) with
a warning, but adopt refuses such a topic, naming the setting and the broker's limit, since
``kafka-topics.sh --create --config segment.bytes=2000`` fails; the create lines it prints
carry only settings Kafka knows. Against a directory as a formatted, cleanly stopped broker
leaves it (tests/kafka/test_kafka_adopts.py adopts into a real broker)."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from helpers.kfs import kfs_command, kfs_env
from helpers.paths import REPO
from storage import LogManager


def kfs_adopt(*args) -> subprocess.CompletedProcess:
    return subprocess.run(kfs_command("adopt", *map(str, args)), cwd=REPO, env=kfs_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def stopped_broker(path: Path, *partitions: str) -> Path:
    """A broker's log directory after ``kafka-storage.sh format``, the topics' creation and a
    clean stop: meta.properties, the clean-shutdown marker, each partition's empty directory
    with its topic ID."""
    path.mkdir()
    (path / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    (path / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')
    for name in partitions:
        (path / name).mkdir()
        (path / name / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    return path


def tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else b"dir"
            for p in sorted(path.rglob("*"))}


def written(backing: Path, topic: str, settings: str) -> None:
    backing.mkdir(exist_ok=True)
    (backing / f"{topic}.topic.properties").write_text(settings)
    mgr = LogManager(backing)
    log = mgr.create(f"{topic}-0")
    for i in range(20):
        log.append([b"record %d " % i * 20], [b"key-%d" % (i % 3)])
    mgr.close()


def test_adopt_refuses_a_segment_bytes_kafka_refuses_and_takes_it_once_in_range(tmp_path, caplog):
    backing = tmp_path / "data"
    with caplog.at_level(logging.WARNING, "storage.config"):
        written(backing, "orders", "segment.bytes=2000\nretention.ms=-1\n")
    assert len(list((backing / "orders-0").glob("*.log"))) > 2  # kfs rolled at 2000 bytes
    assert [r.getMessage() for r in caplog.records] == [
        f"{backing / 'orders.topic.properties'}: segment.bytes=2000 is below Kafka 4.1.1's "
        "minimum of 1048576: kfs uses it, but a Kafka broker refuses it (kfs adopt refuses "
        "the topic)"]
    broker = stopped_broker(tmp_path / "broker", "orders-0")
    untouched = tree(broker)
    done = kfs_adopt(backing, broker)
    assert done.returncode == 1 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr == (
        f"kfs adopt: error: orders-0: segment.bytes=2000 is below Kafka 4.1.1's minimum of "
        f"1048576 ({backing / 'orders.topic.properties'}): the broker refuses it, and the "
        "topic's settings in the cluster replace kfs's: set it in range or remove it (the "
        "segments already written stay as they are), then adopt again\n")
    assert tree(broker) == untouched
    (backing / "orders.topic.properties").write_text("segment.bytes=1048576\nretention.ms=-1\n")
    done = kfs_adopt(backing, broker)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (broker / "orders-0").glob("*.log")) == \
        sorted(p.name for p in (backing / "orders-0").glob("*.log"))


def test_the_create_lines_adopt_prints_carry_only_kafkas_settings(tmp_path):
    """``batch.size`` is kfs's own (the producer's setting; Kafka has no such topic config):
    a ``--config batch.size=...`` would fail the broker's create."""
    backing = tmp_path / "data"
    written(backing, "clicks", "batch.size=1000\n# a comment\nretention.ms = -1\n"
                               "cleanup.policy=compact\n")
    done = kfs_adopt(backing, stopped_broker(tmp_path / "broker"))
    assert done.returncode == 1
    assert ("kafka-topics.sh --bootstrap-server HOST:PORT --create --topic clicks --partitions 1 "
            "--replication-factor 1 --config retention.ms=-1 --config cleanup.policy=compact\n"
            ) in done.stderr, done.stderr
