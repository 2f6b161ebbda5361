"""Sans-IO codec of Kafka's record formats: varints, compression framing, record batches
(magic 2) and, read-only, the legacy v0/v1 message formats.

Everything takes and returns bytes/memoryviews; nothing here touches a file.
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
# The batch header's names (offsets, sizes, masks) are imported from storage.records.framing
# only. (RECORD_BATCH_OVERHEAD is still handed on here for storage/log.py and
# storage/batch_planning.py until they import it from there: then this line goes.)
from storage.records.framing import RECORD_BATCH_OVERHEAD
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
