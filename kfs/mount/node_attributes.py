"""The ``stat`` of every node of the partition tree, and how long the kernel may keep it:
records are immutable (their entries, attributes and pages kept an hour on a writable mount),
directory names and attributes fixed for the mount's life, append files written through
(never cached), stream files sized as the log is now. One owner, so every path agrees on them.
"""

from __future__ import annotations

import os
import stat

import pyfuse3

from storage.clock import SYSTEM_CLOCK
from storage.records import Record

from . import inodes
from .inodes import Kind

# Records are immutable: let the kernel keep their entries, attributes and pages. Not on a
# read-only mount: there another writer's cleaner or truncation (a broker's) may remove them,
# so the kernel asks again as often as the mount follows the directory (FOLLOW_INTERVAL_S).
RECORD_TIMEOUT = 3600.0
# Directory names and attributes are fixed for the mount's life (see NodeAttributes.fixed);
# caching them saves a LOOKUP and a GETATTR per directory on every path walk.
DIR_TIMEOUT = 3600.0
# st_blksize of the stream files: cat and cp size their reads by it (coreutils' io_blksize),
# so one read request carries 1 MiB instead of 128 KiB (the kernel's max_pages allows 256)
STREAM_BLKSIZE = 1 << 20
# The append files' permission bits: write-only for the mounting user (the only one the mount
# serves, no allow_other), as sysfs's control files; the mount itself refuses a read (EACCES),
# since root passes the kernel's check of mode bits under default_permissions.
APPEND_MODE = 0o200
# A read-only mount catches a partition up with its directory at most this often (seconds).
FOLLOW_INTERVAL_S = 0.1


def time_link_target(offset: int) -> bytes:
    """Where ``by-time/<t>`` points: the record's ``by-offset`` file."""
    return b"../by-offset/%d" % offset


class NodeAttributes:
    """The attributes of the mount's nodes, owned by the mounting user; times default to the
    mount time. ``read_only``: a read-only mount (directories 0555, records and partitions
    timing out as often as the mount follows another writer)."""

    def __init__(self, read_only: bool) -> None:
        self.read_only = read_only
        self.record_timeout = FOLLOW_INTERVAL_S if read_only else RECORD_TIMEOUT
        self._uid = os.getuid()
        self._gid = os.getgid()
        self._mount_ns = SYSTEM_CLOCK.milliseconds() * 1_000_000

    def attr(self, ino: int, mode: int, timeout: float, size: int = 0,
             mtime_ns: int | None = None) -> pyfuse3.EntryAttributes:
        attr = pyfuse3.EntryAttributes()
        attr.st_ino = ino
        attr.generation = 0
        attr.entry_timeout = timeout
        attr.attr_timeout = timeout
        attr.st_mode = mode
        attr.st_nlink = 2 if stat.S_ISDIR(mode) else 1
        attr.st_uid = self._uid
        attr.st_gid = self._gid
        attr.st_rdev = 0
        attr.st_size = size
        attr.st_blksize = 4096
        attr.st_blocks = (size + 511) // 512
        ns = self._mount_ns if mtime_ns is None else mtime_ns
        attr.st_atime_ns = ns
        attr.st_mtime_ns = ns
        attr.st_ctime_ns = ns
        return attr

    def root(self) -> pyfuse3.EntryAttributes:
        return self.fixed(inodes.Node(Kind.ROOT))

    def fixed(self, node: inodes.Node) -> pyfuse3.EntryAttributes:
        """Attributes of the root and of a partition's fixed nodes (no I/O).

        Append files: timeouts 0 (written through; never answered from the kernel's cache).
        Directories: their names and attributes never change while mounted, so the kernel may
        keep them (DIR_TIMEOUT); what grows is their content, and that is never cached: readdir
        always reaches us and a failed lookup is not remembered (pyfuse3 replies ENOENT, which
        the kernel does not cache), so a new record or partition is visible at once.
        """
        if node.kind is Kind.ROOT:
            mode = stat.S_IFDIR | (0o555 if self.read_only else 0o755)
            return self.attr(inodes.ROOT_INO, mode, DIR_TIMEOUT)
        ino = inodes.fixed_ino(node.pid, node.kind)
        if node.kind in inodes.APPEND_KINDS:  # write-only, as sysfs's control files: the owner
            return self.attr(ino, stat.S_IFREG | APPEND_MODE, 0)  # writes, a read is EACCES
        if node.kind in inodes.STREAM_KINDS:
            return self.stream(ino, 0)  # (listings: a stat asks for the size)
        if node.kind is Kind.PARTITION and self.read_only:
            # another writer (a broker) may delete it: the kernel asks again as often as the
            # mount looks at the directory, so a deleted partition is gone by path within that
            return self.attr(ino, stat.S_IFDIR | 0o555, FOLLOW_INTERVAL_S)
        return self.attr(ino, stat.S_IFDIR | 0o555, DIR_TIMEOUT)

    def stream(self, ino: int, size: int, mtime_ns: int | None = None
               ) -> pyfuse3.EntryAttributes:
        """A stream file: its name is fixed, its size follows the log (attributes never
        cached by the kernel); its times are the log's last change, stable while nothing is
        appended (``tar``, ``rsync`` and ``make`` compare them)."""
        attr = self.attr(ino, stat.S_IFREG | 0o444, 0, size, mtime_ns)
        attr.entry_timeout = DIR_TIMEOUT
        attr.st_blksize = STREAM_BLKSIZE
        return attr

    def window(self, pid: int, start: int) -> pyfuse3.EntryAttributes:
        """``from/<start>/``: its name resolves anew at each lookup (``-N`` and times move)."""
        attr = self.attr(inodes.offset_ino(pid, Kind.WINDOW, start), stat.S_IFDIR | 0o555,
                         DIR_TIMEOUT)
        attr.entry_timeout = 0
        return attr

    def record(self, pid: int, record: Record, size: int) -> pyfuse3.EntryAttributes:
        """A record file of ``size`` bytes, timed by the record's timestamp."""
        mtime_ns = max(record.timestamp, 0) * 1_000_000
        ino = inodes.record_ino(pid, record.offset)
        return self.attr(ino, stat.S_IFREG | 0o444, self.record_timeout, size, mtime_ns)

    def time_link(self, pid: int, record: Record) -> pyfuse3.EntryAttributes:
        target = time_link_target(record.offset)
        mtime_ns = max(record.timestamp, 0) * 1_000_000
        ino = inodes.time_link_ino(pid, record.offset)
        attr = self.attr(ino, stat.S_IFLNK | 0o777, self.record_timeout, len(target),
                         mtime_ns)
        # The name -> offset answer is Kafka's ListOffsets for "now": do not let the kernel keep it.
        attr.entry_timeout = 0
        return attr

    def dots(self, node: inodes.Node) -> tuple[pyfuse3.EntryAttributes,
                                               pyfuse3.EntryAttributes]:
        """Attributes of a directory's ``.`` and ``..`` (the root's ``..`` is itself: the
        kernel answers for the mountpoint's parent)."""
        root = self.root()
        if node.kind is Kind.ROOT:
            return root, root
        if node.kind is Kind.PARTITION:
            return self.fixed(node), root
        if node.kind is Kind.WINDOW:
            return (self.window(node.pid, node.offset),
                    self.fixed(inodes.Node(Kind.FROM, node.pid)))
        return self.fixed(node), self.fixed(inodes.Node(Kind.PARTITION, node.pid))
