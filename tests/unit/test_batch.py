"""Record batch v2 encode/decode (DefaultRecordBatch, MemoryRecordsBuilder).

Expected bytes come from the format reference (§2.7, §2.8), from Kafka-written fixtures and
from kafka-python's independent implementation, never from this codec itself.
"""

import base64
import glob
import json
import struct
from pathlib import Path

import pytest
from crc32c import crc32c
from hypothesis import given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from helpers.paths import KAFKA_WRITTEN
from helpers.records import EXAMPLE_2_7, EXAMPLE_2_8, PROPERTY, TS, batches, kp_build, kp_decode
from storage.errors import CorruptRecordError, InvalidRecordError
from storage.records import (
    CompressionType,
    LegacyRecordBatch,
    Record,
    RecordBatch,
    TimestampType,
    batch_at,
    build_batch,
    iter_batches,
    whole_batch_at,
)
from storage.records.framing import LOG_OVERHEAD, MAGIC_OFFSET, RECORD_BATCH_OVERHEAD

FIXTURES = KAFKA_WRITTEN
needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def with_crc(batch: bytes) -> bytes:
    """The batch with its CRC-32C recomputed over [21, end) (after editing it)."""
    return batch[:17] + struct.pack(">I", crc32c(batch[21:])) + batch[21:]


# -- the reference's worked examples ---------------------------------------------------


def test_worked_example_2_7_encode():
    assert build_batch(0, [b"v"], [b"k"], TS, partition_leader_epoch=0) == EXAMPLE_2_7
    assert len(EXAMPLE_2_7) == 70


def test_worked_example_2_7_decode():
    batch = RecordBatch(EXAMPLE_2_7)
    batch.ensure_valid()
    assert (batch.base_offset, batch.batch_length, batch.size_in_bytes) == (0, 58, 70)
    assert batch.crc == 0xE99B8DD8 == 3919285720
    assert (batch.magic, batch.attributes, batch.partition_leader_epoch) == (2, 0, 0)
    assert (batch.last_offset_delta, batch.last_offset, batch.next_offset) == (0, 0, 1)
    assert batch.base_timestamp == batch.max_timestamp == TS
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)
    assert batch.records_count == 1
    assert batch.compression_type is CompressionType.NONE
    assert batch.timestamp_type is TimestampType.CREATE_TIME
    assert not (batch.is_transactional or batch.is_control_batch or batch.has_delete_horizon)
    assert batch.records() == [Record(0, TS, TimestampType.CREATE_TIME, b"k", b"v", (), -1)]


def test_worked_example_2_8_control_batch():
    built = build_batch(
        5, [struct.pack(">hi", 0, 0)], [struct.pack(">hh", 0, 1)], TS,
        partition_leader_epoch=0, producer_id=1000, producer_epoch=0,
        is_transactional=True, is_control=True)
    assert built == EXAMPLE_2_8
    batch = RecordBatch(EXAMPLE_2_8)
    batch.ensure_valid()
    assert batch.size_in_bytes == 78 and batch.attributes == 0x30
    assert batch.is_control_batch and batch.is_transactional
    (record,) = batch.records()
    assert record.offset == 5 and record.key == b"\x00\x00\x00\x01"  # version 0, COMMIT
    assert record.value == b"\x00" * 6 and record.sequence == -1


def test_constants():
    assert (RECORD_BATCH_OVERHEAD, LOG_OVERHEAD, MAGIC_OFFSET) == (61, 12, 16)


# -- header parsing ------------------------------------------------------------------------


def test_header_alone_is_enough_to_parse():
    batch = RecordBatch(EXAMPLE_2_7[:61])
    assert batch.size_in_bytes == 70 and batch.last_offset == 0
    with pytest.raises(CorruptRecordError, match="truncated"):
        batch.ensure_valid()
    with pytest.raises(CorruptRecordError, match="truncated"):
        batch.records()


def test_batch_inside_a_larger_buffer_and_views():
    buf = b"\xee" * 7 + EXAMPLE_2_7 + b"\xee" * 5
    for view in (buf, bytearray(buf), memoryview(buf)):
        batch = RecordBatch(view, 7)
        batch.ensure_valid()
        assert batch.records()[0].value == b"v"


def test_attributes_are_the_low_byte_of_the_int16():
    # byte 21 (the high byte) is junk here: Kafka ignores it, so must we (pitfall 1)
    edited = with_crc(EXAMPLE_2_7[:21] + b"\xff\x00" + EXAMPLE_2_7[23:])
    batch = RecordBatch(edited)
    batch.ensure_valid()
    assert batch.attributes == 0
    assert batch.compression_type is CompressionType.NONE and not batch.is_control_batch
    flags = with_crc(EXAMPLE_2_7[:21] + b"\x00\x78" + EXAMPLE_2_7[23:])
    batch = RecordBatch(flags)
    assert batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.is_transactional and batch.is_control_batch and batch.has_delete_horizon


