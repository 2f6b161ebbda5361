"""A Kafka log directory in an object store: ``s3://bucket/prefix``, ``gs://…``, ``hdfs://…``,
``file://…`` or a plain path, through ``pyarrow.fs`` (``FileSystem.from_uri``), e.g. a broker's
log directory copied into a bucket as it is (``aws s3 sync``).

Credentials, region and endpoint come from the library's standard chain (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``, ``AWS_REGION``, ``~/.aws/…``, instance
metadata); ``endpoint`` and ``region`` override them. Nothing here prints or logs a secret.
Reads fetch only what they ask for: ranged reads of a ``.log``; index objects whole, through a
cache bounded in bytes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow.fs as pafs

from storage.errors import KafkaStorageError
from storage.log_files import INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX

from .uri import redact

INDEX_CACHE_BYTES = 64 << 20  # index objects kept, in bytes (a 1 GiB segment's are ~2.5 MiB)
SMALL_OBJECT_BYTES = 64 << 20  # an index object larger than this is not a Kafka index
RANGE_BYTES = 8 << 20  # one ranged request of a bulk read
READ_AHEAD = 3  # ranges requested ahead of a bulk reader, at once
BULK_READ = 256 << 10  # a read this large is a bulk reader's (read ahead); smaller ones are not


INDEX_KINDS = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)


@dataclass(frozen=True)
class SegmentObjects:
    """Where one segment's objects are: ``log`` the ``.log``'s listing entry (path, size,
    mtime), ``indexes`` the path of each index object there is, by kind (``.index``,
    ``.timeindex``, ``.txnindex``: a missing one reads as empty, as Kafka's)."""

    base_offset: int
    log: pafs.FileInfo
    indexes: dict[str, str]


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
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached_bytes, self._max_bytes = 0, index_cache_bytes
        self._lock = threading.Lock()
        self.range_bytes, self.read_ahead = range_bytes, read_ahead
        self._pool: ThreadPoolExecutor | None = None

    @classmethod
    def from_uri(cls, uri: str, *, endpoint: str | None = None,
                 region: str | None = None) -> ObjectStore:
        """The store ``uri`` names. ``endpoint`` (``http://host:port``) and ``region`` override
        an S3 store's from the environment. Raises ObjectStoreError for a URI pyarrow cannot
        open (an unknown scheme, a missing bucket's region lookup failing)."""
        try:
            if uri.startswith("s3://") and (endpoint or region):
                bucket_path = uri[len("s3://"):]
                options = {"region": region} if region else {}
                if endpoint:
                    scheme, _, host = endpoint.rpartition("://")
                    options.update(endpoint_override=host or endpoint, scheme=scheme or "https")
                fs, root = pafs.S3FileSystem(**options), bucket_path
            else:
                fs, root = pafs.FileSystem.from_uri(uri)
        except (OSError, ValueError, TypeError) as e:
            raise ObjectStoreError(f"{redact(uri)}: {e}") from None
        return cls(fs, root, uri)

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
            raise ObjectStoreError(f"listing {self.describe(*names)}: {e}") from None

    def root_info(self) -> pafs.FileInfo:
        """The root's listing entry (type NotFound when there is none). Raises
        ObjectStoreError when the store refuses (access denied, unreachable)."""
        try:
            return self.fs.get_file_info(self.root)
        except (OSError, ValueError) as e:
            raise ObjectStoreError(f"{self.describe()}: {e}") from None

    def check_root(self) -> None:
        """ObjectStoreError unless the root is there (an unknown bucket, a mistyped prefix,
        access denied)."""
        if self.root_info().type == pafs.FileType.NotFound:
            raise ObjectStoreError(f"{self.describe()}: no such bucket or directory")

    def describe(self, *names: str) -> str:
        """How messages name ``names`` of the store (its URI, without credentials)."""
        return "/".join([redact(self.uri).rstrip("/"), *names])

    def open(self, path: str, size: int) -> RangedObject:
        """The object ``path`` of ``size`` bytes for ranged reads. Raises ObjectStoreError."""
        try:
            return RangedObject(self, self.fs.open_input_file(path), path, size)
        except (OSError, ValueError) as e:
            raise ObjectStoreError(f"{path}: {e}") from None

    def close(self) -> None:
        """Stop the fetch threads (after the readers are closed)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(cancel_futures=True)

    def submit(self, fn, *args) -> Future:
        """Run ``fn(*args)`` on the store's fetch threads (``read_ahead`` of them)."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max(self.read_ahead, 1),
                                                thread_name_prefix="kfs-fetch")
        return self._pool.submit(fn, *args)

    def read_small_object(self, path: str) -> bytes | None:
        """The whole object ``path`` (an index or checkpoint), from the cache when it is there;
        None when there is no such object. Raises ObjectStoreError."""
        with self._lock:
            data = self._cache.get(path)
            if data is not None:
                self._cache.move_to_end(path)
                return data
        try:
            with self.fs.open_input_file(path) as f:
                if f.size() > SMALL_OBJECT_BYTES:
                    raise ObjectStoreError(f"{path}: {f.size()} bytes, not an index object")
                data = f.readall()
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise ObjectStoreError(f"{path}: {e}") from None
        self._keep(path, data)
        return data

    def _keep(self, path: str, data: bytes) -> None:
        with self._lock:
            if path in self._cache:
                return
            self._cache[path] = data
            self._cached_bytes += len(data)
            while self._cached_bytes > self._max_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached_bytes -= len(old)


def object_at(uri: str) -> tuple[ObjectStore, pafs.FileInfo]:
    """The store holding the object ``uri`` and the object's listing entry. Raises
    FileNotFoundError when there is no such object, IsADirectoryError for a directory,
    ObjectStoreError when the store refuses."""
    store = ObjectStore.from_uri(uri)
    info = store.root_info()
    if info.type == pafs.FileType.NotFound:
        raise FileNotFoundError(f"{redact(uri)}: no such object")
    if info.type == pafs.FileType.Directory:
        raise IsADirectoryError(f"{redact(uri)}: a directory, not an object")
    return store, info


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
        data = b"".join(future.result()[max(position - start, 0):min(end, stop) - start]
                        for start, stop, future in parts)
        return data

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

    def _fetch(self, position: int, nbytes: int) -> bytes:
        if not nbytes:
            return b""
        try:
            data = self._f.read_at(nbytes, position)
        except (OSError, ValueError) as e:
            raise ObjectStoreError(f"{self._path} at byte {position}: {e}") from None
        if len(data) < nbytes:  # the object is shorter than listed: replaced or cut meanwhile
            raise ObjectStoreError(f"{self._path}: {len(data)} bytes at byte {position} where "
                                   f"{nbytes} were listed (the object changed)")
        return data

    def close(self) -> None:
        with self._lock:
            for _, _, future in self._ranges:
                future.cancel()
            self._ranges = []
        self._f.close()
