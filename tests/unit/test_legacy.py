"""Legacy message formats v0/v1 (§3 of the reference): entries built by kafka-python's
``LegacyRecordBatchBuilder`` and read back by kafka-python's own reader as the oracle, the
errors of damaged entries, and the Kafka-written ``legacy-0`` partition through the engine:
reads, recovery (indexes rebuilt as Kafka built them) and v2 appends after legacy data."""

import base64
import json
import os
import shutil
import struct
import zlib

import pytest
from kafka.record.legacy_records import LegacyRecordBatch as KafkaPythonLegacyBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder

from helpers.paths import KAFKA_WRITTEN
from storage import LogManager
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.records import (
    CompressionType,
    LegacyRecordBatch,
    RecordBatch,
    TimestampType,
    batch_at,
    compress,
    iter_batches,
)
from storage.log_files import log_file, time_index_file

FIXTURES = KAFKA_WRITTEN
LEGACY = FIXTURES / "legacy-0"
TS = 1700000000000
LEGACY_CODECS = [CompressionType.NONE, CompressionType.GZIP, CompressionType.SNAPPY,
                 CompressionType.LZ4]

needs_fixtures = pytest.mark.needs_fixture("kafka-written/legacy-0", "kafka-written/legacy-0.expected.jsonl")

KEYS = [b"key-0", None, b"", b"k" * 300, None, b"key-5", b"\x00\xff"]
VALUES = [b"value zero", b"v1" * 40, None, b"", b"x" * 2000, b"five", None]


# -- building entries with kafka-python (the independent writer) --------------------------


def stamp(entry: bytearray, pos: int, *, offset=None, timestamp=None, log_append=False):
    """Rewrite a v1 entry's offset (outside the CRC), and its timestamp and timestamp-type bit
    with a new CRC, as the broker does (``ByteBufferLegacyRecordBatch.setLastOffset`` and
    ``setMaxTimestamp``)."""
    if offset is not None:
        struct.pack_into(">q", entry, pos, offset)
    if timestamp is not None:
        entry[pos + 17] = (entry[pos + 17] & 0x07) | (0x08 if log_append else 0)
        struct.pack_into(">q", entry, pos + 18, timestamp)
        size = struct.unpack_from(">i", entry, pos + 8)[0]
        struct.pack_into(">I", entry, pos + 12, zlib.crc32(entry[pos + 16:pos + 12 + size]))


def build(magic, codec, base=1000, *, log_append_time=None, wrapper_offset=None):
    """Entries holding KEYS/VALUES at offsets base.. as a broker stores them: plain messages,
    or one wrapper at the last offset whose inner offsets are absolute (v0) or relative (v1);
    a v1 wrapper carries the largest inner timestamp or ``log_append_time``."""
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 20)
    n = len(VALUES)
    timestamps = [TS + 7 * i - (50 if i == 3 else 0) for i in range(n)]
    for i, (key, value) in enumerate(zip(KEYS, VALUES)):
        inner_offset = i if (codec and magic == 1) else base + i
        assert builder.append(inner_offset, timestamps[i], key, value) is not None
    data = bytearray(builder.build())
    log_append = log_append_time is not None
    if codec:
        offset = base + n - 1 if wrapper_offset is None else wrapper_offset
        ts = (log_append_time if log_append else max(timestamps)) if magic else None
        stamp(data, 0, offset=offset, timestamp=ts, log_append=log_append)
    elif log_append:
        for entry in list(iter_batches(bytes(data))):
            stamp(data, entry.position, timestamp=log_append_time, log_append=True)
    return bytes(data), timestamps


def oracle_records(data, magic):
    """What kafka-python's reader makes of every entry: (offset, timestamp, type, key, value)
    with its None for "no timestamp" spelled -1 as Kafka does."""
    out = []
    pos = 0
    while pos < len(data):
        size = struct.unpack_from(">i", data, pos + 8)[0] + 12
        for r in KafkaPythonLegacyBatch(data[pos:pos + size], magic):
            ts = -1 if r.timestamp is None else r.timestamp
            ts_type = -1 if r.timestamp_type is None else r.timestamp_type
            out.append((r.offset, ts, ts_type, r.key, r.value))
        pos += size
    return out


def decoded(entries):
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value)
            for e in entries for r in e.records()]


