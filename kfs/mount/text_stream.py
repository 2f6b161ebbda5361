"""The mount's text streams: a partition's records as one byte stream, read at any byte
position: every record's value and ``\\n`` (``values``, as ``kafka-console-consumer
--from-beginning`` prints them), ``key<SEP>value`` lines (``keyed-values``) or one kcat ``-J``
JSON object and ``\\n`` per record (``records.jsonl``), from a start offset to the end of the
log, produced from the segments on demand (nothing is stored twice).

Byte positions map to records through a sparse position index per segment, as Kafka's offset
index maps offsets to file positions: the segment is cut into chunks of about
``CHUNK_LOG_BYTES`` of whole batches, and for each chunk the index keeps where it ends in the
``.log``, where its text ends in the stream and the base offset of its first batch (24 bytes
per chunk: about 6 KiB per GiB of log). The index is built lazily, a segment the first time
a read or a size needs it; a rolled segment's text never changes, so its entries are built
once; the active segment's are extended from where they stopped, so following a growing log
costs the new batches only. A read renders the one chunk it falls in (a few recent chunks are
kept rendered: RENDERED_CHUNKS_KEPT a stream, RENDERED_BYTES_KEPT of all the streams of a mount
together (their :class:`StreamCaches`), so that what a mount holds does not grow with the
partitions read); :meth:`LogStream.read_ahead`
renders the next READ_AHEAD_CHUNKS while a sequential reader is still on this one. A chunk
spans several of a reader's requests (``cat`` asks a MiB at a time, the files' st_blksize),
so per-chunk work (rendering's set-up, read-ahead's wake-ups, joining the two chunks a read
crosses) is paid every few reads, not on each.

How each record looks is ``kfs.record_format``'s: a chunk's records are decoded by the log's
reader (``LogReader.decode_range``, the decode Spark's columns go through too) into the
format's compiled column builder, which renders a plain partition's text; Kafka's coordinator
topics' (``__consumer_offsets``, ``__transaction_state``) records are then decoded through
their message schemas.

Control records are never in the stream; with read_committed neither are aborted
transactions' records nor anything at or past the last stable offset (the reader's decode
leaves them out). Every byte and every damage comes from the log's reader
(``storage.log_reader``: decoded ranges of whole batches, the intact run and the damage after
it); the stream keeps only text positions. When retention removes segments their entries go;
a stream starting below the new log start offset starts at it.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

from storage.clock import SYSTEM_CLOCK
from storage.config import LogConfig
from storage.damage import LogDamage
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.isolation import IsolationLevel
from storage.records.columns import RecordColumns
from storage.segment import LogSegment

from kfs.record_format import StreamFormat, record_format

CHUNK_LOG_BYTES = 4 << 20  # .log bytes per index entry (and per rendered chunk)
RENDERED_CHUNKS_KEPT = 4  # per stream
# chunks a sequential reader finds rendered ahead of the one it is in (at most
# RENDERED_CHUNKS_KEPT - 1: the one it is in stays)
READ_AHEAD_CHUNKS = 2
# rendered text (and its row ends and offsets) kept, all the streams of one StreamCaches (a
# mount's) together: what a mount holds does not grow with the streams read (it keeps 64)
RENDERED_BYTES_KEPT = 16 << 20
BLOCK_BUFFERS_KEPT = 2  # reused .log read buffers, of a StreamCaches' streams (one per thread)
# their size: a chunk is CHUNK_LOG_BYTES and the rest of the batch crossing its end (a batch of
# up to the default max.message.bytes fits; a chunk that does not gets a buffer of its own)
POOLED_BUFFER_BYTES = CHUNK_LOG_BYTES + LogConfig.max_message_bytes
STARTS_KEPT = 256  # window starts remembered (each a segment and a text position)


@dataclass
class _SegmentIndex:
    """The chunks of one segment indexed so far: chunk i is the .log bytes
    [file_ends[i-1] (0 for the first), file_ends[i]), its text ends at stream_ends[i] in the
    segment's text, its first batch has base offset first_offsets[i]."""

    file_ends: array = field(default_factory=lambda: array("q"))
    stream_ends: array = field(default_factory=lambda: array("q"))
    first_offsets: array = field(default_factory=lambda: array("q"))
    complete: bool = False  # rolled and indexed to its end: never changes again
    # chunks of bytes that are not intact batches (no text): {chunk: (damage, the offset
    # after the records lost there)}
    damaged: dict[int, tuple[LogDamage, int]] = field(default_factory=dict)

    @property
    def file_position(self) -> int:
        return self.file_ends[-1] if self.file_ends else 0

    @property
    def text_size(self) -> int:
        return self.stream_ends[-1] if self.stream_ends else 0

    def chunk_start(self, i: int) -> tuple[int, int]:
        """(.log position, text position) where chunk ``i`` starts."""
        return (self.file_ends[i - 1], self.stream_ends[i - 1]) if i else (0, 0)

    def drop_short_last(self, log_bytes: int) -> None:
        """Forget the last chunk when it covers fewer than ``log_bytes`` of .log (it is then
        redone with the batches that follow it, so a followed log keeps few entries)."""
        if self.file_ends and \
                self.file_ends[-1] - self.chunk_start(len(self.file_ends) - 1)[0] < log_bytes:
            for column in (self.file_ends, self.stream_ends, self.first_offsets):
                column.pop()
            self.damaged.pop(len(self.file_ends), None)


