"""The Spark source's schema: Spark's ``KafkaRecordToRowConverter`` columns, in pyspark's types
alone, so that Spark's processes that only look the source up or ask for its schema load nothing
of pyarrow or the engine (``kfs.spark.reader`` reads)."""

from __future__ import annotations

from pyspark.sql import types as T

__all__ = ["spark_schema"]

# every field nullable, as Spark's Kafka source has them
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
