# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled twin of ``kfs.spark.partitioner``: Kafka's murmur2 and the default partitioner
over whole Arrow columns."""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint32_t

from storage.records._c.arrow cimport BinaryIn, binary_in, element


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
