"""The ceiling: a minimal pyfuse3 file system doing the requests kfs answers, with no storage.

    python benchmarks/bare_fs.py MOUNTPOINT --files N --size S [--dir-timeout T]

Layout::

    /files/<i>   i in [0, N): a read-only file of S bytes, made in memory on open (the
                 "bare pyfuse3 small-file loop" ceiling of ``cat by-offset/<o>``).  Entry and
                 attribute timeouts and keep_cache as kfs gives its record files.
    /links/<i>   a symlink to ``../files/<i>`` with kfs's by-time choices (entry timeout 0,
                 attribute timeout as a record's): the ceiling of ``cat by-time/<t>``.
    /stream      read-only, ``--stream-bytes`` of lines of ``--size`` bytes held in memory (or
                 the bytes of ``--stream-file``), opened with direct_io, attribute timeout 0
                 and st_blksize as kfs's ``values``: the ceiling of ``cat values`` (the same
                 request sizes reach both), and with a copy of ``records.jsonl`` the ceiling
                 of ``jq`` over it.
    /sink        write-only, opened with direct_io like kfs's ``append``; it only counts the
                 newlines it receives (the bare write path of ``cat file >> sink``).  Its
                 extended attribute ``user.lines`` gives the count so far (``user.reset``
                 as a name to ``getfattr`` resets it).

Directories get long entry/attribute timeouts (their names never change; kfs's DIR_TIMEOUT);
``--dir-timeout 0`` shows what a walk through directories with timeout 0 costs.

The process prints ``ready`` on stdout once the mount serves and unmounts cleanly on SIGTERM,
SIGINT, SIGHUP or ``fusermount3 -u``.
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import stat
import sys
import time

import pyfuse3
import trio

# kfs/mount/node_attributes.py: RECORD_TIMEOUT for a writable mount's record files (entry and attr),
# keep_cache=True on open.
RECORD_TIMEOUT = 3600.0
# kfs/mount/node_attributes.py: STREAM_BLKSIZE, the stream files' st_blksize (cat and grep size their
# reads by it, so both file systems get requests of the same size)
STREAM_BLKSIZE = 1 << 20

ROOT = pyfuse3.ROOT_INODE  # 1
FILES_DIR = 2
LINKS_DIR = 3
SINK = 4
STREAM = 5
FIRST_FILE = 16

ENOATTR = pyfuse3.ENOATTR


class BareFs(pyfuse3.Operations):
    def __init__(self, n_files: int, size: int, dir_timeout: float, stream_bytes: int = 0,
                 stream: bytes | None = None) -> None:
        super().__init__()
        line = b"x" * max(size - 1, 0) + b"\n"
        if stream is None:
            stream = (line * (stream_bytes // len(line) + 1))[:stream_bytes]
        self.stream = memoryview(stream)
        self.n = n_files
        self.size = size
        self.dir_timeout = dir_timeout
        self.first_link = FIRST_FILE + n_files
        self.lines = 0
        self.bytes = 0
        self.handles: dict[int, memoryview] = {}
        self.next_fh = 1
        self.uid = os.getuid()
        self.gid = os.getgid()
        self.ns = time.time_ns()
        self.filler = b"x" * size

    # ---- attributes

    def _attr(self, ino: int, mode: int, size: int, entry_timeout: float, attr_timeout: float) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.generation = 0
        a.entry_timeout = entry_timeout
        a.attr_timeout = attr_timeout
        a.st_mode = mode
        a.st_nlink = 2 if stat.S_ISDIR(mode) else 1
        a.st_uid = self.uid
        a.st_gid = self.gid
        a.st_rdev = 0
        a.st_size = size
        a.st_blksize = 4096
        a.st_blocks = (size + 511) // 512
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = self.ns
        return a

    def _index(self, ino: int) -> int:
        """ino -> file index for files, -(index + 1) for links; ENOENT otherwise."""
        if FIRST_FILE <= ino < self.first_link:
            return ino - FIRST_FILE
        if self.first_link <= ino < self.first_link + self.n:
            return -(ino - self.first_link + 1)
        raise pyfuse3.FUSEError(errno.ENOENT)

    def _link_target(self, i: int) -> bytes:
        return b"../files/%d" % i

    def _attr_of(self, ino: int) -> pyfuse3.EntryAttributes:
        t = self.dir_timeout
        if ino == ROOT or ino == FILES_DIR or ino == LINKS_DIR:
            return self._attr(ino, stat.S_IFDIR | 0o755, 0, t, t)
        if ino == SINK:
            return self._attr(ino, stat.S_IFREG | 0o220, 0, 0, 0)  # as kfs's append
        if ino == STREAM:  # as values
            attr = self._attr(ino, stat.S_IFREG | 0o444, len(self.stream), t, 0)
            attr.st_blksize = STREAM_BLKSIZE
            return attr
        i = self._index(ino)
        if i >= 0:
            return self._attr(ino, stat.S_IFREG | 0o444, self.size, RECORD_TIMEOUT, RECORD_TIMEOUT)
        target = self._link_target(-i - 1)
        return self._attr(ino, stat.S_IFLNK | 0o777, len(target), 0, RECORD_TIMEOUT)  # as by-time

    @staticmethod
    def _parse(name: bytes) -> int | None:
        if not name.isdigit() or (len(name) > 1 and name[:1] == b"0"):
            return None
        return int(name)

    async def lookup(self, parent_inode, name, ctx=None):
        if parent_inode == ROOT:
            ino = {b"files": FILES_DIR, b"links": LINKS_DIR, b"sink": SINK,
                   b"stream": STREAM}.get(name)
            if ino is None:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._attr_of(ino)
        if parent_inode in (FILES_DIR, LINKS_DIR):
            i = self._parse(name)
            if i is None or i >= self.n:
                raise pyfuse3.FUSEError(errno.ENOENT)
            return self._attr_of((FIRST_FILE if parent_inode == FILES_DIR else self.first_link) + i)
        raise pyfuse3.FUSEError(errno.ENOENT)

    async def getattr(self, inode, ctx=None):
        return self._attr_of(inode)

    async def setattr(self, inode, attr, fields, fh, ctx):
        return self._attr_of(inode)  # ": > sink" and touch: accepted, nothing changes

    async def readlink(self, inode, ctx=None):
        i = self._index(inode)
        if i >= 0:
            raise pyfuse3.FUSEError(errno.EINVAL)
        return self._link_target(-i - 1)

    async def forget(self, inode_list):
        return None

    # ---- directories (listing kept small: only the root is listable in full)

    async def opendir(self, inode, ctx=None):
        if inode not in (ROOT, FILES_DIR, LINKS_DIR):
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return inode

    async def readdir(self, fh, start_id, token):
        if fh == ROOT:
            entries = [(b"files", FILES_DIR), (b"links", LINKS_DIR), (b"sink", SINK)]
            for idx in range(start_id, len(entries)):
                name, ino = entries[idx]
                if not pyfuse3.readdir_reply(token, name, self._attr_of(ino), idx + 1):
                    return
            return
        first = FIRST_FILE if fh == FILES_DIR else self.first_link
        for i in range(start_id, self.n):
            if not pyfuse3.readdir_reply(token, b"%d" % i, self._attr_of(first + i), i + 1):
                return

    async def releasedir(self, fh):
        return None

    # ---- files

    async def open(self, inode, flags, ctx):
        if inode == SINK:
            if flags & os.O_ACCMODE != os.O_WRONLY:
                raise pyfuse3.FUSEError(errno.EACCES)
            return pyfuse3.FileInfo(fh=0, keep_cache=False, direct_io=True)  # as kfs's append
        if inode == STREAM:
            fh = self.next_fh
            self.next_fh += 1
            self.handles[fh] = self.stream
            return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=True)  # as kfs's values
        i = self._index(inode)
        if i < 0:
            raise pyfuse3.FUSEError(errno.EINVAL)
        if flags & os.O_ACCMODE != os.O_RDONLY:
            raise pyfuse3.FUSEError(errno.EACCES)
        prefix = b"%d " % i
        value = (prefix + self.filler[len(prefix):])[: self.size]
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = memoryview(value)
        return pyfuse3.FileInfo(fh=fh, keep_cache=True)  # as kfs's record files

    async def read(self, fh, off, size):
        view = self.handles.get(fh)
        if view is None:
            raise pyfuse3.FUSEError(errno.EBADF)
        return view[off:off + size]

    async def write(self, fh, off, buf):
        self.lines += buf.count(b"\n")
        self.bytes += len(buf)
        return len(buf)

    async def flush(self, fh):
        return None

    async def release(self, fh):
        self.handles.pop(fh, None)

    async def fsync(self, fh, datasync):
        return None

    # ---- extended attributes: the sink's counters

    async def getxattr(self, inode, name, ctx=None):
        if inode == SINK:
            if name == b"user.lines":
                return b"%d" % self.lines
            if name == b"user.bytes":
                return b"%d" % self.bytes
            if name == b"user.reset":
                self.lines = self.bytes = 0
                return b"0"
        raise pyfuse3.FUSEError(ENOATTR)

    async def listxattr(self, inode, ctx=None):
        return [b"user.lines", b"user.bytes"] if inode == SINK else []

    async def statfs(self, ctx=None):
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_namemax = 255
        return s


async def _serve() -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:

            async def on_signal() -> None:
                async for _ in signals:
                    pyfuse3.terminate()
                    return

            nursery.start_soon(on_signal)
            print("ready", flush=True)
            await pyfuse3.main()
            nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mountpoint")
    p.add_argument("--files", type=int, default=10_000, help="number of files in files/ and links/")
    p.add_argument("--size", type=int, default=99, help="bytes per file")
    p.add_argument("--stream-bytes", type=int, default=0, help="bytes of /stream")
    p.add_argument("--stream-file", help="serve this file's bytes as /stream instead")
    p.add_argument("--dir-timeout", type=float, default=RECORD_TIMEOUT,
                   help="entry/attr timeout of the directories (default: as kfs's DIR_TIMEOUT)")
    args = p.parse_args(argv)

    stream = None
    if args.stream_file:
        with open(args.stream_file, "rb") as f:
            stream = f.read()
    fs = BareFs(args.files, args.size, args.dir_timeout, args.stream_bytes, stream)
    options = set(pyfuse3.default_options) | {"fsname=barefs", "subtype=barefs", "noatime"}  # as kfs
    pyfuse3.init(fs, args.mountpoint, options)
    try:
        trio.run(_serve)
    finally:
        pyfuse3.close(unmount=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