@dataclass(frozen=True)
class ChunkSpan:
    """The byte positions [first, end) a chunk holds in a stream from some start offset, and
    what :meth:`LogStream.read_within` checks that they still hold by."""

    first: int
    end: int
    layout: tuple  # the index's layout they were found in (see LogStream._layout)
    key: tuple  # the chunk's (segment, .log start, .log stop)


@dataclass
class _Chunk:
    text: memoryview
    row_ends: Sequence[int]  # end of each record's text in ``text``
    offsets: Sequence[int]  # offset of each record


class RenderedChunks:
    """The rendered chunks of the streams sharing it (a mount's stream table's): least recently
    used out past RENDERED_BYTES_KEPT in all (the newest always stays) or RENDERED_CHUNKS_KEPT
    of one stream. Keys are (stream number, segment, .log start, .log stop). Takes no stream's lock
    (streams call it with theirs held)."""

    def __init__(self) -> None:
        self._chunks: OrderedDict[tuple, tuple[_Chunk, int]] = OrderedDict()
        self._per_stream: dict[int, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: tuple) -> _Chunk | None:
        with self._lock:
            entry = self._chunks.get(key)
            if entry is None:
                return None
            self._chunks.move_to_end(key)
            return entry[0]

    def __contains__(self, key: tuple) -> bool:
        return key in self._chunks

    def put(self, key: tuple, chunk: _Chunk) -> None:
        cost = sum(memoryview(part).nbytes for part in (chunk.text, chunk.row_ends,
                                                          chunk.offsets))
        stream = key[0]
        with self._lock:
            self._pop(key)
            self._chunks[key] = (chunk, cost)
            self._bytes += cost
            self._per_stream[stream] = self._per_stream.get(stream, 0) + 1
            if self._per_stream[stream] > RENDERED_CHUNKS_KEPT:  # its least recently used
                self._pop(next(k for k in self._chunks if k[0] == stream))
            while len(self._chunks) > 1 and self._bytes > RENDERED_BYTES_KEPT:
                self._pop(next(iter(self._chunks)))

    def _pop(self, key: tuple) -> None:
        entry = self._chunks.pop(key, None)
        if entry is not None:
            self._bytes -= entry[1]
            left = self._per_stream.pop(key[0]) - 1
            if left:
                self._per_stream[key[0]] = left


