"""Disk faults under a real mount (issue 37 item 2): the serving process's engine file calls
fail as ``KFS_FAULTS`` says (``storage.disk_calls``), and a shell writes through the mount.
The engine-level sweep of every fault is tests/engine/test_disk_faults.py."""

from __future__ import annotations

from helpers.faults import PARTITION, TOPIC
from helpers.kfs import kfs_verify
from helpers.shell import sh
from storage.log_manager import LogManager


def _partition_with(backing, settings: str, line: bytes) -> None:
    backing.mkdir()
    (backing / f"{TOPIC}.topic.properties").write_text(settings)
    mgr = LogManager(backing)
    mgr.create(PARTITION).append_lines(line + b"\n")
    mgr.close()


def _fails(script: str, cwd, message: str) -> None:
    res = sh(script, cwd, check=False)
    assert res.returncode != 0 and message in res.stderr.decode(), (script, res.stderr)


def test_a_write_whose_fsync_fails_is_refused_never_stored_and_the_partition_goes_offline(
        mount, tmp_path, monkeypatch):
    backing = tmp_path / "data"
    _partition_with(backing, "flush.messages=1\n", b"old")  # every write fsyncs before it returns
    monkeypatch.setenv("KFS_FAULTS", "fsync:1:EIO")  # the serving process's first fsync fails
    m = mount(backing)
    monkeypatch.delenv("KFS_FAULTS")
    _fails(f"echo refused >> {PARTITION}/append", m.path, "Input/output error")
    _fails(f"echo later >> {PARTITION}/append", m.path, "Input/output error")  # offline
    assert sh(f"cat {PARTITION}/by-offset/0", m.path).stdout == b"old"  # reads go on
    _fails(f"cat {PARTITION}/by-offset/1", m.path, "No such file or directory")
    mount.unmount(m)
    text = m.log_text()
    assert text.count("is offline for writes until the next mount recovers it") == 1, text
    m = mount(backing)  # the next mount recovers the partition
    _fails(f"cat {PARTITION}/by-offset/1", m.path, "No such file or directory")
    sh(f"echo again >> {PARTITION}/append", m.path)
    assert sh(f"cat {PARTITION}/by-offset/1", m.path).stdout == b"again"
    mount.unmount(m)
    assert kfs_verify(backing).returncode == 0


def test_a_full_disk_refuses_the_write_whole_and_the_next_mount_serves_what_was_acknowledged(
        mount, tmp_path, monkeypatch):
    backing = tmp_path / "data"
    _partition_with(backing, "", b"old")
    monkeypatch.setenv("KFS_FAULTS", "pwritev:2:ENOSPC:persist")  # the 2nd .log write on
    m = mount(backing)
    monkeypatch.delenv("KFS_FAULTS")
    sh(f"echo acknowledged >> {PARTITION}/append", m.path)
    _fails(f"echo refused >> {PARTITION}/append", m.path, "No space left on device")
    _fails(f"echo later >> {PARTITION}/append", m.path, "Input/output error")
    assert sh(f"cat {PARTITION}/by-offset/1", m.path).stdout == b"acknowledged"
    mount.unmount(m)
    m = mount(backing)
    assert sh(f"cat {PARTITION}/by-offset/1", m.path).stdout == b"acknowledged"
    _fails(f"cat {PARTITION}/by-offset/2", m.path, "No such file or directory")
    mount.unmount(m)
    assert kfs_verify(backing).returncode == 0