CASES = [(magic, codec, None) for magic in (0, 1) for codec in LEGACY_CODECS] + [
    (1, codec, TS + 3_600_000) for codec in LEGACY_CODECS]


@pytest.mark.parametrize("magic,codec,log_append_time", CASES)
def test_entries_decode_as_kafka_python_reads_them(magic, codec, log_append_time):
    data, timestamps = build(magic, codec, log_append_time=log_append_time)
    entries = list(iter_batches(data))
    assert all(type(e) is LegacyRecordBatch for e in entries)
    assert len(entries) == (1 if codec else len(VALUES))
    assert sum(e.size_in_bytes for e in entries) == len(data)
    for e in entries:
        e.ensure_valid()
        assert e.crc == zlib.crc32(data[e.position + 16:e.position + e.size_in_bytes])
    got = decoded(entries)
    assert got == oracle_records(data, magic)

    # ... and what Kafka's rules say, field by field
    if magic == 0:
        want_ts, want_type = [-1] * len(VALUES), TimestampType.NO_TIMESTAMP_TYPE
    elif log_append_time is not None:
        want_ts, want_type = [log_append_time] * len(VALUES), TimestampType.LOG_APPEND_TIME
    else:
        want_ts, want_type = timestamps, TimestampType.CREATE_TIME
    assert got == [(1000 + i, want_ts[i], want_type, KEYS[i], VALUES[i])
                   for i in range(len(VALUES))]
    for e in entries:
        for r in e.records():
            assert r.headers == () and r.sequence == -1
        assert (e.magic, e.compression_type, e.timestamp_type) == (magic, codec, want_type)
        assert e.base_offset == e.records()[0].offset and e.last_offset == e.records()[-1].offset
        assert e.next_offset == e.last_offset + 1 and e.records_count == len(e.records())
        assert e.max_timestamp == (
            -1 if magic == 0 else log_append_time or max(want_ts[r.offset - 1000]
                                                         for r in e.records()))
        assert (e.producer_id, e.producer_epoch, e.base_sequence, e.last_sequence,
                e.partition_leader_epoch) == (-1, -1, -1, -1, -1)
        assert not (e.is_transactional or e.is_control_batch or e.has_delete_horizon)
        assert e.is_complete and batch_at(data, e.position).last_offset == e.last_offset


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in LEGACY_CODECS])
def test_record_at_and_first_record_from_time(magic, codec):
    data, _ = build(magic, codec)
    entries = list(iter_batches(data))
    records = [r for e in entries for r in e.records()]
    for e in entries:
        for offset in range(995, 1010):
            want = next((r for r in e.records() if r.offset == offset), None)
            assert e.record_at(offset) == want
    for target in (0, TS - 60, TS, TS + 1, TS + 20, TS + 42, TS + 43):
        for min_offset in (1000, 1003):
            want = next((r for r in records if r.timestamp >= target and r.offset >= min_offset),
                        None)
            got = next(filter(None, (e.first_record_from_time(target, min_offset)
                                     for e in entries)), None)
            assert got == want, (target, min_offset)


def test_v1_wrapper_offset_zero_keeps_relative_offsets():
    # Produce data of some old librdkafka versions: Kafka takes the relative offsets as they are.
    data, _ = build(1, CompressionType.GZIP, wrapper_offset=0)
    (entry,) = iter_batches(data)
    assert [r.offset for r in entry.records()] == list(range(len(VALUES)))
    assert [r[0] for r in oracle_records(data, 1)] == list(range(len(VALUES)))


# -- damaged and invalid entries ------------------------------------------------------------


