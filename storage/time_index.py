"""The time index, ``<base>.timeindex`` (Kafka's ``TimeIndex``).

Entries are 12 bytes, big-endian: (timestamp int64 epoch ms, offset - base offset int32). An
entry (T, O) says: the largest timestamp in the segment up to and including offset O is T.
Timestamps strictly increase; the last slot is kept free for the final entry written on roll.
"""

from __future__ import annotations

import struct

from storage.abstract_index import AbstractIndex
from storage.offset_index import InvalidOffsetError

_ENTRY = struct.Struct(">qi")
_REL_OFFSET = struct.Struct(">i")


class TimeIndex(AbstractIndex):
    """Maps timestamps to offsets for one segment."""

    ENTRY_SIZE = 12
    KEY_FIELD = (0, 8)  # the timestamp

    def _offset_key(self, slot: int) -> int:
        return _REL_OFFSET.unpack_from(self._mmap, slot * 12 + 8)[0]

    _relative_offset = _offset_key

    def entry(self, slot: int) -> tuple[int, int]:
        """(timestamp, absolute offset) of ``slot``."""
        ts, rel = _ENTRY.unpack_from(self._mmap, slot * 12)
        return ts, self.base_offset + rel

    def is_full(self) -> bool:
        """Full one slot early, so the final entry always fits (``TimeIndex.isFull``)."""
        return self._entries >= self.max_entries - 1

    @property
    def last_entry(self) -> tuple[int, int]:
        """The last entry, or (-1, base offset) when empty (``TimeIndex.lastEntry``)."""
        return self.entry(self._entries - 1) if self._entries else (-1, self.base_offset)

    def lookup(self, target_timestamp: int) -> tuple[int, int]:
        """The entry with the largest timestamp <= target as (timestamp, offset), or
        (-1, base offset) when there is none (``TimeIndex.lookup``)."""
        slot = self._largest_lower_bound_slot(target_timestamp)
        if slot < 0:
            return -1, self.base_offset
        return self.entry(slot)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> None:
        """Add (timestamp, offset) if the timestamp is larger than the last entry's
        (``TimeIndex.maybeAppend``). Raises IndexError when full (unless ``skip_full_check``)
        and InvalidOffsetError / ValueError when the offset or timestamp would go backwards."""
        if not skip_full_check and self.is_full():
            raise IndexError(f"attempt to append to a full time index (size = {self._entries})")
        last_ts, last_offset = self.last_entry
        if self._entries and offset < last_offset:
            raise InvalidOffsetError(
                f"attempt to append an offset ({offset}) to slot {self._entries} no larger than"
                f" the last offset appended ({last_offset}) to {self.path}"
            )
        if self._entries and timestamp < last_ts:
            raise ValueError(
                f"attempt to append a timestamp ({timestamp}) to slot {self._entries} no larger"
                f" than the last timestamp appended ({last_ts}) to {self.path}"
            )
        if timestamp > last_ts:
            rel = offset - self.base_offset
            self._write_slot(self._entries, _ENTRY.pack(timestamp, rel))
            self._entries += 1

    def truncate_to(self, offset: int) -> None:
        """Remove every entry whose offset is >= ``offset`` (``TimeIndex.truncateTo``)."""
        self._truncate_to_key(offset - self.base_offset, self._offset_key)

    def sanity_check(self) -> None:
        """Raise ValueError if the file is corrupt (``TimeIndex.sanityCheck``)."""
        if self._entries:
            first_ts = self.entry(0)[0]
            last_ts, last_offset = self.last_entry
            if last_ts < first_ts:
                raise ValueError(f"corrupt time index {self.path}: last timestamp {last_ts}"
                                 f" is less than the first timestamp {first_ts}")
            if last_offset < self.base_offset:
                raise ValueError(f"corrupt time index {self.path}: last offset {last_offset}"
                                 f" is less than the base offset {self.base_offset}")
        if self._length % self.ENTRY_SIZE:
            raise ValueError(f"time index file {self.path} is corrupt, found {self._length}"
                             f" bytes which is not a multiple of {self.ENTRY_SIZE}.")
