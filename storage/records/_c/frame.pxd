# cython: language_level=3
"""Record batch framing, once for every compiled walker: the v2 header's fields by name
(``DefaultRecordBatch``: baseOffset, batchLength, partitionLeaderEpoch, magic, crc,
attributes, lastOffsetDelta, baseTimestamp, maxTimestamp, producerId, producerEpoch,
baseSequence, recordsCount), the attribute masks, big-endian reads and writes, and
:func:`next_batch`, which says what the bytes at a position are (Kafka's
``FileLogInputStream.nextBatch``: the size first, then the magic). ``storage.records.framing``
is its Python twin."""

from cpython.memoryview cimport PyMemoryView_FromMemory
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t

cdef extern from "Python.h":
    int PyBUF_READ

cdef enum:
    BASE_OFFSET_OFFSET = 0
    LENGTH_OFFSET = 8                  # batchLength: the bytes after the log overhead
    LOG_OVERHEAD = 12                  # baseOffset + batchLength
    PARTITION_LEADER_EPOCH_OFFSET = 12
    MAGIC_OFFSET = 16
    HEADER_SIZE_UP_TO_MAGIC = 17
    CRC_OFFSET = 17
    ATTRIBUTES_OFFSET = 21             # CRC-32C covers the batch from here on
    LAST_OFFSET_DELTA_OFFSET = 23
    BASE_TIMESTAMP_OFFSET = 27
    MAX_TIMESTAMP_OFFSET = 35
    PRODUCER_ID_OFFSET = 43
    PRODUCER_EPOCH_OFFSET = 51
    BASE_SEQUENCE_OFFSET = 53
    RECORDS_COUNT_OFFSET = 57
    RECORD_BATCH_OVERHEAD = 61         # the v2 header: the records section starts here
    MIN_ENTRY_LENGTH = 14              # LegacyRecord.RECORD_OVERHEAD_V0: no entry is smaller
    CURRENT_MAGIC = 2
    COMPRESSION_CODEC_MASK = 0x07
    TIMESTAMP_TYPE_MASK = 0x08
    TRANSACTIONAL_FLAG_MASK = 0x10
    CONTROL_FLAG_MASK = 0x20
    DELETE_HORIZON_FLAG_MASK = 0x40


cdef enum Framed:
    WHOLE = 0       # a whole v2 batch of ``size`` bytes
    PARTIAL = 1     # the bytes end inside the batch (or its first 17 bytes)
    LEGACY = 2      # a v0/v1 entry of ``size`` bytes (whole or not): the caller's
    TOO_SMALL = 3   # a declared size below the smallest entry: these bytes are not batches
    BAD_MAGIC = 4   # a magic above 2
    SHORT_V2 = 5    # magic 2 but smaller than the v2 header


cdef inline int16_t be16(const uint8_t* p) noexcept nogil:
    return <int16_t>((<uint16_t>p[0] << 8) | p[1])


