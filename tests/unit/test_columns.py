"""The compiled codec's column paths against the record path and kafka-python: decoding
batches into Arrow columns (``RecordColumns``), encoding Arrow columns and lines into records
(``encode_arrow``, ``encode_line_batches``), and the column-wise partitioner."""

import array
import itertools
import random

import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import given, strategies as st
from kafka.partitioner.default import murmur2 as oracle_murmur2

from helpers.paths import KAFKA_WRITTEN
from helpers.records import PROPERTY, batches, kp_build, kp_decode
from storage.clock import now_ms
from storage.errors import CorruptRecordError
from storage.isolation import IsolationLevel
from storage.records import (
    CompressionType,
    RecordBatch,
    build_batch,
    encode_line_batches,
    iter_batches,
)
from kfs.spark.partitioner import assign_partitions
from storage.records.batch import encode_arrow
from storage.records.columns import RecordColumns

SPARK_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def as_rows(table: pa.RecordBatch) -> list[tuple]:
    """Column rows in the shape of kafka-python's records (a null header list reads as none)."""
    columns = table.to_pydict()
    headers = columns.get("headers") or [None] * table.num_rows
    return [(o, t, tt, k, v, tuple((h["key"], h["value"]) for h in hs or ()))
            for o, t, tt, k, v, hs in zip(columns["offset"], columns["timestamp"],
                                          columns["timestamp_type"], columns["key"],
                                          columns["value"], headers)]


@pytest.mark.parametrize("codec", list(CompressionType))
@PROPERTY
@given(columns=batches(), split=st.integers(0, 45))
def test_columns_hold_what_kafka_python_reads(codec, columns, split):
    values, keys, timestamps, headers, offsets = columns
    first = kp_build(codec, values, keys, timestamps, headers, offsets)
    second = build_batch(offsets[-1] + 1, values, keys, timestamps, headers, codec=codec,
                         offset_deltas=offsets)
    expected = kp_decode(first) + kp_decode(second)
    for with_headers in (True, False):
        cols = RecordColumns(with_headers)
        assert cols.add_batches(iter_batches(first + second)) == len(expected)
        table = cols.to_arrow()
        table.validate(full=True)
        got = as_rows(table)
        if not with_headers:
            expected_rows = [r[:5] + ((),) for r in expected]
        else:
            expected_rows = expected
        assert got == expected_rows
    # an offset window keeps exactly the records inside it
    start = expected[min(split, len(expected) - 1)][0]
    cols = RecordColumns()
    cols.add_batches(iter_batches(first + second), start, start + 5)
    assert [r[0] for r in as_rows(cols.to_arrow())] == [r[0] for r in expected
                                                        if start <= r[0] < start + 5]


def test_control_batches_and_skipped_batches_give_no_rows():
    from storage.records.control import ControlRecordType, build_control_batch
    data = (build_batch(0, [b"a"], producer_id=7, producer_epoch=0, base_sequence=0,
                        is_transactional=True)
            + build_control_batch(1, 7, 0, ControlRecordType.ABORT, timestamp_ms=now_ms())
            + build_batch(2, [b"b", b"c"]))
    cols = RecordColumns()
    assert cols.add_batches(iter_batches(data), skip=lambda b: b.producer_id == 7) == 2
    assert cols.to_arrow().column("value").to_pylist() == [b"b", b"c"]


def arrow_parts(array: pa.Array):
    validity, offsets, data = array.buffers()[:3]
    return (validity if array.null_count else None, offsets, data, array.offset)


