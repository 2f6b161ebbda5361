"""``kfs verify`` of segments in an object store: an audit that what was uploaded is whole, by
the same checks as a local verify (``kfs.tools.verify``), each ``.log`` read with ranged
requests through the engine's read seam (``storage.segment_source.ObjectSegmentSource``, read
ahead), never downloaded whole; nothing is written.

Three layouts (``storage.remote``):

1. a log directory copied into a bucket as it is (``s3://bucket/prefix`` holding
   ``<topic>-<N>/``): :class:`CopiedPartition`;
2. the root of Kafka's reference RemoteStorageManager, ``LocalTieredStorage``
   (``kafka-tiered-storage/<topic>-<N>-<topic id>/<base>-<segment id>.<kind>``):
   :class:`TieredPartition`, its live segments those ``__remote_log_metadata`` says
   (``COPY_SEGMENT_FINISHED``, not deleted) when it is at hand, else the listing's; a gap
   between its segments is a problem (Kafka tiers no compacted topic);
3. a broker's local log directory with its remote tier (``--remote-path``): :class:`Tiers`,
   also reporting offsets in neither tier (the remote tier ending below the local log's first
   segment), as ``storage.remote.tiered.OffsetGapError`` says it.

A problem names the object by its URI without credentials (``storage.remote.uri.redact``); an
object that cannot be read is a problem of its segment, and the other segments and partitions
are still checked.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from pyarrow.fs import FileType

from storage.config import LogConfig
from storage.directory import StoreOptions, open_store
from storage.errors import KafkaStorageError
from storage.log_files import (
    CLEAN_SHUTDOWN_FILE,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
)
from storage.remote.metadata import RemoteLogSegmentMetadata
from storage.remote.object_store import INDEX_KINDS, ObjectStore, ObjectStoreError
from storage.remote.tiered import (
    TIERED_ROOT,
    live_metadata_of,
    tiered_base_offset,
    tiered_partitions,
)
from storage.remote.uri import scrub
from storage.segment import LogSegment
from storage.segment_source import ObjectSegmentSource

from .verify import (
    LocalPartition,
    LogDirectoryFiles,
    PartitionFiles,
    Problem,
    SegmentFiles,
    UsageError,
    VerifyStats,
    _check_snapshot,
    _segment_file,
    check_partition_name,
    find_partitions,
    verify_partition,
)

__all__ = ["CopiedPartition", "TieredPartition", "Tiers", "copied_unclean", "open_remote",
           "open_tiers"]

_READ_ERRORS = (ObjectStoreError, OSError)
_TORN = "a truncated object, or a corrupt batch size"


class _ObjectFiles:
    """What a partition whose files are objects of ``store`` says of an object it cannot
    read (the error names the object by its path in the store: the problem names it)."""

    read_errors = _READ_ERRORS
    torn = _TORN

    def unreadable(self, file: str, error: BaseException) -> Problem:
        text = str(error)
        for prefix in (self.store.path(self.folder, file) if file else "",
                       self.store.path(self.folder)):
            if prefix and text.startswith(prefix):
                text = text[len(prefix):].lstrip(": ")
                break
        return self.problem(file, None, f"cannot be {'read' if file else 'listed'}: {text}")


class CopiedPartition(_ObjectFiles, LogDirectoryFiles):
    """Partition directory ``name`` of a log directory copied into ``store`` (layout 1),
    listed once. Raises ObjectStoreError when listing fails."""

    def __init__(self, store: ObjectStore, name: str) -> None:
        self.store, self.partition, self.folder = store, name, name
        self.directory = store.describe(name)

    @functools.cached_property
    def _infos(self) -> dict:
        return {i.base_name: i for i in self.store.list(self.partition) if i.type == FileType.File}

    def names(self) -> list[str]:
        return sorted(self._infos)

    def read(self, name: str) -> bytes:
        return _read_object(self.store, self._infos[name].path)

    def open_segment(self, segment: SegmentFiles) -> LogSegment:
        return _object_segment(self.store, self.store.path(self.partition), segment, self._infos)

    def log_bytes(self) -> int:
        return sum(self._infos[s.name(LOG_SUFFIX)].size for s in self.segments())


class TieredPartition(_ObjectFiles, PartitionFiles):
    """The remote segments of partition ``name`` in LocalTieredStorage's ``directory``
    (``<topic>-<N>-<topic id>``) under ``store``'s ``kafka-tiered-storage`` (layout 2).
    ``live``: the live segments' metadata by ``<base>-<segment id>`` stem, as
    ``__remote_log_metadata`` says (``RemoteLogSegmentMetadata``): a live one without its
    ``.log``, of another size than its ``segmentSizeInBytes`` or whose last offset is not its
    ``endOffset`` is a problem; the others, being copied or deleted, are not checked. None:
    the listing's segments (a base offset copied twice: the newest ``.log``). Raises
    ObjectStoreError when listing fails."""

    contiguous = True
    bad_snapshot = ("a follower that catches up from the remote tier restores its producer "
                    "state from it")
    missing = {
        INDEX_SUFFIX: "missing (a fetch from the remote tier looks offsets up in it: Kafka's "
                      "RemoteIndexCache fails without it)",
        TIME_INDEX_SUFFIX: "missing (a fetch by timestamp from the remote tier looks it up: "
                           "Kafka's RemoteIndexCache fails without it)",
    }

    def __init__(self, store: ObjectStore, name: str, directory: str,
                 live: dict[str, RemoteLogSegmentMetadata] | None = None) -> None:
        self.store, self.partition, self.live = store, name, live
        self.folder = f"{TIERED_ROOT}/{directory}"  # (under the store's root)
        self.tiered_dir = directory
        self.directory = store.describe(TIERED_ROOT, directory)

    @functools.cached_property
    def _listing(self) -> tuple[list[Problem], list[SegmentFiles], dict]:
        problems, by_stem, infos = [], defaultdict(set), {}
        for info in self.store.list(TIERED_ROOT, self.tiered_dir):
            stem, _, kind = info.base_name.partition(".")
            if tiered_base_offset(info.base_name) is None:
                problems.append(self.problem(info.base_name, None, (
                    "not a LocalTieredStorage segment file (<base offset>-<segment id>.<kind>): "
                    "an unsupported remote storage layout")))
            elif self.live is None or stem in self.live:
                by_stem[stem].add("." + kind)
                infos[info.base_name] = info
        for stem in sorted(set(self.live or ()) | set(by_stem)):
            if LOG_SUFFIX not in by_stem.get(stem, ()):
                problems.append(self.problem(stem + LOG_SUFFIX, None, self._no_log()))
        newest: dict[int, str] = {}  # base offset -> stem (a copy retried: the newest .log)
        for stem in sorted(s for s, kinds in by_stem.items() if LOG_SUFFIX in kinds):
            base = tiered_base_offset(stem + LOG_SUFFIX)
            if base not in newest or (infos[stem + LOG_SUFFIX].mtime_ns >
                                      infos[newest[base] + LOG_SUFFIX].mtime_ns):
                newest[base] = stem
        segments = [SegmentFiles(base, stem, frozenset(by_stem[stem] & set(INDEX_KINDS)))
                    for base, stem in sorted(newest.items())]
        return problems, segments, infos

    def _no_log(self) -> str:
        if self.live is not None:
            return "missing: __remote_log_metadata says this segment was copied " \
                   "(COPY_SEGMENT_FINISHED) and not deleted"
        return ("missing, though the segment's other files are there (a copy or a deletion "
                "not finished, or a lost .log; no __remote_log_metadata at hand to tell)")

    def segments(self) -> list[SegmentFiles]:
        return self._listing[1]

    def audit(self, segment: SegmentFiles, scan) -> Iterator[Problem]:
        """The segment against its ``__remote_log_metadata`` record (a copy cut short at a
        batch boundary, or another object in its place, has whole batches only)."""
        metadata = self.live.get(segment.stem) if self.live else None
        if metadata is None:
            return
        log = segment.name(LOG_SUFFIX)
        if scan.size != metadata.segment_size_in_bytes:
            yield self.problem(log, None, f"{scan.size} bytes, where __remote_log_metadata "
                                          f"says {metadata.segment_size_in_bytes} "
                                          "(segmentSizeInBytes): not the segment copied whole")
        last = scan.last_offset
        if scan.readable and last is not None and last != metadata.end_offset:
            yield self.problem(log, None, f"last offset {last}, where __remote_log_metadata "
                                          f"says {metadata.end_offset} (endOffset)")

    def strays(self) -> Iterator[Problem]:
        problems, segments, infos = self._listing
        yield from problems
        for segment in segments:
            if segment.name(SNAPSHOT_SUFFIX) in infos:
                yield from _check_snapshot(self, segment.name(SNAPSHOT_SUFFIX))

    def read(self, name: str) -> bytes:
        return _read_object(self.store, self._listing[2][name].path)

    def open_segment(self, segment: SegmentFiles) -> LogSegment:
        return _object_segment(self.store, self.store.path(self.folder), segment,
                               self._listing[2])

    def log_bytes(self) -> int:
        return sum(self._listing[2][s.name(LOG_SUFFIX)].size for s in self.segments())


class Tiers:
    """A topic-partition of a tiered topic (layout 3): its ``remote`` segments (a
    :class:`TieredPartition`, or None when it has none) and the broker's ``local`` log (a
    :class:`LocalPartition`, or None). Checked remote tier first; offsets in neither tier
    (the remote tier's last offset + 1 below the local log's first segment's base offset) are
    a problem of that segment."""

    def __init__(self, remote: TieredPartition | None, local: LocalPartition | None) -> None:
        self.remote, self.local = remote, local

    def log_bytes(self) -> int:
        return sum(t.log_bytes() for t in (self.remote, self.local) if t is not None)

    def verify(self, stats: VerifyStats, on_bytes: Callable[[int], None],
               in_use: bool = False, unclean: bool = False) -> Iterator[Problem]:
        """The remote tier's problems, a gap between the tiers, the local log's problems
        (``in_use``: a broker holds the local directory; ``unclean``: it was not shut down
        cleanly, see ``kfs.tools.verify.verify_partition``)."""
        remote_end = None
        if self.remote is not None:
            remote_end = yield from verify_partition(self.remote, stats, on_bytes)
        if self.local is None:
            return
        local = self.local.segments()
        if remote_end is not None and local and remote_end < local[0].base:
            first = local[0]
            yield self.local.problem(first.name(LOG_SUFFIX), None, (
                f"{self.local.partition}: offsets {remote_end}..{first.base - 1} are in neither "
                f"the remote tier (which ends at {remote_end - 1}) nor the local log (which "
                f"starts at {first.base})"))
        yield from verify_partition(self.local, stats, on_bytes, in_use, unclean)


def _read_object(store: ObjectStore, path: str) -> bytes:
    data = store.read_small_object(path)
    if data is None:
        raise ObjectStoreError(f"{path}: no such object (deleted since it was listed)")
    return data


def _object_segment(store: ObjectStore, directory: str, segment: SegmentFiles,
                    infos: dict) -> LogSegment:
    """``segment`` read-only, its ``.log`` read with ranged requests (read ahead), its index
    objects whole (``ObjectSegmentSource``)."""
    indexes = {kind: infos[segment.name(kind)].path for kind in segment.kinds}
    source = ObjectSegmentSource(store, infos[segment.name(LOG_SUFFIX)], indexes)
    return LogSegment(Path(directory), segment.base, LogConfig(), False, source=source)


# -- which partitions ----------------------------------------------------------------------


def open_remote(uri: str, names: Sequence[str] = (), options: StoreOptions = StoreOptions()
                ) -> tuple[list[PartitionFiles], list[str], ObjectStore]:
    """The partitions at ``uri`` (all, or those ``names``), the notices to print first and
    the store (to close): a LocalTieredStorage root (``kafka-tiered-storage/`` at its top;
    its listing is all there is of ``__remote_log_metadata``: said in a notice) or a log
    directory copied as it is. Raises ObjectStoreError (an unknown bucket, access denied),
    UnsupportedRemoteLayoutError and UsageError (a name not there, no partition at all)."""
    store = open_store(uri, options, shared=False)
    try:
        top = store.list()
        if any(i.base_name == TIERED_ROOT and i.type == FileType.Directory for i in top):
            partitions = _tiered(store, names, None)
            notice = (f"no __remote_log_metadata at hand: the remote segments of "
                      f"{store.describe()} are its listing's, which may hold a segment being "
                      "copied or deleted (give the broker's log directory, with --remote-path, "
                      "for the live ones)")
            return partitions, [notice], store
        found = sorted(i.base_name for i in top if i.type == FileType.Directory
                       and _is_partition(i.base_name))
        if not found and any(_segment_file(i.base_name) for i in top):
            raise UsageError(f"{store.describe()} holds segment files: it is a partition "
                             "directory; give its parent and the partition name")
        if not found:
            raise UsageError(f"{store.describe()} holds neither partition directories "
                             f"(<topic>-<N>/) nor {TIERED_ROOT}/: not a Kafka log directory "
                             "nor a tiered storage root")
        return [CopiedPartition(store, n) for n in _chosen(found, names, store)], [], store
    except BaseException:
        store.close()
        raise


def open_tiers(log_dir: str, remote_uri: str | None, names: Sequence[str] = (),
               options: StoreOptions = StoreOptions()
               ) -> tuple[list[Tiers], list[str], ObjectStore]:
    """The partitions of the broker log directory ``log_dir`` (all, or those ``names``) with
    their remote segments under the LocalTieredStorage root ``remote_uri`` (a URI or a local
    path; with ``options.remote_config``, the broker's properties, the layout they say, Aiven's
    plugin's by ``kfs.tools.verify_aiven``, and by default where they say), live as
    ``__remote_log_metadata`` in ``log_dir`` says (the listing's when it holds none: said in a
    notice); the notices; the store (to close). Raises as :func:`open_remote` and
    :func:`kfs.tools.verify.find_partitions`."""
    local = {p.name: LocalPartition(p) for p in find_partitions(log_dir, names)}
    live = live_metadata_of(log_dir)
    config, key_ring = options.remote_storage()  # (--remote-config: the broker's properties)
    explicit = remote_uri is not None
    remote_uri = remote_uri or (config.location if config is not None else None)
    if remote_uri is None:
        raise UsageError(f"{options.remote_config} names no remote storage root: give "
                         "--remote-path")
    store = open_store(remote_uri, options, shared=False)
    try:
        if config is not None and config.layout == "aiven":
            from .verify_aiven import aiven_partitions

            found = aiven_partitions(store, config.key_prefix, key_ring, live, explicit)
        else:
            found = {p.partition: p for p in _tiered(store, (), live)}
        remote = {n: p for n, p in found.items() if not names or n in names}
    except BaseException:
        store.close()
        raise
    notices = [] if live is not None else [
        f"no __remote_log_metadata in {log_dir}: the remote segments of {store.describe()} are "
        "its listing's, which may hold a segment being copied or deleted"]
    tiers = [Tiers(remote.get(n), local.get(n)) for n in sorted(local.keys() | remote.keys())]
    return tiers, notices, store


def copied_unclean(store: ObjectStore, partitions: Sequence[PartitionFiles]) -> bool:
    """Whether ``partitions`` are of a log directory copied into ``store`` (layout 1) whose
    copy holds no ``.kafka_cleanshutdown``: a copy of a directory a running broker or mount
    was writing (a broker deletes the marker when it starts), or of one whose writer died.
    Its active segments are then checked as a local directory's in that state: what Kafka's
    loader recovers at the next start (preallocated indexes, a time index without the
    segment's largest timestamp) is said, not a problem. Raises ObjectStoreError."""
    return (bool(partitions) and all(isinstance(p, CopiedPartition) for p in partitions)
            and store.read_small_object(store.path(CLEAN_SHUTDOWN_FILE)) is None)


def _tiered(store: ObjectStore, names: Sequence[str],
            live: dict[str, dict[str, RemoteLogSegmentMetadata]] | None
            ) -> list[TieredPartition]:
    folders = tiered_partitions(store)
    return [TieredPartition(store, n, folders[n],
                            None if live is None else live.get(folders[n], {}))
            for n in _chosen(sorted(folders), names, store)]


def _chosen(found: list[str], names: Sequence[str], store: ObjectStore) -> list[str]:
    """``names`` (each a partition ``found``), or all of ``found``."""
    for name in names:
        check_partition_name(name)
        if name not in found:
            raise UsageError(f"no partition {name} in {store.describe()}")
    return list(names) or found


def _is_partition(name: str) -> bool:
    try:
        check_partition_name(name)
    except UsageError:
        return False
    return True


def one_line(error: BaseException, *uris: str) -> str:
    """``error`` said on one line, with no credentials of ``uris`` in it."""
    text = str(error)
    for uri in uris:
        if uri:
            text = scrub(text, uri)
    return " ".join(text.split())


OPEN_ERRORS = (ObjectStoreError, KafkaStorageError, UsageError, OSError, ValueError)
