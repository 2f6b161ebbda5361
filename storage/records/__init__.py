"""Sans-IO codec of Kafka's record formats: varints, compression framing, record batches
(magic 2) and, read-only, the legacy v0/v1 message formats.

Everything takes and returns bytes/memoryviews; nothing here touches a file. The batch
header's names (field offsets, sizes, attribute masks, ``next_batch``) are imported from
``storage.records.framing`` only: neither this package nor ``batch`` hands them on.
"""

from storage.records.batch import (
    RecordBatch,
    assign_offsets,
    batch_at,
    build_batch,
    encode_line_batches,
    encode_lines,
    encode_records,
    iter_batches,
    seal_batch,
    set_log_append_time,
    whole_batch_at,
)
from storage.records.compression import CompressionType, compress, decompress
from storage.records.legacy import LegacyRecordBatch
from storage.records.record import Record, TimestampType
from storage.records.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

__all__ = [
    "CompressionType",
    "LegacyRecordBatch",
    "Record",
    "RecordBatch",
    "TimestampType",
    "assign_offsets",
    "batch_at",
    "build_batch",
    "compress",
    "decode_varint",
    "decode_varlong",
    "decompress",
    "encode_line_batches",
    "encode_lines",
    "encode_records",
    "encode_varint",
    "encode_varlong",
    "iter_batches",
    "seal_batch",
    "set_log_append_time",
    "size_of_varint",
    "size_of_varlong",
    "whole_batch_at",
]
