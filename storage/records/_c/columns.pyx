# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of ``storage.records.columns``: records of v2 records sections decoded
straight into Arrow column buffers, and rendered as the mount's text (values lines, kcat JSON)."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.string cimport memcpy

from storage.records._c.frame cimport *
from storage.records._c.varint cimport *
from storage.records._c.records cimport (
    RecordView, check_crc, parse_record, read_bytes_field, record_error, skim_record, whole_v2_batch,
)
from storage.records._c.buffers cimport (
    Growable, OwnedBuffer, grow, make_room, put_bytes, put_int32, put_int64, release, reserve,
    take,
)

cdef extern from "isa-l/crc.h":
    # Intel ISA-L's CRC-32C (the iSCSI polynomial), the CPU's best code picked at run time:
    # callable without the GIL, which the crc32c package's function is not
    unsigned int crc32_iscsi(unsigned char* buffer, int length, unsigned int init_crc) nogil


cdef inline uint32_t crc32c_continue(uint32_t crc, const void* buf, size_t length) noexcept nogil:
    # crc32c.crc32c(buf, crc): ISA-L takes and returns the register before the final inversion
    return <uint32_t>~crc32_iscsi(<unsigned char*>buf, <int>length, ~crc)

from binascii import b2a_base64

from crc32c import crc32c as crc32c_package

from storage.errors import CorruptRecordError
from storage.records._c.records import encode_records


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
    return json_plain_run(s, n, False, True) == n


# json_plain_run's words: a byte in each lane of a 64-bit word
cdef uint64_t LANES = 0x0101010101010101
cdef uint64_t HIGH_BITS = 0x8080808080808080


cdef inline Py_ssize_t json_plain_run(const uint8_t* s, Py_ssize_t n, bint escapes,
                                      bint non_ascii) noexcept nogil:
    """How many bytes from ``s`` (of ``n``) a JSON string takes as they are: none of them is
    a byte JSON escapes (a C0 control, quote or backslash) when ``escapes``, nor a byte of
    0x80 or more when ``non_ascii``. Eight bytes at a time (the bit tricks of "Determine if a
    word has a byte less than n", Bit Twiddling Hacks: a word is flagged when it may hold
    such a byte, never missed), then byte by byte from the first flagged word."""
    cdef Py_ssize_t i = 0
    cdef uint64_t w, quote, backslash, found
    cdef uint8_t c
    while i + 8 <= n:
        memcpy(&w, s + i, 8)
        found = w if non_ascii else 0
        if escapes:
            quote = w ^ (LANES * 0x22)
            backslash = w ^ (LANES * 0x5C)
            found |= (((w - LANES * 0x20) & ~w) | ((quote - LANES) & ~quote) |
                      ((backslash - LANES) & ~backslash))
        if found & HIGH_BITS:
            break
        i += 8
    while i < n:
        c = s[i]
        if (non_ascii and c >= 0x80) or (escapes and (c < 0x20 or c == 0x22 or c == 0x5C)):
            break
        i += 1
    return i



cdef void release_binary(BinaryColumn* c) noexcept:
    release(&c.validity)
    release(&c.offsets)
    release(&c.data)
    c.nulls = 0


cdef enum Scan:
    END = 0        # the run's bytes are done (or hold no more whole batches)
    DONE = 1       # a batch reached the end offset
    SLOW_PATH = 2  # the next batch needs the GIL
    NO_MEMORY = 3


