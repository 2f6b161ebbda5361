"""Records of an offset range as Arrow record batches, in the schema of Spark's Kafka source: a
Spark task opens just the partition it reads, read-only, and reads it with
``kfs.reading.columns.read_log_range`` (the engine's ``LogReader.read_columns``, no pyspark there:
the Python library ``kfs.read`` shares it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import types as T

from storage.directory import StoreOptions
from storage.isolation import IsolationLevel

from ..reading.columns import (  # noqa: F401 - the schema and converter, also as they were named here
    ARROW_SCHEMA,
    ARROW_SCHEMA_WITH_HEADERS,
    ROWS_PER_ARROW_BATCH,
    arrow_scalar,
    read_log_range,
    to_spark,
)
from ..reading.offsets import OffsetRange, open_log

# Spark's KafkaRecordToRowConverter schema (every field nullable)
_SPARK_FIELDS = [
    T.StructField("key", T.BinaryType()), T.StructField("value", T.BinaryType()),
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("offset", T.LongType()), T.StructField("timestamp", T.TimestampType()),
    T.StructField("timestampType", T.IntegerType()),
]
_SPARK_HEADERS = T.StructField("headers", T.ArrayType(T.StructType([
    T.StructField("key", T.StringType()), T.StructField("value", T.BinaryType())])))


def spark_schema(include_headers: bool) -> T.StructType:
    """The source's schema (with ``headers`` when ``includeHeaders=true``)."""
    return T.StructType(_SPARK_FIELDS + ([_SPARK_HEADERS] if include_headers else []))


def read_range(backing_dir: str, rng: OffsetRange, include_headers: bool,
               fail_on_data_loss: bool = True,
               isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
               rows_per_batch: int = ROWS_PER_ARROW_BATCH, remote_path: str | None = None,
               store: StoreOptions = StoreOptions()) -> Iterator[pa.RecordBatch]:
    """Arrow batches of every data record of ``rng``, in offset order (``isolation``: with
    read_committed, none of aborted transactions and none at or past the last stable
    offset), decoded into columns by the engine (``LogReader.read_columns``). Raises DataLossError
    when the range starts below the log start offset and ``fail_on_data_loss`` (else the lost
    offsets are skipped); CorruptRecordError for a batch that fails its CRC."""
    log = open_log(backing_dir, rng.topic, rng.partition, remote_path, store, fail_on_data_loss)
    try:
        yield from read_log_range(log, rng, include_headers, fail_on_data_loss, isolation,
                                  rows_per_batch)
    finally:
        log.close()
