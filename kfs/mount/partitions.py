"""The partitions the mount serves: their inode ids, their logs, and on a read-only mount
following what another writer (a running broker) does to the directory: partitions created
and deleted, segments rolled, appended, deleted and swapped (``LogDirectory.catch_up``)."""

from __future__ import annotations

import errno
import logging

import pyfuse3
import trio

from storage import errors as serr
from storage.clock import SYSTEM_CLOCK, Clock
from storage.config import TOPIC_PROPERTIES_SUFFIX
from storage.location import Location
from storage.log_manager import LogManager
from storage.protocols import LogDirectory, PartitionLog

from . import inodes
from .errors import fail
from .inodes import Kind
from .node_attributes import FOLLOW_INTERVAL_S

log = logging.getLogger(__name__)


class Partitions:
    """``mgr``'s partitions by pid (``inodes.PartitionIds``). ``read_only``: another writer
    may change the directory, so it is followed, at most every FOLLOW_INTERVAL_S."""

    def __init__(self, mgr: LogDirectory | LogManager, where: Location, read_only: bool,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.mgr = mgr
        self.where = where
        self.read_only = read_only
        self.ids = inodes.PartitionIds()
        self._clock = clock
        self._followed: dict[int, float] = {}  # pid -> monotonic time of its last catch-up
        self._partitions_followed = -FOLLOW_INTERVAL_S  # monotonic time of the last look
        self._gone: set[int] = set()  # pids of partitions deleted under a read-only mount

    def log(self, pid: int) -> PartitionLog:
        """The log of partition ``pid`` (the manager keeps logs in memory: no disk here)."""
        if pid in self._gone:
            raise fail(errno.ENOENT)
        try:
            return self.mgr.get(self.ids.name_of(pid))
        except (KeyError, serr.UnknownTopicOrPartitionError):
            raise fail(errno.ENOENT) from None

    def node(self, ino: int) -> inodes.Node:
        """The node of ``ino``; ENOENT for an inode of no node, or of a partition gone."""
        try:
            node = inodes.decode(ino)
        except ValueError:
            raise fail(errno.ENOENT) from None
        if node.kind is not Kind.ROOT:
            try:
                self.ids.name_of(node.pid)
            except KeyError:
                raise fail(errno.ENOENT) from None
            if node.pid in self._gone:
                raise fail(errno.ENOENT)
        return node

    async def followed(self, ino: int) -> inodes.Node:
        """The node of ``ino`` (as :meth:`node`), its partition caught up first (a read-only
        mount: :meth:`follow`)."""
        node = self.node(ino)
        if node.kind is not Kind.ROOT:
            await self.follow(node.pid)
        return node

    async def create(self, name: bytes) -> int:
        """``mkdir /<name>``: create partition ``name`` (Kafka's topic and partition name
        rules, in a worker thread) and return its pid. EINVAL for an illegal name or topic
        settings (the reason logged), EEXIST."""
        try:
            text = name.decode("utf-8")
        except UnicodeDecodeError:
            raise fail(errno.EINVAL) from None
        try:
            await trio.to_thread.run_sync(self.mgr.create, text)
        except serr.InvalidConfigError as exc:  # EINVAL alone would not say which setting
            topic = text.rpartition("-")[0]
            log.warning("mkdir %s refused (EINVAL): %s: %s", text,
                        self.where.path / f"{topic}{TOPIC_PROPERTIES_SUFFIX}", exc)
            raise fail(errno.EINVAL) from None
        return self.ids.id_for(text)

    async def lookup(self, name: bytes) -> int:
        """The pid of an existing partition called ``name``; ENOENT otherwise."""
        try:
            text = name.decode("utf-8")
            # an unknown name is looked for at once; a known one at most every
            # FOLLOW_INTERVAL_S (the broker may have deleted it: its entry times out as often)
            await self.follow_all(force=self.ids.get(text) is None)
            await trio.to_thread.run_sync(self.mgr.get, text)  # opened on first use
        except (UnicodeDecodeError, serr.UnknownTopicOrPartitionError):
            raise fail(errno.ENOENT) from None
        return self.ids.id_for(text)

    async def follow_all(self, force: bool = True) -> None:
        """Partitions the broker created or deleted since the last look (one ``stat``); not
        ``force``: only when the last look is FOLLOW_INTERVAL_S old."""
        if not self.read_only:
            return
        now = self._clock.monotonic()
        if not force and now - self._partitions_followed < FOLLOW_INTERVAL_S:
            return
        self._partitions_followed = now
        if await trio.to_thread.run_sync(self.mgr.catch_up_partitions):
            self._forget_gone()

    def _forget_gone(self) -> None:
        """Partitions deleted from the directory (a broker deleting a topic) are gone by path
        too: their pids answer ENOENT from now on (cached records too: the record files ask
        :meth:`log` first), and the kernel's entry for the name is invalidated
        (asynchronously: this runs in handlers); the name, made again, gets a new pid, so no
        inode of the old partition serves it."""
        present = set(self.mgr.partition_names())
        for name, pid in self.ids.items():
            if name in present:
                continue
            log.info("%s is gone from %s: ENOENT from now on", name, self.where.display)
            self._gone.add(pid)
            self.ids.forget(name)
            self._followed.pop(pid, None)
            pyfuse3.invalidate_entry_async(inodes.ROOT_INO, name.encode("utf-8"),
                                           ignore_enoent=True)

    async def follow(self, pid: int) -> None:
        """On a read-only mount, bring partition ``pid`` up to date with what another
        process (a running broker) wrote (``LogManager.catch_up``: a ``stat`` and an
        ``fstat``, and only new bytes read), at most every FOLLOW_INTERVAL_S; the offsets
        retention or the cleaner removed there read ENOENT at once (by path once the kernel's
        entry times out: FOLLOW_INTERVAL_S on a read-only mount). A writable mount is the
        only writer of its directory: nothing to follow."""
        if not self.read_only:
            return
        await self.follow_all(force=False)  # (deleted: ENOENT within the interval)
        if pid in self._gone:
            raise fail(errno.ENOENT)
        now = self._clock.monotonic()
        if now - self._followed.get(pid, -FOLLOW_INTERVAL_S) < FOLLOW_INTERVAL_S:
            return
        self._followed[pid] = now
        try:
            name = self.ids.name_of(pid)
        except KeyError:
            return
        # (what it removed leaves no cached record to serve, see RecordFiles.record, and no
        # kernel entry to invalidate: a read-only mount's time out)
        try:
            await trio.to_thread.run_sync(self.mgr.catch_up, name)
        except serr.UnknownTopicOrPartitionError:
            return  # (gone: the handlers answer ENOENT)
