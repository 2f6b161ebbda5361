"""The FUSE file system: a thin pyfuse3 adapter over ``storage.LogManager``.

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
cache and move to a worker thread only when they would wait (see ``_cached_first``).

Errors: every handler goes through ``_fuse_errors``, the one place that turns storage errors and
OSErrors into errnos (see ``errno_for``).
"""

from __future__ import annotations

import errno
import functools
import itertools
import logging
import os
import stat
import time
from bisect import bisect_left
from typing import Any, Callable

import pyfuse3
import trio

from storage import errors as serr
from storage.config import TOPIC_PROPERTIES_SUFFIX
from storage.coordinator.records import decoded_line
from storage.isolation import IsolationLevel
from storage.record_cache import RecordCache, record_cost
from storage.remote.uri import is_uri

from . import inodes
from .append import (
    DEFAULT_KEY_SEPARATOR,
    AbandonedLineError,
    BatchFramer,
    InvalidJsonLineError,
    LineFramer,
    PartialBatchError,
    json_records,
)
from .attrs import XATTR_PREFIX, partition_xattrs, record_xattrs
from .damage_notes import DAMAGE_XATTR, KFS_XATTR_PREFIX, DamageNotes, readable_run
from .inodes import Kind
from .streams import StreamHandle, Streams
from .coordinator_tree import DOT_COOKIES, CoordinatorTree, ViewDirHandle, reply_dots
from .views import CoordinatorViews, is_coordinator_topic

log = logging.getLogger(__name__)

# Records are immutable: let the kernel keep their entries, attributes and pages. Not on a
# read-only mount: there another writer's cleaner or truncation (a broker's) may remove them,
# so the kernel asks again as often as the mount follows the directory (FOLLOW_INTERVAL_S).
RECORD_TIMEOUT = 3600.0
# Directory names and attributes are fixed for the mount's life (see KafkaFs._fixed_attr);
# caching them saves a LOOKUP and a GETATTR per directory on every path walk.
DIR_TIMEOUT = 3600.0
# st_blksize of the stream files: cat and cp size their reads by it (coreutils' io_blksize),
# so one read request carries 1 MiB instead of 128 KiB (the kernel's max_pages allows 256)
STREAM_BLKSIZE = 1 << 20
# A read-only mount catches a partition up with its directory at most this often (seconds).
FOLLOW_INTERVAL_S = 0.1
# by-time/ names remembered per partition so retention can invalidate them (bounds memory).
TIME_NAMES_KEPT = 65536
# append.jsonl: bytes a line may have beyond 6 per record byte (field names, ignored fields).
JSON_LINE_SLACK = 64 << 10
# by-offset/ listing: records fetched per worker-thread call, bounded by their value bytes.
LIST_CHUNK_MAX = 1024
LIST_CHUNK_MIN = 16
LIST_CHUNK_BYTES = 8 << 20

ENOATTR = pyfuse3.ENOATTR
# Longest name (bytes), as statfs reports it; the kernel passes FUSE names up to 1024 bytes.
NAME_MAX = 255


# --------------------------------------------------------------------------- errno mapping

class InvalidBatchesError(ValueError):
    """Bytes written to ``append-batches`` that a broker would refuse from a producer: not
    whole v2 batches, a bad CRC, a partial batch at close, or a producer-state violation
    (sequence, epoch, transaction state). The mount answers EINVAL."""


# What append_as_leader raises for a producer's bad input (not for the disk).
_PRODUCER_INPUT_ERRORS = (
    serr.CorruptRecordError, serr.InvalidRecordError, serr.OutOfOrderSequenceError,
    serr.InvalidProducerEpochError, serr.InvalidTxnStateError, ValueError,
)


_ERRNO_BY_ERROR: tuple[tuple[type[BaseException], int], ...] = (
    (serr.UnknownTopicOrPartitionError, errno.ENOENT),
    (serr.OffsetOutOfRangeError, errno.ENOENT),
    (serr.InvalidTopicError, errno.EINVAL),
    (serr.InvalidConfigError, errno.EINVAL),
    (serr.PartitionExistsError, errno.EEXIST),
    (serr.RecordTooLargeError, errno.EFBIG),
    (serr.ReadOnlyLogError, errno.EROFS),
    (serr.DamagedLogError, errno.EIO),  # (the load logged the damage)
    (serr.OfflineLogError, errno.EIO),  # (going offline logged the I/O error, once)
    (serr.KeySeparatorMissingError, errno.EINVAL),
    (InvalidBatchesError, errno.EINVAL),
    (InvalidJsonLineError, errno.EINVAL),
    (OverflowError, errno.EOVERFLOW),
)


def errno_for(exc: BaseException) -> int:
    """The errno a FUSE reply carries for ``exc``.

    UnknownTopicOrPartition/OffsetOutOfRange -> ENOENT, InvalidTopic/InvalidConfig -> EINVAL,
    PartitionExists -> EEXIST, RecordTooLarge -> EFBIG, ReadOnlyLog -> EROFS, a keyed line
    without separator or bad ``append-batches`` input -> EINVAL, an offset beyond the inode
    space -> EOVERFLOW, OSError -> its own errno (ENOSPC, EIO...), CorruptRecord/InvalidRecord
    and anything else -> EIO (logged, with a traceback when unexpected).
    """
    if isinstance(exc, pyfuse3.FUSEError):
        return exc.errno
    if isinstance(exc, serr.KeylessRecordError):
        log.warning("append refused: %s", exc)  # the errno alone would not say why
        return errno.EINVAL
    if isinstance(exc, InvalidJsonLineError):
        log.warning("append.jsonl write refused (EINVAL), nothing of it stored: %s", exc)
        return errno.EINVAL
    for cls, code in _ERRNO_BY_ERROR:
        if isinstance(exc, cls):
            if code in (errno.EINVAL, errno.EFBIG, errno.EEXIST, errno.EROFS):
                log.info("refused (%s): %s", errno.errorcode[code], exc)  # the errno says less
            return code
    if isinstance(exc, OSError):
        if exc.errno:
            if exc.errno in (errno.EIO, errno.ENOSPC, errno.EDQUOT):
                log.warning("storage I/O error: %s", exc)
            return exc.errno
        log.error("OSError without errno", exc_info=exc)
        return errno.EIO
    if isinstance(exc, (serr.CorruptRecordError, serr.InvalidRecordError)):
        log.error("bad record data on disk: %s", exc)
        return errno.EIO
    log.error("unexpected error in a FUSE handler", exc_info=exc)
    return errno.EIO


def _forget_entry(parent: int, name: bytes) -> None:
    """Make the kernel forget ``parent/name`` if it caches it (pyfuse3 3.5 has no
    ``ignore_enoent``: ENOENT means there was nothing to forget)."""
    try:
        pyfuse3.invalidate_entry(parent, name)
    except FileNotFoundError:
        pass


