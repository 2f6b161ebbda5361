"""The mount's stream files: ``/<topic>-<N>/values``, ``keyed-values`` and ``records.jsonl`` (the
whole partition, from its log start offset) and the same three under
``/<topic>-<N>/from/<start>/`` (a window from a start offset), served from
``kfs.mount.text_stream.LogStream``.

Sizes. ``tail -n``/``tail -f`` need a true, growing ``st_size``; ``ls -l`` must stay instant
however large the partition. A size is exact once the stream's position index covers the
log; the index follows a growing log by its new batches only. So a ``stat`` answers exactly
when at most ``STAT_INDEX_BYTES`` of log are still unindexed (always, after the first time),
and otherwise answers at once with the size indexed so far while the rest is indexed in the
background (about a second per GB of log) — the size ``ls -l`` shows of a large partition
right after mounting. ``open`` waits for the whole index, so every reader (``cat``, ``tail``,
``less``, ``wc -c``) sees the exact size from its open on.

Caching. The files are ``direct_io``: reads reach the mount at the application's own sizes
and the kernel keeps no pages of them, so no reader gets stale bytes after retention moves
the log start (the whole-partition stream then starts at the new log start, and shrinks from
the front). Attributes have timeout 0, so every ``stat`` (``tail -f`` polls ``fstat``) sees
the log as it is.
"""

from __future__ import annotations

import errno
import logging
import threading
from collections import OrderedDict

import pyfuse3
import trio

from kfs.record_format import StreamFormat
from storage import errors as serr
from storage.isolation import IsolationLevel
from storage.protocols import PartitionLog

from . import inodes
from .damage_notes import DamageNotes
from .inodes import Kind
from .node_attributes import NodeAttributes
from .partitions import Partitions
from .text_stream import ChunkSpan, LogStream, StreamCaches

log = logging.getLogger(__name__)

STREAMS_KEPT = 64  # streams (with their indexes and rendered chunks) kept for partitions
STAT_INDEX_BYTES = 16 << 20  # .log bytes a stat indexes before answering; more: background
# how long a read-ahead thread waits for its reader's next read before it ends (a sequential
# reader's next read comes within a millisecond or two; a thread started anew for it would
# start after that read)
READ_AHEAD_IDLE_S = 0.02


class StreamHandle:
    """An open stream file: the stream, the offset it starts at, what its byte positions
    are counted from (the first offset left at or after ``start`` and the stream's
    generation), and the chunk its latest read ended in (reads inside it are served from it
    and need nothing new rendered ahead)."""

    __slots__ = ("stream", "start", "origin", "span")

    def __init__(self, stream: LogStream, start: int) -> None:
        self.stream, self.start = stream, start
        self.origin = self.current_origin()
        self.span: ChunkSpan | None = None

    def current_origin(self) -> tuple[int, int]:
        return self.stream.start_offset(self.start), self.stream.generation


