"""Read-only partition logs whose segments are objects in an object store: a Kafka (or kfs)
log directory copied into a bucket as it is (``storage.remote.object_store``).

A :class:`RemoteLog` has what a reader needs of a ``storage.log.Log``: its offsets, its
segments (``storage.log_segments.LogSegments``, each a ``LogSegment`` reading its objects
through an ``ObjectSegmentSource``) and its reader (``storage.log_reader.LogReader``), so every
read path (records, columns, streams, dump, verify) works on it unchanged. Opening one lists
the partition's objects once; reading fetches index objects and byte ranges of ``.log``
objects only. Nothing is ever written.
"""

from __future__ import annotations

import logging
from pathlib import Path

from pyarrow.fs import FileType

from storage.checkpoint import parse_offsets
from storage.clock import SYSTEM_CLOCK, Clock
from storage.config import LogConfig
from storage.errors import InvalidTopicError, UnknownTopicOrPartitionError
from storage.log_files import (
    LOG_DIR_FILES,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    NOT_A_LOG_DIR,
    NOT_DATA_LOGS,
    parse_segment_file_name,
)
from storage.log_loader import replay_producer_batches
from storage.log_reader import LogReader, decoded_batch_cache
from storage.log_segments import LogSegments
from storage.record_cache import RecordCache
from storage.producer_state import ProducerStateManager
from storage.segment import LogSegment
from storage.segment_source import ObjectSegmentSource
from storage.topic_partition import parse_partition_dir_name

from .object_store import INDEX_KINDS, ObjectStore, SegmentObjects

log = logging.getLogger(__name__)

def copied_segments(store: ObjectStore, name: str) -> list[SegmentObjects]:
    """The segments of partition directory ``name`` copied into ``store`` as a broker keeps
    them (``<20-digit base offset>.log`` with its ``.index``, ``.timeindex``, ``.txnindex``),
    in base offset order; ``.cleaned``/``.swap``/``.deleted`` files are not segments."""
    infos = {info.base_name: info for info in store.list(name)}
    segments = []
    for file_name, info in infos.items():
        parsed = parse_segment_file_name(file_name)
        if parsed is None or parsed.kind != LOG_SUFFIX or parsed.extra:
            continue
        prefix = file_name[:-len(LOG_SUFFIX)]
        indexes = {kind: infos[prefix + kind] for kind in INDEX_KINDS if prefix + kind in infos}
        segments.append(SegmentObjects(parsed.offset, info, indexes))
    return sorted(segments, key=lambda s: s.base_offset)


class RemoteLogSegment(LogSegment):
    """A read-only segment whose objects are in an object store (``source``). ``next_offset``,
    when known without reading the segment (``endOffset`` + 1 of its
    ``__remote_log_metadata`` record, which Kafka's ``RemoteLogManager`` writes as the next
    segment's base offset - 1), is what :meth:`read_next_offset` answers with no request, as
    Kafka's remote reads take a remote segment's end from its metadata; None: read from its
    last batch (``LogSegment.readNextOffset``)."""

    def __init__(self, directory: Path, base_offset: int, config: LogConfig, clock: Clock,
                 source: ObjectSegmentSource, next_offset: int | None = None) -> None:
        super().__init__(directory, base_offset, config, False, clock, source=source)
        self._next_offset = next_offset

    def read_next_offset(self) -> int:
        if self._next_offset is not None:
            return self._next_offset
        return super().read_next_offset()


