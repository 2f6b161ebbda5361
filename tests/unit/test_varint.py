"""Zigzag varints/varlongs against the examples of the format reference (§2.4) and Kafka's
ByteUtils rules (5/10 bytes at most, Java wrap-around)."""

import pytest
from hypothesis import given, settings, strategies as st
from kafka.record.util import decode_varint as kp_decode_varint, encode_varint as kp_encode_varint

from storage.errors import CorruptRecordError
from storage.records.varint import (
    decode_varint,
    decode_varlong,
    encode_varint,
    encode_varlong,
    size_of_varint,
    size_of_varlong,
)

INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
INT64 = st.integers(-(1 << 63), (1 << 63) - 1)

# §2.4 of the format reference.
REFERENCE_EXAMPLES = [
    (0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (64, "8001"),
    (300, "d804"), (-300, "d704"),
]


@pytest.mark.parametrize("n, hexed", REFERENCE_EXAMPLES)
def test_reference_examples(n, hexed):
    assert encode_varint(n).hex() == hexed
    assert encode_varlong(n).hex() == hexed
    assert decode_varint(bytes.fromhex(hexed)) == (n, len(hexed) // 2)
    assert decode_varlong(bytes.fromhex(hexed)) == (n, len(hexed) // 2)


def test_int32_extremes():
    # zigzag(MAX) = 0xfffffffe, zigzag(MIN) = 0xffffffff: five bytes, the last 0x0f
    assert encode_varint((1 << 31) - 1).hex() == "feffffff0f"
    assert encode_varint(-(1 << 31)).hex() == "ffffffff0f"
    assert decode_varint(bytes.fromhex("feffffff0f")) == ((1 << 31) - 1, 5)
    assert decode_varint(bytes.fromhex("ffffffff0f")) == (-(1 << 31), 5)


def test_int64_extremes():
    assert encode_varlong((1 << 63) - 1).hex() == "feffffffffffffffff01"
    assert encode_varlong(-(1 << 63)).hex() == "ffffffffffffffffff01"
    assert decode_varlong(bytes.fromhex("feffffffffffffffff01")) == ((1 << 63) - 1, 10)
    assert decode_varlong(bytes.fromhex("ffffffffffffffffff01")) == (-(1 << 63), 10)


def test_out_of_range_values_are_refused():
    with pytest.raises(ValueError):
        encode_varint(1 << 31)
    with pytest.raises(ValueError):
        encode_varint(-(1 << 31) - 1)
    with pytest.raises(ValueError):
        encode_varlong(1 << 63)


def test_decode_at_position_and_from_memoryview():
    buf = memoryview(b"\xaa\xd8\x04\x01")
    assert decode_varint(buf, 1) == (300, 3)
    assert decode_varint(buf, 3) == (-1, 4)


def test_over_long_varint_rejected():
    # a fifth byte with the continuation bit set: ByteUtils.readVarint throws
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x80\x80\x80\x80\x80\x00")
    with pytest.raises(CorruptRecordError):
        decode_varlong(b"\x80" * 10 + b"\x00")


def test_varint_running_off_the_buffer_rejected():
    for buf in (b"", b"\x80", b"\xff\xff"):
        with pytest.raises(CorruptRecordError):
            decode_varint(buf)
        with pytest.raises(CorruptRecordError):
            decode_varlong(buf)
    with pytest.raises(CorruptRecordError):
        decode_varint(b"\x00\x01", 2)


def test_decoding_wraps_like_java():
    # 0x7f in the fifth byte sets bits 28-34; Java's int keeps bits 28-31, giving 0xfffffffe,
    # whose zigzag value is Integer.MAX_VALUE.
    assert decode_varint(bytes.fromhex("feffffff7f")) == ((1 << 31) - 1, 5)


@settings(deadline=None)
@given(INT32)
def test_varint_round_trip(n):
    encoded = encode_varint(n)
    assert decode_varint(encoded + b"\xff") == (n, len(encoded))
    assert size_of_varint(n) == len(encoded) <= 5


@settings(deadline=None)
@given(INT64)
def test_varlong_round_trip(n):
    encoded = encode_varlong(n)
    assert decode_varlong(b"\x00" + encoded, 1) == (n, len(encoded) + 1)
    assert size_of_varlong(n) == len(encoded) <= 10


@settings(deadline=None)
@given(INT32)
def test_varint_matches_kafka_python(n):
    out = bytearray()
    kp_encode_varint(n, out.append)
    assert encode_varint(n) == bytes(out)
    assert kp_decode_varint(encode_varint(n), 0)[0] == n


def test_errors_say_which_kind_where_and_why():
    """A corrupt record's message is all `kfs verify` and the mount's log show of it."""
    with pytest.raises(CorruptRecordError, match=r"^varint at position 1 is longer than 5 bytes$"):
        decode_varint(b"\x00" + b"\x80" * 5 + b"\x00", 1)
    with pytest.raises(CorruptRecordError, match=r"^varlong at position 0 is longer than 10 "):
        decode_varlong(b"\x80" * 11)
    with pytest.raises(CorruptRecordError,
                       match=r"^varint at position 2 runs off the end of the buffer$"):
        decode_varint(b"\x00\x00\x80", 2)
    with pytest.raises(CorruptRecordError, match=r"^varlong at position 0 runs off the end"):
        decode_varlong(b"\xff" * 9)
    with pytest.raises(ValueError, match=r"^varint out of int32 range: 2147483648$"):
        encode_varint(1 << 31)
    with pytest.raises(ValueError, match=r"^varlong out of int64 range: -9223372036854775809$"):
        encode_varlong(-(1 << 63) - 1)