def _fuse_errors(handler: Callable[..., Any]) -> Callable[..., Any]:
    """Make a handler raise only FUSEError: pyfuse3 ends the whole main loop on any other
    exception.  trio.Cancelled and KeyboardInterrupt (BaseException) still propagate."""

    @functools.wraps(handler)
    async def wrapper(*args: Any) -> Any:
        try:
            return await handler(*args)
        except pyfuse3.FUSEError:
            raise
        except Exception as exc:  # noqa: BLE001 - this is the one mapping point
            raise pyfuse3.FUSEError(errno_for(exc)) from None

    return wrapper


def _fail(code: int) -> pyfuse3.FUSEError:
    return pyfuse3.FUSEError(code)


# --------------------------------------------------------------------------- small helpers


async def _cached_first(read: Callable[..., Any], target: int, isolation: IsolationLevel) -> Any:
    """``read(target, isolation, nowait)`` on the trio thread when the bytes it needs are
    in the page cache (it raises BlockingIOError otherwise, never waiting for the disk), else in
    a worker thread.
    A worker-thread hop costs a wake-up of the other CPU (~170 µs here), more than a cached
    read of one record."""
    try:
        return read(target, isolation, True)
    except BlockingIOError:
        return await trio.to_thread.run_sync(read, target, isolation, False)


def _offset_of(record: Any) -> int:
    return record.offset


def _time_link_target(offset: int) -> bytes:
    return b"../by-offset/%d" % offset


class _RecordHandle:
    __slots__ = ("value",)

    def __init__(self, value: bytes) -> None:
        self.value = memoryview(value)


