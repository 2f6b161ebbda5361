"""The FUSE file system: a thin pyfuse3 dispatcher over a log directory
(``storage.directory.open_log_directory``'s), each request handed to the module that owns
its concept: ``partitions`` (ids, logs, following another writer), ``record_files``
(``by-offset``/``by-time``), ``listings`` (readdir), ``append_files`` (writes),
``streams`` (values, keyed-values, records.jsonl), ``coordinator_tree`` (/consumer-groups,
/transactions), ``node_attributes`` (stat and cache timeouts), ``attrs`` (extended
attributes), ``errors`` (the errno map).

Layout (every path maps to one storage call)::

    /                                   partitions; ``mkdir /<topic>-<N>`` creates one
    /<topic>-<N>/by-offset/<offset>     regular file 0444: the record value (null -> empty),
                                        st_size exact, st_mtime = record timestamp (0 for
                                        v0 messages, which have none), xattrs below
    /<topic>-<N>/by-offset/             lists the offsets in order
    /<topic>-<N>/by-time/<epoch-ms>     symlink to ../by-offset/<o>, o = first record with
                                        timestamp >= t (Kafka ListOffsets); ENOENT when none
    /<topic>-<N>/append                 write-only: one record (null key) per line
    /<topic>-<N>/append-keyed           write-only: ``key<SEP>value`` lines (console producer's
                                        parse.key / key.separator); a line without SEP -> EINVAL
    /<topic>-<N>/append-batches         write-only: producer-built v2 record batches
    /<topic>-<N>/append.jsonl           write-only: one records.jsonl-shaped JSON object per line
                                        (key, payload, headers, ts; null payload: a tombstone)
    /<topic>-<N>/values                 read-only stream: every record's value and "\n", from the
                                        log start offset (``kfs.mount.streams``)
    /<topic>-<N>/keyed-values           read-only stream: ``key<SEP>value`` and "\n" per record
                                        (console consumer's print.key; null prints "null")
    /<topic>-<N>/records.jsonl          read-only stream: one kcat -J JSON object per record
    /<topic>-<N>/from/<start>/          the same three streams from <start>: an offset, -N (the
                                        last N offsets) or a time (@epoch-ms, ISO-8601)

The append files are not seekable, like a pipe (``lseek`` and ``pwrite`` give ESPIPE); writes
go to the end (``>>`` semantics).  All complete lines of one ``write()`` request
become one ``Log.append`` call (all or nothing); the trailing partial line is stored by ``flush``,
which the kernel sends on *every* ``close()`` of a descriptor (so a dup'd or inherited descriptor
closed mid-line ends that line early, as with any per-close flush).  A write that fails drops
the line it is in, whole: no record is ever a piece of a line (see ``LineFramer``).
``echo x > append`` (O_TRUNC) and ``truncate -s 0 append`` are accepted and change nothing.

Freshness: readdir is never cached and failed lookups are not remembered, so a new record shows
up in the very next ``ls``/``cat``; the append files have entry/attr timeouts of 0 and no page
cache; record files and the directories' own names/attributes never change, so they keep long
timeouts (and records the page cache).  pyfuse3 serves all requests on one trio thread, so no
handler waits for the disk there: appends, listings and fsync run in a worker thread
(``trio.to_thread.run_sync``); single-record reads run in place when their bytes are in the page
cache and move to a worker thread only when they would wait (see ``record_files.cached_first``).

Errors: every handler goes through ``errors.fuse_errors``, the one place that turns storage
errors and OSErrors into errnos (see ``errors.errno_for``).
"""

from __future__ import annotations

import errno
import itertools
import os
from typing import Any

import pyfuse3
import trio

from storage.isolation import IsolationLevel
from storage.location import Location
from storage.log_files import CLUSTER_METADATA_TOPIC
from storage.log_manager import LogManager
from storage.protocols import LogDirectory

from . import inodes
from .append import DEFAULT_KEY_SEPARATOR
from .append_files import AppendFiles, AppendHandle
from .attrs import NodeXattrs
from .coordinator_tree import CoordinatorTree, ViewDirHandle
from .damage_notes import DamageNotes
from .errors import errno_for, fail, fuse_errors
from .inodes import Kind
from .listings import DirHandle, Listings
from .node_attributes import NodeAttributes, time_link_target
from .partitions import Partitions
from .record_files import RecordFiles
from .streams import StreamHandle, Streams
from .views import CoordinatorViews

__all__ = ["KafkaFs", "errno_for"]

# Longest name (bytes), as statfs reports it; the kernel passes FUSE names up to 1024 bytes.
NAME_MAX = 255


class _RecordHandle:
    __slots__ = ("value",)

    def __init__(self, value: bytes) -> None:
        self.value = memoryview(value)


