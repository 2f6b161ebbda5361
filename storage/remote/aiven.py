"""Kafka's tiered storage as Aiven's RemoteStorageManager writes it (github
Aiven-Open/tiered-storage-for-apache-kafka, ``io.aiven.kafka.tieredstorage.RemoteStorageManager``,
segment format ``kafka``): the plugin used by open-source Kafka clusters that tier to S3, GCS or
Azure. Read-only.

Each remote segment is three objects (``ObjectKeyFactory``)::

    <key.prefix><topic>-<topic id>/<partition>/<20-digit start offset>-<segment id>.<suffix>

* ``.rsm-manifest``: JSON (``SegmentManifestV1``): the chunk index, where each index is in
  ``.indexes``, whether chunks are zstd-compressed, and when encrypted the segment's data key
  (RSA-wrapped, ``storage.remote.key_ring``) and AAD;
* ``.log``: the segment's ``.log`` cut into chunks of ``originalChunkSize`` bytes, each
  transformed on its own (zstd frame, then AES-GCM: IV, ciphertext, tag) and written back to
  back; the chunk index (``fixed``: one transformed size and the last one's; ``variable``: a
  zstd frame of big-endian sizes, ``ChunkSizesBinaryCodec``) is the only way to find them;
* ``.indexes``: the offset, time, producer snapshot, leader epoch and transaction indexes back
  to back (each encrypted on its own when the segment is; never compressed).

A read of a byte range of the ``.log`` fetches the manifest (cached), then only the whole
transformed chunks covering the range (one ranged request per run of chunks not decoded yet),
decrypts and decompresses each on the reading thread, and keeps the decoded chunks in a cache
bounded in bytes: a narrow read never fetches a whole object, and memory does not grow with a
segment's size. Where each segment's objects are and which are live is what
``__remote_log_metadata`` says (with the plugin's custom metadata ``OBJECT_PREFIX`` and
``OBJECT_KEY`` when the broker stored it, as ``KafkaRemoteStorageManager.objectKey`` reads
them); without it, the listing (said in ``notices``).
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
import threading
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path

import zstandard
from pyarrow.fs import FileType

from storage.errors import InvalidTopicError, UnknownTopicOrPartitionError
from storage.log_files import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, filename_prefix
from storage.log_reader import decoded_batch_cache
from storage.segment_source import EMPTY_INDEX, IndexContents, SegmentSource
from storage.topic_partition import parse_partition_dir_name

from .key_ring import KeyRing, KeyRingError, RemoteSegmentError, decrypt
from .metadata import RemoteLogSegmentMetadata
from .object_store import ObjectStore, ObjectStoreError, explained
from .remote_log import RemoteLog
from .tiered import UnsupportedRemoteLayoutError

AIVEN_RSM_CLASS = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
LOG_OBJECT, INDEXES_OBJECT, MANIFEST_OBJECT = ".log", ".indexes", ".rsm-manifest"
SUFFIXES = (LOG_OBJECT, INDEXES_OBJECT, MANIFEST_OBJECT)
_ID_CHARS = 22  # a Kafka Uuid.toString(): base64url, no padding
MAX_CHUNK_SIZES_BYTES = 10 << 20  # TransformedChunksDeserializer refuses a larger frame
MAX_MANIFEST_BYTES = 1 << 20  # a manifest is about 1 KiB; past this it is not one
# the index a LogSegment asks for, by its file's suffix -> the manifest's segmentIndexes key
INDEX_KINDS = {INDEX_SUFFIX: "offset", TIME_INDEX_SUFFIX: "timestamp",
               TXN_INDEX_SUFFIX: "transaction"}
INDEX_NAMES = ("offset", "timestamp", "producerSnapshot", "leaderEpoch", "transaction")

# -- the manifest ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkIndex:
    """Where the chunks of a ``.log`` are (``AbstractChunkIndex``): chunk ``i`` holds the
    original bytes ``[i * original_chunk_size, min((i + 1) * original_chunk_size,
    original_file_size))``; its transformed bytes start at the sum of the transformed sizes
    before it (``transformed``, one per chunk)."""

    original_chunk_size: int
    original_file_size: int
    transformed: tuple[int, ...]

    @property
    def count(self) -> int:
        return len(self.transformed)

    @property
    def transformed_size(self) -> int:
        """The ``.log`` object's length."""
        return sum(self.transformed)

    def chunks(self, position: int, end: int) -> range:
        """The chunks holding the original bytes ``[position, end)``."""
        if end <= position:
            return range(0)
        return range(position // self.original_chunk_size,
                     (min(end, self.original_file_size) - 1) // self.original_chunk_size + 1)

    def original_start(self, i: int) -> int:
        return i * self.original_chunk_size

    def original_length(self, i: int) -> int:
        return min(self.original_chunk_size,
                   self.original_file_size - i * self.original_chunk_size)

    def transformed_start(self, i: int) -> int:
        """Where chunk ``i``'s transformed bytes start in the object (``count``: its end)."""
        return self._starts[i]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", (0, *accumulate(self.transformed)))


@dataclass(frozen=True)
class SegmentManifest:
    """A segment's ``.rsm-manifest`` (``SegmentManifestV1``). ``indexes``: (position, size) of
    each index in ``.indexes`` by the manifest's name (``offset``, ``timestamp``,
    ``producerSnapshot``, ``leaderEpoch``, ``transaction``), None when absent.
    ``data_key``: the manifest's ``"<key pair id>:<base64>"``, None when not encrypted."""

    chunk_index: ChunkIndex
    indexes: dict[str, tuple[int, int] | None]
    compression: bool
    data_key: str | None
    aad: bytes | None

    @property
    def indexes_size(self) -> int:
        """The ``.indexes`` object's length (the last index's end)."""
        return max((p + s for p, s in filter(None, self.indexes.values())), default=0)


def decode_chunk_sizes(data: bytes) -> tuple[int, ...]:
    """The sizes of ``ChunkSizesBinaryCodec`` (big-endian): ``count:int32``; when 1, ``last``;
    when 2 or more, ``base:int32``, ``bytesPerValue:int8`` and ``count - 1`` values of that
    many bytes each added to ``base``, then ``last:int32``. Raises ValueError."""
    (count,), pos = struct.unpack_from(">i", data), 4
    if count < 0:
        raise ValueError(f"a negative chunk count {count}")
    if count == 0:
        sizes: list[int] = []
    elif count == 1:
        sizes = [struct.unpack_from(">i", data, pos)[0]]
        pos += 4
    else:
        base, width = struct.unpack_from(">ib", data, pos)
        pos += 5
        if not 1 <= width <= 4:
            raise ValueError(f"{width} bytes per value")
        sizes = []
        for _ in range(count - 1):
            sizes.append(base + int.from_bytes(data[pos:pos + width], "big"))
            pos += width
        sizes.append(struct.unpack_from(">i", data, pos)[0])
        pos += 4
    if pos != len(data):
        raise ValueError(f"{len(data) - pos} bytes past the {count} chunk sizes")
    return tuple(sizes)


def parse_manifest(data: bytes, where: str) -> SegmentManifest:
    """The manifest ``data`` of the object ``where`` names. Raises RemoteSegmentError (one
    line) for anything that is not a version 1 manifest the plugin writes."""
    try:
        doc = json.loads(data)
        if not isinstance(doc, dict) or doc.get("version") != "1":
            raise ValueError(f"not a version \"1\" manifest (version: {doc.get('version')!r})"
                             if isinstance(doc, dict) else "not a JSON object")
        chunk_index = _chunk_index(doc["chunkIndex"])
        indexes = {}
        for name in INDEX_NAMES:
            entry = doc["segmentIndexes"].get(name)
            indexes[name] = None if entry is None else (_int(entry["position"]),
                                                        _int(entry["size"]))
        encryption = doc.get("encryption")
        data_key = aad = None
        if encryption is not None:
            data_key = str(encryption["dataKey"])
            aad = base64.b64decode(encryption["aad"], validate=True)
        compression = doc["compression"]
        if not isinstance(compression, bool):
            raise ValueError(f"compression is {compression!r}, not true or false")
    except (ValueError, KeyError, TypeError, AttributeError, binascii.Error,
            struct.error, zstandard.ZstdError) as e:
        what = f"no {e}" if isinstance(e, KeyError) else str(e)
        raise RemoteSegmentError(f"{where}: not a manifest of Aiven's tiered storage: "
                                 f"{' '.join(what.split())}") from None
    return SegmentManifest(chunk_index, indexes, compression, data_key, aad)


def _int(value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{value!r} is not a size")
    return value


def _chunk_index(doc: dict) -> ChunkIndex:
    """``fixed`` or ``variable`` (``FixedSizeChunkIndex``, ``VariableSizeChunkIndex``)."""
    chunk, size = _int(doc["originalChunkSize"]), _int(doc["originalFileSize"])
    if chunk == 0:
        raise ValueError("originalChunkSize is 0")
    count = -(-size // chunk)
    if doc["type"] == "fixed":
        every, last = _int(doc["transformedChunkSize"]), _int(doc["finalTransformedChunkSize"])
        transformed = (every,) * (count - 1) + (last,) if count else ()
    elif doc["type"] == "variable":
        frame = base64.b64decode(doc["transformedChunks"], validate=True)
        sizes = zstandard.ZstdDecompressor().decompress(frame,
                                                        max_output_size=MAX_CHUNK_SIZES_BYTES)
        transformed = decode_chunk_sizes(sizes)
        if len(transformed) != count:
            raise ValueError(f"{len(transformed)} chunk sizes for {count} chunks of a "
                             f"{size}-byte segment")
    else:
        raise ValueError(f"chunk index type {doc['type']!r}")
    return ChunkIndex(chunk, size, transformed)


# -- object keys and custom metadata --------------------------------------------------------


@dataclass(frozen=True)
class SegmentKeys:
    """The keys (store paths under the root) of one segment's three objects."""

    log: str
    indexes: str
    manifest: str


def main_path(topic: str, topic_id: str, partition: int, start_offset: int,
              segment_id: str) -> str:
    """``<topic>-<topic id>/<partition>/<20-digit start offset>-<segment id>``
    (``ObjectKeyFactory.mainPath``)."""
    return f"{topic}-{topic_id}/{partition}/{filename_prefix(start_offset)}-{segment_id}"


def custom_metadata_fields(data: bytes | None) -> dict[int, object]:
    """The plugin's custom metadata (``SegmentCustomMetadataSerde``: Kafka tagged fields, a
    varint count, then per field a varint tag, a varint size and its bytes): ``{0:
    REMOTE_SIZE (varlong), 1: OBJECT_PREFIX (str), 2: OBJECT_KEY (str)}`` as present; empty
    for None or bytes that are not such fields."""
    if not data:
        return {}
    try:
        count, pos = _uvarint(data, 0)
        fields: dict[int, object] = {}
        for _ in range(count):
            tag, pos = _uvarint(data, pos)
            size, pos = _uvarint(data, pos)
            raw, pos = data[pos:pos + size], pos + size
            if tag == 0:
                value, _ = _uvarint(raw, 0)
                fields[0] = (value >> 1) ^ -(value & 1)  # zig-zag
            elif tag in (1, 2):
                n, at = _uvarint(raw, 0)  # COMPACT_STRING: its length + 1, then UTF-8
                fields[tag] = raw[at:at + n - 1].decode("utf-8")
        return fields
    except (IndexError, UnicodeDecodeError):
        return {}


def _uvarint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def segment_keys(prefix: str | None, metadata: RemoteLogSegmentMetadata) -> SegmentKeys:
    """Where the segment of ``metadata`` is: ``.log`` and ``.indexes`` under the custom
    metadata's ``OBJECT_PREFIX`` + ``OBJECT_KEY`` when it has them, the manifest always under
    the configured ``prefix`` (``KafkaRemoteStorageManager.objectKey``). ``prefix`` None: the
    store's root is the URI under the prefix (``<topic>-<topic id>/`` at its top), so every key
    is taken without one."""
    tp = metadata.topic_id_partition
    main = main_path(tp.topic, tp.topic_id, tp.partition, metadata.start_offset,
                     metadata.segment_id.id)
    fields = custom_metadata_fields(metadata.custom_metadata)
    data = (f"{fields.get(1, prefix)}{fields.get(2, main)}" if prefix is not None
            else fields.get(2, main))
    prefix = prefix or ""
    return SegmentKeys(data + LOG_OBJECT, data + INDEXES_OBJECT, prefix + main + MANIFEST_OBJECT)


# -- a segment's bytes ----------------------------------------------------------------------


class AivenSegmentSource(SegmentSource):
    """One remote segment of Aiven's layout in ``store`` (``keys``: its objects), read
    through its manifest (``storage.segment_source``'s door). ``size``: the original ``.log``'s
    length when known without a request (``segmentSizeInBytes`` of its metadata), else the
    manifest is read at once for it; ``log_object_size``: the ``.log`` object's length when
    listed (else asked once, on the first read, to check the chunk index against it);
    ``key_ring`` unwraps an encrypted segment's data key. Raises RemoteSegmentError (a manifest
    or chunk that is not the plugin's, a GCM tag that fails), KeyRingError, ObjectStoreError.
    ``owns_store``: closing it closes ``store`` too (a store opened for this one segment)."""

    def __init__(self, store: ObjectStore, keys: SegmentKeys, key_ring: KeyRing | None = None,
                 size: int | None = None, mtime_ns: int | None = None,
                 log_object_size: int | None = None, owns_store: bool = False) -> None:
        self._store, self._keys, self._ring = store, keys, key_ring
        self._owns_store = owns_store
        self._object_size = log_object_size
        self._mtime_ns = mtime_ns
        self._lock = threading.Lock()
        self._manifest: SegmentManifest | None = None
        self._key: bytes | None = None
        self._file = None  # the .log opened, on first read
        self._ranged = None  # the .log read ahead for a bulk reader (read_ahead_until)
        self._until: int | None = None  # where that reader stops, in the object's bytes
        self._size = self._listed_size() if size is None else size

    def _listed_size(self) -> int:
        """The original ``.log``'s length, from the manifest (a listed segment's). When the
        manifest cannot be read, the ``.log`` object's listed length stands in: the partition
        still opens, its other segments still read, and every read of this one fails with
        the manifest's own one line (``manifest()`` raises it again)."""
        try:
            return self.manifest().chunk_index.original_file_size
        except RemoteSegmentError:
            if not self._object_size:
                raise
            return self._object_size

    @property
    def name(self) -> str:
        return self._keys.log

    def describe(self, key: str) -> str:
        return self._store.describe(key[len(self._store.root):].lstrip("/")
                                    if self._store.root else key)

    def log_size(self) -> int:
        return self._size

    def modified_ms(self) -> int:
        return (self._mtime_ns or 0) // 1_000_000

    def manifest(self) -> SegmentManifest:
        """The segment's manifest (fetched once; the store caches it for other readers).
        Raises RemoteSegmentError for a missing or garbled one."""
        if self._manifest is None:
            where = self.describe(self._keys.manifest)
            try:
                data = self._store.read_small_object(self._keys.manifest)
            except ObjectStoreError as e:
                raise RemoteSegmentError(f"{where}: the manifest cannot be read: {e}") from None
            if data is None:
                raise RemoteSegmentError(f"{where}: no manifest: the segment cannot be read"
                                         f"{other_layout(self._store)}")
            if len(data) > MAX_MANIFEST_BYTES:
                raise RemoteSegmentError(f"{where}: {len(data)} bytes, not a manifest")
            self._manifest = parse_manifest(data, where)
        return self._manifest

    def _data_key(self, manifest: SegmentManifest) -> bytes | None:
        if manifest.data_key is None:
            return None
        if self._key is None:
            where = self.describe(self._keys.manifest)
            if self._ring is None:
                raise KeyRingError(f"{where}: the segment is encrypted and no key ring is "
                                   "configured (rsm.config.encryption.key.pairs)")
            self._key = self._ring.data_key(manifest.data_key, where)
        return self._key

    def _log_object(self):
        """The ``.log`` opened (once; its length, asked of the store by opening it, checked
        against the chunk index)."""
        index = self.manifest().chunk_index
        if self._file is None:
            if index.original_file_size != self._size:
                raise RemoteSegmentError(
                    f"{self.describe(self._keys.manifest)}: the chunk index is of a "
                    f"{index.original_file_size}-byte segment, the metadata says {self._size}")
            try:
                f = self._store.fs.open_input_file(self._keys.log)
                size = f.size() if self._object_size is None else self._object_size
            except FileNotFoundError:
                raise RemoteSegmentError(f"{self.describe(self._keys.log)}: no such object "
                                         "(the segment cannot be read)") from None
            except (OSError, ValueError) as e:
                raise ObjectStoreError(explained(f"{self.describe(self._keys.log)}: {e}")) \
                    from None
            if size != index.transformed_size:
                raise RemoteSegmentError(
                    f"{self.describe(self._keys.log)}: {size} bytes, but its chunk index says "
                    f"{index.count} chunks of {index.transformed_size} bytes")
            self._file = f
        return self._file

    def _fetch(self, start: int, end: int) -> bytes:
        """The ``.log`` object's bytes [start, end): read ahead by the store's ranged reads
        while a bulk reader said how far it reads (:meth:`read_ahead_until`), else one
        request for them alone (a narrow read fetches its chunks and nothing more)."""
        with self._lock:
            f = self._log_object()
            ranged = self._ranged if self._until is not None and start < self._until else None
        if ranged is not None:
            return ranged.read_at(end - start, start)
        try:
            return f.read_at(end - start, start)
        except (OSError, ValueError) as e:
            raise ObjectStoreError(explained(f"{self.describe(self._keys.log)} at byte {start}: "
                                             f"{e}")) from None

    def _chunk_bytes(self, first: int, last: int) -> list[bytes]:
        """Chunks ``first..last`` decoded, from the cache or fetched (each run of missing
        chunks in one ranged request)."""
        manifest = self.manifest()
        index = manifest.chunk_index
        decoded, key = self._store.decoded, self._keys.log  # (the store keeps them, bounded)
        out: list[bytes | None] = [decoded.get((key, i)) for i in range(first, last + 1)]
        i = 0
        while i < len(out):
            if out[i] is not None:
                i += 1
                continue
            j = i
            while j + 1 < len(out) and out[j + 1] is None:
                j += 1
            start = index.transformed_start(first + i)
            end = index.transformed_start(first + j + 1)
            raw = self._fetch(start, end)
            if len(raw) < end - start:
                raise RemoteSegmentError(f"{self.describe(self._keys.log)}: {len(raw)} bytes at "
                                         f"byte {start} where {end - start} were listed")
            view = memoryview(raw)
            for n in range(i, j + 1):
                c = first + n
                at = index.transformed_start(c) - start
                chunk = self._decode(manifest, c, view[at:at + index.transformed[c]])
                decoded.put((key, c), chunk)
                out[n] = chunk
            i = j + 1
        return out

    def _decode(self, manifest: SegmentManifest, c: int, piece) -> bytes:
        """Chunk ``c``'s transformed bytes undone: decrypted, then decompressed
        (``DecryptionChunkEnumeration``, ``DecompressionChunkEnumeration``)."""
        index = manifest.chunk_index
        where = f"{self.describe(self._keys.log)} chunk {c} of {index.count}"
        data = bytes(piece)
        key = self._data_key(manifest)
        if key is not None:
            data = decrypt(key, manifest.aad, data, where)
        want = index.original_length(c)
        if manifest.compression:
            try:
                data = zstandard.ZstdDecompressor().decompress(data, max_output_size=want)
            except zstandard.ZstdError as e:
                raise RemoteSegmentError(f"{where}: not a whole zstd frame ({e})") from None
        if len(data) != want:
            raise RemoteSegmentError(f"{where}: {len(data)} bytes where the chunk index says "
                                     f"{want} (truncated)")
        return data

    def _read(self, position: int, size: int) -> list[memoryview]:
        index = self.manifest().chunk_index
        end = min(position + size, self._size)
        chunks = index.chunks(position, end)
        if not chunks:
            return []
        parts = []
        for c, data in zip(chunks, self._chunk_bytes(chunks.start, chunks.stop - 1)):
            at = index.original_start(c)
            parts.append(memoryview(data)[max(position - at, 0):min(end - at, len(data))])
        return parts

    def read_at(self, position: int, size: int, nowait: bool = False) -> bytes:
        if nowait:
            import errno

            raise BlockingIOError(errno.EAGAIN, f"{self.name}: a request to the object store")
        parts = self._read(position, size)
        return bytes(parts[0]) if len(parts) == 1 else b"".join(parts)

    def read_into(self, view: memoryview, position: int) -> memoryview:
        filled = 0
        for part in self._read(position, len(view)):
            view[filled:filled + len(part)] = part
            filled += len(part)
        return view[:filled]

    def read_ahead_until(self, end: int | None) -> None:
        """A bulk reader reads on to the original byte ``end`` (None: it does not say): the
        transformed chunks up to the one holding it are read ahead, by the store's ranged
        reads (``RangedObject``); without a hint, each read fetches its chunks alone."""
        index = self.manifest().chunk_index
        with self._lock:
            f = self._log_object()
            if end is None:
                self._until = None
                return
            chunks = index.chunks(0, min(end, self._size))
            self._until = index.transformed_start(chunks.stop) if chunks else 0
            if self._ranged is None:
                self._ranged = self._store.open(self._keys.log, f.size(), self._mtime_ns)
            self._ranged.read_ahead_until(self._until)

    def read_index(self, path: Path) -> IndexContents:
        kind = INDEX_KINDS.get(Path(path).suffix)
        return EMPTY_INDEX if kind is None else self.index_bytes(kind)

    def index_bytes(self, kind: str) -> IndexContents:
        """The index ``kind`` (a manifest name: ``offset``, ``timestamp``, ``transaction``,
        ``producerSnapshot``, ``leaderEpoch``) from ``.indexes``, decrypted; empty when the
        manifest has none. The ``.indexes`` object is fetched whole once and kept in the
        store's bounded cache (the offset, time and transaction indexes a reader needs are
        nearly all of it)."""
        manifest = self.manifest()
        where = manifest.indexes.get(kind)
        if where is None or where[1] == 0:
            return EMPTY_INDEX
        name = f"{self.describe(self._keys.indexes)} ({kind} index)"
        data = self._store.read_small_object(self._keys.indexes)
        if data is None:
            raise RemoteSegmentError(f"{name}: no such object")
        if len(data) != manifest.indexes_size:
            raise RemoteSegmentError(f"{self.describe(self._keys.indexes)}: {len(data)} bytes, "
                                     f"but the manifest's indexes end at byte "
                                     f"{manifest.indexes_size}")
        position, size = where
        piece = data[position:position + size]
        key = self._data_key(manifest)
        if key is not None:
            piece = decrypt(key, manifest.aad, piece, name)
        return IndexContents(piece, len(piece))

    def close(self) -> None:
        if self._ranged is not None:
            self._ranged.close()
            self._ranged = None
        self._file = None  # (pyarrow closes it with its last reference)
        if self._owns_store:
            self._store.close()


def open_aiven_segment(uri: str, *, endpoint: str | None = None, region: str | None = None,
                       key_ring: KeyRing | None = None) -> AivenSegmentSource:
    """The segment whose ``.log`` object is ``uri`` (``…/<start offset>-<segment id>.log``,
    its ``.indexes`` and ``.rsm-manifest`` beside it), read through its manifest with a
    store of its own (``kfs dump`` of one object). Raises RemoteSegmentError (no manifest, a
    garbled one), ObjectStoreError."""
    head, _, name = uri.partition("?")[0].rpartition("/")
    query = uri.partition("?")[2]
    store = ObjectStore.from_uri(f"{head}?{query}" if query else head, endpoint=endpoint,
                                 region=region)
    stem = name[:-len(LOG_OBJECT)]
    keys = SegmentKeys(*(store.path(stem + suffix) for suffix in SUFFIXES))
    try:
        return AivenSegmentSource(store, keys, key_ring, owns_store=True)
    except BaseException:
        store.close()
        raise


def root_prefix(store: ObjectStore, prefix: str) -> str | None:
    """The key prefix of objects in ``store`` when its root was named by hand (``remote.path``):
    ``prefix`` when the root holds it (the backend's root), else None (the root is the URI
    under the prefix, ``<topic>-<topic id>/`` at its top). One look."""
    if not prefix.strip("/"):
        return prefix
    info = store.fs.get_file_info(store.path(prefix.rstrip("/")))
    return prefix if info.type == FileType.Directory else None


def other_layout(store: ObjectStore) -> str:
    """What to add to an error when ``store``'s root is in LocalTieredStorage's layout
    (``kafka-tiered-storage/`` at its top) rather than Aiven's, which the broker's properties
    configured; empty otherwise (one listing of the root, made on a failure only)."""
    from storage.remote import TIERED_ROOT

    try:
        top = store.list()
    except ObjectStoreError:
        return ""
    if any(i.base_name == TIERED_ROOT and i.type == FileType.Directory for i in top):
        return (f" ({store.describe()} holds {TIERED_ROOT}/: LocalTieredStorage's layout, not "
                "Aiven's, which remote.log.storage.manager.class.name configures)")
    return ""


# -- a partition's segments and the directory --------------------------------------------------


@dataclass(frozen=True)
class AivenSegment:
    """One live remote segment: where its objects are, its start offset, the original
    ``.log``'s length and the offset after its last when known (its metadata's)."""

    base_offset: int
    keys: SegmentKeys
    size: int | None = None
    next_offset: int | None = None
    mtime_ns: int | None = None
    log_object_size: int | None = None


def metadata_segments(store: ObjectStore, prefix: str | None,
                      live: Mapping[str, RemoteLogSegmentMetadata]) -> list[AivenSegment]:
    """The segments ``live`` (``__remote_log_metadata`` records of one partition) names in
    ``store``, by start offset, with no request; of two live ones with one start offset the
    one ending last. ``prefix``: as :func:`segment_keys` takes it."""
    by_base: dict[int, AivenSegment] = {}
    for m in sorted(live.values(), key=lambda m: (m.start_offset, m.end_offset)):
        keys = segment_keys(prefix, m)
        by_base[m.start_offset] = AivenSegment(
            m.start_offset, SegmentKeys(*(store.path(k) for k in (keys.log, keys.indexes,
                                                                  keys.manifest))),
            m.segment_size_in_bytes, m.end_offset + 1, m.event_timestamp_ms * 1_000_000)
    return [by_base[b] for b in sorted(by_base)]


def listed_segments(store: ObjectStore, directory: str) -> list[AivenSegment]:
    """The segments listed in the partition ``directory`` (``<prefix><topic>-<topic
    id>/<partition>``) that have all three objects (a copy being made or deleted may lack
    some); of two with one start offset (a copy retried) the newest ``.log``."""
    files: dict[str, dict[str, object]] = defaultdict(dict)
    for info in store.list(directory):
        for suffix in SUFFIXES:
            if info.base_name.endswith(suffix):
                files[info.base_name[:-len(suffix)]][suffix] = info
    by_base: dict[int, AivenSegment] = {}
    for stem, kinds in files.items():
        base, sep, segment_id = stem.partition("-")
        if not (len(base) == 20 and base.isdigit() and sep and _is_id(segment_id)
                and len(kinds) == len(SUFFIXES)):
            continue
        logfile = kinds[LOG_OBJECT]
        path = f"{directory}/{stem}"
        segment = AivenSegment(int(base), SegmentKeys(*(store.path(path + s) for s in SUFFIXES)),
                               mtime_ns=logfile.mtime_ns, log_object_size=logfile.size)
        old = by_base.get(segment.base_offset)
        if old is None or (logfile.mtime_ns or 0) > (old.mtime_ns or 0):
            by_base[segment.base_offset] = segment
    return [by_base[b] for b in sorted(by_base)]


def _is_id(text: str) -> bool:
    return len(text) == _ID_CHARS and all(c.isalnum() or c in "-_" for c in text)


class AivenLogDirectory:
    """The remote tier Aiven's plugin wrote under ``prefix`` (``rsm.config.key.prefix``; None:
    ``store``'s root is the URI under it, ``<topic>-<topic id>/`` at its top) in ``store``, its
    partitions served as read-only ``RemoteLog`` (the surface of a read-only ``LogManager``, as
    ``TieredLogDirectory`` serves LocalTieredStorage's). ``live``: the live
    segments' ``__remote_log_metadata`` records by LocalTieredStorage directory name and stem
    (``storage.remote.tiered.live_metadata_of``; of a topic recreated, its current id last),
    None: the listing (said in ``notices``). ``key_ring`` unwraps encrypted segments' data
    keys. Raises ObjectStoreError."""

    def __init__(self, store: ObjectStore, prefix: str | None = "", partitions=None,
                 live: Mapping[str, Mapping[str, RemoteLogSegmentMetadata]] | None = None,
                 key_ring: KeyRing | None = None) -> None:
        # (None: the store's root is under the prefix already, its keys taken without one)
        self._key_prefix = prefix
        prefix = prefix or ""
        self.store, self.prefix, self.key_ring = store, prefix, key_ring
        self._live = live
        found: dict[str, object] = {}
        if live is not None:
            for segments in live.values():
                if segments:
                    tp = next(iter(segments.values())).topic_id_partition
                    found[tp.name] = segments
        else:
            found = self._listed_partitions()
            hint = other_layout(store) if not found else ""
            if hint:
                raise UnsupportedRemoteLayoutError(
                    f"no segment of Aiven's tiered storage under {store.describe(prefix)}{hint}")
        self._found = {name: v for name, v in found.items()
                       if partitions is None or partitions(*parse_partition_dir_name(name))}
        self._logs: dict[str, RemoteLog] = {}
        self._decoded_batches = decoded_batch_cache()  # of all its partitions' readers
        self.notices: list[str] = [] if live is not None else [
            f"no __remote_log_metadata at hand: the remote segments of "
            f"{store.describe(prefix.rstrip('/'))} are its listing's, which may hold a segment "
            "being copied or deleted"]

    def _listed_partitions(self) -> dict[str, str]:
        """``{"<topic>-<N>": its directory}`` of the listing (a topic listed under two ids:
        the directory listed last)."""
        out = {}
        top = self.prefix.rstrip("/")
        for info in self.store.list(*([top] if top else [])):
            if info.type != FileType.Directory:
                continue
            folder = info.base_name
            topic, topic_id = folder[:-_ID_CHARS - 1], folder[-_ID_CHARS:]
            if folder[-_ID_CHARS - 1:-_ID_CHARS] != "-" or not _is_id(topic_id):
                continue
            for part in self.store.list(*([top] if top else []), folder):
                if part.type == FileType.Directory and part.base_name.isdigit():
                    name = f"{topic}-{int(part.base_name)}"
                    try:
                        parse_partition_dir_name(name)
                    except InvalidTopicError:
                        continue
                    out[name] = "/".join([*([top] if top else []), folder, part.base_name])
        return out

    def partition_names(self) -> list[str]:
        return sorted(self._found)

    def found(self, name: str) -> str | Mapping[str, RemoteLogSegmentMetadata]:
        """Where the segments of partition ``name`` are found: its live segments'
        ``__remote_log_metadata`` records by stem, or (no metadata at hand) the directory
        listed, ``<prefix><topic>-<topic id>/<N>``."""
        return self._found[name]

    def get(self, name: str) -> RemoteLog:
        if name not in self._logs:
            if name not in self._found:
                raise UnknownTopicOrPartitionError(
                    f"{name} has no remote segments in {self.store.describe(self.prefix)}")
            found = self._found[name]
            segments = (listed_segments(self.store, found) if isinstance(found, str)
                        else metadata_segments(self.store, self._key_prefix, found))
            first = segments[0].base_offset if segments else 0
            directory = tuple(filter(None, self.prefix.rstrip("/").split("/")))
            self._logs[name] = RemoteLog(self.store, name, log_start_offset=first,
                                         segments=segments, directory=(*directory, name),
                                         make_source=self._source,
                                         decoded_batches=self._decoded_batches)
        return self._logs[name]

    def _source(self, segment: AivenSegment) -> AivenSegmentSource:
        return AivenSegmentSource(self.store, segment.keys, self.key_ring, segment.size,
                                  segment.mtime_ns, segment.log_object_size)

    def catch_up(self, name: str) -> RemoteLog:
        """The partition ``name``: the segments found when it was opened (objects are
        written once)."""
        return self.get(name)

    def catch_up_partitions(self) -> bool:
        return False

    def close(self) -> None:
        for remote in self._logs.values():
            remote.close()
        self._logs.clear()
        self.store.close()

