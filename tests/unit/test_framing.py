"""storage.records.framing, the Python side's one framer: next_batch against its compiled twin
(frame.pxd, through the compiled batch_ends), the header's fields and CRC against the
reference's worked example (§2.7) and kafka-python, and next_batch_size as Kafka's
ByteBufferLogInputStream.nextBatchSize."""

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings, strategies as st
from kafka.record.default_records import DefaultRecordBatch

from helpers.records import EXAMPLE_2_7, EXAMPLE_2_8
from storage.errors import CorruptRecordError
from storage.records.batch import build_batch
from storage.records._c.scan import batch_ends
from storage.records.framing import (
    CRC_OFFSET,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    Framed,
    base_offset_at,
    batch_crc_at,
    entry_size,
    is_v2_header,
    last_offset_delta_at,
    next_batch,
    next_batch_size,
    records_count_at,
    stored_crc_at,
)


def with_length(batch: bytes, length: int) -> bytes:
    return batch[:LENGTH_OFFSET] + struct.pack(">i", length) + batch[LOG_OVERHEAD:]


def with_magic(batch: bytes, magic: int) -> bytes:
    return batch[:MAGIC_OFFSET] + bytes([magic]) + batch[MAGIC_OFFSET + 1:]


def test_next_batch_says_what_the_bytes_are():
    size = len(EXAMPLE_2_7)
    assert next_batch(EXAMPLE_2_7) == (Framed.WHOLE, size)
    assert next_batch(b"x" + EXAMPLE_2_7 + b"y", 1) == (Framed.WHOLE, size)
    assert next_batch(EXAMPLE_2_7[:16]) == (Framed.PARTIAL, 0)
    assert next_batch(EXAMPLE_2_7[:17]) == (Framed.PARTIAL, size)
    assert next_batch(EXAMPLE_2_7, 0, size - 1) == (Framed.PARTIAL, size)
    assert next_batch(with_length(EXAMPLE_2_7, 13)) == (Framed.TOO_SMALL, 25)
    assert next_batch(with_length(EXAMPLE_2_7, 40)) == (Framed.SHORT_V2, 52)
    assert next_batch(with_magic(EXAMPLE_2_7, 1)) == (Framed.LEGACY, size)
    assert next_batch(with_magic(EXAMPLE_2_7, 3)) == (Framed.BAD_MAGIC, size)
    # the size first, then the magic: too small whatever the magic; a legacy entry or a bad
    # magic is said even when the entry is not all there (the compiled twin's order)
    assert next_batch(with_magic(with_length(EXAMPLE_2_7, 13), 7))[0] is Framed.TOO_SMALL
    assert next_batch(with_magic(EXAMPLE_2_7, 1)[:20]) == (Framed.LEGACY, size)
    assert next_batch(with_magic(EXAMPLE_2_7, 3)[:20]) == (Framed.BAD_MAGIC, size)


def test_next_batch_in_a_window_of_longer_bytes():
    """``end`` past the buffer: a block of a file whose batch goes on past the block."""
    data = EXAMPLE_2_7 + EXAMPLE_2_8
    block = data[:len(EXAMPLE_2_7) + 20]  # the second batch's first 20 bytes
    at = len(EXAMPLE_2_7)
    assert next_batch(block, at, len(data)) == (Framed.WHOLE, len(EXAMPLE_2_8))
    assert next_batch(block, at, len(data) - 1) == (Framed.PARTIAL, len(EXAMPLE_2_8))
    assert next_batch(block, at) == (Framed.PARTIAL, len(EXAMPLE_2_8))


def py_batch_ends(buf, pos=0):
    """The compiled batch_ends, walked with the Python next_batch."""
    positions = []
    while pos + LOG_OVERHEAD <= len(buf):
        framed, size = next_batch(buf, pos)
        if framed in (Framed.PARTIAL, Framed.TOO_SMALL) or size > len(buf) - pos:
            break
        positions.append(pos)
        pos += size
    return positions, pos


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([EXAMPLE_2_7, EXAMPLE_2_8, with_magic(EXAMPLE_2_7, 1),
                                 with_magic(EXAMPLE_2_8, 5), with_length(EXAMPLE_2_7, 30),
                                 with_length(EXAMPLE_2_8, 13), b"\x00" * 30]), max_size=6),
       st.integers(0, 200), st.binary(max_size=3))
def test_next_batch_walks_as_its_compiled_twin(pieces, cut, junk):
    data = b"".join(pieces)
    data = data[:max(len(data) - cut, 0)] + junk
    assert py_batch_ends(data) == batch_ends(data)


def test_header_fields_of_the_reference_example():
    buf = b"\xff" * 5 + EXAMPLE_2_8  # §2.8: a COMMIT marker at offset 5, one record
    kp = DefaultRecordBatch(bytearray(EXAMPLE_2_8))
    assert entry_size(buf, 5) == len(EXAMPLE_2_8)
    assert base_offset_at(buf, 5) == kp.base_offset == 5
    assert records_count_at(buf, 5) == 1
    assert last_offset_delta_at(buf, 5) == 0
    assert stored_crc_at(buf, 5) == kp.crc == 0xA1AC499F
    assert stored_crc_at(EXAMPLE_2_7) == 0xE99B8DD8