def message(offset, magic, attributes, value, key=None, timestamp=TS):
    """One log entry, encoded directly (for wrappers kafka-python's builder cannot make)."""
    body = bytes((magic, attributes)) + (struct.pack(">q", timestamp) if magic else b"")
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    return struct.pack(">qiI", offset, len(body) + 4, zlib.crc32(body)) + body


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in LEGACY_CODECS])
def test_a_bad_crc_is_corrupt_and_the_offset_is_outside_it(magic, codec):
    data = bytearray(build(magic, codec)[0])
    struct.pack_into(">q", data, 0, 5)  # the offset is not covered by the CRC
    LegacyRecordBatch(bytes(data)).ensure_valid()
    data[-1] ^= 0x01
    last = list(iter_batches(bytes(data)))[-1]
    with pytest.raises(CorruptRecordError, match="crc"):
        last.ensure_valid()


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in LEGACY_CODECS])
def test_a_truncated_entry_is_corrupt(magic, codec):
    data = build(magic, codec)[0]
    last = list(iter_batches(data))[-1]
    for cut in (1, 5, last.size_in_bytes - 27):
        torn = data[:-cut]
        # a partial entry at the end ends iteration silently, as FileLogInputStream ...
        assert [e.position for e in iter_batches(torn)] == [
            e.position for e in iter_batches(data)][:-1]
        # ... but reading it is an error
        entry = LegacyRecordBatch(torn, last.position)
        assert not entry.is_complete
        with pytest.raises(CorruptRecordError, match="truncated"):
            entry.ensure_valid()
        with pytest.raises(CorruptRecordError, match="truncated"):
            entry.records()
    with pytest.raises(CorruptRecordError, match="needs 26 bytes" if magic else "cut short"):
        LegacyRecordBatch(data[:20 if magic else 16])


def test_sizes_below_the_message_overhead_are_corrupt():
    v0 = message(3, 0, 0, b"v")
    v1 = message(3, 1, 0, b"v")
    with pytest.raises(CorruptRecordError, match="smaller than minimum record overhead"):
        list(iter_batches(v0[:8] + struct.pack(">i", 13) + v0[12:]))
    with pytest.raises(CorruptRecordError, match="overhead 22"):
        LegacyRecordBatch(v1[:8] + struct.pack(">i", 21) + v1[12:])
    short_key = bytearray(v0)
    struct.pack_into(">i", short_key, 18, 50)  # a key longer than the message
    struct.pack_into(">I", short_key, 12, zlib.crc32(short_key[16:]))
    entry = LegacyRecordBatch(bytes(short_key))
    entry.ensure_valid()
    with pytest.raises(CorruptRecordError, match="declares 50 bytes"):
        entry.records()


def wrapper(magic, codec, inner: bytes, offset=10, timestamp=TS):
    return message(offset, magic, codec, compress(codec, inner, magic=magic), timestamp=timestamp)


@pytest.mark.parametrize("magic", [0, 1])
def test_invalid_wrappers(magic):
    inner = b"".join(message(i, magic, 0, b"v%d" % i) for i in range(3))
    assert [r.value for r in LegacyRecordBatch(wrapper(magic, 1, inner)).records()] == [
        b"v0", b"v1", b"v2"]
    cases = {
        "zstd": message(10, magic, CompressionType.ZSTD, compress(CompressionType.ZSTD, inner)),
        "Unknown compression": message(10, magic, 6, inner),
        "null value": message(10, magic, CompressionType.GZIP, None),
        "no inner records": wrapper(magic, CompressionType.GZIP, b""),
        "must not be compressed": wrapper(magic, CompressionType.GZIP,
                                          wrapper(magic, CompressionType.GZIP, inner, offset=2)),
        "has magic 2": wrapper(magic, CompressionType.GZIP, inner[:16] + b"\x02" + inner[17:]),
    }
    if magic == 1:
        cases["less than the last inner"] = wrapper(1, CompressionType.GZIP, inner, offset=1)
    for match, entry in cases.items():
        batch = LegacyRecordBatch(entry)
        batch.ensure_valid()  # the wrapper's own CRC is right: the inside is wrong
        with pytest.raises(InvalidRecordError, match=match):
            batch.records()


@pytest.mark.parametrize("magic", [0, 1])
def test_corrupt_insides_of_a_valid_wrapper(magic):
    inner = bytearray(b"".join(message(i, magic, 0, b"v%d" % i) for i in range(3)))
    bad_crc = bytes(inner[:-1]) + b"X"
    bad_size = bytes(inner[:8]) + struct.pack(">i", 13) + bytes(inner[12:])
    cases = {
        "inner message at offset 2": wrapper(magic, CompressionType.SNAPPY, bad_crc),
        "less than the minimum": wrapper(magic, CompressionType.SNAPPY, bad_size),
        "corrupt gzip": message(10, magic, CompressionType.GZIP, b"\x1f\x8b not gzip at all"),
    }
    for match, entry in cases.items():
        batch = LegacyRecordBatch(entry)
        batch.ensure_valid()
        with pytest.raises(CorruptRecordError, match=match):
            batch.records()
    # a partial inner entry at the end of the set ends it, as DataLogInputStream
    cut = wrapper(magic, CompressionType.GZIP, bytes(inner[:-3]))
    assert [r.value for r in LegacyRecordBatch(cut).records()] == [b"v0", b"v1"]


