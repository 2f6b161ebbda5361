"""The record files: ``by-offset/<offset>`` (a record's value, or a coordinator record
decoded) and ``by-time/<t>`` (a link to the first record at or after ``t``), resolved through
the log's indexes, kept in a bounded cache of decoded records, and forgotten by the kernel
when retention or the cleaner removes them."""

from __future__ import annotations

import errno
import logging
from collections.abc import Callable
from typing import Any

import pyfuse3
import trio

from storage import errors as serr
from storage.coordinator.records import decoded_line
from storage.isolation import IsolationLevel
from storage.record_cache import RecordCache, record_cost
from storage.records import Record

from . import inodes
from .damage_notes import DamageNotes
from .errors import fail
from .inodes import Kind
from .node_attributes import NodeAttributes
from .partitions import Partitions
from .views import is_coordinator_topic

log = logging.getLogger(__name__)

# by-time/ names remembered per partition so retention can invalidate them (bounds memory).
TIME_NAMES_KEPT = 65536


async def cached_first(read: Callable[..., Any], target: int, isolation: IsolationLevel) -> Any:
    """``read(target, isolation, nowait)`` on the trio thread when the bytes it needs are
    in the page cache (it raises BlockingIOError otherwise, never waiting for the disk), else in
    a worker thread.
    A worker-thread hop costs a wake-up of the other CPU (~170 µs here), more than a cached
    read of one record."""
    try:
        return read(target, isolation, True)
    except BlockingIOError:
        return await trio.to_thread.run_sync(read, target, isolation, False)


def _forget_entry(parent: int, name: bytes) -> None:
    """Make the kernel forget ``parent/name`` if it caches it (pyfuse3 3.5 has no
    ``ignore_enoent``: ENOENT means there was nothing to forget)."""
    try:
        pyfuse3.invalidate_entry(parent, name)
    except FileNotFoundError:
        pass