cdef class ColumnBuilder:
    """Decodes records of uncompressed v2 records sections straight into column buffers in
    Arrow's layouts, with no per-record Python object.

    Columns: ``offset`` int64, ``timestamp`` int64 (epoch ms), ``timestamp_type`` int32
    (``TimestampType``), ``key`` and ``value`` binary (validity bitmap, int32 offsets, data),
    and with ``headers`` ``list<struct<key: string, value: binary>>`` (a record without headers
    has a null list). :meth:`finish` hands the buffers over and starts afresh.

    With ``values_text`` the builder keeps no columns but the text :meth:`render` gives
    without ``jsonl`` (each value and ``\\n``; with a ``key_separator`` each key, the
    separator, the value and ``\\n``), written as the records are decoded: one copy of each
    value instead of two, for streams of values. :meth:`add_run` then decodes the uncompressed
    batches of a run without the GIL (their CRC-32C by Intel ISA-L), so a rendering thread
    leaves the event loop free."""
    cdef Growable offsets, timestamps, types
    cdef bint values_text
    cdef Growable text, row_ends  # values_text: the rendered rows and where each one ends
    cdef bytes key_separator  # values_text: None for values lines, else keyed lines
    cdef const uint8_t* separator
    cdef Py_ssize_t separator_len
    cdef BinaryColumn keys, values
    cdef bint with_headers
    cdef Growable header_validity, header_offsets
    cdef BinaryColumn header_keys, header_values
    cdef Py_ssize_t rows, header_rows, header_nulls
    cdef readonly Py_ssize_t data_bytes
    # what the last finished batch held: the next one starts with that much room, so a stream
    # of like batches costs one allocation per buffer, not a series of doublings
    cdef Py_ssize_t last_rows, last_key_bytes, last_value_bytes

    def __cinit__(self, bint headers=False, bint values_text=False, key_separator=None):
        if headers and values_text:
            raise ValueError("a values_text builder keeps no headers")
        if key_separator is not None and not values_text:
            raise ValueError("a key_separator is for values_text builders")
        self.with_headers = headers
        self.values_text = values_text
        if key_separator is not None:
            self.key_separator = bytes(key_separator)
            self.separator = <const uint8_t*>PyBytes_AS_STRING(self.key_separator)
            self.separator_len = PyBytes_GET_SIZE(self.key_separator)
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
        """add_section for a values_text builder: room for the section's rows is made first
        (see :meth:`text_room`), so the records are decoded with the GIL released (a
        read-ahead thread then leaves the event loop free)."""
        cdef Py_ssize_t pos, rows = self.rows
        cdef RecordView r
        cdef Status s
        cdef int32_t i
        if not self.text_room(n, count):
            raise MemoryError()
        with nogil:
            pos = self.put_rows(p, n, count, base_offset, start, end, &r, &s, &i)
        if s != OK:
            raise record_error(s, &r, i)
        if pos != n:
            raise CorruptRecordError(
                f"Incorrect declared batch size, {n - pos} bytes still remaining after the "
                "last record")
        return self.rows - rows

    cdef Py_ssize_t put_rows(self, const uint8_t* p, Py_ssize_t n, int32_t count,
                             int64_t base_offset, int64_t start, int64_t end, RecordView* r,
                             Status* s, int32_t* i) noexcept nogil:
        """The rows of a records section's records with offsets in [``start``, ``end``), into
        room already made: where the records ended, with ``s[0]`` OK, or where record
        ``i[0]`` did not parse (``s[0]``, ``r`` say why)."""
        cdef Py_ssize_t pos = 0
        s[0] = OK
        for i[0] in range(count):
            s[0] = parse_record(p, n, pos, r)
            if s[0] != OK:
                break
            pos = r.end
            if start <= base_offset + r.offset_delta < end:
                self.put_row(p, r, base_offset + r.offset_delta)
        return pos

    cdef bint text_room(self, Py_ssize_t n, int32_t count) noexcept nogil:
        """Make room for the rows of a records section of ``n`` bytes and ``count`` records
        (False when memory ran out). A record takes at least 7 bytes, so a section holds at
        most ``n // 7`` (whatever ``count`` claims); a row's text is at most its record's key
        and value bytes and 9 more ("null", "null", the newline) and the separator."""
        cdef Py_ssize_t rows = min(<Py_ssize_t>max(count, 0), n // 7 + 1)
        return (make_room(&self.text, n + rows * (9 + self.separator_len)) and
                make_room(&self.row_ends, 8 * rows) and make_room(&self.offsets, 8 * rows))

    cdef inline void put_row(self, const uint8_t* p, RecordView* r, int64_t offset) noexcept nogil:
        """One row of values text (into room already made): with a separator the key (or
        null) and the separator first; the value (or null) and a newline."""
        if self.separator != NULL:
            self.put_field(p, r.key_pos, r.key_len)
            memcpy(self.text.data + self.text.length, self.separator, self.separator_len)
            self.text.length += self.separator_len
        self.put_field(p, r.value_pos, r.value_len)
        self.text.data[self.text.length] = 0x0A
        self.text.length += 1
        (<int64_t*>(self.row_ends.data + self.row_ends.length))[0] = self.text.length
        (<int64_t*>(self.offsets.data + self.offsets.length))[0] = offset
        self.row_ends.length += 8
        self.offsets.length += 8
        self.rows += 1

    cdef inline void put_field(self, const uint8_t* p, Py_ssize_t at, int32_t length) noexcept nogil:
        if length < 0:
            memcpy(self.text.data + self.text.length, b"null", 4)
            self.text.length += 4
        else:
            memcpy(self.text.data + self.text.length, p + at, length)
            self.text.length += length

    cdef Scan text_batches(self, const uint8_t* p, Py_ssize_t* at, Py_ssize_t n, int64_t start,
                           int64_t end, bint check, bint has_skip) noexcept nogil:
        """:meth:`add_run`'s loop for a values_text builder without the GIL, from ``at[0]``
        (moved past the batches done): whole uncompressed batches, each CRC-checked when
        ``check`` (by ISA-L). Stops with SLOW_PATH at a batch it leaves to
        the loop with the GIL: not a whole v2 batch, a CRC mismatch, a compressed or (with
        ``has_skip``) transactional batch, or records that do not parse (their rows are taken
        back; that loop raises the error); END at the end of ``p[:n]``, DONE when a batch
        reached ``end`` (as add_run), NO_MEMORY."""
        cdef Py_ssize_t pos = at[0], size
        cdef Scan state = END
        cdef const uint8_t* b
        cdef int64_t base_offset
        cdef int32_t last_delta, count
        cdef int16_t attributes
        while pos + RECORD_BATCH_OVERHEAD <= n:
            if next_batch(p, pos, n, &size) != WHOLE:
                state = SLOW_PATH
                break
            b = p + pos
            base_offset = base_offset_of(b)
            last_delta = last_offset_delta_of(b)
            if base_offset >= end:
                state = DONE
                break
            if check and crc32c_continue(0, b + ATTRIBUTES_OFFSET, size - ATTRIBUTES_OFFSET) \
                    != stored_crc(b):
                state = SLOW_PATH
                break
            attributes = attributes_of(b)
            count = records_count_of(b)
            if base_offset + last_delta >= start and count and \
                    not attributes & CONTROL_FLAG_MASK:
                if count < 0 or attributes & COMPRESSION_CODEC_MASK or \
                        (has_skip and attributes & TRANSACTIONAL_FLAG_MASK):
                    state = SLOW_PATH
                    break
                state = self.text_section(b + RECORD_BATCH_OVERHEAD,
                                          size - RECORD_BATCH_OVERHEAD, count, base_offset,
                                          start, end)
                if state != END:
                    break
            pos += size
            if base_offset + last_delta >= end - 1:
                state = DONE
                break
        at[0] = pos
        return state

    cdef Scan text_section(self, const uint8_t* p, Py_ssize_t n, int32_t count,
                           int64_t base_offset, int64_t start, int64_t end) noexcept nogil:
        """The rows of one uncompressed records section, all or none: END when done,
        SLOW_PATH (nothing added) when a record does not parse or the section's size is not
        its records', NO_MEMORY."""
        cdef Py_ssize_t text = self.text.length, ends = self.row_ends.length
        cdef Py_ssize_t offsets = self.offsets.length, rows = self.rows
        cdef RecordView r
        cdef Status s
        cdef int32_t i
        if not self.text_room(n, count):
            return NO_MEMORY
        if self.put_rows(p, n, count, base_offset, start, end, &r, &s, &i) != n or s != OK:
            self.text.length, self.row_ends.length = text, ends
            self.offsets.length, self.rows = offsets, rows
            return SLOW_PATH
        return END

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
        (from ``decompress``) for an unknown codec.

        A values_text builder takes the uncompressed batches without the GIL (see
        :meth:`text_batches`) when ``crc`` is None or the crc32c package's function (ISA-L
        computes the same); the rest batch by batch as below, with the same checks and
        errors."""
        cdef Py_buffer view
        cdef const uint8_t* p
        cdef const uint8_t* b
        cdef Py_ssize_t n, pos = position, size
        cdef int32_t count, last_delta
        cdef int64_t base_offset, append_time
        cdef int16_t attributes
        cdef Scan state
        cdef bint check = crc is not None, has_skip = skip is not None
        cdef bint fast = self.values_text and (
            crc is None or crc is crc32c_package)
        if position < 0:
            raise ValueError(f"negative position {position}")
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t*>view.buf
            n = view.len
            while True:
                if fast:
                    with nogil:
                        state = self.text_batches(p, &pos, n, start, end, check, has_skip)
                    if state == DONE:
                        return pos - position, True
                    if state == NO_MEMORY:
                        raise MemoryError()
                if pos + RECORD_BATCH_OVERHEAD > n:
                    break
                # one batch with the GIL (all of them unless fast)
                size = whole_v2_batch(p, pos, n)
                if size <= 0:
                    break  # a partial batch, or legacy: the caller decodes it
                b = p + pos
                base_offset = base_offset_of(b)
                last_delta = last_offset_delta_of(b)
                if base_offset >= end:
                    return pos - position, True
                if crc is not None:
                    check_crc(b, size, crc)
                attributes = attributes_of(b)
                count = records_count_of(b)
                if base_offset + last_delta >= start and count and \
                        not attributes & CONTROL_FLAG_MASK and not (
                            skip is not None and attributes & TRANSACTIONAL_FLAG_MASK and
                            skip(producer_id_of(b), base_offset)):
                    append_time = max_timestamp_of(b) if attributes & TIMESTAMP_TYPE_MASK else -1
                    section = records_section(b, size)
                    if attributes & COMPRESSION_CODEC_MASK:
                        section = decompress(attributes & COMPRESSION_CODEC_MASK, section)
                    self.add_section(section, count, base_offset, base_timestamp_of(b),
                                     append_time, start, end)
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
            if not self.text_room(PyBytes_GET_SIZE(encoded), 1):
                raise MemoryError()
            self.put_row(p, &r, offset)
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
        of kcat's record object."""
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
    """``v`` in decimal, as ``"%lld"`` prints it (snprintf was a third of a JSON line's cost)."""
    cdef uint8_t digits[20]
    cdef int at = 20
    cdef uint64_t u = (<uint64_t>0 - <uint64_t>v) if v < 0 else <uint64_t>v
    while True:
        at -= 1
        digits[at] = 0x30 + <uint8_t>(u % 10)
        u //= 10
        if u == 0:
            break
    if v < 0:
        put_bytes(g, <const uint8_t*>b"-", 1)
    return put_bytes(g, digits + at, 20 - at)