def test_v1_inner_records_take_the_wrapper_timestamp_type():
    inner = message(0, 1, 0x08, b"a", timestamp=5) + message(1, 1, 0, b"b", timestamp=9)
    create = LegacyRecordBatch(wrapper(1, CompressionType.LZ4, inner, timestamp=9))
    assert [(r.timestamp, r.timestamp_type) for r in create.records()] == [
        (5, TimestampType.CREATE_TIME), (9, TimestampType.CREATE_TIME)]
    appended = bytearray(wrapper(1, CompressionType.LZ4, inner, timestamp=9))
    stamp(appended, 0, timestamp=77, log_append=True)
    assert [(r.timestamp, r.timestamp_type) for r in LegacyRecordBatch(appended).records()] == [
        (77, TimestampType.LOG_APPEND_TIME)] * 2
    # a v0 message inside a v1 wrapper keeps having no timestamp
    mixed = message(0, 0, 0, b"old") + message(1, 1, 0, b"new", timestamp=9)
    assert [(r.offset, r.timestamp, r.timestamp_type) for r in LegacyRecordBatch(
        wrapper(1, CompressionType.GZIP, mixed)).records()] == [
        (9, -1, TimestampType.NO_TIMESTAMP_TYPE), (10, 9, TimestampType.CREATE_TIME)]


# -- the Kafka-written legacy-0 partition through the engine ---------------------------------


def b64(text):
    return None if text is None else base64.b64decode(text)


def expected_rows():
    with open(FIXTURES / "legacy-0.expected.jsonl") as f:
        return [json.loads(line) for line in f]


def row_of(record, batch):
    return {
        "offset": record.offset, "timestamp": record.timestamp,
        "timestampType": TimestampType(record.timestamp_type).name,
        "key": record.key, "value": record.value, "headers": list(record.headers),
        "batchBaseOffset": batch.base_offset, "magic": batch.magic,
        "compression": batch.compression_type.kafka_name, "isControl": batch.is_control_batch,
        "isTransactional": batch.is_transactional, "producerId": batch.producer_id,
    }


def decoded_row(row):
    return dict(row, key=b64(row["key"]), value=b64(row["value"]))


@needs_fixtures
def test_legacy_fixture_by_offset_every_field():
    rows = expected_rows()
    with_batches = []
    mgr = LogManager(FIXTURES, read_only=True)
    try:
        log = mgr.get("legacy-0")
        assert (log.log_start_offset, log.log_end_offset) == (0, 453)
        for row in rows:
            offset = row["offset"]
            segment = log.segments.floor(offset)
            position, batch = segment.find_batch(offset)
            record = log.reader.read(offset)
            with_batches.append(row_of(record, segment.read_batch(position, batch)))
        assert log.reader.read(453) is None
    finally:
        mgr.close()
    assert with_batches == [decoded_row(row) for row in rows]
    assert {row["magic"] for row in rows} == {0, 1, 2}


@needs_fixtures
def test_legacy_fixture_by_time():
    mgr = LogManager(FIXTURES, read_only=True)
    try:
        log = mgr.get("legacy-0")
        # v0 segments have no timestamps: the first timestamped record is the first v1 one
        assert log.reader.find_offset_by_timestamp(0).offset == 180
        # LogAppendTime wrappers: every inner record reads as the wrapper's time
        assert log.reader.find_offset_by_timestamp(1700003600392).offset == 392
        assert log.reader.find_offset_by_timestamp(1700003600391).offset == 392
        assert log.reader.find_offset_by_timestamp(1700003600413) is None
    finally:
        mgr.close()


def writable_copy(tmp_path):
    backing = tmp_path / "backing"
    shutil.copytree(LEGACY, backing / "legacy-0")
    for path in [backing, *backing.rglob("*")]:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    return backing, backing / "legacy-0"


@needs_fixtures
def test_recovery_rebuilds_the_indexes_kafka_wrote(tmp_path):
    backing, part = writable_copy(tmp_path)
    kafka_written = {p.name: p.read_bytes() for p in part.glob("*index")}
    for name in kafka_written:
        (part / name).unlink()
    mgr = LogManager(backing)
    log = mgr.get("legacy-0")
    assert log.log_end_offset == 453 and log.reader.read(61).value == b64(expected_rows()[61]["value"])
    mgr.close()
    rebuilt = {p.name: p.read_bytes() for p in part.glob("*index")}
    assert rebuilt == kafka_written
    assert rebuilt[time_index_file(part, 0).name] == b""  # v0 only: no timestamps