def test_fewer_than_61_bytes():
    for size in (0, 10, 60):
        with pytest.raises(CorruptRecordError):
            RecordBatch(EXAMPLE_2_7[:size])


def test_declared_size_below_the_overhead():
    short = EXAMPLE_2_7[:8] + struct.pack(">i", 48) + EXAMPLE_2_7[12:]
    with pytest.raises(CorruptRecordError, match="smaller than the minimum"):
        RecordBatch(short)


@pytest.mark.parametrize("magic", [0, 1, 3])
def test_other_magic_is_invalid_not_corrupt(magic):
    edited = EXAMPLE_2_7[:16] + bytes((magic,)) + EXAMPLE_2_7[17:]
    with pytest.raises(InvalidRecordError):
        RecordBatch(edited)
    with pytest.raises(InvalidRecordError):
        RecordBatch(edited[:40])  # a short legacy message is dispatched on its magic too


def test_unknown_codec_id():
    edited = EXAMPLE_2_7[:22] + b"\x05" + EXAMPLE_2_7[23:]
    with pytest.raises(InvalidRecordError, match="Unknown compression type id: 5"):
        RecordBatch(edited).records()


# -- CRC -------------------------------------------------------------------------------------


def test_crc_mismatch_reports_both_values():
    tampered = EXAMPLE_2_7[:-2] + b"\x77" + EXAMPLE_2_7[-1:]
    with pytest.raises(CorruptRecordError, match=r"stored crc = 3919285720, computed crc = \d+"):
        RecordBatch(tampered).ensure_valid()


def test_crc_excludes_offset_length_epoch_and_magic():
    moved = struct.pack(">q", 999) + EXAMPLE_2_7[8:12] + struct.pack(">i", 7) + EXAMPLE_2_7[16:]
    RecordBatch(moved).ensure_valid()  # the broker rewrites these without a new CRC
    built = build_batch(999, [b"v"], [b"k"], TS, partition_leader_epoch=7)
    assert built == moved


# -- records section errors ---------------------------------------------------------------


def edit_records(batch: bytes, records: bytes, count: int | None = None) -> bytes:
    """``batch`` with another records section (and count), sizes and CRC made consistent."""
    head = bytearray(batch[:61])
    struct.pack_into(">i", head, 8, 49 + len(records))
    if count is not None:
        struct.pack_into(">i", head, 57, count)
    return with_crc(bytes(head) + records)


ONE_RECORD = EXAMPLE_2_7[61:]  # 10 00 00 00 02 6b 02 76 00


@pytest.mark.parametrize("records, count, match", [
    (ONE_RECORD + b"\x00", 1, "still remaining"),  # bytes after the last record
    (ONE_RECORD, 2, "premature EOF"),  # fewer records than declared
    (b"\x0e" + ONE_RECORD[1:], 1, "Invalid record size"),  # declared 7, holds 8
    (b"\x12" + ONE_RECORD[1:] + b"\x00", 1, "Invalid record size"),  # declared 9, holds 8
    (b"\x40" + ONE_RECORD[1:], 1, "Invalid record size"),  # declared 32: past the end
    (b"\x01" + ONE_RECORD[1:], 1, "Invalid record size"),  # negative length
    (ONE_RECORD[:-1] + b"\x01", 1, "invalid number of record headers -1"),
    (ONE_RECORD[:-1] + b"\x20", 1, "invalid number of record headers"),  # 16 > remaining
    (ONE_RECORD[:2] + b"\x80" * 10 + b"\x00" + ONE_RECORD[3:], 1, "varlong longer"),
    (ONE_RECORD, -1, "invalid record count -1"),
    (b"", 1, "premature EOF"),
])
def test_corrupt_records_sections(records, count, match):
    batch = RecordBatch(edit_records(EXAMPLE_2_7, records, count))
    batch.ensure_valid()  # the CRC is fine: these are writer bugs, caught while reading
    with pytest.raises(CorruptRecordError, match=match):
        batch.records()


def test_header_key_must_not_be_negative():
    record = bytes.fromhex("00 00 00 01 01 02") + b"\x01"  # ... null value, 1 header, key len -1
    body = bytes((len(record) * 2,)) + record
    with pytest.raises(CorruptRecordError, match="negative header key size"):
        RecordBatch(edit_records(EXAMPLE_2_7, body, 1)).records()


