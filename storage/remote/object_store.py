"""A Kafka log directory in an object store: ``s3://bucket/prefix``, ``gs://…``, ``hdfs://…``,
``file://…`` or a plain path, through ``pyarrow.fs`` (``FileSystem.from_uri``), e.g. a broker's
log directory copied into a bucket as it is (``aws s3 sync``).

Credentials, region and endpoint come from the library's standard chain (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``~/.aws/…``, instance
metadata); ``endpoint`` and ``region`` override them. Nothing here prints or logs a secret.
Reads fetch only what they ask for: ranged reads of a ``.log``; index objects whole, through a
cache bounded in bytes. A ``.log`` object, once opened (pyarrow's S3 file system asks the store
its size then), stays open for the next reader of it, as objects are written once.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.parse
from collections import OrderedDict
from dataclasses import dataclass
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa
import pyarrow.fs as pafs

from storage.errors import KafkaStorageError
from storage.log_files import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX
from storage.record_cache import RecordCache

from .uri import redact, scrub

OPEN_OBJECTS = 128  # .log objects a store keeps open (ObjectStore.open), the least recently used go
INDEX_CACHE_BYTES = 64 << 20  # index objects kept, in bytes (a 1 GiB segment's are ~2.5 MiB)
DECODED_CACHE_BYTES = 32 << 20  # decoded pieces of objects kept (Aiven's chunks), in bytes
SMALL_OBJECT_BYTES = 64 << 20  # an index object larger than this is not a Kafka index
RANGE_BYTES = 8 << 20  # one ranged request of a bulk read
READ_AHEAD = 3  # ranges requested ahead of a bulk reader, at once
BULK_READ = 256 << 10  # a read this large is a bulk reader's (read ahead); smaller ones are not


INDEX_KINDS = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True)
class SegmentObjects:
    """Where one segment's objects are: ``log`` the ``.log``'s entry (path and size; mtime
    when listed), ``indexes`` the entry of each index object there is, by kind (``.index``,
    ``.timeindex``, ``.txnindex``: a missing one reads as empty, as Kafka's), its size and
    mtime known when listed. ``next_offset``: the offset after the segment's last one when
    known without reading it (``endOffset`` + 1 of its ``__remote_log_metadata`` record), else
    None (read from its last batch)."""

    base_offset: int
    log: pafs.FileInfo
    indexes: dict[str, pafs.FileInfo]
    next_offset: int | None = None


class ObjectStoreError(KafkaStorageError):
    """The object store refused or failed a request (the store's own words follow)."""


class ObjectStore:
    """The log directory at ``root`` (a path without scheme) of ``fs``, a
    ``pyarrow.fs.FileSystem``. Thread-safe."""

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str,
                 index_cache_bytes: int = INDEX_CACHE_BYTES, range_bytes: int = RANGE_BYTES,
                 read_ahead: int = READ_AHEAD) -> None:
        """``range_bytes`` and ``read_ahead``: a bulk reader's ranged requests, their size and
        how many are in flight ahead of it (memory: about ``(read_ahead + 1) * range_bytes`` per
        bulk reader)."""
        self.fs, self.root, self.uri = fs, root.rstrip("/"), uri
        self._cache = RecordCache(1 << 20, index_cache_bytes, len)  # index objects, by bytes
        # pieces of objects a layout decodes (Aiven's chunks: decrypted, decompressed), by
        # (object, piece), so that the next reader of the store does not fetch them again
        self.decoded = RecordCache(1 << 16, DECODED_CACHE_BYTES, len)
        self._lock = threading.Lock()
        self.range_bytes, self.read_ahead = range_bytes, read_ahead
        self._pool: ThreadPoolExecutor | None = None
        self._opened: OrderedDict[tuple, object] = OrderedDict()  # open(), by (path, size, mtime)
        self.pooled = False  # kept by a StorePool (shared): close keeps it going
        self._root_checked = False

    @classmethod
    def from_uri(cls, uri: str, *, endpoint: str | None = None,
                 region: str | None = None) -> ObjectStore:
        """The store ``uri`` names. ``endpoint`` (``http://host:port``) and ``region`` override
        an S3 store's from the environment. Raises ObjectStoreError for a URI pyarrow cannot
        open (an unknown scheme, a missing bucket's region lookup failing)."""
        if uri.startswith("s3://"):
            _skip_response_checksums()
        try:
            fs, root = _filesystem(_with_store_options(uri, endpoint, region))
        except (OSError, ValueError, TypeError) as e:
            raise ObjectStoreError(explained(redact(uri), scrub(e, uri))) from None
        return cls(fs, root, uri)

    @staticmethod
    def shared(uri: str, *, endpoint: str | None = None,
               region: str | None = None) -> ObjectStore:
        """The process's store for ``uri`` (:meth:`from_uri`'s), kept in the process's
        ``storage.remote.store_pool.StorePool`` (the ``SHARED_STORES`` last used): its
        connections and cached index objects serve every later reader in this process, e.g.
        the next Spark tasks a reused Python worker runs. Safe to share because what it keeps
        never goes stale: cached objects are keyed by their listing entry's size and mtime, or
        are written once (LocalTieredStorage's objects are named by segment id: a copy retried
        gets another), and listings are not kept. Its :meth:`close` leaves it open for the
        next reader. Raises as :meth:`from_uri`."""
        from .store_pool import PROCESS_POOL

        return PROCESS_POOL.store(uri, endpoint=endpoint, region=region)

    def path(self, *names: str) -> str:
        """The store path of ``names`` under the root."""
        return "/".join([self.root, *names]) if self.root else "/".join(names)

    def list(self, *names: str) -> list[pafs.FileInfo]:
        """The entries directly under ``names`` (none for a missing directory). Raises
        ObjectStoreError (access denied, an unknown bucket, the store unreachable)."""
        selector = pafs.FileSelector(self.path(*names), allow_not_found=True)
        try:
            return self.fs.get_file_info(selector)
        except (OSError, ValueError) as e:
            raise ObjectStoreError(explained(f"listing {self.describe(*names)}", e,
                                             self.describe())) from None

    def root_info(self) -> pafs.FileInfo:
        """The root's listing entry (type NotFound when there is none). Raises
        ObjectStoreError when the store refuses (access denied, unreachable)."""
        try:
            return self.fs.get_file_info(self.root)
        except (OSError, ValueError) as e:
            raise ObjectStoreError(explained(self.describe(), e)) from None

    def check_root(self) -> None:
        """ObjectStoreError unless the root is there (an unknown bucket, a mistyped prefix,
        access denied)."""
        if self.root_info().type == pafs.FileType.NotFound:
            raise ObjectStoreError(f"{self.describe()}: no such bucket or directory")

    def check_root_once(self) -> None:
        """:meth:`check_root`, once in this store's life (a shared store serves many readers:
        a wrong bucket fails the first one that opens it, before it plans anything)."""
        if not self._root_checked:
            self.check_root()
            self._root_checked = True

    def describe(self, *names: str) -> str:
        """How messages name ``names`` of the store (its URI, without credentials)."""
        return "/".join([redact(self.uri).rstrip("/"), *names])

    def open(self, path: str, size: int, mtime_ns: int | None = None) -> RangedObject:
        """The object ``path`` of ``size`` bytes (``mtime_ns``: its listing's, when listed) for
        ranged reads. The store keeps the file it opens (the ``OPEN_OBJECTS`` last used; a
        request for its size, HEAD on S3, made once) for the next reader of the same object:
        safe as objects are written once, and one replaced in a synced log directory is
        listed with another size or mtime, so it is opened again. Raises ObjectStoreError."""
        key = (path, size, mtime_ns)
        with self._lock:
            f = self._opened.get(key)
            if f is not None:
                self._opened.move_to_end(key)
        if f is None:
            try:
                f = self.fs.open_input_file(path)
            except (OSError, ValueError) as e:
                raise ObjectStoreError(explained(path, e, self.describe())) from None
            with self._lock:
                f = self._opened.setdefault(key, f)
                while len(self._opened) > OPEN_OBJECTS:
                    self._opened.popitem(last=False)  # (closed when its last reader is done)
        return RangedObject(self, f, path, size)

    def close(self) -> None:
        """Stop the fetch threads (after the readers are closed); a pooled store's stay for
        the next reader (idle threads, stopped at exit or when its pool lets it go)."""
        if not self.pooled:
            self.stop()

    def stop(self) -> None:
        """Stop the fetch threads and drop the opened objects, pooled or not (a reader still
        holding the store starts the threads again)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._opened.clear()  # (pyarrow closes a file when its last reference goes)
        if pool is not None:
            pool.shutdown(cancel_futures=True)

    def submit(self, fn, *args) -> Future:
        """Run ``fn(*args)`` on the store's fetch threads (``read_ahead`` of them)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max(self.read_ahead, 1),
                                                thread_name_prefix="kfs-fetch")
        return self._pool.submit(fn, *args)

    def read_small_object(self, target: str | pafs.FileInfo) -> bytes | None:
        """The whole object ``target`` (an index object: its path, or its entry), from the
        cache when it is there; None when there is no such object. An entry is cached under
        its size and mtime, so an object replaced since (a log directory synced again) is
        read again (one listed as 0 bytes is not requested); a path alone is cached as
        written once (LocalTieredStorage's objects: named by segment id). Raises
        ObjectStoreError."""
        info = target if isinstance(target, pafs.FileInfo) else None
        path = target if info is None else info.path
        size = None if info is None or info.size is None or info.size < 0 else info.size
        key = (path, size, None if info is None else info.mtime_ns)
        data = self._cache.get(key)
        if data is not None:
            return data
        if size is not None and size > SMALL_OBJECT_BYTES:
            raise ObjectStoreError(f"{path}: {size} bytes, not an index object")
        data = b"" if size == 0 else self.read_object(path, SMALL_OBJECT_BYTES)
        if data is not None:
            self._cache.put(key, data)
        return data

    def read_object(self, path: str, limit: int | None = None) -> bytes | None:
        """The whole object ``path``, never cached (a checkpoint that changes); None when
        there is no such object. Raises ObjectStoreError, also for an object larger than
        ``limit`` bytes."""
        try:
            with self.fs.open_input_file(path) as f:
                if limit is not None and f.size() > limit:
                    raise ObjectStoreError(f"{path}: {f.size()} bytes, not an index object")
                return f.readall()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ObjectStoreError(explained(path, e, self.describe())) from None