_STREAM_NUMBERS = itertools.count()  # (a stream's part of its rendered chunks' keys)


class BlockBuffers:
    """Buffers of POOLED_BUFFER_BYTES that streams read .log blocks into to render them,
    reused: BLOCK_BUFFERS_KEPT kept however many threads render (fresh pages cost more than
    the copy)."""

    def __init__(self) -> None:
        self._free: list[bytearray] = []
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def lend(self):
        """A buffer for the span of a ``with``."""
        with self._lock:
            buffer = self._free.pop() if self._free else bytearray(POOLED_BUFFER_BYTES)
        try:
            yield buffer
        finally:
            with self._lock:
                if len(self._free) < BLOCK_BUFFERS_KEPT:
                    self._free.append(buffer)


class StreamCaches:
    """What the streams of one owner (a mount's stream table, ``kfs.mount.streams``) share,
    bounded however many streams there are: their rendered chunks and the buffers they
    render from."""

    def __init__(self) -> None:
        self.rendered = RenderedChunks()
        self.buffers = BlockBuffers()


class LogStream:
    """The records of one ``storage.Log`` in one :class:`StreamFormat`, as a reader at
    ``isolation`` (Kafka's ``isolation.level``) sees them. Thread-safe: sizes and reads may come from several threads
    while the log is appended to.

    Positions are bytes of the stream from a start offset (see :meth:`size`, :meth:`read`).
    ``caches``: the rendered chunks and buffers it shares with other streams (a
    :class:`StreamCaches` of the mount's stream table; None: its own). Raises what the log's
    reads raise: CorruptRecordError / InvalidRecordError for bad batches, OSError from the
    disk."""

    def __init__(self, log, fmt: StreamFormat,
                 isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                 key_separator: bytes = b"\t", caches: StreamCaches | None = None):
        self.log, self.format, self.isolation = log, fmt, isolation
        self._reader = log.reader
        self.key_separator = bytes(key_separator)  # between key and value in KEYED lines
        # how each record looks: a plain partition's or a coordinator topic's
        self._format = record_format(log.topic, log.partition, fmt, key_separator)
        self._indexes: dict[LogSegment, _SegmentIndex] = {}
        caches = StreamCaches() if caches is None else caches
        # (shared by streams: keys start with the stream's number, not the stream, which a
        # cache of its own would then hold in a cycle)
        self._id = next(_STREAM_NUMBERS)
        self._rendered = caches.rendered
        self._buffers = caches.buffers
        self._rendering: dict[tuple, threading.Event] = {}  # chunks being rendered
        self._starts: dict[tuple[LogSegment, int], int] = {}
        self._layout_cache: tuple | None = None  # see _layout; None after the index changed
        self._indexed_end = -1  # the visible end offset the index reached
        self._segment_version = -1  # the log's segment_version the index was built over
        # +1 each time text the stream had went away (retention moved the log start, the
        # cleaner removed records, recovery cut a tail): byte positions read before then no
        # longer name the same bytes
        self.generation = 0
        self._lock = threading.Lock()  # the index and the rendered chunks
        self._build_lock = threading.Lock()  # one builder at a time
        self.closed = False

    # -- the index --------------------------------------------------------------------------

    def _visible_end(self) -> int:
        return self._reader.visible_end(self.isolation)

    def is_current(self) -> bool:
        """Whether the index reaches the log's visible end over the log's current segments (the
        cleaner swaps segments in without moving the end; sizes need no I/O)."""
        return self._indexed_end == self._visible_end() and \
            self._segment_version == self.log.segments.version

    def unindexed_bytes(self) -> int:
        """.log bytes the index does not cover yet (no I/O): what a :meth:`refresh` reads."""
        with self._lock:
            return sum(s.size - self._indexes[s].file_position if s in self._indexes else s.size
                       for s in self.log.segments.all())

    def refresh(self) -> None:
        """Index every segment up to the log's visible end (the new batches only, for segments
        indexed before). Stops early, leaving the rest for later, once :attr:`closed`.

        Retention, the cleaner or a truncation may replace the segments while they are read
        (a deleted segment's file is closed at once with ``file.delete.delay.ms`` 0): an error
        reading a segment once the log's segments changed starts the index over from the log
        as it is then; the same error with the segments unchanged is raised."""
        while True:
            version = self.log.segments.version
            try:
                return self._refresh()
            except (OSError, ValueError):
                if self.log.segments.version == version:
                    raise

    def _refresh(self) -> None:
        with self._build_lock:
            version, end = self.log.segments.version, self._visible_end()
            segments = self.log.segments.all()
            with self._lock:
                # a segment cut back below what was indexed (a rolled-back append) starts over
                present = set(segments)
                kept = {s: i for s, i in self._indexes.items() if s in present and
                        i.file_position <= s.size}
                if len(kept) < len(self._indexes):
                    self.generation += 1  # text went from the front or the middle
                self._indexes = {s: kept.get(s) or _SegmentIndex() for s in segments}
                self._starts = {k: v for k, v in self._starts.items() if k[0] in self._indexes}
                self._layout_cache = None
            for i, segment in enumerate(segments):
                index = self._indexes[segment]
                if not index.complete and not self._extend(segment, index, end):
                    return
                if i + 1 < len(segments) and index.file_position >= segment.size:
                    index.complete = True  # rolled: its text is final
            self._indexed_end, self._segment_version = end, version

    def _extend(self, segment: LogSegment, index: _SegmentIndex, end: int) -> bool:
        """Index ``segment`` from where its index stopped up to ``end``; a short last chunk is
        redone with what follows it, so chunks stay near CHUNK_LOG_BYTES. False if closed."""
        if index.file_position < segment.size:
            with self._lock:
                index.drop_short_last(CHUNK_LOG_BYTES)
                self._layout_cache = None
        while index.file_position < segment.size:
            if self.closed:
                return False
            start, text_start = index.file_position, index.text_size
            SYSTEM_CLOCK.sleep(0)  # let other threads have the GIL between chunks (an event loop)
            try:
                chunk, consumed, first = self._decode(segment, start, CHUNK_LOG_BYTES, end)
            except (CorruptRecordError, InvalidRecordError) as exc:
                self._index_damage(segment, index, start, end, exc)
                continue
            if not consumed:
                break
            with self._lock:
                index.file_ends.append(start + consumed)
                index.stream_ends.append(text_start + len(chunk.text))
                index.first_offsets.append(first)
                self._layout_cache = None
                self._keep(segment, start, start + consumed, chunk)
        return True

    def _index_damage(self, segment: LogSegment, index: _SegmentIndex, start: int, end: int,
                      exc: Exception) -> None:
        """A chunk from ``start`` has bytes that are not intact batches: index the intact
        batches before them as a chunk, then the damaged bytes, up to the next intact batch
        (or the segment's end), as a chunk without text that readers crossing it get EIO
        from (see :meth:`read`)."""
        bad, problem = self._reader.intact_end(segment, start)
        if bad > start:  # the intact batches first, as a chunk of their own
            chunk, consumed, first = self._decode(segment, start, bad - start, end)
            with self._lock:
                index.file_ends.append(start + consumed)
                index.stream_ends.append(index.text_size + len(chunk.text))
                index.first_offsets.append(first)
                self._layout_cache = None
            return
        low = index.first_offsets[-1] if index.first_offsets else segment.base_offset
        damage, stop, after = self._reader.damaged_run(segment, bad, low, problem or str(exc))
        with self._lock:
            index.damaged[len(index.file_ends)] = (damage, 2**63 - 1 if after is None else after)
            index.file_ends.append(stop)
            index.stream_ends.append(index.text_size)
            index.first_offsets.append(damage.offset)
            self._layout_cache = None

    def _decode(self, segment: LogSegment, position: int, size: int, end: int
                ) -> tuple[_Chunk, int, int]:
        """Render the whole batches in ``size`` .log bytes from ``position`` (at least one
        batch, and none at or past offset ``end``), decoded by the log's reader
        (``LogReader.decode_range``) into the format's builder: (chunk, bytes consumed, base
        offset of the first batch, or -1 when none)."""
        builder = self._format.builder()
        sink = RecordColumns(builder=builder)
        pos, first = 0, -1
        with self._buffer(segment, position, size) as buffer:
            for first, consumed in self._reader.decode_range(
                    sink, 0, end, self.isolation, segment=segment, position=position,
                    stop=position + size, buffer=buffer):
                pos += consumed
        first = first if pos else -1
        text, row_ends, offsets = self._format.render(builder)
        return _Chunk(memoryview(text), memoryview(row_ends).cast("q"),
                      memoryview(offsets).cast("q")), pos, first

    @contextlib.contextmanager
    def _buffer(self, segment: LogSegment, position: int, size: int):
        """A buffer for ``size`` .log bytes from ``position`` (fewer at the segment's end) for
        the span of a ``with``: a pooled one when they fit (fresh pages cost more than the
        copy; the pool keeps BLOCK_BUFFERS_KEPT however many threads render)."""
        size = max(min(size, segment.size - position), 0)
        if size > POOLED_BUFFER_BYTES:
            yield bytearray(size)
            return
        with self._buffers.lend() as buffer:
            yield memoryview(buffer)[:size]

    def _keep(self, segment: LogSegment, start: int, stop: int, chunk: _Chunk) -> None:
        self._rendered.put((self._id, segment, start, stop), chunk)

    def _chunk(self, segment: LogSegment, index: _SegmentIndex, i: int,
               nowait: bool = False) -> _Chunk:
        key = _chunk_key((segment, index, i))
        while True:
            with self._lock:
                chunk = self._rendered.get((self._id, *key))
                if chunk is not None:
                    return chunk
                if nowait:
                    raise BlockingIOError(f"chunk {i} of segment {segment.base_offset} "
                                          "is not rendered")
                rendering = self._rendering.get(key)
                if rendering is None:
                    rendering = self._rendering[key] = threading.Event()
                    break
            rendering.wait()  # a read-ahead renders it: one rendering per chunk
        try:
            chunk = self._decode(segment, key[1], key[2] - key[1], self._indexed_end)[0]
            with self._lock:
                self._keep(*key, chunk)
            return chunk
        finally:
            with self._lock:
                del self._rendering[key]
            rendering.set()

    def wants_read_ahead(self, offset: int, position: int) -> bool:
        """Whether one of the chunks after the one holding byte ``position`` of the stream from
        ``offset`` (see :meth:`read_ahead`) is indexed but neither rendered nor being rendered
        (no I/O: for event loops, before handing :meth:`read_ahead` to a thread)."""
        keys = [_chunk_key(after) for after in self._after(offset, position)]
        with self._lock:
            return any((self._id, *key) not in self._rendered and key not in self._rendering
                       for key in keys)

    def read_ahead(self, offset: int, position: int) -> None:
        """Render the READ_AHEAD_CHUNKS chunks after the one holding byte ``position`` of the
        stream from ``offset`` (fewer when RENDERED_CHUNKS_KEPT is smaller), in order, so that
        a sequential reader finds them ready (the page cache's read-ahead, for a stream the
        page cache does not hold)."""
        for after in self._after(offset, position):
            self._chunk(*after)

    def _text_position(self, offset: int, position: int) -> tuple[tuple, int] | None:
        """(the index's layout, text position of all segments) of byte ``position`` of the
        stream from ``offset``; None when the start's position needs rendering (no I/O)."""
        layout = self._layout()
        try:
            return layout, self._start(self.start_offset(offset), layout, nowait=True) + position
        except BlockingIOError:
            return None

    def chunk_span(self, offset: int, position: int) -> ChunkSpan | None:
        """The chunk holding byte ``position`` of the stream from ``offset``, as a
        :class:`ChunkSpan` for :meth:`read_within`; None when that needs rendering (no I/O)."""
        found = self._text_position(offset, position)
        if found is None:
            return None
        layout, here = found
        at = self._locate(layout, here)
        if at is None:
            return None
        segment, index, i, inside = at
        first = position - inside
        return ChunkSpan(first, first + index.stream_ends[i] - index.chunk_start(i)[1], layout,
                         _chunk_key((segment, index, i)))

    def read_within(self, span: ChunkSpan, position: int, size: int) -> memoryview | None:
        """The ``size`` bytes at ``position`` of the stream ``span`` came from (see
        :meth:`chunk_span`) when they lie after the first byte of its chunk and within it,
        and that chunk is rendered and has the same positions still (the index unchanged and
        current); else None. No I/O, no waiting, no lock but the rendered chunks': what a
        reader asking less than a chunk at a time reads through (a read starting at a chunk's
        first byte, where damage may come first, goes through :meth:`read`)."""
        if not (span.first < position and position + size <= span.end):
            return None
        if span.layout is not self._layout_cache or not self.is_current():
            return None
        chunk = self._rendered.get((self._id, *span.key))
        if chunk is None:
            return None
        inside = position - span.first
        return chunk.text[inside:inside + size]

    def _after(self, offset: int, position: int) -> list[tuple[LogSegment, _SegmentIndex, int]]:
        """The chunks with text after the one holding ``position``, READ_AHEAD_CHUNKS at most
        (none at the indexed end, or when the start's position needs rendering)."""
        found = self._text_position(offset, position)
        if found is None:
            return []
        layout, here = found
        out = []
        at = self._locate(layout, here)
        while at is not None and len(out) < min(READ_AHEAD_CHUNKS, RENDERED_CHUNKS_KEPT - 1):
            _, index, i, inside = at
            here += index.stream_ends[i] - index.chunk_start(i)[1] - inside  # the next chunk
            at = self._locate(layout, here)
            if at is not None:
                out.append(at[:3])
        return out

    # -- positions --------------------------------------------------------------------------

    def _layout(self) -> tuple[list[tuple[LogSegment, _SegmentIndex]], list[int], list[int]]:
        """(the indexed segments and their indexes, their base offsets, where each one's text
        ends in the text of them all): built once per change of the index, not per read."""
        with self._lock:
            if self._layout_cache is None:
                indexed = [(s, i) for s, i in self._indexes.items() if i.file_ends]
                ends = list(itertools.accumulate(i.text_size for _, i in indexed))
                # (text position, damage, offset after it) of every damaged chunk
                damage = [((ends[k - 1] if k else 0) + index.chunk_start(i)[1], *found)
                          for k, (_, index) in enumerate(indexed)
                          for i, found in sorted(index.damaged.items())]
                self._layout_cache = (indexed, [s.base_offset for s, _ in indexed], ends,
                                      damage)
            return self._layout_cache

    def _start(self, offset: int, layout, nowait: bool = False) -> int:
        """Where the record at or after ``offset`` starts in the text of all segments."""
        indexed, bases, ends, _ = layout
        if not indexed:
            return 0
        k = max(bisect.bisect_right(bases, offset) - 1, 0)
        return (ends[k - 1] if k else 0) + self._position_in(*indexed[k], offset, nowait)

    def _position_in(self, segment: LogSegment, index: _SegmentIndex, offset: int,
                     nowait: bool = False) -> int:
        """Where the text of the first record at or after ``offset`` starts in the segment's
        text (its size when there is none): remembered, as windows are read many times."""
        key = (segment, offset)
        at = self._starts.get(key)
        if at is None:
            i = bisect.bisect_right(index.first_offsets, offset) - 1
            if i < 0 or offset <= index.first_offsets[i] or i in index.damaged:
                at = index.chunk_start(max(i, 0))[1]  # at a chunk's start: nothing to render
            else:
                chunk = self._chunk(segment, index, i, nowait)
                row = bisect.bisect_left(chunk.offsets, offset)
                at = index.chunk_start(i)[1] + (chunk.row_ends[row - 1] if row else 0)
            with self._lock:
                if len(self._starts) >= STARTS_KEPT:
                    self._starts.pop(next(iter(self._starts)))
                self._starts[key] = at
        return at

    def start_offset(self, offset: int) -> int:
        """Where a stream asked to start at ``offset`` starts: at the log start offset when
        ``offset`` is below it (retention removed those records)."""
        return max(offset, self.log.log_start_offset)

    def size(self, offset: int) -> int:
        """Bytes of the stream from ``offset`` (see :meth:`start_offset`) over what is indexed
        (call :meth:`refresh` first for the whole log)."""
        layout = self._layout()
        return layout[2][-1] - self._start(self.start_offset(offset), layout) if layout[0] else 0

    def read(self, offset: int, position: int, size: int, nowait: bool = False
             ) -> bytes | memoryview:
        """Up to ``size`` bytes of the stream from ``offset``, at byte ``position`` (short at
        the indexed end; empty past it): a view of the rendered chunk when one holds them.
        ``nowait=True`` (for event loops) raises BlockingIOError instead of rendering a chunk
        (reading the disk). A segment replaced while it is rendered (see :meth:`refresh`):
        the stream is indexed anew and read again."""
        while True:
            version = self.log.segments.version
            try:
                return self._read(offset, position, size, nowait)
            except (OSError, ValueError) as exc:
                if isinstance(exc, BlockingIOError) or self.log.segments.version == version:
                    raise
            self.refresh()

    def _read(self, offset: int, position: int, size: int, nowait: bool
              ) -> bytes | memoryview:
        layout = self._layout()
        start = self.start_offset(offset)
        here = self._start(start, layout, nowait) + position
        out = []
        while size > 0:
            damage = _crossed(layout[3], here, start)
            if damage is not None:  # the reader reached bytes that are not intact batches
                if out:
                    break
                raise CorruptRecordError(str(damage))
            at = self._locate(layout, here)
            if at is None:
                break
            segment, index, i, inside = at
            piece = self._chunk(segment, index, i, nowait).text[inside:inside + size]
            out.append(piece)
            size -= len(piece)
            here += len(piece)
        return out[0] if len(out) == 1 else b"".join(out)

    @staticmethod
    def _locate(layout, here: int) -> tuple[LogSegment, _SegmentIndex, int, int] | None:
        """(segment, its index, chunk, byte within the chunk's text) of text position
        ``here`` of all segments; None at or past the indexed end."""
        indexed, _, ends, _ = layout
        k = bisect.bisect_right(ends, here)
        if k >= len(indexed):
            return None
        segment, index = indexed[k]
        local = here - (ends[k - 1] if k else 0)
        i = bisect.bisect_right(index.stream_ends, local)
        return segment, index, i, local - index.chunk_start(i)[1]

    def close(self) -> None:
        """Stop any :meth:`refresh` in progress (it returns at its next chunk)."""
        self.closed = True


def _chunk_key(at: tuple[LogSegment, _SegmentIndex, int]) -> tuple[LogSegment, int, int]:
    """(segment, .log start, .log stop) of chunk ``i`` of a segment, from (segment, index, i)."""
    segment, index, i = at
    return segment, index.chunk_start(i)[0], index.file_ends[i]


def _crossed(damage: list, here: int, start: int) -> LogDamage | None:
    """The damage a reader of the stream from offset ``start`` meets at text position
    ``here``: a damaged chunk there whose lost records are not all before ``start`` (a window
    starting after them reads on)."""
    for position, found, after in damage:
        if position == here and start < after:
            return found
    return None
