"""Inode numbers of the mount: computed, not stored.

Every node of the tree gets a number derived from what it names, so the file system keeps no
per-record table and ``getattr``/``read``/``forget`` need no bookkeeping for the millions of
record files a partition can hold::

    1                                  the root (FUSE's ROOT_INODE)
    (pid << 44) | 1                    /<topic>-<N>/            (pid: the partition's small id)
    (pid << 44) | 2                    /<topic>-<N>/by-offset/
    (pid << 44) | 3                    /<topic>-<N>/by-time/
    (pid << 44) | 4                    /<topic>-<N>/append
    (pid << 44) | 5                    /<topic>-<N>/append-keyed
    (pid << 44) | (16 + 2*offset)      /<topic>-<N>/by-offset/<offset>      (a record file)
    (pid << 44) | (17 + 2*offset)      a /<topic>-<N>/by-time/<ts> symlink resolving to <offset>

Partition ids start at 1 and use the top 20 bits of the 64-bit inode, so a mount serves up to
2**20 - 1 partitions and offsets below ``MAX_OFFSET`` (2**43 - 8, about 8.8e12).  Kafka offsets
beyond that cannot be given an inode here: ``record_ino``/``time_link_ino`` raise
``OverflowError`` (the mount answers EOVERFLOW).

Every by-time name that resolves to the same offset gets the same symlink inode, like hard links
to one symlink: its target (``../by-offset/<offset>``) follows from the inode alone.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

ROOT_INO = 1

PID_SHIFT = 44
LOW_MASK = (1 << PID_SHIFT) - 1
MAX_PID = (1 << (64 - PID_SHIFT)) - 1
FIRST_RECORD_SLOT = 16
MAX_OFFSET = (LOW_MASK - FIRST_RECORD_SLOT) // 2  # exclusive bound: the last slot pair must fit


class Kind(enum.Enum):
    """What an inode names."""

    ROOT = "root"
    PARTITION = "partition"
    BY_OFFSET = "by-offset"
    BY_TIME = "by-time"
    APPEND = "append"
    APPEND_KEYED = "append-keyed"
    APPEND_BATCHES = "append-batches"
    RECORD = "record"
    TIME_LINK = "time-link"


# Fixed per-partition nodes: kind -> low bits.
_FIXED_SLOTS = {
    Kind.PARTITION: 1,
    Kind.BY_OFFSET: 2,
    Kind.BY_TIME: 3,
    Kind.APPEND: 4,
    Kind.APPEND_KEYED: 5,
    Kind.APPEND_BATCHES: 6,
}
_SLOT_KINDS = {slot: kind for kind, slot in _FIXED_SLOTS.items()}

# Names inside a partition directory, in listing order.
PARTITION_ENTRIES: tuple[tuple[bytes, Kind], ...] = (
    (b"by-offset", Kind.BY_OFFSET),
    (b"by-time", Kind.BY_TIME),
    (b"append", Kind.APPEND),
    (b"append-keyed", Kind.APPEND_KEYED),
    (b"append-batches", Kind.APPEND_BATCHES),
)
PARTITION_ENTRY_KINDS = dict(PARTITION_ENTRIES)

DIR_KINDS = frozenset({Kind.ROOT, Kind.PARTITION, Kind.BY_OFFSET, Kind.BY_TIME})
APPEND_KINDS = frozenset({Kind.APPEND, Kind.APPEND_KEYED, Kind.APPEND_BATCHES})


class Node(NamedTuple):
    """A decoded inode: ``pid`` is 0 for the root, ``offset`` is set for RECORD and TIME_LINK."""

    kind: Kind
    pid: int = 0
    offset: int | None = None


def _check_pid(pid: int) -> None:
    if not 1 <= pid <= MAX_PID:
        raise ValueError(f"partition id {pid} outside 1..{MAX_PID}")


def _check_offset(offset: int) -> None:
    if offset < 0:
        raise ValueError(f"negative offset {offset}")
    if offset >= MAX_OFFSET:
        raise OverflowError(f"offset {offset} has no inode (limit {MAX_OFFSET})")


def fixed_ino(pid: int, kind: Kind) -> int:
    """Inode of a partition's directory, ``by-offset/``, ``by-time/``, ``append`` or
    ``append-keyed`` (``kind`` one of those). ValueError for another kind or a bad pid."""
    _check_pid(pid)
    try:
        return (pid << PID_SHIFT) | _FIXED_SLOTS[kind]
    except KeyError:
        raise ValueError(f"{kind} has no fixed inode") from None


def record_ino(pid: int, offset: int) -> int:
    """Inode of ``by-offset/<offset>``. OverflowError past MAX_OFFSET, ValueError if negative."""
    _check_pid(pid)
    _check_offset(offset)
    return (pid << PID_SHIFT) | (FIRST_RECORD_SLOT + 2 * offset)


def time_link_ino(pid: int, offset: int) -> int:
    """Inode of a ``by-time/<ts>`` symlink that resolves to ``offset``."""
    return record_ino(pid, offset) + 1


def decode(ino: int) -> Node:
    """The node an inode names. ValueError for a number no encoder produces (0, 2..2**44-1,
    or an unused fixed slot)."""
    if ino == ROOT_INO:
        return Node(Kind.ROOT)
    pid, low = ino >> PID_SHIFT, ino & LOW_MASK
    if pid < 1 or pid > MAX_PID:
        raise ValueError(f"inode {ino} names no node")
    if low >= FIRST_RECORD_SLOT:
        rel = low - FIRST_RECORD_SLOT
        kind = Kind.TIME_LINK if rel & 1 else Kind.RECORD
        return Node(kind, pid, rel >> 1)
    try:
        return Node(_SLOT_KINDS[low], pid)
    except KeyError:
        raise ValueError(f"inode {ino} names no node") from None


def parse_offset_name(name: bytes) -> int | None:
    """The offset a ``by-offset/`` entry name denotes, or None when the name is not one.

    Only canonical decimal names count (``"0"``, ``"17"``; not ``"017"``, ``"+1"``, ``"-1"``,
    ``" 1"``), so every record has exactly one name, the one ``ls`` shows.
    """
    return _parse_canonical_decimal(name)


def parse_timestamp_name(name: bytes) -> int | None:
    """The epoch-ms timestamp a ``by-time/`` entry name denotes, or None (same rules as
    ``parse_offset_name``: canonical, non-negative decimal)."""
    return _parse_canonical_decimal(name)


def _parse_canonical_decimal(name: bytes) -> int | None:
    # bytes.isdigit() is ASCII-only, unlike str.isdigit(); length cap keeps int() cheap.
    if not name or len(name) > 19 or not name.isdigit():
        return None
    if len(name) > 1 and name[:1] == b"0":
        return None
    value = int(name)
    return value if value < (1 << 63) else None


class PartitionIds:
    """Small ids for partition names, stable for the mount's life (never reused).

    ``id_for(name)`` hands out 1, 2, 3... in first-seen order; ``name_of(pid)`` is the inverse.
    Pure bookkeeping: it neither checks that the partition exists nor touches the disk.
    """

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._names: list[str] = [""]  # index 0 unused: pid 0 is the root

    def id_for(self, name: str) -> int:
        """The id of ``name``, assigning the next free one on first sight.
        OverflowError once MAX_PID partitions have been seen."""
        pid = self._ids.get(name)
        if pid is None:
            pid = len(self._names)
            if pid > MAX_PID:
                raise OverflowError("too many partitions for the inode space")
            self._ids[name] = pid
            self._names.append(name)
        return pid

    def get(self, name: str) -> int | None:
        """The id of ``name`` if it has one, else None (no assignment)."""
        return self._ids.get(name)

    def name_of(self, pid: int) -> str:
        """The name with id ``pid``; KeyError for an id never handed out."""
        if 1 <= pid < len(self._names):
            return self._names[pid]
        raise KeyError(pid)

    def __len__(self) -> int:
        return len(self._ids)
