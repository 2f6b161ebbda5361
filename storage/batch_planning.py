"""How records given to ``Log.append`` are cut into record batches, as Kafka's producer cuts
them into ``ProducerBatch``es: a batch takes records while ``MemoryRecordsBuilder.hasRoomFor``
would (its header and the exact size of each record at its offset and timestamp deltas within
``batch.size`` bytes; a larger first record gets room for its upper bound, as
``RecordAccumulator.append`` allocates it), and none is over ``max.message.bytes``. The cuts are
the producer's for uncompressed batches; a compressed batch is cut at its uncompressed size (the
producer's running estimate of the ratio depends on when its sender drains).

Sizes are bytes of the encoded batch; timestamps epoch ms. Pure functions over the records and
the topic's ``LogConfig``: nothing here touches a file.
"""

from __future__ import annotations

import itertools

from storage.config import LogConfig
from storage.errors import RecordTooLargeError
from storage.records import encode_records
from storage.records._c.records import batch_room, plan_cuts
from storage.records.framing import RECORD_BATCH_OVERHEAD
from storage.records.varint import size_of_varint, size_of_varlong

# (records, count, first timestamp, max timestamp): encoded records, offset deltas 0..count-1
Section = tuple[bytes, int, int, int]


def max_batch_bytes(config: LogConfig) -> int:
    """The largest batch the log takes: ``max.message.bytes``, within ``segment.bytes``."""
    return min(config.max_message_bytes, config.segment_bytes)


def _room(config: LogConfig) -> int:
    """Records bytes of a batch of ``batch.size`` (within ``max.message.bytes``) less its
    header."""
    return max(min(config.batch_size, max_batch_bytes(config)) - RECORD_BATCH_OVERHEAD, 1)


def _cap(config: LogConfig) -> int:
    """Records bytes of a batch of ``max.message.bytes`` less its header: the most a batch
    takes, whatever its first record's upper bound (a broker refuses more)."""
    return max_batch_bytes(config) - RECORD_BATCH_OVERHEAD


def plan_batches(values, keys, config: LogConfig) -> list[tuple[int, int]]:
    """Cut records stamped at once (``values``, ``keys`` or None; no headers) into the
    [start, end) runs of the producer's batches (the module's rule, in compiled code). Raises
    RecordTooLargeError when a record alone would exceed ``max.message.bytes``."""
    longest = max(map(len, values))
    if keys is not None:
        longest += max(map(len, filter(None, keys)), default=0)
    # a record's overhead beyond its key and value is at most 32 bytes: check exactly only then
    if longest + RECORD_BATCH_OVERHEAD + 32 > max_batch_bytes(config):
        _check_record_sizes(values, keys, config)
    return plan_cuts(values, keys, _room(config), _cap(config))


def record_sections(values, keys, headers, timestamps, now: int,
                    config: LogConfig) -> list[Section]:
    """Records with their own null values, headers or timestamps (None: ``now``) as encoded
    sections cut as the producer cuts them (the module's rule), timestamps as deltas from the
    section's first, as the producer's ``ProducerBatch`` encodes them. Raises ValueError for a
    timestamp outside 0..2**63-1."""
    if timestamps is None:
        stamps = [now] * len(values)
    else:
        stamps = [now if t is None else t for t in timestamps]
        if min(stamps) < 0 or max(stamps) >= 1 << 63:
            bad = min(stamps) if min(stamps) < 0 else max(stamps)
            raise ValueError(f"invalid timestamp {bad}: epoch ms from 0 to 2**63 - 1")
    room, cap = _room(config), _cap(config)
    cuts, used, limit = [0], 0, room
    for i, value in enumerate(values):
        # the key, value and headers; then the record's deltas from its batch's first
        fields = _fields_size(None if keys is None else keys[i], value,
                              None if headers is None else headers[i])
        start = cuts[-1]
        body = 1 + size_of_varlong(stamps[i] - stamps[start]) + size_of_varint(i - start) + fields
        size = size_of_varint(body) + body
        if i > start and used + size > limit:
            cuts.append(i)
            start, used = i, 0
            body = 3 + fields
            size = size_of_varint(body) + body
        if i == start:
            limit = batch_room(room, body, cap)
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


def _fields_size(key: bytes | None, value: bytes | None, headers) -> int:
    """Bytes of a record's key, value and headers (``DefaultRecord.sizeOf``)."""
    klen = -1 if key is None else len(key)
    vlen = -1 if value is None else len(value)
    return (size_of_varint(klen) + max(klen, 0) + size_of_varint(vlen) + max(vlen, 0) + 1
            + _headers_size(headers))


def _record_size(key: bytes | None, value: bytes | None) -> int:
    """Bytes of a one-record batch's record with no headers (offset and timestamp delta 0)."""
    body = 3 + _fields_size(key, value, None)
    return size_of_varint(body) + body
