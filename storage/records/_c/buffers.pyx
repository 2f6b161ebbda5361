# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Growable C buffers and ``OwnedBuffer`` (see ``buffers.pxd``)."""

from cpython.buffer cimport PyBUF_WRITABLE
from libc.stdint cimport uint8_t
from libc.stdlib cimport free, realloc


cdef bint make_room(Growable* g, Py_ssize_t extra) noexcept nogil:
    """Make room for ``extra`` more bytes (not zeroed: most buffers are written over at once),
    doubling the capacity; False when memory ran out. Callable without the GIL."""
    cdef Py_ssize_t need = g.length + extra, capacity = g.capacity or 4096
    cdef uint8_t* data
    if need <= g.capacity:
        return True
    while capacity < need:
        capacity *= 2
    data = <uint8_t*>realloc(g.data, capacity)
    if data == NULL:
        return False
    g.data = data
    g.capacity = capacity
    return True


cdef int grow(Growable* g, Py_ssize_t extra) except -1:
    """:func:`make_room`, MemoryError when memory ran out."""
    if not make_room(g, extra):
        raise MemoryError()
    return 0



cdef class OwnedBuffer:
    """Memory from the codec, handed to Arrow without a copy (buffer protocol, read-only)."""
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

