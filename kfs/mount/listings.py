"""Directory listings of the partition tree: the root (partitions, then the coordinator
tree's names), a partition's fixed entries, ``by-offset/`` (every readable offset, streamed
in runs fetched by a worker thread), and ``from/<start>/``'s streams. Cookies stay valid while
the log grows: offset + 3 in ``by-offset/``, index + 3 in the other listings."""

from __future__ import annotations

import errno
import stat
from bisect import bisect_left
from typing import Any

import pyfuse3
import trio

from storage.isolation import IsolationLevel
from storage.records import Record

from . import inodes
from .coordinator_tree import DOT_COOKIES, CoordinatorTree, reply_dots
from .damage_notes import DamageNotes, readable_run
from .errors import fail
from .inodes import Kind
from .node_attributes import NodeAttributes
from .partitions import Partitions
from .record_files import RecordFiles
from .views import is_coordinator_topic

# by-offset/ listing: records fetched per worker-thread call, bounded by their value bytes
# (a sample of LIST_SIZE_SAMPLE records sizes the next call). Small records: a run serves
# about 100 readdir requests of ls's 32 KiB, so the thread hop is paid rarely.
LIST_CHUNK_MAX = 16384
LIST_CHUNK_FIRST = 1024  # before any record's size is known
LIST_CHUNK_MIN = 16
LIST_CHUNK_BYTES = 8 << 20
LIST_SIZE_SAMPLE = 64


def _offset_of(record: Record) -> int:
    return record.offset


class DirHandle:
    """One open directory of the partition tree: the root listing's snapshot, and for
    ``by-offset/`` the run of records the listing is in."""

    __slots__ = ("node", "names", "records", "records_from", "run_limit", "damaged")

    def __init__(self, node: inodes.Node) -> None:
        self.node = node
        self.names: list[str] | None = None  # root listing snapshot (cookies = index + 1)
        self.records: list[Record] = []  # by-offset: a contiguous run of records_from()
        self.records_from = -1  # the offset that run was fetched from
        self.run_limit = LIST_CHUNK_FIRST  # records per records_from() call, sized by value bytes
        self.damaged = False  # by-offset: the listing stepped over damage


