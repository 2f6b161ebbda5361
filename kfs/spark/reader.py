"""Records of an offset range as Arrow record batches, in the schema of Spark's Kafka source.

Executors open just the partition they read, read-only, find the first batch through the offset
index and walk the segments with the engine's codec (``LogSegment.scan_batches`` /
``RecordBatch.records``); control batches are skipped, as consumers never see them. Columns are
built straight from the decoded records, never as per-row tuples.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import types as T

from .offsets import DataLossError, OffsetRange, open_log

# Spark's KafkaRecordToRowConverter schema (every field nullable), and its Arrow form
# (what to_arrow_schema(spark_schema(...), "UTC") gives, which Spark requires exactly).
_SPARK_FIELDS = [
    T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
]
_SPARK_HEADERS = T.StructField("headers", T.ArrayType(T.StructType([
    T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])))
_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_FIELDS = [
    ("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
    ("partition", pa.int32()), ("offset", pa.int64()),
    ("timestamp", pa.timestamp("us", tz="UTC")), ("timestampType", pa.int32()),
]
ARROW_SCHEMA = pa.schema(_FIELDS)
ARROW_SCHEMA_WITH_HEADERS = pa.schema(_FIELDS + [("headers", _HEADER_TYPE)])

ROWS_PER_ARROW_BATCH = 32768


def spark_schema(include_headers: bool) -> T.StructType:
    """The source's schema (with ``headers`` when ``includeHeaders=true``)."""
    return T.StructType(_SPARK_FIELDS + ([_SPARK_HEADERS] if include_headers else []))


def read_range(backing_dir: str, rng: OffsetRange, include_headers: bool,
               fail_on_data_loss: bool = True, read_committed: bool = False,
               rows_per_batch: int = ROWS_PER_ARROW_BATCH) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every data record of ``rng``, in offset order (with
    ``read_committed``, none of aborted transactions and none at or past the last stable
    offset). Raises DataLossError
    when the range starts below the log start offset and ``fail_on_data_loss`` (else the lost
    offsets are skipped); CorruptRecordError for a batch that fails its CRC."""
    log = open_log(backing_dir, rng.topic, rng.partition)
    try:
        start = rng.start
        if start < log.log_start_offset:
            if fail_on_data_loss:
                raise DataLossError(
                    f"offsets {start}..{log.log_start_offset - 1} of {log.name} were deleted "
                    "before they were read; set failOnDataLoss=false to skip them")
            start = log.log_start_offset
        pending, count = [], 0
        for records in log.record_lists(start, rng.end, read_committed, cache=False):
            pending.append(records)
            count += len(records)
            if count >= rows_per_batch:
                yield to_arrow(pending, rng.topic, rng.partition, include_headers)
                pending, count = [], 0
        if count:
            yield to_arrow(pending, rng.topic, rng.partition, include_headers)
    finally:
        log.close()


def to_arrow(record_lists: list[list], topic: str, partition: int,
             include_headers: bool) -> pa.RecordBatch:
    """One Arrow batch (schema ``ARROW_SCHEMA[_WITH_HEADERS]``) of the records, transposed to
    columns in C (``zip``) rather than row by row. Timestamps become microseconds (UTC)."""
    records = [r for rs in record_lists for r in rs] if len(record_lists) > 1 else record_lists[0]
    n = len(records)
    offsets, timestamps, types, keys, values, headers, _ = zip(*records)
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        pc.multiply(pa.array(timestamps, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC")),
        pa.array(types, pa.int32()),
    ]
    schema = ARROW_SCHEMA
    if include_headers:
        columns.append(pa.array(
            [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
            _HEADER_TYPE))
        schema = ARROW_SCHEMA_WITH_HEADERS
    return pa.RecordBatch.from_arrays(columns, schema=schema)
