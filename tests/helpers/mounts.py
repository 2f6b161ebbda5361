"""Mounts through the real CLI and the mount table: ``Mounter`` is the ``mount`` fixture's
value (tests/conftest.py), also used by tests that manage mounts of their own."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kfs.mount_table import alive, serving_processes

from .kfs import kfs_command, kfs_env
from .paths import REPO
from .waits import wait_for_exit


@dataclass
class Mount:
    """A live mount: ``path`` the mountpoint, ``backing`` the backing directory, ``log`` the
    daemon's log file, ``pid`` the serving process."""

    path: Path
    backing: Path
    log: Path
    pid: int | None
    options: tuple[str, ...] = ()
    mounted: bool = field(default=True)
    stderr: bytes = b""  # what ``kfs mount`` printed (its notices)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


def daemon_pids(mountpoint: Path) -> list[int]:
    """Pids of kfs serve processes whose mountpoint is ``mountpoint`` (the ones the fixture
    started: each test has its own temporary mountpoint)."""
    return [pid for pid, _, mnt in serving_processes() if mnt == os.fspath(mountpoint)]


def is_mounted(path: Path) -> bool:
    target = os.fsencode(os.path.realpath(path))
    with open("/proc/self/mountinfo", "rb") as f:
        return any(line.split()[4] == target for line in f)


class Mounter:
    """Call it to mount, ``unmount(m)`` to end a mount early (waiting until the daemon has
    exited, i.e. ``LogManager.close()`` ran), ``close_all()`` in teardown: every mount it made
    is unmounted (``fusermount3 -u``, then ``-uz``, then the daemon is ended by its pid)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.mounts: list[Mount] = []
        self._count = 0

    def __call__(self, backing: Path | str | None = None, *options: str, mountpoint: Path | None = None,
                 cluster: str | None = None) -> Mount:
        """Mount ``backing`` (a directory, made when missing, or a URI), or with ``cluster``
        the live cluster at those bootstrap servers (``--read-only --bootstrap-server``)."""
        self._count += 1
        uri = isinstance(backing, str) and "://" in backing  # (an object store's, as given)
        if cluster is not None:
            backing, uri = f"kafka://{cluster}", True
            options = ("--read-only", f"--bootstrap-server={cluster}", *options)
        if not uri:
            backing = Path(backing) if backing is not None else self.tmp_path / "data"
        mountpoint = mountpoint or self.tmp_path / f"mnt{self._count}"
        mountpoint.mkdir(parents=True, exist_ok=True)
        log = self.tmp_path / f"kfs{self._count}.log"
        if not uri and not backing.exists() and "--read-only" not in options:
            options = ("--create", *options)  # (a test's new backing directory)
        where = () if cluster is not None else (str(backing),)
        cmd = kfs_command("mount", "--log-level=debug", f"--log-file={log}", *options, *where, str(mountpoint))
        proc = subprocess.run(cmd, cwd=REPO, env=kfs_env(), capture_output=True, timeout=150)
        pids = daemon_pids(mountpoint)
        mount = Mount(mountpoint, backing, log, pids[0] if pids else None, options, is_mounted(mountpoint),
                      proc.stderr)
        self.mounts.append(mount)
        assert proc.returncode == 0, (
            f"kfs mount failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}\n{mount.log_text()}"
        )
        assert proc.stdout == b"", proc.stdout
        # The CLI returned: the file system must already be mounted and answering.
        assert mount.mounted, f"{mountpoint} is not a mount point after kfs mount returned"
        assert mount.pid is not None, "no serving process found"
        os.stat(mountpoint)
        return mount

    def unmount(self, mount: Mount, timeout: float = 30.0) -> None:
        """fusermount3 -u (falling back to -uz), then wait for the daemon to exit cleanly;
        asserts the unmount was clean."""
        clean = self._teardown(mount, timeout)
        assert clean, f"unclean unmount of {mount.path}\n{mount.log_text()}"

    def _teardown(self, mount: Mount, timeout: float = 30.0) -> bool:
        clean = True
        if is_mounted(mount.path):
            res = subprocess.run(["fusermount3", "-u", str(mount.path)], capture_output=True, timeout=30)
            if res.returncode != 0:
                clean = False
                subprocess.run(["fusermount3", "-uz", str(mount.path)], capture_output=True, timeout=30)
        mount.mounted = False
        pids = [mount.pid] if mount.pid else []
        pids += [p for p in daemon_pids(mount.path) if p not in pids]
        for pid in pids:
            if wait_for_exit(pid, timeout):
                continue
            clean = False
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                if wait_for_exit(pid, 10):
                    break
        return clean

    def close_all(self) -> None:
        for mount in self.mounts:
            if mount.mounted or (mount.pid and alive(mount.pid)):
                self._teardown(mount)
            text = mount.log_text()
            if text:  # shown by pytest when the test failed
                print(f"----- daemon log {mount.log} -----\n{text[-20000:]}")
