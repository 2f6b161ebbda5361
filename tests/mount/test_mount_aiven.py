"""``kfs mount --read-only --remote-config FILE LOGDIR MOUNTPOINT``: a tiered topic's broker log
directory with its remote tier as Aiven's RemoteStorageManager wrote it (encrypted chunks, run C
of ``tests/fixtures/aiven-tiered``), configured by the broker's properties: ``cat`` and ``wc``
of the streams and record files give what a real KafkaConsumer read, at both isolation
levels."""

import base64
import os

import pytest

from helpers.aiven import expected
from helpers.mounts import Mounter
from helpers.needs import require_fuse
from helpers.paths import AIVEN_TIERED
from helpers.shell import sh

needs_fixtures = pytest.mark.needs_fixture("aiven-tiered")


@needs_fixtures
@pytest.mark.fuse
@pytest.mark.parametrize("isolation", ["read_uncommitted", "read_committed"])
def test_the_aiven_tier_mounts_below_the_local_log(tmp_path, isolation):
    require_fuse()
    run = AIVEN_TIERED / "C"
    mounter = Mounter(tmp_path)
    try:
        m = mounter(run / "logdir", "--read-only", f"--isolation-level={isolation}",
                    f"--remote-config={run / 'broker.properties'}")
        assert {"plain-0", "lz4-0", "txn-0", "txn-1"} <= set(os.listdir(m.path))
        for name in ("plain-0", "txn-1"):
            topic, _, partition = name.rpartition("-")
            want = [r for r in expected("C", topic, isolation)
                    if r["partition"] == int(partition)]
            lines = sh(f"wc -l < {name}/records.jsonl", cwd=m.path).stdout
            assert int(lines) == len(want), name
            record = want[5]  # (in the remote tier: its segment's encrypted chunks)
            value = sh(f"cat {name}/by-offset/{record['offset']}", cwd=m.path).stdout
            assert base64.b64encode(value).decode() == record["value_b64"]
        assert os.getxattr(m.path / "plain-0", "user.kafka.logStartOffset") == b"0"
    finally:
        mounter.close_all()


@pytest.mark.fuse
def test_a_writable_mount_with_a_remote_config_is_refused_before_anything_is_made(tmp_path):
    import subprocess

    from helpers.kfs import kfs_command, kfs_env

    (tmp_path / "mnt").mkdir()
    done = subprocess.run(kfs_command("mount", "--create",
                                      f"--remote-config={AIVEN_TIERED / 'A' / 'broker.properties'}",
                                      str(tmp_path / "data"), str(tmp_path / "mnt")),
                          env=kfs_env(), capture_output=True, timeout=60)
    assert done.returncode != 0
    assert b"--read-only" in done.stderr and len(done.stderr.splitlines()) == 1
    assert not (tmp_path / "data").exists()
