"""Kafka's tiered storage (KIP-405), read directly: the remote segments a broker copied with
its RemoteStorageManager, and a topic as a consumer sees it, remote segments below the local
log start offset and the broker's local log from there.

The layout is that of Kafka's reference RemoteStorageManager, ``LocalTieredStorage``
(``org.apache.kafka.server.log.remote.storage``): under its root,
``kafka-tiered-storage/<topic>-<N>-<topic id, base64url>/<20-digit base offset>-<segment id,
base64url>.{log,index,timeindex,snapshot,leader_epoch_checkpoint[,txnindex]}`` (a
``.txnindex`` only when not empty). Which segments are live is what ``__remote_log_metadata``
says (``COPY_SEGMENT_FINISHED`` and not deleted), and with it where each segment's objects are,
how large its ``.log`` is and where it ends (:func:`metadata_segments`: nothing is listed, as
Kafka's ``RemoteLogManager`` reads a remote segment by its metadata); where only the bucket is at
hand, the listing is the fallback (:func:`listed_segments`), which may also hold segments being
copied or deleted. Plugins that chunk or encrypt segments write other layouts: they are refused,
named.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Mapping

from pyarrow.fs import FileInfo, FileType

from storage.remote import TIERED_ROOT
from storage.errors import InvalidTopicError, KafkaStorageError, UnknownTopicOrPartitionError
from storage.log_files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from storage.log_reader import LogReader, decoded_batch_cache
from storage.log_segments import LogSegments
from storage.topic_partition import parse_partition_dir_name

from .metadata import REMOTE_LOG_METADATA_TOPIC, RemoteLogSegmentMetadata, read_metadata_log_dir
from .object_store import INDEX_KINDS, ObjectStore, SegmentObjects
from .remote_log import RemoteLog, RemoteLogDirectory
from .store_pool import PROCESS_POOL, StorePool

log = logging.getLogger(__name__)

_ID_CHARS = 22  # a UUID in base64url without padding (Kafka's Uuid.toString)


class UnsupportedRemoteLayoutError(KafkaStorageError):
    """Objects under a remote storage root that are not LocalTieredStorage's segment files (a
    plugin's chunked or encrypted segments): named, never read as something else."""


class OffsetGapError(KafkaStorageError):
    """Offsets of a topic-partition in neither tier: the remote segments end before the local
    log starts (retention ran on both sides), as Spark's Kafka source reports data loss."""


def tiered_partitions(store: ObjectStore) -> dict[str, str]:
    """``{"<topic>-<N>": its directory under kafka-tiered-storage/}`` of a LocalTieredStorage
    root. Raises UnsupportedRemoteLayoutError for a directory there that is not
    ``<topic>-<N>-<topic id>``."""
    out = {}
    for info in store.list(TIERED_ROOT):
        name = tiered_partition_name(info.base_name)
        if name is None:
            raise UnsupportedRemoteLayoutError(
                f"{store.describe(TIERED_ROOT, info.base_name)} is not a LocalTieredStorage "
                "partition directory (<topic>-<N>-<topic id>): an unsupported remote storage "
                "layout")
        out[name] = info.base_name
    return out


def tiered_partition_name(folder: str) -> str | None:
    """``<topic>-<N>`` of LocalTieredStorage's partition directory ``<topic>-<N>-<topic id>``
    (the id a UUID in base64url, Kafka's ``Uuid.toString``); None for any other name."""
    name, topic_id = folder[:-_ID_CHARS - 1], folder[-_ID_CHARS:]
    if folder[-_ID_CHARS - 1:-_ID_CHARS] != "-" or not _is_id(topic_id):
        return None
    try:
        parse_partition_dir_name(name)
    except InvalidTopicError:
        return None
    return name


def listed_segments(store: ObjectStore, directory: str,
                    live: set[str] | None = None) -> list[SegmentObjects]:
    """The segments in a LocalTieredStorage partition ``directory`` as listed: with ``live``
    (the ``<base offset>-<segment id>`` stems ``__remote_log_metadata`` says are
    ``COPY_SEGMENT_FINISHED`` and not deleted: ``live_metadata_of``'s stems)
    those only; without, from the listing alone (the fallback: it may include a segment being
    copied, or one being deleted; a base offset with two segment ids, a copy retried, takes
    the newest ``.log``). Where each ends is read from its last batch when asked. Raises
    UnsupportedRemoteLayoutError for files that are not segment files."""
    files: dict[tuple[int, str], dict[str, object]] = defaultdict(dict)
    for info in store.list(TIERED_ROOT, directory):
        stem, dot, kind = info.base_name.partition(".")
        base, sep, segment_id = stem.partition("-")
        if not (len(base) == 20 and base.isdigit() and sep and _is_id(segment_id)):
            raise UnsupportedRemoteLayoutError(
                f"{store.describe(TIERED_ROOT, directory, info.base_name)} is not a "
                "LocalTieredStorage segment file (<base offset>-<segment id>.<kind>): an "
                "unsupported remote storage layout")
        if live is None or stem in live:
            files[int(base), segment_id]["." + kind] = info
    by_base: dict[int, SegmentObjects] = {}
    for (base, _), kinds in sorted(files.items()):
        logfile = kinds.get(LOG_SUFFIX)
        if logfile is None:
            continue  # (being deleted, or not copied yet)
        objects = SegmentObjects(base, logfile, {k: kinds[k] for k in INDEX_KINDS if k in kinds})
        if base not in by_base or logfile.mtime_ns > by_base[base].log.mtime_ns:
            by_base[base] = objects
    return [by_base[b] for b in sorted(by_base)]