def active_entries(part):
    data = log_file(part, 384).read_bytes()
    return data, {e.last_offset: e for e in iter_batches(data)}


@needs_fixtures
@pytest.mark.parametrize("damage", ["crc", "torn"])
def test_recovery_cuts_a_damaged_legacy_entry(tmp_path, damage):
    backing, part = writable_copy(tmp_path)
    data, entries = active_entries(part)
    at = entries[409]
    assert at.magic == 1
    if damage == "crc":
        data = bytearray(data)
        data[at.position + at.size_in_bytes - 1] ^= 0xFF
        data = bytes(data)
    else:
        data = data[:at.position + at.size_in_bytes - 10]
    log_file(part, 384).write_bytes(data)
    mgr = LogManager(backing)  # no clean-shutdown marker: the active segment is recovered
    log = mgr.get("legacy-0")
    assert log.reader.read(408).value == b64(expected_rows()[408]["value"]) and log.reader.read(409) is None
    if damage == "torn":  # nothing follows: cut as Kafka cuts a torn tail
        assert log.log_end_offset == 409
        assert log.segments.active.size == at.position
    else:  # the v2 batches after it are salvaged (salvage finds v2 batches, not v0/v1 entries:
        # the legacy messages 410-412 between go to the quarantine with the damaged one)
        assert log.log_end_offset == 453
        assert log.reader.read(413).value == b64(expected_rows()[413]["value"])
        assert any("offsets 409-412" in line for line in mgr.notices)
    mgr.close()


@needs_fixtures
def test_appending_v2_after_legacy_entries(tmp_path):
    backing, part = writable_copy(tmp_path)
    data, entries = active_entries(part)
    # keep only the legacy entries of the active segment: the log now ends in v1 messages
    log_file(part, 384).write_bytes(data[:entries[413 + 9].position])
    # segment.ms counts from the segment's first record time (2023): no roll before the append
    (backing / "legacy.topic.properties").write_text(f"segment.ms={100 * 365 * 86_400_000}\n")
    mgr = LogManager(backing)
    log = mgr.get("legacy-0")
    assert log.log_end_offset == 413
    assert log.append([b"after-legacy", b"second"], keys=[b"k", None]) == 413
    mgr.close()

    mgr = LogManager(backing, read_only=True)
    log = mgr.get("legacy-0")
    rows = expected_rows()
    assert [log.reader.read(o).value for o in (0, 65, 200, 412)] == [
        b64(rows[o]["value"]) for o in (0, 65, 200, 412)]
    assert [(r.offset, r.key, r.value) for r in log.reader.records_from(410, 10)] == [
        (410, b64(rows[410]["key"]), b64(rows[410]["value"])),
        (411, b64(rows[411]["key"]), b64(rows[411]["value"])),
        (412, b64(rows[412]["key"]), b64(rows[412]["value"])),
        (413, b"k", b"after-legacy"), (414, None, b"second")]
    assert log.segments.active.base_offset == 384  # the v2 batch follows v1 entries in one segment
    tail = list(log.segments.active.scan_batches(0))
    assert [b.magic for _, b in tail][-2:] == [1, 2] and type(tail[-1][1]) is RecordBatch
    mgr.close()


def test_legacy_entries_are_not_appended(tmp_path):
    mgr = LogManager(tmp_path)
    log = mgr.create("t-0")
    for append in (log.append_batches, log.append_as_leader):
        with pytest.raises(InvalidRecordError, match="magic 2"):
            append(message(0, 1, 0, b"old"))
    assert log.log_end_offset == 0 and log.segments.active.size == 0
    mgr.close()