cdef int put_json_string(Growable* g, const uint8_t* s, Py_ssize_t n,
                         Py_ssize_t plain=0) except -1:
    """``s`` (valid UTF-8) as a JSON string, escaped as Python's json module escapes with
    ``ensure_ascii=False``: quote, backslash and the C0 controls, nothing else. Its first
    ``plain`` bytes are known to need no escape (a caller's :func:`json_plain_run`)."""
    cdef Py_ssize_t i = plain, run = 0
    cdef uint8_t c
    cdef char escape[8]
    put_bytes(g, <const uint8_t*>b'"', 1)
    while True:
        i += json_plain_run(s + i, n - i, True, False)
        if i >= n:
            break
        c = s[i]
        put_bytes(g, s + run, i - run)
        i += 1
        run = i
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
    """Element ``row`` of ``c`` as JSON: null, a string when UTF-8 (CPython's strict decoder
    decides), else ``{"base64":"..."}`` (the rule every text form of a record follows)."""
    if is_null(c, row):
        return put_bytes(g, <const uint8_t*>b"null", 4)
    cdef const uint8_t* s = c.data.data + offsets[row]
    cdef Py_ssize_t n = offsets[row + 1] - offsets[row]
    # the usual case, ASCII with nothing to escape, is one run: put_json_string copies it whole
    cdef Py_ssize_t plain = json_plain_run(s, n, True, True)
    if plain < n and not ascii_only(s + plain, n - plain):  # (what came before is ASCII)
        try:
            PyUnicode_DecodeUTF8(<const char*>s, n, "strict")
        except UnicodeDecodeError:
            encoded = b2a_base64(PyBytes_FromStringAndSize(<const char*>s, n), newline=False)
            put_literal(g, b'{"base64":"')
            put_literal(g, encoded)
            return put_literal(g, b'"}')
    return put_json_string(g, s, n, plain)



def isal_crc32c(const uint8_t[::1] data, uint32_t crc=0):
    """CRC-32C of ``data`` continuing ``crc``, as ``crc32c.crc32c(data, crc)``, by Intel ISA-L
    (what :meth:`ColumnBuilder.add_run` checks values_text runs with, the GIL released)."""
    with nogil:
        crc = crc32c_continue(crc, &data[0] if data.shape[0] else NULL, data.shape[0])
    return crc