def test_empty_batch_yields_nothing_without_reading_the_body():
    # compaction can keep a header-only batch (count 0); Kafka never looks past the header
    empty = edit_records(build_batch(10, [b"x"], codec=CompressionType.GZIP), b"", 0)
    batch = RecordBatch(empty)
    batch.ensure_valid()
    assert batch.size_in_bytes == 61 and batch.records() == []


def test_corrupt_compressed_stream():
    batch = build_batch(0, [b"abc" * 100] * 10, codec=CompressionType.ZSTD)
    with pytest.raises(CorruptRecordError):
        RecordBatch(edit_records(batch, batch[61:-5])).records()


# -- building ----------------------------------------------------------------------------


def ours(records: list[Record]) -> list[tuple]:
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers) for r in records]


def test_null_and_empty_keys_and_values_and_headers():
    values = [b"v0", None, b"", b"v3", b"\x00\xff"]
    keys = [None, b"k1", b"", None, b"k\x00"]
    headers = [
        [], [("h", b"x")], [("null-value", None), ("", b"")],
        [("clé \"ünïcode\" ✓", b"\xe2\x9c\x93")], [("a", None), ("a", b"dup")],
    ]
    timestamps = [TS + 5, TS, TS + 100_000, -1, TS + 3]
    data = build_batch(40, values, keys, timestamps, headers)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.base_timestamp == TS + 5 and batch.max_timestamp == TS + 100_000
    records = batch.records()
    assert [r.value for r in records] == values
    assert [r.key for r in records] == keys
    assert [r.headers for r in records] == [tuple(h) for h in headers]
    assert [r.timestamp for r in records] == timestamps
    assert [r.offset for r in records] == [40, 41, 42, 43, 44]
    # kafka-python reads the same records from our bytes
    assert [r[1:] for r in kp_decode(data)] == [r[1:] for r in ours(records)]


def test_log_append_time():
    data = build_batch(7, [b"a", b"b"], None, [TS + 9, TS + 1],
                       timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=TS + 500)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.attributes == 0x08 and batch.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert batch.base_timestamp == TS + 9 and batch.max_timestamp == TS + 500
    records = batch.records()
    assert [r.timestamp for r in records] == [TS + 500, TS + 500]  # DefaultRecord.timestamp()
    assert {r.timestamp_type for r in records} == {TimestampType.LOG_APPEND_TIME}
    assert [(r[1], r[2]) for r in kp_decode(data)] == [(TS + 500, 1)] * 2
    with pytest.raises(ValueError):
        build_batch(7, [b"a"], None, TS, timestamp_type=TimestampType.LOG_APPEND_TIME)


def test_offset_delta_gaps_and_kept_last_offset():
    data = build_batch(100, [b"a", b"b", b"c"], [b"x", b"y", b"z"], TS, offset_deltas=[3, 4, 9])
    batch = RecordBatch(data)
    assert batch.last_offset_delta == 9 and batch.records_count == 3
    assert [r.offset for r in batch.records()] == [103, 104, 109]
    kept = RecordBatch(build_batch(100, [b"a"], None, TS, offset_deltas=[3], last_offset_delta=20))
    assert kept.last_offset == 120 and kept.next_offset == 121
    assert [r.offset for r in kept.records()] == [103]
    with pytest.raises(ValueError):
        build_batch(0, [b"a", b"b"], offset_deltas=[2, 2])
    with pytest.raises(ValueError):
        build_batch(0, [b"a"], offset_deltas=[-1])
    with pytest.raises(ValueError):
        build_batch(0, [b"a"], offset_deltas=[5], last_offset_delta=4)


def test_delete_horizon():
    data = build_batch(0, [b"a", None], [b"k", b"k"], [TS, TS + 10],
                       delete_horizon_ms=TS + 86_400_000)
    batch = RecordBatch(data)
    assert batch.has_delete_horizon and batch.attributes == 0x40
    assert batch.base_timestamp == TS + 86_400_000
    assert [r.timestamp for r in batch.records()] == [TS, TS + 10]  # negative deltas


def test_sequences_wrap_like_kafka():
    data = build_batch(0, [b"a"] * 4, None, TS, producer_id=7, producer_epoch=3,
                       base_sequence=(1 << 31) - 2)
    batch = RecordBatch(data)
    assert batch.last_sequence == 1
    assert [r.sequence for r in batch.records()] == [(1 << 31) - 2, (1 << 31) - 1, 0, 1]
    gapped = RecordBatch(build_batch(0, [b"a", b"b"], None, TS, producer_id=7, producer_epoch=0,
                                     base_sequence=10, offset_deltas=[0, 5]))
    assert [r.sequence for r in gapped.records()] == [10, 15]