# What S3 (and S3-compatible servers) answer to credentials they refuse, whichever call met it
_REFUSED_CREDENTIALS = ("ACCESS_DENIED", "SIGNATURE_DOES_NOT_MATCH", "INVALID_ACCESS_KEY_ID",
                        "AccessDenied", "SignatureDoesNotMatch", "InvalidAccessKeyId")
# How pyarrow's S3 errors begin: the bucket and key again, which ``where`` names already
_PYARROW_WHERE = re.compile(r"^When [a-z ]+ (?:key '[^']*' in bucket|bucket) '[^']*': ")


REFUSED_CREDENTIALS = ("the store refused the credentials (access denied): check "
                       "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, ~/.aws/ or the "
                       "instance's role, and that they may read it")


def explained(where: str, error: BaseException | str, store: str | None = None) -> str:
    """``where: error`` on one line. A refusal of the credentials is one line whichever call
    met it (a listing's SIGNATURE_DOES_NOT_MATCH, a HEAD's bodiless ACCESS_DENIED, a GET's):
    ``<store>: `` :data:`REFUSED_CREDENTIALS`, naming the store's URI (``store``, else
    ``where``), so every front end (mount, Spark, verify, dump) says it in the same words."""
    text = " ".join(str(error).split())
    if any(marker in text for marker in _REFUSED_CREDENTIALS):
        return f"{store or where}: {REFUSED_CREDENTIALS}"
    return f"{where}: {_PYARROW_WHERE.sub('', text)}"


