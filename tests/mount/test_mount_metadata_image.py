"""``/__cluster_metadata/image`` through a real mount, driven by a shell: the metadata log a
Kafka 4.1.1 broker wrote (tests/fixtures/cluster-metadata) as files, the errors of paths that
are not there or are written to, and a log with records missing. The text of every file is
held against kafka-metadata-shell in tests/kafka/test_kafka_metadata_image.py."""

from __future__ import annotations

import shutil

import pytest
from helpers.paths import FIXTURES_ROOT
from helpers.shell import sh

pytestmark = [pytest.mark.fuse, pytest.mark.needs_fixture("cluster-metadata")]

LOG = FIXTURES_ROOT / "cluster-metadata" / "__cluster_metadata-0" / "00000000000000000000.log"


@pytest.fixture
def backing(tmp_path):
    directory = tmp_path / "logs" / "__cluster_metadata-0"
    directory.mkdir(parents=True)
    shutil.copy(LOG, directory)
    return tmp_path / "logs"


def test_the_image_as_files(backing, mount):
    m = mount(backing, "--read-only")
    assert sh("ls", m.path).out.split() == ["__cluster_metadata"]
    image = m.path / "__cluster_metadata" / "image"
    assert sh("ls image/topics/byName", image.parent).out.split() == [
        "__remote_log_metadata", "__transaction_state", "lz4", "plain", "txn"]
    assert sh("cat producerIds/nextProducerId features/metadataVersion", image).out == \
        "1000\nOptional[4.1-IV1]\n"
    # the broker was stopped: every partition it led is leaderless, with it in its ELR
    partitions = sh("ls -d topics/byName/*/[0-9]* | sort", image).out.split()
    leaderless = sh("grep -rl 'leader=-1,' topics/byName | sort", image).out.split()
    assert leaderless == partitions and "topics/byName/plain/0" in partitions
    assert sh("grep -rL 'elr=\\[1\\]' topics/byName/*/[0-9]*", image, check=False).out == ""
    assert sh("grep -h . configs/TOPIC:plain/remote.storage.enable", image).out == "true\n"
    assert sh("stat -c '%F %a' provenance topics", image).out == \
        "regular file 444\ndirectory 555\n"
    topic_id = sh("cat topics/byName/plain/id", image).out.strip()
    assert sh(f"diff topics/byName/plain/0 topics/byId/{topic_id}/0", image).out == ""


def test_paths_that_are_not_there_and_writes(backing, mount):
    m = mount(backing, "--read-only")
    image = m.path / "__cluster_metadata" / "image"
    for path in ("topics/byName/nope", "topics/byName/plain/7", "features/zkMigrationState",
                 "cluster/brokers/2"):
        out = sh(f"cat {path}", image, check=False)
        assert out.returncode == 1 and "No such file or directory" in out.err, (path, out.err)
    out = sh("echo x >> producerIds/nextProducerId", image, check=False)
    assert out.returncode == 1 and "Read-only file system" in out.err
    out = sh("cat provenance/x", image, check=False)
    assert out.returncode == 1 and "Not a directory" in out.err


def test_records_missing_before_the_log_read_eio(backing, mount):
    """A metadata log that starts after offset 0 with no snapshot reaching it: the image
    cannot be built (EIO), and the mount's log says why."""
    directory = backing / "__cluster_metadata-0"
    (directory / LOG.name).rename(directory / f"{100:020d}.log")
    m = mount(backing, "--read-only")
    out = sh("ls __cluster_metadata/image/topics", m.path, check=False)
    assert out.returncode != 0 and "Input/output error" in out.err, out.err
    assert "no snapshot reaches it" in m.log_text()