@pytest.mark.parametrize("kwargs", [
    {"values": []},
    {"values": [b"a"], "keys": [b"k", b"k"]},
    {"values": [b"a"], "headers": []},
    {"values": [b"a", b"b"], "timestamps": [TS]},
    {"values": [b"a"], "timestamps": -2},
    {"values": [b"a", b"b"], "timestamps": [TS, -5]},
    {"values": [b"a"], "producer_epoch": 1 << 15},
    {"values": [b"a"], "timestamp_type": TimestampType.NO_TIMESTAMP_TYPE},
])
def test_build_refuses(kwargs):
    with pytest.raises(ValueError):
        build_batch(0, **kwargs)


def test_header_keys_must_be_str():
    with pytest.raises(TypeError):
        build_batch(0, [b"a"], headers=[[(b"bytes-key", b"v")]])


def test_timestamps_default_to_now():
    import time

    before = time.time_ns() // 1_000_000
    batch = RecordBatch(build_batch(0, [b"a"]))
    assert before <= batch.max_timestamp <= time.time_ns() // 1_000_000


def test_wide_varints_take_the_general_paths():
    # values over 8 KiB and offset deltas over 8191 need 3-byte varints; timestamps far apart
    # need long varlongs; both the builder and the reader switch paths for them
    values = [b"v%d" % i for i in range(9000)] + [b"x" * 20_000]
    timestamps = [TS + (i % 7) * 10**9 - 5 * 10**8 for i in range(9001)]
    for ts in (TS, timestamps):
        data = build_batch(0, values, None, ts)
        records = RecordBatch(data).records()
        assert [r.value for r in records] == values
        assert ours(records) == kp_decode(data)


def test_many_records_fast_path_matches_kafka_python_bytes():
    values = [b"line %d of a log file" % i for i in range(3000)]
    builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
    for i, value in enumerate(values):
        builder.append(i, TS, None, value, [])
    assert build_batch(0, values, None, TS, partition_leader_epoch=0) == bytes(builder.build())


# -- property tests against kafka-python (helpers.records: the strategies and the oracle) ---


def expected_records(values, keys, timestamps, headers, offsets, base=0):
    n = len(values)
    return [
        (base + offsets[i], timestamps if isinstance(timestamps, int) else timestamps[i], 0,
         None if keys is None else keys[i], values[i],
         () if headers is None else tuple(headers[i]))
        for i in range(n)
    ]


@pytest.mark.parametrize("codec", list(CompressionType))
@PROPERTY
@given(columns=batches(), base_offset=st.integers(0, 1 << 40))
def test_our_bytes_read_by_kafka_python(codec, columns, base_offset):
    values, keys, timestamps, headers, offsets = columns
    data = build_batch(base_offset, values, keys, timestamps, headers, codec=codec,
                       offset_deltas=offsets)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.compression_type == codec
    assert batch.base_offset == base_offset and batch.last_offset_delta == offsets[-1]
    expected = expected_records(values, keys, timestamps, headers, offsets, base_offset)
    assert kp_decode(data) == expected
    assert ours(RecordBatch(data).records()) == kp_decode(data)


@pytest.mark.parametrize("codec", list(CompressionType))
@PROPERTY
@given(columns=batches())
def test_kafka_python_bytes_read_by_us(codec, columns):
    values, keys, timestamps, headers, offsets = columns
    data = kp_build(codec, values, keys, timestamps, headers, offsets)
    batch = RecordBatch(data)
    batch.ensure_valid()
    assert batch.records_count == len(values) and batch.last_offset_delta == offsets[-1]
    assert ours(batch.records()) == expected_records(values, keys, timestamps, headers, offsets)
    if codec == CompressionType.NONE:
        assert build_batch(0, values, keys, timestamps, headers, partition_leader_epoch=0,
                           offset_deltas=offsets) == data


# -- Kafka-written fixtures ----------------------------------------------------------------


def fixture_batches(partition: str):
    """(batch bytes, RecordBatch) for every batch of the partition's segments, in order."""
    for log in sorted(glob.glob(str(FIXTURES / partition / "*.log"))):
        buf = Path(log).read_bytes()
        pos = 0
        for batch in iter_batches(buf):
            yield buf[pos:pos + batch.size_in_bytes], batch
            pos += batch.size_in_bytes
        assert pos == len(buf)


