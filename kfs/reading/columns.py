"""Records of an offset range as Arrow record batches in the schema of Spark's Kafka source,
without pyspark: shared by the Spark tasks (``kfs.spark.reader``) and the Python library
(``kfs.read``).

The engine finds the first batch through the offset index and decodes the batches straight into
Arrow columns with its compiled codec (``LogReader.read_columns``, called here and nowhere else
in ``kfs``); control batches are skipped, as consumers never see them. No per-record Python
object is made.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from storage.isolation import IsolationLevel
from storage.protocols import PartitionLog
from storage.records.columns import HEADERS_TYPE

from .offsets import DataLossError, OffsetRange



def arrow_scalar(value: int | str, type_: pa.DataType) -> pa.Scalar:
    """``pa.scalar(value, type_)`` (an integer or string type) built from its buffers:
    pyarrow's conversion of a Python object imports pandas on its first call (0.3-1 s of each
    of Spark's Python workers, planners included, which use no pandas)."""
    if pa.types.is_string(type_):
        data = value.encode("utf-8")
        offsets = (0).to_bytes(4, "little") + len(data).to_bytes(4, "little")
        buffers = [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    else:
        buffers = [None, pa.py_buffer(value.to_bytes(type_.bit_width // 8, "little",
                                                     signed=True))]
    return pa.Array.from_buffers(type_, 1, buffers)[0]


_US_PER_MS = arrow_scalar(1000, pa.int64())
_TIMESTAMP = pa.timestamp("us", tz="UTC")
# Spark's KafkaRecordToRowConverter schema in Arrow (what to_arrow_schema(spark_schema(...),
# "UTC") gives, which Spark requires exactly; every field nullable)
_FIELDS = [
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", _TIMESTAMP), ("timestampType", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_FIELDS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema(_FIELDS + [("headers", HEADERS_TYPE)])

ROWS_PER_ARROW_BATCH = 32768


def read_log_range(log: PartitionLog, rng: OffsetRange, include_headers: bool,
                   fail_on_data_loss: bool = True,
                   isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                   rows_per_batch: int = ROWS_PER_ARROW_BATCH,
                   read_ahead: bool = False) -> Iterator[pa.RecordBatch]:
    """Arrow batches (:data:`ARROW_SCHEMA`, or :data:`ARROW_SCHEMA_WITH_HEADERS` with
    ``include_headers``; at most about ``rows_per_batch`` rows each) of every data record of
    ``rng`` in ``log`` (an open partition log), in offset order (``isolation``: with
    read_committed, none of aborted transactions and none at or past the last stable offset).
    Headers are decoded only with ``include_headers``. Raises DataLossError when the range
    starts below the log start offset (retention ran since it was planned) and
    ``fail_on_data_loss`` (else the lost offsets are skipped); CorruptRecordError for a batch
    that fails its CRC. ``read_ahead``: as ``LogReader.decode_range``."""
    start = rng.start
    if start < log.log_start_offset:
        if fail_on_data_loss:
            raise DataLossError(
                f"offsets {start}..{log.log_start_offset - 1} of {log.name} were deleted "
                "before they were read; set failOnDataLoss=false to skip them")
        start = log.log_start_offset
    yield from in_spark_schema(log.reader.read_columns(start, rng.end, isolation,
                                                       include_headers, rows_per_batch,
                                                       read_ahead),
                               rng.topic, rng.partition)


def in_spark_schema(batches: Iterable[pa.RecordBatch], topic: str,
                    partition: int) -> Iterator[pa.RecordBatch]:
    """The engine's record columns of ``topic``-``partition`` (from the log's reader, or
    fetched through the brokers) in Spark's Kafka schema (:func:`to_spark`)."""
    constants = _Constants(topic, partition)
    for columns in batches:
        yield to_spark(columns, constants)


class _Constants:
    """The topic and partition columns of ``n`` rows: slices (no copy) of columns built once at
    the largest length asked so far, so a task builds them about once, not per batch (batches
    are cut at blocks of the log, of every length)."""

    def __init__(self, topic: str, partition: int):
        self.topic, self.partition = topic, partition
        self._columns: tuple[int, pa.Array, pa.Array] = (-1, None, None)

    def columns(self, n: int) -> tuple[pa.Array, pa.Array]:
        if self._columns[0] < n:
            self._columns = (n, pa.repeat(arrow_scalar(self.topic, pa.string()), n),
                             pa.repeat(arrow_scalar(self.partition, pa.int32()), n))
        length, topic, partition = self._columns
        return (topic, partition) if length == n else (topic.slice(0, n), partition.slice(0, n))


def to_spark(columns: pa.RecordBatch, constants: _Constants) -> pa.RecordBatch:
    """The engine's record columns (``storage.records.columns``) in Spark's Kafka schema:
    constant topic and partition columns, timestamps in microseconds (UTC)."""
    n = columns.num_rows
    arrays = [
        columns.column("key"), columns.column("value"),
        *constants.columns(n),
        columns.column("offset"),
        # call_function: pc.multiply's wrapper costs ~10x the multiply itself per call
        pc.call_function("multiply", [columns.column("timestamp"), _US_PER_MS]).view(_TIMESTAMP),
        columns.column("timestamp_type"),
    ]
    if columns.num_columns > 5:
        arrays.append(columns.column("headers"))
        return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA_WITH_HEADERS)
    return pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
