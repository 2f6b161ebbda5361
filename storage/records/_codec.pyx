# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled core of the v2 record codec (Kafka's ``DefaultRecord`` / ``DefaultRecordBatch``
wire layout), flat and sans-IO: bytes in, bytes or column buffers out.

Reading walks an *uncompressed* records section (the caller decompresses; compression stays with
the codec libraries) and never trusts a length: every varint and every key, value and header is
bounds-checked against the record's declared size and the section's end, so malformed bytes
raise ``CorruptRecordError`` and cannot read out of bounds, loop without end or allocate more
than the section's size. Policy (which batches, CRCs, isolation) stays in Python.

Record layout: length varint (bytes after it), attributes int8, timestampDelta varlong,
offsetDelta varint, key (varint length, negative = null, bytes), value (same), header count
varint, then per header a key (varint length >= 0, UTF-8) and a value (varint length, -1 = null).
"""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.unicode cimport PyUnicode_DecodeUTF8

cdef extern from "Python.h":
    int PyBUF_READ
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, realloc
from libc.string cimport memchr, memcmp, memcpy, memset

from binascii import b2a_base64

from storage.errors import CorruptRecordError
from storage.records.record import Record, TimestampType

cdef object _CREATE_TIME = TimestampType.CREATE_TIME
cdef object _LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
cdef object _Record = Record
cdef object _tuple_new = tuple.__new__

# -- varints (ByteUtils.readVarint / readVarlong / writeVarint) ----------------------------

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


# -- one record ------------------------------------------------------------------------------

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


cdef Status parse_record(const uint8_t* p, Py_ssize_t section_end, Py_ssize_t pos,
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


cdef object record_error(Status s, RecordView* r, Py_ssize_t decoded):
    # Kafka's messages (DefaultRecord.readFrom, DefaultRecordBatch.RecordIterator)
    if s == EOF:
        return CorruptRecordError(
            f"Incorrect declared batch size, premature EOF reached after {decoded} records")
    if s == VARINT_LONG:
        return CorruptRecordError(f"varint longer than 5 bytes in record {decoded}")
    if s == VARLONG_LONG:
        return CorruptRecordError(f"varlong longer than 10 bytes in record {decoded}")
    if s == BAD_SIZE:
        return CorruptRecordError(
            f"Invalid record size: expected {r.detail} bytes in record payload, but the "
            f"records have fewer left (record {decoded})")
    if s == MISMATCH:
        return CorruptRecordError(
            f"Invalid record size: expected to read {r.detail} bytes in record payload, but "
            f"its fields end elsewhere (record {decoded})")
    if s == HEADERS_NEGATIVE:
        return CorruptRecordError(f"Found invalid number of record headers {r.detail}")
    if s == HEADERS_TOO_MANY:
        return CorruptRecordError(
            f"Found invalid number of record headers. {r.detail} is larger than the remaining "
            "size of the buffer")
    return CorruptRecordError(f"Invalid negative header key size {r.detail}")


cdef object bytes_or_none(const uint8_t* p, Py_ssize_t at, int32_t length):
    if length < 0:
        return None
    return PyBytes_FromStringAndSize(<const char*>p + at, length)


cdef tuple decode_headers(const uint8_t* p, RecordView* r):
    # bounds were checked by parse_record
    cdef Py_ssize_t pos = r.headers_pos, at = 0
    cdef int32_t n
    cdef list out = []
    for _ in range(r.header_count):
        read_varint(p, r.end, &pos, &n)
        # Java's new String(bytes, UTF_8) replaces malformed input rather than failing
        key = PyUnicode_DecodeUTF8(<const char*>p + pos, n, "replace")
        pos += n
        read_bytes_field(p, r.end, &pos, &at, &n)
        out.append((key, bytes_or_none(p, at, n)))
    return tuple(out)


cdef object make_record(const uint8_t* p, RecordView* r, int64_t base_offset,
                        int64_t base_timestamp, int64_t append_time, int32_t base_sequence):
    cdef int64_t sequence = -1
    if base_sequence >= 0:  # DefaultRecordBatch.incrementSequence: wraps past 2**31-1 to 0
        sequence = (<int64_t>base_sequence + r.offset_delta) % (1LL << 31)
    return _tuple_new(_Record, (
        base_offset + r.offset_delta,
        append_time if append_time >= 0 else base_timestamp + r.timestamp_delta,
        _LOG_APPEND_TIME if append_time >= 0 else _CREATE_TIME,
        bytes_or_none(p, r.key_pos, r.key_len),
        bytes_or_none(p, r.value_pos, r.value_len),
        decode_headers(p, r) if r.header_count else (),
        sequence))


# -- decoding to Record tuples ----------------------------------------------------------------

def decode_records(const uint8_t[::1] data, int32_t count, int64_t base_offset,
                   int64_t base_timestamp, int64_t append_time, int32_t base_sequence):
    """Every record of an uncompressed records section as ``Record`` tuples, in order.

    ``append_time`` is the batch's maxTimestamp for a LogAppendTime batch, else -1 (records
    then carry baseTimestamp + their delta); ``base_sequence`` -1 without a producer. Kafka's
    checks: ``count`` records exactly, each consuming its declared size, nothing left after.
    Raises CorruptRecordError."""
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, at = 0
    cdef RecordView r
    cdef Status s
    cdef list out = []
    if count < 0:
        raise CorruptRecordError(f"Found invalid record count {count} in magic v2 batch")
    for i in range(count):
        s = parse_record(p, end, pos, &r)
        if s != OK:
            raise record_error(s, &r, i)
        out.append(make_record(p, &r, base_offset, base_timestamp, append_time, base_sequence))
        pos = r.end
    if pos != end:
        raise CorruptRecordError(
            f"Incorrect declared batch size, {end - pos} bytes still remaining after the "
            "last record")
    return out


cdef decode_found(const uint8_t* p, Py_ssize_t end, Py_ssize_t pos, int32_t i,
                  int64_t base_offset, int64_t base_timestamp, int64_t append_time,
                  int32_t base_sequence):
    """The ``Record`` at ``pos`` (the ``i``-th of its section), once a skim has found it."""
    cdef RecordView r
    cdef Status s = parse_record(p, end, pos, &r)
    if s != OK:
        raise record_error(s, &r, i)
    return make_record(p, &r, base_offset, base_timestamp, append_time, base_sequence)


def record_at(const uint8_t[::1] data, int32_t count, int64_t base_offset,
              int64_t base_timestamp, int64_t append_time, int32_t base_sequence,
              int64_t offset):
    """The ``Record`` at ``offset``, or None when the section has none there (a gap left by
    compaction). Records before it are skimmed (length, timestamp and offset deltas), only the
    one found is decoded. Raises CorruptRecordError for malformed records on the way."""
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, at = 0
    cdef RecordView r
    cdef Status s
    cdef int32_t i
    for i in range(max(count, 0)):
        at = pos
        s = skim_record(p, end, &at, &r)
        if s != OK:
            raise record_error(s, &r, i)
        if base_offset + r.offset_delta >= offset:
            if base_offset + r.offset_delta != offset:
                return None
            return decode_found(p, end, pos, i, base_offset, base_timestamp, append_time,
                                base_sequence)
        pos = r.end
    return None


def first_record_from_time(const uint8_t[::1] data, int32_t count, int64_t base_offset,
                           int64_t base_timestamp, int64_t append_time, int32_t base_sequence,
                           int64_t timestamp, int64_t min_offset):
    """The first ``Record`` with timestamp >= ``timestamp`` (epoch ms) and offset >=
    ``min_offset``, or None (``FileRecords.searchForTimestamp``'s inner loop); only that one is
    decoded. Raises CorruptRecordError."""
    cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
    cdef Py_ssize_t end = data.shape[0], pos = 0, at = 0
    cdef RecordView r
    cdef Status s
    cdef int64_t ts
    cdef int32_t i
    for i in range(max(count, 0)):
        at = pos
        s = skim_record(p, end, &at, &r)
        if s != OK:
            raise record_error(s, &r, i)
        ts = append_time if append_time >= 0 else base_timestamp + r.timestamp_delta
        if ts >= timestamp and base_offset + r.offset_delta >= min_offset:
            return decode_found(p, end, pos, i, base_offset, base_timestamp, append_time,
                                base_sequence)
        pos = r.end
    return None


# -- decoding to columns ----------------------------------------------------------------------

cdef struct Growable:
    uint8_t* data
    Py_ssize_t length
    Py_ssize_t capacity


cdef int grow(Growable* g, Py_ssize_t extra) except -1:
    """Make room for ``extra`` more bytes (not zeroed: most buffers are written over at once)."""
    cdef Py_ssize_t need = g.length + extra, capacity = g.capacity or 4096
    cdef uint8_t* data
    if need <= g.capacity:
        return 0
    while capacity < need:
        capacity *= 2
    data = <uint8_t*>realloc(g.data, capacity)
    if data == NULL:
        raise MemoryError()
    g.data = data
    g.capacity = capacity
    return 0


cdef inline int put_bytes(Growable* g, const uint8_t* p, Py_ssize_t n) except -1:
    if g.length + n > g.capacity:
        grow(g, n)
    memcpy(g.data + g.length, p, n)
    g.length += n
    return 0


cdef inline int put_int32(Growable* g, int32_t v) except -1:  # native order: Arrow's buffers
    return put_bytes(g, <const uint8_t*>&v, 4)


cdef inline int put_int64(Growable* g, int64_t v) except -1:
    return put_bytes(g, <const uint8_t*>&v, 8)


cdef struct BinaryColumn:
    # Arrow's binary/string layout: validity bitmap, int32 offsets (rows + 1), data
    Growable validity
    Growable offsets
    Growable data
    Py_ssize_t nulls


cdef inline int bitmap_room(Growable* bitmap, Py_ssize_t row) except -1:
    """Make sure ``bitmap`` covers bit ``row`` (rows come in order): a new byte starts zeroed."""
    if (row >> 3) >= bitmap.length:
        if bitmap.length + 1 > bitmap.capacity:
            grow(bitmap, 1)
        bitmap.data[bitmap.length] = 0
        bitmap.length += 1
    return 0


cdef int binary_reserve(BinaryColumn* c, Py_ssize_t rows, Py_ssize_t data) except -1:
    reserve(&c.validity, rows // 8 + 1)
    reserve(&c.offsets, 4 * (rows + 1))
    reserve(&c.data, data + 1)
    return 0


cdef int binary_init(BinaryColumn* c) except -1:
    put_int32(&c.offsets, 0)
    return 0


cdef int binary_append(BinaryColumn* c, Py_ssize_t row, const uint8_t* p, Py_ssize_t at,
                       int32_t length) except -1:
    bitmap_room(&c.validity, row)
    if length < 0:
        c.nulls += 1
    else:
        c.validity.data[row >> 3] |= <uint8_t>(1 << (row & 7))
        if c.data.length + length > 0x7FFFFFFF:
            raise OverflowError("more than 2 GiB of keys or values in one column batch")
        put_bytes(&c.data, p + at, length)
    put_int32(&c.offsets, <int32_t>c.data.length)
    return 0


cdef inline bint ascii_only(const uint8_t* s, Py_ssize_t n) noexcept nogil:
    for i in range(n):
        if s[i] >= 0x80:
            return False
    return True


cdef class OwnedBuffer:
    """Memory from the codec, handed to Arrow without a copy (buffer protocol, read-only)."""
    cdef uint8_t* data
    cdef Py_ssize_t length

    def __dealloc__(self):
        free(self.data)

    def __len__(self):
        return self.length

    def __getbuffer__(self, Py_buffer* view, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("read-only buffer")
        view.buf = self.data
        view.obj = self
        view.len = self.length
        view.readonly = 1
        view.itemsize = 1
        view.format = NULL
        view.ndim = 1
        view.shape = NULL
        view.strides = NULL
        view.suboffsets = NULL
        view.internal = NULL

    def __releasebuffer__(self, Py_buffer* view):
        pass


cdef int reserve(Growable* g, Py_ssize_t capacity) except -1:
    """Make room for ``capacity`` bytes in all, at once."""
    if capacity > g.capacity:
        grow(g, capacity - g.length)
    return 0


cdef OwnedBuffer take(Growable* g):
    """Hand ``g``'s memory to a buffer object and reset ``g``."""
    cdef OwnedBuffer b = OwnedBuffer.__new__(OwnedBuffer)
    if g.data == NULL:  # Arrow refuses a NULL pointer, even for an empty buffer
        grow(g, 1)
    b.data = g.data
    b.length = g.length
    g.data = NULL
    g.length = g.capacity = 0
    return b


cdef void release(Growable* g) noexcept:
    free(g.data)
    g.data = NULL
    g.length = g.capacity = 0


cdef void release_binary(BinaryColumn* c) noexcept:
    release(&c.validity)
    release(&c.offsets)
    release(&c.data)
    c.nulls = 0


cdef class ColumnBuilder:
    """Decodes records of uncompressed v2 records sections straight into column buffers in
    Arrow's layouts, with no per-record Python object.

    Columns: ``offset`` int64, ``timestamp`` int64 (epoch ms), ``timestamp_type`` int32
    (``TimestampType``), ``key`` and ``value`` binary (validity bitmap, int32 offsets, data),
    and with ``headers`` ``list<struct<key: string, value: binary>>`` (a record without headers
    has a null list). :meth:`finish` hands the buffers over and starts afresh.

    With ``values_text`` the builder keeps no columns but the text :meth:`render` gives
    without ``jsonl`` (each value and ``\\n``), written as the records are decoded: one copy
    of each value instead of two, for streams of values."""
    cdef Growable offsets, timestamps, types
    cdef bint values_text
    cdef Growable text, row_ends  # values_text: the rendered rows and where each one ends
    cdef BinaryColumn keys, values
    cdef bint with_headers
    cdef Growable header_validity, header_offsets
    cdef BinaryColumn header_keys, header_values
    cdef Py_ssize_t rows, header_rows, header_nulls
    cdef readonly Py_ssize_t data_bytes
    # what the last finished batch held: the next one starts with that much room, so a stream
    # of like batches costs one allocation per buffer, not a series of doublings
    cdef Py_ssize_t last_rows, last_key_bytes, last_value_bytes

    def __cinit__(self, bint headers=False, bint values_text=False):
        if headers and values_text:
            raise ValueError("a values_text builder keeps no headers")
        self.with_headers = headers
        self.values_text = values_text
        self.reset()

    def __dealloc__(self):
        self.free_all()

    cdef void free_all(self) noexcept:
        release(&self.offsets)
        release(&self.timestamps)
        release(&self.types)
        release(&self.header_validity)
        release(&self.header_offsets)
        release(&self.text)
        release(&self.row_ends)
        release_binary(&self.keys)
        release_binary(&self.values)
        release_binary(&self.header_keys)
        release_binary(&self.header_values)

    cdef int reset(self) except -1:
        self.free_all()
        self.rows = self.header_rows = self.header_nulls = self.data_bytes = 0
        self.keys.nulls = self.values.nulls = 0
        self.header_keys.nulls = self.header_values.nulls = 0
        if self.last_rows:
            self.reserve_like_last()
        binary_init(&self.keys)
        binary_init(&self.values)
        if self.with_headers:
            put_int32(&self.header_offsets, 0)
            binary_init(&self.header_keys)
            binary_init(&self.header_values)
        return 0

    cdef int reserve_like_last(self) except -1:
        cdef Py_ssize_t rows = self.last_rows + self.last_rows // 8 + 1
        reserve(&self.offsets, 8 * rows)
        if self.values_text:
            reserve(&self.row_ends, 8 * rows)
            reserve(&self.text, self.last_value_bytes + self.last_value_bytes // 8)
            return 0
        reserve(&self.timestamps, 8 * rows)
        reserve(&self.types, 4 * rows)
        binary_reserve(&self.keys, rows, self.last_key_bytes + self.last_key_bytes // 8)
        binary_reserve(&self.values, rows, self.last_value_bytes + self.last_value_bytes // 8)
        return 0

    @property
    def num_rows(self):
        return self.rows

    def add_section(self, const uint8_t[::1] data, int32_t count, int64_t base_offset,
                    int64_t base_timestamp, int64_t append_time, int64_t start=0,
                    int64_t end=0x7FFFFFFFFFFFFFFF):
        """Append the records of one uncompressed records section whose offsets are in
        [``start``, ``end``); arguments as :func:`decode_records`, whose checks it makes
        (the whole section is validated even when records are skipped). Returns the number of
        rows added. Raises CorruptRecordError (rows of this section already added are kept:
        callers drop the builder on error)."""
        cdef const uint8_t* p = &data[0] if data.shape[0] else NULL
        cdef Py_ssize_t n = data.shape[0], pos = 0, added = 0
        cdef RecordView r
        cdef Status s
        cdef int64_t offset
        cdef int32_t tstype = 1 if append_time >= 0 else 0
        if count < 0:
            raise CorruptRecordError(f"Found invalid record count {count} in magic v2 batch")
        if self.values_text:
            return self.add_section_text(p, n, count, base_offset, start, end)
        for i in range(count):
            s = parse_record(p, n, pos, &r)
            if s != OK:
                raise record_error(s, &r, i)
            pos = r.end
            offset = base_offset + r.offset_delta
            if offset < start or offset >= end:
                continue
            put_int64(&self.offsets, offset)
            put_int64(&self.timestamps,
                      append_time if append_time >= 0 else base_timestamp + r.timestamp_delta)
            put_int32(&self.types, tstype)
            binary_append(&self.keys, self.rows, p, r.key_pos, r.key_len)
            binary_append(&self.values, self.rows, p, r.value_pos, r.value_len)
            if self.with_headers:
                self.add_headers(p, &r)
            self.rows += 1
            added += 1
        if pos != n:
            raise CorruptRecordError(
                f"Incorrect declared batch size, {n - pos} bytes still remaining after the "
                "last record")
        self.data_bytes = self.keys.data.length + self.values.data.length
        return added

    cdef Py_ssize_t add_section_text(self, const uint8_t* p, Py_ssize_t n, int32_t count,
                                     int64_t base_offset, int64_t start, int64_t end) except -1:
        """add_section for a values_text builder: room for the section's text is made first
        (a value is at most the section's bytes; each row adds at most "null\\n"), so the
        records are decoded with the GIL released (a read-ahead thread then leaves the event
        loop free)."""
        cdef Py_ssize_t i, pos = 0, added = 0
        cdef RecordView r
        cdef Status s = OK
        reserve(&self.text, self.text.length + n + 5 * <Py_ssize_t>count)
        reserve(&self.row_ends, self.row_ends.length + 8 * <Py_ssize_t>count)
        reserve(&self.offsets, self.offsets.length + 8 * <Py_ssize_t>count)
        with nogil:
            for i in range(count):
                s = parse_record(p, n, pos, &r)
                if s != OK:
                    break
                pos = r.end
                if start <= base_offset + r.offset_delta < end:
                    self.put_text(p, &r, base_offset + r.offset_delta)
                    added += 1
        if s != OK:
            raise record_error(s, &r, i)
        if pos != n:
            raise CorruptRecordError(
                f"Incorrect declared batch size, {n - pos} bytes still remaining after the "
                "last record")
        return added

    cdef inline void put_text(self, const uint8_t* p, RecordView* r, int64_t offset) noexcept nogil:
        """One row of values text, into room already made."""
        if r.value_len < 0:
            memcpy(self.text.data + self.text.length, b"null\n", 5)
            self.text.length += 5
        else:
            memcpy(self.text.data + self.text.length, p + r.value_pos, r.value_len)
            self.text.length += r.value_len + 1
            self.text.data[self.text.length - 1] = 0x0A
        (<int64_t*>(self.row_ends.data + self.row_ends.length))[0] = self.text.length
        (<int64_t*>(self.offsets.data + self.offsets.length))[0] = offset
        self.row_ends.length += 8
        self.offsets.length += 8
        self.rows += 1

    cdef int add_headers(self, const uint8_t* p, RecordView* r) except -1:
        cdef Py_ssize_t pos = r.headers_pos, at = 0
        cdef int32_t n
        bitmap_room(&self.header_validity, self.rows)
        if r.header_count == 0:
            self.header_nulls += 1
        else:
            self.header_validity.data[self.rows >> 3] |= <uint8_t>(1 << (self.rows & 7))
        for _ in range(r.header_count):
            read_varint(p, r.end, &pos, &n)
            if ascii_only(p + pos, n):
                binary_append(&self.header_keys, self.header_rows, p, pos, n)
            else:  # Arrow strings must be UTF-8: replace malformed bytes, as records() does
                key = PyUnicode_DecodeUTF8(<const char*>p + pos, n, "replace").encode("utf-8")
                binary_append(&self.header_keys, self.header_rows,
                              <const uint8_t*>PyBytes_AS_STRING(key), 0, PyBytes_GET_SIZE(key))
            pos += n
            read_bytes_field(p, r.end, &pos, &at, &n)
            binary_append(&self.header_values, self.header_rows, p, at, n)
            self.header_rows += 1
        put_int32(&self.header_offsets, <int32_t>self.header_rows)
        return 0

    def add_run(self, buf, Py_ssize_t position, int64_t start, int64_t end, crc, decompress,
                skip=None):
        """Decode a run of whole v2 batches (a block of a segment's .log) into the columns, in
        one call: each batch CRC-checked with ``crc`` (None: not checked), control batches
        skipped, a transactional batch skipped when ``skip(producer_id, base_offset)`` says
        so, compressed sections expanded by ``decompress(codec, view)``; only records with
        offsets in [``start``, ``end``). Stops at a partial batch, a legacy entry or a batch
        starting at or past ``end``. Returns ``(bytes consumed, done)``, ``done`` when a batch
        reached ``end``. Raises CorruptRecordError for a bad size or CRC, InvalidRecordError
        (from ``decompress``) for an unknown codec."""
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef Py_ssize_t n, pos = position, size
        cdef int32_t length, count, last_delta
        cdef int64_t base_offset, base_ts, max_ts, append_time
        cdef int16_t attributes
        cdef uint32_t stored
        if position < 0:
            raise ValueError(f"negative position {position}")
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t*>view.buf
            n = view.len
            while pos + 61 <= n:
                length = be32(p + pos + 8)
                if p[pos + 16] != 2:
                    if p[pos + 16] < 2:
                        break  # legacy: the caller decodes it
                    raise CorruptRecordError(f"record batch with magic {p[pos + 16]}")
                size = 12 + <Py_ssize_t>length
                if length < 49:
                    raise CorruptRecordError(f"Record batch is corrupt (the size {size} is "
                                             "smaller than the minimum allowed overhead 61)")
                if size > n - pos:
                    break
                base_offset = be64(p + pos)
                last_delta = be32(p + pos + 23)
                if base_offset >= end:
                    return pos - position, True
                if crc is not None:
                    stored = <uint32_t>be32(p + pos + 17)
                    if <uint32_t>crc(PyMemoryView_FromMemory(<char*>p + pos + 21, size - 21,
                                                             PyBUF_READ)) != stored:
                        raise CorruptRecordError(f"Record batch at offset {base_offset} is "
                                                 "corrupt (CRC-32C mismatch)")
                attributes = be16(p + pos + 21)
                count = be32(p + pos + 57)
                if base_offset + last_delta >= start and count and not attributes & 0x20 and not (
                        skip is not None and attributes & 0x10 and
                        skip(be64(p + pos + 43), base_offset)):
                    base_ts = be64(p + pos + 27)
                    max_ts = be64(p + pos + 35)
                    append_time = max_ts if attributes & 0x08 else -1
                    section = PyMemoryView_FromMemory(<char*>p + pos + 61, size - 61, PyBUF_READ)
                    if attributes & 0x07:
                        section = decompress(attributes & 0x07, section)
                    self.add_section(section, count, base_offset, base_ts, append_time, start, end)
                pos += size
                if base_offset + last_delta >= end - 1:
                    return pos - position, True
        finally:
            PyBuffer_Release(&view)
        return pos - position, False

    def add_record(self, int64_t offset, int64_t timestamp, int32_t timestamp_type, key, value,
                   headers=()):
        """Append one decoded record (the legacy v0/v1 path: those stay in Python)."""
        cdef RecordView r
        encoded = encode_records([value], [key], 0, [headers] if headers else None)
        cdef const uint8_t* p = <const uint8_t*>PyBytes_AS_STRING(encoded)
        parse_record(p, PyBytes_GET_SIZE(encoded), 0, &r)
        if self.values_text:
            reserve(&self.text, self.text.length + max(r.value_len, 0) + 5)
            reserve(&self.row_ends, self.row_ends.length + 8)
            reserve(&self.offsets, self.offsets.length + 8)
            self.put_text(p, &r, offset)
            return None
        put_int64(&self.offsets, offset)
        put_int64(&self.timestamps, timestamp)
        put_int32(&self.types, timestamp_type)
        binary_append(&self.keys, self.rows, p, r.key_pos, r.key_len)
        binary_append(&self.values, self.rows, p, r.value_pos, r.value_len)
        if self.with_headers:
            self.add_headers(p, &r)
        self.rows += 1
        self.data_bytes = self.keys.data.length + self.values.data.length

    def finish(self):
        """The columns built so far as a dict of buffers, then an empty builder:
        ``rows``; ``offset``, ``timestamp``, ``timestamp_type``: data buffers; ``key``,
        ``value``: (validity, offsets, data, null count); with headers, ``headers``:
        (list validity, list offsets, null count, header rows, key (validity, offsets, data,
        nulls), value (validity, offsets, data, nulls)). Header keys are raw bytes, which
        Arrow reads as UTF-8 strings (Kafka's writers only write UTF-8 keys)."""
        if self.values_text:
            raise ValueError("a values_text builder only renders")
        self.last_rows = self.rows
        self.last_key_bytes, self.last_value_bytes = self.keys.data.length, self.values.data.length
        out = {
            "rows": self.rows,
            "offset": take(&self.offsets),
            "timestamp": take(&self.timestamps),
            "timestamp_type": take(&self.types),
            "key": self.take_binary(&self.keys),
            "value": self.take_binary(&self.values),
        }
        if self.with_headers:
            out["headers"] = (take(&self.header_validity), take(&self.header_offsets),
                              self.header_nulls, self.header_rows,
                              self.take_binary(&self.header_keys),
                              self.take_binary(&self.header_values))
        self.reset()
        return out

    cdef tuple take_binary(self, BinaryColumn* c):
        nulls = c.nulls
        return (take(&c.validity), take(&c.offsets), take(&c.data), nulls)

    def render(self, bint jsonl, bytes prefix=b""):
        """The rows built so far as text, then an empty builder (as :meth:`finish`):
        ``(text, row_ends, offsets)``, buffers of the text, of each row's end in it (int64)
        and of each row's offset (int64).

        Without ``jsonl`` a row is its value and ``\\n`` (a null value prints ``null``, as
        kafka-console-consumer prints it). With ``jsonl`` (a builder made with headers) it is
        one JSON object and ``\\n``: ``prefix`` (``{"topic":...,"partition":...,``), then
        kcat ``-J``'s ``offset``, ``tstype`` and ``ts`` (left out for a record without a
        timestamp, as kcat does), ``headers`` (a flat ``[key, value, ...]`` list), ``key`` and
        ``payload``; bytes that are UTF-8 are JSON strings, others ``{"base64": ...}``, null
        is null: byte for byte ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``
        of ``kfs.dump``'s record object."""
        cdef Growable out, ends
        cdef Py_ssize_t row, h
        cdef const int32_t* vo = <const int32_t*>self.values.offsets.data
        cdef const int64_t* offsets = <const int64_t*>self.offsets.data
        cdef const int64_t* timestamps = <const int64_t*>self.timestamps.data
        cdef const int32_t* types = <const int32_t*>self.types.data
        cdef const int32_t* ko = <const int32_t*>self.keys.offsets.data
        cdef const int32_t* ho
        cdef const int32_t* hko
        cdef const int32_t* hvo
        if jsonl and not self.with_headers:
            raise ValueError("JSON lines need a builder made with headers")
        if self.values_text:
            self.last_rows, self.last_value_bytes = self.rows, self.text.length
            out_text, out_ends = take(&self.text), take(&self.row_ends)
            offsets_buffer = take(&self.offsets)
            self.reset()
            return out_text, out_ends, offsets_buffer
        out.data = ends.data = NULL
        out.length = out.capacity = ends.length = ends.capacity = 0
        try:
            reserve(&out, self.values.data.length + self.rows * (
                (len(prefix) + 96 if jsonl else 1)) + (self.keys.data.length if jsonl else 0))
            reserve(&ends, 8 * self.rows)
            for row in range(self.rows):
                if not jsonl:
                    if is_null(&self.values, row):
                        put_bytes(&out, <const uint8_t*>b"null", 4)
                    else:
                        put_bytes(&out, self.values.data.data + vo[row], vo[row + 1] - vo[row])
                else:
                    put_bytes(&out, <const uint8_t*>PyBytes_AS_STRING(prefix), len(prefix))
                    put_literal(&out, b'"offset":')
                    put_decimal(&out, offsets[row])
                    if types[row] == 0 or types[row] == 1:
                        put_literal(&out, b',"tstype":"create","ts":' if types[row] == 0
                                    else b',"tstype":"logappend","ts":')
                        put_decimal(&out, timestamps[row])
                    put_literal(&out, b',"headers":[')
                    ho = <const int32_t*>self.header_offsets.data
                    hko = <const int32_t*>self.header_keys.offsets.data
                    hvo = <const int32_t*>self.header_values.offsets.data
                    for h in range(ho[row], ho[row + 1]):
                        if h > ho[row]:
                            put_literal(&out, b',')
                        put_json_string(&out, self.header_keys.data.data + hko[h],
                                        hko[h + 1] - hko[h])
                        put_literal(&out, b',')
                        put_json_bytes(&out, &self.header_values, h, hvo)
                    put_literal(&out, b'],"key":')
                    put_json_bytes(&out, &self.keys, row, ko)
                    put_literal(&out, b',"payload":')
                    put_json_bytes(&out, &self.values, row, vo)
                    put_literal(&out, b'}')
                put_literal(&out, b'\n')
                put_int64(&ends, out.length)
            offsets_buffer = take(&self.offsets)
            text, row_ends = take(&out), take(&ends)
        finally:
            release(&out)
            release(&ends)
        self.last_rows = self.rows
        self.last_key_bytes, self.last_value_bytes = self.keys.data.length, self.values.data.length
        self.reset()
        return text, row_ends, offsets_buffer


cdef inline bint is_null(BinaryColumn* c, Py_ssize_t row) noexcept nogil:
    return c.nulls != 0 and not (c.validity.data[row >> 3] >> (row & 7)) & 1


cdef inline int put_literal(Growable* g, bytes text) except -1:
    return put_bytes(g, <const uint8_t*>PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text))


cdef int put_decimal(Growable* g, int64_t v) except -1:
    cdef char digits[24]
    return put_bytes(g, <const uint8_t*>digits, snprintf(digits, 24, "%lld", <long long>v))


cdef int put_json_string(Growable* g, const uint8_t* s, Py_ssize_t n) except -1:
    """``s`` (valid UTF-8) as a JSON string, escaped as Python's json module escapes with
    ``ensure_ascii=False``: quote, backslash and the C0 controls, nothing else."""
    cdef Py_ssize_t i, run = 0
    cdef uint8_t c
    cdef char escape[8]
    put_bytes(g, <const uint8_t*>b'"', 1)
    for i in range(n):
        c = s[i]
        if c >= 0x20 and c != 0x22 and c != 0x5C:
            continue
        put_bytes(g, s + run, i - run)
        run = i + 1
        if c == 0x22 or c == 0x5C:
            escape[0], escape[1] = 0x5C, c
            put_bytes(g, <const uint8_t*>escape, 2)
        elif c in (0x08, 0x09, 0x0A, 0x0C, 0x0D):
            escape[0] = 0x5C
            escape[1] = b"btn_fr"[c - 0x08]
            put_bytes(g, <const uint8_t*>escape, 2)
        else:
            put_bytes(g, <const uint8_t*>escape, snprintf(escape, 8, "\\u%04x", c))
    put_bytes(g, s + run, n - run)
    return put_bytes(g, <const uint8_t*>b'"', 1)


cdef int put_json_bytes(Growable* g, BinaryColumn* c, Py_ssize_t row,
                        const int32_t* offsets) except -1:
    """Element ``row`` of ``c`` as ``kfs.dump.json_bytes`` renders bytes: null, a string when
    UTF-8 (CPython's strict decoder decides), else ``{"base64":"..."}``."""
    if is_null(c, row):
        return put_bytes(g, <const uint8_t*>b"null", 4)
    cdef const uint8_t* s = c.data.data + offsets[row]
    cdef Py_ssize_t n = offsets[row + 1] - offsets[row]
    if not ascii_only(s, n):
        try:
            PyUnicode_DecodeUTF8(<const char*>s, n, "strict")
        except UnicodeDecodeError:
            encoded = b2a_base64(PyBytes_FromStringAndSize(<const char*>s, n), newline=False)
            put_literal(g, b'{"base64":"')
            put_literal(g, encoded)
            return put_literal(g, b'"}')
    return put_json_string(g, s, n)


# -- batch headers (verify, recovery, scans) --------------------------------------------------

cdef inline int64_t be64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


cdef inline int32_t be32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


def batch_ends(const uint8_t[::1] buf, Py_ssize_t pos=0, Py_ssize_t end=-1):
    """Walk the batches of ``buf[pos:end]`` by their batchLength fields alone:
    ``(positions, stop)``, the start of each whole batch (any magic) and where the walk
    stopped: at ``end``, at a partial batch, or at a declared size below the smallest entry
    (14 bytes, a v0 message), where the bytes are not batches. Reads nothing but the 12-byte
    log overhead of each batch."""
    cdef Py_ssize_t n = buf.shape[0] if end < 0 else min(end, buf.shape[0])
    cdef const uint8_t* p = &buf[0] if buf.shape[0] else NULL
    cdef int32_t length
    cdef list positions = []
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    while pos + 12 <= n:
        length = be32(p + pos + 8)
        if length < 14 or length > n - pos - 12:
            break
        positions.append(pos)
        pos += 12 + length
    return positions, pos


# -- encoding ---------------------------------------------------------------------------------

cdef inline Py_ssize_t field_size(object value):
    # varint length + bytes, or the one byte of -1 for null
    if value is None:
        return 1
    n = len(value)
    return varint_size(n) + n


cdef inline uint8_t* put_field(uint8_t* w, object value):
    cdef const unsigned char[::1] view
    cdef Py_ssize_t n
    if value is None:
        w[0] = 1
        return w + 1
    if isinstance(value, bytes):
        n = PyBytes_GET_SIZE(value)
        w += write_varint(w, n)
        memcpy(w, PyBytes_AS_STRING(value), n)
        return w + n
    view = value
    n = view.shape[0]
    w += write_varint(w, n)
    if n:
        memcpy(w, &view[0], n)
    return w + n


def encode_records(values, keys=None, timestamp_deltas=0, headers=None, offset_deltas=None):
    """The records section of a batch (``DefaultRecord.writeTo`` for each record), bytes.

    One entry per record: ``values`` bytes-like or None; ``keys`` None (all null) or bytes-like/
    None each; ``timestamp_deltas`` one int for all or one per record (ms from baseTimestamp);
    ``headers`` None or a sequence of ``(str, bytes | None)`` pairs each; ``offset_deltas`` None
    (0..n-1) or one int each. Raises TypeError for a header key that is not str, ValueError for
    a length or delta that does not fit Kafka's fields."""
    cdef Py_ssize_t n = len(values), total = 0, i, body, size
    cdef bint one_delta = isinstance(timestamp_deltas, int)
    cdef int64_t ts_delta = timestamp_deltas if one_delta else 0
    cdef int64_t offset_delta
    cdef list sizes = [0] * n
    cdef list encoded_headers = [None] * n if headers is not None else None
    cdef uint8_t* w
    for i in range(n):
        value = values[i]
        key = keys[i] if keys is not None else None
        if not one_delta:
            ts_delta = timestamp_deltas[i]
        offset_delta = offset_deltas[i] if offset_deltas is not None else i
        if offset_delta > 0x7FFFFFFF or offset_delta < -0x80000000:
            raise ValueError(f"offset delta {offset_delta} does not fit an int32")
        body = (1 + varint_size(ts_delta) + varint_size(offset_delta) + field_size(key)
                + field_size(value))
        if headers is not None and headers[i]:
            encoded_headers[i] = _encode_headers(headers[i])
            body += len(encoded_headers[i])
        else:
            body += 1
        if body > 0x7FFFFFFF:
            raise ValueError(f"record {i} is larger than 2 GiB")
        sizes[i] = body
        total += varint_size(body) + body
    out = PyBytes_FromStringAndSize(NULL, total)
    w = <uint8_t*>PyBytes_AS_STRING(out)
    for i in range(n):
        if not one_delta:
            ts_delta = timestamp_deltas[i]
        offset_delta = offset_deltas[i] if offset_deltas is not None else i
        w += write_varint(w, <int64_t>sizes[i])
        w[0] = 0  # attributes
        w += 1
        w += write_varint(w, ts_delta)
        w += write_varint(w, offset_delta)
        w = put_field(w, keys[i] if keys is not None else None)
        w = put_field(w, values[i])
        if encoded_headers is not None and encoded_headers[i] is not None:
            h = encoded_headers[i]
            memcpy(w, PyBytes_AS_STRING(h), PyBytes_GET_SIZE(h))
            w += PyBytes_GET_SIZE(h)
        else:
            w[0] = 0
            w += 1
    return out


cdef bytes _encode_headers(record_headers):
    """Header count and headers of one record (the rare path: kept simple)."""
    cdef uint8_t tmp[10]
    parts = [PyBytes_FromStringAndSize(<char*>tmp, write_varint(tmp, len(record_headers)))]
    for header_key, header_value in record_headers:
        if not isinstance(header_key, str):
            raise TypeError(f"header keys must be str, not {type(header_key).__name__}")
        key = header_key.encode("utf-8")
        parts.append(PyBytes_FromStringAndSize(<char*>tmp, write_varint(tmp, len(key))))
        parts.append(key)
        if header_value is None:
            parts.append(b"\x01")
        else:
            parts.append(PyBytes_FromStringAndSize(
                <char*>tmp, write_varint(tmp, len(header_value))))
            parts.append(bytes(header_value))
    return b"".join(parts)


def encode_lines(const uint8_t[::1] buf, Py_ssize_t pos, Py_ssize_t end, Py_ssize_t max_bytes,
                 Py_ssize_t max_records, const uint8_t[::1] separator=None, Py_ssize_t head=0):
    """Records of newline-terminated lines of ``buf[pos:end]``, as the console producer makes
    them (timestamp delta 0, offset deltas from 0, no headers): ``(records section, records,
    position after the last line taken, largest record in bytes)``.

    Lines are taken while the section stays within ``max_bytes`` (the first line always) and
    up to ``max_records``; a line is its bytes up to ``\\n`` (excluded). Without ``separator``
    the key is null; with it, the key is what precedes the line's first separator and the value
    what follows (``parse.key=true``). A line without the separator stops the run: when it is
    the first, the result is ``(None, -1, its position, 0)``. With ``head`` the section starts
    after ``head`` bytes left for the caller (a batch header), not counted in the largest
    record."""
    cdef const uint8_t* p = &buf[0] if buf.shape[0] else NULL
    cdef const uint8_t* sep = NULL
    cdef const uint8_t* nl
    cdef Py_ssize_t sep_len = 0, start = pos, total = 0, line_end, size, key_len = 0
    cdef Py_ssize_t longest = 0, count = 0, value_at, i
    if pos < 0 or head < 0:
        raise ValueError(f"negative position {pos} or head {head}")
    if separator is not None and separator.shape[0]:
        sep = &separator[0]
        sep_len = separator.shape[0]
    end = min(end, buf.shape[0])
    while pos < end and count < max_records:  # first pass: which lines, how many bytes
        nl = <const uint8_t*>memchr(p + pos, 10, end - pos)
        if nl == NULL:
            break
        line_end = nl - p
        size = line_record_body(p, pos, line_end, sep, sep_len, count, &key_len)
        if size < 0:
            if count == 0:
                return None, -1, pos, 0
            break
        size += varint_size(size)
        if count and total + size > max_bytes:
            break
        total += size
        longest = max(longest, size)
        count += 1
        pos = line_end + 1
    end = pos
    out = PyBytes_FromStringAndSize(NULL, head + total)
    cdef uint8_t* w = <uint8_t*>PyBytes_AS_STRING(out) + head
    pos = start
    for i in range(count):
        line_end = <const uint8_t*>memchr(p + pos, 10, end - pos) - p
        w += write_varint(w, line_record_body(p, pos, line_end, sep, sep_len, i, &key_len))
        w[0] = 0  # attributes
        w[1] = 0  # timestamp delta
        w += 2
        w += write_varint(w, i)
        if sep == NULL:
            w[0] = 1  # null key
            w += 1
            value_at = pos
        else:
            w += write_varint(w, key_len)
            memcpy(w, p + pos, key_len)
            w += key_len
            value_at = pos + key_len + sep_len
        w += write_varint(w, line_end - value_at)
        memcpy(w, p + value_at, line_end - value_at)
        w += line_end - value_at
        w[0] = 0  # no headers
        w += 1
        pos = line_end + 1
    return out, count, end, longest


cdef Py_ssize_t line_record_body(const uint8_t* p, Py_ssize_t pos, Py_ssize_t line_end,
                                 const uint8_t* sep, Py_ssize_t sep_len, Py_ssize_t offset_delta,
                                 Py_ssize_t* key_len) noexcept nogil:
    """Body bytes (after the length varint) of the record of line [pos, line_end), or -1 when
    a separator is wanted and missing."""
    cdef Py_ssize_t value_len, key_field = 1
    cdef const uint8_t* found
    value_len = line_end - pos
    if sep != NULL:
        found = find(p + pos, line_end - pos, sep, sep_len)
        if found == NULL:
            return -1
        key_len[0] = found - (p + pos)
        key_field = varint_size(key_len[0]) + key_len[0]
        value_len -= key_len[0] + sep_len
    return 2 + varint_size(offset_delta) + key_field + varint_size(value_len) + value_len + 1


cdef const uint8_t* find(const uint8_t* hay, Py_ssize_t n, const uint8_t* needle,
                         Py_ssize_t m) noexcept nogil:
    cdef const uint8_t* at
    cdef Py_ssize_t i = 0
    while i + m <= n:
        at = <const uint8_t*>memchr(hay + i, needle[0], n - i - m + 1)
        if at == NULL:
            return NULL
        if memcmp(at, needle, m) == 0:
            return at
        i = at - hay + 1
    return NULL


# -- encoding from Arrow columns ----------------------------------------------------------------

cdef struct BinaryIn:
    # an Arrow binary array: validity bitmap (NULL: no nulls), int32 offsets, data, array offset
    const uint8_t* validity
    const int32_t* offsets
    const uint8_t* data
    Py_ssize_t offset


cdef const uint8_t* address(object buffer) except? NULL:
    # the memory of an Arrow buffer (immutable, and kept alive by the caller for the call),
    # or NULL for None/empty
    cdef Py_buffer view
    cdef const uint8_t* at
    if buffer is None:
        return NULL
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    at = <const uint8_t*>view.buf if view.len else NULL
    PyBuffer_Release(&view)
    return at


cdef int binary_in(BinaryIn* b, object parts) except -1:
    validity, offsets, data, offset = parts
    b.validity = address(validity)
    b.offsets = <const int32_t*>address(offsets)
    b.data = address(data)
    b.offset = offset
    return 0


cdef inline int32_t element(BinaryIn* b, Py_ssize_t i, const uint8_t** at) noexcept nogil:
    """Length of element ``i`` (-1: null), its bytes at ``at[0]``."""
    cdef Py_ssize_t j = b.offset + i
    if b.validity != NULL and not (b.validity[j >> 3] >> (j & 7)) & 1:
        return -1
    at[0] = b.data + b.offsets[j]
    return b.offsets[j + 1] - b.offsets[j]


cdef inline uint32_t murmur2(const uint8_t* data, int32_t length) noexcept nogil:
    # Kafka's Utils.murmur2 (seed 0x9747b28c)
    cdef uint32_t m = 0x5BD1E995U, h = 0x9747B28CU ^ <uint32_t>length, k
    cdef int32_t i, whole = length & ~3
    for i in range(0, whole, 4):
        k = data[i] | (<uint32_t>data[i + 1] << 8) | (<uint32_t>data[i + 2] << 16) | (
            <uint32_t>data[i + 3] << 24)
        k *= m
        k ^= k >> 24
        k *= m
        h = (h * m) ^ k
    if length & 3 == 3:
        h ^= <uint32_t>data[whole + 2] << 16
    if length & 3 >= 2:
        h ^= <uint32_t>data[whole + 1] << 8
    if length & 3 >= 1:
        h ^= data[whole]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return h


def murmur2_of(const uint8_t[::1] data):
    """Kafka's ``Utils.murmur2`` of ``data`` as a signed 32-bit int."""
    return <int32_t>murmur2(&data[0] if data.shape[0] else NULL, data.shape[0])


def assign_partitions(Py_ssize_t n, keys, values, int32_t[::1] out, int32_t num_partitions,
                      sticky):
    """Kafka's default partitioner (``BuiltInPartitioner``) over whole columns: for each row
    whose ``out`` entry is -1, ``toPositive(murmur2(key)) % num_partitions`` when the key is
    not null, else the sticky partition of ``sticky`` (``current``, ``bytes``, ``batch_size``
    attributes and ``switch()``, called when a partition has had ``batch_size`` bytes of
    values). ``keys``/``values``: Arrow binary arrays as (validity, offsets, data, offset),
    ``keys`` None when there is no key column."""
    cdef BinaryIn k, v
    cdef const uint8_t* at = NULL
    cdef int32_t length
    cdef int64_t stuck = sticky.bytes, batch_size = sticky.batch_size
    cdef int32_t current = sticky.current
    if keys is not None:
        binary_in(&k, keys)
    binary_in(&v, values)
    for i in range(n):
        if out[i] != -1:
            continue
        length = element(&k, i, &at) if keys is not None else -1
        if length >= 0:
            out[i] = <int32_t>((murmur2(at, length) & 0x7FFFFFFF) % num_partitions)
            continue
        if stuck >= batch_size:
            sticky.bytes = stuck
            current = sticky.switch()
            stuck = 0
        length = element(&v, i, &at)
        stuck += max(length, 0)
        out[i] = current
    sticky.bytes = stuck
    sticky.current = current


cdef Py_ssize_t headers_size(Py_ssize_t i, const int32_t* list_offsets, Py_ssize_t list_offset,
                             const uint8_t* list_validity, BinaryIn* hkeys,
                             BinaryIn* hvalues) noexcept nogil:
    cdef Py_ssize_t j = list_offset + i, size, count
    cdef int32_t length
    cdef const uint8_t* at = NULL
    if list_validity != NULL and not (list_validity[j >> 3] >> (j & 7)) & 1:
        return 1
    count = list_offsets[j + 1] - list_offsets[j]
    size = varint_size(count)
    for h in range(list_offsets[j], list_offsets[j + 1]):
        length = max(element(hkeys, h, &at), 0)  # a null header key is written empty
        size += varint_size(length) + length
        length = element(hvalues, h, &at)
        size += varint_size(length) + max(length, 0)
    return size


cdef uint8_t* put_element(uint8_t* w, BinaryIn* b, Py_ssize_t i, bint null_as_empty) noexcept nogil:
    cdef const uint8_t* at = NULL
    cdef int32_t length = element(b, i, &at)
    if length < 0 and null_as_empty:
        length = 0
    w += write_varint(w, length)
    if length > 0:
        memcpy(w, at, length)
        w += length
    return w


def encode_arrow(Py_ssize_t start, Py_ssize_t stop, values, keys, headers, timestamps,
                 int64_t default_timestamp, Py_ssize_t max_bytes, bytearray out,
                 Py_ssize_t head=0):
    """Records of Arrow columns, rows [``start``, ``stop``), taken while the section stays
    within ``max_bytes`` (the first row always), appended to ``out`` (grown in place, so a
    producer's batches for one partition build up in one buffer with no joining copy):
    ``(rows, first timestamp, max timestamp)``, offset deltas from 0, timestamp deltas from
    the first row's.

    ``values``/``keys`` are binary arrays as (validity, offsets, data, offset), ``keys`` None
    for all-null keys; ``headers`` None or (list validity, list offsets, list offset, header
    keys, header values) with the two flattened child arrays as binary arrays; ``timestamps``
    None or (validity, int64 epoch-ms data, offset), a null timestamp being
    ``default_timestamp``. With ``head`` the section starts after ``head`` bytes left for a
    batch header (:func:`seal_in_place`). Raises ValueError for a row out of range, a negative
    timestamp or a record over 2 GiB (``out`` unchanged)."""
    cdef BinaryIn v, k, hk, hv
    cdef const uint8_t* list_validity = NULL
    cdef const int32_t* list_offsets = NULL
    cdef Py_ssize_t list_offset = 0, total = 0, body, i, rows = 0, j
    cdef const uint8_t* ts_validity = NULL
    cdef const int64_t* ts_data = NULL
    cdef Py_ssize_t ts_offset = 0
    cdef int64_t first_ts = default_timestamp, max_ts = -1, ts
    cdef const uint8_t* at = NULL
    cdef Py_ssize_t r
    if start < 0 or stop < start or head < 0:
        raise ValueError(f"rows [{start}, {stop}) or head {head} out of range")
    binary_in(&v, values)
    if keys is not None:
        binary_in(&k, keys)
    if headers is not None:
        list_validity = address(headers[0])
        list_offsets = <const int32_t*>address(headers[1])
        list_offset = headers[2]
        binary_in(&hk, headers[3])
        binary_in(&hv, headers[4])
    if timestamps is not None:
        ts_validity = address(timestamps[0])
        ts_data = <const int64_t*>address(timestamps[1])
        ts_offset = timestamps[2]
    cdef list sizes = []
    for i in range(start, stop):
        ts = default_timestamp
        if ts_data != NULL:
            j = ts_offset + i
            if ts_validity == NULL or (ts_validity[j >> 3] >> (j & 7)) & 1:
                ts = ts_data[j]
                if ts < 0:
                    raise ValueError(f"Invalid negative timestamp {ts}")
        if rows == 0:
            first_ts = ts
        body = 1 + varint_size(ts - first_ts) + varint_size(rows)
        body += 1 if keys is None else varint_size(element(&k, i, &at)) + max(element(&k, i, &at), 0)
        body += varint_size(element(&v, i, &at)) + max(element(&v, i, &at), 0)
        body += 1 if headers is None else headers_size(i, list_offsets, list_offset,
                                                       list_validity, &hk, &hv)
        if body > 0x7FFFFFFF:
            raise ValueError(f"row {i} is larger than 2 GiB as a record")
        if rows and total + varint_size(body) + body > max_bytes:
            break
        total += varint_size(body) + body
        sizes.append(body)
        max_ts = max(max_ts, ts)
        rows += 1
    cdef Py_ssize_t position = PyByteArray_GET_SIZE(out)
    PyByteArray_Resize(out, position + head + total)
    cdef uint8_t* w = <uint8_t*>PyByteArray_AS_STRING(out) + position + head
    for r in range(rows):
        i = start + r
        ts = default_timestamp
        if ts_data != NULL:
            j = ts_offset + i
            if ts_validity == NULL or (ts_validity[j >> 3] >> (j & 7)) & 1:
                ts = ts_data[j]
        w += write_varint(w, <int64_t>sizes[r])
        w[0] = 0  # attributes
        w += 1
        w += write_varint(w, ts - first_ts)
        w += write_varint(w, r)
        if keys is None:
            w[0] = 1
            w += 1
        else:
            w = put_element(w, &k, i, False)
        w = put_element(w, &v, i, False)
        if headers is None:
            w[0] = 0
            w += 1
        else:
            w = put_headers(w, i, list_offsets, list_offset, list_validity, &hk, &hv)
    return rows, first_ts, max_ts


cdef uint8_t* put_headers(uint8_t* w, Py_ssize_t i, const int32_t* list_offsets,
                          Py_ssize_t list_offset, const uint8_t* list_validity, BinaryIn* hkeys,
                          BinaryIn* hvalues) noexcept nogil:
    cdef Py_ssize_t j = list_offset + i
    if list_validity != NULL and not (list_validity[j >> 3] >> (j & 7)) & 1:
        w[0] = 0
        return w + 1
    w += write_varint(w, list_offsets[j + 1] - list_offsets[j])
    for h in range(list_offsets[j], list_offsets[j + 1]):
        w = put_element(w, hkeys, h, True)
        w = put_element(w, hvalues, h, False)
    return w


# -- segment scans (verify, recovery) ---------------------------------------------------------

cdef inline int16_t be16(const uint8_t* p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline Py_ssize_t search(const int64_t* a, Py_ssize_t n, int64_t x, bint right) noexcept nogil:
    # bisect_left (right False) / bisect_right (right True) of x in the sorted a[:n]
    cdef Py_ssize_t lo = 0, hi = n, mid
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x or (right and a[mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


cdef class SegmentScan:
    """One pass over a segment's ``.log``, a block of bytes at a time: each whole v2 batch is
    checked as Kafka's ``LogSegment.recover`` and ``kafka-dump-log`` do (size, magic, CRC-32C
    over bytes [21, size), codec id, record count against lastOffsetDelta, offsets that never
    go back, offsets within the index's 32-bit reach of ``base``), and its position, last
    offset, max timestamp and leader epoch are kept in columns for the index checks.

    ``crc`` is the CRC-32C function (the ``crc32c`` package's), called once per batch;
    ``next_offset`` the offset after the segment before, when its batches are checked too.
    ``problems`` collects ``(position, message)``. With ``stop_at_problem`` (recovery) the scan
    makes only recovery's checks (CRC, offsets going back) and stops at the first problem,
    leaving ``valid_end`` before that batch; an offset past the index's reach stops it too, as
    ``overflow_offset`` (Kafka raises there rather than truncating). A legacy v0/v1 entry stops
    :meth:`scan` (``at_legacy``): the caller checks it and records it with :meth:`add`.
    Positions are byte offsets in the ``.log``, timestamps epoch ms."""
    cdef Growable _positions, _first_offsets, _last_offsets, _max_timestamps, _epochs
    cdef Growable _rise_offsets, _rise_timestamps
    cdef readonly Py_ssize_t count
    cdef readonly int64_t base, next_offset
    cdef readonly Py_ssize_t valid_end
    cdef readonly bint at_legacy, broken, stop_at_problem
    cdef readonly int64_t overflow_offset
    cdef public list problems
    cdef readonly list producer_positions
    cdef object crc

    def __cinit__(self, int64_t base, crc, int64_t next_offset=-1, bint stop_at_problem=False):
        self.base = base
        self.crc = crc
        self.stop_at_problem = stop_at_problem
        self.next_offset = next_offset  # where the batches must start (-1: anywhere)
        self.overflow_offset = -1
        self.problems = []
        self.producer_positions = []  # batches with a producer id or control: what replay needs

    def __dealloc__(self):
        release(&self._positions)
        release(&self._first_offsets)
        release(&self._last_offsets)
        release(&self._max_timestamps)
        release(&self._epochs)
        release(&self._rise_offsets)
        release(&self._rise_timestamps)

    @property
    def last_offset(self):
        """The last offset of the last batch, or None."""
        return (<int64_t*>self._last_offsets.data)[self.count - 1] if self.count else None

    def max_timestamp_and_offset(self):
        """(largest max timestamp, last offset of the first batch carrying it), or (-1, -1)."""
        cdef Py_ssize_t n = self._rise_offsets.length // 8
        if not n:
            return -1, -1
        return (<int64_t*>self._rise_timestamps.data)[n - 1], (<int64_t*>self._rise_offsets.data)[n - 1]

    def add(self, int64_t position, int64_t size, int64_t first_offset, int64_t last_offset,
            int64_t max_timestamp, int32_t epoch=-1):
        """Record a whole batch of ``size`` bytes checked elsewhere (a legacy entry);
        ``first_offset`` is checked against the batches before as :meth:`scan` does."""
        cdef Py_ssize_t problems_before = len(self.problems)
        self.check_offsets(position, first_offset, last_offset)
        if self.stop_at_problem and (len(self.problems) > problems_before or
                                     self.overflow_offset >= 0):
            return
        self.record(position, first_offset, last_offset, max_timestamp, epoch)
        self.valid_end = position + size
        self.at_legacy = False

    cdef int check_offsets(self, int64_t position, int64_t first, int64_t last) except -1:
        if self.count == 0 and first < self.base:
            self.problem(position, f"first batch starts at offset {first}, below the segment's "
                                   f"base offset {self.base}")
        if self.next_offset >= 0 and first < self.next_offset:
            self.problem(position, f"offsets go back: batch at offset {first} follows one "
                                   f"ending at offset {self.next_offset - 1}")
        if last - self.base > 0x7FFFFFFF and self.stop_at_problem:
            self.overflow_offset = last
        elif last - self.base > 0x7FFFFFFF:
            self.problem(position, f"offset {last} does not fit the index (more than 2^31-1 "
                                   f"past the base offset {self.base})")
        return 0

    cdef int problem(self, int64_t position, str what) except -1:
        self.problems.append((position, what))
        return 0

    cdef int record(self, int64_t position, int64_t first_offset, int64_t last_offset,
                    int64_t max_timestamp, int32_t epoch) except -1:
        cdef Py_ssize_t rises = self._rise_offsets.length // 8
        put_int64(&self._positions, position)
        put_int64(&self._first_offsets, first_offset)
        put_int64(&self._last_offsets, last_offset)
        put_int64(&self._max_timestamps, max_timestamp)
        put_int64(&self._epochs, epoch)
        if max_timestamp > (<int64_t*>self._rise_timestamps.data)[rises - 1] if rises else max_timestamp > -1:
            put_int64(&self._rise_offsets, last_offset)
            put_int64(&self._rise_timestamps, max_timestamp)
        self.count += 1
        self.next_offset = last_offset + 1
        return 0

    def scan(self, buf, Py_ssize_t position, Py_ssize_t end=-1):
        """Check the whole batches of ``buf`` (the .log's bytes from ``position``) up to
        ``end`` bytes of it; returns the bytes consumed: up to a partial batch (read on from
        there), a legacy entry (``at_legacy``), bytes that are not a batch (``broken``, with a
        problem) or, with ``stop_at_problem``, the first batch with a problem."""
        cdef Py_buffer view
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            return self.scan_block(<const uint8_t*>view.buf,
                                   view.len if end < 0 else min(end, view.len), position)
        finally:
            PyBuffer_Release(&view)

    cdef Py_ssize_t scan_block(self, const uint8_t* p, Py_ssize_t n, int64_t file_pos) except -1:
        cdef Py_ssize_t pos = 0, size
        cdef int32_t length, last_delta, count
        cdef int64_t base_offset, max_ts
        cdef uint32_t stored, computed
        cdef int codec
        cdef Py_ssize_t problems_before
        self.at_legacy = False
        while pos + 17 <= n:
            length = be32(p + pos + 8)
            if length < 14:
                self.broken = True
                self.problem(file_pos + pos, f"Found record size {length} smaller than minimum "
                                             f"record overhead (14) at position {file_pos + pos}")
                break
            if p[pos + 16] < 2:
                self.at_legacy = True
                break
            if p[pos + 16] > 2:
                self.broken = True
                self.problem(file_pos + pos, f"record batch at position {file_pos + pos} has "
                                             f"magic {p[pos + 16]}; only magic 2 is read here")
                break
            size = 12 + <Py_ssize_t>length
            if size < 61:
                self.broken = True
                self.problem(file_pos + pos, f"Record batch is corrupt (the size {size} is "
                                             "smaller than the minimum allowed overhead 61)")
                break
            if size > n - pos:
                break  # partial: the caller reads on from here
            base_offset = be64(p + pos)
            last_delta = be32(p + pos + 23)
            max_ts = be64(p + pos + 35)
            count = be32(p + pos + 57)
            problems_before = len(self.problems)
            stored = <uint32_t>be32(p + pos + 17)
            computed = self.crc(PyMemoryView_FromMemory(<char*>p + pos + 21, size - 21, PyBUF_READ))
            if computed != stored:
                self.problem(file_pos + pos, f"Record batch at offset {base_offset} is corrupt "
                                             f"(stored crc = {stored}, computed crc = {computed})")
            codec = p[pos + 22] & 0x07
            if codec > 4 and not self.stop_at_problem:
                self.problem(file_pos + pos, f"batch at offset {base_offset}: unknown "
                                             f"compression type id {codec}")
            if (last_delta < 0 or count < 0 or count > <int64_t>last_delta + 1) and \
                    not self.stop_at_problem:
                self.problem(file_pos + pos, f"batch at offset {base_offset}: {count} records "
                                             f"for lastOffsetDelta {last_delta}")
            self.check_offsets(file_pos + pos, base_offset, base_offset + last_delta)
            if self.stop_at_problem and (len(self.problems) > problems_before or
                                         self.overflow_offset >= 0):
                break
            self.record(file_pos + pos, base_offset, base_offset + last_delta, max_ts,
                        be32(p + pos + 12))
            if be64(p + pos + 43) >= 0 or p[pos + 22] & 0x20:
                self.producer_positions.append(file_pos + pos)
            pos += size
            self.valid_end = file_pos + pos
        return pos

    def check_offset_index(self, entries, bint readable):
        """Problems of offset-index entries (``entries``: the 8-byte entries in use, relative
        offset and position, big-endian): ``(slot, message)``, the message "beyond" for an
        entry at or past ``valid_end`` (when ``readable``). An entry must strictly increase,
        start a batch, not lie past the batch holding its offset (a lookup would skip it) and
        not name an offset past the segment."""
        cdef Py_buffer view
        cdef const uint8_t* e
        cdef Py_ssize_t slots, i, k, holder
        cdef int64_t offset, position, prev_offset = -1, prev_position = -1
        cdef const int64_t* positions = <int64_t*>self._positions.data
        cdef const int64_t* last_offsets = <int64_t*>self._last_offsets.data
        out = []
        PyObject_GetBuffer(entries, &view, PyBUF_SIMPLE)
        try:
            e = <const uint8_t*>view.buf
            slots = view.len // 8
            for i in range(slots):
                offset = self.base + be32(e + 8 * i)
                position = <uint32_t>be32(e + 8 * i + 4)
                if i and (offset <= prev_offset or position <= prev_position):
                    out.append((i, f"not above the entry before (offset {prev_offset}, position "
                                   f"{prev_position}): entries must strictly increase"))
                elif position >= self.valid_end:
                    if readable:
                        out.append((i, "beyond"))
                else:
                    k = search(positions, self.count, position, False)
                    if k >= self.count or positions[k] != position:
                        out.append((i, "no batch starts at that position"))
                    elif k > 0 and last_offsets[k - 1] >= offset:
                        holder = search(last_offsets, self.count, offset, False)
                        out.append((i, f"past the batch holding offset {offset} (at position "
                                       f"{positions[holder]}): a lookup would skip it"))
                    elif readable and offset > last_offsets[self.count - 1]:
                        out.append((i, f"offset beyond the segment's last offset "
                                       f"{last_offsets[self.count - 1]}"))
                prev_offset, prev_position = offset, position
        finally:
            PyBuffer_Release(&view)
        return out

    def check_time_index(self, entries, bint readable):
        """Problems of time-index entries (12-byte entries: timestamp, relative offset) as
        ``(slot, message)``: (T, O) must strictly increase in T, not go back in O, and name the
        last offset O of a batch whose largest timestamp is T, the largest up to O."""
        cdef Py_buffer view
        cdef const uint8_t* e
        cdef Py_ssize_t slots, i, k, r
        cdef int64_t ts, offset, prev_ts = 0, prev_offset = 0, running
        cdef const int64_t* last_offsets = <int64_t*>self._last_offsets.data
        cdef const int64_t* max_ts = <int64_t*>self._max_timestamps.data
        cdef const int64_t* rise_offsets = <int64_t*>self._rise_offsets.data
        cdef const int64_t* rise_ts = <int64_t*>self._rise_timestamps.data
        cdef Py_ssize_t rises = self._rise_offsets.length // 8
        out = []
        PyObject_GetBuffer(entries, &view, PyBUF_SIMPLE)
        try:
            e = <const uint8_t*>view.buf
            slots = view.len // 12
            for i in range(slots):
                ts = be64(e + 12 * i)
                offset = self.base + be32(e + 12 * i + 8)
                if i and (ts <= prev_ts or offset < prev_offset):
                    out.append((i, f"not above the entry before (timestamp {prev_ts}, offset "
                                   f"{prev_offset}): timestamps must strictly increase, offsets "
                                   "must not go back"))
                elif self.count == 0 or offset > last_offsets[self.count - 1]:
                    if readable:
                        out.append((i, "offset beyond the segment's last batch"))
                else:
                    k = search(last_offsets, self.count, offset, False)
                    r = search(rise_offsets, rises, offset, True) - 1
                    running = rise_ts[r] if r >= 0 else -1
                    if last_offsets[k] != offset:
                        out.append((i, "no batch ends at that offset (entries name the last "
                                       "offset of a batch)"))
                    elif running != ts:
                        out.append((i, f"the largest timestamp up to that offset is {running}"))
                    elif max_ts[k] != ts:
                        out.append((i, f"the batch ending there has largest timestamp {max_ts[k]}"))
                prev_ts, prev_offset = ts, offset
        finally:
            PyBuffer_Release(&view)
        return out

    def index_entries(self, Py_ssize_t interval):
        """The offset- and time-index entries recovery writes for the batches scanned
        (``LogSegment.recover``): an entry (last offset, position) for a batch
        more than ``interval`` bytes past the last entry's, with a time entry (largest timestamp
        so far, its offset) when that rose. Returns (offset entries, time entries) as the
        on-disk bytes (relative offsets, big-endian)."""
        cdef Growable offsets, times
        cdef const int64_t* positions = <int64_t*>self._positions.data
        cdef const int64_t* last_offsets = <int64_t*>self._last_offsets.data
        cdef const int64_t* max_ts = <int64_t*>self._max_timestamps.data
        cdef int64_t last_entry = 0, best_ts = -1, best_offset = -1, written_ts = -1
        cdef uint8_t entry[12]
        memset(&offsets, 0, sizeof(Growable))
        memset(&times, 0, sizeof(Growable))
        try:
            for i in range(self.count):
                if max_ts[i] > best_ts:
                    best_ts, best_offset = max_ts[i], last_offsets[i]
                if positions[i] - last_entry > interval:
                    put_be32(entry, <int32_t>(last_offsets[i] - self.base))
                    put_be32(entry + 4, <int32_t>positions[i])
                    put_bytes(&offsets, entry, 8)
                    if best_ts > written_ts:
                        put_be64(entry, best_ts)
                        put_be32(entry + 8, <int32_t>(best_offset - self.base))
                        put_bytes(&times, entry, 12)
                        written_ts = best_ts
                    last_entry = positions[i]
            return (PyBytes_FromStringAndSize(<char*>offsets.data, offsets.length),
                    PyBytes_FromStringAndSize(<char*>times.data, times.length))
        finally:
            release(&offsets)
            release(&times)

    def epoch_starts(self):
        """(leader epoch, base offset of the batch) where the batches' partitionLeaderEpoch
        rises."""
        cdef const int64_t* epochs = <int64_t*>self._epochs.data
        cdef const int64_t* first_offsets = <int64_t*>self._first_offsets.data
        cdef int64_t latest = -1
        out = []
        for i in range(self.count):
            if epochs[i] > latest:
                latest = epochs[i]
                out.append((latest, first_offsets[i]))
        return out


cdef inline void put_be32(uint8_t* p, int32_t v) noexcept nogil:
    cdef uint32_t u = <uint32_t>v
    p[0] = u >> 24
    p[1] = (u >> 16) & 0xFF
    p[2] = (u >> 8) & 0xFF
    p[3] = u & 0xFF


cdef inline void put_be64(uint8_t* p, int64_t v) noexcept nogil:
    cdef uint64_t u = <uint64_t>v
    cdef int i
    for i in range(8):
        p[i] = (u >> (56 - 8 * i)) & 0xFF


# -- sealing batches ----------------------------------------------------------------------------

cdef void put_header(uint8_t* w, Py_ssize_t records_len, int32_t count, int64_t base_offset,
                     int64_t base_timestamp, int64_t max_timestamp, int32_t last_offset_delta,
                     int16_t attributes, int32_t partition_leader_epoch, int64_t producer_id,
                     int16_t producer_epoch, int32_t base_sequence) noexcept nogil:
    """The 61-byte v2 header at ``w`` (the CRC field left for :func:`put_crc`)."""
    put_be64(w, base_offset)
    put_be32(w + 8, <int32_t>(49 + records_len))
    put_be32(w + 12, partition_leader_epoch)
    w[16] = 2
    w[21] = <uint8_t>(attributes >> 8)
    w[22] = <uint8_t>attributes
    put_be32(w + 23, last_offset_delta)
    put_be64(w + 27, base_timestamp)
    put_be64(w + 35, max_timestamp)
    put_be64(w + 43, producer_id)
    w[51] = <uint8_t>(producer_epoch >> 8)
    w[52] = <uint8_t>producer_epoch
    put_be32(w + 53, base_sequence)
    put_be32(w + 57, count)


cdef int put_crc(uint8_t* w, Py_ssize_t size, crc) except -1:
    """CRC-32C of the batch's bytes [21, size) into its CRC field."""
    put_be32(w + 17, <int32_t><uint32_t>crc(PyMemoryView_FromMemory(<char*>w + 21, size - 21,
                                                                     PyBUF_READ)))
    return 0


def seal(records, int32_t count, int64_t base_offset, int64_t base_timestamp,
         int64_t max_timestamp, int32_t last_offset_delta, int16_t attributes,
         int32_t partition_leader_epoch, int64_t producer_id, int16_t producer_epoch,
         int32_t base_sequence, crc):
    """A v2 batch: the 61-byte header around ``records`` (the records section as stored,
    compressed or not), CRC-32C over bytes [21, size) computed with ``crc`` (the ``crc32c``
    package's function). Raises OverflowError for a field out of range."""
    cdef Py_buffer view
    cdef uint8_t* w
    PyObject_GetBuffer(records, &view, PyBUF_SIMPLE)
    try:
        if view.len > 0x7FFFFFFF - 49:
            raise OverflowError("records section larger than a batch can hold")
        out = PyBytes_FromStringAndSize(NULL, 61 + view.len)
        w = <uint8_t*>PyBytes_AS_STRING(out)
        put_header(w, view.len, count, base_offset, base_timestamp, max_timestamp,
                   last_offset_delta, attributes, partition_leader_epoch, producer_id,
                   producer_epoch, base_sequence)
        if view.len:
            memcpy(w + 61, view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    put_crc(w, PyBytes_GET_SIZE(out), crc)
    return out


def seal_in_place(bytearray buf, Py_ssize_t position, int32_t count, int64_t base_offset,
                  int64_t base_timestamp, int64_t max_timestamp, int16_t attributes,
                  int64_t producer_id, int16_t producer_epoch, int32_t base_sequence, crc):
    """Write the header and CRC of the batch that fills ``buf`` from ``position`` to its end:
    61 bytes left by :func:`encode_arrow` (``head=61``) before its records, uncompressed.
    Offsets 0..count-1, partition leader epoch -1. Raises ValueError when there is no room
    for a header or the batch would pass 2 GiB."""
    cdef Py_ssize_t size = PyByteArray_GET_SIZE(buf) - position
    if position < 0 or size < 61 or size > 0x7FFFFFFF:
        raise ValueError(f"no {size}-byte batch at position {position}")
    cdef uint8_t* w = <uint8_t*>PyByteArray_AS_STRING(buf) + position
    put_header(w, size - 61, count, base_offset, base_timestamp, max_timestamp, count - 1,
               attributes, -1, producer_id, producer_epoch, base_sequence)
    put_crc(w, size, crc)


def encode_line_batches(buf, Py_ssize_t room, int64_t base_offset, int64_t timestamp,
                        bint log_append, int32_t partition_leader_epoch, crc,
                        separator=None, compress=None, int16_t codec=0):
    """Every ``\\\\n``-terminated line of ``buf`` as v2 batches of console-producer records
    (:func:`encode_lines`, at most ``room`` bytes of records each), sealed with offsets from
    ``base_offset`` and every timestamp ``timestamp`` (epoch ms; LogAppendTime batches with
    ``log_append``): ``(batches, records of each, largest records section)``, or
    ``(None, None, line number)`` for a keyed line without the separator. ``compress(records)``
    compresses a section for ``codec``."""
    cdef Py_ssize_t pos = 0, end = len(buf), largest = 0
    cdef int64_t offset = base_offset
    cdef int16_t attributes = codec | (0x08 if log_append else 0)
    cdef uint8_t* w
    batches, counts = [], []
    while pos < end:
        # uncompressed: the records are encoded straight into the batch, after its header
        records, count, after, _ = encode_lines(buf, pos, end, room, 1 << 20, separator,
                                                0 if compress is not None else 61)
        if count < 0:
            return None, None, bytes(buf[:pos]).count(b"\n") + 1
        if compress is not None:
            largest = max(largest, len(records))
            batch = seal(compress(records), count, offset, timestamp, timestamp, count - 1,
                         attributes, partition_leader_epoch, -1, -1, -1, crc)
        else:
            largest = max(largest, len(records) - 61)
            batch = records
            w = <uint8_t*>PyBytes_AS_STRING(batch)
            put_header(w, len(batch) - 61, count, offset, timestamp, timestamp, count - 1,
                       attributes, partition_leader_epoch, -1, -1, -1)
            put_crc(w, len(batch), crc)
        batches.append(batch)
        counts.append(count)
        offset += count
        pos = after
    return batches, counts, largest


def producer_batches(buf):
    """``(positions, consumed)``: where the whole v2 batches at the front of ``buf`` that carry
    a producer id or are control batches start (the only ones a producer-state replay applies,
    ``UnifiedLog.loadProducersFromRecords``), and the bytes of whole batches walked. Legacy
    entries (no producer) are walked over; the walk stops at a partial batch or a size below
    the smallest entry."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef Py_ssize_t n, pos = 0, size
    cdef int32_t length
    positions = []
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        while pos + 17 <= n:
            length = be32(p + pos + 8)
            size = 12 + <Py_ssize_t>length
            if length < 14 or size > n - pos or (p[pos + 16] >= 2 and size < 61):
                break
            if p[pos + 16] >= 2 and (be64(p + pos + 43) >= 0 or p[pos + 22] & 0x20):
                positions.append(pos)
            pos += size
    finally:
        PyBuffer_Release(&view)
    return positions, pos


# -- compaction: Kafka's SkimpyOffsetMap and the record loops of its Cleaner ---------------------
#
# The key -> offset map of a cleaning pass (``SkimpyOffsetMap``): a fixed array of slots, each the
# MD5 of a key (16 bytes) and an offset (8), probed as Kafka probes it. MD5 comes from OpenSSL's
# libcrypto, called from here because one hashlib call per record costs more than the rest of
# the record's work; the tests hold it to hashlib's. The loops walk whole batches as ``Cleaner.buildOffsetMapForSegment``
# and ``MemoryRecords.filterTo`` do, checking each batch's CRC-32C first; the batches whose
# handling needs the transaction state (control and transactional batches) and legacy entries
# are left to the caller.

cdef extern from "sys/mman.h":
    void* mmap(void* addr, size_t length, int prot, int flags, int fd, long offset)
    int munmap(void* addr, size_t length)
    int madvise(void* addr, size_t length, int advice)
    void* MAP_FAILED
    int PROT_READ, PROT_WRITE, MAP_PRIVATE, MAP_ANONYMOUS, MADV_HUGEPAGE

cdef enum:
    HUGE_PAGE = 2 * 1024 * 1024
    HASH_SIZE = 16
    BYTES_PER_ENTRY = 24  # the hash and an 8-byte offset


cdef extern from "openssl/evp.h" nogil:
    ctypedef struct EVP_MD
    ctypedef struct ENGINE
    const EVP_MD* EVP_md5()
    int EVP_Digest(const void* data, size_t count, unsigned char* md, unsigned int* size,
                   const EVP_MD* type, ENGINE* impl)

cdef const EVP_MD* MD5_ALGORITHM = EVP_md5()


cdef void md5(const uint8_t* data, Py_ssize_t n, uint8_t* out) noexcept nogil:
    """The 16-byte MD5 digest of ``data[:n]`` into ``out`` (OpenSSL's libcrypto, the MD5
    that ``hashlib`` uses, without a Python call per key)."""
    cdef unsigned int size
    EVP_Digest(data if n else <const uint8_t*>b"", n, out, &size, MD5_ALGORITHM, NULL)


def md5_digest(data):
    """MD5 of a bytes-like object, as ``hashlib.md5(data).digest()`` (for the tests)."""
    cdef const unsigned char[::1] view = data
    cdef uint8_t out[16]
    md5(&view[0] if view.shape[0] else NULL, view.shape[0], out)
    return PyBytes_FromStringAndSize(<char*>out, 16)


cdef class SkimpyOffsetMap:
    """Kafka's ``SkimpyOffsetMap``: key -> offset for ``memory // 24`` slots, keys stood for by
    their MD5 (a collision is taken for the same key, as in Kafka), collisions resolved by
    probing successive 4-byte words of the hash, then linearly. No deletes. ``size`` counts the
    keys put; ``latest_offset`` is the last offset put or set by :meth:`update_latest_offset`
    (-1 when cleared). Raises ValueError when ``memory`` holds no slot, MemoryError."""

    cdef uint8_t* _bytes
    cdef size_t _length
    cdef readonly Py_ssize_t slots
    cdef readonly Py_ssize_t size
    cdef readonly int64_t lookups
    cdef readonly int64_t probes
    cdef public int64_t latest_offset

    def __cinit__(self, Py_ssize_t memory):
        self.slots = memory // BYTES_PER_ENTRY
        if self.slots <= 0:
            raise ValueError(f"an offset map of {memory} bytes has no slot")
        # Anonymous memory, zero until touched, in huge pages where the kernel has them:
        # every probe lands on a random slot, and with 4 KiB pages each one misses the TLB.
        self._length = (self.slots * BYTES_PER_ENTRY + HUGE_PAGE - 1) // HUGE_PAGE * HUGE_PAGE
        ptr = mmap(NULL, self._length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        if ptr == MAP_FAILED:
            raise MemoryError()
        madvise(ptr, self._length, MADV_HUGEPAGE)  # a hint: without it, small pages
        self._bytes = <uint8_t*>ptr
        self.latest_offset = -1

    def __dealloc__(self):
        if self._bytes != NULL:
            munmap(self._bytes, self._length)

    cdef inline Py_ssize_t _position_of(self, const uint8_t* hash, Py_ssize_t attempt) noexcept nogil:
        # SkimpyOffsetMap.positionOf: int arithmetic wraps as Java's; Utils.abs(MIN_VALUE) = 0
        cdef Py_ssize_t word = attempt if attempt < HASH_SIZE - 4 else HASH_SIZE - 4
        cdef Py_ssize_t extra = attempt - HASH_SIZE + 4 if attempt > HASH_SIZE - 4 else 0
        cdef int32_t probe = <int32_t>(<uint32_t>be32(hash + word) + <uint32_t>extra)
        cdef int64_t magnitude = 0 if probe == -2147483648 else (probe if probe >= 0 else -probe)
        self.probes += 1
        return <Py_ssize_t>(magnitude % self.slots) * BYTES_PER_ENTRY

    cdef inline bint _is_empty(self, Py_ssize_t pos) noexcept nogil:
        cdef const uint64_t* w = <const uint64_t*>(self._bytes + pos)
        return w[0] == 0 and w[1] == 0 and w[2] == 0

    cdef int64_t get_hashed(self, const uint8_t* hash) noexcept nogil:
        cdef Py_ssize_t attempt = 0, pos, max_attempts = self.slots + HASH_SIZE - 4
        cdef int64_t offset
        self.lookups += 1
        while True:
            if attempt >= max_attempts:
                return -1
            pos = self._position_of(hash, attempt)
            if self._is_empty(pos):
                return -1
            if memcmp(self._bytes + pos, hash, HASH_SIZE) == 0:
                memcpy(&offset, self._bytes + pos + HASH_SIZE, 8)
                return offset
            attempt += 1

    cdef int put_hashed(self, const uint8_t* hash, int64_t offset) except -1:
        cdef Py_ssize_t attempt = 0, pos
        if self.size >= self.slots:
            raise ValueError(f"Attempted to add a new entry to a full offset map, entries: "
                             f"{self.size}, slots: {self.slots}")
        self.lookups += 1
        pos = self._position_of(hash, 0)
        while not self._is_empty(pos):
            if memcmp(self._bytes + pos, hash, HASH_SIZE) == 0:
                memcpy(self._bytes + pos + HASH_SIZE, &offset, 8)
                self.latest_offset = offset
                return 0
            attempt += 1
            pos = self._position_of(hash, attempt)
        memcpy(self._bytes + pos, hash, HASH_SIZE)
        memcpy(self._bytes + pos + HASH_SIZE, &offset, 8)
        self.latest_offset = offset
        self.size += 1
        return 0

    def put(self, key, int64_t offset):
        """Map ``key`` (bytes-like) to ``offset``; ValueError when every slot is taken."""
        cdef const unsigned char[::1] view = key
        cdef uint8_t hash[16]
        md5(&view[0] if view.shape[0] else NULL, view.shape[0], hash)
        self.put_hashed(hash, offset)

    def get(self, key):
        """The offset mapped to ``key``, or -1."""
        cdef const unsigned char[::1] view = key
        cdef uint8_t hash[16]
        md5(&view[0] if view.shape[0] else NULL, view.shape[0], hash)
        return self.get_hashed(hash)

    def update_latest_offset(self, int64_t offset):
        self.latest_offset = offset

    def clear(self):
        """Forget every key (``clear``)."""
        memset(self._bytes, 0, self.slots * BYTES_PER_ENTRY)
        self.size = 0
        self.lookups = 0
        self.probes = 0
        self.latest_offset = -1

    @property
    def utilization(self):
        """size / slots."""
        return <double>self.size / self.slots


cdef inline int check_crc(const uint8_t* p, Py_ssize_t pos, Py_ssize_t size, int64_t base_offset,
                          crc) except -1:
    cdef uint32_t stored = <uint32_t>be32(p + pos + 17)
    if <uint32_t>crc(PyMemoryView_FromMemory(<char*>p + pos + 21, size - 21, PyBUF_READ)) != stored:
        raise CorruptRecordError(f"Record batch at offset {base_offset} is corrupt (CRC-32C "
                                 "mismatch)")
    return 0


cdef inline Py_ssize_t whole_v2_batch(const uint8_t* p, Py_ssize_t pos, Py_ssize_t n) except -2:
    """The size of the v2 batch at ``pos``, 0 when it is not whole in ``p[:n]``, -1 for a legacy
    entry. Raises CorruptRecordError for an impossible size or magic."""
    cdef int32_t length
    cdef Py_ssize_t size
    if pos + 17 > n:
        return 0
    length = be32(p + pos + 8)
    if p[pos + 16] != 2:
        if p[pos + 16] < 2:
            return -1
        raise CorruptRecordError(f"record batch with magic {p[pos + 16]}")
    size = 12 + <Py_ssize_t>length
    if length < 49:
        raise CorruptRecordError(f"Record batch is corrupt (the size {size} is smaller than the "
                                 "minimum allowed overhead 61)")
    return size if size <= n - pos else 0


cdef int map_records(SkimpyOffsetMap m, const uint8_t* p, Py_ssize_t n, int32_t count,
                     int64_t base_offset, int64_t start, Py_ssize_t max_entries,
                     int64_t* read) except -1:
    """Put the key of each keyed record of a records section whose offset is >= ``start``
    (``buildOffsetMapForSegment``'s inner loop); 1 when the map reached ``max_entries`` first
    (the record not put), else 0. Raises CorruptRecordError."""
    cdef Py_ssize_t pos = 0
    cdef RecordView r
    cdef Status s
    cdef int64_t offset
    cdef uint8_t hash[16]
    if count < 0:
        raise CorruptRecordError(f"Found invalid record count {count} in magic v2 batch")
    for i in range(count):
        s = parse_record(p, n, pos, &r)
        if s != OK:
            raise record_error(s, &r, i)
        offset = base_offset + r.offset_delta
        if r.key_len >= 0 and offset >= start:
            if m.size >= max_entries:
                return 1
            md5(p + r.key_pos, r.key_len, hash)
            m.put_hashed(hash, offset)
        read[0] += 1
        pos = r.end
    if pos != n:
        raise CorruptRecordError(f"Incorrect declared batch size, {n - pos} bytes still "
                                 "remaining after the last record")
    return 0


def map_section(SkimpyOffsetMap m, section, int32_t count, int64_t base_offset, int64_t start,
                Py_ssize_t max_entries):
    """:func:`map_records` of one uncompressed records section: ``(records read, full)``."""
    cdef const unsigned char[::1] view = section
    cdef int64_t read = 0
    full = map_records(m, &view[0] if view.shape[0] else NULL, view.shape[0], count,
                       base_offset, start, max_entries, &read)
    return read, bool(full)


cdef inline Py_ssize_t plain_v2_batch(const uint8_t* p, Py_ssize_t pos, Py_ssize_t n, crc,
                                      int* stop) except -2:
    """The size of the whole, CRC-checked v2 data batch at ``pos`` that the cleaner's loops take
    themselves, or 0 with ``stop`` set: 0 at a partial batch, 1 for what the caller handles (a
    legacy entry, a control or transactional batch). Raises as :func:`whole_v2_batch` and
    CorruptRecordError for a bad CRC."""
    cdef Py_ssize_t size = whole_v2_batch(p, pos, n)
    if size <= 0:
        stop[0] = 0 if size == 0 else 1
        return 0
    if be16(p + pos + 21) & 0x30:
        stop[0] = 1
        return 0
    check_crc(p, pos, size, be64(p + pos), crc)
    return size


def map_run(SkimpyOffsetMap m, buf, Py_ssize_t position, int64_t start, Py_ssize_t max_entries,
            crc, decompress):
    """Map the keys of the whole v2 batches of ``buf`` from ``position`` (a block of a
    segment's .log): each CRC-checked with ``crc``, compressed sections expanded by
    ``decompress(codec, view)``, the latest offset moved to each batch's last offset from
    ``start`` on. Stops at a partial batch, a legacy entry, a control or transactional batch
    (the caller's: they need the transaction state) and when the map is full. Returns
    ``(bytes consumed, records read, stopped: 0 end, 1 batch for the caller, 2 full)``."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef const unsigned char[::1] section
    cdef Py_ssize_t n, pos = position, size
    cdef int64_t read = 0, base_offset, last_offset
    cdef int32_t count
    cdef int16_t attributes
    cdef int stop = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        while pos + 61 <= n:
            size = plain_v2_batch(p, pos, n, crc, &stop)
            if not size:
                break
            attributes = be16(p + pos + 21)
            base_offset = be64(p + pos)
            count = be32(p + pos + 57)
            if count:
                if attributes & 0x07:
                    section = decompress(attributes & 0x07, PyMemoryView_FromMemory(
                        <char*>p + pos + 61, size - 61, PyBUF_READ))
                    full = map_records(m, &section[0] if section.shape[0] else NULL,
                                       section.shape[0], count, base_offset, start,
                                       max_entries, &read)
                else:
                    full = map_records(m, p + pos + 61, size - 61, count, base_offset, start,
                                       max_entries, &read)
                if full:
                    stop = 2
                    break
            last_offset = base_offset + be32(p + pos + 23)
            if last_offset >= start:
                m.latest_offset = last_offset
            pos += size
    finally:
        PyBuffer_Release(&view)
    return pos - position, read, stop


cdef struct Kept:
    Py_ssize_t start       # the record's first byte
    Py_ssize_t tail        # its key length field: what follows is copied as it is
    Py_ssize_t end
    int32_t offset_delta
    int64_t timestamp


cdef enum BatchRetention:
    DELETE_EMPTY = 0
    RETAIN_EMPTY = 1


cdef class RecordFilter:
    """The cleaner's ``MemoryRecords.filterTo`` with ``Cleaner.cleanInto``'s filter, over one
    read buffer's worth of batches at a time: a record is kept when its offset is past the map's
    latest offset, or it has a key whose mapped offset is not above it and it has a value or its
    batch keeps tombstones (no delete horizon, or ``now`` before it). A batch whose records all
    stay and that needs no delete horizon is copied as it is; one that loses records, or keeps a
    tombstone and has no horizon yet (it gets ``now + delete_retention_ms``), is rebuilt as
    ``MemoryRecordsBuilder`` does (same base offset, last offset delta, producer fields, leader
    epoch; compressed again with ``compress(codec, records)``); an emptied batch is dropped or,
    when it must stay (the last batch of an active producer, the last of the cleaning round),
    kept as a 61-byte empty batch. Output goes to a bytearray; the chunk's figures (read,
    retained, largest offset, max timestamp and its shallow offset) accumulate until
    :meth:`reset`. ``producer_last`` maps each active producer id to its last data offset."""

    cdef SkimpyOffsetMap map
    cdef int64_t now, delete_retention_ms, upper_bound
    cdef dict producer_last
    cdef object crc, decompress, compress
    cdef Growable kept
    cdef readonly int64_t messages_read, messages_retained, bytes_retained, invalid_messages
    cdef readonly int64_t max_offset, max_timestamp, shallow_offset_of_max_timestamp

    def __cinit__(self, SkimpyOffsetMap offset_map, int64_t now, int64_t delete_retention_ms,
                  int64_t upper_bound, dict producer_last, crc, decompress, compress):
        self.map = offset_map
        self.now = now
        self.delete_retention_ms = delete_retention_ms
        self.upper_bound = upper_bound
        self.producer_last = producer_last
        self.crc = crc
        self.decompress = decompress
        self.compress = compress
        self.reset()

    def __dealloc__(self):
        release(&self.kept)

    def reset(self):
        """Start a new chunk: zero its figures (``FilterResult``)."""
        self.messages_read = self.messages_retained = self.bytes_retained = 0
        self.max_offset = -1
        self.max_timestamp = -1
        self.shallow_offset_of_max_timestamp = -1

    cdef void _retained(self, int64_t max_timestamp, int64_t shallow, int64_t max_offset,
                        int64_t messages, int64_t size) noexcept:
        # FilterResult.updateRetainedBatchMetadata
        if max_timestamp > self.max_timestamp:
            self.max_timestamp = max_timestamp
            self.shallow_offset_of_max_timestamp = shallow
        if max_offset > self.max_offset:
            self.max_offset = max_offset
        self.messages_retained += messages
        self.bytes_retained += size

    cdef int _filter_records(self, const uint8_t* s, Py_ssize_t n, int32_t count,
                             int64_t base_offset, int64_t base_ts, int64_t append_time,
                             bint retain_deletes, bint keep_all, bint* tombstones) except -1:
        """Fill ``kept`` with the records to keep; returns how many records were read."""
        cdef Py_ssize_t pos = 0, q
        cdef RecordView r
        cdef Status st
        cdef Kept k
        cdef int64_t offset, found, latest = self.map.latest_offset
        cdef uint8_t hash[16]
        cdef bint keep
        if count < 0:
            raise CorruptRecordError(f"Found invalid record count {count} in magic v2 batch")
        for i in range(count):
            q = pos
            st = skim_record(s, n, &q, &r)
            if st == OK:
                st = parse_record(s, n, pos, &r)
            if st != OK:
                raise record_error(st, &r, i)
            offset = base_offset + r.offset_delta
            if keep_all or offset > latest:
                keep = True
            elif r.key_len < 0:
                keep = False
                self.invalid_messages += 1
            else:
                md5(s + r.key_pos, r.key_len, hash)
                found = self.map.get_hashed(hash)
                keep = offset >= found and (r.value_len >= 0 or retain_deletes)
            if keep:
                k.start, k.tail, k.end = pos, q, r.end
                k.offset_delta = r.offset_delta
                k.timestamp = append_time if append_time >= 0 else base_ts + r.timestamp_delta
                put_bytes(&self.kept, <const uint8_t*>&k, sizeof(Kept))
                if r.value_len < 0:
                    tombstones[0] = True
            pos = r.end
        if pos != n:
            raise CorruptRecordError(f"Incorrect declared batch size, {n - pos} bytes still "
                                     "remaining after the last record")
        return count

    cdef int _filter_batch(self, const uint8_t* p, Py_ssize_t pos, Py_ssize_t size,
                           int retention, bint discard_records, bint marker_for_empty_txn,
                           bytearray out) except -1:
        """One batch through the filter (``filterTo``'s loop body) into ``out``."""
        cdef int64_t base_offset = be64(p + pos), base_ts = be64(p + pos + 27)
        cdef int64_t max_ts = be64(p + pos + 35)
        cdef int32_t last_delta = be32(p + pos + 23), count = be32(p + pos + 57)
        cdef int16_t attributes = be16(p + pos + 21)
        cdef bint has_horizon = attributes & 0x40, tombstones = False
        cdef int64_t append_time = max_ts if attributes & 0x08 else -1
        cdef const unsigned char[::1] section
        cdef const uint8_t* s = p + pos + 61
        cdef Py_ssize_t n = size - 61, kept
        cdef int64_t horizon
        self.kept.length = 0
        if count and not discard_records:
            if attributes & 0x07:
                section = self.decompress(attributes & 0x07, PyMemoryView_FromMemory(
                    <char*>s, n, PyBUF_READ))
                s = &section[0] if section.shape[0] else NULL
                n = section.shape[0]
            self.messages_read += self._filter_records(
                s, n, count, base_offset, base_ts, append_time,
                not has_horizon or self.now < base_ts, (attributes & 0x20) != 0, &tombstones)
        elif count > 0:
            self.messages_read += count
        kept = self.kept.length // sizeof(Kept)
        if kept:
            need_horizon = (tombstones or marker_for_empty_txn) and not has_horizon
            if kept == count and not need_horizon:
                append_out(out, p + pos, size)
                self._retained(max_ts, base_offset + last_delta, base_offset + last_delta,
                               kept, size)
            else:
                horizon = self.now + self.delete_retention_ms if need_horizon else (
                    base_ts if has_horizon else -1)
                self._rebuild(p, pos, s, kept, horizon, out)
        elif retention == RETAIN_EMPTY:
            empty_batch(p + pos, out, self.crc)
            self._retained(max_ts, base_offset + last_delta, base_offset + last_delta, 0, 61)
        return 0

    cdef int _rebuild(self, const uint8_t* p, Py_ssize_t pos, const uint8_t* s, Py_ssize_t kept,
                      int64_t horizon, bytearray out) except -1:
        """``MemoryRecordsBuilder`` over the kept records of the batch at ``p + pos``."""
        cdef const Kept* ks = <const Kept*>self.kept.data
        cdef int16_t attributes = be16(p + pos + 21)
        cdef int64_t base_offset = be64(p + pos), base_ts, max_ts = -1, delta
        cdef int32_t last_delta = be32(p + pos + 23)
        cdef Py_ssize_t records_len = 0, body, at, start
        cdef uint8_t* w
        base_ts = horizon if horizon >= 0 else ks[0].timestamp
        for i in range(kept):
            delta = ks[i].timestamp - base_ts
            body = 1 + varint_size(delta) + varint_size(ks[i].offset_delta) + ks[i].end - ks[i].tail
            records_len += varint_size(body) + body
            if ks[i].timestamp > max_ts:
                max_ts = ks[i].timestamp
        if attributes & 0x08:
            max_ts = be64(p + pos + 35)  # LogAppendTime: the batch's append time
        records = PyBytes_FromStringAndSize(NULL, records_len)
        w = <uint8_t*>PyBytes_AS_STRING(records)
        at = 0
        for i in range(kept):  # DefaultRecord.writeTo, the key, value and headers as they were
            delta = ks[i].timestamp - base_ts
            body = 1 + varint_size(delta) + varint_size(ks[i].offset_delta) + ks[i].end - ks[i].tail
            at += write_varint(w + at, body)
            w[at] = 0
            at += 1
            at += write_varint(w + at, delta)
            at += write_varint(w + at, ks[i].offset_delta)
            memcpy(w + at, s + ks[i].tail, ks[i].end - ks[i].tail)
            at += ks[i].end - ks[i].tail
        if attributes & 0x07:
            records = self.compress(attributes & 0x07, records)
        attributes = (attributes & 0x3F) | (0x40 if horizon >= 0 else 0)
        start = PyByteArray_GET_SIZE(out)
        w = reserve_out(out, 61 + len(records))
        put_header(w, len(records), <int32_t>kept, base_offset, base_ts, max_ts, last_delta,
                   attributes, be32(p + pos + 12), be64(p + pos + 43), be16(p + pos + 51),
                   be32(p + pos + 53))
        memcpy(w + 61, PyBytes_AS_STRING(records), len(records))
        put_crc(w, 61 + len(records), self.crc)
        self._retained(max_ts, base_offset + last_delta,
                       base_offset + ks[kept - 1].offset_delta, kept, 61 + len(records))
        return 0

    def filter_batch(self, buf, Py_ssize_t position, bint retain_empty, bint discard_records,
                     bint marker_for_empty_txn, bytearray out):
        """The batch at ``buf[position:]`` (whole, v2) with the retention its caller decided
        (``checkBatchRetention``: a control or transactional batch); CRC-checked. Returns its
        size."""
        cdef Py_buffer view
        cdef Py_ssize_t size
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            size = whole_v2_batch(<const uint8_t*>view.buf, position, view.len)
            if size <= 0:
                raise CorruptRecordError(f"no whole v2 batch at position {position}")
            check_crc(<const uint8_t*>view.buf, position, size,
                      be64(<const uint8_t*>view.buf + position), self.crc)
            self._filter_batch(<const uint8_t*>view.buf, position, size,
                               RETAIN_EMPTY if retain_empty else DELETE_EMPTY, discard_records,
                               marker_for_empty_txn, out)
        finally:
            PyBuffer_Release(&view)
        return size

    def run(self, buf, Py_ssize_t position, bytearray out, Py_ssize_t out_limit):
        """Filter the whole v2 data batches of ``buf`` from ``position`` into ``out``, each
        CRC-checked; a batch stays even if emptied when it is an active producer's last or
        ends the cleaning round. Stops at a partial batch, a legacy entry, a control or
        transactional batch (for :meth:`filter_batch`), and after the batch that takes ``out``
        past ``out_limit`` bytes (Kafka's write buffer, outgrown). Returns ``(bytes consumed,
        stopped: 0 end, 1 batch for the caller, 2 output full)``."""
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef Py_ssize_t n, pos = position, size
        cdef int64_t base_offset, last_offset, producer_id
        cdef int stop = 0, retention
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t*>view.buf
            n = view.len
            while pos + 61 <= n:
                size = plain_v2_batch(p, pos, n, self.crc, &stop)
                if not size:
                    break
                base_offset = be64(p + pos)
                last_offset = base_offset + be32(p + pos + 23)
                producer_id = be64(p + pos + 43)
                retention = DELETE_EMPTY
                if (producer_id >= 0 and self.producer_last.get(producer_id) == last_offset) or \
                        last_offset + 1 == self.upper_bound:
                    retention = RETAIN_EMPTY
                self._filter_batch(p, pos, size, retention, False, False, out)
                pos += size
                if PyByteArray_GET_SIZE(out) > out_limit:
                    stop = 2
                    break
        finally:
            PyBuffer_Release(&view)
        return pos - position, stop


cdef uint8_t* reserve_out(bytearray out, Py_ssize_t extra) except NULL:
    """Room for ``extra`` more bytes at the end of ``out``; a pointer to it."""
    cdef Py_ssize_t start = PyByteArray_GET_SIZE(out)
    if PyByteArray_Resize(out, start + extra) < 0:
        raise MemoryError()
    return <uint8_t*>PyByteArray_AS_STRING(out) + start


cdef int append_out(bytearray out, const uint8_t* p, Py_ssize_t n) except -1:
    memcpy(reserve_out(out, n), p, n)
    return 0


cdef int empty_batch(const uint8_t* b, bytearray out, crc) except -1:
    """``DefaultRecordBatch.writeEmptyHeader`` for the batch at ``b``: no records, no codec, no
    delete horizon, baseTimestamp -1, its offsets, max timestamp and producer fields kept."""
    cdef uint8_t* w = reserve_out(out, 61)
    put_header(w, 0, 0, be64(b), -1, be64(b + 35), be32(b + 23), be16(b + 21) & 0x38,
               be32(b + 12), be64(b + 43), be16(b + 51), be32(b + 53))
    put_crc(w, 61, crc)
    return 0