@needs_fixtures
@pytest.mark.parametrize("partition", ["codecs-0", "plain-0", "txn-0", "compacted-0", "legacy-0"])
def test_kafka_written_batches_decode_as_kafka_reads_them(partition):
    expected = [json.loads(line) for line in open(FIXTURES / f"{partition}.expected.jsonl")]
    b64 = lambda b: None if b is None else base64.b64encode(b).decode()  # noqa: E731
    got = []
    codecs = set()
    for _, batch in fixture_batches(partition):
        batch.ensure_valid()
        codecs.add(batch.compression_type)
        for r in batch.records():
            got.append({
                "offset": r.offset, "timestamp": r.timestamp,
                "timestampType": TimestampType(r.timestamp_type).name,
                "key": b64(r.key), "value": b64(r.value),
                "headers": [[k, b64(v)] for k, v in r.headers],
                "batchBaseOffset": batch.base_offset, "magic": batch.magic,
                "compression": batch.compression_type.kafka_name,
                "isControl": batch.is_control_batch, "isTransactional": batch.is_transactional,
                "producerId": batch.producer_id,
            })
    assert len(got) == len(expected)
    assert got == expected
    if partition == "codecs-0":
        assert codecs == set(CompressionType)


@needs_fixtures
@pytest.mark.parametrize("partition", ["plain-0", "txn-0", "compacted-0", "codecs-0"])
def test_uncompressed_kafka_batches_rebuild_byte_for_byte(partition):
    """MemoryRecordsBuilder's own bytes: rebuilding each uncompressed CreateTime batch from
    its decoded records gives the file's bytes (compacted batches: gaps, kept last offset,
    delete horizon; transactional and control batches; producer ids and sequences)."""
    rebuilt = 0
    for original, batch in fixture_batches(partition):
        records = batch.records()
        if batch.compression_type or batch.timestamp_type or not records:
            continue
        data = build_batch(
            batch.base_offset, [r.value for r in records], [r.key for r in records],
            [r.timestamp for r in records], [r.headers for r in records],
            partition_leader_epoch=batch.partition_leader_epoch,
            producer_id=batch.producer_id, producer_epoch=batch.producer_epoch,
            base_sequence=batch.base_sequence, is_transactional=batch.is_transactional,
            is_control=batch.is_control_batch,
            offset_deltas=[r.offset - batch.base_offset for r in records],
            last_offset_delta=batch.last_offset_delta,
            delete_horizon_ms=batch.base_timestamp if batch.has_delete_horizon else None)
        assert data == original
        rebuilt += 1
    assert rebuilt > 0


@needs_fixtures
def test_iter_batches_stops_at_a_partial_trailing_batch():
    buf = Path(sorted(glob.glob(str(FIXTURES / "plain-0" / "*.log")))[0]).read_bytes()
    whole = [(b.base_offset, b.size_in_bytes) for b in iter_batches(buf)]
    assert sum(size for _, size in whole) == len(buf)
    last_size = whole[-1][1]
    for cut in (1, 20, last_size - 17, last_size - 1):
        assert [(b.base_offset, b.size_in_bytes) for b in iter_batches(buf[:-cut])] == whole[:-1]
    start = whole[0][1]
    assert next(iter_batches(buf, start)).base_offset == whole[1][0]
    assert [b.base_offset for b in iter_batches(buf, 0, start)] == [whole[0][0]]


def test_iter_batches_errors():
    with pytest.raises(CorruptRecordError, match="smaller than minimum record overhead"):
        list(iter_batches(EXAMPLE_2_7[:8] + struct.pack(">i", 13) + EXAMPLE_2_7[12:]))
    with pytest.raises(CorruptRecordError):  # 14..48 passes the first check, not the v2 one
        list(iter_batches(EXAMPLE_2_7[:8] + struct.pack(">i", 40) + EXAMPLE_2_7[12:]))
    unknown = EXAMPLE_2_7[:16] + b"\x03" + EXAMPLE_2_7[17:]
    with pytest.raises(InvalidRecordError):
        list(iter_batches(EXAMPLE_2_7 + unknown))
    legacy = EXAMPLE_2_7[:16] + b"\x01" + EXAMPLE_2_7[17:]  # read as a v1 entry, bad CRC
    first, second = iter_batches(EXAMPLE_2_7 + legacy)
    assert (type(first), type(second)) == (RecordBatch, LegacyRecordBatch)
    with pytest.raises(CorruptRecordError, match="crc"):
        second.ensure_valid()
    assert list(iter_batches(b"")) == [] and list(iter_batches(EXAMPLE_2_7[:17])) == []