def tiered_base_offset(file_name: str) -> int | None:
    """The base offset of a LocalTieredStorage segment file name (``<20 digits>-<segment
    id>.<kind>``), or None when it is not one."""
    base, sep, rest = file_name.partition("-")
    segment_id = rest.partition(".")[0]
    return int(base) if len(base) == 20 and base.isdigit() and sep and _is_id(segment_id) \
        else None


def metadata_segments(store: ObjectStore, directory: str,
                      live: Mapping[str, RemoteLogSegmentMetadata]) -> list[SegmentObjects]:
    """The segments of LocalTieredStorage partition ``directory`` that ``live`` names (their
    ``__remote_log_metadata`` records by ``<base offset>-<segment id>`` stem:
    ``live_metadata_of``), located as LocalTieredStorage names their files, with no request:
    the ``.log`` of ``segmentSizeInBytes`` bytes, its ``.index`` and ``.timeindex``, its
    ``.txnindex`` unless ``txnIdxEmpty`` (LocalTieredStorage writes none then), and where it
    ends (``endOffset`` + 1). By base offset; of two live segments with one base offset, the
    one ending last."""
    by_base: dict[int, SegmentObjects] = {}
    for stem, m in sorted(live.items(), key=lambda kv: (kv[1].start_offset, kv[1].end_offset)):
        path = store.path(TIERED_ROOT, directory, stem)
        # (the copy's finishing time for an mtime: the object was written just before it)
        log_info = FileInfo(path + LOG_SUFFIX, FileType.File, size=m.segment_size_in_bytes,
                            mtime=m.event_timestamp_ms / 1000)
        kinds = (INDEX_SUFFIX, TIME_INDEX_SUFFIX) + (() if m.txn_index_empty
                                                     else (TXN_INDEX_SUFFIX,))
        indexes = {kind: FileInfo(path + kind, FileType.File) for kind in kinds}
        by_base[m.start_offset] = SegmentObjects(m.start_offset, log_info, indexes,
                                                 m.end_offset + 1)
    return [by_base[b] for b in sorted(by_base)]


def live_metadata_of(log_dir, pool: StorePool = PROCESS_POOL
                     ) -> dict[str, dict[str, RemoteLogSegmentMetadata]] | None:
    """The live remote segments' ``__remote_log_metadata`` records by LocalTieredStorage
    directory and stem (``RemoteLogMetadataCache.live_metadata_by_directory``: a recreated
    topic's current directory last), as the metadata partitions in the broker log directory
    ``log_dir`` say; None when it holds none (then a remote tier's listing is all there is).

    The fold is kept in ``pool`` (the process's: ``storage.remote.store_pool``, the last
    ``METADATA_FOLDS_KEPT`` log directories), with the name, inode, size and mtime of every
    file of those partitions taken before it was read: while none of them changed, no record
    came or went (the broker only appends to them, rolls new ones and deletes old ones), so a
    later call, e.g. the next Spark task in a reused Python worker, is answered from it; any
    change reads them again. Raises OSError when ``log_dir`` cannot be read."""
    key = os.path.abspath(log_dir)
    signature = _metadata_signature(key)
    if signature is None:
        return None
    return pool.fold(key, signature,
                     lambda: read_metadata_log_dir(key).live_metadata_by_directory())


def remote_history(log_dir) -> dict[str, tuple[int, int]]:
    """``{"<topic>-<N>": (first offset, last offset)}`` of the live remote segments of each
    partition, as ``__remote_log_metadata`` in the broker log directory ``log_dir`` says (a
    recreated topic's current directory); empty when it holds none. Raises OSError."""
    history = {}
    for directory, segments in (live_metadata_of(log_dir) or {}).items():
        name = tiered_partition_name(directory)
        if name is not None and segments:
            history[name] = (min(m.start_offset for m in segments.values()),
                             max(m.end_offset for m in segments.values()))
    return history