def _with_store_options(uri: str, endpoint: str | None, region: str | None) -> str:
    """``uri`` with ``endpoint`` (``http[s]://host:port``; S3 and GCS) and ``region`` (S3) in
    its query string, as pyarrow's ``FileSystem.from_uri`` takes them (``endpoint_override``,
    ``scheme``, ``region``), over what the URI or the environment says; other schemes as
    given."""
    s3, gcs = uri.startswith("s3://"), uri.startswith("gs://")
    if not (s3 and (endpoint or region) or gcs and endpoint):
        return uri
    head, _, query = uri.partition("?")
    options = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    if region and s3:
        options["region"] = region
    if endpoint:
        scheme, _, host = endpoint.rpartition("://")
        options.update(endpoint_override=host or endpoint, scheme=scheme or "https")
    return f"{head}?{urllib.parse.urlencode(options)}"


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """pyarrow's file system and path for ``uri`` (``FileSystem.from_uri``), and for a
    ``gs://`` URI with ``anonymous=true`` in its query (which ``from_uri`` does not take) a
    ``GcsFileSystem`` that looks up no credentials, with the URI's endpoint and scheme: Aiven's
    GCS backend without credentials, as the plugin is pointed at a GCS emulator."""
    head, _, query = uri.partition("?")
    options = dict(urllib.parse.parse_qsl(query))
    if not head.startswith("gs://") or options.pop("anonymous", "false").lower() != "true":
        return pafs.FileSystem.from_uri(uri)
    unknown = set(options) - {"endpoint_override", "scheme"}
    if unknown:
        raise ValueError(f"unexpected query parameter {sorted(unknown)[0]!r} beside anonymous")
    return pafs.GcsFileSystem(anonymous=True, **options), head[len("gs://"):].rstrip("/")


