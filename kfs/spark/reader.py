"""Records of an offset range as Arrow record batches, in the schema of Spark's Kafka source: a
Spark task opens just the partition it reads, read-only, and reads it with
``kfs.reading.columns.read_log_range`` (the engine's ``LogReader.read_columns``, no pyspark there:
the Python library ``kfs.read`` shares it).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa

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
from .schema import spark_schema  # noqa: F401 - as it was named here

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
