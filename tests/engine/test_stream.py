"""``kfs.mount.text_stream.LogStream``: a partition as one byte stream, checked against the text
rendered record by record from ``Log.record_lists`` (the record path), on logs of many
segments and chunks, with transactions, as the log grows and as retention removes segments,
and on the Kafka-written fixtures."""

import json
import random

import pytest

from helpers.paths import KAFKA_WRITTEN
from helpers.records import json_bytes
from storage import LogConfig, LogManager
from storage.clock import now_ms
from storage.isolation import IsolationLevel
from storage.log import Log
from storage.records import build_batch
from storage.records.control import ControlRecordType, build_control_batch
from storage.records.record import TimestampType
from kfs.mount.text_stream import LogStream
from kfs.record_format import StreamFormat


def naive(log, fmt: StreamFormat, start: int, isolation: IsolationLevel) -> bytes:
    out = []
    for records in log.reader.record_lists(start, isolation=isolation, cache=False):
        for r in records:
            if fmt is StreamFormat.VALUES:
                out.append((b"null" if r.value is None else bytes(r.value)) + b"\n")
                continue
            if fmt is StreamFormat.KEYED:  # console-consumer's print.key=true
                out.append(b"\t".join(b"null" if b is None else bytes(b) for b in (r.key, r.value))
                           + b"\n")
                continue
            obj = {"topic": log.topic, "partition": log.partition, "offset": r.offset}
            if r.timestamp_type in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
                obj["tstype"] = "create" if r.timestamp_type == TimestampType.CREATE_TIME \
                    else "logappend"
                obj["ts"] = r.timestamp
            obj["headers"] = [x for k, v in r.headers for x in (k, json_bytes(v))]
            obj["key"], obj["payload"] = json_bytes(r.key), json_bytes(r.value)
            out.append(json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
                       .encode("utf-8", "surrogatepass") + b"\n")
    return b"".join(out)


def check(log, stream: LogStream, starts, rng: random.Random) -> None:
    stream.refresh()
    assert stream.is_current()
    for start in starts:
        want = naive(log, stream.format, max(start, log.log_start_offset),
                     stream.isolation)
        assert stream.size(start) == len(want), start
        assert stream.read(start, 0, len(want) + 10) == want
        for _ in range(20):  # reads at any position, of any size (as cat, tail and less make)
            pos, size = rng.randrange(len(want) + 2), rng.choice([1, 17, 4096, 131072])
            assert stream.read(start, pos, size) == want[pos:pos + size], (start, pos, size)


def txn_log(path, **config) -> Log:
    path.mkdir()
    log = Log(path, "t", 0, LogConfig(**config))
    for i in range(60):
        log.append_as_leader(build_batch(0, [b"plain-%d-%d" % (i, j) if j % 5 else None
                                             for j in range(9)], [b"k\x00\xff"] * 9))
        log.append_as_leader(build_batch(0, [b"txn-%d" % i, b'"q\\\n'], producer_id=100 + i,
                                         producer_epoch=0, base_sequence=0,
                                         is_transactional=True,
                                         headers=[[("h", b"v")], [("\u00e9", None)]]))
        marker = ControlRecordType.ABORT if i % 3 else ControlRecordType.COMMIT
        log.append_as_leader(build_control_batch(0, 100 + i, 0, marker, timestamp_ms=now_ms()))
    return log