cdef inline int32_t be32(const uint8_t* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int64_t be64(const uint8_t* p) noexcept nogil:
    cdef uint64_t v = 0
    for i in range(8):
        v = (v << 8) | p[i]
    return <int64_t>v


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


cdef inline Framed next_batch(const uint8_t* p, Py_ssize_t pos, Py_ssize_t n,
                              Py_ssize_t* size) noexcept nogil:
    """What the bytes ``p[pos:n]`` start with, its size (log overhead included) in ``size[0]``
    once its length field is read (else 0)."""
    cdef int32_t length
    size[0] = 0
    if n - pos < HEADER_SIZE_UP_TO_MAGIC:
        return PARTIAL
    length = be32(p + pos + LENGTH_OFFSET)
    size[0] = LOG_OVERHEAD + <Py_ssize_t>length
    if length < MIN_ENTRY_LENGTH:
        return TOO_SMALL
    if p[pos + MAGIC_OFFSET] < CURRENT_MAGIC:
        return LEGACY
    if p[pos + MAGIC_OFFSET] > CURRENT_MAGIC:
        return BAD_MAGIC
    if size[0] < RECORD_BATCH_OVERHEAD:
        return SHORT_V2
    if size[0] > n - pos:
        return PARTIAL
    return WHOLE


cdef inline uint32_t stored_crc(const uint8_t* b) noexcept nogil:
    return <uint32_t>be32(b + CRC_OFFSET)


cdef inline uint32_t batch_crc(const uint8_t* b, Py_ssize_t size, crc) except? 0:
    """CRC-32C of the batch at ``b`` over bytes [21, size), with ``crc`` (the crc32c
    package's function)."""
    return <uint32_t>crc(PyMemoryView_FromMemory(<char*>b + ATTRIBUTES_OFFSET,
                                                  size - ATTRIBUTES_OFFSET, PyBUF_READ))


cdef inline void put_header(uint8_t* w, Py_ssize_t records_len, int32_t count,
                            int64_t base_offset, int64_t base_timestamp, int64_t max_timestamp,
                            int32_t last_offset_delta, int16_t attributes,
                            int32_t partition_leader_epoch, int64_t producer_id,
                            int16_t producer_epoch, int32_t base_sequence) noexcept nogil:
    """The 61-byte v2 header at ``w`` (the CRC field left for :func:`put_crc`)."""
    put_be64(w + BASE_OFFSET_OFFSET, base_offset)
    put_be32(w + LENGTH_OFFSET, <int32_t>(RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + records_len))
    put_be32(w + PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)
    w[MAGIC_OFFSET] = CURRENT_MAGIC
    w[ATTRIBUTES_OFFSET] = <uint8_t>(attributes >> 8)
    w[ATTRIBUTES_OFFSET + 1] = <uint8_t>attributes
    put_be32(w + LAST_OFFSET_DELTA_OFFSET, last_offset_delta)
    put_be64(w + BASE_TIMESTAMP_OFFSET, base_timestamp)
    put_be64(w + MAX_TIMESTAMP_OFFSET, max_timestamp)
    put_be64(w + PRODUCER_ID_OFFSET, producer_id)
    w[PRODUCER_EPOCH_OFFSET] = <uint8_t>(producer_epoch >> 8)
    w[PRODUCER_EPOCH_OFFSET + 1] = <uint8_t>producer_epoch
    put_be32(w + BASE_SEQUENCE_OFFSET, base_sequence)
    put_be32(w + RECORDS_COUNT_OFFSET, count)


cdef inline int put_crc(uint8_t* w, Py_ssize_t size, crc) except -1:
    """CRC-32C of the batch's bytes [21, size) into its CRC field."""
    put_be32(w + CRC_OFFSET, <int32_t>batch_crc(w, size, crc))
    return 0


# -- the header's fields of the batch at ``b`` ---------------------------------------------------

cdef inline int64_t base_offset_of(const uint8_t* b) noexcept nogil:
    return be64(b + BASE_OFFSET_OFFSET)


cdef inline int32_t partition_leader_epoch_of(const uint8_t* b) noexcept nogil:
    return be32(b + PARTITION_LEADER_EPOCH_OFFSET)


cdef inline int16_t attributes_of(const uint8_t* b) noexcept nogil:
    return be16(b + ATTRIBUTES_OFFSET)


cdef inline int32_t last_offset_delta_of(const uint8_t* b) noexcept nogil:
    return be32(b + LAST_OFFSET_DELTA_OFFSET)


cdef inline int64_t base_timestamp_of(const uint8_t* b) noexcept nogil:
    return be64(b + BASE_TIMESTAMP_OFFSET)


cdef inline int64_t max_timestamp_of(const uint8_t* b) noexcept nogil:
    return be64(b + MAX_TIMESTAMP_OFFSET)


cdef inline int64_t producer_id_of(const uint8_t* b) noexcept nogil:
    return be64(b + PRODUCER_ID_OFFSET)


cdef inline int16_t producer_epoch_of(const uint8_t* b) noexcept nogil:
    return be16(b + PRODUCER_EPOCH_OFFSET)


cdef inline int32_t base_sequence_of(const uint8_t* b) noexcept nogil:
    return be32(b + BASE_SEQUENCE_OFFSET)


cdef inline int32_t records_count_of(const uint8_t* b) noexcept nogil:
    return be32(b + RECORDS_COUNT_OFFSET)


cdef inline object records_section(const uint8_t* b, Py_ssize_t size):
    """The records section of the batch at ``b`` (``size`` bytes in all), as a memoryview."""
    return PyMemoryView_FromMemory(<char*>b + RECORD_BATCH_OVERHEAD,
                                   size - RECORD_BATCH_OVERHEAD, PyBUF_READ)
