"""``kfs umount`` returns once the serving process has closed its logs, and ``kfs mount``
right after a plain ``fusermount3 -u`` waits for the closing process instead of failing."""

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
