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
    (pid << 44) | 6                    /<topic>-<N>/append-batches
    (pid << 44) | 9                    /<topic>-<N>/from/
    (pid << 44) | 10                   /<topic>-<N>/append.jsonl
    (pid << 44) | slot                 /<topic>-<N>/<stream> (values, keyed-values, ...)
    (pid << 44) | (16 + 8*offset)      /<topic>-<N>/by-offset/<offset>      (a record file)
    (pid << 44) | (17 + 8*offset)      a /<topic>-<N>/by-time/<ts> symlink resolving to <offset>
    (pid << 44) | (18 + 8*offset)      a /<topic>-<N>/from/<start>/ window starting at <offset>
    (pid << 44) | (16 + wslot + 8*offset)  its <stream>

The stream files' names, kinds and slots (``slot``, ``wslot``: values 7 and 3, records.jsonl
8 and 4, keyed-values 11 and 5) are ``kfs.record_format.StreamFormat``'s, the table of stream
kinds: a stream added there gets its files here.

Partition ids start at 1 and use the top 20 bits of the 64-bit inode, so a mount serves up to
2**20 - 1 partitions and offsets below ``MAX_OFFSET`` (about 2.2e12).  Kafka offsets
beyond that cannot be given an inode here: ``record_ino``/``time_link_ino`` raise
``OverflowError`` (the mount answers EOVERFLOW).

Every by-time name that resolves to the same offset gets the same symlink inode, like hard links
to one symlink: its target (``../by-offset/<offset>``) follows from the inode alone.
"""

from __future__ import annotations

import datetime
import enum
from typing import NamedTuple

from kfs.record_format import StreamFormat

ROOT_INO = 1

PID_SHIFT = 44
LOW_MASK = (1 << PID_SHIFT) - 1
MAX_PID = (1 << (64 - PID_SHIFT)) - 1
FIRST_RECORD_SLOT = 16
SLOTS_PER_OFFSET = 8
MAX_OFFSET = (LOW_MASK - FIRST_RECORD_SLOT) // SLOTS_PER_OFFSET  # exclusive: all 8 slots fit


def _stream_kind_name(fmt: StreamFormat) -> str:
    """The inode kind's member name of a stream's whole-partition file: its file name in
    capitals (``keyed-values``: KEYED_VALUES); a window's is WINDOW_ and that."""
    return fmt.value.upper().replace("-", "_").replace(".", "_")


# What an inode names: the tree's own nodes, then two per stream kind of kfs.record_format's
# table (StreamFormat): the partition's file (Kind.VALUES: "values") and a window's
# (Kind.WINDOW_VALUES: "window-values").
Kind = enum.Enum("Kind", [
    ("ROOT", "root"),
    ("PARTITION", "partition"),
    ("BY_OFFSET", "by-offset"),
    ("BY_TIME", "by-time"),
    ("APPEND", "append"),
    ("APPEND_KEYED", "append-keyed"),
    ("APPEND_BATCHES", "append-batches"),
    ("APPEND_JSONL", "append.jsonl"),
    ("FROM", "from"),
    ("RECORD", "record"),
    ("TIME_LINK", "time-link"),
    ("WINDOW", "window"),
    *((_stream_kind_name(fmt), fmt.value) for fmt in StreamFormat),
    *(("WINDOW_" + _stream_kind_name(fmt), "window-" + fmt.value) for fmt in StreamFormat),
], module=__name__, qualname="Kind")
Kind.__doc__ = "What an inode names."

# The stream files' kinds: (format, the partition's file's kind, a window's file's kind).
_STREAMS = tuple((fmt, Kind[_stream_kind_name(fmt)], Kind["WINDOW_" + _stream_kind_name(fmt)])
                 for fmt in StreamFormat)
# The format each stream file's kind renders.
STREAM_FORMATS = {kind: fmt for fmt, *kinds in _STREAMS for kind in kinds}


def _reverse(slots: dict[Kind, int], limit: int) -> dict[int, Kind]:
    """slot -> kind; ValueError when two kinds share a slot or one is past ``limit``."""
    by_slot = {slot: kind for kind, slot in slots.items()}
    if len(by_slot) != len(slots) or not all(0 <= slot < limit for slot in by_slot):
        raise ValueError(f"inode slots clash or overflow: {slots}")
    return by_slot


# Fixed per-partition nodes: kind -> low bits.
_FIXED_SLOTS = {
    Kind.PARTITION: 1,
    Kind.BY_OFFSET: 2,
    Kind.BY_TIME: 3,
    Kind.APPEND: 4,
    Kind.APPEND_KEYED: 5,
    Kind.APPEND_BATCHES: 6,
    Kind.FROM: 9,
    Kind.APPEND_JSONL: 10,
    **{kind: fmt.slot for fmt, kind, _ in _STREAMS},
}
_SLOT_KINDS = _reverse(_FIXED_SLOTS, FIRST_RECORD_SLOT)
# per-offset slots: kind -> slot within the offset's 8
_OFFSET_SLOTS = {Kind.RECORD: 0, Kind.TIME_LINK: 1, Kind.WINDOW: 2,
                 **{kind: fmt.window_slot for fmt, _, kind in _STREAMS}}
_OFFSET_SLOT_KINDS = _reverse(_OFFSET_SLOTS, SLOTS_PER_OFFSET)

# Names inside a from/<start>/ window, in listing order.
WINDOW_ENTRIES: tuple[tuple[bytes, Kind], ...] = tuple(
    (fmt.value.encode(), kind) for fmt, _, kind in _STREAMS)