@PROPERTY
@given(columns=batches(), start=st.integers(0, 10))
def test_arrow_columns_encode_as_build_batch(columns, start):
    values, keys, timestamps, headers, _ = columns
    n = len(values)
    start = min(start, n - 1)
    # Spark rows carry real timestamps or null (-> now), never -1
    ts = [max(t, 0) for t in ([timestamps] * n if isinstance(timestamps, int) else timestamps)]
    value_arr = pa.array(values, pa.binary()).slice(start)
    key_arr = None if keys is None else pa.array(keys, pa.binary()).slice(start)
    header_arr = None if headers is None else pa.array(
        [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
        SPARK_HEADERS).slice(start)
    ts_arr = pa.array(ts, pa.int64()).slice(start)
    hdr = None
    if header_arr is not None:
        entries = header_arr.values.flatten()
        hdr = (header_arr.buffers()[0] if header_arr.null_count else None,
               header_arr.buffers()[1], header_arr.offset,
               arrow_parts(entries[0].cast(pa.binary())), arrow_parts(entries[1]))
    records = bytearray(b"before")
    count, first_ts, max_ts = encode_arrow(
        0, n - start, arrow_parts(value_arr), None if key_arr is None else arrow_parts(key_arr),
        hdr, (None, ts_arr.buffers()[1], ts_arr.offset), 0, 1 << 30, records)
    assert count == n - start
    assert (first_ts, max_ts) == (ts[start], max(ts[start:]))
    expected = build_batch(0, values[start:], None if keys is None else keys[start:],
                           ts[start:], None if headers is None else headers[start:])
    assert records == b"before" + RecordBatch(expected).records_section()


@given(st.lists(st.binary(max_size=30).filter(lambda b: b"\n" not in b), min_size=1,
                max_size=200), st.integers(20, 2000))
def test_line_batches_are_build_batch_of_the_lines(lines, room):
    buf = b"".join(line + b"\n" for line in lines)
    out, counts, largest = encode_line_batches(buf, room, 100, 1763811234567, False, 3, crc32c)
    assert sum(counts) == len(lines)
    start = 0
    for data, count in zip(out, counts):
        assert data == build_batch(100 + start, lines[start:start + count], None,
                                   1763811234567, partition_leader_epoch=3)
        # Kafka's producer's rule: records within room, or a larger first record's upper
        # bound (its body, one byte less than it alone for lines this short, and 18 bytes);
        # the next line would not have fitted
        alone = len(build_batch(0, lines[start:start + 1], None, 0)) - 61
        limit = max(room, alone - 1 + 18)
        assert len(data) - 61 <= limit
        if start + count < len(lines):
            assert len(build_batch(0, lines[start:start + count + 1], None, 0)) - 61 > limit
        start += count


def test_partitions_of_keyed_rows_are_kafkas_and_keyless_rows_stick():
    keys = [None if i % 3 == 0 else b"key-%d" % i for i in range(3000)]
    values = [b"v" * 40] * 3000
    parts = array.array("i", [-1] * 3000)

    class Sticky:
        current, bytes, batch_size = 0, 0, 400

        def switch(self):
            self.current = (self.current + random.randrange(1, 5)) % 5
            return self.current

    assign_partitions(3000, arrow_parts(pa.array(keys, pa.binary())),
                      arrow_parts(pa.array(values, pa.binary())), parts, 5, Sticky())
    for key, p in zip(keys, parts):
        if key is not None:
            assert p == (oracle_murmur2(key) & 0x7FFFFFFF) % 5
    keyless = [p for key, p in zip(keys, parts) if key is None]
    assert len(set(keyless)) > 1  # it moved on...
    runs = [len(list(g)) for _, g in itertools.groupby(keyless)]
    assert max(runs) == 10  # ...after 400 bytes of values: 10 rows of 40 bytes


def test_header_keys_that_are_not_utf8_are_replaced_as_records_does():
    ba = bytearray(build_batch(0, [b"v"], None, 5, [[("k\u00e9", b"x")]]))
    at = ba.index("k\u00e9".encode(), 61)
    ba[at + 1] = 0xFF  # a broken UTF-8 sequence, CRC made right again: a writer's bug
    ba[17:21] = crc32c(bytes(ba[21:])).to_bytes(4, "big")
    cols = RecordColumns(headers=True)
    cols.add_batches(iter_batches(bytes(ba)))
    table = cols.to_arrow()
    table.validate(full=True)  # Arrow strings must be valid UTF-8
    (record,) = RecordBatch(bytes(ba)).records()
    assert [(h["key"], h["value"]) for h in table.column("headers")[0].as_py()] == list(record.headers)
    assert "\ufffd" in record.headers[0][0]


def rows_of(log, start, end, isolation, headers):
    """What read_columns gives, and what record_lists gives, as comparable rows."""
    got = [row for table in log.reader.read_columns(start, end, isolation, headers, max_rows=50)
           for row in as_rows(table)]
    want = [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value,
             tuple(r.headers) if headers else ())
            for rs in log.reader.record_lists(start, end, isolation, cache=False) for r in rs]
    return got, want