class Listings:
    """``readdir`` of the partition tree's directories."""

    def __init__(self, partitions: Partitions, attributes: NodeAttributes,
                 records: RecordFiles, coordinator: CoordinatorTree, damage: DamageNotes,
                 isolation: IsolationLevel) -> None:
        self._partitions = partitions
        self._attributes = attributes
        self._records = records
        self._coordinator = coordinator
        self._damage = damage
        self._isolation = isolation

    async def readdir(self, handle: DirHandle, start_id: int, token: Any) -> None:
        """``.`` and ``..`` (cookies 1 and 2), then the directory's entries from
        ``start_id`` on."""
        node = handle.node
        kind = node.kind
        if not reply_dots(token, start_id, *self._attributes.dots(node)):
            return
        first = max(start_id - DOT_COOKIES, 0)  # index (or offset) of the next entry
        if kind is Kind.ROOT:
            self._root(handle, first, token)
        elif kind is Kind.PARTITION:
            for index in range(first, len(inodes.PARTITION_ENTRIES)):
                name, child = inodes.PARTITION_ENTRIES[index]
                attr = self._attributes.fixed(inodes.Node(child, node.pid))
                if not pyfuse3.readdir_reply(token, name, attr, index + DOT_COOKIES + 1):
                    return
        elif kind is Kind.BY_OFFSET:
            await self._offsets(handle, first, start_id >= DOT_COOKIES, token)
        elif kind is Kind.WINDOW:
            for index in range(first, len(inodes.WINDOW_ENTRIES)):
                name, child = inodes.WINDOW_ENTRIES[index]
                attr = self._attributes.stream(inodes.offset_ino(node.pid, child, node.offset), 0)
                if not pyfuse3.readdir_reply(token, name, attr, index + DOT_COOKIES + 1):
                    return
        # by-time/ and from/ list nothing else: their names are any time or start.

    def _root(self, handle: DirHandle, first: int, token: Any) -> None:
        if first == 0 or handle.names is None:
            names = self._partitions.mgr.partition_names()
            handle.names = names + self._coordinator.root_names(names)
        ids = self._partitions.ids
        for index in range(first, len(handle.names)):
            name = handle.names[index]
            if self._coordinator.is_root_name(name):
                attr = self._coordinator.root_entry_attr(name)
            else:
                attr = self._attributes.fixed(inodes.Node(Kind.PARTITION, ids.id_for(name)))
            if not pyfuse3.readdir_reply(token, name.encode("utf-8"), attr,
                                         index + DOT_COOKIES + 1):
                return

    async def _offsets(self, handle: DirHandle, first: int, dots_sent: bool,
                       token: Any) -> None:
        """The records from offset ``first`` on, cookie = offset + 3; ``dots_sent``: ``.``
        and ``..`` went in an earlier reply (none of this one's entries is listed yet)."""
        pid = handle.node.pid
        # One attributes object for the whole reply: readdir_reply copies it into the buffer,
        # and a listing can hold millions of entries (this loop is the per-entry cost of ls).
        attr = self._attributes.attr(0, stat.S_IFREG | 0o444, self._attributes.record_timeout)
        base = inodes.record_ino(pid, 0)
        decoded = is_coordinator_topic(self._partitions.log(pid).topic)
        reply = pyfuse3.readdir_reply
        cookie_base = DOT_COOKIES + 1
        slots = inodes.SLOTS_PER_OFFSET
        want = first  # cookie = offset + 3, so the next entry has offset >= first
        while True:
            run, pos = await self._records_at(handle, want)
            if pos >= len(run):
                if want == first and dots_sent and (
                        handle.damaged or self._partitions.log(pid).damage is not None):
                    # every readable offset was listed (in earlier replies, which an error
                    # would discard here): now say that some could not be
                    raise fail(errno.EIO)
                return
            inodes.record_ino(pid, run[-1].offset)  # OverflowError past the inode space
            self._records.served(pid, run[pos].offset)
            # a batch's records mostly share both: set them on change (None: no record's, as
            # -1 is a v0 record's timestamp)
            last_size = last_ts = None
            for i in range(pos, len(run)):
                record = run[i]
                offset = record.offset
                if decoded:
                    size = len(self._records.content(pid, record))
                else:
                    value = record.value
                    size = len(value) if value is not None else 0
                if size != last_size:
                    attr.st_size = last_size = size
                    attr.st_blocks = (size + 511) >> 9
                ts = record.timestamp
                if ts != last_ts:
                    last_ts = ts
                    attr.st_atime_ns = attr.st_mtime_ns = attr.st_ctime_ns = (
                        ts * 1_000_000 if ts > 0 else 0)
                attr.st_ino = base + slots * offset
                if not reply(token, b"%d" % offset, attr, offset + cookie_base):
                    return
            want = run[-1].offset + 1

    async def _records_at(self, handle: DirHandle, want: int) -> tuple[list[Record], int]:
        """``(run, pos)``: ``run[pos:]`` are the next records with offset >= ``want``, from the
        handle's buffered run, or from a new run fetched in a worker thread when the buffer
        does not cover ``want``; ``pos == len(run)`` at the end of the log."""
        run = handle.records
        if run and handle.records_from <= want <= run[-1].offset:
            return run, bisect_left(run, want, key=_offset_of)
        plog = self._partitions.log(handle.node.pid)
        found: list[Any] = []  # damage stepped over
        run = await trio.to_thread.run_sync(readable_run, plog, want, handle.run_limit,
                                            self._isolation, found)
        for damage in found:
            handle.damaged = True
            self._damage.note(handle.node.pid, plog.name, damage)
        handle.records, handle.records_from = run, want
        if run:
            # records_from decodes values: keep a run's value bytes near LIST_CHUNK_BYTES (the
            # average of a sample: summing every value costs as much as listing the names).
            sample = run[::max(len(run) // LIST_SIZE_SAMPLE, 1)]
            avg = sum(len(r.value) for r in sample if r.value is not None) // len(sample)
            handle.run_limit = max(LIST_CHUNK_MIN,
                                   min(LIST_CHUNK_MAX, LIST_CHUNK_BYTES // max(avg, 1)))
        return run, 0
