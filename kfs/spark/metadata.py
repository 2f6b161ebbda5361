"""``spark.read.format("kfs").option("subscribe", "__cluster_metadata")``: KRaft's metadata log
as rows, one per metadata record, so that a cluster's history (topic creations, partition and
leader changes, configs, broker registrations) is a query.

Columns: ``offset`` (long), ``timestamp`` (timestamp), ``type`` (``MetadataRecordType``'s name,
``TOPIC_RECORD``), ``apiKey`` (int), ``version`` (int), ``record`` (the record's fields as the
JSON kafka-dump-log --cluster-metadata-decoder prints after ``"data":``) and ``error`` (null, or
why a value did not decode: then ``type``, ``apiKey``, ``version`` and ``record`` are null).
The log's ``.log`` segments are read from ``<path>/__cluster_metadata-0`` (control records are
not metadata records and are left out; a snapshot's records are not read). Batch reads only.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import (
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from storage.log_files import CLUSTER_METADATA_TOPIC as CLUSTER_METADATA

__all__ = ["METADATA_SCHEMA", "ClusterMetadataReader", "is_cluster_metadata", "metadata_rows"]

METADATA_SCHEMA = StructType([
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), False),
    StructField("type", StringType(), True),
    StructField("apiKey", IntegerType(), True),
    StructField("version", IntegerType(), True),
    StructField("record", StringType(), True),
    StructField("error", StringType(), True),
])
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def is_cluster_metadata(options) -> bool:
    """Whether the read subscribes to ``__cluster_metadata`` (alone)."""
    return str(options.get("subscribe", "")).strip() == CLUSTER_METADATA


def metadata_rows(log_dir: str | Path):
    """The rows of ``<log_dir>/__cluster_metadata-0`` (see the module docstring). Raises
    FileNotFoundError when there is no such partition directory."""
    # (the decoder loads only where a read runs: Spark's source lookup and planning processes
    # import this module and need none of it)
    from storage.coordinator.cluster_metadata import (
        MetadataParseError,
        read_metadata_log,
        read_metadata_record,
    )
    from storage.coordinator.dumplog import java_json

    directory = Path(log_dir) / f"{CLUSTER_METADATA}-0"
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: no KRaft metadata log here")
    for offset, timestamp, value in read_metadata_log(directory):
        when = _EPOCH + dt.timedelta(milliseconds=timestamp)
        try:
            record = read_metadata_record(value)
        except MetadataParseError as e:
            yield offset, when, None, None, None, None, str(e)
            continue
        yield (offset, when, record.type_name, record.api_key, record.version,
               java_json(record.data), None)


class ClusterMetadataReader(DataSourceReader):
    """One input partition: the whole metadata log (a cluster's metadata log is small)."""

    def __init__(self, options, schema: StructType):
        if schema != METADATA_SCHEMA:
            raise ValueError("the kfs source over __cluster_metadata has a fixed schema and "
                             f"cannot be set with a custom one: {schema.simpleString()}")
        path = options.get("path")
        if not path:
            raise ValueError("the kfs source needs a path option: the backing directory")
        self.path = path

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(0)]

    def read(self, partition: InputPartition):
        return metadata_rows(self.path)
