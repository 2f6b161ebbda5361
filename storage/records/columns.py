"""Records as columns: what bulk readers (the Spark source, stream views) take instead of one
Python object per record.

The compiled codec decodes records sections straight into buffers in Arrow's layouts
(``ColumnBuilder``, the compiled twin ``storage.records._c.columns``); :meth:`RecordColumns.to_arrow` wraps them with
``pa.Array.from_buffers``, without copying them and without a per-record Python object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import pyarrow as pa
from crc32c import crc32c

from storage.records.batch import RecordBatch
from storage.records.compression import decompress
from storage.records.framing import Framed, next_batch
from storage.records.legacy import LegacyRecordBatch
from storage.records._c.columns import ColumnBuilder

__all__ = ["ColumnBuilder", "RecordColumns", "HEADERS_TYPE", "add_block"]

HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_SCHEMA = [("offset", pa.int64()), ("timestamp", pa.int64()), ("timestamp_type", pa.int32()),
           ("key", pa.binary()), ("value", pa.binary())]


def add_block(builder: ColumnBuilder, block, start: int, end: int, skip=None
              ) -> tuple[int, bool]:
    """Decode the records with offsets in [``start``, ``end``) of the batches at the front of
    ``block`` (a ``storage.segment.BatchBlocks`` block: its first entry is whole) into
    ``builder``: a run of v2 batches in one compiled call (CRC-checked; control batches, and
    transactional ones ``skip(producer_id, base_offset)`` names, left out), else one legacy
    v0/v1 entry in Python. Returns (bytes consumed, whether a batch reached ``end``): (0,
    False) when the block starts with bytes that are not a batch. Raises CorruptRecordError /
    InvalidRecordError."""
    consumed, done = builder.add_run(block, 0, start, end, crc32c, decompress, skip)
    if consumed or done:
        return consumed, done
    framed, size = next_batch(block)
    if framed is not Framed.LEGACY or size > len(block):
        return 0, False
    batch = LegacyRecordBatch(block, 0)
    if batch.base_offset >= end:
        return 0, True
    batch.ensure_valid()
    for r in batch.records():
        if start <= r.offset < end:
            builder.add_record(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, ())
    return size, batch.last_offset >= end - 1


class RecordColumns:
    """A growing set of records as columns: ``offset`` int64, ``timestamp`` int64 (epoch ms),
    ``timestamp_type`` int32 (``TimestampType``), ``key`` and ``value`` binary (null for a null
    key or value) and, with ``headers``, ``headers`` as ``list<struct<key: string, value:
    binary>>`` (null for a record without headers). ``builder``: the ColumnBuilder to decode
    into, when made with other options (a text stream's renderer, ``kfs.record_format``)."""

    def __init__(self, headers: bool = False, builder: ColumnBuilder | None = None):
        self.headers = headers
        self._builder = ColumnBuilder(headers) if builder is None else builder

    @property
    def num_rows(self) -> int:
        return self._builder.num_rows

    @property
    def data_bytes(self) -> int:
        """Bytes of keys and values held so far."""
        return self._builder.data_bytes

    def add_batch(self, batch: RecordBatch | LegacyRecordBatch, start: int = 0,
                  end: int = (1 << 63) - 1) -> int:
        """Add the records of a whole batch with offsets in [``start``, ``end``); returns how
        many. Does not check the CRC. Raises CorruptRecordError / InvalidRecordError."""
        if isinstance(batch, RecordBatch):
            return batch.add_to(self._builder, start, end)
        added = 0
        for r in batch.records():  # legacy v0/v1: rare, decoded in Python
            if start <= r.offset < end:
                self._builder.add_record(r.offset, r.timestamp, r.timestamp_type, r.key,
                                         r.value, r.headers)
                added += 1
        return added

    def add_run(self, buf, start: int = 0, end: int = (1 << 63) - 1, check_crc: bool = True,
                skip: Callable[[int, int], bool] | None = None) -> tuple[int, bool]:
        """Add the records of the whole v2 batches at the front of ``buf`` (bytes of a .log)
        with offsets in [``start``, ``end``), in one compiled call: CRC-checked, control batches
        and transactional batches ``skip(producer_id, base_offset)`` names left out. Returns
        (bytes consumed, whether a batch reached ``end``); it stops early at a partial batch or
        a legacy entry. Raises CorruptRecordError / InvalidRecordError."""
        return self._builder.add_run(buf, 0, start, end, crc32c if check_crc else None,
                                     decompress, skip)

    def add_block(self, block, start: int = 0, end: int = (1 << 63) - 1,
                  skip: Callable[[int, int], bool] | None = None) -> tuple[int, bool]:
        """:func:`add_block` into these columns."""
        return add_block(self._builder, block, start, end, skip)

    def add_batches(self, batches: Iterable[RecordBatch | LegacyRecordBatch], start: int = 0,
                    end: int = (1 << 63) - 1,
                    skip: Callable[[RecordBatch], bool] | None = None) -> int:
        """:meth:`add_batch` for each batch except control batches and those ``skip`` says
        (e.g. aborted transactions); returns the records added."""
        added = 0
        for batch in batches:
            if batch.is_control_batch or skip is not None and skip(batch):
                continue
            added += self.add_batch(batch, start, end)
        return added

    def to_arrow(self) -> pa.RecordBatch:
        """The columns so far as one Arrow record batch (the buffers move, no copy); the
        columns start empty again."""
        built = self._builder.finish()
        n = built["rows"]
        arrays = [
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(built["offset"])]),
            pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(built["timestamp"])]),
            pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(built["timestamp_type"])]),
            _binary(pa.binary(), n, built["key"]),
            _binary(pa.binary(), n, built["value"]),
        ]
        fields = list(_SCHEMA)
        if self.headers:
            arrays.append(_headers(n, *built["headers"]))
            fields.append(("headers", HEADERS_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _validity(buffer, nulls: int):
    return pa.py_buffer(buffer) if nulls else None


def _binary(type_: pa.DataType, n: int, parts) -> pa.Array:
    validity, offsets, data, nulls = parts
    return pa.Array.from_buffers(
        type_, n, [_validity(validity, nulls), pa.py_buffer(offsets), pa.py_buffer(data)],
        null_count=nulls)


def _headers(n: int, validity, offsets, nulls: int, rows: int, keys, values) -> pa.Array:
    entries = pa.StructArray.from_arrays(
        [_binary(pa.string(), rows, keys), _binary(pa.binary(), rows, values)],
        fields=list(HEADERS_TYPE.value_type))
    return pa.Array.from_buffers(
        HEADERS_TYPE, n, [_validity(validity, nulls), pa.py_buffer(offsets)],
        null_count=nulls, children=[entries])
