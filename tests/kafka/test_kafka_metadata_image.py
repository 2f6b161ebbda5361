"""The mount's ``/__cluster_metadata/image`` tree equals what Kafka 4.1.1's
``kafka-metadata-shell`` lists and prints for the same metadata, and follows a live controller.

One broker (combined broker and controller, snapshots every few KiB of metadata) per module takes
what makes the common metadata records: topics with configs, partitions added, a topic deleted,
broker configs, a client quota, a SCRAM credential, ACLs (one deleted) and an idempotent
producer (producer ids). It is stopped cleanly; then the shell (interactive, fed on stdin) and
a read-only mount read the same files, and every path and every file's text must be equal: the
shell's ``find`` of each subtree against a walk of the mount, its ``cat`` of every file against
the mount's files. Where kfs differs from the shell on purpose it is asserted so: secrets read
``[redacted]`` (the shell prints SCRAM keys), and ``features/zkMigrationState``, which 4.1.1's
shell lists but cannot open, is not listed.

The shell's ``waitUntilCaughtUp`` returns once the first batch is applied (MetadataShell.java),
so a run may print a part of the image: each run starts and ends with ``cat /image/provenance``,
and a run counts only when both name the file's last metadata batch (kafka-dump-log's).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.kafka import JAVA_OPTS, classpath
from helpers.shell import sh
from helpers.waits import wait_until
from test_kafka_cluster_metadata_dump import metadata_broker_logs
from test_kafka_dump_log import kafka_dump_log, lines

from storage.coordinator.cluster_metadata import snapshot_id

pytestmark = pytest.mark.kafka

METADATA = "__cluster_metadata-0"
SHELL = "org.apache.kafka.shell.MetadataShell"
SUBTREES = ("acls", "clientQuotas", "cluster", "configs", "delegationToken", "producerIds",
            "provenance", "scram", "topics")
SHELL_RUNS = 5  # runs of the shell until one printed the whole image (see the docstring)


@pytest.fixture(scope="module")
def broker_logs(tmp_path_factory) -> Path:
    """The log directory of a broker that took every common kind of metadata change and wrote
    snapshots along the way, stopped cleanly."""
    return metadata_broker_logs(tmp_path_factory.mktemp("metadata-image"), share_group=False)


def _snapshots(log_dir: Path) -> list[Path]:
    return sorted((log_dir / METADATA).glob("*.checkpoint"), key=lambda p: snapshot_id(p.name))


def _segment(log_dir: Path) -> Path:
    segments = sorted((log_dir / METADATA).glob("*.log"))
    assert len(segments) == 1, segments  # (the shell reads one file)
    return segments[0]


def _last_metadata_batch(path: Path) -> int:
    """The last offset of the last batch of ``path`` that is not a control batch, as
    kafka-dump-log prints it."""
    found = [int(m.group(1)) for m in (re.search(r"lastOffset: (\d+) .*isControl: false", line)
                                       for line in lines(kafka_dump_log([path]).stdout)) if m]
    assert found, f"kafka-dump-log found no metadata batch in {path}"
    return found[-1]


def metadata_shell(path: Path, commands: list[str]) -> list[list[str]]:
    """The lines each of ``commands`` printed in one interactive ``kafka-metadata-shell
    --snapshot path`` run that held the whole image."""
    last = _last_metadata_batch(path)
    script = ["cat /image/provenance", *commands, "cat /image/provenance", "exit"]
    for _ in range(SHELL_RUNS):
        out = subprocess.run(["java", *JAVA_OPTS, "-cp", classpath(), SHELL, "--snapshot",
                              str(path)], input="\n".join(script) + "\n", capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        replies = [chunk.split("\n")[:-1] for chunk in out.stdout.split(">> ")[1:]]
        first, last_seen = replies[0], replies[len(commands) + 1]
        if first == last_seen and first[0].startswith(f"offset {last}, "):
            return replies[1:len(commands) + 1]
    pytest.fail(f"kafka-metadata-shell never printed the whole image of {path}: {out.stdout}")


def shell_tree(path: Path) -> dict[str, str | None]:
    """Every path the shell shows below /image (None for a directory) and its ``cat``."""
    finds = metadata_shell(path, [f"find /image/{sub}" for sub in SUBTREES] +
                           ["ls /image/features"])
    found = [p for reply in finds[:-1] for p in reply]
    features = [f"/image/features/{name}" for name in finds[-1]]
    assert "/image/features/zkMigrationState" in features  # which `cat` cannot open
    features.remove("/image/features/zkMigrationState")
    paths = [*found, *features]
    tree: dict[str, str | None] = {"/image": None, "/image/features": None}
    for p, text in zip(paths, metadata_shell(path, [f"cat {p}" for p in paths])):
        is_dir = text == [f"cat: {p}: Is a directory"]
        assert is_dir or len(text) == 1, (p, text)
        tree[p] = None if is_dir else text[0]
    return tree


def mount_tree(root: Path) -> dict[str, str | None]:
    """Every path below the mount's ``__cluster_metadata/image`` (as /image/...) and its text
    (one line: the trailing newline `cat` prints, taken off)."""
    image = root / "__cluster_metadata" / "image"
    tree: dict[str, str | None] = {"/image": None}
    for directory, dirs, files in os.walk(image):
        rel = "/image" + directory[len(str(image)):]
        for d in dirs:
            tree[f"{rel}/{d}"] = None
        for f in files:
            text = Path(directory, f).read_text()
            assert text.endswith("\n") and text.count("\n") == 1, (f, text)
            tree[f"{rel}/{f}"] = text[:-1]
    return tree


REDACTED_SCRAM = ("ScramCredentialData(salt=[redacted], storedKey=[redacted], "
                  "serverKey=[redacted], iterations=[redacted])")


def assert_same_tree(kfs: dict[str, str | None], kafka: dict[str, str | None]) -> None:
    """Equal, but for the secrets kfs redacts (SCRAM credentials here)."""
    scram = [p for p in kafka if p.startswith("/image/scram/") and kafka[p] is not None]
    assert scram, "the shell shows no SCRAM credential: the redaction is not exercised"
    for p in scram:
        assert kafka[p].startswith("ScramCredentialData(salt=") and "[redacted]" not in kafka[p]
        assert kfs.get(p) == REDACTED_SCRAM, p
    assert sorted(kfs) == sorted(kafka)
    differ = {p: (kfs[p], kafka[p]) for p in kafka if p not in scram and kfs[p] != kafka[p]}
    assert not differ, differ


def _backing(tmp_path: Path, files: list[Path]) -> Path:
    """A backing directory whose ``__cluster_metadata-0`` holds copies of ``files``."""
    backing = tmp_path / "backing"
    (backing / METADATA).mkdir(parents=True, exist_ok=True)
    for f in files:
        shutil.copy(f, backing / METADATA / f.name)
    return backing


def test_the_image_of_the_log_equals_the_shells(broker_logs, tmp_path, mount):
    segment = _segment(broker_logs)
    m = mount(_backing(tmp_path, [segment]), "--read-only")
    assert "__cluster_metadata" in sh("ls", m.path).out.split()
    kafka = shell_tree(segment)
    for record_kind in ("/image/topics/byName/orders/4", "/image/topics/byName/guarded/0",
                        "/image/configs/TOPIC:orders/retention.ms", "/image/cluster/brokers/1",
                        "/image/acls/byId", "/image/clientQuotas/clientId(dump-client)"):
        assert record_kind in kafka, record_kind  # what the comparison covers
    assert not any("doomed" in p for p in kafka)  # a deleted topic and its configs are gone
    assert_same_tree(mount_tree(m.path), kafka)


def test_the_image_of_a_snapshot_equals_the_shells(broker_logs, tmp_path, mount):
    snapshot = _snapshots(broker_logs)[-1]
    m = mount(_backing(tmp_path, [snapshot]), "--read-only")
    assert_same_tree(mount_tree(m.path), shell_tree(snapshot))


def test_a_snapshot_and_the_log_after_it_add_up_to_the_whole_log(broker_logs, tmp_path, mount):
    """A metadata log whose records before a snapshot were deleted (as the controller deletes
    segments a snapshot covers): the image is the snapshot's plus the records after it, the
    same as the whole log's in the shell."""
    segment = _segment(broker_logs)
    snapshots = [s for s in _snapshots(broker_logs)
                 if snapshot_id(s.name)[0] <= _last_metadata_batch(segment)]
    assert snapshots, "no snapshot ends before the log does"
    snapshot = snapshots[-1]
    backing = _backing(tmp_path, [snapshot])
    _write_tail(segment, snapshot_id(snapshot.name)[0], backing / METADATA)
    m = mount(backing, "--read-only")
    assert_same_tree(mount_tree(m.path), shell_tree(segment))


