"""Finding the kfs mount that serves a backing directory, as ``findmnt`` would: a kfs mount's
source (fsname) is its backing directory's absolute path, as sshfs shows ``user@host:path``.

Pure /proc parsing: no FUSE needed, so Spark executors can use it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from storage.location import Location

FSTYPE = "fuse.kfs"
_OCTAL = re.compile(r"\\([0-7]{3})")


def fsname_for(backing_dir: str) -> str:
    """The ``fsname=`` mount option naming ``backing_dir``, a directory or an object store's
    URI without credentials and query string (ASCII, as libfuse takes it; commas escaped)."""
    where = Location.parse(backing_dir)
    name = where.display.partition("?")[0] if where.is_remote else os.path.realpath(backing_dir)
    return name.replace("\\", "\\\\").replace(",", "\\,")


def _unescape(field: str) -> str:
    """/proc/self/mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def kfs_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str]]:
    """``(mountpoint, backing dir)`` of every kfs mount (none when mountinfo is unreadable)."""
    return [(mountpoint, backing) for mountpoint, backing, _ in kfs_mount_modes(mountinfo)]


def kfs_mount_modes(mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str, bool]]:
    """``(mountpoint, backing dir, read-only)`` of every kfs mount: read-only when the mount
    has the ``ro`` option (``kfs mount --read-only`` passes it to FUSE; mountinfo's per-mount
    options, the 6th field, then start with ``ro``), as ``findmnt -o TARGET,SOURCE,OPTIONS``
    shows it."""
    try:
        with open(mountinfo) as f:
            lines = f.readlines()
    except OSError:
        return []
    out = []
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, where = after.split(), before.split()
        if len(fields) >= 2 and len(where) >= 6 and fields[0] == FSTYPE:
            read_only = "ro" in where[5].split(",") or \
                (len(fields) >= 3 and "ro" in fields[2].split(","))
            out.append((_unescape(where[4]), _unescape(fields[1]), read_only))
    return out


def mounts_at(path: str, mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str]]:
    """``(fstype, source)`` of every mount at ``path`` (any file system), bottom first: the
    last one is what ``path`` shows. ``path`` is taken as given when it cannot be resolved
    (a dead FUSE mount's own ``stat`` fails with ENOTCONN)."""
    try:
        with open(mountinfo) as f:
            lines = f.readlines()
    except OSError:
        return []
    real = os.path.realpath(path)
    out = []
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, where = after.split(), before.split()
        if len(fields) >= 2 and len(where) >= 5 and _unescape(where[4]) == real:
            out.append((fields[0], _unescape(fields[1])))
    return out


def find_mount(backing_dir: str, mountinfo: str = "/proc/self/mountinfo") -> Path | None:
    """The mount point of a writable kfs mount serving ``backing_dir`` (the one that holds its
    ``.lock`` and may take writes for it), or None. A ``--read-only`` mount of the directory
    is never returned: it refuses writes (EROFS) and holds no lock, so a writer beside it takes
    the lock itself."""
    real = os.path.realpath(backing_dir)
    return next((Path(m) for m, backing, read_only in kfs_mount_modes(mountinfo)
                 if backing == real and not read_only), None)


def serving_processes() -> list[tuple[int, str, str]]:
    """``(pid, backing dir, mountpoint)`` of each running ``kfs mount`` server process (the
    ``--foreground`` process that serves, whether it was started in the foreground or not)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")[:-1]
        except OSError:
            continue
        if len(argv) >= 4 and b"kfs" in argv and b"mount" in argv and b"--foreground" in argv:
            found.append((int(entry), os.fsdecode(argv[-2]), os.fsdecode(argv[-1])))
    return found


def mounted_at(mountpoint: str, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether a kfs mount is at ``mountpoint``."""
    real = os.path.realpath(mountpoint)
    return any(m == real for m, _ in kfs_mounts(mountinfo))


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
