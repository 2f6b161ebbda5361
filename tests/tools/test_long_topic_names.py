"""Topic names up to Kafka's limit of 249 characters (issue 25): from 239 characters on,
``<topic>.topic.properties`` would be over 255 bytes, so no such file can exist and the topic has
no overrides (the mount's mkdir of one: tests/mount/test_mount.py). The engine creates, reopens
and follows such partitions, and ``kfs adopt`` copies one into a broker's directory, whose
``-delete`` staging names it caps at 255 bytes as Kafka's ``logDeleteDirName`` does."""

from __future__ import annotations

import subprocess

import pytest

from helpers.kfs import kfs_command, kfs_env
from helpers.paths import REPO
from storage import LogManager

TOPIC = "t" * 249
TOPIC_ID = "AAAAAAAAAAAAAAAAAAAAAQ"


def values(mgr: LogManager, name: str) -> list[bytes]:
    return [r.value for r in mgr.get(name).reader.records_from(0, 100)]


@pytest.mark.parametrize("length", [239, 249])
def test_the_engine_creates_reopens_and_follows_a_partition_of_a_long_topic(tmp_path, length):
    topic = "t" * length
    mgr = LogManager(tmp_path)
    mgr.create(f"{topic}-0").append([b"a", b"b"])
    mgr.close()
    writer = LogManager(tmp_path)  # reopened: its settings are read again
    reader = LogManager(tmp_path, read_only=True)  # as a read-only mount of a broker's directory
    try:
        writer.get(f"{topic}-0").append([b"c"])
        assert values(writer, f"{topic}-0") == [b"a", b"b", b"c"]
        assert values(reader, f"{topic}-0")[:2] == [b"a", b"b"]
    finally:
        reader.close()
        writer.close()


def test_adopt_copies_a_partition_of_a_249_character_topic(tmp_path):
    """Into a directory as a formatted, cleanly stopped broker leaves it with the topic
    created (meta.properties, the clean-shutdown marker, the topic's empty partition
    directory): the staging directory's name would be 291 bytes uncapped."""
    backing, broker = tmp_path / "data", tmp_path / "broker"
    mgr = LogManager(backing)
    mgr.create(f"{TOPIC}-0").append([b"kept"])
    mgr.close()
    broker.mkdir()
    (broker / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    (broker / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')
    (broker / f"{TOPIC}-0").mkdir()
    (broker / f"{TOPIC}-0" / "partition.metadata").write_text(f"version: 0\ntopic_id: {TOPIC_ID}")
    done = subprocess.run(kfs_command("adopt", str(backing), str(broker)), cwd=REPO,
                          env=kfs_env(), stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in broker.iterdir() if p.is_dir()) == [f"{TOPIC}-0"]
    assert (broker / f"{TOPIC}-0" / "partition.metadata").read_text().endswith(TOPIC_ID)
    adopted = LogManager(broker, read_only=True)
    try:
        assert values(adopted, f"{TOPIC}-0") == [b"kept"]
    finally:
        adopted.close()
