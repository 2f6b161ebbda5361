"""Where ``kfs export`` commits its files, and how a file becomes visible only once it is whole:
a local directory (:class:`LocalDirectory`) or an object store's prefix
(:class:`ObjectStoreDirectory`, ``s3://bucket/prefix``). :func:`open_destination` opens either.

Both hand out a path for ``pyarrow.parquet.ParquetWriter`` to write a file at (:meth:`begin`),
then publish it under its final name (:meth:`commit`) or drop it (:meth:`abandon`). Paths under
the destination are given as parts: ``("topic=t", "partition=0", "t+0+….parquet")``.

- Local: the file is written under a hidden name beside its final one (``.<stem>.parquet.tmp``,
  which ``pyarrow.dataset`` and DuckDB's ``*.parquet`` globs skip), fsynced, renamed, and the
  rename fsynced. A flock on ``DEST/.kfs-export.lock`` keeps a second run out.
- Object store (``s3://``; other schemes are refused, their uploads not known to be atomic):
  there is no rename, and a partial upload must never show. The file is written to a local
  scratch file (in ``TMPDIR``, unlinked at once: gone with the process however it ends), then
  uploaded under its final key through one ``pyarrow.fs`` output stream, whose close completes
  the upload (S3's PutObject or CompleteMultipartUpload: the object appears whole or not at
  all; a run killed before leaves at most an incomplete multipart upload, never listed, which
  the bucket's ``AbortIncompleteMultipartUpload`` lifecycle rule removes). Nothing guards two
  runs into one prefix at once: an object store has no lock and kfs invents none, so run one
  export per destination at a time (one scheduled job); two at once would write the same
  offsets twice.

Credentials, endpoint and region are the rest of kfs's for an object store
(``storage.remote.object_store``: the ``AWS_*`` chain, ``endpoint``/``region`` over it); no
secret is ever in a message.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import urllib.parse
from pathlib import Path

from storage.location import Location
from storage.remote.uri import redact

LOCK_NAME = ".kfs-export.lock"
_TMP_SUFFIX = ".parquet.tmp"


def open_destination(location, dest, *, endpoint: str | None = None,
                     region: str | None = None) -> LocalDirectory | ObjectStoreDirectory:
    """The destination ``dest`` names (a local directory, made when missing, also as a
    ``file://`` URI; or ``s3://bucket/prefix``, its bucket existing), for an export of
    ``location``. Raises ValueError for a destination inside the log directory, another
    scheme or a missing bucket; ObjectStoreError when the store cannot be opened or
    refuses."""
    where, source = _local_file_uri(Location.parse(dest)), Location.parse(location)
    if where.is_remote and not where.text.startswith("s3://"):
        raise ValueError(f"{where.display}: kfs export writes to a local directory or to "
                         "s3://bucket/prefix (an upload there appears whole or not at all; "
                         "this store's is not known to)")
    if _inside(where, _local_file_uri(source)):
        raise ValueError(f"{where.display} is inside the log directory {source.display}: "
                         "export to a directory outside it (Kafka keeps only <topic>-<N> there)")
    if where.is_remote:
        return ObjectStoreDirectory.open(where.text, endpoint=endpoint, region=region)
    path = where.path.resolve()
    path.mkdir(parents=True, exist_ok=True)
    return LocalDirectory(path)


def _local_file_uri(where: Location) -> Location:
    """A ``file://`` URI as the local path it names (a local directory's rename holds there)."""
    if where.is_remote and where.text.startswith("file://"):
        return Location.parse(urllib.parse.unquote(urllib.parse.urlparse(where.text).path))
    return where


def _inside(dest: Location, source: Location) -> bool:
    if dest.is_remote != source.is_remote:
        return False
    if dest.is_remote:
        a, b = _bare(dest.text), _bare(source.text)
        return a == b or a.startswith(b + "/")
    a, b = dest.path.resolve(), source.path.resolve()
    return a == b or b in a.parents


def _bare(uri: str) -> str:
    """``uri`` without its query string and credentials, nor a trailing ``/``."""
    return redact(uri.partition("?")[0]).rstrip("/")


class LocalDirectory:
    """A local directory ``root`` as the destination (temporary name, fsync, rename)."""

    def __init__(self, root: Path):
        self.root = root

    def locked(self) -> _Locked:
        """The destination's export lock, held while in its ``with``. Raises
        BlockingIOError when another export holds it."""
        return _Locked(self.root)

    def files(self, *parts: str) -> list[tuple[str, ...]]:
        """Every file under ``parts`` (none when it is missing), each as its parts below it."""
        top = self.root.joinpath(*parts)
        return [(*Path(d).relative_to(top).parts, name)
                for d, _, names in os.walk(top) for name in names]

    def remove_leftovers(self, *parts: str) -> None:
        """The temporary files a killed run left under ``parts`` (they were never visible)."""
        for rel in self.files(*parts):
            if rel[-1].startswith(".") and rel[-1].endswith(_TMP_SUFFIX):
                os.unlink(self.root.joinpath(*parts, *rel))

    def display(self, *parts: str) -> str:
        return str(self.root.joinpath(*parts))

    def begin(self, parts: tuple[str, ...], stem: str) -> str:
        """Where to write the file that will be ``parts``/``<stem>…``: its temporary name."""
        directory = self.root.joinpath(*parts)
        directory.mkdir(parents=True, exist_ok=True)
        return str(directory / f".{stem}{_TMP_SUFFIX}")

    def commit(self, written: str, parts: tuple[str, ...], name: str) -> Path:
        """The closed file ``written`` made durable under ``parts``/``name``: fsynced, renamed,
        the rename fsynced (its directory's entry), so a crash never shows a partial file."""
        with open(written, "rb+") as f:
            os.fsync(f.fileno())
        final = self.root.joinpath(*parts, name)
        os.rename(written, final)
        _fsync_directory(final.parent)
        return final

    def abandon(self, written: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(written)

    def close(self) -> None:
        pass


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Locked:
    """``dest``'s export lock (an flock on ``.kfs-export.lock``): one export at a time, or two
    would commit the same offsets."""

    def __init__(self, dest: Path):
        self.path = dest / LOCK_NAME

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise BlockingIOError(f"another kfs export is writing into {self.path.parent}") \
                from None
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


class ObjectStoreDirectory:
    """An object store's prefix as the destination (local scratch file, then one upload under
    the final key). ``store``: a ``storage.remote.object_store.ObjectStore`` of its own."""

    def __init__(self, store):
        self.store = store
        self._scratch: dict[str, int] = {}  # the path of each file being written: its fd

    @classmethod
    def open(cls, uri: str, *, endpoint: str | None = None,
             region: str | None = None) -> ObjectStoreDirectory:
        """The prefix ``uri`` (``s3://bucket/prefix``) names. Raises ValueError for a missing
        bucket (a prefix needs no making); ObjectStoreError when the store cannot be opened or
        refuses."""
        from storage.directory import StoreOptions, open_store

        # (a store of its own, its root not checked: an export may make the prefix)
        store = open_store(uri, StoreOptions(endpoint, region), shared=False, check_root=False)
        try:
            _check_bucket(store)
        except BaseException:
            store.close()
            raise
        return cls(store)

    def locked(self) -> contextlib.nullcontext:
        """No lock: an object store has none (see the module's docstring)."""
        return contextlib.nullcontext()

    def files(self, *parts: str) -> list[tuple[str, ...]]:
        """Every object under ``parts``, each as its parts below it. Raises ObjectStoreError."""
        import pyarrow.fs as pafs

        top = self.store.path(*parts)
        try:
            infos = self.store.fs.get_file_info(
                pafs.FileSelector(top, recursive=True, allow_not_found=True))
        except (OSError, ValueError) as e:
            raise self._error(f"listing {self.display(*parts)}", e) from None
        return [tuple(info.path[len(top) + 1:].split("/")) for info in infos
                if info.type == pafs.FileType.File]

    def remove_leftovers(self, *parts: str) -> None:
        """Nothing: no partial object is ever made."""

    def display(self, *parts: str) -> str:
        """How messages name ``parts``: the URI, without credentials or query string."""
        return "/".join([_bare(self.store.uri), *parts])

    def begin(self, parts: tuple[str, ...], stem: str) -> str:
        """Where to write the file: a scratch file in ``TMPDIR``, unlinked at once (its path
        is this process's ``/proc/self/fd/<fd>``, the only way left to open it)."""
        fd, name = tempfile.mkstemp(prefix="kfs-export-", suffix=".parquet")
        os.unlink(name)
        path = f"/proc/self/fd/{fd}"
        self._scratch[path] = fd
        return path

    def commit(self, written: str, parts: tuple[str, ...], name: str) -> str:
        """The closed scratch file ``written`` uploaded as ``parts``/``name``; its URI.
        Raises ObjectStoreError (no object made)."""
        fd = self._scratch.pop(written)
        try:
            self._upload(written, self.store.path(*parts, name), self.display(*parts, name))
        finally:
            os.close(fd)
        return self.display(*parts, name)

    def _upload(self, written: str, key: str, where: str) -> None:
        import pyarrow as pa

        with pa.memory_map(written) as source:
            data = source.read_buffer()
            try:
                out = self.store.fs.open_output_stream(key)
                # One write, then close, with no code of ours between: the stream's close
                # completes the upload. A part that failed is kept by the stream and fails the
                # close, which then completes nothing. (``with`` would close it after an error
                # too, and pyarrow's stream has no abort.)
                out.write(data)
                out.close()
            except (OSError, ValueError) as e:
                raise self._error(where, e) from None

    def abandon(self, written: str) -> None:
        fd = self._scratch.pop(written, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        for written in list(self._scratch):
            self.abandon(written)
        self.store.close()

    def _error(self, where: str, error: BaseException):
        from storage.remote.object_store import ObjectStoreError, explained

        return ObjectStoreError(explained(where, error, self.display()))


def _check_bucket(store) -> None:
    """ValueError unless the bucket of ``store``'s root exists (the prefix may not yet)."""
    import pyarrow.fs as pafs

    bucket = store.root.partition("/")[0]
    try:
        missing = store.fs.get_file_info(bucket).type == pafs.FileType.NotFound
    except (OSError, ValueError) as e:
        from storage.remote.object_store import ObjectStoreError, explained

        raise ObjectStoreError(explained(_bare(store.uri), e)) from None
    if missing:
        raise ValueError(f"{_bare(store.uri)}: no such bucket (kfs export makes none)")