def test_whole_batch_at_checks_in_kafkas_order():
    """FileLogInputStream.nextBatch: the size, whether the batch is all there, then the magic."""
    size = len(EXAMPLE_2_7)
    assert whole_batch_at(EXAMPLE_2_7).base_offset == 0
    assert whole_batch_at(EXAMPLE_2_7, 0, size - 1) is None
    assert whole_batch_at(EXAMPLE_2_7 + b"x" * 18, size) is None  # 18 bytes: a torn header
    assert whole_batch_at(EXAMPLE_2_7 + bytes(17), size) is None  # 17 bytes: nothing to read
    unknown = EXAMPLE_2_7[:16] + b"\x07" + EXAMPLE_2_7[17:]
    assert whole_batch_at(unknown[:-1]) is None  # torn: its magic is not looked at
    with pytest.raises(InvalidRecordError):
        whole_batch_at(unknown)
    with pytest.raises(CorruptRecordError, match="smaller than minimum record overhead"):
        whole_batch_at(EXAMPLE_2_7[:8] + struct.pack(">i", 13) + bytes(6))  # even when torn
    legacy = EXAMPLE_2_7[:16] + b"\x01" + EXAMPLE_2_7[17:]
    assert type(whole_batch_at(legacy)) is LegacyRecordBatch
    assert whole_batch_at(legacy[:-1]) is None


def test_whole_batch_at_in_a_block_of_a_longer_file():
    """``end`` past the block: the batch from its header, the rest still on disk."""
    block = EXAMPLE_2_7[:RECORD_BATCH_OVERHEAD]
    batch = whole_batch_at(block, 0, len(EXAMPLE_2_7))
    assert batch.size_in_bytes == len(EXAMPLE_2_7) and not batch.is_complete
    assert whole_batch_at(block, 0, len(EXAMPLE_2_7) - 1) is None


@pytest.mark.parametrize("codec", list(CompressionType))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_damaged_batches_raise_only_record_errors(codec, data):
    """Whatever the damage, reading raises CorruptRecordError/InvalidRecordError, never an
    IndexError, struct.error or a compression library's own exception."""
    values = [b"value %d " % i * (i % 5) for i in range(30)]
    keys = [None if i % 3 else b"key-%d" % i for i in range(30)]
    headers = [[("h", b"x")] if i % 4 == 0 else [] for i in range(30)]
    good = bytearray(build_batch(0, values, keys, [TS + i * 1000 for i in range(30)], headers,
                                 codec=codec))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(21, len(good) - 1))
        good[position] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(21, len(good)))
    damaged = bytes(good[:cut])
    try:
        batch = RecordBatch(damaged)
        records = batch.records()
    except (CorruptRecordError, InvalidRecordError):
        return
    assert len(records) == batch.records_count


def test_record_at_finds_each_record_and_reports_gaps():
    values = [b"v%d" % i * (i % 7) for i in range(300)]
    for codec in (CompressionType.NONE, CompressionType.ZSTD):
        data = build_batch(1000, values, None, 1700000000000, codec=codec)
        batch = RecordBatch(data)
        assert [batch.record_at(1000 + i) for i in range(300)] == batch.records()
        assert batch.record_at(999) is None and batch.record_at(1300) is None
    deltas = [0, 3, 4, 10]
    data = build_batch(50, [b"a", b"b", b"c", b"d"], None, 5, offset_deltas=deltas)
    batch = RecordBatch(data)
    assert [batch.record_at(50 + d).value for d in deltas] == [b"a", b"b", b"c", b"d"]
    assert all(batch.record_at(50 + d) is None for d in (1, 2, 5, 9, 11))


def test_record_at_rejects_records_running_past_the_batch():
    data = bytearray(build_batch(0, [b"x" * 50] * 3, None, 5))
    del data[-20:]
    struct.pack_into(">i", data, 8, len(data) - 12)
    with pytest.raises(CorruptRecordError):
        RecordBatch(bytes(data)).record_at(2)


def test_first_record_from_time_is_searchfortimestamp():
    timestamps = [500, 300, 800, 800, 200, 900]
    data = build_batch(10, [b"v%d" % i for i in range(6)], None, timestamps)
    batch = RecordBatch(data)
    for target in range(0, 1000, 50):
        for min_offset in (10, 12, 15):
            expected = next((r for r in batch.records()
                             if r.timestamp >= target and r.offset >= min_offset), None)
            assert batch.first_record_from_time(target, min_offset) == expected
    appended = RecordBatch(build_batch(0, [b"a", b"b"], None, [5, 7],
                                       timestamp_type=TimestampType.LOG_APPEND_TIME,
                                       log_append_time=1000))
    assert appended.first_record_from_time(900, 0).offset == 0  # every record reads as 1000
    assert appended.first_record_from_time(1001, 0) is None


