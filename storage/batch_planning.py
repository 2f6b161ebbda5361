"""How records given to ``Log.append`` are cut into record batches, as the producer's
``RecordAccumulator`` cuts them into ``ProducerBatch``es: runs whose batches stay within
``batch.size`` bytes (a larger record goes alone), and none over ``max.message.bytes``.

Sizes are bytes of the encoded batch; timestamps epoch ms. Pure functions over the records and
the topic's ``LogConfig``: nothing here touches a file.
"""

from __future__ import annotations

import bisect
import itertools

from storage.config import LogConfig
from storage.errors import RecordTooLargeError
from storage.records import encode_records
from storage.records.framing import RECORD_BATCH_OVERHEAD
from storage.records.varint import size_of_varint

# (records, count, first timestamp, max timestamp): encoded records, offset deltas 0..count-1
Section = tuple[bytes, int, int, int]


def max_batch_bytes(config: LogConfig) -> int:
    """The largest batch the log takes: ``max.message.bytes``, within ``segment.bytes``."""
    return min(config.max_message_bytes, config.segment_bytes)


def plan_batches(values, keys, config: LogConfig) -> list[tuple[int, int]]:
    """Cut the records (``values``, ``keys`` or None) into [start, end) runs whose batches stay
    within ``batch.size``, a larger record alone. Sizes are bounded with the per-record
    overhead of the longest value, so planning stays at C speed. Raises RecordTooLargeError
    when a record alone would exceed ``max.message.bytes``."""
    lengths = list(map(len, values))
    overhead = _overhead_bound(max(lengths).bit_length())
    if keys is not None:
        overhead += max(map(len, filter(None, keys)), default=0) + 5
    limit = max_batch_bytes(config)
    if max(lengths) + overhead + RECORD_BATCH_OVERHEAD > limit:
        _check_record_sizes(values, keys, config)
    ends = list(itertools.accumulate(lengths))
    room = max(min(config.batch_size, limit) - RECORD_BATCH_OVERHEAD, 1)
    indexes = range(len(values))
    chunks, start = [], 0
    while start < len(values):
        before = ends[start - 1] + start * overhead if start else 0
        end = bisect.bisect_right(indexes, before + room, lo=start,
                                  key=lambda i: ends[i] + (i + 1) * overhead)
        end = max(end, start + 1)
        chunks.append((start, end))
        start = end
    return chunks


def record_sections(values, keys, headers, timestamps, now: int,
                    config: LogConfig) -> list[Section]:
    """Records with their own null values, headers or timestamps (None: ``now``) as encoded
    sections of at most ``batch.size`` bytes each (a larger record alone), timestamps as
    deltas from the section's first, as the producer's ``ProducerBatch`` encodes them. Sizes
    are planned per record in Python: exact but for the deltas, bounded at their longest.
    Raises ValueError for a timestamp outside 0..2**63-1."""
    if timestamps is None:
        stamps = [now] * len(values)
    else:
        stamps = [now if t is None else t for t in timestamps]
        if min(stamps) < 0 or max(stamps) >= 1 << 63:
            bad = min(stamps) if min(stamps) < 0 else max(stamps)
            raise ValueError(f"invalid timestamp {bad}: epoch ms from 0 to 2**63 - 1")
    room = max(min(config.batch_size, max_batch_bytes(config)) - RECORD_BATCH_OVERHEAD, 1)
    cuts, used = [0], 0
    for i, value in enumerate(values):
        # the record alone, deltas 0; in a batch its deltas take up to 9 and 4 more bytes
        size = _record_size(None if keys is None else keys[i], value) + \
            (_headers_size(headers[i]) if headers is not None else 0) + 14
        if used + size > room and i > cuts[-1]:
            cuts.append(i)
            used = 0
        used += size
    cuts.append(len(values))
    sections = []
    for start, end in itertools.pairwise(cuts):
        first = stamps[start]
        records = encode_records(
            values[start:end], None if keys is None else keys[start:end],
            [t - first for t in stamps[start:end]],
            None if headers is None else headers[start:end])
        sections.append((records, end - start, first, max(stamps[start:end])))
    return sections


def _check_record_sizes(values, keys, config: LogConfig) -> None:
    limit = max_batch_bytes(config)
    for i, value in enumerate(values):
        key = keys[i] if keys else None
        size = RECORD_BATCH_OVERHEAD + _record_size(key, value)
        if size > limit:
            raise RecordTooLargeError(
                f"the record at line {i + 1} is {size} bytes as a batch, more than"
                f" max.message.bytes={config.max_message_bytes}"
                f" (segment.bytes={config.segment_bytes})"
            )


def _overhead_bound(value_bits: int) -> int:
    """Bytes beyond the value of a keyless, headerless record whose value length has
    ``value_bits`` bits, in a batch stamped with one timestamp (delta 0) and fewer than 2**20
    records (offset delta within 3 bytes)."""
    longest = (1 << value_bits) - 1
    body = 1 + 1 + 3 + 1 + size_of_varint(longest) + longest + 1
    return size_of_varint(body) + body - longest


def _headers_size(headers) -> int:
    """Bytes the headers of a record add beyond the one byte of a header count of 0."""
    if not headers:
        return 0
    size = size_of_varint(len(headers)) - 1
    for key, value in headers:
        klen = len(key.encode("utf-8")) if isinstance(key, str) else len(key)
        size += size_of_varint(klen) + klen
        size += 1 if value is None else size_of_varint(len(value)) + len(value)
    return size


def _record_size(key: bytes | None, value: bytes | None) -> int:
    """Bytes of a one-record batch's record with no headers (offset and timestamp delta 0)."""
    klen = -1 if key is None else len(key)
    vlen = -1 if value is None else len(value)
    body = 1 + 1 + 1 + size_of_varint(klen) + max(klen, 0) + size_of_varint(vlen) + max(vlen, 0) + 1
    return size_of_varint(body) + body