class RecordFiles:
    """Records of ``partitions`` at ``isolation``; what reading finds damaged goes to
    ``damage``."""

    def __init__(self, partitions: Partitions, attributes: NodeAttributes,
                 isolation: IsolationLevel, damage: DamageNotes) -> None:
        self._partitions = partitions
        self._attributes = attributes
        self._isolation = isolation
        self._damage = damage
        self._read_only = partitions.read_only
        # the records files resolved to, by (partition id, offset): lookup -> getattr -> open
        # -> read decodes a record once. Each with the version of the log's segments it was
        # read from (see record).
        self._cache = RecordCache(1024, 64 << 20, lambda entry: record_cost(entry[1]))
        # Lowest offset per partition whose by-offset entry the kernel may cache, and by-time
        # names handed out ({pid: {name: offset}}): what retention must invalidate.
        self._lowest_served: dict[int, int] = {}
        self._time_names: dict[int, dict[bytes, int]] = {}

    async def record(self, pid: int, offset: int) -> Record:
        """The record at ``offset`` (LRU first, then a worker thread); ENOENT when absent, EIO
        when it cannot be read or lies past where a damaged log's end could be read.

        What the log says now is what a reader sees, though retention, the cleaner (kfs's in a
        worker thread, a broker's under a read-only mount) or a broker's truncation change it
        before the cache is told: below the log start is ENOENT, and a cached record serves
        only while the log's segments are the ones it was read from (``segments.version``)."""
        plog = self._partitions.log(pid)
        if offset < plog.log_start_offset:
            raise fail(errno.ENOENT)
        version = plog.segments.version
        cached = self._cache.get((pid, offset))
        if cached is not None and cached[0] == version:
            return cached[1]
        try:
            record = await cached_first(plog.reader.read, offset, self._isolation)
        except (serr.CorruptRecordError, serr.InvalidRecordError) as exc:
            await self._damage.note_read(pid, plog, exc, offset)
            raise
        if record is None:
            past_damage = plog.damage is not None and offset >= plog.damage.offset
            raise fail(errno.EIO if past_damage else errno.ENOENT)
        self._cache.put((pid, offset), (version, record))
        return record

    async def lookup(self, pid: int, name: bytes) -> pyfuse3.EntryAttributes:
        """``by-offset/<name>``'s attributes (the kernel may keep them: see :meth:`served`);
        ENOENT for a name that is not a canonical decimal offset or names no record."""
        offset = inodes.parse_offset_name(name)
        if offset is None:
            raise fail(errno.ENOENT)
        record = await self.record(pid, offset)
        self.served(pid, offset)
        return self.attr(pid, record)

    async def lookup_time(self, pid: int, name: bytes) -> pyfuse3.EntryAttributes:
        """``by-time/<name>``'s attributes: a link to the first record at or after the time
        (epoch ms, ``@`` and epoch ms, or ISO-8601: the grammar and errnos of ``from/``'s
        times); EINVAL for a name that is no time, ENOENT when no record is that late."""
        timestamp = inodes.parse_timestamp_name(name[1:] if name[:1] == b"@" else name)
        if timestamp is None:
            log.info("by-time/%r is not a time (epoch ms, @ms or ISO-8601)", name)
            raise fail(errno.EINVAL)
        return self._attributes.time_link(pid, await self.by_time(pid, name, timestamp))

    async def by_time(self, pid: int, name: bytes, timestamp: int) -> Record:
        """The record ``by-time/<name>`` names: the first at or after ``timestamp`` (epoch ms,
        Kafka's ListOffsets); ENOENT when none."""
        plog = self._partitions.log(pid)
        version = plog.segments.version
        record = await cached_first(plog.reader.find_offset_by_timestamp, timestamp,
                                    self._isolation)
        if record is None:
            raise fail(errno.ENOENT)
        self._cache.put((pid, record.offset), (version, record))
        self._remember_time_name(pid, name, record.offset)
        return record

    def content(self, pid: int, record: Record) -> bytes:
        """A record file's content: its value, or for a coordinator topic's record the
        record decoded (one JSON line; the raw value stays in ``user.kafka.value``)."""
        plog = self._partitions.log(pid)
        if is_coordinator_topic(plog.topic):
            return decoded_line(plog.topic, record.key, record.value, record.offset)
        return record.value if record.value is not None else b""

    def attr(self, pid: int, record: Record) -> pyfuse3.EntryAttributes:
        """The record file's attributes (its size the content's)."""
        return self._attributes.record(pid, record, len(self.content(pid, record)))

    def served(self, pid: int, offset: int) -> None:
        """``by-offset/<offset>`` was handed to the kernel, which may keep it."""
        if self._read_only:  # (nothing to invalidate: its entries time out)
            return
        if offset < self._lowest_served.get(pid, offset + 1):
            self._lowest_served[pid] = offset

    def _remember_time_name(self, pid: int, name: bytes, offset: int) -> None:
        """Keep the newest TIME_NAMES_KEPT by-time names per partition for retention to
        invalidate; an older one the kernel still caches may outlive retention by at most
        RECORD_TIMEOUT. (Not on a read-only mount: its entries time out at once.)"""
        if self._read_only:
            return
        names = self._time_names.setdefault(pid, {})
        names[name] = offset
        if len(names) > TIME_NAMES_KEPT:
            del names[next(iter(names))]

    async def forget_below(self, name: str, start: int) -> None:
        """Retention or the cleaner removed partition ``name``'s offsets below ``start``: the
        kernel's cached entries of them go (the record cache serves none of them: see
        :meth:`record`). In a worker thread: never inside a handler, the kernel may wait on
        one."""
        pid = self._partitions.ids.get(name)
        if pid is not None:
            await trio.to_thread.run_sync(self._invalidate_below, pid, start)

    def _invalidate_below(self, pid: int, start: int) -> None:
        by_offset = inodes.fixed_ino(pid, Kind.BY_OFFSET)
        for offset in range(self._lowest_served.pop(pid, start), start):
            _forget_entry(by_offset, b"%d" % offset)
        names = self._time_names.get(pid, {})
        by_time = inodes.fixed_ino(pid, Kind.BY_TIME)
        for name, offset in list(names.items()):
            if offset < start:
                _forget_entry(by_time, name)
                del names[name]