class FileHandles:
    """The open files and directories, by the ``fh`` FUSE gives back in every request."""

    def __init__(self) -> None:
        self._handles: dict[int, Any] = {}
        self._next_fh = itertools.count(1)

    def add(self, handle: Any) -> int:
        fh = next(self._next_fh)
        self._handles[fh] = handle
        return fh

    def opened(self, handle: Any, **info: bool) -> pyfuse3.FileInfo:
        """What ``open`` answers for ``handle`` (``info``: keep_cache, direct_io, ...)."""
        return pyfuse3.FileInfo(fh=self.add(handle), **info)

    def get(self, fh: int) -> Any:
        """The handle ``fh``, or None."""
        return self._handles.get(fh)

    def of_type(self, fh: int, kind: type) -> Any:
        """The open handle ``fh``, which must be a ``kind``; EBADF otherwise."""
        handle = self._handles.get(fh)
        if not isinstance(handle, kind):
            raise fail(errno.EBADF)
        return handle

    def pop(self, fh: int) -> Any:
        return self._handles.pop(fh, None)

    def pending_partial_lines(self) -> int:
        """Bytes of partial lines held by still-open append files (at shutdown they are
        dropped, never stored half-written)."""
        return sum(h.framer.pending_len for h in self._handles.values()
                   if isinstance(h, AppendHandle))