class Streams:
    """The stream files of ``partitions``: the mount's ``LogStream``s, one per partition and
    format (windows share them), at ``isolation``; what reading finds damaged goes to
    ``damage``."""

    def __init__(self, partitions: Partitions, attributes: NodeAttributes,
                 damage: DamageNotes, isolation: IsolationLevel,
                 key_separator: bytes = b"\t") -> None:
        self._partitions = partitions
        self._attributes = attributes
        self._damage = damage
        self._isolation = isolation
        self._key_separator = key_separator  # of keyed-values lines (the mount's --key-separator)
        # most recently used last; a stream keeps rendered chunks and its position index, so
        # memory follows the streams in use, not every partition ever read
        self._streams: OrderedDict[tuple[int, StreamFormat], LogStream] = OrderedDict()
        # the rendered chunks and .log buffers all its streams share, bounded in all
        self._caches = StreamCaches()
        self._indexing: set[LogStream] = set()
        # where each stream's latest read into another chunk ended (start offset, last byte
        # read), which its read-ahead thread follows; the streams with such a thread (one
        # each), and the event that wakes it, set by those reads
        self._read_to: dict[LogStream, tuple[int, int]] = {}
        self._moved: dict[LogStream, threading.Event] = {}
        self._index_lock = trio.Lock()

    def get(self, plog: PartitionLog, pid: int, kind: Kind) -> LogStream:
        """The stream of partition ``pid`` for a stream file of ``kind``."""
        key = (pid, inodes.STREAM_FORMATS[kind])
        stream = self._streams.get(key)
        if stream is None or stream.log is not plog:
            stream = self._streams[key] = LogStream(plog, key[1], self._isolation,
                                                    self._key_separator, self._caches)
            while len(self._streams) > STREAMS_KEPT:  # open handles keep theirs alive
                self._streams.popitem(last=False)
        self._streams.move_to_end(key)
        return stream

    def of(self, node: inodes.Node) -> tuple[LogStream, int]:
        """(stream, start offset) of a stream file's node."""
        plog = self._partitions.log(node.pid)
        stream = self.get(plog, node.pid, node.kind)
        return stream, plog.log_start_offset if node.offset is None else node.offset

    async def attr(self, node: inodes.Node) -> pyfuse3.EntryAttributes:
        """A stream file's attributes: its size (the stream's from its start, indexed so far)
        and the log's last change."""
        stream, start = self.of(node)
        ino = (inodes.fixed_ino(node.pid, node.kind) if node.offset is None
               else inodes.offset_ino(node.pid, node.kind, node.offset))
        return self._attributes.stream(ino, await self.size(stream, start),
                                       stream.log.segments.last_modified_ms() * 1_000_000)

    def window(self, pid: int, name: bytes) -> pyfuse3.EntryAttributes:
        """The attributes of ``from/<name>/``, the window starting where :meth:`resolve_start`
        says (its errnos)."""
        return self._attributes.window(pid, self.resolve_start(self._partitions.log(pid), name))

    @staticmethod
    def resolve_start(plog: PartitionLog, name: bytes) -> int:
        """The offset a ``from/<name>`` window starts at. EINVAL for a name that is not an
        offset, ``-N`` or a time; ENOENT for an offset outside [log start, log end], a time
        after the last record, or one before the first record of a log whose start moved up
        (retention or DeleteRecords removed what came before; each logged). A time before the
        first record of a log that never lost its head starts at that record, as ListOffsets
        answers."""
        start = inodes.parse_start_name(name)
        if start is None:
            log.info("%s: from/%r is not an offset, -N or a time", plog.name, name)
            raise pyfuse3.FUSEError(errno.EINVAL)
        low, high = plog.log_start_offset, plog.log_end_offset
        if start.kind == "last":
            return max(low, high - start.value)
        if start.kind == "offset":
            if not low <= start.value <= high:
                log.info("%s: from/%d is outside the log [%d, %d]", plog.name, start.value,
                         low, high)
                raise pyfuse3.FUSEError(errno.ENOENT)
            return start.value
        record = plog.reader.find_offset_by_timestamp(start.value)  # Kafka's ListOffsets
        if record is None:
            log.info("%s: no record at or after time %d", plog.name, start.value)
            raise pyfuse3.FUSEError(errno.ENOENT)
        if low > 0 and record.timestamp > start.value and _is_first(plog, record.offset):
            # Records of that time may have been deleted: the window would silently start later.
            log.info("%s: time %d is before the log start (offset %d, time %d)", plog.name,
                     start.value, low, record.timestamp)
            raise pyfuse3.FUSEError(errno.ENOENT)
        return record.offset

    async def size(self, stream: LogStream, start: int) -> int:
        """``st_size`` of the stream from ``start`` (see the module's note on sizes)."""
        if not stream.is_current():
            if stream.unindexed_bytes() <= STAT_INDEX_BYTES:
                await trio.to_thread.run_sync(stream.refresh)
            else:
                self._index_in_background(stream)
        return await trio.to_thread.run_sync(stream.size, start)

    def _index_in_background(self, stream: LogStream) -> None:
        if stream in self._indexing:
            return
        self._indexing.add(stream)

        async def index() -> None:
            try:
                async with self._index_lock:  # one at a time: the mount keeps a core to serve
                    await trio.to_thread.run_sync(stream.refresh)
            except Exception:  # noqa: BLE001 - reads report it; the mount goes on
                log.exception("indexing %s of %s failed", stream.format.value, stream.log.name)
            finally:
                self._indexing.discard(stream)

        trio.lowlevel.spawn_system_task(index)

    async def open(self, node: inodes.Node) -> StreamHandle:
        """A stream file opened for reading, its whole log indexed first (the reader's fstat
        sees the exact size)."""
        stream, start = self.of(node)
        await trio.to_thread.run_sync(stream.refresh)
        return StreamHandle(stream, start)

    async def read(self, handle: StreamHandle, offset: int, size: int) -> bytes | memoryview:
        """``size`` bytes at ``offset`` of an open stream file (:meth:`_read`); a read that
        reaches damaged bytes notes the damage (``user.kfs.damage``) and fails (EIO)."""
        try:
            return await self._read(handle, offset, size)
        except (serr.CorruptRecordError, serr.InvalidRecordError) as exc:
            plog = handle.stream.log
            await self._damage.note_read(self._partitions.ids.id_for(plog.name), plog, exc)
            raise

    async def _read(self, handle: StreamHandle, offset: int, size: int) -> bytes | memoryview:
        """``size`` bytes at ``offset`` of an open stream file (fewer at its end): on the trio
        thread when a rendered chunk holds them (a sequential reader's usual case; a
        worker-thread hop costs more), straight from the chunk the handle's latest read ended
        in when it holds them all, else in a worker thread. A read ending in another chunk
        has the chunks after it rendered in the background, so that a sequential reader
        finds them ready."""
        stream = handle.stream
        span = handle.span
        data = None if span is None else stream.read_within(span, offset, size)
        if data is not None:  # the usual case: the chunk the latest read ended in holds it
            self._check_positions(handle, offset)
            return data
        if stream.is_current():
            try:
                data = stream.read(handle.start, offset, size, nowait=True)
            except BlockingIOError:
                pass
        if data is None:
            def run() -> bytes | memoryview:
                if not stream.is_current():
                    stream.refresh()
                return stream.read(handle.start, offset, size)

            data = await trio.to_thread.run_sync(run)
        self._check_positions(handle, offset)
        last = offset + len(data) - 1  # the next read starts in its chunk or the one after
        # a reader asking less than a chunk at a time (jq: 8 KiB) reads on in the same chunk
        # hundreds of times: only a read into another chunk looks at what to render ahead
        if data and not (span is not None and span.first <= last < span.end):
            handle.span = stream.chunk_span(handle.start, last)
            self._read_to[stream] = (handle.start, last)
            if stream in self._moved:
                self._moved[stream].set()
            elif stream.wants_read_ahead(handle.start, last):
                self._read_ahead(stream)
        return data

    @staticmethod
    def _check_positions(handle: StreamHandle, offset: int) -> None:
        """EIO for a read inside the stream after text went from under the reader (retention
        moved the log start, the cleaner removed records): its position no longer names the
        bytes it was reading, and serving the new ones there would splice lines. A read from
        byte 0 starts over (``tail -f`` after the truncation it saw in ``st_size``)."""
        origin = handle.current_origin()
        if origin == handle.origin:
            return
        handle.span = None
        if offset:
            stream = handle.stream
            log.warning("%s: %s read at byte %d after records under it were removed; EIO "
                        "(read it again from the start)", stream.log.name, stream.format.value,
                        offset)
            raise pyfuse3.FUSEError(errno.EIO)
        handle.origin = origin

    def _read_ahead(self, stream: LogStream) -> None:
        """Render ahead of ``stream``'s reader (READ_AHEAD_CHUNKS) in a thread that follows
        its reads until none came for READ_AHEAD_IDLE_S (a thread started per read starts
        after the reply, when the next read is already there)."""
        moved = self._moved[stream] = threading.Event()

        def follow() -> None:
            while not stream.closed:
                moved.clear()
                start, last = self._read_to[stream]  # (set by reads on the event loop)
                if stream.wants_read_ahead(start, last):
                    stream.read_ahead(start, last)
                # one pass per read: chunks that other streams' renders evict from the shared
                # budget (RENDERED_BYTES_KEPT) are not rendered again until the reader moves
                if not moved.wait(READ_AHEAD_IDLE_S):
                    return

        async def render() -> None:
            try:
                await trio.to_thread.run_sync(follow)
            except Exception:  # noqa: BLE001 - the read of that chunk reports it
                log.debug("read-ahead of %s failed", stream.log.name, exc_info=True)
            finally:
                del self._read_to[stream], self._moved[stream]  # (a later read sets them)

        trio.lowlevel.spawn_system_task(render)

    def close(self) -> None:
        """Stop background indexing (at unmount, before the logs close)."""
        for stream in {*self._streams.values(), *self._indexing, *self._moved}:
            stream.close()


def _is_first(plog: PartitionLog, offset: int) -> bool:
    """Whether ``offset`` holds the first record left in ``plog``."""
    first = plog.reader.records_from(plog.log_start_offset, 1)
    return bool(first) and first[0].offset == offset