def _metadata_signature(log_dir: str) -> tuple | None:
    """(name, inode, size, mtime) of every file of the ``__remote_log_metadata`` partitions
    in ``log_dir``, sorted; None when there is no such partition."""
    directories = [e for e in os.scandir(log_dir)
                   if e.name.startswith(REMOTE_LOG_METADATA_TOPIC + "-") and e.is_dir()]
    if not directories:
        return None
    files = []
    for directory in directories:
        for entry in os.scandir(directory.path):
            try:
                st = entry.stat()
            except FileNotFoundError:  # (deleted by retention meanwhile: not a record source)
                continue
            files.append((directory.name, entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(files))


def open_object_store_directory(store: ObjectStore, partitions=None):
    """The log directory at ``store``'s root, read-only: LocalTieredStorage's root (a
    ``kafka-tiered-storage`` directory at its top) as a :class:`TieredLogDirectory`, its live
    segments the listing's (no ``__remote_log_metadata`` at hand: said in its ``notices``);
    anything else as a log directory copied as it is (``RemoteLogDirectory``). Raises
    ObjectStoreError."""
    if any(info.base_name == TIERED_ROOT and info.type == FileType.Directory
           for info in store.list()):
        return TieredLogDirectory(store, partitions)
    return RemoteLogDirectory(store, partitions)


def _is_id(text: str) -> bool:
    return len(text) == _ID_CHARS and all(c.isalnum() or c in "-_" for c in text)


class TieredLogDirectory:
    """The remote tier of a LocalTieredStorage root in ``store``, its partitions served as
    read-only :class:`RemoteLog` (the surface of a read-only ``LogManager``). Raises
    ObjectStoreError, UnsupportedRemoteLayoutError."""

    def __init__(self, store: ObjectStore, partitions=None,
                 live: Mapping[str, Mapping[str, RemoteLogSegmentMetadata] | set[str]] | None
                 = None) -> None:
        """``live``: the live segments by directory, from ``__remote_log_metadata``
        (``storage.remote.metadata``): their records by stem (``live_metadata_of``: the
        partitions and segments are theirs, nothing is listed, :func:`metadata_segments`) or
        their stems alone (the listing's segments of those stems, :func:`listed_segments`);
        None: the listing is the fallback (said in ``notices``)."""
        self.store = store
        self._by_metadata = live is not None and all(isinstance(v, Mapping)
                                                     for v in live.values())
        found = ({d[:-_ID_CHARS - 1]: d for d in live} if self._by_metadata
                 else tiered_partitions(store))
        self._dirs = {name: d for name, d in found.items()
                      if partitions is None or partitions(*parse_partition_dir_name(name))}
        self._live = live
        self._logs: dict[str, RemoteLog] = {}
        self._decoded_batches = decoded_batch_cache()  # of all its partitions' readers
        self.notices: list[str] = [] if live is not None else [
            f"no __remote_log_metadata at hand: the remote segments of {store.describe()} are "
            "its listing's, which may hold a segment being copied or deleted"]

    def partition_names(self) -> list[str]:
        return sorted(self._dirs)

    def get(self, name: str) -> RemoteLog:
        if name not in self._logs:
            if name not in self._dirs:
                raise UnknownTopicOrPartitionError(
                    f"{name} has no remote segments in {self.store.describe(TIERED_ROOT)}")
            directory = self._dirs[name]
            if self._by_metadata:
                objects = metadata_segments(self.store, directory, self._live[directory])
            else:
                objects = listed_segments(self.store, directory, None if self._live is None
                                          else self._live.get(directory, set()))
            first = objects[0].base_offset if objects else 0
            self._logs[name] = RemoteLog(self.store, name, log_start_offset=first,
                                         segments=objects, directory=(TIERED_ROOT,
                                                                      self._dirs[name]),
                                         decoded_batches=self._decoded_batches)
        return self._logs[name]

    def catch_up(self, name: str) -> RemoteLog:
        """The partition ``name`` (a read-only ``LogManager``'s surface): the segments listed
        when it was opened (remote objects are written once)."""
        return self.get(name)

    def catch_up_partitions(self) -> bool:
        """Partitions come and go with the listing made at open: nothing changed."""
        return False

    def close(self) -> None:
        for remote in self._logs.values():
            remote.close()
        self._logs.clear()
        self.store.close()


class UnifiedLog:
    """A topic-partition as a consumer of a tiered topic sees it (the read side of Kafka's
    ``UnifiedLog`` over ``RemoteLogManager``): ``remote``'s segments below where ``local``
    starts, then ``local``'s (a broker's log directory, read-only, following the broker). A
    segment in both tiers is read once, from the local one. A gap between the tiers (offsets in
    neither) raises OffsetGapError naming the topic-partition and the offsets, or with
    ``fail_on_data_loss=False`` is stepped over with a warning (Spark's ``failOnDataLoss``).
    Offsets: the log start is the remote tier's, or ``log_start_offset`` (the broker's
    ``log-start-offset-checkpoint`` entry) when that is above it: DeleteRecords and remote
    retention move the broker's log start before the metadata says the segments below it
    deleted, and a segment the log start is inside of stays live; the ends (log end, last
    stable) are the local log's."""

    damage = None
    salvaged: tuple[str, ...] = ()

    def __init__(self, remote: RemoteLog | None, local, fail_on_data_loss: bool = True,
                 log_start_offset: int = 0, decoded_batches: RecordCache | None = None) -> None:
        self.local, self.remote = local, remote
        self._checkpointed = log_start_offset
        self.topic, self.partition, self.config = local.topic, local.partition, local.config
        self.dir = local.dir
        self.fail_on_data_loss = fail_on_data_loss
        self.segments = LogSegments(self.dir, self.config, local.segments.clock, [])
        self.reader = LogReader(self, decoded_batches)
        self._version = None
        self._join()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def _join(self) -> None:
        """Publish remote segments below the local log start, then the local ones."""
        local_first = self.local.segments.first_base_offset
        if local_first is None:
            local_first = self.local.log_end_offset
        remote = [] if self.remote is None or self._checkpointed >= local_first else [
            s for s in self.remote.segments.all() if s.base_offset < local_first]
        # (from the segment the broker's log start is in: the ones wholly below are gone)
        below = [i for i, s in enumerate(remote) if s.base_offset <= self._checkpointed]
        remote = remote[below[-1]:] if below else remote
        self._start = max(remote[0].base_offset if remote else self.local.log_start_offset,
                          self._checkpointed)
        if remote:
            remote_end = remote[-1].read_next_offset()
            if remote_end < local_first:
                gap = (f"{self.name}: offsets {remote_end}..{local_first - 1} are in neither "
                       f"the remote tier (which ends at {remote_end - 1}) nor the local log "
                       f"(which starts at {local_first})")
                if self.fail_on_data_loss:
                    raise OffsetGapError(gap + "; set failOnDataLoss=false to skip them")
                log.warning("%s: skipped", gap)
        self.segments.set(remote + self.local.segments.all())
        self._version = self.local.segments.version
        self.reader.clear_cache()

    @property
    def log_start_offset(self) -> int:
        return self._start

    @property
    def log_end_offset(self) -> int:
        return self.local.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        return self.local.last_stable_offset

    def catch_up(self, log_start_offset: int | None = None) -> UnifiedLog:
        """Follow the broker's local log (segments rolled, tiered and deleted locally) and
        its checkpointed log start (``log_start_offset``, when given)."""
        moved = log_start_offset is not None and log_start_offset != self._checkpointed
        if moved:
            self._checkpointed = log_start_offset
        if moved or self.local.segments.version != self._version:
            self._join()
        return self

    def close(self) -> None:
        if self.remote is not None:
            self.remote.close()
        self.local.close()


class UnifiedLogDirectory:
    """The partitions of a tiered topic's broker log directory ``local`` (a read-only
    ``LogManager``) joined with their remote segments in ``remote`` (a
    :class:`TieredLogDirectory`), each as a :class:`UnifiedLog`; the surface of a read-only
    ``LogManager``. A partition all of whose local segments were tiered still has its local
    directory (Kafka keeps an active segment)."""

    def __init__(self, local, remote: TieredLogDirectory, fail_on_data_loss: bool = True):
        self.local, self.remote = local, remote
        self.fail_on_data_loss = fail_on_data_loss
        self._logs: dict[str, UnifiedLog] = {}
        self._decoded_batches = decoded_batch_cache()  # of all its partitions' readers
        self.notices: list[str] = [*local.notices, *remote.notices]

    def partition_names(self) -> list[str]:
        return self.local.partition_names()

    def get(self, name: str) -> UnifiedLog:
        if name not in self._logs:
            local = self.local.get(name)
            remote = self.remote.get(name) if name in self.remote.partition_names() else None
            self._logs[name] = UnifiedLog(remote, local, self.fail_on_data_loss,
                                          self.local.checkpointed_log_start_offset(name),
                                          self._decoded_batches)
        return self._logs[name]

    def catch_up(self, name: str) -> UnifiedLog:
        self.local.catch_up(name)
        return self.get(name).catch_up(self.local.checkpointed_log_start_offset(name))

    def catch_up_partitions(self) -> bool:
        return self.local.catch_up_partitions()

    def close(self) -> None:
        self._logs.clear()
        self.remote.close()
        self.local.close()
