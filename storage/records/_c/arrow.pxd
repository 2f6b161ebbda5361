# cython: language_level=3
"""Arrow binary arrays as C sees them (validity bitmap, int32 offsets, data): what the
record encoder (``encode_arrow``) and the Spark writer's partitioner read Arrow columns with."""

from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from libc.stdint cimport int32_t, uint8_t

cdef struct BinaryIn:
    # an Arrow binary array: validity bitmap (NULL: no nulls), int32 offsets, data, array offset
    const uint8_t* validity
    const int32_t* offsets
    const uint8_t* data
    Py_ssize_t offset


cdef inline const uint8_t* address(object buffer) except? NULL:
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


cdef inline int binary_in(BinaryIn* b, object parts) except -1:
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