class KafkaFs(pyfuse3.Operations):
    """pyfuse3 Operations over a log directory (``storage.directory.open_log_directory``'s).

    ``mgr``: the open log directory (the caller closes it after the serve loop ends); a
    writable mount's is a ``storage.LogManager``.
    ``backing_dir``: where it is (``statfs`` reports a local directory's file system space).
    ``read_only``: refuse mkdir and writes with EROFS (pass ``ro`` to FUSE as well).
    ``key_separator``: the bytes that split ``append-keyed`` lines (default TAB).
    ``isolation``: Kafka's consumer ``isolation.level``: READ_UNCOMMITTED (Kafka's default:
    every record but transaction markers) or READ_COMMITTED (aborted transactions and
    everything at or past the last stable offset hidden).

    ``records`` (``record_files.RecordFiles``) is what the scheduler tells which offsets
    retention and the cleaner removed (``forget_below``); at shutdown ``streams.close()``
    stops background indexing (before the logs close) and ``handles.pending_partial_lines()``
    says what still-open append files drop.
    """

    def __init__(
        self,
        mgr: LogDirectory | LogManager,
        backing_dir: str | os.PathLike | Location,
        *,
        read_only: bool = False,
        key_separator: bytes = DEFAULT_KEY_SEPARATOR,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> None:
        super().__init__()
        self._backing_dir = Location.parse(backing_dir)
        self._read_only = read_only
        self._partitions = Partitions(mgr, self._backing_dir, read_only)
        self._attributes = NodeAttributes(read_only)
        damage = DamageNotes()
        self.records = RecordFiles(self._partitions, self._attributes, isolation, damage)
        self.streams = Streams(self._partitions, self._attributes, damage, isolation,
                               key_separator)
        self._appends = AppendFiles(key_separator)
        # /consumer-groups, /transactions and /__cluster_metadata: requests for their inodes
        metadata_log = (None if self._backing_dir.is_remote
                        else self._backing_dir.path / f"{CLUSTER_METADATA_TOPIC}-0")
        self._coordinator = CoordinatorTree(CoordinatorViews(mgr, metadata_log),
                                            self._attributes.attr,
                                            self._attributes.root)
        self._listings = Listings(self._partitions, self._attributes, self.records,
                                  self._coordinator, damage, isolation)
        self._xattrs = NodeXattrs(self._partitions, self.records, damage, self._coordinator,
                                  self._appends.last_error)
        self.handles = FileHandles()

    # ---- lookup / getattr / readlink

    @fuse_errors
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: Any = None
    ) -> pyfuse3.EntryAttributes:
        """Resolve ``name`` in a directory; ENOENT for anything that does not name a node
        (non-numeric or absent offsets, timestamps past the last record, unknown partitions),
        ENAMETOOLONG past NAME_MAX bytes (so also for mkdir of such a name)."""
        if len(name) > NAME_MAX:
            raise fail(errno.ENAMETOOLONG)
        view = self._coordinator.path(parent_inode)
        if view is not None:
            return await self._coordinator.lookup(view, name)
        parent = await self._partitions.followed(parent_inode)
        kind = parent.kind
        if kind is Kind.ROOT and self._coordinator.is_root_name(name.decode("utf-8", "replace")):
            await self._partitions.follow_all()
            return await self._coordinator.lookup((), name)
        if kind is Kind.ROOT:
            pid = await self._partitions.lookup(name)
            return self._attributes.fixed(inodes.Node(Kind.PARTITION, pid))
        if kind is Kind.PARTITION:
            child = inodes.PARTITION_ENTRY_KINDS.get(name)
            if child is None:
                raise fail(errno.ENOENT)
            if child in inodes.STREAM_KINDS:
                return await self.streams.attr(inodes.Node(child, parent.pid))
            return self._attributes.fixed(inodes.Node(child, parent.pid))
        if kind is Kind.FROM:
            return self.streams.window(parent.pid, name)
        if kind is Kind.WINDOW:
            child = inodes.WINDOW_ENTRY_KINDS.get(name)
            if child is None:
                raise fail(errno.ENOENT)
            return await self.streams.attr(inodes.Node(child, parent.pid, parent.offset))
        if kind is Kind.BY_OFFSET:
            return await self.records.lookup(parent.pid, name)
        if kind is Kind.BY_TIME:
            return await self.records.lookup_time(parent.pid, name)
        raise fail(errno.ENOTDIR)

    @fuse_errors
    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        view = self._coordinator.path(inode)
        if view is not None:
            return await self._coordinator.getattr(view)
        node = await self._partitions.followed(inode)
        if node.kind is Kind.RECORD:
            return self.records.attr(node.pid, await self.records.record(node.pid, node.offset))
        if node.kind is Kind.TIME_LINK:
            record = await self.records.record(node.pid, node.offset)
            return self._attributes.time_link(node.pid, record)
        if node.kind in inodes.STREAM_KINDS:
            return await self.streams.attr(node)
        if node.kind is Kind.WINDOW:
            return self._attributes.window(node.pid, node.offset)
        return self._attributes.fixed(node)

    @fuse_errors
    async def setattr(
        self, inode: int, attr: Any, fields: Any, fh: Any, ctx: Any
    ) -> pyfuse3.EntryAttributes:
        """Accepts, as no-ops, truncation of the append files to 0 (``: > append``) and time
        updates (``touch``); everything else is EPERM (EROFS on a read-only mount)."""
        if self._read_only:
            raise fail(errno.EROFS)
        if self._coordinator.path(inode) is not None:
            raise fail(errno.EPERM)
        node = self._partitions.node(inode)
        if fields.update_mode or fields.update_uid or fields.update_gid:
            raise fail(errno.EPERM)
        if fields.update_size and not (node.kind in inodes.APPEND_KINDS and attr.st_size == 0):
            raise fail(errno.EPERM)
        return await self.getattr(inode, ctx)

    @fuse_errors
    async def readlink(self, inode: int, ctx: Any = None) -> bytes:
        node = self._partitions.node(inode)
        if node.kind is not Kind.TIME_LINK:
            raise fail(errno.EINVAL)
        return time_link_target(node.offset)

    async def forget(self, inode_list: Any) -> None:
        # Inodes are computed, not tracked: nothing to release.
        return None

    # ---- directories

    @fuse_errors
    async def opendir(self, inode: int, ctx: Any = None) -> int:
        view = self._coordinator.path(inode)
        if view is not None:
            return self.handles.add(await self._coordinator.opendir(view))
        node = await self._partitions.followed(inode)
        if node.kind not in inodes.DIR_KINDS:
            raise fail(errno.ENOTDIR)
        if node.kind is Kind.ROOT:
            await self._partitions.follow_all()
        return self.handles.add(DirHandle(node))

    @fuse_errors
    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        """List a directory: ``.`` and ``..`` (cookies 1 and 2), then its entries
        (``kfs.mount.listings``, or the coordinator tree's)."""
        handle = self.handles.get(fh)
        if isinstance(handle, ViewDirHandle):
            await self._coordinator.readdir(handle, start_id, token)
            return
        await self._listings.readdir(self.handles.of_type(fh, DirHandle), start_id, token)

    @fuse_errors
    async def releasedir(self, fh: int) -> None:
        self.handles.pop(fh)

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        return None

    @fuse_errors
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: Any
    ) -> pyfuse3.EntryAttributes:
        """``mkdir /<topic>-<N>``: create a partition (Kafka's topic and partition name rules).
        EINVAL for an illegal name, EEXIST, EROFS on a read-only mount, EPERM below the root."""
        if self._read_only:
            raise fail(errno.EROFS)
        below_root = self._coordinator.path(parent_inode) is not None or \
            self._partitions.node(parent_inode).kind is not Kind.ROOT
        if below_root:
            raise fail(errno.EPERM)
        pid = await self._partitions.create(name)
        return self._attributes.fixed(inodes.Node(Kind.PARTITION, pid))

    # ---- files

    @fuse_errors
    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        """Record files open read-only (EACCES otherwise); append files open write-only
        (EACCES for reading, EROFS on a read-only mount)."""
        accmode = flags & os.O_ACCMODE
        view = self._coordinator.path(inode)
        if view is not None:
            content = await self._coordinator.open(view, accmode, self._read_only)
            # direct_io: the content follows the logs; no page cache to go stale
            return self.handles.opened(_RecordHandle(content), keep_cache=False, direct_io=True)
        node = await self._partitions.followed(inode)
        if node.kind is Kind.RECORD:
            if accmode != os.O_RDONLY:
                raise fail(errno.EROFS if self._read_only else errno.EACCES)
            record = await self.records.record(node.pid, node.offset)
            # (read-only: a broker truncating its log may write another record at the offset)
            return self.handles.opened(_RecordHandle(self.records.content(node.pid, record)),
                                       keep_cache=not self._read_only)
        if node.kind in inodes.STREAM_KINDS:
            if accmode != os.O_RDONLY:
                raise fail(errno.EROFS if self._read_only else errno.EACCES)
            # direct_io: no page cache, so nothing stale after retention moves the log start
            return self.handles.opened(await self.streams.open(node), keep_cache=False,
                                       direct_io=True)
        if node.kind in inodes.APPEND_KINDS:
            if accmode != os.O_WRONLY:  # write-only (APPEND_MODE): root's reads refused too
                raise fail(errno.EACCES)
            if self._read_only:
                raise fail(errno.EROFS)
            handle = self._appends.open(self._partitions.log(node.pid), node.kind)
            # direct_io: writes reach us as the application wrote them, no page cache to go stale.
            # nonseekable: a write at an offset cannot mean anything, the kernel refuses it (ESPIPE).
            return self.handles.opened(handle, keep_cache=False, direct_io=True,
                                       nonseekable=True)
        raise fail(errno.EISDIR if node.kind in inodes.DIR_KINDS else errno.EINVAL)

    @fuse_errors
    async def read(self, fh: int, off: int, size: int) -> memoryview:
        handle = self.handles.get(fh)
        if isinstance(handle, StreamHandle):
            return await self.streams.read(handle, off, size)
        return self.handles.of_type(fh, _RecordHandle).value[off:off + size]

    @fuse_errors
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        """Append the complete lines of ``buf`` (``AppendFiles.write``; ``off`` is ignored:
        O_APPEND semantics)."""
        return await self._appends.write(self.handles.of_type(fh, AppendHandle), buf)

    @fuse_errors
    async def flush(self, fh: int) -> None:
        """Every close(): an append file stores its trailing partial line, if any (its error
        reaches close)."""
        handle = self.handles.get(fh)
        if isinstance(handle, AppendHandle):
            await self._appends.flush(handle)

    @fuse_errors
    async def fsync(self, fh: int, datasync: bool) -> None:
        handle = self.handles.get(fh)
        if isinstance(handle, AppendHandle):
            await self._appends.fsync(handle)

    @fuse_errors
    async def release(self, fh: int) -> None:
        handle = self.handles.pop(fh)
        if isinstance(handle, AppendHandle):
            self._appends.release(handle)

    # ---- extended attributes

    @fuse_errors
    async def getxattr(self, inode: int, name: bytes, ctx: Any = None) -> bytes:
        """A ``user.kafka.*`` (or ``user.kfs.damage``, ``user.kfs.last_error``) attribute;
        ENOATTR when the node does not have it (``attrs.NodeXattrs.get``)."""
        return await self._xattrs.get(inode, name)

    @fuse_errors
    async def listxattr(self, inode: int, ctx: Any = None) -> list[bytes]:
        return list(await self._xattrs.of(inode))

    # ---- refused changes (records are immutable, partitions are made by mkdir)

    async def _refuse(self, *args: Any) -> Any:
        raise fail(errno.EROFS if self._read_only else errno.EPERM)

    create = mknod = symlink = link = unlink = rmdir = rename = _refuse
    setxattr = removexattr = _refuse

    # ---- file system

    @fuse_errors
    async def statfs(self, ctx: Any = None) -> pyfuse3.StatvfsData:
        """The backing directory's file system figures (so ``df`` shows real space); an object
        store has none (zeros, as a read-only network file system shows)."""
        out = pyfuse3.StatvfsData()
        out.f_namemax = NAME_MAX
        if self._backing_dir.is_remote:
            out.f_bsize = out.f_frsize = 4096
            return out
        st = await trio.to_thread.run_sync(os.statvfs, self._backing_dir.path)
        out.f_bsize = st.f_bsize
        out.f_frsize = st.f_frsize
        out.f_blocks = st.f_blocks
        out.f_bfree = st.f_bfree
        out.f_bavail = st.f_bavail
        out.f_files = st.f_files
        out.f_ffree = st.f_ffree
        out.f_favail = st.f_favail
        return out