def _skip_response_checksums() -> None:
    """Unless the environment says otherwise, the AWS SDK checks a response's checksum only
    where the operation requires one (``AWS_RESPONSE_CHECKSUM_VALIDATION=WHEN_REQUIRED``; read
    when a client is made): by default it runs a checksum over every GET's body, about 0.4 s
    of CPU per GB read (measured against S3Proxy), which a ranged read of a part of an object
    mostly has no stored checksum to compare with, and a ``.log``'s bytes are checked anyway:
    every batch read is checked against its own CRC-32C, as a Kafka consumer checks it."""
    os.environ.setdefault("AWS_RESPONSE_CHECKSUM_VALIDATION", "WHEN_REQUIRED")


def object_at(uri: str, *, endpoint: str | None = None, region: str | None = None
              ) -> tuple[ObjectStore, pafs.FileInfo]:
    """A store of its own (to close) holding the object ``uri``, and the object's listing
    entry. Raises FileNotFoundError when there is no such object, IsADirectoryError for a
    directory, ObjectStoreError when the store refuses."""
    store = ObjectStore.from_uri(uri, endpoint=endpoint, region=region)
    info = store.root_info()
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{redact(uri)}: no such object")
    if info.type == pafs.FileType.Directory:
        raise IsADirectoryError(f"{redact(uri)}: a directory, not an object")
    return store, info


def _view(buffer: pa.Buffer) -> memoryview:
    """``buffer``'s bytes as unsigned bytes, what a bytearray's view takes (a Buffer's own
    view is of signed chars)."""
    return memoryview(buffer).cast("B")