def _write_tail(segment: Path, offset: int, directory: Path) -> None:
    """The batches of ``segment`` from the one holding ``offset`` on, as a segment of their
    own named by its base offset."""
    from storage.records import iter_batches

    data = segment.read_bytes()
    position = 0
    for batch in iter_batches(data):
        if batch.last_offset >= offset:
            (directory / f"{batch.base_offset:020d}.log").write_bytes(data[position:])
            return
        position += batch.size_in_bytes
    raise AssertionError(f"{segment} ends before offset {offset}")


def test_the_image_follows_a_live_controller(kafka_broker, mount):
    broker = kafka_broker()
    broker.create_topic("first", 1)
    m = mount(broker.log_dir, "--read-only")
    topics = m.path / "__cluster_metadata" / "image" / "topics"
    assert sh("ls", m.path).out.split() == ["__cluster_metadata", "first-0"]
    broker.create_topic("fresh", 2, {"retention.ms": "7200000"})
    wait_until(lambda: "fresh" in os.listdir(topics / "byName"), "the new topic in the image")
    topic_id = (topics / "byName" / "fresh" / "id").read_text().strip()
    wait_until(lambda: sorted(os.listdir(topics / "byId" / topic_id)) == ["0", "1", "id", "name"],
               "the new topic's partitions")
    assert "leader=1," in (topics / "byName" / "fresh" / "1").read_text()
    configs = m.path / "__cluster_metadata" / "image" / "configs"
    assert (configs / "TOPIC:fresh" / "retention.ms").read_text() == "7200000\n"
    found = sh("grep -rl 'leader=1,' byName", topics).out.split()
    assert {"byName/fresh/0", "byName/fresh/1", "byName/first/0"} <= set(found)
    admin = broker.admin()
    for future in admin.delete_topics(["fresh"]).values():
        future.result(60)
    wait_until(lambda: "fresh" not in os.listdir(topics / "byName"), "the deleted topic gone")
    assert topic_id not in os.listdir(topics / "byId")
    assert not (configs / "TOPIC:fresh").exists()
    missing = subprocess.run(["cat", str(topics / "byId" / topic_id / "0")], capture_output=True)
    assert missing.returncode == 1 and b"No such file" in missing.stderr