class _FifoLock:
    """A ``trio.Lock`` (waiters served in arrival order) whose ``async with`` takes a free lock
    at once: trio's own passes through the scheduler twice even then, about 5% of an append's
    time in the mount."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = trio.Lock()

    async def __aenter__(self) -> None:
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self._lock.release()


class _AppendHandle:
    """One open ``append``/``append-keyed``/``append-batches``/``append.jsonl`` file: its own
    framer (lines, or record batches), writes serialized in order."""

    __slots__ = ("log", "kind", "keyed", "framer", "lock", "max_line", "abandon_errno",
                 "lines_seen", "stored_line", "stored_offset")

    def __init__(self, plog: Any, kind: Kind, max_line: int) -> None:
        self.log = plog
        self.kind = kind
        self.keyed = kind is Kind.APPEND_KEYED
        self.framer = BatchFramer(max_line) if kind is Kind.APPEND_BATCHES else LineFramer()
        self.lock = _FifoLock()  # requests are stored in the order they arrived
        self.max_line = max_line
        self.abandon_errno = errno.EIO  # what refused continuations of an abandoned line get
        # Lines counted from the open (what a refusal names, not a line of one write): newlines
        # written so far, and the last line stored with the offset of its record (0, -1: none).
        self.lines_seen = 0
        self.stored_line = 0
        self.stored_offset = -1

    def stored(self, first_offset: int, lines: int) -> None:
        """The ``lines`` lines after ``lines_seen`` were stored from ``first_offset`` on."""
        self.stored_line = self.lines_seen + lines
        self.stored_offset = first_offset + lines - 1

    def refusal(self, lines: int, code: int, detail: str = "") -> str:
        """What a refused write of ``lines`` lines (after ``lines_seen``; 0: a partial line)
        left, for the mount's log: the lines it held counted from the open, the last line and
        offset this open file stored, and where to resume."""
        first = self.lines_seen + 1
        held = f"line {first}" if lines <= 1 else f"lines {first}-{first + lines - 1}"
        if self.stored_offset < 0:
            stored = "nothing stored from this open file yet"
        else:
            stored = (f"stored from this open file: up to line {self.stored_line}, the last "
                      f"stored offset {self.stored_offset}")
        file = next(n for n, k in inodes.PARTITION_ENTRIES if k is self.kind).decode()
        return (f"{self.log.name}/{file}: write refused "
                f"({errno.errorcode.get(code, code)}){detail}, nothing of it stored ({held}, counted "
                f"from the open; each write() is all or nothing); {stored}; to resume, append "
                f"again from line {self.stored_line + 1}")


class _DirHandle:
    __slots__ = ("node", "names", "records", "records_from", "run_limit", "damaged")

    def __init__(self, node: inodes.Node) -> None:
        self.node = node
        self.names: list[str] | None = None  # root listing snapshot (cookies = index + 1)
        self.records: list[Any] = []  # by-offset: a contiguous run of records_from()
        self.records_from = -1  # the offset that run was fetched from
        self.run_limit = LIST_CHUNK_MAX  # records per records_from() call, sized by value bytes
        self.damaged = False  # by-offset: the listing stepped over damage


# --------------------------------------------------------------------------- the file system


class KafkaFs(pyfuse3.Operations):
    """pyfuse3 Operations over a ``storage.LogManager``.

    ``mgr``: the open LogManager (the caller closes it after the serve loop ends).
    ``backing_dir``: its directory (``statfs`` reports that file system's space).
    ``read_only``: refuse mkdir and writes with EROFS (pass ``ro`` to FUSE as well).
    ``key_separator``: the bytes that split ``append-keyed`` lines (default TAB).
    ``isolation``: Kafka's consumer ``isolation.level``: READ_UNCOMMITTED (Kafka's default:
    every record but transaction markers) or READ_COMMITTED (aborted transactions and
    everything at or past the last stable offset hidden).
    """

    def __init__(
        self,
        mgr: Any,
        backing_dir: str | os.PathLike,
        *,
        read_only: bool = False,
        key_separator: bytes = DEFAULT_KEY_SEPARATOR,
        isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
    ) -> None:
        super().__init__()
        self._isolation = isolation
        self._mgr = mgr
        self._backing_dir = os.fspath(backing_dir)
        self._read_only = read_only
        self._record_timeout = FOLLOW_INTERVAL_S if read_only else RECORD_TIMEOUT
        self._sep = key_separator
        self._ids = inodes.PartitionIds()
        # the records files resolved to, by (partition id, offset): lookup -> getattr -> open
        # -> read decodes a record once. Each with the version of the log's segments it was
        # read from (see _record).
        self._cache = RecordCache(1024, 64 << 20, lambda entry: record_cost(entry[1]))
        self._handles: dict[int, Any] = {}
        self._next_fh = itertools.count(1)
        # Lowest offset per partition whose by-offset entry the kernel may cache, and by-time
        # names handed out ({pid: {name: offset}}): what retention must invalidate.
        self._lowest_served: dict[int, int] = {}
        self._time_names: dict[int, dict[bytes, int]] = {}
        self._uid = os.getuid()
        self._gid = os.getgid()
        self._mount_ns = time.time_ns()
        self._streams = Streams(self._isolation, key_separator)
        self._damage = DamageNotes()
        # /consumer-groups and /transactions: requests for their inodes go there
        self._coordinator = CoordinatorTree(CoordinatorViews(mgr), self._attr,
                                            lambda: self._fixed_attr(inodes.Node(Kind.ROOT)))
        self._log_cleaner = None  # made on the first cleaner round (its offset map is large)
        self._followed: dict[int, float] = {}  # pid -> monotonic time of its last catch-up
        self._partitions_followed = -FOLLOW_INTERVAL_S  # monotonic time of the last look
        self._gone: set[int] = set()  # pids of partitions deleted under a read-only mount

    def close_streams(self) -> None:
        """Stop background indexing of the stream files (before the logs close)."""
        self._streams.close()

    # ---- partitions

    def _log_by_pid(self, pid: int) -> Any:
        """The log of partition ``pid`` (the manager keeps logs in memory: no disk here)."""
        if pid in self._gone:
            raise _fail(errno.ENOENT)
        try:
            return self._mgr.get(self._ids.name_of(pid))
        except (KeyError, serr.UnknownTopicOrPartitionError):
            raise _fail(errno.ENOENT) from None

    async def _lookup_partition(self, name: bytes) -> int:
        """The pid of an existing partition called ``name``; ENOENT otherwise."""
        try:
            text = name.decode("utf-8")
            # an unknown name is looked for at once; a known one at most every
            # FOLLOW_INTERVAL_S (the broker may have deleted it: its entry times out as often)
            await self._follow_partitions(force=self._ids.get(text) is None)
            await trio.to_thread.run_sync(self._mgr.get, text)  # opened on first use
        except (UnicodeDecodeError, serr.UnknownTopicOrPartitionError):
            raise _fail(errno.ENOENT) from None
        return self._ids.id_for(text)

    # ---- following a running broker's directory (read-only mounts)

    async def _follow_partitions(self, force: bool = True) -> None:
        """Partitions the broker created or deleted since the last look (one ``stat``); not
        ``force``: only when the last look is FOLLOW_INTERVAL_S old."""
        if not self._read_only:
            return
        now = time.monotonic()
        if not force and now - self._partitions_followed < FOLLOW_INTERVAL_S:
            return
        self._partitions_followed = now
        if await trio.to_thread.run_sync(self._mgr.catch_up_partitions):
            self._forget_gone_partitions()

    def _forget_gone_partitions(self) -> None:
        """Partitions deleted from the directory (a broker deleting a topic) are gone by path
        too: their pids answer ENOENT from now on (cached records too: _record asks
        _log_by_pid first), and the kernel's entry for the name is invalidated
        (asynchronously: this runs in handlers); the name, made again, gets a new pid, so no
        inode of the old partition serves it."""
        present = set(self._mgr.partition_names())
        for name, pid in self._ids.items():
            if name in present:
                continue
            log.info("%s is gone from %s: ENOENT from now on", name, self._backing_dir)
            self._gone.add(pid)
            self._ids.forget(name)
            self._followed.pop(pid, None)
            pyfuse3.invalidate_entry_async(inodes.ROOT_INO, name.encode("utf-8"),
                                           ignore_enoent=True)

    async def _follow(self, pid: int) -> None:
        """On a read-only mount, bring partition ``pid`` up to date with what another
        process (a running broker) wrote (``LogManager.catch_up``: a ``stat`` and an
        ``fstat``, and only new bytes read), at most every FOLLOW_INTERVAL_S; the offsets
        retention or the cleaner removed there read ENOENT at once (by path once the kernel's
        entry times out: FOLLOW_INTERVAL_S on a read-only mount). A writable mount is the
        only writer of its directory: nothing to follow."""
        if not self._read_only:
            return
        await self._follow_partitions(force=False)  # (deleted: ENOENT within the interval)
        if pid in self._gone:
            raise _fail(errno.ENOENT)
        now = time.monotonic()
        if now - self._followed.get(pid, -FOLLOW_INTERVAL_S) < FOLLOW_INTERVAL_S:
            return
        self._followed[pid] = now
        try:
            name = self._ids.name_of(pid)
        except KeyError:
            return
        # (what it removed leaves no cached record to serve, see _record, and no kernel entry
        # to invalidate: a read-only mount's time out)
        try:
            await trio.to_thread.run_sync(self._mgr.catch_up, name)
        except serr.UnknownTopicOrPartitionError:
            return  # (gone: the handlers answer ENOENT)

    async def _record(self, pid: int, offset: int) -> Any:
        """The record at ``offset`` (LRU first, then a worker thread); ENOENT when absent, EIO
        when it cannot be read or lies past where a damaged log's end could be read.

        What the log says now is what a reader sees, though retention, the cleaner (kfs's in a
        worker thread, a broker's under a read-only mount) or a broker's truncation change it
        before the cache is told: below the log start is ENOENT, and a cached record serves
        only while the log's segments are the ones it was read from (``segments.version``)."""
        plog = self._log_by_pid(pid)
        if offset < plog.log_start_offset:
            raise _fail(errno.ENOENT)
        version = plog.segments.version
        cached = self._cache.get((pid, offset))
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            record = await _cached_first(plog.reader.read, offset, self._isolation)
        except (serr.CorruptRecordError, serr.InvalidRecordError) as exc:
            self._damage.note(pid, plog.name, exc)
            raise
        if record is None:
            past_damage = plog.damage is not None and offset >= plog.damage.offset
            raise _fail(errno.EIO if past_damage else errno.ENOENT)
        self._cache.put((pid, offset), (version, record))
        return record

    # ---- attributes

    def _attr(
        self, ino: int, mode: int, timeout: float, size: int = 0, mtime_ns: int | None = None
    ) -> pyfuse3.EntryAttributes:
        """Attributes owned by the mounting user; times default to the mount time."""
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

    def _fixed_attr(self, node: inodes.Node) -> pyfuse3.EntryAttributes:
        """Attributes of the root and of a partition's fixed nodes (no I/O).

        Append files: timeouts 0 (written through; never answered from the kernel's cache).
        Directories: their names and attributes never change while mounted, so the kernel may
        keep them (DIR_TIMEOUT); what grows is their content, and that is never cached: readdir
        always reaches us and a failed lookup is not remembered (pyfuse3 replies ENOENT, which
        the kernel does not cache), so a new record or partition is visible at once.
        """
        if node.kind is Kind.ROOT:
            mode = stat.S_IFDIR | (0o555 if self._read_only else 0o755)
            return self._attr(inodes.ROOT_INO, mode, DIR_TIMEOUT)
        ino = inodes.fixed_ino(node.pid, node.kind)
        if node.kind in inodes.APPEND_KINDS:  # readable as empty: cp -r, tar, rsync copy a
            return self._attr(ino, stat.S_IFREG | 0o644, 0)  # partition without an error
        if node.kind in inodes.STREAM_KINDS:
            return self._stream_attr(ino, 0)  # (listings: a stat asks for the size)
        if node.kind is Kind.PARTITION and self._read_only:
            # another writer (a broker) may delete it: the kernel asks again as often as the
            # mount looks at the directory, so a deleted partition is gone by path within that
            return self._attr(ino, stat.S_IFDIR | 0o555, FOLLOW_INTERVAL_S)
        return self._attr(ino, stat.S_IFDIR | 0o555, DIR_TIMEOUT)

    def _stream_attr(self, ino: int, size: int, mtime_ns: int | None = None
                     ) -> pyfuse3.EntryAttributes:
        """A stream file: its name is fixed, its size follows the log (attributes never
        cached by the kernel); its times are the log's last change, stable while nothing is
        appended (``tar``, ``rsync`` and ``make`` compare them)."""
        attr = self._attr(ino, stat.S_IFREG | 0o444, 0, size, mtime_ns)
        attr.entry_timeout = DIR_TIMEOUT
        attr.st_blksize = STREAM_BLKSIZE
        return attr

    def _window_attr(self, pid: int, start: int) -> pyfuse3.EntryAttributes:
        """``from/<start>/``: its name resolves anew at each lookup (``-N`` and times move)."""
        attr = self._attr(inodes.offset_ino(pid, Kind.WINDOW, start), stat.S_IFDIR | 0o555,
                          DIR_TIMEOUT)
        attr.entry_timeout = 0
        return attr

    def _stream_of(self, node: inodes.Node):
        """(stream, start offset) of a stream file's node."""
        plog = self._log_by_pid(node.pid)
        stream = self._streams.get(plog, node.pid, node.kind)
        start = plog.log_start_offset if node.offset is None else node.offset
        return stream, start

    async def _stream_file_attr(self, node: inodes.Node) -> pyfuse3.EntryAttributes:
        stream, start = self._stream_of(node)
        ino = (inodes.fixed_ino(node.pid, node.kind) if node.offset is None
               else inodes.offset_ino(node.pid, node.kind, node.offset))
        return self._stream_attr(ino, await self._streams.size(stream, start),
                                 stream.log.segments.last_modified_ms() * 1_000_000)

    def _content(self, pid: int, record: Any) -> bytes:
        """A record file's content: its value, or for a coordinator topic's record the
        record decoded (one JSON line; the raw value stays in ``user.kafka.value``)."""
        plog = self._log_by_pid(pid)
        if is_coordinator_topic(plog.topic):
            return decoded_line(plog.topic, record.key, record.value, record.offset)
        return record.value if record.value is not None else b""

    def _record_attr(self, pid: int, record: Any) -> pyfuse3.EntryAttributes:
        size = len(self._content(pid, record))
        mtime_ns = max(record.timestamp, 0) * 1_000_000
        ino = inodes.record_ino(pid, record.offset)
        return self._attr(ino, stat.S_IFREG | 0o444, self._record_timeout, size, mtime_ns)

    def _time_link_attr(self, pid: int, record: Any) -> pyfuse3.EntryAttributes:
        target = _time_link_target(record.offset)
        mtime_ns = max(record.timestamp, 0) * 1_000_000
        ino = inodes.time_link_ino(pid, record.offset)
        attr = self._attr(ino, stat.S_IFLNK | 0o777, self._record_timeout, len(target),
                          mtime_ns)
        # The name -> offset answer is Kafka's ListOffsets for "now": do not let the kernel keep it.
        attr.entry_timeout = 0
        return attr

    def _node(self, ino: int) -> inodes.Node:
        try:
            node = inodes.decode(ino)
        except ValueError:
            raise _fail(errno.ENOENT) from None
        if node.kind is not Kind.ROOT:
            try:
                self._ids.name_of(node.pid)
            except KeyError:
                raise _fail(errno.ENOENT) from None
            if node.pid in self._gone:
                raise _fail(errno.ENOENT)
        return node

    # ---- the coordinator tree (/consumer-groups, /transactions): kfs.mount.coordinator_tree

    def _view_path(self, ino: int) -> tuple[str, ...] | None:
        """The coordinator tree's path of ``ino``, or None for the partition tree's inodes."""
        return None if ino == inodes.ROOT_INO else self._coordinator.path(ino)

    # ---- lookup / getattr / readlink

    @_fuse_errors
    async def lookup(
        self, parent_inode: int, name: bytes, ctx: Any = None
    ) -> pyfuse3.EntryAttributes:
        """Resolve ``name`` in a directory; ENOENT for anything that does not name a node
        (non-numeric or absent offsets, timestamps past the last record, unknown partitions),
        ENAMETOOLONG past NAME_MAX bytes (so also for mkdir of such a name)."""
        if len(name) > NAME_MAX:
            raise _fail(errno.ENAMETOOLONG)
        view = self._view_path(parent_inode)
        if view is not None:
            return await self._coordinator.lookup(view, name)
        parent = self._node(parent_inode)
        kind = parent.kind
        if kind is not Kind.ROOT:
            await self._follow(parent.pid)
        if kind is Kind.ROOT and self._coordinator.is_root_name(name.decode("utf-8", "replace")):
            await self._follow_partitions()
            return await self._coordinator.lookup((), name)
        if kind is Kind.ROOT:
            pid = await self._lookup_partition(name)
            return self._fixed_attr(inodes.Node(Kind.PARTITION, pid))
        if kind is Kind.PARTITION:
            child = inodes.PARTITION_ENTRY_KINDS.get(name)
            if child is None:
                raise _fail(errno.ENOENT)
            if child in inodes.STREAM_KINDS:
                return await self._stream_file_attr(inodes.Node(child, parent.pid))
            return self._fixed_attr(inodes.Node(child, parent.pid))
        if kind is Kind.FROM:
            start = self._streams.resolve_start(self._log_by_pid(parent.pid), name)
            return self._window_attr(parent.pid, start)
        if kind is Kind.WINDOW:
            child = inodes.WINDOW_ENTRY_KINDS.get(name)
            if child is None:
                raise _fail(errno.ENOENT)
            return await self._stream_file_attr(inodes.Node(child, parent.pid, parent.offset))
        if kind is Kind.BY_OFFSET:
            offset = inodes.parse_offset_name(name)
            if offset is None:
                raise _fail(errno.ENOENT)
            record = await self._record(parent.pid, offset)
            self._served(parent.pid, offset)
            return self._record_attr(parent.pid, record)
        if kind is Kind.BY_TIME:  # the grammar and errnos of from/'s times
            timestamp = inodes.parse_timestamp_name(name[1:] if name[:1] == b"@" else name)
            if timestamp is None:
                log.info("by-time/%r is not a time (epoch ms, @ms or ISO-8601)", name)
                raise _fail(errno.EINVAL)
            plog = self._log_by_pid(parent.pid)
            version = plog.segments.version
            record = await _cached_first(plog.reader.find_offset_by_timestamp, timestamp,
                                         self._isolation)
            if record is None:
                raise _fail(errno.ENOENT)
            self._cache.put((parent.pid, record.offset), (version, record))
            self._remember_time_name(parent.pid, name, record.offset)
            return self._time_link_attr(parent.pid, record)
        raise _fail(errno.ENOTDIR)

    @_fuse_errors
    async def getattr(self, inode: int, ctx: Any = None) -> pyfuse3.EntryAttributes:
        view = self._view_path(inode)
        if view is not None:
            return await self._coordinator.getattr(view)
        node = self._node(inode)
        if node.kind is not Kind.ROOT:
            await self._follow(node.pid)
        if node.kind is Kind.RECORD:
            return self._record_attr(node.pid, await self._record(node.pid, node.offset))
        if node.kind is Kind.TIME_LINK:
            return self._time_link_attr(node.pid, await self._record(node.pid, node.offset))
        if node.kind in inodes.STREAM_KINDS:
            return await self._stream_file_attr(node)
        if node.kind is Kind.WINDOW:
            return self._window_attr(node.pid, node.offset)
        return self._fixed_attr(node)

    @_fuse_errors
    async def setattr(
        self, inode: int, attr: Any, fields: Any, fh: Any, ctx: Any
    ) -> pyfuse3.EntryAttributes:
        """Accepts, as no-ops, truncation of the append files to 0 (``: > append``) and time
        updates (``touch``); everything else is EPERM (EROFS on a read-only mount)."""
        if self._read_only:
            raise _fail(errno.EROFS)
        if self._view_path(inode) is not None:
            raise _fail(errno.EPERM)
        node = self._node(inode)
        if fields.update_mode or fields.update_uid or fields.update_gid:
            raise _fail(errno.EPERM)
        if fields.update_size and not (node.kind in inodes.APPEND_KINDS and attr.st_size == 0):
            raise _fail(errno.EPERM)
        return await self.getattr(inode, ctx)

    @_fuse_errors
    async def readlink(self, inode: int, ctx: Any = None) -> bytes:
        node = self._node(inode)
        if node.kind is not Kind.TIME_LINK:
            raise _fail(errno.EINVAL)
        return _time_link_target(node.offset)

    def _remember_time_name(self, pid: int, name: bytes, offset: int) -> None:
        """Keep the newest TIME_NAMES_KEPT by-time names per partition for retention to
        invalidate; an older one the kernel still caches may outlive retention by at most
        RECORD_TIMEOUT. (Not on a read-only mount: its entries time out at once.)"""
        if self._read_only:
            return
        names = self._time_names.setdefault(pid, {})
        names[name] = offset
        if len(names) > TIME_NAMES_KEPT:
            del names[next(iter(names))]

    def _served(self, pid: int, offset: int) -> None:
        if self._read_only:  # (nothing to invalidate: its entries time out)
            return
        if offset < self._lowest_served.get(pid, offset + 1):
            self._lowest_served[pid] = offset

    async def apply_retention(self) -> dict[str, int]:
        """Run retention on every log (``LogManager.cleanup_logs``, in a worker thread), then
        invalidate the kernel's cached entries for the deleted offsets (the record cache
        serves none of them: see _record). Returns ``{partition: segments deleted}``."""
        names = self._mgr.partition_names()
        before = {name: self._mgr.get(name).log_start_offset for name in names}
        deleted = await trio.to_thread.run_sync(self._mgr.cleanup_logs)
        for name in names:
            pid = self._ids.get(name)
            start = self._mgr.get(name).log_start_offset
            if pid is not None and start > before[name]:
                await trio.to_thread.run_sync(self._invalidate_below, pid, start)
        return deleted

    async def run_log_cleaner(self) -> bool:
        """One round of the log cleaner (``storage.log_cleaner``, in a worker thread): the
        dirtiest compacted log cleaned, compact,delete logs' retention applied. The offsets a
        pass removed read ENOENT at once: the kernel's entries below the end of the pass are
        invalidated (the record cache serves none of them: see _record). False when no log
        needed cleaning."""
        if self._log_cleaner is None:
            from storage.log_cleaner import for_log_manager
            self._log_cleaner = for_log_manager(self._mgr)
        result = await trio.to_thread.run_sync(self._log_cleaner.clean_filthiest_log)
        if result is None:
            return False
        pid = self._ids.get(result.name)
        if pid is not None:
            await trio.to_thread.run_sync(self._invalidate_below, pid, result.end)
        return True

    def _invalidate_below(self, pid: int, start: int) -> None:
        """Runs in a worker thread (never inside a handler: the kernel may wait on one)."""
        by_offset = inodes.fixed_ino(pid, Kind.BY_OFFSET)
        for offset in range(self._lowest_served.pop(pid, start), start):
            _forget_entry(by_offset, b"%d" % offset)
        names = self._time_names.get(pid, {})
        by_time = inodes.fixed_ino(pid, Kind.BY_TIME)
        for name, offset in list(names.items()):
            if offset < start:
                _forget_entry(by_time, name)
                del names[name]

    async def forget(self, inode_list: Any) -> None:
        # Inodes are computed, not tracked: nothing to release.
        return None

    # ---- directories

    @_fuse_errors
    async def opendir(self, inode: int, ctx: Any = None) -> int:
        view = self._view_path(inode)
        if view is not None:
            fh = next(self._next_fh)
            self._handles[fh] = await self._coordinator.opendir(view)
            return fh
        node = self._node(inode)
        if node.kind not in inodes.DIR_KINDS:
            raise _fail(errno.ENOTDIR)
        if node.kind is Kind.ROOT:
            await self._follow_partitions()
        else:
            await self._follow(node.pid)
        fh = next(self._next_fh)
        self._handles[fh] = _DirHandle(node)
        return fh

    @_fuse_errors
    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        """List a directory: ``.`` and ``..`` (cookies 1 and 2), then its entries.  Cookies
        (``next_id``) stay valid while the log grows: offset + 3 in ``by-offset/``, index + 3
        in the root's and the views' per-handle snapshots and the fixed listings."""
        handle = self._handles.get(fh)
        if isinstance(handle, ViewDirHandle):
            await self._coordinator.readdir(handle, start_id, token)
            return
        handle = self._dir_handle(fh)
        node = handle.node
        kind = node.kind
        if not reply_dots(token, start_id, *self._dot_attrs(node)):
            return
        first = max(start_id - DOT_COOKIES, 0)  # index (or offset) of the next entry
        if kind is Kind.ROOT:
            await self._readdir_root(handle, first, token)
        elif kind is Kind.PARTITION:
            for index in range(first, len(inodes.PARTITION_ENTRIES)):
                name, child = inodes.PARTITION_ENTRIES[index]
                attr = self._fixed_attr(inodes.Node(child, node.pid))
                if not pyfuse3.readdir_reply(token, name, attr, index + DOT_COOKIES + 1):
                    return
        elif kind is Kind.BY_OFFSET:
            await self._readdir_offsets(handle, first, start_id >= DOT_COOKIES, token)
        elif kind is Kind.WINDOW:
            for index in range(first, len(inodes.WINDOW_ENTRIES)):
                name, child = inodes.WINDOW_ENTRIES[index]
                attr = self._stream_attr(inodes.offset_ino(node.pid, child, node.offset), 0)
                if not pyfuse3.readdir_reply(token, name, attr, index + DOT_COOKIES + 1):
                    return
        # by-time/ and from/ list nothing else: their names are any time or start.

    def _dot_attrs(self, node: inodes.Node) -> tuple[pyfuse3.EntryAttributes,
                                                     pyfuse3.EntryAttributes]:
        """Attributes of a directory's ``.`` and ``..`` (the root's ``..`` is itself: the
        kernel answers for the mountpoint's parent)."""
        root = self._fixed_attr(inodes.Node(Kind.ROOT))
        if node.kind is Kind.ROOT:
            return root, root
        if node.kind is Kind.PARTITION:
            return self._fixed_attr(node), root
        if node.kind is Kind.WINDOW:
            return (self._window_attr(node.pid, node.offset),
                    self._fixed_attr(inodes.Node(Kind.FROM, node.pid)))
        return self._fixed_attr(node), self._fixed_attr(inodes.Node(Kind.PARTITION, node.pid))

    async def _readdir_root(self, handle: _DirHandle, first: int, token: Any) -> None:
        if first == 0 or handle.names is None:
            names = self._mgr.partition_names()
            handle.names = names + self._coordinator.root_names(names)
        for index in range(first, len(handle.names)):
            name = handle.names[index]
            if self._coordinator.is_root_name(name):
                attr = self._coordinator.root_entry_attr(name)
            else:
                attr = self._fixed_attr(inodes.Node(Kind.PARTITION, self._ids.id_for(name)))
            if not pyfuse3.readdir_reply(token, name.encode("utf-8"), attr,
                                         index + DOT_COOKIES + 1):
                return

    async def _readdir_offsets(self, handle: _DirHandle, first: int, dots_sent: bool,
                               token: Any) -> None:
        """The records from offset ``first`` on, cookie = offset + 3; ``dots_sent``: ``.``
        and ``..`` went in an earlier reply (none of this one's entries is listed yet)."""
        pid = handle.node.pid
        # One attributes object for the whole reply: readdir_reply copies it into the buffer,
        # and a listing can hold millions of entries (this loop is the per-entry cost of ls).
        attr = self._attr(0, stat.S_IFREG | 0o444, self._record_timeout)
        base = inodes.record_ino(pid, 0)
        decoded = is_coordinator_topic(self._log_by_pid(pid).topic)
        reply = pyfuse3.readdir_reply
        cookie_base = DOT_COOKIES + 1
        want = first  # cookie = offset + 3, so the next entry has offset >= first
        while True:
            run, pos = await self._records_at(handle, want)
            if pos >= len(run):
                if want == first and dots_sent and (
                        handle.damaged or self._log_by_pid(pid).damage is not None):
                    # every readable offset was listed (in earlier replies, which an error
                    # would discard here): now say that some could not be
                    raise _fail(errno.EIO)
                return
            inodes.record_ino(pid, run[-1].offset)  # OverflowError past the inode space
            self._served(pid, run[pos].offset)
            for i in range(pos, len(run)):
                record = run[i]
                offset = record.offset
                if decoded:
                    size = len(self._content(pid, record))
                else:
                    size = len(record.value) if record.value is not None else 0
                ns = record.timestamp * 1_000_000 if record.timestamp > 0 else 0
                attr.st_ino = base + inodes.SLOTS_PER_OFFSET * offset
                attr.st_size = size
                attr.st_blocks = (size + 511) >> 9
                attr.st_atime_ns = attr.st_mtime_ns = attr.st_ctime_ns = ns
                if not reply(token, b"%d" % offset, attr, offset + cookie_base):
                    return
            want = run[-1].offset + 1

    async def _records_at(self, handle: _DirHandle, want: int) -> tuple[list[Any], int]:
        """``(run, pos)``: ``run[pos:]`` are the next records with offset >= ``want``, from the
        handle's buffered run, or from a new run fetched in a worker thread when the buffer
        does not cover ``want``; ``pos == len(run)`` at the end of the log."""
        run = handle.records
        if run and handle.records_from <= want <= run[-1].offset:
            return run, bisect_left(run, want, key=_offset_of)
        plog = self._log_by_pid(handle.node.pid)
        found: list[Any] = []  # damage stepped over
        run = await trio.to_thread.run_sync(readable_run, plog, want, handle.run_limit,
                                            self._isolation, found)
        for damage in found:
            handle.damaged = True
            self._damage.note(handle.node.pid, plog.name, damage)
        handle.records, handle.records_from = run, want
        if run:
            # records_from decodes values: keep a run's value bytes near LIST_CHUNK_BYTES.
            avg = sum(len(r.value) for r in run if r.value is not None) // len(run)
            handle.run_limit = max(LIST_CHUNK_MIN, min(LIST_CHUNK_MAX, LIST_CHUNK_BYTES // max(avg, 1)))
        return run, 0

    @_fuse_errors
    async def releasedir(self, fh: int) -> None:
        self._handles.pop(fh, None)

    async def fsyncdir(self, fh: int, datasync: bool) -> None:
        return None

    def _dir_handle(self, fh: int) -> _DirHandle:
        handle = self._handles.get(fh)
        if not isinstance(handle, _DirHandle):
            raise _fail(errno.EBADF)
        return handle

    @_fuse_errors
    async def mkdir(
        self, parent_inode: int, name: bytes, mode: int, ctx: Any
    ) -> pyfuse3.EntryAttributes:
        """``mkdir /<topic>-<N>``: create a partition (Kafka's topic and partition name rules).
        EINVAL for an illegal name, EEXIST, EROFS on a read-only mount, EPERM below the root."""
        if self._read_only:
            raise _fail(errno.EROFS)
        below_root = self._view_path(parent_inode) is not None or \
            self._node(parent_inode).kind is not Kind.ROOT
        if below_root:
            raise _fail(errno.EPERM)
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            raise _fail(errno.EINVAL) from None
        try:
            await trio.to_thread.run_sync(self._mgr.create, text)
        except serr.InvalidConfigError as exc:  # EINVAL alone would not say which setting
            topic = text.rpartition("-")[0]
            log.warning("mkdir %s refused (EINVAL): %s: %s", text,
                        os.path.join(self._backing_dir, f"{topic}{TOPIC_PROPERTIES_SUFFIX}"), exc)
            raise _fail(errno.EINVAL) from None
        pid = self._ids.id_for(text)
        return self._fixed_attr(inodes.Node(Kind.PARTITION, pid))

    # ---- files

    @_fuse_errors
    async def open(self, inode: int, flags: int, ctx: Any) -> pyfuse3.FileInfo:
        """Record files open read-only (EACCES otherwise); append files open write-only
        (EACCES for reading, EROFS on a read-only mount)."""
        accmode = flags & os.O_ACCMODE
        view = self._view_path(inode)
        if view is not None:
            content = await self._coordinator.open(view, accmode, self._read_only)
            fh = next(self._next_fh)
            self._handles[fh] = _RecordHandle(content)
            # direct_io: the content follows the logs; no page cache to go stale
            return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=True)
        node = self._node(inode)
        if node.kind is not Kind.ROOT:
            await self._follow(node.pid)
        if node.kind is Kind.RECORD:
            if accmode != os.O_RDONLY:
                raise _fail(errno.EROFS if self._read_only else errno.EACCES)
            record = await self._record(node.pid, node.offset)
            fh = next(self._next_fh)
            self._handles[fh] = _RecordHandle(self._content(node.pid, record))
            # (read-only: a broker truncating its log may write another record at the offset)
            return pyfuse3.FileInfo(fh=fh, keep_cache=not self._read_only)
        if node.kind in inodes.STREAM_KINDS:
            if accmode != os.O_RDONLY:
                raise _fail(errno.EROFS if self._read_only else errno.EACCES)
            stream, start = self._stream_of(node)
            await self._streams.open(stream)
            fh = next(self._next_fh)
            self._handles[fh] = StreamHandle(stream, start)
            # direct_io: no page cache, so nothing stale after retention moves the log start
            return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=True)
        if node.kind in inodes.APPEND_KINDS:
            if accmode == os.O_RDONLY:  # nothing to read: an empty file, as /dev/null reads
                fh = next(self._next_fh)
                self._handles[fh] = _RecordHandle(b"")
                return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=True)
            if accmode != os.O_WRONLY:
                raise _fail(errno.EACCES)
            if self._read_only:
                raise _fail(errno.EROFS)
            plog = self._log_by_pid(node.pid)
            if plog.damage is not None:  # its end could not be read: appends wait for a repair
                raise _fail(errno.EIO)
            max_bytes = plog.config.max_message_bytes  # loaded with the log: no I/O
            keyed = node.kind is Kind.APPEND_KEYED
            # A line longer than this can never fit in a batch: refuse it before buffering more.
            max_line = max_bytes + (len(self._sep) if keyed else 0)
            if node.kind is Kind.APPEND_JSONL:  # JSON writes a byte in up to 6 (\u00XX)
                max_line = 6 * max_bytes + JSON_LINE_SLACK
            fh = next(self._next_fh)
            self._handles[fh] = _AppendHandle(plog, node.kind, max_line)
            # direct_io: writes reach us as the application wrote them, no page cache to go stale.
            # nonseekable: a write at an offset cannot mean anything, the kernel refuses it (ESPIPE).
            return pyfuse3.FileInfo(fh=fh, keep_cache=False, direct_io=True, nonseekable=True)
        raise _fail(errno.EISDIR if node.kind in inodes.DIR_KINDS else errno.EINVAL)

    @_fuse_errors
    async def read(self, fh: int, off: int, size: int) -> memoryview:
        handle = self._handles.get(fh)
        if isinstance(handle, StreamHandle):
            try:
                return await self._streams.read(handle, off, size)
            except (serr.CorruptRecordError, serr.InvalidRecordError) as exc:
                name = handle.stream.log.name  # the reader reached damaged bytes: EIO
                self._damage.note(self._ids.id_for(name), name, exc)
                raise
        if not isinstance(handle, _RecordHandle):
            raise _fail(errno.EBADF)
        return handle.value[off:off + size]

    @_fuse_errors
    async def write(self, fh: int, off: int, buf: bytes) -> int:
        """Append the complete lines of ``buf`` as records in one ``Log.append`` (all or
        nothing; ``off`` is ignored: O_APPEND semantics).  EFBIG for a line over
        max.message.bytes, EINVAL for a keyed line without separator or an ``append.jsonl``
        line that is not a record object (the reason logged), EROFS, ENOSPC/EIO.

        A failed write abandons the line it ends in (see ``LineFramer``): nothing of a line
        that touched a failed write is ever stored, and later writes continuing that line fail
        with the same errno, so no record is ever a piece of a line."""
        handle = self._append_handle(fh)
        async with handle.lock:
            framer = handle.framer
            try:
                lines = framer.feed(buf)
            except AbandonedLineError:
                if handle.kind is not Kind.APPEND_BATCHES:
                    handle.lines_seen += bytes(buf).count(b"\n")
                raise _fail(handle.abandon_errno) from None
            except ValueError:  # append-batches: a declared batch size that cannot be right
                handle.abandon_errno = errno.EINVAL
                raise _fail(errno.EINVAL) from None
            count = 0  # lines stored (the append counts them: no second pass over the bytes)
            try:
                if handle.kind is not Kind.APPEND_BATCHES and framer.pending_len > handle.max_line:
                    # Refuse early: this line can never fit a batch, and must not fill memory.
                    raise serr.RecordTooLargeError(f"line longer than {handle.max_line} bytes")
                if lines:
                    offsets = await self._store_soon(handle, lines)
                    count = len(offsets)
                    if count:
                        handle.stored(offsets.start, count)
            except Exception as exc:
                framer.abandon(buf)
                handle.abandon_errno = errno_for(exc)
                if handle.kind is not Kind.APPEND_BATCHES:
                    count = bytes(lines).count(b"\n")
                    detail = ""
                    if isinstance(exc, serr.KeySeparatorMissingError):  # (counted in the write)
                        detail = (f": line {handle.lines_seen + exc.line} has no key separator "
                                  f"{self._sep!r}")
                    log.warning("%s", handle.refusal(count, handle.abandon_errno, detail))
                raise _fail(handle.abandon_errno) from None
            finally:
                handle.lines_seen += count
        return len(buf)

    async def _store_soon(self, handle: _AppendHandle, lines) -> range:
        """Lines are appended on the trio thread when that only means writing into the page
        cache (a worker-thread hop costs more than the append of a 128 KiB write); when the
        append would wait (the log's lock, a roll, a flush) and for ``append-batches``, in a
        worker thread. Returns the offsets of the lines stored (empty for ``append-batches``,
        whose records are not lines)."""
        if handle.kind is not Kind.APPEND_BATCHES and handle.kind is not Kind.APPEND_JSONL:
            try:
                return handle.log.append_lines(lines, self._sep if handle.keyed else None,
                                               nowait=True)
            except BlockingIOError as exc:
                log.debug("%s: appending in a worker thread: %s", handle.log.name, exc)
        return await trio.to_thread.run_sync(self._store, handle, lines)

    def _store(self, handle: _AppendHandle, lines) -> range:
        """Runs in a worker thread: key splitting (append-keyed) and the append itself;
        ``append-batches`` appends whole producer batches as a broker does (offsets assigned,
        transactions tracked: ``Log.append_as_leader``); ``append.jsonl`` parses its lines
        (InvalidJsonLineError, naming the line counted from the open: none stored) and appends
        their keys, values, headers and timestamps (``Log.append``)."""
        if handle.kind is Kind.APPEND_JSONL:
            records = json_records(bytes(lines), handle.lines_seen + 1)
            first = handle.log.append(*records)
            return range(first, first + len(records.values))
        if handle.kind is Kind.APPEND_BATCHES:
            try:
                handle.log.append_as_leader(lines)
            except _PRODUCER_INPUT_ERRORS as exc:
                raise InvalidBatchesError(str(exc)) from exc
            return range(0)
        return handle.log.append_lines(lines, self._sep if handle.keyed else None)

    @_fuse_errors
    async def flush(self, fh: int) -> None:
        """Every close(): store the trailing partial line, if any (its error reaches close)."""
        handle = self._handles.get(fh)
        if not isinstance(handle, _AppendHandle):
            return
        async with handle.lock:
            if handle.kind is Kind.APPEND_BATCHES:
                try:
                    handle.framer.finish()
                except PartialBatchError as exc:
                    raise InvalidBatchesError(str(exc)) from None
                return
            tail = handle.framer.finish()
            if tail is not None:  # on failure the tail is dropped: never stored in pieces
                try:
                    handle.stored((await self._store_soon(handle, tail + b"\n")).start, 1)
                except Exception as exc:
                    code = errno_for(exc)
                    log.warning("%s", handle.refusal(1, code))
                    raise _fail(code) from None
                finally:
                    handle.lines_seen += 1

    @_fuse_errors
    async def fsync(self, fh: int, datasync: bool) -> None:
        """fsync(2) on an append file: every segment written since the last flush reaches the
        disk (``Log.flush``)."""
        handle = self._handles.get(fh)
        if isinstance(handle, _AppendHandle):
            await trio.to_thread.run_sync(handle.log.flush)

    @_fuse_errors
    async def release(self, fh: int) -> None:
        handle = self._handles.pop(fh, None)
        if isinstance(handle, _AppendHandle) and handle.framer.pending_len:
            # flush (run by every close) stores the tail, so this should not happen.
            log.warning("dropping %d bytes of an unstored partial line on release",
                        handle.framer.pending_len)

    def _append_handle(self, fh: int) -> _AppendHandle:
        handle = self._handles.get(fh)
        if not isinstance(handle, _AppendHandle):
            raise _fail(errno.EBADF)
        return handle

    def pending_partial_lines(self) -> int:
        """Bytes of partial lines held by still-open append files (at shutdown they are
        dropped, never stored half-written)."""
        handles = self._handles.values()
        return sum(h.framer.pending_len for h in handles if isinstance(h, _AppendHandle))

    # ---- extended attributes

    async def _xattrs(self, inode: int) -> dict[bytes, bytes]:
        view = self._view_path(inode)
        if view is not None:
            return await self._coordinator.xattrs(view)
        node = self._node(inode)
        if node.kind is not Kind.ROOT:
            await self._follow(node.pid)
        if node.kind is Kind.RECORD:
            record = await self._record(node.pid, node.offset)
            plog = self._log_by_pid(node.pid)
            attrs = record_xattrs(plog.topic, plog.partition, record)
            if is_coordinator_topic(plog.topic) and record.value is not None:
                attrs[b"user.kafka.value"] = bytes(record.value)  # the content is decoded
            return attrs
        if node.kind is Kind.PARTITION:
            plog = self._log_by_pid(node.pid)
            attrs = partition_xattrs(plog)
            damage = self._damage.xattr(node.pid, plog, not self._read_only)
            if damage is not None:
                attrs[DAMAGE_XATTR] = damage
            return attrs
        return {}

    @_fuse_errors
    async def getxattr(self, inode: int, name: bytes, ctx: Any = None) -> bytes:
        """A ``user.kafka.*`` (or ``user.kfs.damage``) attribute; ENOATTR when the node does
        not have it. Other names (``ls -l`` asks every file for ``security.*`` and
        ``system.posix_acl_*``) are answered without resolving the record."""
        if not name.startswith((XATTR_PREFIX, KFS_XATTR_PREFIX)):
            raise _fail(ENOATTR)
        if name == DAMAGE_XATTR:
            await self._check_damage(inode)
        value = (await self._xattrs(inode)).get(name)
        if value is None:
            raise _fail(ENOATTR)
        return value

    async def _check_damage(self, inode: int) -> None:
        """Before a partition's ``user.kfs.damage`` is told, check its batches not checked yet
        (``DamageNotes.unchecked_damage``): the attribute is there from the mount on, not
        once a read tripped over the damage. Listing the attributes (``getfattr -d``; ``ls -l``
        in newer coreutils) does not check, so a listing never reads whole partitions: it
        shows the attribute once the damage was found."""
        if self._view_path(inode) is not None:
            return
        node = self._node(inode)
        if node.kind is not Kind.PARTITION:
            return
        await self._follow(node.pid)
        plog = self._log_by_pid(node.pid)
        for damage in await trio.to_thread.run_sync(self._damage.unchecked_damage, plog):
            self._damage.note(node.pid, plog.name, damage)

    @_fuse_errors
    async def listxattr(self, inode: int, ctx: Any = None) -> list[bytes]:
        return list(await self._xattrs(inode))

    @_fuse_errors
    async def setxattr(self, inode: int, name: bytes, value: bytes, ctx: Any) -> None:
        raise _fail(errno.EROFS if self._read_only else errno.EPERM)

    @_fuse_errors
    async def removexattr(self, inode: int, name: bytes, ctx: Any) -> None:
        raise _fail(errno.EROFS if self._read_only else errno.EPERM)

    # ---- refused namespace changes (records are immutable, partitions are made by mkdir)

    async def _refuse(self, *args: Any) -> Any:
        raise _fail(errno.EROFS if self._read_only else errno.EPERM)

    create = mknod = symlink = link = unlink = rmdir = rename = _refuse

    # ---- file system

    @_fuse_errors
    async def statfs(self, ctx: Any = None) -> pyfuse3.StatvfsData:
        """The backing directory's file system figures (so ``df`` shows real space); an object
        store has none (zeros, as a read-only network file system shows)."""
        out = pyfuse3.StatvfsData()
        out.f_namemax = NAME_MAX
        if is_uri(self._backing_dir):
            out.f_bsize = out.f_frsize = 4096
            return out
        st = await trio.to_thread.run_sync(os.statvfs, self._backing_dir)
        out.f_bsize = st.f_bsize
        out.f_frsize = st.f_frsize
        out.f_blocks = st.f_blocks
        out.f_bfree = st.f_bfree
        out.f_bavail = st.f_bavail
        out.f_files = st.f_files
        out.f_ffree = st.f_ffree
        out.f_favail = st.f_favail
        return out