def test_last_sequence_at_the_wrap_and_without_a_producer():
    """DefaultRecordBatch.incrementSequence at its boundaries (DefaultRecordBatchTest)."""
    def last_sequence(base_sequence, records):
        return RecordBatch(build_batch(0, [b"a"] * records, None, TS, producer_id=7,
                                       producer_epoch=0, base_sequence=base_sequence)).last_sequence
    assert last_sequence(0, 3) == 2
    assert last_sequence((1 << 31) - 3, 3) == (1 << 31) - 1  # reaches Integer.MAX_VALUE
    assert last_sequence((1 << 31) - 2, 3) == 0  # one past it wraps to 0
    assert last_sequence(-1, 3) == -1  # NO_SEQUENCE stays


def test_batch_at_picks_the_class_by_the_magic():
    legacy = bytearray(EXAMPLE_2_7)
    legacy[MAGIC_OFFSET] = 1
    assert type(batch_at(EXAMPLE_2_7)) is RecordBatch
    assert type(batch_at(b"\x00" + bytes(legacy), 1)) is LegacyRecordBatch
    assert batch_at(b"\x00" + EXAMPLE_2_7, 1).base_offset == 0


# -- the errors' words and the edges mutation testing found unpinned ---------------------


def test_a_short_header_says_where_and_how_many_bytes():
    buf = bytes(10) + EXAMPLE_2_7[:30]
    with pytest.raises(CorruptRecordError, match=r"^record batch header at position 10 needs 61 "
                                                 r"bytes, only 30 available$"):
        RecordBatch(buf, 10)
    with pytest.raises(CorruptRecordError, match=r"only 0 available$"):
        RecordBatch(buf, 45)  # past the end: none, not a negative count


def test_a_short_header_reads_its_magic_only_when_the_byte_is_there():
    legacy = bytes(7) + EXAMPLE_2_7[:16] + b"\x01" + EXAMPLE_2_7[17:30]
    with pytest.raises(InvalidRecordError, match=r"^record batch at position 7 has magic 1; "
                                                 r"only magic 2 is read here$"):
        RecordBatch(legacy, 7)  # 17 bytes from the header: the magic is there
    with pytest.raises(CorruptRecordError, match="only 16 available"):
        RecordBatch(legacy[:7 + 16], 7)  # 16: it is not


def test_a_whole_header_of_another_magic_names_it_and_its_position():
    edited = bytes(3) + EXAMPLE_2_7[:16] + b"\x03" + EXAMPLE_2_7[17:]
    with pytest.raises(InvalidRecordError, match=r"^record batch at position 3 has magic 3;"):
        RecordBatch(edited, 3)


def test_batch_at_dispatches_on_a_magic_only_when_the_byte_is_there():
    buf = bytes(10) + EXAMPLE_2_7[:10]
    with pytest.raises(CorruptRecordError, match="at position 10 needs 61 bytes, only 10"):
        batch_at(buf, 10)
    with pytest.raises(CorruptRecordError, match="only 16 available"):
        batch_at(EXAMPLE_2_7[:16])


def test_a_truncated_batch_names_its_offset_for_its_crc_and_its_records():
    batch = build_batch(42, [b"a" * 50], None, TS)
    cut = RecordBatch(batch[:-10])
    for read in (cut.ensure_valid, cut.records):
        with pytest.raises(CorruptRecordError, match=rf"^record batch at offset 42 is truncated: "
                                                     rf"{len(batch)} bytes declared, "
                                                     rf"{len(batch) - 10} available$"):
            read()


def test_a_one_record_batch_is_found_by_offset_and_by_time():
    one = RecordBatch(build_batch(7, [b"v"], [b"k"], TS))
    assert (one.record_at(7).offset, one.record_at(7).value) == (7, b"v")
    found = one.first_record_from_time(TS, 0)
    assert (found.offset, found.timestamp) == (7, TS)


def test_add_to_takes_every_record_by_default_and_none_of_an_empty_batch():
    from storage.records.columns import ColumnBuilder, RecordColumns

    builder = ColumnBuilder(False)
    assert RecordBatch(build_batch(0, [b"a", b"b"], None, TS)).add_to(builder) == 2
    columns = RecordColumns(False, builder)
    assert columns.to_arrow().column("offset").to_pylist() == [0, 1]
    empty = bytearray(build_batch(5, [b"a"], None, TS))
    struct.pack_into(">i", empty, 57, 0)  # recordsCount 0: the cleaner's empty batch
    assert RecordBatch(with_crc(bytes(empty))).add_to(builder) == 0


def test_whole_batch_at_says_the_record_size_below_the_least_overhead():
    tiny = EXAMPLE_2_7[:8] + struct.pack(">i", 10) + EXAMPLE_2_7[12:]
    with pytest.raises(CorruptRecordError, match=r"^Found record size 10 smaller than minimum "
                                                 r"record overhead \(14\) at position 0$"):
        whole_batch_at(tiny)


