"""What the fuzz targets check, shared by fuzz_batch.py and fuzz_segment.py.

The rule under test: bytes from anywhere (a broker's segment, a client's batch, a damaged disk)
either decode or raise CorruptRecordError / InvalidRecordError. Any other exception is a
finding, and so is a disagreement between two decoders of the same bytes:

* ``records()`` and ``RecordColumns`` (the Arrow path) must fail together or give the same rows;
* ``record_at`` / ``first_record_from_time`` (which skim) must answer as a scan of ``records()``;
* ``iter_batches`` must walk the batch boundaries ``segment.batch_ends`` finds, and
  ``SegmentScan`` (recovery's and verify's walk) consume exactly the leading v2 batches;
* ``encode_lines`` must encode exactly what ``encode_records`` does for the same lines;
* every Arrow batch built, even after an error mid-batch, must pass ``validate(full=True)``;
* a values_text ``ColumnBuilder.add_run`` (the streams' GIL-free loop) must give the same text,
  consumed bytes and error as the same run taken batch by batch.

Inputs are copied into exactly-sized buffers, so that under AddressSanitizer (scripts/fuzz.sh
with PYTHONMALLOC=malloc) a read one byte past the end is caught.
"""

from __future__ import annotations

import ctypes
import struct
import zlib

import pyarrow as pa
from crc32c import crc32c

from storage.errors import CorruptRecordError, InvalidRecordError
from storage import segment
from storage.records import batch as batch_codec
from storage.records.batch import RecordBatch, batch_at, iter_batches
from storage.records.columns import ColumnBuilder, RecordColumns
from storage.records.compression import decompress
from storage.records.varint import size_of_varint

EXPECTED = (CorruptRecordError, InvalidRecordError)
_END = (1 << 63) - 1  # RecordColumns.add_batch's default end, and the largest int64
_LENGTH = struct.Struct(">i")


def exact(data: bytes) -> memoryview:
    """``data`` in a buffer of exactly its size (malloc'd by ctypes: ASan-visible bounds)."""
    return memoryview((ctypes.c_ubyte * len(data)).from_buffer_copy(data)).cast("B")


def attempt(fn, *args):
    """``fn(*args)``, or None when it raises one of the errors malformed bytes may raise."""
    try:
        return fn(*args)
    except EXPECTED:
        return None


# -- one batch ----------------------------------------------------------------------------


def fuzz_batch(data: bytes) -> None:
    """Target body: ``data`` as one batch (any magic), then as console-producer lines."""
    try:
        batch = batch_at(exact(data), 0)
        if batch.size_in_bytes < len(data):  # cut the slack: the batch ends where ASan looks
            batch = batch_at(exact(data[:batch.size_in_bytes]), 0)
    except EXPECTED:
        batch = None
    if batch is not None:
        check_batch(batch, deep=True)
    check_lines(data)


def check_batch(batch, deep: bool) -> list | None:
    """Decode ``batch`` every way there is and cross-check; returns its records or None."""
    attempt(batch.ensure_valid)
    records = attempt(batch.records)
    columns = RecordColumns(headers=True)
    added = attempt(columns.add_batch, batch)
    table = columns.to_arrow()
    validate(table)
    assert (records is None) == (added is None), f"records() {records is not None}, columns {added}"
    if records is None:
        return None
    expected = [r for r in records if 0 <= r.offset < _END]
    assert added == len(expected) == table.num_rows, (added, len(expected), table.num_rows)
    assert rows(table) == [_row(r) for r in expected]
    if deep:
        check_lookups(batch, records)
    return records


