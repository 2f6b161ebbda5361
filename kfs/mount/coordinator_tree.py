"""The coordinator tree of the mount: ``/consumer-groups`` and ``/transactions`` as FUSE nodes.
``KafkaFs`` dispatches every request for an inode of theirs here; the content comes from
``kfs.mount.views`` (group and transaction state replayed from ``__consumer_offsets`` and
``__transaction_state``), computed in a worker thread because it catches up with the logs.
Nothing of this tree is cached by the kernel: it follows the logs."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from typing import Any

import pyfuse3
import trio

from . import inodes
from .views import ROOT_NAMES, CoordinatorViews, Entry

# readdir cookies 1 and 2 are "." and ".."; a directory's own entries come after them.
DOT_COOKIES = 2


def reply_dots(token: Any, start_id: int, here: pyfuse3.EntryAttributes,
               parent: pyfuse3.EntryAttributes) -> bool:
    """``.`` and ``..`` (cookies 1 and 2) when the listing starts before them; False when
    the reply is full (the kernel asks again from the last cookie it took)."""
    if start_id < 1 and not pyfuse3.readdir_reply(token, b".", here, 1):
        return False
    return start_id >= 2 or pyfuse3.readdir_reply(token, b"..", parent, 2)


class ViewDirHandle:
    """An open directory of the tree: its listing, taken when reading starts (cookies =
    index + 1)."""

    __slots__ = ("path", "entries")

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        self.entries: list[tuple[bytes, Entry]] | None = None


class CoordinatorTree:
    """``attr(ino, mode, timeout, size=0, mtime_ns=None)`` makes attributes as the mount
    does; ``root_attr()`` is the mount root's."""

    def __init__(self, views: CoordinatorViews, attr: Callable[..., pyfuse3.EntryAttributes],
                 root_attr: Callable[[], pyfuse3.EntryAttributes]) -> None:
        self._views, self._attr, self._root_attr = views, attr, root_attr

    def path(self, ino: int) -> tuple[str, ...] | None:
        """The tree's path of ``ino``, or None when it is not one of the tree's inodes (the
        mount's root is the partition tree's)."""
        return None if ino == inodes.ROOT_INO else self._views.path(ino)

    @staticmethod
    async def _in_views(fn: Callable[..., Any], *args: Any) -> Any:
        """A views call in a worker thread (it catches up with the logs)."""
        try:
            return await trio.to_thread.run_sync(fn, *args)
        except FileNotFoundError:
            raise pyfuse3.FUSEError(errno.ENOENT) from None
        except NotADirectoryError:
            raise pyfuse3.FUSEError(errno.ENOTDIR) from None

    def _dir_attr(self, path: tuple[str, ...]) -> pyfuse3.EntryAttributes:
        return self._attr(self._views.ino(path), stat.S_IFDIR | 0o555, 0)

    def entry_attr(self, entry: Entry) -> pyfuse3.EntryAttributes:
        if entry.is_dir:
            return self._attr(entry.ino, stat.S_IFDIR | 0o555, 0)
        mtime_ns = None if entry.mtime_ms is None else max(entry.mtime_ms, 0) * 1_000_000
        return self._attr(entry.ino, stat.S_IFREG | 0o444, 0, len(entry.content), mtime_ns)

    # ---- the root's entries of the tree

    @staticmethod
    def is_root_name(name: str) -> bool:
        return name in ROOT_NAMES

    def root_names(self, partition_names: list[str]) -> list[str]:
        """The tree's names in the root, given its partitions (each only when its topic is)."""
        return self._views.root_names(partition_names)

    def root_entry_attr(self, name: str) -> pyfuse3.EntryAttributes:
        return self._dir_attr((name,))

    # ---- requests

    async def lookup(self, path: tuple[str, ...], name: bytes) -> pyfuse3.EntryAttributes:
        """``name`` in the tree's directory ``path`` (``()``: the root)."""
        return self.entry_attr(await self._in_views(self._views.lookup, path, name))

    async def getattr(self, path: tuple[str, ...]) -> pyfuse3.EntryAttributes:
        return self.entry_attr(await self._in_views(self._views.entry, path))

    async def opendir(self, path: tuple[str, ...]) -> ViewDirHandle:
        if not (await self._in_views(self._views.entry, path)).is_dir:
            raise pyfuse3.FUSEError(errno.ENOTDIR)
        return ViewDirHandle(path)

    async def readdir(self, handle: ViewDirHandle, start_id: int, token: Any) -> None:
        path = handle.path
        parent = self._root_attr() if len(path) == 1 else self._dir_attr(path[:-1])
        if not reply_dots(token, start_id, self._dir_attr(path), parent):
            return
        first = max(start_id - DOT_COOKIES, 0)
        if first == 0 or handle.entries is None:
            handle.entries = await self._in_views(self._views.listing, path)
        for index in range(first, len(handle.entries)):
            name, entry = handle.entries[index]
            if not pyfuse3.readdir_reply(token, name, self.entry_attr(entry),
                                         index + DOT_COOKIES + 1):
                return

    async def open(self, path: tuple[str, ...], accmode: int, read_only: bool) -> bytes:
        """The content of the file at ``path``: EISDIR for a directory; read-only (EACCES,
        EROFS on a read-only mount)."""
        entry = await self._in_views(self._views.entry, path)
        if entry.is_dir:
            raise pyfuse3.FUSEError(errno.EISDIR)
        if accmode != os.O_RDONLY:
            raise pyfuse3.FUSEError(errno.EROFS if read_only else errno.EACCES)
        return entry.content

    async def xattrs(self, path: tuple[str, ...]) -> dict[bytes, bytes]:
        return (await self._in_views(self._views.entry, path)).xattrs
