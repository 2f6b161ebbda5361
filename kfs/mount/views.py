"""The mount's derived views of Kafka's coordinator topics, virtual (nothing is written to the
backing directory)::

    /consumer-groups/<group>/                 a group: xattrs user.kafka.state, .type,
                                              .protocolType, .assignmentStrategy, .generation
                                              (or .groupEpoch), .leader, .members
    /consumer-groups/<group>/<topic>-<N>      its committed offset and "\\n"; xattrs
                                              user.kafka.metadata, .commitTimestamp,
                                              .expireTimestamp, .leaderEpoch, and, when
                                              <topic>-<N> is in the backing directory,
                                              .logEndOffset and .lag
    /consumer-groups/<group>/describe         kafka-consumer-groups.sh --describe's table
    /consumer-groups/<group>/members.jsonl    one JSON object per member
    /transactions/<transactional.id>          kafka-transactions.sh describe, as JSON
    /__cluster_metadata/image/...             the cluster's state from KRaft's metadata log,
                                              as kafka-metadata-shell shows /image
                                              (``storage.coordinator.metadata_nodes``)

built from every ``__consumer_offsets-<N>`` and ``__transaction_state-<N>`` partition of the
backing directory (the root lists a view when its topic has partitions there)
(``storage.coordinator.replay``), and from ``__cluster_metadata-0`` (its newest snapshot and
the log after it, ``storage.coordinator.metadata_image``), each caught up with its log before
each answer: one more record costs one record's work. Group ids and transactional ids are file
names percent-encoded (``/``, ``%``, spaces and other bytes outside ``[A-Za-z0-9._~-]``).

Inodes: view nodes get numbers below 2**44 (no partition's range), handed out as they are
first named and kept for the mount's life.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from storage.coordinator import metadata_nodes
from storage.coordinator.metadata_image import MetadataImageReplay
from storage.coordinator.records import CONSUMER_OFFSETS, TRANSACTION_STATE
from storage.coordinator.replay import COORDINATOR_TOPICS, CoordinatorReplay
from storage.errors import KafkaStorageError
from storage.clock import now_ms
from storage.log_files import CLUSTER_METADATA_TOPIC
from storage.topic_partition import parse_partition_dir_name

GROUPS = "consumer-groups"
TRANSACTIONS = "transactions"
CLUSTER_METADATA = CLUSTER_METADATA_TOPIC
IMAGE = "image"
ROOT_NAMES = (GROUPS, TRANSACTIONS, CLUSTER_METADATA)
DESCRIBE = "describe"
MEMBERS = "members.jsonl"
FIRST_VIEW_INO = 2  # below it: the root; view inodes stay below 2**44 (partition 0's range)
XATTR = "user.kafka."


@dataclasses.dataclass
class Entry:
    """One view node: a directory, or a file with ``content``; ``mtime_ms`` epoch ms or None
    (the mount time)."""

    ino: int
    is_dir: bool
    content: bytes = b""
    mtime_ms: int | None = None
    xattrs: dict[bytes, bytes] = dataclasses.field(default_factory=dict)


def encode_name(text: str) -> bytes:
    """A group id or transactional id as a file name (percent-encoded; never ``.``/``..``)."""
    name = urllib.parse.quote(text, safe="")
    return name.replace(".", "%2E").encode() if name in (".", "..") else name.encode()


def decode_name(name: bytes) -> str | None:
    try:
        return urllib.parse.unquote(name.decode("ascii"), errors="strict")
    except (UnicodeDecodeError, ValueError):
        return None


def _xattrs(fields: dict[str, Any]) -> dict[bytes, bytes]:
    """``user.kafka.<field>`` for each field that is known (not None)."""
    return {(XATTR + k).encode(): str(v).encode() for k, v in fields.items() if v is not None}


class CoordinatorViews:
    """The views over ``mgr`` (a ``storage.LogManager``). Methods do disk I/O (catching up
    with the logs): call them from a worker thread. Paths are tuples of names below the
    mount root, e.g. ``("consumer-groups", "g1", "orders-0")``; lookups of what does not
    exist raise FileNotFoundError."""

    def __init__(self, mgr, metadata_log: Path | None = None) -> None:
        """``metadata_log``: the ``__cluster_metadata-0`` directory whose image
        ``/__cluster_metadata`` shows (None: a backing directory that is not local)."""
        self._mgr = mgr
        self._metadata = None if metadata_log is None else MetadataImageReplay(metadata_log)
        self._replays: dict[str, CoordinatorReplay] = {}
        self._lock = threading.Lock()
        self._inos: dict[tuple[str, ...], int] = {}
        self._paths: dict[int, tuple[str, ...]] = {}

    # -- inodes ----------------------------------------------------------------------------

    def ino(self, path: tuple[str, ...]) -> int:
        with self._lock:
            ino = self._inos.get(path)
            if ino is None:
                ino = self._inos[path] = FIRST_VIEW_INO + len(self._inos)
                self._paths[ino] = path
            return ino

    def path(self, ino: int) -> tuple[str, ...] | None:
        """The path an inode handed out names, or None."""
        return self._paths.get(ino)

    def root_names(self, partitions: list[str]) -> list[str]:
        """The views a root listing shows: each one whose topic has partitions here (a
        lookup finds the coordinator views always), and ``__cluster_metadata`` when the
        metadata log is there."""
        topics = {name.rpartition("-")[0] for name in partitions}
        names = [view for view, topic in ((GROUPS, CONSUMER_OFFSETS),
                                          (TRANSACTIONS, TRANSACTION_STATE)) if topic in topics]
        return names + [CLUSTER_METADATA] if self._has_metadata_log() else names

    def _has_metadata_log(self) -> bool:
        return self._metadata is not None and self._metadata.directory.is_dir()

    # -- state -----------------------------------------------------------------------------

    def _states(self, topic: str) -> list[Any]:
        """The caught-up states of every partition of ``topic``."""
        out = []
        for name in self._mgr.partition_names():
            if parse_partition_dir_name(name)[0] != topic:
                continue
            log = self._mgr.catch_up(name)  # (a read-only mount follows a running broker)
            with self._lock:
                replay = self._replays.get(name)
                if replay is None or replay.log is not log:
                    replay = self._replays[name] = CoordinatorReplay(log)
            if not replay.is_current():
                replay.catch_up()
            out.append(replay.states)
        return out

    def _group(self, group_id: str):
        """The GroupStates holding ``group_id`` (a group lives in one partition)."""
        for states in self._states(CONSUMER_OFFSETS):
            if group_id in states:
                return states
        raise FileNotFoundError(group_id)

    def _log_end_offset(self, topic: str, partition: int) -> int | None:
        try:
            return self._mgr.catch_up(f"{topic}-{partition}").log_end_offset
        except KafkaStorageError:  # not in this directory: lag unknown
            return None

    # -- nodes -----------------------------------------------------------------------------

    def entry(self, path: tuple[str, ...]) -> Entry:
        """The node at ``path``. Raises FileNotFoundError."""
        if path in ((GROUPS,), (TRANSACTIONS,)):
            return Entry(self.ino(path), True)
        if path[:1] == (CLUSTER_METADATA,):
            return self._metadata_entry(path)
        if len(path) == 2 and path[0] == GROUPS:
            return self._group_entry(path)
        if len(path) == 3 and path[0] == GROUPS:
            return self._group_file(path)
        if len(path) == 2 and path[0] == TRANSACTIONS:
            return self._transaction(path)
        raise FileNotFoundError("/".join(path))

    def lookup(self, parent: tuple[str, ...], name: bytes) -> Entry:
        """``name`` in the directory at ``parent`` (``()`` is the mount root)."""
        if parent[:1] == (CLUSTER_METADATA,):  # the image's names are Kafka's, as they are
            return self.entry((*parent, name.decode("utf-8", "surrogateescape")))
        text = decode_name(name)  # group files' names (<topic>-<N>) decode to themselves
        if text is None:
            raise FileNotFoundError(name)
        return self.entry((*parent, text))

    def listing(self, path: tuple[str, ...]) -> list[tuple[bytes, Entry]]:
        """(name, entry) of each child of the directory at ``path``."""
        if path == (GROUPS,):
            ids = sorted(g for s in self._states(CONSUMER_OFFSETS) for g in s.group_ids())
            return [(encode_name(g), Entry(self.ino((GROUPS, g)), True)) for g in ids if g]
        if path == (TRANSACTIONS,):
            ids = sorted(t for s in self._states(TRANSACTION_STATE) for t in s.transactional_ids())
            return [(encode_name(t), self.entry((TRANSACTIONS, t))) for t in ids if t]
        if len(path) == 2 and path[0] == GROUPS:
            states = self._group(path[1])
            names = [f"{t}-{p}" for t, p in states.offsets(path[1])] + [DESCRIBE, MEMBERS]
            return [(n.encode(), self.entry((*path, n))) for n in names]
        if path[:1] == (CLUSTER_METADATA,):
            return self._metadata_listing(path)
        raise NotADirectoryError("/".join(path))

    # -- /__cluster_metadata ---------------------------------------------------------------

    def _image(self):
        """The metadata image, caught up with the log."""
        if not self._has_metadata_log():
            raise FileNotFoundError(CLUSTER_METADATA)
        try:
            return self._metadata.catch_up()
        except FileNotFoundError:  # (the directory went meanwhile)
            raise FileNotFoundError(CLUSTER_METADATA) from None

    def _image_node(self, path: tuple[str, ...], image=None) -> list[str] | str:
        """The node of ``/__cluster_metadata`` at ``path`` (names below the mount root), in
        ``image`` (default: the image caught up now)."""
        image = self._image() if image is None else image
        if len(path) == 1:
            return [IMAGE]
        if path[1] != IMAGE:
            raise FileNotFoundError("/".join(path))
        return metadata_nodes.node(image, path[2:])

    def _metadata_entry(self, path: tuple[str, ...], image=None) -> Entry:
        found = self._image_node(path, image)
        if isinstance(found, list):
            return Entry(self.ino(path), True)
        return Entry(self.ino(path), False, found.encode() + b"\n")

    def _metadata_listing(self, path: tuple[str, ...]) -> list[tuple[bytes, Entry]]:
        image = self._image()  # (one catch-up for the whole listing)
        found = self._image_node(path, image)
        if not isinstance(found, list):
            raise NotADirectoryError("/".join(path))
        return [(name.encode("utf-8", "surrogateescape"),
                 self._metadata_entry((*path, name), image)) for name in sorted(found)]

    def _group_entry(self, path: tuple[str, ...]) -> Entry:
        described = self._group(path[1]).describe(path[1])
        fields = {k: v for k, v in described.items()
                  if k not in ("group", "members", "offsets") and not isinstance(v, (dict, list))}
        fields["members"] = len(described["members"])
        return Entry(self.ino(path), True, xattrs=_xattrs(fields))

    def _group_file(self, path: tuple[str, ...]) -> Entry:
        group_id, name = path[1], path[2]
        states = self._group(group_id)
        if name == DESCRIBE:
            text = describe_table(states.describe(group_id, self._log_end_offset))
            return Entry(self.ino(path), False, text.encode())
        if name == MEMBERS:
            lines = [json.dumps(m, ensure_ascii=False, separators=(",", ":")) + "\n"
                     for m in states.members(group_id)]
            return Entry(self.ino(path), False, "".join(lines).encode())
        try:
            topic, partition = parse_partition_dir_name(name)
        except KafkaStorageError:  # not a <topic>-<N> name
            raise FileNotFoundError(name) from None
        committed = states.offsets(group_id).get((topic, partition))
        if committed is None:
            raise FileNotFoundError(name)
        end = self._log_end_offset(topic, partition)
        fields = {"metadata": committed.metadata, "commitTimestamp": committed.commit_timestamp,
                  "expireTimestamp": committed.expire_timestamp,
                  "leaderEpoch": committed.leader_epoch, "logEndOffset": end,
                  "lag": None if end is None else end - committed.offset}
        return Entry(self.ino(path), False, b"%d\n" % committed.offset,
                     committed.commit_timestamp, _xattrs(fields))

    def _transaction(self, path: tuple[str, ...]) -> Entry:
        for states in self._states(TRANSACTION_STATE):
            state = states.get(path[1])
            if state is not None:
                text = json.dumps(state.describe(now_ms()), ensure_ascii=False, indent=2) + "\n"
                return Entry(self.ino(path), False, text.encode(), state.last_update_timestamp)
        raise FileNotFoundError(path[1])


def describe_table(described: dict[str, Any]) -> str:
    """``kafka-consumer-groups.sh --describe``'s table of a group: a row per partition with
    a committed offset or an owner; ``-`` for what is unknown."""
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
              "CONSUMER-ID", "HOST", "CLIENT-ID")
    rows = [header] + [
        tuple("-" if v is None else str(v) for v in (
            described["group"], r["topic"], r["partition"], r["currentOffset"],
            r["logEndOffset"], r["lag"], r["consumerId"], r["host"], r["clientId"]))
        for r in described["offsets"]]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "".join(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n"
                   for r in rows)


def is_coordinator_topic(topic: str) -> bool:
    return topic in COORDINATOR_TOPICS
