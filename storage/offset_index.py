"""The offset index, ``<base>.index`` (Kafka's ``OffsetIndex``).

Entries are 8 bytes, big-endian: (offset - base offset as int32, byte position in the .log as
int32), sparse, one every ``index.interval.bytes`` of appended data, strictly increasing.
"""

from __future__ import annotations

import struct

from storage.abstract_index import AbstractIndex

_ENTRY = struct.Struct(">ii")
_INT32_MAX = 2**31 - 1


class IndexOffsetOverflowError(ValueError):
    """An offset whose distance from the base offset does not fit an int32
    (Kafka's ``IndexOffsetOverflowException``): the segment must roll instead."""


class InvalidOffsetError(ValueError):
    """An entry that would not keep the index strictly increasing (``InvalidOffsetException``)."""


class OffsetIndex(AbstractIndex):
    """Maps offsets to .log byte positions for one segment."""

    ENTRY_SIZE = 8
    KEY_FIELD = (0, 4)  # the relative offset

    def _key(self, slot: int) -> int:
        return _ENTRY.unpack_from(self._mmap, slot * 8)[0]

    _relative_offset = _key

    def entry(self, slot: int) -> tuple[int, int]:
        """(absolute offset, position) of ``slot``."""
        rel, pos = _ENTRY.unpack_from(self._mmap, slot * 8)
        return self.base_offset + rel, pos

    @property
    def last_offset(self) -> int:
        """The offset of the last entry, or the base offset when empty."""
        return self.entry(self._entries - 1)[0] if self._entries else self.base_offset

    def relative_offset(self, offset: int) -> int:
        """``offset - base_offset``; raises IndexOffsetOverflowError if it is not a
        non-negative int32 (``AbstractIndex.toRelative``)."""
        rel = offset - self.base_offset
        if rel < 0 or rel > _INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} cannot be stored in the index of segment {self.base_offset}"
            )
        return rel

    def can_append_offset(self, offset: int) -> bool:
        rel = offset - self.base_offset
        return 0 <= rel <= _INT32_MAX

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """The entry with the largest offset <= target as (offset, position), or
        (base offset, 0) when there is none (``OffsetIndex.lookup``)."""
        slot = self.slot_for(target_offset)
        if slot < 0:
            return self.base_offset, 0
        return self.entry(slot)

    def slot_for(self, target_offset: int) -> int:
        """The slot of :meth:`lookup`'s entry (the largest offset <= target), -1 if none."""
        return self._largest_lower_bound_slot(target_offset - self.base_offset)

    def position_after(self, target_offset: int) -> int | None:
        """A position that no batch holding an offset below ``target_offset`` reaches past:
        that of the second entry after the last one <= target (an entry points at a batch
        whose last offset it is, so the batch holding ``target_offset - 1`` ends before it),
        or None when there is no such entry."""
        slot = self.slot_for(target_offset) + 2
        return self.entry(slot)[1] if slot < self._entries else None

    def append(self, offset: int, position: int) -> None:
        """Add (offset, position); raises InvalidOffsetError unless offset > last offset, and
        IndexError when full (``OffsetIndex.append``)."""
        if self._entries and offset <= self.last_offset:
            raise InvalidOffsetError(
                f"attempt to append offset {offset} to position {self._entries} no larger than"
                f" the last offset appended ({self.last_offset}) to {self.path}"
            )
        if self.is_full():
            raise IndexError(f"attempt to append to a full index (size = {self._entries})")
        self._write_slot(self._entries, _ENTRY.pack(self.relative_offset(offset), position))
        self._entries += 1

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with an offset >= ``offset`` (``OffsetIndex.truncateTo``)."""
        self._truncate_to_key(offset - self.base_offset, self._key)

    def sanity_check(self) -> None:
        """Raise ValueError if the file is corrupt (``OffsetIndex.sanityCheck``)."""
        if self._entries and self.last_offset < self.base_offset:
            raise ValueError(
                f"corrupt index found, index file ({self.path}) has non-zero size but the last"
                f" offset is {self.last_offset} which is less than the base offset"
                f" {self.base_offset}."
            )
        if self._length % self.ENTRY_SIZE:
            raise ValueError(
                f"index file {self.path} is corrupt, found {self._length} bytes which is"
                f" neither positive nor a multiple of {self.ENTRY_SIZE}."
            )
