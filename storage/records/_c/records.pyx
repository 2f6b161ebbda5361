# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of ``storage.records.batch``: the v2 record codec (Kafka's
``DefaultRecord`` / ``DefaultRecordBatch`` wire layout), flat and sans-IO: bytes in, bytes out;
records decoded one at a time, encoded from lines, lists or Arrow columns, sealed in batches.

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
from cpython.object cimport PyObject
from cpython.ref cimport Py_DECREF

cdef extern from "Python.h":
    # a bytes object still owned by its maker alone may be cut in place (one reference)
    PyObject* new_bytes "PyBytes_FromStringAndSize"(const char* v, Py_ssize_t n) except NULL
    int resize_bytes "_PyBytes_Resize"(PyObject** b, Py_ssize_t n) except -1
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t
from libc.string cimport memchr, memcmp, memcpy

from storage.records._c.arrow cimport BinaryIn, address, binary_in, element
from storage.records._c.frame cimport *
from storage.records._c.varint cimport *

from binascii import b2a_base64

from storage.errors import CorruptRecordError
from storage.records.record import Record, TimestampType

cdef object _CREATE_TIME = TimestampType.CREATE_TIME
cdef object _LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
cdef object _Record = Record
cdef object _tuple_new = tuple.__new__


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


cdef Py_ssize_t whole_v2_batch(const uint8_t* p, Py_ssize_t pos, Py_ssize_t n) except -2:
    """The size of the whole v2 batch at ``pos`` (:func:`next_batch`), 0 when ``p[:n]`` ends
    inside it, -1 for a legacy entry (the caller's). Raises CorruptRecordError for a magic above
    2 or a size below the v2 header's."""
    cdef Py_ssize_t size
    cdef Framed framed = next_batch(p, pos, n, &size)
    if framed == WHOLE:
        return size
    if framed == PARTIAL:
        return 0
    if framed == LEGACY:
        return -1
    if framed == BAD_MAGIC:
        raise CorruptRecordError(f"record batch with magic {p[pos + MAGIC_OFFSET]}")
    raise CorruptRecordError(f"Record batch is corrupt (the size {size} is smaller than the "
                             "minimum allowed overhead 61)")


cdef int check_crc(const uint8_t* b, Py_ssize_t size, crc) except -1:
    """CorruptRecordError when the batch at ``b`` fails its CRC-32C (``ensureValid``)."""
    if batch_crc(b, size, crc) != stored_crc(b):
        raise CorruptRecordError(f"Record batch at offset {base_offset_of(b)} is corrupt "
                                 "(CRC-32C mismatch)")
    return 0


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


# A producer batch's room (``RecordAccumulator.append``): ``batch.size`` bytes, or, when its first
# record is larger, that record's upper bound (``DefaultRecordBatch.estimateBatchSizeUpperBound``:
# the batch header and ``DefaultRecord.recordSizeUpperBound``, MAX_RECORD_OVERHEAD = 21 bytes
# over the key, value and headers, which is 18 more than the first record's body at deltas 0).
DEF UPPER_BOUND_SLACK = 18


cpdef Py_ssize_t batch_room(Py_ssize_t room, Py_ssize_t first_body, Py_ssize_t cap=-1):
    """The records bytes a batch takes (``MemoryRecordsBuilder``'s writeLimit less its header):
    ``room`` (``batch.size`` less the header), or the upper bound of a larger first record whose
    body at offset and timestamp deltas 0 is ``first_body`` bytes; within ``cap`` (the records
    bytes of a batch of ``max.message.bytes``, which a broker refuses to exceed; -1: none) but
    never less than the first record."""
    cdef Py_ssize_t bound = max(room, first_body + UPPER_BOUND_SLACK)
    if cap >= 0:
        bound = max(min(bound, cap), first_body + varint_size(first_body))
    return bound