@pytest.mark.parametrize("fmt", list(StreamFormat))
@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_stream_is_the_records_rendered_one_by_one(tmp_path, monkeypatch, fmt, isolation):
    monkeypatch.setattr("kfs.mount.text_stream.CHUNK_LOG_BYTES", 700)  # many chunks per segment
    log = txn_log(tmp_path / "t-0", segment_bytes=4096)
    assert len(log.segments) > 5
    stream, rng = LogStream(log, fmt, isolation), random.Random(1)
    check(log, stream, [0, 1, 13, 250, log.log_end_offset - 1, log.log_end_offset], rng)
    # growing: only the new batches are indexed, and the sizes follow
    log.append([b"new-%d" % i for i in range(30)])
    log.append_as_leader(build_batch(0, [b"open"], producer_id=999, producer_epoch=0,
                                     base_sequence=0, is_transactional=True))
    assert not stream.is_current()
    check(log, stream, [0, 400, log.log_end_offset - 3], rng)
    # retention moves the log start: the whole-log stream starts at it
    deleted = log._delete_segments(log.segments.all()[:2])
    assert deleted == 2
    check(log, stream, [0, log.log_start_offset + 1], rng)
    log.close()


@pytest.mark.needs_fixture("kafka-written")
@pytest.mark.parametrize("name", ["plain-0", "codecs-0", "compacted-0", "legacy-0", "txn-0"])
@pytest.mark.parametrize("fmt", list(StreamFormat))
def test_stream_of_kafka_written_logs(name, fmt):
    manager = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        log = manager.get(name)
        for isolation in IsolationLevel:
            stream = LogStream(log, fmt, isolation)
            check(log, stream, [0, log.log_end_offset // 3], random.Random(name))
    finally:
        manager.close()


def small_chunks(tmp_path, monkeypatch, **settings):
    """(log, its values stream refreshed, the stream's whole text) over ``txn_log`` with
    700-byte chunks and ``settings`` (kfs.mount.text_stream constants) patched."""
    for name, value in {"CHUNK_LOG_BYTES": 700, **settings}.items():
        monkeypatch.setattr(f"kfs.mount.text_stream.{name}", value)
    log = txn_log(tmp_path / "t-0", segment_bytes=4096)
    stream = LogStream(log, StreamFormat.VALUES)
    stream.refresh()
    return log, stream, naive(log, StreamFormat.VALUES, 0, IsolationLevel.READ_UNCOMMITTED)


def test_nowait_reads_come_from_rendered_chunks_only(tmp_path, monkeypatch):
    log, stream, want = small_chunks(tmp_path, monkeypatch, RENDERED_CHUNKS_KEPT=1)
    with pytest.raises(BlockingIOError):
        stream.read(0, 0, 10, nowait=True)  # the first chunk was rendered, then evicted
    assert stream.read(0, 0, 10) == want[:10]
    assert stream.read(0, 3, 10, nowait=True) == want[3:13]  # now it is kept
    log.close()


def test_read_ahead_renders_the_next_chunk_across_segments(tmp_path, monkeypatch):
    log, stream, want = small_chunks(tmp_path, monkeypatch, RENDERED_CHUNKS_KEPT=2)
    position = 0
    while position < len(want):  # a sequential reader that reads ahead never waits
        piece = bytes(stream.read(0, position, 8, nowait=position > 0))  # < any chunk's text
        assert piece == want[position:position + 8]
        position += len(piece)
        if stream.wants_read_ahead(0, position - 1):  # after the chunk of the last byte read
            stream.read_ahead(0, position - 1)
            assert not stream.wants_read_ahead(0, position - 1)
    assert not stream.wants_read_ahead(0, len(want) - 1)  # nothing after the last chunk
    log.close()


def test_chunk_spans_tile_the_stream_and_serve_the_reads_inside_them(tmp_path, monkeypatch):
    """A sequential reader that reads inside the span of the chunk its latest read ended in
    through ``read_within``, and looks at what to render ahead only when a read ends outside
    it (as the mount does), reads the stream's bytes and never waits; the spans it meets tile
    the stream."""
    log, stream, want = small_chunks(tmp_path, monkeypatch, RENDERED_CHUNKS_KEPT=2)
    position, span, spans, within = 0, None, [], 0
    while position < len(want):
        piece = None if span is None else stream.read_within(span, position, 8)
        within += piece is not None
        if piece is None:
            piece = stream.read(0, position, 8, nowait=position > 0)
        assert bytes(piece) == want[position:position + 8]
        position += len(piece)
        if span is None or not span.first <= position - 1 < span.end:
            span = stream.chunk_span(0, position - 1)
            assert span.first <= position - 1 < span.end
            spans.append(span)
            if stream.wants_read_ahead(0, position - 1):
                stream.read_ahead(0, position - 1)
    assert len(spans) > 3 and spans[0].first == 0 and spans[-1].end == len(want)
    assert [s.first for s in spans[1:]] == [s.end for s in spans[:-1]]
    assert within > len(want) // 8 // 2  # most reads came from the span
    log.close()


def test_read_within_serves_only_what_still_holds(tmp_path, monkeypatch):
    """``read_within`` answers None, for :meth:`read` to answer, at a chunk's first byte (damage
    may come before it), past the chunk, once the chunk is no longer kept, and once the log
    has more than the index (an append)."""
    log, stream, want = small_chunks(tmp_path, monkeypatch, RENDERED_CHUNKS_KEPT=1)
    stream.read(0, 0, 8)
    span = stream.chunk_span(0, 7)
    assert bytes(stream.read_within(span, 1, 8)) == want[1:9]
    assert stream.read_within(span, 0, 8) is None  # the chunk's first byte
    assert stream.read_within(span, span.end - 4, 8) is None  # past its end
    stream.read(0, span.end, 8)  # renders the next chunk: the first one is no longer kept
    assert stream.read_within(span, 1, 8) is None
    stream.read(0, 0, 8)
    assert bytes(stream.read_within(span, 1, 8)) == want[1:9]
    log.append([b"one more"])
    assert stream.read_within(span, 1, 8) is None  # not current: read refreshes first
    log.close()


def test_read_ahead_renders_read_ahead_chunks(tmp_path, monkeypatch):
    """A reader asking about a chunk's worth at a time finds the READ_AHEAD_CHUNKS chunks
    after its own rendered (one ahead would be the very chunk its next read needs)."""
    log, stream, want = small_chunks(tmp_path, monkeypatch, READ_AHEAD_CHUNKS=2)
    first = bytes(stream._chunk(*stream._locate(stream._layout(), 0)[:3]).text)  # chunk 0's
    ahead = stream._after(0, len(first) - 1)
    assert len(ahead) == 2 and stream.wants_read_ahead(0, len(first) - 1)
    stream.read_ahead(0, len(first) - 1)
    assert not stream.wants_read_ahead(0, len(first) - 1)
    texts = [bytes(stream._chunk(*at, nowait=True).text) for at in ahead]  # no rendering
    assert first + b"".join(texts) == want[:len(first) + sum(map(len, texts))]
    log.close()


def test_keyed_lines_take_the_separator_and_print_null(tmp_path):
    """``keyed-values``: key, separator, value, newline per record; ``null`` for a null key or
    value (kafka-console-consumer --property print.key=true), any separator."""
    (tmp_path / "k-0").mkdir()
    log = Log(tmp_path / "k-0", "k", 0, LogConfig())
    log.append([b"a", None, b"c\nd", b""], [b"k1", b"k2", None, b"\xff"])
    stream = LogStream(log, StreamFormat.KEYED, key_separator=b" => ")
    stream.refresh()
    want = b"k1 => a\nk2 => null\nnull => c\nd\n\xff => \n"
    assert stream.size(0) == len(want) and stream.read(0, 0, 100) == want
    assert stream.read(2, 0, 100) == b"null => c\nd\n\xff => \n"
    log.close()


@pytest.mark.needs_fixture("internal-topics/__consumer_offsets-7")
def test_keyed_lines_of_a_coordinator_topic_are_its_decoded_key_and_value():
    from helpers.paths import INTERNAL_TOPICS
    from storage.coordinator.records import decoded_line

    manager = LogManager(INTERNAL_TOPICS, read_only=True)
    try:
        log = manager.get("__consumer_offsets-7")
        stream = LogStream(log, StreamFormat.KEYED)
        stream.refresh()
        lines = bytes(stream.read(0, 0, stream.size(0))).splitlines()
        records = [r for rs in log.reader.record_lists(0) for r in rs]
        assert len(lines) == len(records) > 0
        for line, r in zip(lines, records):
            key, value = line.split(b"\t")
            whole = json.loads(decoded_line(log.topic, r.key, r.value, r.offset))
            assert (json.loads(key), json.loads(value)) == (whole["key"], whole["value"])
    finally:
        manager.close()


def test_what_streams_and_readers_keep_is_bounded_however_many_partitions_were_read(
        tmp_path, monkeypatch):
    """Issue 25, item 13: a read-only mount held 300 MB after streaming 25 MB, as every stream
    kept its own rendered chunks (and .log buffers) and every log its decoded batches. What all
    streams of one owner (a mount's stream table) keep rendered is RENDERED_BYTES_KEPT in all,
    and the decoded batches of all logs of a directory one cache's bound (the LogManager's),
    whatever was read."""
    import gc

    from kfs.mount import text_stream

    monkeypatch.setattr(text_stream, "CHUNK_LOG_BYTES", 4096)
    monkeypatch.setattr(text_stream, "RENDERED_BYTES_KEPT", 64 << 10, raising=False)
    manager = LogManager(tmp_path / "data")
    shared = text_stream.StreamCaches()  # (a mount's Streams owns one)
    try:
        values = [b"%0100d" % i for i in range(100)]
        streams = []
        for n in range(12):  # 12 partitions of ~100 KiB, 25 chunks each, all read whole
            log = manager.create(f"p-{n}")
            for _ in range(10):
                log.append(values)
            want_values = naive(log, StreamFormat.VALUES, 0, IsolationLevel.READ_UNCOMMITTED)
            for fmt in (StreamFormat.VALUES, StreamFormat.JSONL):
                stream = LogStream(log, fmt, caches=shared)
                stream.refresh()
                text = bytes(stream.read(0, 0, stream.size(0)))
                if fmt is StreamFormat.VALUES:
                    assert text == want_values
                streams.append(stream)
            for offset in range(0, log.log_end_offset, 100):  # by-offset reads decode batches
                assert log.reader.read(offset).value == values[0]
            assert list(log.reader.record_lists(0))[-1][-1].offset == log.log_end_offset - 1
        kept = sum(c.text.nbytes for c in gc.get_objects() if isinstance(c, text_stream._Chunk))
        assert kept <= (64 << 10) + 32 * 1024, kept  # (the newest chunk always stays)
        caches = {id(log.reader._cache): log.reader._cache
                  for log in (manager.get(f"p-{n}") for n in range(12))}
        decoded = sum(cache._bytes for cache in caches.values())
        assert len(caches) == 1 and decoded <= manager.decoded_batches._max_bytes, decoded
        # a log's changes forget its own decoded batches, not the others'
        before = manager.decoded_batches._bytes
        manager.get("p-11").reader.clear_cache()
        assert 0 < manager.decoded_batches._bytes < before
    finally:
        manager.close()


def test_retention_deleting_a_segment_while_it_is_indexed_is_no_error(tmp_path, monkeypatch):
    """Issue 37 item 6 (``open()`` of ``values`` failing with EBADF after retention): the
    stream indexes segments in a worker thread while retention deletes (and, with
    ``file.delete.delay.ms`` 0, closes) the one it reads. The index is made anew from the log
    as it is then, not failed with the closed file's error."""
    monkeypatch.setattr("kfs.mount.text_stream.CHUNK_LOG_BYTES", 700)
    log = txn_log(tmp_path / "t-0", segment_bytes=4096, file_delete_delay_ms=0)
    stream = LogStream(log, StreamFormat.VALUES)
    decode, raced = stream._decode, []

    def racing_retention(segment, *args):
        if not raced:  # the first chunk read: retention deletes that very segment meanwhile
            raced.append(log._delete_segments(log.segments.all()[:2]))
        return decode(segment, *args)

    monkeypatch.setattr(stream, "_decode", racing_retention)
    stream.refresh()
    assert raced == [2]
    want = naive(log, StreamFormat.VALUES, log.log_start_offset, IsolationLevel.READ_UNCOMMITTED)
    assert stream.read(0, 0, len(want) + 1) == want
    log.close()


def test_retention_deleting_a_segment_while_it_is_rendered_for_a_read_is_no_error(
        tmp_path, monkeypatch):
    """The same race in a read: the chunk a reader asked for is rendered from a segment
    retention deletes meanwhile. The reader gets the stream as the log now is."""
    log, stream, _ = small_chunks(tmp_path, monkeypatch, RENDERED_CHUNKS_KEPT=1)
    decode, raced = stream._decode, []

    def racing_retention(segment, *args):
        if not raced:
            raced.append(log._delete_segments(log.segments.all()[:2]))
            for gone in list(log._pending_deletes):  # (file.delete.delay.ms passed: closed)
                gone[1].delete()
            log._pending_deletes.clear()
        return decode(segment, *args)

    monkeypatch.setattr(stream, "_decode", racing_retention)
    got = stream.read(0, 0, 1 << 20)
    assert raced == [2]
    assert got == naive(log, StreamFormat.VALUES, log.log_start_offset,
                        IsolationLevel.READ_UNCOMMITTED)
    log.close()


def offsets_log(path) -> Log:
    """A ``__consumer_offsets`` partition of offset commits (keys and values in their schemas'
    bytes, some with headers), plain and transactional (TxnOffsetCommit), aborted and
    committed, with their markers, over several segments."""
    import struct

    def string(s: str) -> bytes:
        return struct.pack(">h", len(s)) + s.encode()

    def commit(group: str, partition: int, offset: int) -> tuple[bytes, bytes]:
        key = struct.pack(">h", 1) + string(group) + string("t") + struct.pack(">i", partition)
        value = struct.pack(">hqi", 3, offset, -1) + string("m") + struct.pack(">q", 1_700_000)
        return key, value

    path.mkdir()
    log = Log(path, "__consumer_offsets", 0, LogConfig(segment_bytes=2048))
    for i in range(40):
        keys, values = zip(*(commit(f"g{i % 3}", p, i * 10 + p) for p in range(3)))
        log.append(list(values), list(keys))
        keys, values = zip(*(commit("txn", p, i) for p in range(2)))
        log.append_as_leader(build_batch(0, list(values), list(keys), producer_id=500 + i,
                                         producer_epoch=0, base_sequence=0,
                                         is_transactional=True,
                                         headers=[[("h", b"v")], []]))
        marker = ControlRecordType.ABORT if i % 2 else ControlRecordType.COMMIT
        log.append_as_leader(build_control_batch(0, 500 + i, 0, marker, timestamp_ms=now_ms()))
    return log


@pytest.mark.parametrize("fmt", list(StreamFormat))
@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_a_coordinator_stream_is_its_records_decoded_one_by_one(tmp_path, monkeypatch, fmt,
                                                                isolation):
    """A coordinator topic's stream holds the data records a reader at its isolation sees
    (``LogReader.record_lists``: no control records; with read_committed no aborted
    transaction's) each as its schema-decoded line, whatever the chunks."""
    from kfs.record_format import record_format

    monkeypatch.setattr("kfs.mount.text_stream.CHUNK_LOG_BYTES", 700)
    log = offsets_log(tmp_path / "__consumer_offsets-0")
    assert len(log.segments) > 5
    line = record_format(log.topic, log.partition, fmt).line
    want = b"".join(line(r) for rs in log.reader.record_lists(0, isolation=isolation)
                    for r in rs)
    stream = LogStream(log, fmt, isolation)
    stream.refresh()
    assert stream.size(0) == len(want) and bytes(stream.read(0, 0, len(want) + 1)) == want
    committed = b"".join(line(r) for rs in log.reader.record_lists(
        0, isolation=IsolationLevel.READ_COMMITTED) for r in rs)
    assert (committed == want) is isolation.read_committed  # (aborted commits are there)
    log.close()


def test_every_bulk_reader_decodes_through_the_readers_one_range_decode(tmp_path, monkeypatch):
    """Issue 34: Spark's columns, a plain partition's streams and a coordinator topic's
    streams all decode through ``LogReader.decode_range`` (where control and aborted batches
    are left out), with no loop of their own."""
    from storage.log_reader import LogReader

    calls = []
    decode_range = LogReader.decode_range

    def counted(reader, sink, *args, **kwargs):
        calls.append(reader._log.topic)
        return decode_range(reader, sink, *args, **kwargs)

    monkeypatch.setattr(LogReader, "decode_range", counted)
    plain = txn_log(tmp_path / "t-0")
    offsets = offsets_log(tmp_path / "__consumer_offsets-0")
    assert sum(t.num_rows for t in plain.reader.read_columns(0)) > 0
    assert calls == ["t"]
    for log in (plain, offsets):
        for fmt in StreamFormat:
            calls.clear()
            stream = LogStream(log, fmt, IsolationLevel.READ_COMMITTED)
            stream.refresh()
            assert stream.size(0) > 0 and calls and set(calls) == {log.topic}
        log.close()


def test_decoded_batches_and_rendered_chunks_belong_to_their_owners(tmp_path):
    """Issue 34: no module-level cache. A LogManager's logs share its decoded-batch cache
    (another manager's logs do not); a log opened alone has a bounded one of its own; a mount's
    stream table shares one set of rendered chunks and buffers among its streams, another table
    (another mount) has its own."""
    from kfs.mount.inodes import Kind
    from kfs.mount.streams import Streams
    from storage.log_reader import DECODED_BYTES_KEPT

    first, second = LogManager(tmp_path / "a"), LogManager(tmp_path / "b")
    try:
        logs = [m.create(f"p-{n}") for m in (first, second) for n in range(2)]
        for log in logs:
            for _ in range(2):
                log.append([b"x" * 100] * 10)
            assert len(list(log.reader.record_lists(0))) == 2  # (the first batch is kept)
        assert logs[0].reader._cache is logs[1].reader._cache is first.decoded_batches
        assert logs[2].reader._cache is logs[3].reader._cache is second.decoded_batches
        assert first.decoded_batches is not second.decoded_batches
        assert first.decoded_batches._bytes > 0 and second.decoded_batches._bytes > 0
        (tmp_path / "alone-0").mkdir()
        alone = Log(tmp_path / "alone-0", "alone", 0, LogConfig())
        assert alone.reader._cache not in (first.decoded_batches, second.decoded_batches)
        assert alone.reader._cache._max_bytes == DECODED_BYTES_KEPT
        alone.close()
        # (get() needs only the isolation level: no partitions, attributes or damage notes)
        tables = [Streams(None, None, None, IsolationLevel.READ_UNCOMMITTED) for _ in range(2)]
        streams = [table.get(log, n, kind) for table in tables
                   for n, log in enumerate(logs[:2]) for kind in (Kind.VALUES, Kind.RECORDS_JSONL)]
        for stream in streams:
            stream.refresh()
            assert stream.read(0, 0, 4) == (b"xxxx" if stream.format is StreamFormat.VALUES
                                            else b'{"to')
        assert len({id(s._rendered) for s in streams[:4]}) == 1
        assert len({id(s._rendered) for s in streams[4:]}) == 1
        assert streams[0]._rendered is not streams[4]._rendered
        assert streams[0]._buffers is not streams[4]._buffers
    finally:
        first.close()
        second.close()
