"""Sans-IO codec of Kafka's record batch format v2: varints, compression framing, batches.

Everything takes and returns bytes/memoryviews; nothing here touches a file.
"""

from storage.records.batch import (
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    RecordBatch,
    assign_offsets,
    build_batch,
    iter_batches,
    set_log_append_time,
)
from storage.records.compression import CompressionType, compress, decompress
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
    "HEADER_STRUCT",
    "LOG_OVERHEAD",
    "MAGIC_OFFSET",
    "RECORD_BATCH_OVERHEAD",
    "CompressionType",
    "Record",
    "RecordBatch",
    "TimestampType",
    "assign_offsets",
    "build_batch",
    "compress",
    "decode_varint",
    "decode_varlong",
    "decompress",
    "encode_varint",
    "encode_varlong",
    "iter_batches",
    "set_log_append_time",
    "size_of_varint",
    "size_of_varlong",
]