def plan_cuts(values, keys, Py_ssize_t room, Py_ssize_t cap=-1):
    """Where Kafka's producer cuts records stamped at once (timestamp deltas 0, no headers) into
    batches of ``room`` bytes of records (``batch.size`` less the batch header): the
    ``[start, end)`` runs, each taking records while ``MemoryRecordsBuilder.hasRoomFor`` would
    (the exact size of each at its offset delta; a larger first record gets
    :func:`batch_room`, within ``cap``). ``values`` bytes-like or None, ``keys`` None or one
    each."""
    cdef Py_ssize_t n = len(values), i, start = 0, used = 0, base, body, size, limit = room
    cuts = []
    for i in range(n):
        key = keys[i] if keys is not None else None
        # attributes, timestamp delta 0 and a header count of 0 around the key and value
        base = 3 + field_size(key) + field_size(values[i])
        body = base + varint_size(i - start)
        size = body + varint_size(body)
        if i > start and used + size > limit:
            cuts.append((start, i))
            start, used = i, 0
            body = base + 1
            size = body + varint_size(body)
        if i == start:
            limit = batch_room(room, body, cap)
        used += size
    if n:
        cuts.append((start, n))
    return cuts


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
                 Py_ssize_t max_records, const uint8_t[::1] separator=None, Py_ssize_t head=0,
                 Py_ssize_t cap=-1):
    """Records of newline-terminated lines of ``buf[pos:end]``, as the console producer makes
    them (timestamp delta 0, offset deltas from 0, no headers): ``(records section, records,
    position after the last line taken, largest record in bytes)``.

    Lines are taken while the section stays within ``max_bytes`` (the first line always; a
    larger one makes the room its upper bound within ``cap``, :func:`batch_room`, as a
    producer's batch does) and up to ``max_records``; a line is its bytes up to ``\\n`` (excluded). Without ``separator``
    the key is null; with it, the key is what precedes the line's first separator and the value
    what follows (``parse.key=true``). A line without the separator stops the run: when it is
    the first, the result is ``(None, -1, its position, 0)``. With ``head`` the section starts
    after ``head`` bytes left for the caller (a batch header), not counted in the largest
    record."""
    cdef const uint8_t* p = &buf[0] if buf.shape[0] else NULL
    cdef const uint8_t* sep = NULL
    cdef const uint8_t* nl
    cdef Py_ssize_t sep_len = 0, total = 0, line_end, size, body, key_len = 0
    cdef Py_ssize_t longest = 0, count = 0, room
    cdef PyObject* out
    cdef uint8_t* w
    if pos < 0 or head < 0:
        raise ValueError(f"negative position {pos} or head {head}")
    if separator is not None and separator.shape[0]:
        sep = &separator[0]
        sep_len = separator.shape[0]
    end = min(end, buf.shape[0])
    # One pass: each line is sized and written at once, into room for max_bytes of records
    # (or the first record alone when it is larger), the unused end cut off afterwards.
    nl = <const uint8_t*>memchr(p + pos, 10, end - pos) if pos < end else NULL
    if nl == NULL or max_records <= 0:
        return bytes(head), 0, pos, 0
    body = line_record_body(p, pos, nl - p, sep, sep_len, 0, &key_len)
    if body < 0:
        return None, -1, pos, 0
    room = batch_room(max_bytes, body, cap)
    out = new_bytes(NULL, head + room)
    w = <uint8_t*>PyBytes_AS_STRING(<object>out) + head
    while True:
        line_end = nl - p
        size = body + varint_size(body)
        if count and total + size > room:
            break
        w = write_line_record(w, p, pos, line_end, body, count, sep, sep_len, key_len)
        total += size
        longest = max(longest, size)
        count += 1
        pos = line_end + 1
        if pos >= end or count >= max_records:
            break
        nl = <const uint8_t*>memchr(p + pos, 10, end - pos)
        if nl == NULL:
            break
        body = line_record_body(p, pos, nl - p, sep, sep_len, count, &key_len)
        if body < 0:
            break
    if head + total < PyBytes_GET_SIZE(<object>out):
        resize_bytes(&out, head + total)
    records = <object>out
    Py_DECREF(records)  # (the reference new_bytes made; ``records`` holds its own)
    return records, count, pos, longest


cdef inline uint8_t* write_line_record(uint8_t* w, const uint8_t* p, Py_ssize_t pos,
                                       Py_ssize_t line_end, Py_ssize_t body, Py_ssize_t delta,
                                       const uint8_t* sep, Py_ssize_t sep_len,
                                       Py_ssize_t key_len) noexcept nogil:
    """Write the record of line [pos, line_end) (``body`` bytes after its length varint,
    offset delta ``delta``, timestamp delta 0, no headers) at ``w``; returns the end."""
    cdef Py_ssize_t value_at
    w += write_varint(w, body)
    w[0] = 0  # attributes
    w[1] = 0  # timestamp delta
    w += 2
    w += write_varint(w, delta)
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
    return w + 1


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