@pytest.mark.parametrize("writable", [False, True])
def test_small_entries_up_to_the_end_of_a_segment(tmp_path, writable):
    """v0 entries can be 26 bytes, less than a v2 header: scans and recovery must read them up
    to the last byte, and still stop silently at a torn one."""
    builder = LegacyRecordBatchBuilder(magic=0, compression_type=0, batch_size=1 << 20)
    for i in range(10):
        builder.append(i, None, None, b"%d" % i)
    data = bytes(builder.build())
    assert len(data) == 10 * 27
    part = tmp_path / "t-0"
    part.mkdir()
    log_file(part, 0).write_bytes(data + data[:20])  # a torn 11th entry
    mgr = LogManager(tmp_path, read_only=not writable)
    log = mgr.get("t-0")
    assert log.log_end_offset == 10
    assert [r.value for r in log.reader.records_from(0, 20)] == [b"%d" % i for i in range(10)]
    assert [log.reader.read(i).value for i in range(10)] == [b"%d" % i for i in range(10)]
    assert log.reader.read(10) is None and log.reader.find_offset_by_timestamp(0) is None
    # recovery cuts the torn entry; a read-only log serves up to it and leaves the file as it
    # is (another writer may be mid-append: the entry may yet be completed)
    assert log.segments.active.size == len(data)
    mgr.close()
    assert log_file(part, 0).stat().st_size == len(data) + (0 if writable else 20)


# -- the errors' words and the header's edges (what mutation testing found unpinned) ---------


def test_a_cut_entry_says_where_and_how_many_bytes():
    v0 = message(3, 0, 0, b"v")
    with pytest.raises(CorruptRecordError, match=r"^legacy message at position 5 is cut short: "
                                                 r"10 bytes$"):
        LegacyRecordBatch(bytes(5) + v0[:10], 5)
    with pytest.raises(CorruptRecordError, match=r"cut short: 0 bytes$"):
        LegacyRecordBatch(v0, len(v0) + 4)
    with pytest.raises(InvalidRecordError, match=r"^legacy message at position 0 has magic 3; "
                                                 r"only 0 and 1 are legacy$"):
        LegacyRecordBatch(v0[:16] + b"\x03" + v0[17:])


def test_an_entry_with_exactly_its_header_is_parsed_and_not_complete():
    v1 = message(3, 1, 0, b"value")
    entry = LegacyRecordBatch(v1[:26])  # v1's header: 26 bytes
    assert entry.offset == 3 and not entry.is_complete


def test_a_message_ending_inside_a_length_says_so():
    body = bytes((0, 0)) + struct.pack(">i", 2) + b"ab" + b"\x00\x00"  # the value's length cut
    entry = struct.pack(">qiI", 8, len(body) + 4, zlib.crc32(body)) + body
    with pytest.raises(CorruptRecordError, match=r"^legacy message at offset 8 ends inside its "
                                                 r"key or value length$"):
        LegacyRecordBatch(entry).records()


def test_a_wrapper_s_insides_are_named_in_words():
    nested = wrapper(1, CompressionType.GZIP,
                     wrapper(1, CompressionType.GZIP, message(0, 1, 0, b"v"), offset=0))
    with pytest.raises(InvalidRecordError, match=r"^Inner messages must not be compressed$"):
        LegacyRecordBatch(nested).records()
    small = bytearray(message(0, 1, 0, b"v0"))
    struct.pack_into(">i", small, 8, 20)  # 14 or more, but below v1's 22
    with pytest.raises(CorruptRecordError, match=r"^inner message at offset 0 is 20 bytes, "
                                                 r"below the v1 overhead$"):
        LegacyRecordBatch(wrapper(1, CompressionType.GZIP, bytes(small), offset=0)).records()


def test_a_plain_entry_s_crc_is_its_record_s_and_a_wrapper_past_its_last_inner_has_a_gap():
    plain = LegacyRecordBatch(message(3, 1, 0, b"v"))
    assert plain.record_crcs() == [plain.crc]
    inner = b"".join(message(i, 1, 0, b"v%d" % i) for i in range(3))
    late = LegacyRecordBatch(wrapper(1, CompressionType.GZIP, inner, offset=20))  # inner 18..20
    assert [r.offset for r in late.records()] == [18, 19, 20]
    early = LegacyRecordBatch(wrapper(0, CompressionType.GZIP, inner, offset=5))  # v0: absolute
    assert [r.offset for r in early.records()] == [0, 1, 2]
    assert early.record_at(4) is None and early.record_at(5) is None  # past the last inner


def test_a_truncated_entry_names_its_offset():
    entry = message(3, 1, 0, b"value")
    with pytest.raises(CorruptRecordError, match=r"^legacy message at offset 3 is truncated: "
                                                 rf"{len(entry)} bytes declared, 30 available$"):
        LegacyRecordBatch(entry[:30]).records()
