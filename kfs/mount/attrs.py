"""The extended attributes of the mount's files: ``user.kafka.*`` of a record file (what a Kafka
consumer sees of a ConsumerRecord) and of a partition directory (its offsets and size), a
partition's ``user.kfs.damage`` and ``user.kfs.last_error``, and the coordinator tree's
(``NodeXattrs``, what ``getxattr``/``listxattr`` answer)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pyfuse3
import trio

from storage import TimestampType
from storage.protocols import PartitionLog

from kfs.record_format import text_or_base64

from .coordinator_tree import CoordinatorTree
from .damage_notes import DAMAGE_XATTR, KFS_XATTR_PREFIX, DamageNotes
from .errors import fail
from .inodes import Kind
from .last_error import LAST_ERROR_XATTR
from .partitions import Partitions
from .record_files import RecordFiles
from .views import is_coordinator_topic

XATTR_PREFIX = b"user.kafka."


def _timestamp_type_name(value: int) -> str:
    try:
        return TimestampType(value).kafka_name
    except ValueError:
        return str(value)


def _headers_json(headers: tuple) -> bytes:
    pairs = [[key, text_or_base64(value)] for key, value in headers]
    try:
        return json.dumps(pairs, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate in a header key: fall back to \\u escapes
        return json.dumps(pairs).encode("ascii")


def record_xattrs(topic: str, partition: int, record: Any) -> dict[bytes, bytes]:
    """The ``user.kafka.*`` attributes of a record file, in listing order (values are bytes;
    numbers in decimal).  Mirrors what a Kafka consumer sees of a ConsumerRecord."""
    attrs: dict[bytes, bytes] = {
        b"user.kafka.topic": topic.encode("utf-8"),
        b"user.kafka.partition": b"%d" % partition,
        b"user.kafka.offset": b"%d" % record.offset,
        b"user.kafka.timestamp": b"%d" % record.timestamp,
        b"user.kafka.timestampType": _timestamp_type_name(record.timestamp_type).encode(),
    }
    if record.key is None:
        attrs[b"user.kafka.key.null"] = b"true"
    else:
        attrs[b"user.kafka.key"] = bytes(record.key)
    if record.value is None:
        attrs[b"user.kafka.value.null"] = b"true"
    attrs[b"user.kafka.headers"] = _headers_json(record.headers)
    for key, value in record.headers:  # the last header with a key wins, as Headers.lastHeader
        name = b"user.kafka.header." + key.encode("utf-8", "surrogateescape")
        if value is None:
            attrs.pop(name, None)
        else:
            attrs[name] = bytes(value)
    return attrs


def partition_xattrs(plog: PartitionLog) -> dict[bytes, bytes]:
    """The ``user.kafka.*`` attributes of a partition directory (in memory: no disk)."""
    return {
        b"user.kafka.logStartOffset": b"%d" % plog.log_start_offset,
        b"user.kafka.logEndOffset": b"%d" % plog.log_end_offset,
        b"user.kafka.lastStableOffset": b"%d" % plog.last_stable_offset,
        b"user.kafka.sizeInBytes": b"%d" % plog.segments.size_in_bytes,
        b"user.kafka.segmentCount": b"%d" % len(plog.segments),
    }


class NodeXattrs:
    """The extended attributes of every node: ``user.kafka.*`` of record files and partition
    directories, a partition's ``user.kfs.damage`` (from ``damage``; on a writable mount it
    says how to repair) and ``user.kfs.last_error`` (``last_error(partition name)``), the
    coordinator tree's own; no other node has any."""

    def __init__(self, partitions: Partitions, records: RecordFiles, damage: DamageNotes,
                 coordinator: CoordinatorTree, last_error: Callable[[str], bytes | None]
                 ) -> None:
        self._partitions = partitions
        self._records = records
        self._damage = damage
        self._coordinator = coordinator
        self._last_error = last_error

    async def of(self, inode: int) -> dict[bytes, bytes]:
        """Every attribute of ``inode``, by name (``listxattr``)."""
        view = self._coordinator.path(inode)
        if view is not None:
            return await self._coordinator.xattrs(view)
        node = await self._partitions.followed(inode)
        if node.kind is Kind.RECORD:
            record = await self._records.record(node.pid, node.offset)
            plog = self._partitions.log(node.pid)
            attrs = record_xattrs(plog.topic, plog.partition, record)
            if is_coordinator_topic(plog.topic) and record.value is not None:
                attrs[b"user.kafka.value"] = bytes(record.value)  # the content is decoded
            return attrs
        if node.kind is Kind.PARTITION:
            plog = self._partitions.log(node.pid)
            attrs = partition_xattrs(plog)
            damage = self._damage.xattr(node.pid, plog, not self._partitions.read_only)
            if damage is not None:
                attrs[DAMAGE_XATTR] = damage
            last_error = self._last_error(plog.name)
            if last_error is not None:
                attrs[LAST_ERROR_XATTR] = last_error
            return attrs
        return {}

    async def get(self, inode: int, name: bytes) -> bytes:
        """The attribute ``name`` of ``inode``; ENOATTR when the node does not have it. Other
        names than ``user.kafka.*`` and ``user.kfs.*`` (``ls -l`` asks every file for
        ``security.*`` and ``system.posix_acl_*``) are answered without resolving the node.

        Before a partition's ``user.kfs.damage`` is told, its batches not checked yet are
        (``DamageNotes.unchecked_damage``): the attribute is there from the mount on, not once
        a read tripped over the damage. Listing the attributes (:meth:`of`) does not check,
        so a listing never reads whole partitions: it shows the attribute once the damage was
        found."""
        if not name.startswith((XATTR_PREFIX, KFS_XATTR_PREFIX)):
            raise fail(pyfuse3.ENOATTR)
        if name == DAMAGE_XATTR and self._coordinator.path(inode) is None:
            node = await self._partitions.followed(inode)
            if node.kind is Kind.PARTITION:
                plog = self._partitions.log(node.pid)
                for damage in await trio.to_thread.run_sync(self._damage.unchecked_damage, plog):
                    self._damage.note(node.pid, plog.name, damage)
        value = (await self.of(inode)).get(name)
        if value is None:
            raise fail(pyfuse3.ENOATTR)
        return value