class RemoteLog:
    """Partition ``name`` (``<topic>-<N>``) of ``store``, read-only, made of ``segments`` (by
    default the partition directory's, :func:`copied_segments`). ``log_start_offset`` counts
    when it is above the first segment's base offset (a log-start-offset-checkpoint entry);
    ``log_end_offset`` is the offset after the last segment's last batch. Raises
    ObjectStoreError when listing fails."""

    damage = None  # (a remote log is not recovered: bad bytes raise where they are read)
    salvaged: tuple[str, ...] = ()  # (nor salvaged: nothing is ever cut)

    def __init__(self, store: ObjectStore, name: str, config: LogConfig | None = None,
                 log_start_offset: int = 0, clock: Clock = SYSTEM_CLOCK,
                 segments: list[SegmentObjects] | None = None,
                 directory: tuple[str, ...] | None = None, make_source=None,
                 decoded_batches: RecordCache | None = None) -> None:
        """``directory``: where the partition's objects are under the store's root (default
        ``name``). ``make_source(segment)``: how each of ``segments`` is read (default: its
        objects as a broker's files, ``ObjectSegmentSource``; another RemoteStorageManager's
        layout gives its own, e.g. ``storage.remote.aiven``). ``decoded_batches``: its
        directory's cache of decoded batches (``LogReader``'s)."""
        self.topic, self.partition = parse_partition_dir_name(name)
        self.config = config or LogConfig()
        self.dir = Path(store.path(*(directory or (name,))))
        self.store = store
        objects = copied_segments(store, name) if segments is None else segments
        make_source = make_source or (lambda s: ObjectSegmentSource(store, s.log, s.indexes))
        segments = [RemoteLogSegment(self.dir, s.base_offset, self.config, clock,
                                     make_source(s), s.next_offset)
                    for s in objects]
        self.segments = LogSegments(self.dir, self.config, clock, segments)
        self.reader = LogReader(self, decoded_batches)
        first = segments[0].base_offset if segments else 0
        self._leo = segments[-1].read_next_offset() if segments else log_start_offset
        self._log_start_offset = min(max(first, log_start_offset), self._leo)
        self._producer_state: ProducerStateManager | None = None  # built when asked

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def last_stable_offset(self) -> int:
        """The read_committed limit (``UnifiedLog.lastStableOffset``): the first offset of a
        transaction with no marker in the log, else the log end offset. The first call
        replays the producer batches (one ranged read per producer batch)."""
        if self._producer_state is None:
            state = ProducerStateManager(None, writable=False)
            state.update_map_end_offset(self._log_start_offset)
            replay_producer_batches(state, self.segments.all(), self._leo)
            self._producer_state = state
        return self._producer_state.last_stable_offset(self._leo, self._log_start_offset)

    def close(self) -> None:
        for segment in self.segments.all():
            segment.close()
        self.segments.set([])


class RemoteLogDirectory:
    """The partitions of a log directory in ``store``, opened read-only as :class:`RemoteLog`
    on first use, as a read-only ``LogManager`` serves a local one: ``partition_names()``,
    ``get(name)``, ``close()``. ``partitions(topic, partition)`` keeps only those it accepts.
    Raises ObjectStoreError when listing fails."""

    def __init__(self, store: ObjectStore, partitions=None, config: LogConfig | None = None):
        self.store = store
        self.config = config or LogConfig()
        store.check_root()
        names, log_dir_files = [], False
        for info in store.list():
            if info.type != FileType.Directory:
                log_dir_files |= info.base_name in LOG_DIR_FILES  # (checkpoints, meta.properties)
                continue
            try:
                topic, partition = parse_partition_dir_name(info.base_name)
            except InvalidTopicError:
                continue  # (-delete, -future, strays)
            log_dir_files = True
            if info.base_name not in NOT_DATA_LOGS and (partitions is None
                                                        or partitions(topic, partition)):
                names.append(info.base_name)
        self._names = sorted(names)
        self._starts = self._log_start_offsets()
        self._logs: dict[str, RemoteLog] = {}
        self._decoded_batches = decoded_batch_cache()  # of all its partitions' readers
        # what a user must hear of, as a read-only LogManager says it of a local directory
        # (and logs it: the mount's log is where a user looks later)
        self.notices: list[str] = []
        if not log_dir_files:
            warning = f"{store.describe()} is {NOT_A_LOG_DIR}: nothing to show"
            log.warning("%s", warning)
            self.notices.append(f"warning: {warning}")

    def _log_start_offsets(self) -> dict[str, int]:
        # (read whole each time: the checkpoint changes, a shared store's cache is for indexes)
        data = self.store.read_object(self.store.path(LOG_START_OFFSET_CHECKPOINT))
        if data is None:
            return {}
        return parse_offsets(data.decode("utf-8", "replace"),
                             self.store.describe(LOG_START_OFFSET_CHECKPOINT))

    def partition_names(self) -> list[str]:
        return list(self._names)

    def get(self, name: str) -> RemoteLog:
        """The partition ``name``. Raises UnknownTopicOrPartitionError when there is none."""
        if name not in self._logs:
            if name not in self._names:
                raise UnknownTopicOrPartitionError(
                    f"{name} is not a partition of {self.store.describe()}")
            self._logs[name] = RemoteLog(self.store, name, self.config,
                                         self._starts.get(name, 0),
                                         decoded_batches=self._decoded_batches)
        return self._logs[name]

    def checkpointed_log_start_offset(self, name: str) -> int:
        """The log start offset of ``name`` in the copied ``log-start-offset-checkpoint`` (0
        when it has none)."""
        return self._starts.get(name, 0)

    def catch_up(self, name: str) -> RemoteLog:
        """The partition ``name`` as a follower of a running writer asks for it: objects are
        written once, so it is :meth:`get`'s (LogManager.catch_up's surface)."""
        return self.get(name)

    def catch_up_partitions(self) -> bool:
        """Partitions come and go with the listing made at open: nothing changed."""
        return False

    def close(self) -> None:
        for log in self._logs.values():
            log.close()
        self._logs.clear()
        self.store.close()
