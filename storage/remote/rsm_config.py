"""Where a broker's remote tier is and how to read it, from the broker's own properties (its
``server.properties``, or a file with the same keys): ``remote.log.storage.manager.class.name``
says which RemoteStorageManager wrote it, and for Aiven's plugin the ``rsm.config.*`` keys say
where its objects are and how they were transformed.

Keys read (the plugin's ``RemoteStorageManagerConfig``, ``EncryptionConfig`` and its storage
backends' configs, each under the broker's ``rsm.config.`` prefix):

* ``storage.backend.class``: ``…filesystem.FileSystemStorage`` (``storage.root``, a local
  directory), ``…s3.S3Storage`` (``s3.bucket.name``, ``s3.region``, ``s3.endpoint.url``;
  buckets are addressed as pyarrow's S3 client does, virtual-hosted on AWS and by path at an
  ``s3.endpoint.url``, what ``s3.path.style.access.enabled=true`` asks of the plugin there:
  ``false`` with an endpoint, which pyarrow's URI cannot ask, is said once),
  ``…gcs.GcsStorage`` (``gcs.bucket.name``, ``gcs.endpoint.url``;
  ``gcs.credentials.default=false`` with neither ``gcs.credentials.path`` nor
  ``gcs.credentials.json`` is the plugin's anonymous client, what a GCS emulator takes),
  ``…azure.AzureBlobStorage`` (``azure.container.name``, ``azure.account.name``);
* ``key.prefix``: prepended verbatim to every object key;
* ``encryption.key.pairs`` (ids, comma-separated) and each
  ``encryption.key.pairs.<id>.private.key.file``.

Local paths are resolved against ``base`` (default: the properties file's directory); a path
written ``<run>/…`` (the fixtures' placeholder for the broker's directory) is taken as relative
to it. Credentials are never taken from the file (they stay in the standard chains): nothing
read here keeps or shows a secret, whatever the file holds.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from storage.errors import InvalidConfigError

log = logging.getLogger(__name__)

RSM_CLASS = "remote.log.storage.manager.class.name"
RSM_PREFIX = "rsm.config."
AIVEN = "aiven"
LOCAL_TIERED = "local-tiered"
LAYOUTS = {
    "io.aiven.kafka.tieredstorage.RemoteStorageManager": AIVEN,
    "org.apache.kafka.server.log.remote.storage.LocalTieredStorage": LOCAL_TIERED,
}
_PLACEHOLDER = "<run>/"


@dataclass(frozen=True)
class RemoteStorageConfig:
    """A broker's remote tier as its properties configure it. ``layout``: ``aiven`` or
    ``local-tiered``; ``location``: where the objects are (a local path or a URI), None when
    the file does not say (LocalTieredStorage's root is its own ``dir`` key); ``endpoint``:
    an S3 or GCS backend's (``http[s]://host:port``), ``region`` an S3 backend's;
    ``key_prefix``: Aiven's ``key.prefix``; ``private_key_files``: the key ring, ``{key pair
    id: private key file}``."""

    layout: str
    location: str | None = None
    endpoint: str | None = None
    region: str | None = None
    key_prefix: str = ""
    private_key_files: dict[str, Path] = field(default_factory=dict)

    def key_ring(self):
        """The key ring (``storage.remote.key_ring.KeyRing``), None without key pairs."""
        if not self.private_key_files:
            return None
        from .key_ring import KeyRing

        return KeyRing(self.private_key_files)


def load_remote_config(path: str | os.PathLike, base: str | os.PathLike | None = None
                       ) -> RemoteStorageConfig:
    """The remote tier the properties file ``path`` configures. Raises InvalidConfigError (one
    line, naming the key, never a value that may be a secret) and OSError."""
    import javaproperties  # slow to import: only when a file is read

    path = Path(path)
    with open(path, encoding="latin-1") as f:
        props = javaproperties.load(f)
    return parse_remote_config(props, Path(base) if base is not None else path.parent,
                               str(path))


def parse_remote_config(props: dict[str, str], base: Path, where: str = "the properties"
                        ) -> RemoteStorageConfig:
    """:func:`load_remote_config` of properties already read."""
    class_name = props.get(RSM_CLASS, "").strip()
    layout = LAYOUTS.get(class_name)
    if layout is None:
        raise InvalidConfigError(
            f"{where}: {RSM_CLASS} is {class_name or 'not set'}: kfs reads the layouts of "
            f"{' and '.join(sorted(LAYOUTS))}")
    rsm = {k[len(RSM_PREFIX):]: v.strip() for k, v in props.items() if k.startswith(RSM_PREFIX)}
    if layout == LOCAL_TIERED:
        root = rsm.get("dir")
        return RemoteStorageConfig(layout, _local(root, base) if root else None)
    location, endpoint, region = _backend(rsm, base, where)
    ids = [i.strip() for i in rsm.get("encryption.key.pairs", "").split(",") if i.strip()]
    files = {}
    for key_id in ids:
        name = f"encryption.key.pairs.{key_id}.private.key.file"
        if not rsm.get(name):
            raise InvalidConfigError(f"{where}: {RSM_PREFIX}{name} is not set: key pair "
                                     f"{key_id!r} has no private key file")
        files[key_id] = Path(_local(rsm[name], base))
    return RemoteStorageConfig(layout, location, endpoint, region, rsm.get("key.prefix", ""),
                               files)


def _backend(rsm: dict[str, str], base: Path, where: str
             ) -> tuple[str | None, str | None, str | None]:
    """(location, endpoint, region) of the plugin's storage backend."""
    backend = rsm.get("storage.backend.class", "")
    kind = backend.rpartition(".")[2]
    if kind == "FileSystemStorage":
        root = rsm.get("storage.root")
        return (_local(root, base) if root else None), None, None
    if kind == "S3Storage":
        bucket = _required(rsm, "s3.bucket.name", where)
        if rsm.get("s3.endpoint.url") and \
                rsm.get("s3.path.style.access.enabled", "").lower() == "false":
            log.warning("%s: %ss3.path.style.access.enabled=false not followed: kfs addresses "
                        "the bucket at s3.endpoint.url by path", where, RSM_PREFIX)
        return f"s3://{bucket}", rsm.get("s3.endpoint.url") or None, rsm.get("s3.region") or None
    if kind == "GcsStorage":
        return _gcs_location(rsm, where), rsm.get("gcs.endpoint.url") or None, None
    if kind == "AzureBlobStorage":
        container = _required(rsm, "azure.container.name", where)
        account = rsm.get("azure.account.name")
        return (f"abfs://{container}@{account}.dfs.core.windows.net" if account
                else f"abfs://{container}"), None, None
    raise InvalidConfigError(f"{where}: {RSM_PREFIX}storage.backend.class is "
                             f"{backend or 'not set'}: not a storage backend kfs reads "
                             "(FileSystemStorage, S3Storage, GcsStorage, AzureBlobStorage)")