def test_batch_crc_is_over_bytes_21_to_the_end():
    buf = b"\x01\x02" + EXAMPLE_2_7 + b"\x03"
    assert batch_crc_at(buf, 2) == stored_crc_at(buf, 2) == crc32c(EXAMPLE_2_7[21:])
    assert batch_crc_at(EXAMPLE_2_7) == batch_crc_at(EXAMPLE_2_7, 0, len(EXAMPLE_2_7))
    # the CRC field and what comes before it are not covered; everything after is
    outside = bytearray(EXAMPLE_2_7)
    outside[CRC_OFFSET] ^= 0xFF
    outside[12] ^= 0xFF  # partitionLeaderEpoch
    assert batch_crc_at(outside) == stored_crc_at(EXAMPLE_2_7)
    damaged = bytearray(EXAMPLE_2_7)
    damaged[-1] ^= 0x01
    assert batch_crc_at(damaged) != stored_crc_at(damaged)


def test_is_v2_header():
    assert is_v2_header(EXAMPLE_2_7) and is_v2_header(b"\x00" + EXAMPLE_2_8, 1)
    assert is_v2_header(EXAMPLE_2_7[:RECORD_BATCH_OVERHEAD])  # the batch may run past
    assert not is_v2_header(EXAMPLE_2_7[:RECORD_BATCH_OVERHEAD - 1])
    assert not is_v2_header(with_magic(EXAMPLE_2_7, 1))
    assert not is_v2_header(with_magic(EXAMPLE_2_7, 3))
    assert not is_v2_header(with_length(EXAMPLE_2_7, 40))  # smaller than its own header
    assert not is_v2_header(with_length(EXAMPLE_2_7, 13))


def test_next_batch_size_as_byte_buffer_log_input_stream():
    size = len(EXAMPLE_2_7)
    assert next_batch_size(EXAMPLE_2_7[:11]) is None
    assert next_batch_size(EXAMPLE_2_7[:16]) is None  # a size that can be right, no magic yet
    assert next_batch_size(EXAMPLE_2_7[:17]) == size
    assert next_batch_size(b"\x00" + EXAMPLE_2_7, 1) == size
    assert next_batch_size(with_magic(EXAMPLE_2_7, 1)[:20]) == size  # any magic: the reader's
    with pytest.raises(CorruptRecordError, match="less than the minimum record overhead"):
        next_batch_size(with_length(EXAMPLE_2_7, 13)[:12])  # refused from 12 bytes on
    with pytest.raises(CorruptRecordError, match="exceeds the largest allowable message size"):
        next_batch_size(EXAMPLE_2_7[:12], 0, size - LOG_OVERHEAD - 1)
    assert next_batch_size(EXAMPLE_2_7, 0, size - LOG_OVERHEAD) == size
    with pytest.raises(CorruptRecordError):
        next_batch_size(with_length(EXAMPLE_2_7, -1))


def test_header_fields_at_the_start_by_default_and_inside_longer_bytes():
    batch = build_batch(10, [b"a", b"b", b"c"], timestamps=1, offset_deltas=[0, 2, 5])
    buf = b"\xff" * 7 + batch
    assert (entry_size(batch), base_offset_at(batch), records_count_at(batch),
            last_offset_delta_at(batch)) == (len(batch), 10, 3, 5)
    assert (entry_size(buf, 7), base_offset_at(buf, 7), records_count_at(buf, 7),
            last_offset_delta_at(buf, 7)) == (len(batch), 10, 3, 5)


def test_a_v2_entry_of_exactly_its_header_is_a_batch():
    """61 bytes, no record: the smallest v2 batch (DefaultRecordBatch's
    RECORD_BATCH_OVERHEAD), as the cleaner may leave one."""
    header = with_length(EXAMPLE_2_7, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD)[:RECORD_BATCH_OVERHEAD]
    assert next_batch(header) == (Framed.WHOLE, RECORD_BATCH_OVERHEAD)
    assert is_v2_header(header)
    assert next_batch(with_length(header, RECORD_BATCH_OVERHEAD - LOG_OVERHEAD - 1)) == (
        Framed.SHORT_V2, RECORD_BATCH_OVERHEAD - 1)


def test_is_v2_header_counts_the_bytes_after_the_position():
    assert not is_v2_header(b"\x00" * 5 + EXAMPLE_2_7[:RECORD_BATCH_OVERHEAD - 1], 5)
    assert is_v2_header(b"\x00" * 5 + EXAMPLE_2_7[:RECORD_BATCH_OVERHEAD], 5)


def test_next_batch_size_at_its_boundaries():
    # the bytes after the position count, not the buffer's length
    assert next_batch_size(b"\x00" * 5 + EXAMPLE_2_7[:11], 5) is None
    assert next_batch_size(b"\x00" * 5 + EXAMPLE_2_7[:16], 5) is None
    # the smallest entry (LegacyRecord.RECORD_OVERHEAD_V0, 14) is framed (13 is refused above)
    assert next_batch_size(with_length(EXAMPLE_2_7, 14)[:17]) == LOG_OVERHEAD + 14
