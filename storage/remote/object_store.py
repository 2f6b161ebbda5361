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

import pyarrow.fs as pafs

from storage.errors import KafkaStorageError

INDEX_CACHE_BYTES = 64 << 20  # index objects kept, in bytes (a 1 GiB segment's are ~2.5 MiB)
SMALL_OBJECT_BYTES = 64 << 20  # an index object larger than this is not a Kafka index


class ObjectStoreError(KafkaStorageError):
    """The object store refused or failed a request (the store's own words follow)."""


class ObjectStore:
    """The log directory at ``root`` (a path without scheme) of ``fs``, a
    ``pyarrow.fs.FileSystem``. Thread-safe."""

    def __init__(self, fs: pafs.FileSystem, root: str, uri: str,
                 index_cache_bytes: int = INDEX_CACHE_BYTES) -> None:
        self.fs, self.root, self.uri = fs, root.rstrip("/"), uri
        self._cache: OrderedDict[str, bytes] = OrderedDict()
        self._cached_bytes, self._max_bytes = 0, index_cache_bytes
        self._lock = threading.Lock()

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

    def describe(self, *names: str) -> str:
        """How messages name ``names`` of the store (its URI, without credentials)."""
        return "/".join([redact(self.uri).rstrip("/"), *names])

    def open(self, path: str):
        """``path`` for ranged reads (``read_at(nbytes, offset)``: pyarrow's are thread-safe).
        Raises ObjectStoreError."""
        try:
            return self.fs.open_input_file(path)
        except (OSError, ValueError) as e:
            raise ObjectStoreError(f"{path}: {e}") from None

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


def redact(uri: str) -> str:
    """``uri`` without credentials written into it (``s3://KEY:SECRET@bucket``), for
    messages."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return uri
    authority, slash, path = rest.partition("/")
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    query = ""
    if "?" in path:
        path, query = path.split("?", 1)
        query = "?…"
    return f"{scheme}://{authority}{slash}{path}{query}"


def is_uri(path: str) -> bool:
    """Whether ``path`` names a store by URI (``scheme://…``) rather than a local path."""
    return "://" in str(path)