def _gcs_location(rsm: dict[str, str], where: str) -> str:
    """The GCS backend's bucket as a URI; ``?anonymous=true`` where the plugin's
    ``CredentialsBuilder`` makes no credentials (``gcs.credentials.default=false``, no path,
    no JSON). A credentials file or JSON the broker names is not read (kfs takes GCS
    credentials from the standard chain, ``GOOGLE_APPLICATION_CREDENTIALS``): said once."""
    location = f"gs://{_required(rsm, 'gcs.bucket.name', where)}"
    named = [k for k in ("gcs.credentials.path", "gcs.credentials.json") if rsm.get(k)]
    if named:
        log.warning("%s: %s%s not read: kfs takes GCS credentials from the standard chain "
                    "(GOOGLE_APPLICATION_CREDENTIALS names the file)", where, RSM_PREFIX,
                    named[0])
    elif rsm.get("gcs.credentials.default", "true").lower() == "false":
        location += "?anonymous=true"
    return location


def _required(rsm: dict[str, str], name: str, where: str) -> str:
    if not rsm.get(name):
        raise InvalidConfigError(f"{where}: {RSM_PREFIX}{name} is not set")
    return rsm[name]


def _local(path: str, base: Path) -> str:
    """``path`` as the broker wrote it, resolved against ``base``."""
    if path.startswith(_PLACEHOLDER):
        path = path[len(_PLACEHOLDER):]
    if "://" in path:
        return path
    return str((base / os.path.expanduser(path)).resolve())
