"""``kfs umount`` returns once the serving process has closed its logs, and ``kfs mount``
right after a plain ``fusermount3 -u`` waits for the closing process instead of failing."""

import errno
import subprocess

from helpers.kfs import kfs_command, kfs_env
from helpers.mounts import daemon_pids, is_mounted
from helpers.paths import REPO
from kfs.mount_table import alive
from storage import LogManager


def many_partitions(path, n=40):
    manager = LogManager(path)
    for i in range(n):
        manager.create(f"t{i}-0").append([b"x"])
    manager.close()


def kfs(*args):
    return subprocess.run(kfs_command(*args), cwd=REPO, env=kfs_env(), capture_output=True,
                          text=True, timeout=150)


def test_umount_waits_for_the_close_and_mount_waits_for_a_closing_process(tmp_path, mount):
    data = tmp_path / "data"
    many_partitions(data)
    first = mount(data)
    done = kfs("umount", str(first.path))
    assert done.returncode == 0, done.stderr
    assert not is_mounted(first.path)
    assert not alive(first.pid)  # closed and gone when umount returned
    first.mounted = False

    second = mount(data, mountpoint=first.path)  # at once: nothing holds the directory
    pids = daemon_pids(second.path)
    assert subprocess.run(["fusermount3", "-u", str(second.path)], timeout=30).returncode == 0
    second.mounted = False
    third = mount(data, mountpoint=first.path)  # the old process may still be closing
    assert (third.path / "t7-0" / "values").read_bytes() == b"x\n"
    assert not any(alive(p) for p in pids)


def test_umount_of_what_is_not_a_kfs_mount_fails_clearly(tmp_path):
    done = kfs("umount", str(tmp_path))
    assert done.returncode == 1
    assert "is not a kfs mount" in done.stderr


def fill(disk):
    """Fill ``disk`` (a tmpfs) to the last byte with a file of its own."""
    with open(disk / "filler", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc


def test_umount_says_when_closing_the_logs_failed(small_disk, mount):
    """A full disk when the mount closes its logs (issue 25): the clean-shutdown marker cannot
    be written, so ``kfs umount`` exits 1 with one line saying so and what the next mount does
    (it recovers), instead of 0 and nothing; the next mount serves every record."""
    backing = small_disk / "data"
    m = mount(backing)
    (m.path / "orders-0").mkdir()
    (m.path / "orders-0" / "append").write_bytes(b"a\nb\n")
    fill(small_disk)
    done = kfs("umount", str(m.path))
    m.mounted = False
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"kfs: error: unmounted {m.path}, but closing the logs of "
                                  f"{backing} failed ([Errno 28] No space left on device")
    assert done.stderr.endswith("): no clean-shutdown marker was written, so the next mount "
                                f"recovers its partitions as after a crash (see {m.log})\n")
    assert done.stderr.count("\n") == 1
    assert not alive(m.pid) and not (backing / ".kafka_cleanshutdown").exists()
    assert "closing the logs failed" in m.log_text()
    (small_disk / "filler").unlink()
    again = mount(backing)
    assert (again.path / "orders-0" / "values").read_bytes() == b"a\nb\n"
    assert kfs("umount", str(again.path)).returncode == 0
    again.mounted = False