WINDOW_ENTRY_KINDS = dict(WINDOW_ENTRIES)
# Names inside a partition directory, in listing order.
PARTITION_ENTRIES: tuple[tuple[bytes, Kind], ...] = (
    (b"by-offset", Kind.BY_OFFSET),
    (b"by-time", Kind.BY_TIME),
    (b"append", Kind.APPEND),
    (b"append-keyed", Kind.APPEND_KEYED),
    (b"append-batches", Kind.APPEND_BATCHES),
    (b"append.jsonl", Kind.APPEND_JSONL),
    *((fmt.value.encode(), kind) for fmt, kind, _ in _STREAMS),
    (b"from", Kind.FROM),
)
PARTITION_ENTRY_KINDS = dict(PARTITION_ENTRIES)

DIR_KINDS = frozenset({Kind.ROOT, Kind.PARTITION, Kind.BY_OFFSET, Kind.BY_TIME, Kind.FROM,
                       Kind.WINDOW})
STREAM_KINDS = frozenset(STREAM_FORMATS)
APPEND_KINDS = frozenset({Kind.APPEND, Kind.APPEND_KEYED, Kind.APPEND_BATCHES,
                          Kind.APPEND_JSONL})


class Node(NamedTuple):
    """A decoded inode: ``pid`` is 0 for the root, ``offset`` is set for the per-offset kinds
    (RECORD, TIME_LINK and a window's nodes: its start)."""

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
    """Inode of a partition's directory or of one of its fixed entries (``by-offset/``,
    ``by-time/``, the append files, the streams, ``from/``). ValueError for another kind or
    a bad pid."""
    _check_pid(pid)
    try:
        return (pid << PID_SHIFT) | _FIXED_SLOTS[kind]
    except KeyError:
        raise ValueError(f"{kind} has no fixed inode") from None


def record_ino(pid: int, offset: int) -> int:
    """Inode of ``by-offset/<offset>``. OverflowError past MAX_OFFSET, ValueError if negative."""
    return offset_ino(pid, Kind.RECORD, offset)


def time_link_ino(pid: int, offset: int) -> int:
    """Inode of a ``by-time/<ts>`` symlink that resolves to ``offset``."""
    return offset_ino(pid, Kind.TIME_LINK, offset)


def offset_ino(pid: int, kind: Kind, offset: int) -> int:
    """Inode of a per-offset node: a record, a by-time link to it, or the window starting at
    it (``from/<start>/`` and its files). Errors as :func:`record_ino`."""
    _check_pid(pid)
    _check_offset(offset)
    return (pid << PID_SHIFT) | (FIRST_RECORD_SLOT + SLOTS_PER_OFFSET * offset
                                 + _OFFSET_SLOTS[kind])


def decode(ino: int) -> Node:
    """The node an inode names. ValueError for a number no encoder produces (0, 2..2**44-1,
    or an unused fixed slot)."""
    if ino == ROOT_INO:
        return Node(Kind.ROOT)
    pid, low = ino >> PID_SHIFT, ino & LOW_MASK
    if pid < 1 or pid > MAX_PID:
        raise ValueError(f"inode {ino} names no node")
    if low >= FIRST_RECORD_SLOT:
        offset, slot = divmod(low - FIRST_RECORD_SLOT, SLOTS_PER_OFFSET)
        if slot not in _OFFSET_SLOT_KINDS:
            raise ValueError(f"inode {ino} names no node")
        return Node(_OFFSET_SLOT_KINDS[slot], pid, offset)
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
    """The epoch-ms timestamp a ``by-time/`` entry name denotes, or None: a canonical,
    non-negative decimal (as ``parse_offset_name``) or an ISO-8601 date-time such as
    ``2026-11-22T10:00:00Z`` or ``2026-11-22T11:00:00.250+01:00`` (UTC when it names no
    zone), to the millisecond."""
    ms = _parse_canonical_decimal(name)
    if ms is not None or not name[:1].isdigit() or len(name) > 40:
        return ms
    try:
        when = datetime.datetime.fromisoformat(name.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    ms = (when - _EPOCH) // datetime.timedelta(milliseconds=1)
    return ms if ms >= 0 else None


_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


class Start(NamedTuple):
    """A ``from/<start>`` name: ``kind`` is ``"offset"``, ``"last"`` (the last N offsets, as
    kcat's ``-o -N``) or ``"time"`` (epoch ms, as kcat's ``-o s@ts``)."""

    kind: str
    value: int


def parse_start_name(name: bytes) -> Start | None:
    """What a ``from/`` entry name asks for, or None: ``<offset>``, ``-<N>``, or ``@`` and a
    time (epoch ms or ISO-8601), or an ISO-8601 time alone."""
    if name[:1] == b"-":
        count = _parse_canonical_decimal(name[1:])
        return None if count is None else Start("last", count)
    if name[:1] == b"@":
        ms = parse_timestamp_name(name[1:])
        return None if ms is None else Start("time", ms)
    offset = _parse_canonical_decimal(name)
    if offset is not None:
        return Start("offset", offset)
    ms = parse_timestamp_name(name)
    return None if ms is None else Start("time", ms)


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

    def items(self) -> list[tuple[str, int]]:
        """``(name, id)`` of every name that has an id now."""
        return list(self._ids.items())

    def forget(self, name: str) -> None:
        """``name`` has no id from now on: ``id_for(name)`` hands out a new one (a partition
        deleted and made again gets new inodes, so nothing the kernel cached of the old one
        is served for it); ``name_of`` still names the old id."""
        self._ids.pop(name, None)

    def name_of(self, pid: int) -> str:
        """The name with id ``pid``; KeyError for an id never handed out."""
        if 1 <= pid < len(self._names):
            return self._names[pid]
        raise KeyError(pid)

    def __len__(self) -> int:
        return len(self._ids)
