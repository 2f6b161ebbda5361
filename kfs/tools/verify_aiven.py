"""``kfs verify --remote-config FILE LOGDIR``: an audit of what Aiven's RemoteStorageManager
uploaded (``storage.remote.aiven``), by the checks of a local verify (``kfs.tools.verify``) on
each remote segment read through its manifest: every chunk fetched and decoded (every AES-GCM
tag checked, every zstd frame whole and of its chunk's length), every batch's CRC and framing,
the offset, time and transaction indexes in ``.indexes`` against a rebuild from the batches,
offsets contiguous across segments and with the local log (``kfs.tools.verify_remote.Tiers``),
and each segment against its ``__remote_log_metadata`` record (``segmentSizeInBytes``,
``endOffset``). A manifest missing or garbled, a chunk index that does not match its object,
a key that does not unwrap: a problem of that segment, one line; the others are still checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from storage.config import LogConfig
from storage.log_files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from storage.remote.aiven import (
    AivenSegment,
    AivenSegmentSource,
    listed_segments,
    main_path,
    metadata_segments,
)
from storage.remote.key_ring import KeyRing, RemoteSegmentError
from storage.remote.metadata import RemoteLogSegmentMetadata
from storage.remote.object_store import ObjectStore, ObjectStoreError
from storage.segment import LogSegment

from .verify import PartitionFiles, Problem, SegmentFiles

_KINDS = frozenset((INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX))  # (all in .indexes)


class AivenPartition(PartitionFiles):
    """The remote segments of partition ``name`` that Aiven's plugin wrote under ``prefix``
    in ``store``: ``live`` (``__remote_log_metadata``'s records of its live segments) or,
    None, the listing of ``directory`` (``<prefix><topic>-<topic id>/<N>``)."""

    contiguous = True
    read_errors = (ObjectStoreError, RemoteSegmentError, OSError)
    torn = "a truncated object, or a corrupt batch size"
    missing = {INDEX_SUFFIX: "missing", TIME_INDEX_SUFFIX: "missing"}  # (never: in .indexes)

    def __init__(self, store: ObjectStore, name: str, prefix: str | None,
                 live: dict[str, RemoteLogSegmentMetadata] | None, directory: str | None,
                 key_ring: KeyRing | None) -> None:
        # (prefix None: the root is under the key prefix, storage.remote.aiven.segment_keys)
        self.store, self.partition, self.prefix = store, name, prefix
        self.live, self.key_ring = live, key_ring
        self._listed = directory
        self.directory = store.describe((prefix or "").rstrip("/"))
        self._segments: dict[str, AivenSegment] = {}
        self._metadata: dict[str, RemoteLogSegmentMetadata] = {}

    def _found(self) -> list[AivenSegment]:
        if self._listed is not None:
            return listed_segments(self.store, self._listed)
        found = metadata_segments(self.store, self.prefix, self.live)
        for m in self.live.values():
            self._metadata[_stem(m)] = m
        return found

    def segments(self) -> list[SegmentFiles]:
        if not self._segments:
            for segment in self._found():
                stem = segment.keys.log.rpartition("/")[2][:-len(LOG_SUFFIX)]
                self._segments[stem] = segment
        return [SegmentFiles(s.base_offset, stem, _KINDS)
                for stem, s in sorted(self._segments.items(), key=lambda kv: kv[1].base_offset)]

    def strays(self) -> Iterator[Problem]:
        return iter(())

    def open_segment(self, segment: SegmentFiles) -> LogSegment:
        found = self._segments[segment.stem]
        source = AivenSegmentSource(self.store, found.keys, self.key_ring, found.size,
                                    found.mtime_ns, found.log_object_size)
        return LogSegment(Path(self.store.path(self.prefix or "")), segment.base, LogConfig(),
                          False, source=source)

    def audit(self, segment: SegmentFiles, scan) -> Iterator[Problem]:
        metadata = self._metadata.get(segment.stem)
        if metadata is None:
            return
        log = segment.name(LOG_SUFFIX)
        if scan.size != metadata.segment_size_in_bytes:
            yield self.problem(log, None, f"{scan.size} bytes through its manifest, where "
                                          "__remote_log_metadata says "
                                          f"{metadata.segment_size_in_bytes} "
                                          "(segmentSizeInBytes)")
        last = scan.last_offset
        if scan.readable and last is not None and last != metadata.end_offset:
            yield self.problem(log, None, f"last offset {last}, where __remote_log_metadata "
                                          f"says {metadata.end_offset} (endOffset)")

    def unreadable(self, file: str, error: BaseException) -> Problem:
        text = " ".join(str(error).split())
        own = f"{self.directory}/{file}"  # (the problem names it already)
        if text.startswith(own):
            text = text[len(own):].lstrip(": ")
        return self.problem(file, None, f"cannot be read: {text}")

    def log_bytes(self) -> int:
        return sum(s.size or s.log_object_size or 0 for s in self._segments.values()) \
            if self._segments or self.segments() else 0


def _stem(m: RemoteLogSegmentMetadata) -> str:
    tp = m.topic_id_partition
    return main_path(tp.topic, tp.topic_id, tp.partition, m.start_offset,
                     m.segment_id.id).rpartition("/")[2]


def aiven_partitions(store: ObjectStore, prefix: str, key_ring: KeyRing | None,
                     live: dict[str, dict[str, RemoteLogSegmentMetadata]] | None,
                     explicit: bool = False) -> dict[str, AivenPartition]:
    """``{"<topic>-<N>": its remote segments}``: those ``live`` names (by
    ``storage.remote.tiered.live_metadata_of``), else the listing's. ``explicit``: the
    store's root was named by hand (``--remote-path``): the backend's root or the URI under
    the key prefix (``storage.remote.aiven.root_prefix``)."""
    from storage.remote.aiven import AivenLogDirectory, root_prefix

    key_prefix = root_prefix(store, prefix) if explicit else prefix
    prefix = key_prefix or ""
    directory = AivenLogDirectory(store, key_prefix, live=live, key_ring=key_ring)
    out = {}
    for name in directory.partition_names():
        found = directory.found(name)
        if isinstance(found, str):
            out[name] = AivenPartition(store, name, prefix, None, found, key_ring)
            out[name].directory = store.describe(found)
            continue
        out[name] = AivenPartition(store, name, key_prefix, dict(found), None, key_ring)
        tp = next(iter(found.values())).topic_id_partition
        out[name].directory = store.describe(f"{prefix}{tp.topic}-{tp.topic_id}/{tp.partition}")
    return out