class RangedObject:
    """One object read with ranged requests. A small read is one request for its bytes. A bulk
    reader's reads (``BULK_READ`` bytes or more, e.g. a segment read a MiB at a time) read
    ahead as the kernel reads a file ahead: each read that follows the last one doubles the
    window of bytes requested ahead of it, up to ``store.read_ahead`` requests of
    ``store.range_bytes``, all in flight at once on the store's fetch threads; a read elsewhere
    starts over with none. A narrow read thus fetches about what it reads, a full read keeps a
    few large requests in flight, and the bytes held stay bounded. A reader that says how far
    it reads (:meth:`read_ahead_until`, e.g. a scan of an offset range) gets the whole window
    from its first read on, and nothing requested past where it stops. A small read of bytes
    read ahead is served from them. Raises ObjectStoreError."""

    def __init__(self, store: ObjectStore, f, path: str, size: int) -> None:
        self._store, self._f, self._path, self._size = store, f, path, size
        # (start, end, its bytes) fetched or in flight, contiguous, in order
        self._ranges: list[tuple[int, int, Future]] = []
        self._last, self._next = -1, -1  # the last bulk read's bytes: where the next follows on
        self._window = 0  # bytes to keep requested ahead of it
        self._until: int | None = None  # where the bulk reader said it stops (None: unsaid)
        self._lock = threading.Lock()

    def read_ahead_until(self, end: int | None) -> None:
        """The next bulk reads go on to ``end`` and no further (None: the reader does not
        know): read ahead up to ``end`` at once, never past it."""
        with self._lock:
            self._until = end

    def read_at(self, nbytes: int, position: int) -> bytes:
        """``nbytes`` from ``position`` (fewer at the object's end)."""
        parts = self._parts(nbytes, position)
        if isinstance(parts, pa.Buffer):
            return parts.to_pybytes()
        return b"".join(parts)

    def read_into(self, view: memoryview, position: int) -> memoryview:
        """Up to ``len(view)`` bytes from ``position`` copied into ``view`` once (no bytes
        object made on the way); the part of ``view`` filled."""
        parts = self._parts(len(view), position)
        filled = 0
        for part in [_view(parts)] if isinstance(parts, pa.Buffer) else parts:
            view[filled:filled + len(part)] = part
            filled += len(part)
        return view[:filled]

    def _parts(self, nbytes: int, position: int):
        """[position, position + nbytes) as a Buffer fetched for it alone, or as views of the
        ranges read ahead, in order."""
        nbytes = max(min(nbytes, self._size - position), 0)
        end = position + nbytes
        with self._lock:
            ahead = self._ranges and self._ranges[0][0] <= position and end <= self._ranges[-1][1]
            if nbytes < BULK_READ and not ahead:
                parts = None  # a small read outside what was read ahead: its bytes alone
            else:
                if nbytes >= BULK_READ:
                    self._follow(position, end)
                parts = [(start, stop, future) for start, stop, future in self._ranges
                         if start < end and stop > position]
        if parts is None:
            return self._fetch(position, nbytes)
        return [_view(future.result())[max(position - start, 0):min(end, stop) - start]
                for start, stop, future in parts]

    def _follow(self, position: int, end: int) -> None:
        """The ranges covering [position, end) and the window ahead of it (lock held)."""
        # (a block reader's next read starts at the last whole batch it got: within this one)
        sequential = self._last <= position <= self._next
        self._last, self._next = position, end
        limit = self._store.range_bytes * max(self._store.read_ahead, 1)
        until = self._size if self._until is None else max(min(self._until, self._size), end)
        if self._until is not None and position < self._until:  # a scan to a known end
            self._window = limit
        else:
            self._window = min(max(2 * self._window, end - position), limit) if sequential else 0
        kept = [r for r in self._ranges if r[1] > position]
        if not kept or kept[0][0] > position:  # not read ahead here: start over
            for _, _, future in self._ranges:
                future.cancel()
            kept = [(position, end, self._store.submit(self._fetch, position, end - position))]
        else:
            for _, _, future in self._ranges[:len(self._ranges) - len(kept)]:
                future.cancel()  # behind the reader: not read again
        self._ranges = kept
        tail, goal = kept[-1][1], min(end + self._window, until)
        chunk = min(self._store.range_bytes, max(self._window, end - position))
        while tail < goal:  # (requests of the window's size, at most range_bytes)
            size = min(chunk, until - tail)
            self._ranges.append((tail, tail + size, self._store.submit(self._fetch, tail, size)))
            tail += size

    def _fetch(self, position: int, nbytes: int) -> pa.Buffer:
        if not nbytes:
            return pa.py_buffer(b"")
        try:
            # (a Buffer of the response's bytes: read_at would copy them into a bytes object)
            data = self._f.get_stream(position, nbytes).read_buffer(nbytes)
        except (OSError, ValueError) as e:
            raise ObjectStoreError(explained(f"{self._path} at byte {position}", e,
                                             self._store.describe())) from None
        if len(data) < nbytes:  # the object is shorter than listed: replaced or cut meanwhile
            raise ObjectStoreError(f"{self._path}: {len(data)} bytes at byte {position} where "
                                   f"{nbytes} were listed (the object changed)")
        return data

    def close(self) -> None:
        """Stop reading ahead (the file stays open in the store for the next reader)."""
        with self._lock:
            for _, _, future in self._ranges:
                future.cancel()
            self._ranges = []