@pytest.mark.parametrize("kwargs, words", [
    ({"values": []}, r"^a record batch needs at least one record$"),
    ({"values": [b"a"], "keys": [b"k", b"k"]}, r"^keys has 2 entries for 1 values$"),
    ({"values": [b"a"], "headers": []}, r"^headers has 0 entries for 1 values$"),
    ({"values": [b"a"], "offset_deltas": [0, 1]}, r"^offset_deltas has 2 entries for 1 values$"),
    ({"values": [b"a", b"b"], "timestamps": [TS]}, r"^timestamps has 1 entries for 2 values$"),
    ({"values": [b"a"], "timestamps": -2}, r"^Invalid negative timestamp -2$"),
    ({"values": [b"a"], "timestamp_type": TimestampType.LOG_APPEND_TIME},
     r"^a LogAppendTime batch needs log_append_time$"),
    ({"values": [b"a"], "timestamp_type": TimestampType.NO_TIMESTAMP_TYPE},
     r"^TimestampType must be set for magic >= 0$"),
    ({"values": [b"a", b"b"], "last_offset_delta": 0},
     r"^last_offset_delta 0 is below the last record's 1$"),
    ({"values": [b"a"], "last_offset_delta": 1 << 31},
     r"^offset delta 2147483648 does not fit in an int32$"),
    ({"values": [b"a", b"b"], "offset_deltas": [3, 3]},
     r"^Illegal offset delta 3 following 3 \(offsets must increase monotonically\)$"),
    ({"values": [b"a"], "producer_epoch": 1 << 15}, r"^batch header field out of range: "),
])
def test_build_refuses_in_words(kwargs, words):
    with pytest.raises(ValueError, match=words):
        build_batch(0, **{"timestamps": TS, **kwargs})


def test_the_last_offset_delta_may_be_the_largest_int32():
    batch = RecordBatch(build_batch(0, [b"a"], None, TS, last_offset_delta=(1 << 31) - 1))
    assert batch.last_offset == (1 << 31) - 1


def test_seal_batch_sets_only_the_attributes_asked():
    from storage.records import encode_records
    from storage.records.batch import seal_batch

    records = encode_records([b"a"], None, [0], None, None)
    plain = RecordBatch(seal_batch(records, 1, 0, TS, TS, 0))
    assert plain.attributes == 0
    flagged = RecordBatch(seal_batch(records, 1, 0, TS, TS, 0, codec=CompressionType.GZIP,
                                     log_append=True, is_transactional=True,
                                     delete_horizon=True))
    assert flagged.attributes == 0x01 | 0x08 | 0x10 | 0x40
    assert flagged.is_transactional and flagged.has_delete_horizon and not flagged.is_control_batch
    assert flagged.timestamp_type == TimestampType.LOG_APPEND_TIME
    control = RecordBatch(seal_batch(records, 1, 0, TS, TS, 0, is_control=True))
    assert control.attributes == 0x20


def test_the_compression_level_reaches_the_codec():
    values = [b'{"order": %d, "item": "widget-%d", "qty": %d}' % (i, i * 7 % 13, i % 5)
              for i in range(2000)]
    fast = build_batch(0, values, None, TS, codec=CompressionType.GZIP, level=1)
    best = build_batch(0, values, None, TS, codec=CompressionType.GZIP, level=9)
    assert len(best) < len(fast)
    assert [r.value for r in RecordBatch(fast).records()] == values
    assert [r.value for r in RecordBatch(best).records()] == values


def test_assign_offsets_and_log_append_time_stamp_the_batch_where_it_is():
    from storage.records import assign_offsets, set_log_append_time

    first = build_batch(0, [b"x"], None, TS)
    second = build_batch(0, [b"a", b"b"], [b"k", None], [TS + 5, TS + 9],
                         codec=CompressionType.LZ4, producer_id=9, producer_epoch=1,
                         base_sequence=0, is_transactional=True)
    buf = bytearray(first + second)
    pos = len(first)
    assign_offsets(buf, pos, 1000, 7)
    set_log_append_time(buf, pos, TS + 100)
    assert bytes(buf[:pos]) == first  # the batch before it untouched
    batch = RecordBatch(buf, pos)
    batch.ensure_valid()  # the CRC recomputed over the new attributes and max timestamp
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (1000, 1001, 7)
    assert batch.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert batch.max_timestamp == TS + 100 and batch.base_timestamp == TS + 5
    assert batch.compression_type == CompressionType.LZ4 and batch.is_transactional
    assert [(r.offset, r.timestamp, r.key) for r in batch.records()] == [
        (1000, TS + 100, b"k"), (1001, TS + 100, None)]
