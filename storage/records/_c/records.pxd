# cython: language_level=3
"""One v2 record (``DefaultRecord``), bounds-checked: its fields' positions in a
``RecordView``; ``record_error`` (in ``records.pyx``) turns a status into Kafka's message,
and ``whole_v2_batch`` / ``check_crc`` raise Kafka's errors for a batch that cannot be read."""

from libc.stdint cimport int32_t, int64_t, uint8_t

from storage.records._c.frame cimport Framed

from storage.records._c.varint cimport (
    BAD_SIZE, EOF, HEADER_KEY_NEGATIVE, HEADERS_NEGATIVE, HEADERS_TOO_MANY, MISMATCH, OK, Status,
    read_varint, read_varlong,
)

cdef struct RecordView:
    Py_ssize_t end          # after the record
    int64_t timestamp_delta
    int32_t offset_delta
    Py_ssize_t key_pos
    int32_t key_len         # -1: null
    Py_ssize_t value_pos
    int32_t value_len       # -1: null
    Py_ssize_t headers_pos
    int32_t header_count
    int64_t detail          # what the error message needs (a size, a count)


cdef inline Status read_bytes_field(const uint8_t* p, Py_ssize_t end, Py_ssize_t* pos,
                                    Py_ssize_t* at, int32_t* length) noexcept nogil:
    # varint length then that many bytes; any negative length is null (DefaultRecord.readFrom)
    cdef Status s = read_varint(p, end, pos, length)
    if s != OK:
        return s
    if length[0] < 0:
        length[0] = -1
        return OK
    if length[0] > end - pos[0]:
        return EOF
    at[0] = pos[0]
    pos[0] += length[0]
    return OK


cdef inline Status skim_record(const uint8_t* p, Py_ssize_t section_end, Py_ssize_t* pos,
                               RecordView* r) noexcept nogil:
    """The record at ``pos[0]`` as far as its length, timestamp delta and offset delta (scans
    for one offset or time; the start of :func:`parse_record`); ``pos[0]`` moves past them."""
    cdef int32_t size
    cdef Status s = read_varint(p, section_end, pos, &size)
    if s != OK:
        return s
    r.detail = size
    if size < 0 or size > section_end - pos[0]:
        return BAD_SIZE
    r.end = pos[0] + size
    if pos[0] >= section_end:
        return EOF
    pos[0] += 1  # attributes: unused
    s = read_varlong(p, section_end, pos, &r.timestamp_delta)
    if s == OK:
        s = read_varint(p, section_end, pos, &r.offset_delta)
    return s


cdef inline Status parse_record(const uint8_t* p, Py_ssize_t section_end, Py_ssize_t pos,
                                RecordView* r) noexcept nogil:
    """Parse and bounds-check the whole record at ``pos``. As in DefaultRecord.readFrom,
    fields are read from the section (a record whose fields overrun its declared size fails
    the size check at the end), but never past the section's end."""
    cdef int32_t n
    cdef Py_ssize_t at
    cdef Status s = skim_record(p, section_end, &pos, r)
    if s == OK:
        s = read_bytes_field(p, section_end, &pos, &r.key_pos, &r.key_len)
    if s == OK:
        s = read_bytes_field(p, section_end, &pos, &r.value_pos, &r.value_len)
    if s == OK:
        s = read_varint(p, section_end, &pos, &r.header_count)
    if s != OK:
        return s
    if r.header_count < 0:
        r.detail = r.header_count
        return HEADERS_NEGATIVE
    if r.header_count > section_end - pos:
        r.detail = r.header_count
        return HEADERS_TOO_MANY
    r.headers_pos = pos
    for i in range(r.header_count):
        s = read_varint(p, section_end, &pos, &n)
        if s != OK:
            return s
        if n < 0:
            r.detail = n
            return HEADER_KEY_NEGATIVE
        if n > section_end - pos:
            return EOF
        pos += n
        s = read_bytes_field(p, section_end, &pos, &at, &n)
        if s != OK:
            return s
    return MISMATCH if pos != r.end else OK



cdef object record_error(Status s, RecordView* r, Py_ssize_t decoded)
cdef Py_ssize_t whole_v2_batch(const uint8_t* p, Py_ssize_t pos, Py_ssize_t n) except -2
cdef int check_crc(const uint8_t* b, Py_ssize_t size, crc) except -1
