"""Zigzag varints and varlongs as Kafka writes them (``org.apache.kafka.common.utils.ByteUtils``).

A varint is a 32-bit signed integer, zigzag-mapped to unsigned (``(n << 1) ^ (n >> 31)``) and
written as unsigned LEB128: 7 bits per byte, least-significant group first, bit 7 set on every
byte but the last. A varlong is the same for 64-bit integers. At most 5 bytes for a varint and
10 for a varlong; decoding wraps to 32/64 bits exactly as Java's int/long arithmetic does.

These helpers are for the cold paths and for tests; the batch codec inlines the one-byte case.
"""

from __future__ import annotations

from storage.errors import CorruptRecordError

__all__ = [
    "encode_varint",
    "encode_varlong",
    "decode_varint",
    "decode_varlong",
    "size_of_varint",
    "size_of_varlong",
]

_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _encode_unsigned(z: int) -> bytes:
    out = bytearray()
    while z >= 0x80:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def encode_varint(n: int) -> bytes:
    """Zigzag varint bytes (1..5) of the int32 ``n`` (``ByteUtils.writeVarint``).

    Raises ValueError if ``n`` does not fit in an int32.
    """
    if not _INT32_MIN <= n <= _INT32_MAX:
        raise ValueError(f"varint out of int32 range: {n}")
    return _encode_unsigned((n << 1) ^ (n >> 31))


def encode_varlong(n: int) -> bytes:
    """Zigzag varlong bytes (1..10) of the int64 ``n`` (``ByteUtils.writeVarlong``).

    Raises ValueError if ``n`` does not fit in an int64.
    """
    if not _INT64_MIN <= n <= _INT64_MAX:
        raise ValueError(f"varlong out of int64 range: {n}")
    return _encode_unsigned((n << 1) ^ (n >> 63))


def _decode_unsigned(buf, pos: int, max_bytes: int, what: str) -> tuple[int, int]:
    value = 0
    shift = 0
    start = pos
    try:
        while True:
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if b < 0x80:
                return value, pos
            shift += 7
            if pos - start >= max_bytes:
                raise CorruptRecordError(
                    f"{what} at position {start} is longer than {max_bytes} bytes")
    except IndexError:
        raise CorruptRecordError(
            f"{what} at position {start} runs off the end of the buffer") from None


def decode_varint(buf, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varint at ``buf[pos]`` (``ByteUtils.readVarint``).

    ``buf`` is any indexable byte sequence (bytes, bytearray, memoryview).
    Returns ``(value, position after the varint)``. Raises CorruptRecordError if the varint
    is longer than 5 bytes or runs off the buffer. Bits beyond 32 are dropped, as in Java.
    """
    u, pos = _decode_unsigned(buf, pos, 5, "varint")
    u &= 0xFFFFFFFF
    return (u >> 1) ^ -(u & 1), pos


def decode_varlong(buf, pos: int = 0) -> tuple[int, int]:
    """Decode a zigzag varlong at ``buf[pos]`` (``ByteUtils.readVarlong``).

    Returns ``(value, position after the varlong)``. Raises CorruptRecordError if the varlong
    is longer than 10 bytes or runs off the buffer. Bits beyond 64 are dropped, as in Java.
    """
    u, pos = _decode_unsigned(buf, pos, 10, "varlong")
    u &= 0xFFFFFFFFFFFFFFFF
    return (u >> 1) ^ -(u & 1), pos


def size_of_varint(n: int) -> int:
    """Number of bytes (1..5) ``encode_varint(n)`` produces (``ByteUtils.sizeOfVarint``)."""
    z = ((n << 1) ^ (n >> 31)) & 0xFFFFFFFF
    return max(1, (z.bit_length() + 6) // 7)


def size_of_varlong(n: int) -> int:
    """Number of bytes (1..10) ``encode_varlong(n)`` produces (``ByteUtils.sizeOfVarlong``)."""
    z = ((n << 1) ^ (n >> 63)) & 0xFFFFFFFFFFFFFFFF
    return max(1, (z.bit_length() + 6) // 7)
