"""Records for property tests: hypothesis strategies of one batch's columns, and kafka-python
(an implementation independent of this codec) as the oracle of their bytes."""

from __future__ import annotations

import base64

from hypothesis import HealthCheck, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

TS = 1700000000000  # 2023-11-14T22:13:20Z, the reference's example timestamp

# The reference's worked examples (kafka-storage-format.md): §2.7, one record, key "k", value
# "v", ts 1700000000000, leader epoch 0; §2.8, a COMMIT marker at offset 5, producer 1000 epoch
# 0, coordinatorEpoch 0.
EXAMPLE_2_7 = bytes.fromhex(
    "0000000000000000 0000003a 00000000 02 e99b8dd8 0000 00000000"
    "0000018bcfe56800 0000018bcfe56800 ffffffffffffffff ffff ffffffff 00000001"
    "10 00 00 00 02 6b 02 76 00")
EXAMPLE_2_8 = bytes.fromhex(
    "0000000000000005 00000042 00000000 02 a1ac499f 0030 00000000 0000018bcfe56800"
    "0000018bcfe56800 00000000000003e8 0000 ffffffff 00000001 20 00 00 00 08 00000001 0c"
    "000000000000 00")

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys_st = st.one_of(st.none(), st.binary(max_size=20))
values_st = st.one_of(st.none(), st.binary(max_size=300))
header_st = st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=8))),
                     max_size=3)
timestamp_st = st.one_of(st.just(-1), st.integers(0, 1 << 42), st.integers(TS - 10**6, TS + 10**6))


@st.composite
def batches(draw):
    """Columns for one batch: either the common shape (null keys, no headers, one timestamp,
    contiguous offsets) or anything."""
    n = draw(st.integers(1, 40))
    values = draw(st.lists(st.binary(max_size=300), min_size=n, max_size=n))
    if draw(st.booleans()):
        return values, None, draw(timestamp_st), None, list(range(n))
    values = draw(st.lists(values_st, min_size=n, max_size=n))
    keys = draw(st.lists(keys_st, min_size=n, max_size=n))
    timestamps = draw(st.lists(timestamp_st, min_size=n, max_size=n))
    headers = draw(st.lists(header_st, min_size=n, max_size=n))
    gaps = draw(st.lists(st.integers(1, 70_000), min_size=n, max_size=n))
    offsets = [sum(gaps[:i + 1]) - 1 for i in range(n)]
    return values, keys, timestamps, headers, offsets


def kp_build(codec, values, keys, timestamps, headers, offsets) -> bytes:
    builder = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    for i, (value, offset) in enumerate(zip(values, offsets)):
        builder.append(offset, timestamps if isinstance(timestamps, int) else timestamps[i],
                       None if keys is None else keys[i], value,
                       [] if headers is None else headers[i])
    return bytes(builder.build())


def kp_decode(data: bytes) -> list[tuple]:
    """Records as kafka-python's DefaultRecordBatch reads them, after its CRC check."""
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc()
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, tuple(r.headers))
            for r in batch]


def json_bytes(data: bytes | None):
    """The oracle's bytes: a string when UTF-8, ``{"base64": ...}`` otherwise, None for None."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}
