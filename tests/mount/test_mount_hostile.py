"""Hostile calls at the mount, table-driven: names no partition may have, namespace and
attribute changes, writes at an offset and a 1 GiB line. Each call gets its errno, on a
writable and on a read-only mount of the same backing directory, and nothing changes on disk:
the backing directory's file names, sizes and contents (SHA-256) are the same before and after.

Run as root, so the kernel's permission checks (``default_permissions``) let every call through
to the mount: the errnos are the mount's own answers (the kernel's for ``..``, the ``ro`` mount
option and ``pwrite`` on a file opened non-seekable).
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from helpers.mounts import Mounter
from helpers.needs import require_fuse
from storage import LogManager

PART = "orders-0"
VALUES = [b"first", b"second", b"third"]
MAX_MESSAGE_BYTES = 1048588  # Kafka's default max.message.bytes (no override here)


def snapshot(backing: Path) -> dict[str, tuple[int, str] | None]:
    """Every directory (None) and file ((size, SHA-256)) under ``backing``, by relative path."""
    out: dict[str, tuple[int, str] | None] = {}
    for root, dirs, files in os.walk(backing):
        for name in dirs:
            out[os.path.relpath(os.path.join(root, name), backing)] = None
        for name in files:
            path = os.path.join(root, name)
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                while chunk := f.read(1 << 20):
                    digest.update(chunk)
            out[os.path.relpath(path, backing)] = (os.path.getsize(path), digest.hexdigest())
    return out


@pytest.fixture(scope="module")
def mounts(tmp_path_factory):
    """(writable mount, read-only mount) of one backing directory holding ``orders-0`` with
    three records, written and closed before mounting (so its checkpoints exist)."""
    require_fuse()
    tmp = tmp_path_factory.mktemp("hostile")
    backing = tmp / "data"
    mgr = LogManager(backing)
    mgr.create(PART).append(VALUES, [b"k0", None, b"k2"])
    mgr.close()
    mounter = Mounter(tmp)
    try:
        yield mounter(backing), mounter(backing, "--read-only")
    finally:
        mounter.close_all()


def _open_close(path, flags):
    os.close(os.open(path, flags, 0o644))


def _pwrite(path, flags, offset):
    fd = os.open(path, flags)
    try:
        os.pwrite(fd, b"at-an-offset\n", offset)
    finally:
        os.close(fd)


def _lseek(path):
    fd = os.open(path, os.O_WRONLY)
    try:
        os.lseek(fd, 10, os.SEEK_SET)
    finally:
        os.close(fd)


def _setxattr(path, name):
    os.setxattr(path, name, b"evil")


LONG_TOPIC = "t" * 250  # Kafka's limit is 249
FUTURE = 9_999_999_999_999  # a by-time name past every record (ENOENT)
P = PART + "/"
R0 = P + "by-offset/0"
EPERM, EROFS = errno.EPERM, errno.EROFS

# (id, call on the mountpoint m, errno on the writable mount, errno on the read-only mount);
# None: the call succeeds (and still changes nothing).
CASES = [
    # names
    ("mkdir ..", lambda m: os.mkdir(m / ".."), errno.EEXIST, errno.EEXIST),
    ("mkdir partition/..", lambda m: os.mkdir(m / P / ".."), errno.EEXIST, errno.EEXIST),
    ("mkdir 252-char name", lambda m: os.mkdir(m / f"{LONG_TOPIC}-0"), errno.EINVAL, EROFS),
    ("mkdir 300-char name", lambda m: os.mkdir(m / ("t" * 298 + "-0")),
     errno.ENAMETOOLONG, errno.ENAMETOOLONG),
    ("mkdir non-UTF-8 name", lambda m: os.mkdir(os.fsencode(m) + b"/\xff\xfeorders-0"),
     errno.EINVAL, EROFS),
    ("mkdir __cluster_metadata-0", lambda m: os.mkdir(m / "__cluster_metadata-0"),
     errno.EINVAL, EROFS),
    ("mkdir in a partition", lambda m: os.mkdir(m / P / "sub"), EPERM, EROFS),
    ("stat non-UTF-8 offset", lambda m: os.stat(os.fsencode(m / P / "by-offset") + b"/\xff"),
     errno.ENOENT, errno.ENOENT),
    ("stat non-UTF-8 partition", lambda m: os.stat(os.fsencode(m) + b"/\xff\xfe-0"),
     errno.ENOENT, errno.ENOENT),
    ("stat 300-char offset", lambda m: os.stat(m / P / "by-offset" / ("1" * 300)),
     errno.ENAMETOOLONG, errno.ENAMETOOLONG),
    ("stat 300-char time", lambda m: os.stat(m / P / "by-time" / ("2" * 300)),
     errno.ENAMETOOLONG, errno.ENAMETOOLONG),
    # namespace changes
    ("rename partition", lambda m: os.rename(m / PART, m / "orders-1"), EPERM, EROFS),
    ("rename record", lambda m: os.rename(m / R0, m / P / "by-offset/7"), EPERM, EROFS),
    ("rename append", lambda m: os.rename(m / P / "append", m / P / "append2"), EPERM, EROFS),
    ("unlink record", lambda m: os.unlink(m / R0), EPERM, EROFS),
    ("unlink append", lambda m: os.unlink(m / P / "append"), EPERM, EROFS),
    ("unlink values", lambda m: os.unlink(m / P / "values"), EPERM, EROFS),
    ("rmdir partition", lambda m: os.rmdir(m / PART), EPERM, EROFS),
    ("rmdir by-offset", lambda m: os.rmdir(m / P / "by-offset"), EPERM, EROFS),
    ("create a file", lambda m: _open_close(m / P / "new", os.O_CREAT | os.O_WRONLY), EPERM, EROFS),
    ("create at the root", lambda m: _open_close(m / "new", os.O_CREAT | os.O_WRONLY), EPERM, EROFS),
    ("mknod", lambda m: os.mknod(m / P / "fifo"), EPERM, EROFS),
    ("symlink at the root", lambda m: os.symlink(PART, m / "orders-1"), EPERM, EROFS),
    ("symlink in by-offset", lambda m: os.symlink("0", m / P / "by-offset/7"), EPERM, EROFS),
    ("symlink in by-time", lambda m: os.symlink("../by-offset/0", m / P / f"by-time/{FUTURE}"),
     EPERM, EROFS),
    ("symlink over a by-time name", lambda m: os.symlink("x", m / P / "by-time/1"),
     errno.EEXIST, errno.EEXIST),
    ("link record", lambda m: os.link(m / R0, m / P / "by-offset/7"), EPERM, EROFS),
    ("link append to the root", lambda m: os.link(m / P / "append", m / "append"), EPERM, EROFS),
    # attributes
    ("truncate record", lambda m: os.truncate(m / R0, 0), EPERM, EROFS),
    ("truncate record longer", lambda m: os.truncate(m / R0, 100), EPERM, EROFS),
    ("truncate values", lambda m: os.truncate(m / P / "values", 0), EPERM, EROFS),
    ("truncate append to 5", lambda m: os.truncate(m / P / "append", 5), EPERM, EROFS),
    ("truncate append to 0", lambda m: os.truncate(m / P / "append", 0), None, EROFS),
    ("chmod record", lambda m: os.chmod(m / R0, 0o666), EPERM, EROFS),
    ("chmod partition", lambda m: os.chmod(m / PART, 0o700), EPERM, EROFS),
    ("chmod append", lambda m: os.chmod(m / P / "append", 0o666), EPERM, EROFS),
    ("chown record", lambda m: os.chown(m / R0, 1, 1), EPERM, EROFS),
    ("setxattr record key", lambda m: _setxattr(m / R0, "user.kafka.key"), EPERM, EROFS),
    ("setxattr new record attribute", lambda m: _setxattr(m / R0, "user.x"), EPERM, EROFS),
    ("setxattr partition", lambda m: _setxattr(m / PART, "user.kafka.logEndOffset"),
     EPERM, EROFS),
    ("setxattr trusted.*", lambda m: _setxattr(m / PART, "trusted.x"), EPERM, EROFS),
    ("removexattr record key", lambda m: os.removexattr(m / R0, "user.kafka.key"), EPERM, EROFS),
    # writes
    ("open record for writing", lambda m: _open_close(m / R0, os.O_WRONLY), errno.EACCES, EROFS),
    ("open values for writing", lambda m: _open_close(m / P / "values", os.O_RDWR),
     errno.EACCES, EROFS),
    ("pwrite append at 100", lambda m: _pwrite(m / P / "append", os.O_WRONLY, 100),
     errno.ESPIPE, EROFS),
    ("pwrite append at 0", lambda m: _pwrite(m / P / "append", os.O_WRONLY, 0),
     errno.ESPIPE, EROFS),
    ("pwrite O_APPEND append at 100",
     lambda m: _pwrite(m / P / "append", os.O_WRONLY | os.O_APPEND, 100), errno.ESPIPE, EROFS),
    ("pwrite append-keyed at 100", lambda m: _pwrite(m / P / "append-keyed", os.O_WRONLY, 100),
     errno.ESPIPE, EROFS),
    ("pwrite append-batches at 100",
     lambda m: _pwrite(m / P / "append-batches", os.O_WRONLY, 100), errno.ESPIPE, EROFS),
    ("pwrite append.jsonl at 100",
     lambda m: _pwrite(m / P / "append.jsonl", os.O_WRONLY, 100), errno.ESPIPE, EROFS),
    ("open keyed-values for writing",
     lambda m: _open_close(m / P / "keyed-values", os.O_WRONLY), errno.EACCES, EROFS),
    ("lseek append", lambda m: _lseek(m / P / "append"), errno.ESPIPE, EROFS),
]


def _check(m, call, expected: int | None) -> None:
    before = snapshot(m.backing)
    if expected is None:
        call(m.path)
    else:
        with pytest.raises(OSError) as info:
            call(m.path)
        got = info.value.errno
        assert got == expected, (
            f"errno {errno.errorcode.get(got, got)}, expected {errno.errorcode[expected]}")
    assert snapshot(m.backing) == before
    # still serving, records as they were
    assert (m.path / R0).read_bytes() == VALUES[0]
    assert sorted(os.listdir(m.path / P / "by-offset")) == ["0", "1", "2"]


@pytest.mark.fuse
@pytest.mark.root
@pytest.mark.parametrize("call, writable, read_only", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_hostile_call_gets_its_errno_and_changes_nothing(mounts, call, writable, read_only):
    rw, ro = mounts
    _check(rw, call, writable)
    _check(ro, call, read_only)
    assert os.listdir(rw.path) == os.listdir(ro.path) == [PART]


@pytest.mark.fuse
@pytest.mark.root
def test_a_1_gib_line_is_efbig_and_changes_nothing(mounts):
    """A 1 GiB line, streamed in 1 MiB writes without a newline until the end: the write that
    takes the line past max.message.bytes and every later one (the rest of that line) get
    EFBIG; nothing is stored and the file closes cleanly."""
    rw, _ = mounts
    before = snapshot(rw.backing)
    chunk = b"x" * (1 << 20)
    writes = [chunk] * 1024 + [b"\n"]
    results: list[int] = []  # bytes written, or -errno
    fd = os.open(rw.path / P / "append", os.O_WRONLY | os.O_APPEND)
    try:
        for data in writes:
            try:
                results.append(os.write(fd, data))
            except OSError as exc:
                results.append(-exc.errno)
    finally:
        os.close(fd)  # the line was abandoned: nothing is left to store at close
    first = results.index(-errno.EFBIG)
    assert results[first:] == [-errno.EFBIG] * (len(writes) - first), set(results[first:])
    assert results[:first] == [len(chunk)] * first
    assert first * len(chunk) <= MAX_MESSAGE_BYTES
    assert snapshot(rw.backing) == before
    end = subprocess.run(["getfattr", "--only-values", "-n", "user.kafka.logEndOffset",
                          rw.path / PART], capture_output=True, check=True, timeout=120).stdout
    assert int(end) == len(VALUES)
