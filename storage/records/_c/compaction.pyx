# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of ``storage.offset_map``: Kafka's ``SkimpyOffsetMap`` and the record loops
of its ``Cleaner``."""

from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE, PyByteArray_Resize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

from storage.records._c.frame cimport *
from storage.records._c.varint cimport *
from storage.records._c.records cimport (
    RecordView, check_crc, parse_record, read_bytes_field, record_error, skim_record, whole_v2_batch,
)
from storage.records._c.buffers cimport (
    Growable, OwnedBuffer, grow, put_bytes, put_int32, put_int64, release, reserve, take,
)

from storage.errors import CorruptRecordError

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
    if attributes_of(p + pos) & (CONTROL_FLAG_MASK | TRANSACTIONAL_FLAG_MASK):
        stop[0] = 1
        return 0
    check_crc(p + pos, size, crc)
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
    cdef const uint8_t* b
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
        while pos + RECORD_BATCH_OVERHEAD <= n:
            size = plain_v2_batch(p, pos, n, crc, &stop)
            if not size:
                break
            b = p + pos
            attributes = attributes_of(b)
            base_offset = base_offset_of(b)
            count = records_count_of(b)
            if count:
                if attributes & COMPRESSION_CODEC_MASK:
                    section = decompress(attributes & COMPRESSION_CODEC_MASK,
                                         records_section(b, size))
                    full = map_records(m, &section[0] if section.shape[0] else NULL,
                                       section.shape[0], count, base_offset, start,
                                       max_entries, &read)
                else:
                    full = map_records(m, b + RECORD_BATCH_OVERHEAD,
                                       size - RECORD_BATCH_OVERHEAD, count, base_offset, start,
                                       max_entries, &read)
                if full:
                    stop = 2
                    break
            last_offset = base_offset + last_offset_delta_of(b)
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
        cdef const uint8_t* b = p + pos
        cdef int64_t base_offset = base_offset_of(b), base_ts = base_timestamp_of(b)
        cdef int64_t max_ts = max_timestamp_of(b)
        cdef int32_t last_delta = last_offset_delta_of(b), count = records_count_of(b)
        cdef int16_t attributes = attributes_of(b)
        cdef bint has_horizon = attributes & DELETE_HORIZON_FLAG_MASK, tombstones = False
        cdef int64_t append_time = max_ts if attributes & TIMESTAMP_TYPE_MASK else -1
        cdef const unsigned char[::1] section
        cdef const uint8_t* s = b + RECORD_BATCH_OVERHEAD
        cdef Py_ssize_t n = size - RECORD_BATCH_OVERHEAD, kept
        cdef int64_t horizon
        self.kept.length = 0
        if count and not discard_records:
            if attributes & COMPRESSION_CODEC_MASK:
                section = self.decompress(attributes & COMPRESSION_CODEC_MASK,
                                          records_section(b, size))
                s = &section[0] if section.shape[0] else NULL
                n = section.shape[0]
            self.messages_read += self._filter_records(
                s, n, count, base_offset, base_ts, append_time,
                not has_horizon or self.now < base_ts, (attributes & CONTROL_FLAG_MASK) != 0,
                &tombstones)
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
            self._retained(max_ts, base_offset + last_delta, base_offset + last_delta, 0,
                           RECORD_BATCH_OVERHEAD)
        return 0

    cdef int _rebuild(self, const uint8_t* p, Py_ssize_t pos, const uint8_t* s, Py_ssize_t kept,
                      int64_t horizon, bytearray out) except -1:
        """``MemoryRecordsBuilder`` over the kept records of the batch at ``p + pos``."""
        cdef const Kept* ks = <const Kept*>self.kept.data
        cdef const uint8_t* b = p + pos
        cdef int16_t attributes = attributes_of(b)
        cdef int64_t base_offset = base_offset_of(b), base_ts, max_ts = -1, delta
        cdef int32_t last_delta = last_offset_delta_of(b)
        cdef Py_ssize_t records_len = 0, body, at, start
        cdef uint8_t* w
        base_ts = horizon if horizon >= 0 else ks[0].timestamp
        for i in range(kept):
            delta = ks[i].timestamp - base_ts
            body = 1 + varint_size(delta) + varint_size(ks[i].offset_delta) + ks[i].end - ks[i].tail
            records_len += varint_size(body) + body
            if ks[i].timestamp > max_ts:
                max_ts = ks[i].timestamp
        if attributes & TIMESTAMP_TYPE_MASK:
            max_ts = max_timestamp_of(b)  # LogAppendTime: the batch's append time
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
        if attributes & COMPRESSION_CODEC_MASK:
            records = self.compress(attributes & COMPRESSION_CODEC_MASK, records)
        attributes = (attributes & (COMPRESSION_CODEC_MASK | TIMESTAMP_TYPE_MASK |
                                    TRANSACTIONAL_FLAG_MASK | CONTROL_FLAG_MASK)) | (
            DELETE_HORIZON_FLAG_MASK if horizon >= 0 else 0)
        start = PyByteArray_GET_SIZE(out)
        w = reserve_out(out, RECORD_BATCH_OVERHEAD + len(records))
        put_header(w, len(records), <int32_t>kept, base_offset, base_ts, max_ts, last_delta,
                   attributes, partition_leader_epoch_of(b), producer_id_of(b),
                   producer_epoch_of(b), base_sequence_of(b))
        memcpy(w + RECORD_BATCH_OVERHEAD, PyBytes_AS_STRING(records), len(records))
        put_crc(w, RECORD_BATCH_OVERHEAD + len(records), self.crc)
        self._retained(max_ts, base_offset + last_delta,
                       base_offset + ks[kept - 1].offset_delta, kept,
                       RECORD_BATCH_OVERHEAD + len(records))
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
            check_crc(<const uint8_t*>view.buf + position, size, self.crc)
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
            while pos + RECORD_BATCH_OVERHEAD <= n:
                size = plain_v2_batch(p, pos, n, self.crc, &stop)
                if not size:
                    break
                base_offset = base_offset_of(p + pos)
                last_offset = base_offset + last_offset_delta_of(p + pos)
                producer_id = producer_id_of(p + pos)
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
    cdef uint8_t* w = reserve_out(out, RECORD_BATCH_OVERHEAD)
    put_header(w, 0, 0, base_offset_of(b), -1, max_timestamp_of(b), last_offset_delta_of(b),
               attributes_of(b) & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_FLAG_MASK |
                                   CONTROL_FLAG_MASK),
               partition_leader_epoch_of(b), producer_id_of(b), producer_epoch_of(b),
               base_sequence_of(b))
    put_crc(w, RECORD_BATCH_OVERHEAD, crc)
    return 0
