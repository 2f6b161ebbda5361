# cython: language_level=3
"""Growable byte buffers (C memory, doubled as needed) and ``OwnedBuffer``, which hands one
to Python and Arrow without a copy: the column builder's, the segment scan's and the
cleaner's scratch space."""

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy

cdef struct Growable:
    uint8_t* data
    Py_ssize_t length
    Py_ssize_t capacity



cdef class OwnedBuffer:
    cdef uint8_t* data
    cdef Py_ssize_t length


cdef bint make_room(Growable* g, Py_ssize_t extra) noexcept nogil
cdef int grow(Growable* g, Py_ssize_t extra) except -1
cdef int reserve(Growable* g, Py_ssize_t capacity) except -1
cdef OwnedBuffer take(Growable* g)
cdef void release(Growable* g) noexcept


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