def check_lookups(batch, records: list) -> None:
    """``record_at`` and ``first_record_from_time`` against a scan of ``records``."""
    is_v2 = isinstance(batch, RecordBatch)
    offsets = [r.offset for r in records]
    if all(a < b for a, b in zip(offsets, offsets[1:])):  # a skim assumes increasing offsets
        for r in records[:4] + records[-2:]:
            for offset in (r.offset, min(r.offset + 1, _END)):
                if is_v2:
                    inside = 0 <= offset - batch.base_offset <= batch.last_offset_delta
                else:
                    inside = offset <= batch.offset
                want = next((x for x in records if x.offset == offset), None) if inside else None
                assert batch.record_at(offset) == want, ("record_at", offset)
    sample = records[:3] + records[-2:]
    times = {t for r in sample for t in (r.timestamp, min(r.timestamp + 1, _END))}
    starts = {offsets[0], offsets[len(offsets) // 2]} if offsets else {0}
    header_max = batch.max_timestamp if is_v2 else batch.timestamp
    for timestamp in times | {header_max}:
        for start in starts:
            if (is_v2 and batch.records_count <= 0) or header_max < timestamp:
                want = None
            else:
                want = next((r for r in records
                             if r.timestamp >= timestamp and r.offset >= start), None)
            got = batch.first_record_from_time(timestamp, start)
            assert got == want, ("first_record_from_time", timestamp, start)


def validate(table: pa.RecordBatch) -> None:
    """Arrow's full validation (UTF-8 of header keys included)."""
    table.validate(full=True)


def rows(table: pa.RecordBatch) -> list[tuple]:
    """The table's rows as tuples comparable with :func:`_row`."""
    columns = [table.column(name).to_pylist() for name in table.schema.names]
    return [(*fields, None if hs is None else tuple((h["key"], h["value"]) for h in hs))
            for *fields, hs in zip(*columns)]


def _row(r) -> tuple:
    return (r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, r.headers or None)


# -- a segment's bytes --------------------------------------------------------------------


def fuzz_segment(data: bytes) -> None:
    """Target body: ``data`` as a run of batches, as a segment holds them. Each batch is decoded
    as Record tuples (the first two also every other way), the run into columns at once."""
    buf = exact(data)
    batches, complete = [], True
    try:
        for batch in iter_batches(buf):
            batches.append(batch)
    except EXPECTED:
        complete = False
    positions = [b.position for b in batches]
    ends, stop = segment.batch_ends(buf)
    assert (ends if complete else ends[:len(positions)]) == positions, (ends, positions)
    assert stop <= len(data)
    check_scan(data, buf, ends)
    check_text_run(buf, zlib.crc32(data))
    expected = []
    for i, batch in enumerate(batches):
        records = check_batch(batch, deep=True) if i < 2 else attempt(batch.records)
        if expected is not None and not batch.is_control_batch:
            expected = None if records is None else expected + records
    columns = RecordColumns(headers=True)
    added = attempt(columns.add_batches, iter_batches(buf))
    table = columns.to_arrow()
    validate(table)
    if complete and expected is not None:
        expected = [_row(r) for r in expected if 0 <= r.offset < _END]
        assert added == len(expected) and rows(table) == expected, (added, len(expected))


def check_scan(data: bytes, buf: memoryview, ends: list[int]) -> None:
    """``SegmentScan`` over the run: it takes the v2 batches (size >= 61) up to the first
    other entry or partial batch; its index checks read bytes of the input as index entries."""
    scan = segment.SegmentScan(0, crc32c)
    consumed = scan.scan(buf, 0)
    want = count = 0
    for pos in ends:
        length = _LENGTH.unpack_from(data, pos + 8)[0]
        if data[pos + 16] != 2 or length < 49:
            break
        want, count = pos + 12 + length, count + 1
    assert (consumed, scan.count, scan.valid_end) == (want, count, want), (consumed, want)
    scan.check_offset_index(exact(data[:96]), True)
    scan.check_time_index(exact(data[-120:]), False)
    scan.index_entries(64)
    scan.epoch_starts()
    scan.max_timestamp_and_offset()
    assert segment.SegmentScan(0, crc32c, 0, stop_at_problem=True).scan(buf, 0) <= consumed


def check_text_run(buf: memoryview, h: int) -> None:
    """The run into a values_text builder (keyed or not, a window and a skip drawn from
    ``h``) without the GIL and batch by batch (a CRC function other than the crc32c
    package's makes it take that loop): the same outcome."""
    separator = (None, b"\t")[h & 1]
    start, end = (h >> 1) % 64, (h >> 7) % 4096 or _END
    skip = (lambda producer, base: producer & 1) if h & (1 << 20) else None
    got = []
    for crc in (crc32c, lambda view: crc32c(view)):
        builder = ColumnBuilder(values_text=True, key_separator=separator)
        try:
            consumed = builder.add_run(buf, 0, start, end, crc, decompress, skip)
        except EXPECTED as exc:
            got.append((type(exc), str(exc)))
            continue
        got.append((consumed, *map(bytes, builder.render(False))))
    assert got[0] == got[1], got


# -- console-producer lines ----------------------------------------------------------------


def _body_of(size: int) -> int:
    """A record's body length, from its size with the length varint."""
    return next(b for b in range(max(size - 5, 0), size) if b + size_of_varint(b) == size)


def check_lines(data: bytes) -> None:
    """``encode_lines`` over ``data`` with parameters drawn from its hash, against a plain
    Python split of the lines encoded by ``encode_records``."""
    h = zlib.crc32(data)
    separator = (None, b"\t", b"::", b"")[h & 3]
    max_records = 1 + (h >> 2) % 64
    max_bytes = (h >> 8) % 4096
    pos = (h >> 20) % (len(data) + 1)
    end = len(data) - (h >> 30)
    got = batch_codec.encode_lines(exact(data), pos, end, max_bytes, max_records, separator)
    keys, values, total, longest = [], [], 0, 0
    while pos < end and len(values) < max_records:
        nl = data.find(b"\n", pos, end)
        if nl < 0:
            break
        line = data[pos:nl]
        key = None
        if separator:
            cut = line.find(separator)
            if cut < 0:
                if not values:
                    assert got == (None, -1, pos, 0), got
                    return
                break
            key, line = line[:cut], line[cut + len(separator):]
        size = len(batch_codec.encode_records([line], [key], 0, None, [len(values)]))
        if not values:  # a larger first record's room: its upper bound, as the producer's
            room = max(max_bytes, _body_of(size) + 18)
        elif total + size > room:
            break
        keys.append(key)
        values.append(line)
        total += size
        longest = max(longest, size)
        pos = nl + 1
    section = batch_codec.encode_records(values, keys, 0) if values else b""
    assert got == (section, len(values), pos, longest), (got, len(values), pos, longest)
    if values:
        decoded = batch_codec.decode_records(section, len(values), 0, 0, -1, -1)
        assert [(r.key, r.value) for r in decoded] == list(zip(keys, values))
