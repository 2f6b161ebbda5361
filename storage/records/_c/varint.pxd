# cython: language_level=3
"""Varints as Kafka's ``ByteUtils`` reads and writes them, and the status codes of record
parsing (no exception is raised in ``nogil`` code; the caller turns a status into one)."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t, uint64_t

cdef enum Status:
    OK = 0
    EOF = 1            # bytes ran out (for a record's fields: past its declared size)
    VARINT_LONG = 2    # a varint over 5 bytes
    VARLONG_LONG = 8   # a varlong over 10
    BAD_SIZE = 3       # a record size below 0 or past the section's end
    MISMATCH = 4       # the fields did not end where the record's size says
    HEADERS_NEGATIVE = 5
    HEADERS_TOO_MANY = 6
    HEADER_KEY_NEGATIVE = 7


cdef inline Status read_unsigned(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos,
                                 int max_shift, uint64_t* out) noexcept nogil:
    # LEB128 of at most max_shift / 7 + 1 bytes (ByteUtils.readVarint/readVarlong's loop)
    cdef uint64_t value = 0
    cdef int shift = 0
    cdef Py_ssize_t i = pos[0]
    cdef uint8_t b
    while True:
        if i >= end:
            return EOF
        b = p[i]
        i += 1
        value |= (<uint64_t>(b & 0x7F)) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > max_shift:
            return VARINT_LONG if max_shift == 28 else VARLONG_LONG
    pos[0] = i
    out[0] = value
    return OK


cdef inline Status read_varint(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos,
                               int32_t* out) noexcept nogil:
    # Java's readVarint: at most 5 bytes, bits past 32 dropped, zigzag decoded
    cdef uint64_t u
    cdef uint32_t value
    cdef Status s = read_unsigned(p, end, pos, 28, &u)
    value = <uint32_t>u
    out[0] = <int32_t>((value >> 1) ^ (0u - (value & 1)))
    return s


cdef inline Status read_varlong(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos,
                                int64_t* out) noexcept nogil:
    # Java's readVarlong: at most 10 bytes, bits past 64 dropped, zigzag decoded
    cdef uint64_t value
    cdef Status s = read_unsigned(p, end, pos, 63, &value)
    out[0] = <int64_t>((value >> 1) ^ (0u - (value & 1)))
    return s


cdef inline Py_ssize_t write_varint(uint8_t* p, int64_t n) noexcept nogil:
    # zigzag (varint for int32 values, varlong for int64: the same bytes for the same value)
    cdef uint64_t z = (<uint64_t>n << 1) ^ <uint64_t>(n >> 63)
    cdef Py_ssize_t i = 0
    while z >= 0x80:
        p[i] = <uint8_t>((z & 0x7F) | 0x80)
        z >>= 7
        i += 1
    p[i] = <uint8_t>z
    return i + 1


cdef inline Py_ssize_t varint_size(int64_t n) noexcept nogil:
    cdef uint64_t z = (<uint64_t>n << 1) ^ <uint64_t>(n >> 63)
    cdef Py_ssize_t size = 1
    while z >= 0x80:
        z >>= 7
        size += 1
    return size

