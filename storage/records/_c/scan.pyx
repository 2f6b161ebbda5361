# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of ``storage.segment``'s scans: batch boundaries, the producer batches a
replay needs, ``SegmentScan``, the checks of recovery and verify, and ``PendingRead``, a scan's
next block read while it decodes this one."""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t
from libc.string cimport memset

from storage.records._c.frame cimport *
from storage.records._c.buffers cimport (
    Growable, OwnedBuffer, grow, put_bytes, put_int32, put_int64, release, reserve, take,
)

import os

from storage.errors import CorruptRecordError


def batch_ends(const uint8_t[::1] buf, Py_ssize_t pos=0, Py_ssize_t end=-1):
    """Walk the batches of ``buf[pos:end]`` by their batchLength fields alone:
    ``(positions, stop)``, the start of each whole batch (any magic) and where the walk
    stopped: at ``end``, at a partial batch, or at a declared size below the smallest entry
    (14 bytes, a v0 message), where the bytes are not batches. Reads nothing but the 12-byte
    log overhead of each batch."""
    cdef Py_ssize_t n = buf.shape[0] if end < 0 else min(end, buf.shape[0])
    cdef const uint8_t* p = &buf[0] if buf.shape[0] else NULL
    cdef Py_ssize_t size
    cdef Framed framed
    cdef list positions = []
    if pos < 0:
        raise ValueError(f"negative position {pos}")
    while pos + LOG_OVERHEAD <= n:
        framed = next_batch(p, pos, n, &size)
        if framed == PARTIAL or framed == TOO_SMALL or size > n - pos:
            break
        positions.append(pos)
        pos += size
    return positions, pos




def largest_lower_bound(const uint8_t[::1] entries, Py_ssize_t count, Py_ssize_t entry_size,
                        Py_ssize_t key_at, int key_size, int64_t target):
    """The last of the first ``count`` index entries of ``entry_size`` bytes whose key, a
    big-endian signed int of ``key_size`` bytes (4 or 8) at ``key_at`` in the entry, is
    <= ``target``, or -1 (Kafka's ``AbstractIndex.largestLowerBoundSlotFor``; keys strictly
    increase). Raises ValueError when ``count`` entries do not fit ``entries``."""
    if count < 0 or key_size not in (4, 8) or key_at < 0 or key_at + key_size > entry_size \
            or count * entry_size > entries.shape[0]:
        raise ValueError(f"{count} entries of {entry_size} bytes (key {key_size} bytes at "
                         f"{key_at}) do not fit {entries.shape[0]} bytes")
    if count == 0:
        return -1
    cdef const uint8_t* p = &entries[0] + key_at
    cdef Py_ssize_t lo = 0, hi = count - 1, mid
    if _key(p, key_size) > target:
        return -1
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if _key(p + mid * entry_size, key_size) <= target:
            lo = mid
        else:
            hi = mid - 1
    return lo


cdef int64_t put_index_entries(Growable* offsets, Growable* times, int64_t base_offset,
                               int64_t last_offset, int64_t position, int64_t max_timestamp,
                               int64_t max_timestamp_offset, int64_t last_time_entry) except? -2:
    """One index point as on disk: the offset entry (``last_offset``, ``position``) and, when
    ``max_timestamp`` is above the time index's last entry ``last_time_entry``, the time entry
    (``max_timestamp``, its offset) (``TimeIndex.maybeAppend``). Returns the time index's last
    timestamp after it."""
    cdef uint8_t entry[12]
    put_be32(entry, <int32_t>(last_offset - base_offset))
    put_be32(entry + 4, <int32_t>position)
    put_bytes(offsets, entry, 8)
    if max_timestamp <= last_time_entry:
        return last_time_entry
    put_be64(entry, max_timestamp)
    put_be32(entry + 8, <int32_t>(max_timestamp_offset - base_offset))
    put_bytes(times, entry, 12)
    return max_timestamp


def append_index_entries(batches, int64_t base_offset, Py_ssize_t position,
                         Py_ssize_t since_entry, Py_ssize_t interval, int64_t max_timestamp,
                         int64_t max_timestamp_offset, int64_t last_time_entry):
    """The index entries an append of ``batches`` (a list of buffers, each whole v2 batches,
    written one after the other from .log ``position``) makes, batch by batch as Kafka 4.1's
    ``LogSegment.append``: the largest timestamp so far rises to a batch's maxTimestamp (with
    its last offset); when more than ``interval`` bytes (``index.interval.bytes``) went since
    the last entry (``since_entry``), the offset index gets (the batch's last offset, its
    position) and the time index (largest timestamp so far, its offset) when that is above
    its last entry's timestamp ``last_time_entry`` (``TimeIndex.maybeAppend``).

    Returns ``(offset entries, time entries, bytes since the last entry, largest timestamp,
    its offset)``, the entries as on disk (offsets relative to ``base_offset``, big-endian).
    Raises ValueError when a buffer does not hold whole batches."""
    cdef Growable offsets, times
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef Py_ssize_t at, size
    cdef int64_t last
    memset(&offsets, 0, sizeof(Growable))
    memset(&times, 0, sizeof(Growable))
    try:
        for data in batches:
            PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
            try:
                p = <const uint8_t*>view.buf
                at = 0
                while at < view.len:
                    if view.len - at < RECORD_BATCH_OVERHEAD:
                        raise ValueError(f"{view.len - at} bytes at {at} are not a whole batch")
                    size = LOG_OVERHEAD + be32(p + at + LENGTH_OFFSET)
                    if size < RECORD_BATCH_OVERHEAD or size > view.len - at:
                        raise ValueError(f"a {size}-byte batch at {at} of {view.len} bytes")
                    last = be64(p + at) + be32(p + at + LAST_OFFSET_DELTA_OFFSET)
                    if be64(p + at + MAX_TIMESTAMP_OFFSET) > max_timestamp:
                        max_timestamp = be64(p + at + MAX_TIMESTAMP_OFFSET)
                        max_timestamp_offset = last
                    if since_entry > interval:
                        last_time_entry = put_index_entries(
                            &offsets, &times, base_offset, last, position, max_timestamp,
                            max_timestamp_offset, last_time_entry)
                        since_entry = 0
                    since_entry += size
                    position += size
                    at += size
            finally:
                PyBuffer_Release(&view)
        return (PyBytes_FromStringAndSize(<char*>offsets.data, offsets.length),
                PyBytes_FromStringAndSize(<char*>times.data, times.length),
                since_entry, max_timestamp, max_timestamp_offset)
    finally:
        release(&offsets)
        release(&times)


cdef inline int64_t _key(const uint8_t* p, int size) noexcept nogil:
    return be32(p) if size == 4 else be64(p)

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


cdef str not_a_batch(Framed framed, int64_t position, const uint8_t* b, Py_ssize_t size):
    """What the bytes at ``position`` are instead of a batch, in Kafka's words
    (``FileLogInputStream.nextBatch``, ``DefaultRecordBatch.ensureValid``)."""
    if framed == TOO_SMALL:
        return (f"Found record size {size - LOG_OVERHEAD} smaller than minimum record "
                f"overhead (14) at position {position}")
    if framed == BAD_MAGIC:
        return (f"record batch at position {position} has magic {b[MAGIC_OFFSET]}; only "
                "magic 2 is read here")
    return (f"Record batch is corrupt (the size {size} is smaller than the minimum allowed "
            "overhead 61)")


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
        cdef const uint8_t* b
        cdef Framed framed
        cdef int32_t last_delta, count
        cdef int64_t base_offset, max_ts
        cdef uint32_t stored, computed
        cdef int codec
        cdef Py_ssize_t problems_before
        self.at_legacy = False
        while pos + HEADER_SIZE_UP_TO_MAGIC <= n:
            b = p + pos
            framed = next_batch(p, pos, n, &size)
            if framed == PARTIAL:
                break  # the caller reads on from here
            if framed == LEGACY:
                self.at_legacy = True
                break
            if framed != WHOLE:
                self.broken = True
                self.problem(file_pos + pos, not_a_batch(framed, file_pos + pos, b, size))
                break
            base_offset = base_offset_of(b)
            last_delta = last_offset_delta_of(b)
            max_ts = max_timestamp_of(b)
            count = records_count_of(b)
            problems_before = len(self.problems)
            stored = stored_crc(b)
            computed = batch_crc(b, size, self.crc)
            if computed != stored:
                self.problem(file_pos + pos, f"Record batch at offset {base_offset} is corrupt "
                                             f"(stored crc = {stored}, computed crc = {computed})")
            codec = attributes_of(b) & COMPRESSION_CODEC_MASK
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
                        partition_leader_epoch_of(b))
            if producer_id_of(b) >= 0 or attributes_of(b) & CONTROL_FLAG_MASK:
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
        memset(&offsets, 0, sizeof(Growable))
        memset(&times, 0, sizeof(Growable))
        try:
            for i in range(self.count):
                if max_ts[i] > best_ts:
                    best_ts, best_offset = max_ts[i], last_offsets[i]
                if positions[i] - last_entry > interval:
                    written_ts = put_index_entries(&offsets, &times, self.base, last_offsets[i],
                                                   positions[i], best_ts, best_offset, written_ts)
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



def producer_batches(buf):
    """``(positions, consumed)``: where the whole v2 batches at the front of ``buf`` that carry
    a producer id or are control batches start (the only ones a producer-state replay applies,
    ``UnifiedLog.loadProducersFromRecords``), and the bytes of whole batches walked. Legacy
    entries (no producer) are walked over; the walk stops at a partial batch or a size below
    the smallest entry."""
    cdef Py_buffer view
    cdef const uint8_t* p
    cdef Py_ssize_t n, pos = 0, size
    cdef Framed framed
    positions = []
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t*>view.buf
        n = view.len
        while pos + HEADER_SIZE_UP_TO_MAGIC <= n:
            framed = next_batch(p, pos, n, &size)
            if framed == LEGACY and size <= n - pos:
                pos += size  # no producer: walked over
                continue
            if framed != WHOLE:
                break  # partial, or not a batch: the replay's own read says what is wrong
            if producer_id_of(p + pos) >= 0 or attributes_of(p + pos) & CONTROL_FLAG_MASK:
                positions.append(pos)
            pos += size
    finally:
        PyBuffer_Release(&view)
    return positions, pos



# -- a scan's next block read while the current one is decoded --------------------------------

cdef extern from "<pthread.h>" nogil:
    ctypedef unsigned long pthread_t
    int pthread_create(pthread_t* thread, const void* attr, void* (*run)(void*) noexcept nogil,
                       void* arg)
    int pthread_join(pthread_t thread, void** result)

cdef extern from "<unistd.h>" nogil:
    ssize_t pread(int fd, void* buf, size_t count, long long offset)

cdef extern from "<errno.h>" nogil:
    int errno
    int EINTR


cdef struct _Read:
    int fd
    char* data
    size_t size
    long long position
    ssize_t done  # bytes read, or -1 with ``error`` set
    int error


cdef void* _pread_all(void* arg) noexcept nogil:
    """pread until ``size`` bytes or the end of the file (a regular file's pread is short
    only there, or when a signal interrupts it)."""
    cdef _Read* read = <_Read*>arg
    cdef ssize_t n
    read.done = 0
    while <size_t>read.done < read.size:
        n = pread(read.fd, read.data + read.done, read.size - read.done,
                  read.position + read.done)
        if n > 0:
            read.done += n
        elif n == 0:
            break
        elif errno != EINTR:
            read.error = errno
            read.done = -1
            break
    return NULL


cdef class PendingRead:
    """``buffer`` filled from ``fd`` at ``position`` by a thread of its own, without the GIL,
    while the caller goes on: :meth:`wait` gives the bytes read. The buffer is held (not
    resizable, not freed) and ``fd`` must stay open until the read is waited for; one never
    waited for is waited for when dropped."""
    cdef Py_buffer _view
    cdef _Read _read
    cdef pthread_t _thread
    cdef bint _running

    def __cinit__(self, int fd, buffer, long long position):
        PyObject_GetBuffer(buffer, &self._view, PyBUF_WRITABLE)
        self._read.fd = fd
        self._read.data = <char*>self._view.buf
        self._read.size = self._view.len
        self._read.position = position
        self._read.error = 0
        cdef int failed = pthread_create(&self._thread, NULL, _pread_all, &self._read)
        if failed:  # (no thread to be had: read here)
            _pread_all(&self._read)
        self._running = not failed

    def wait(self) -> int:
        """The number of bytes read (short only at the end of the file). Raises OSError as
        ``pread`` failed."""
        self._join()
        if self._read.done < 0:
            raise OSError(self._read.error, os.strerror(self._read.error))
        return self._read.done

    cdef void _join(self) noexcept:
        if self._running:
            with nogil:
                pthread_join(self._thread, NULL)
            self._running = False

    def __dealloc__(self):
        self._join()
        PyBuffer_Release(&self._view)