@pytest.mark.needs_fixture("kafka-written")
@pytest.mark.parametrize("name", ["plain-0", "codecs-0", "compacted-0", "legacy-0", "txn-0"])
@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_read_columns_is_record_lists_on_kafka_written_logs(name, isolation):
    from storage import LogManager
    manager = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        log = manager.get(name)
        leo, rng = log.log_end_offset, random.Random(name)
        windows = [(0, None)] + [tuple(sorted(rng.sample(range(leo + 2), 2))) for _ in range(8)]
        for start, end in windows:
            got, want = rows_of(log, start, end, isolation, True)
            assert got == want, (name, start, end)
            assert got or start >= (end or leo) or not want
    finally:
        manager.close()


def test_read_columns_across_segments_skips_aborted_and_stops_at_the_end(tmp_path):
    from storage import LogConfig
    from storage.log import Log
    from storage.records.control import ControlRecordType, build_control_batch
    (tmp_path / "t-0").mkdir()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig(segment_bytes=4096, batch_size=600))
    for i in range(40):
        log.append([b"plain-%d-%d" % (i, j) for j in range(7)], [b"k"] * 7)
        pid = 100 + i
        log.append_as_leader(build_batch(0, [b"txn-%d" % i] * 3, producer_id=pid,
                                         producer_epoch=0, base_sequence=0,
                                         is_transactional=True))
        marker = ControlRecordType.ABORT if i % 3 else ControlRecordType.COMMIT
        log.append_as_leader(build_control_batch(0, pid, 0, marker, timestamp_ms=now_ms()))
    assert len(log.segments) > 3
    for start, end in [(0, None), (5, 6), (13, 200), (101, 102), (250, 10_000)]:
        for isolation in IsolationLevel:
            got, want = rows_of(log, start, end, isolation, False)
            assert got == want
    values = [v for t in log.reader.read_columns(0, None, IsolationLevel.READ_COMMITTED)
              for v in t.column("value").to_pylist()]
    assert b"txn-3" in values and b"txn-1" not in values  # committed kept, aborted gone
    log.close()


def test_arrow_rows_sealed_in_place_are_build_batchs_transactional_batch():
    from storage.records.batch import seal_in_place
    values = [b"v%d" % i for i in range(50)]
    arr = pa.array(values, pa.binary())
    batch = bytearray(b"an earlier batch")
    count, first_ts, max_ts = encode_arrow(0, 50, arrow_parts(arr), None, None, None,
                                           1763811234567, 1 << 20, batch, 61)
    seal_in_place(batch, 16, count, 0, first_ts, max_ts, 0x10, 77, 0, 5, crc32c)
    assert batch[:16] == b"an earlier batch"
    assert batch[16:] == build_batch(0, values, None, 1763811234567, producer_id=77, producer_epoch=0,
                                base_sequence=5, is_transactional=True)


# -- the legacy path, add_run's options and the builder given: what mutation testing found ---