# -- sealing batches ----------------------------------------------------------------------------

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
        if view.len > 0x7FFFFFFF - (RECORD_BATCH_OVERHEAD - LOG_OVERHEAD):
            raise OverflowError("records section larger than a batch can hold")
        out = PyBytes_FromStringAndSize(NULL, RECORD_BATCH_OVERHEAD + view.len)
        w = <uint8_t*>PyBytes_AS_STRING(out)
        put_header(w, view.len, count, base_offset, base_timestamp, max_timestamp,
                   last_offset_delta, attributes, partition_leader_epoch, producer_id,
                   producer_epoch, base_sequence)
        if view.len:
            memcpy(w + RECORD_BATCH_OVERHEAD, view.buf, view.len)
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
    if position < 0 or size < RECORD_BATCH_OVERHEAD or size > 0x7FFFFFFF:
        raise ValueError(f"no {size}-byte batch at position {position}")
    cdef uint8_t* w = <uint8_t*>PyByteArray_AS_STRING(buf) + position
    put_header(w, size - RECORD_BATCH_OVERHEAD, count, base_offset, base_timestamp, max_timestamp, count - 1,
               attributes, -1, producer_id, producer_epoch, base_sequence)
    put_crc(w, size, crc)


def encode_line_batches(buf, Py_ssize_t room, int64_t base_offset, int64_t timestamp,
                        bint log_append, int32_t partition_leader_epoch, crc,
                        separator=None, compress=None, int16_t codec=0, Py_ssize_t cap=-1):
    """Every ``\\\\n``-terminated line of ``buf`` as v2 batches of console-producer records
    (:func:`encode_lines`, at most ``room`` bytes of records each, ``cap`` for a larger first
    record), sealed with offsets from
    ``base_offset`` and every timestamp ``timestamp`` (epoch ms; LogAppendTime batches with
    ``log_append``): ``(batches, records of each, largest records section)``, or
    ``(None, None, line number)`` for a keyed line without the separator. ``compress(records)``
    compresses a section for ``codec``."""
    cdef Py_ssize_t pos = 0, end = len(buf), largest = 0
    cdef int64_t offset = base_offset
    cdef int16_t attributes = codec | (TIMESTAMP_TYPE_MASK if log_append else 0)
    cdef uint8_t* w
    batches, counts = [], []
    while pos < end:
        # uncompressed: the records are encoded straight into the batch, after its header
        records, count, after, _ = encode_lines(buf, pos, end, room, 1 << 20, separator,
                                                0 if compress is not None else RECORD_BATCH_OVERHEAD,
                                                cap)
        if count < 0:
            return None, None, bytes(buf[:pos]).count(b"\n") + 1
        if compress is not None:
            largest = max(largest, len(records))
            batch = seal(compress(records), count, offset, timestamp, timestamp, count - 1,
                         attributes, partition_leader_epoch, -1, -1, -1, crc)
        else:
            largest = max(largest, len(records) - RECORD_BATCH_OVERHEAD)
            batch = records
            w = <uint8_t*>PyBytes_AS_STRING(batch)
            put_header(w, len(batch) - RECORD_BATCH_OVERHEAD, count, offset, timestamp, timestamp, count - 1,
                       attributes, partition_leader_epoch, -1, -1, -1)
            put_crc(w, len(batch), crc)
        batches.append(batch)
        counts.append(count)
        offset += count
        pos = after
    return batches, counts, largest


# -- encoding from Arrow columns (the Spark writer's) ----------------------------------------------

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
                 Py_ssize_t head=0, Py_ssize_t cap=-1):
    """Records of Arrow columns, rows [``start``, ``stop``), taken while the section stays
    within ``max_bytes`` (the first row always; a larger one makes the room its upper bound
    within ``cap``, :func:`batch_room`, as a producer's batch does), appended to ``out``
    (grown in place, so a producer's batches for one partition build up in one buffer with no joining copy):
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
    cdef Py_ssize_t r, limit = max_bytes
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
        if rows == 0:
            limit = batch_room(max_bytes, body, cap)
        elif total + varint_size(body) + body > limit:
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