def legacy_entries(base: int, values: list[bytes], codec: int = 0) -> bytes:
    """v1 log entries as kafka-python's producer writes them: one per record, or (with a
    codec) one wrapper at the last offset around relative inner offsets."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=1, compression_type=codec, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i if codec else base + i, 1_700_000_000_000 + i, b"k%d" % i, value)
    data = bytearray(builder.build())
    if codec:
        data[0:8] = (base + len(values) - 1).to_bytes(8, "big")  # (outside the CRC)
    return bytes(data)


def test_add_block_takes_a_legacy_entry_as_kafka_bounds_it():
    from storage.records.columns import ColumnBuilder, add_block

    data = legacy_entries(10, [b"a", b"b", b"c"])
    size = len(data) // 3
    columns = RecordColumns(False, ColumnBuilder(False))
    assert add_block(columns._builder, data, 0, 1 << 62) == (size, False)
    assert add_block(columns._builder, data, 0, 11) == (size, True)  # its last offset: end - 1
    assert add_block(columns._builder, data, 11, 1 << 62) == (size, False)  # below start: none
    assert add_block(columns._builder, data, 0, 10) == (0, True)  # at end: nothing taken
    assert columns.to_arrow().column("offset").to_pylist() == [10, 10]
    assert add_block(columns._builder, data[:size - 1], 0, 1 << 62) == (0, False)  # cut
    assert add_block(columns._builder, bytes(40), 0, 1 << 62) == (0, False)  # not a batch
    bad = bytearray(data)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        add_block(columns._builder, bytes(bad[2 * size:]), 0, 1 << 62)


def test_add_block_checks_a_v2_run_s_crc():
    from storage.records.columns import add_block

    bad = bytearray(build_batch(0, [b"a"], None, 1000))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        add_block(RecordColumns()._builder, bytes(bad), 0, 1 << 62)


def test_add_batch_takes_a_legacy_wrapper_s_records_in_range():
    from storage.records.legacy import LegacyRecordBatch

    wrapper = LegacyRecordBatch(legacy_entries(0, [b"a", b"b", b"c"], codec=1), 0)
    cols = RecordColumns()
    assert cols.add_batch(wrapper) == 3
    assert cols.add_batch(wrapper, 1, 2) == 1
    rows = cols.to_arrow().to_pylist()
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [
        (0, b"k0", b"a"), (1, b"k1", b"b"), (2, b"k2", b"c"), (1, b"k1", b"b")]
    assert [r["timestamp"] for r in rows] == [1_700_000_000_000 + i for i in (0, 1, 2, 1)]
    assert {r["timestamp_type"] for r in rows} == {0}


def test_add_run_checks_crcs_unless_told_and_skips_what_skip_names():
    plain = build_batch(0, [b"a", b"b"], None, 1000)
    txn = build_batch(2, [b"t"], None, 1000, producer_id=7, producer_epoch=0, base_sequence=0,
                      is_transactional=True, codec=CompressionType.LZ4)
    cols = RecordColumns()
    assert cols.add_run(plain + txn) == (len(plain + txn), False)
    assert cols.add_run(plain + txn, 1, 3, skip=lambda pid, base: pid == 7 and base == 2) == (
        len(plain + txn), True)
    assert cols.to_arrow().column("offset").to_pylist() == [0, 1, 2, 1]
    bad = bytearray(plain)
    bad[plain.rindex(b"b")] = ord("c")  # a value's byte: the CRC no longer holds
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        cols.add_run(bytes(bad))
    assert cols.add_run(bytes(bad), check_crc=False)[0] == len(plain)
    assert cols.to_arrow().column("value").to_pylist() == [b"a", b"c"]


def test_columns_hold_headers_only_when_asked_and_decode_into_the_builder_given():
    from storage.records.columns import ColumnBuilder

    data = build_batch(0, [b"a"], None, 1000, [[("h", b"1")]])
    assert "headers" not in RecordColumns().to_arrow().schema.names
    builder = ColumnBuilder(False)
    cols = RecordColumns(builder=builder)
    cols.add_run(data)
    assert builder.num_rows == 1 and cols.num_rows == 1
    assert cols.add_block(data) == (len(data), False)  # from offset 0 by default
    assert cols.to_arrow().column("offset").to_pylist() == [0, 0]
