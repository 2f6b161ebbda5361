"""One door to a log directory: every front end (the mount, Spark, ``kfs dump``, ``kfs verify``
and the other tools) opens logs here, so each has every layout and every option.

As Kafka's ``LogManager`` hands out every log of a log directory (its ``RemoteLogManager``
joining the remote tier below them) and pyarrow's ``FileSystem.from_uri`` chooses a file
system once, :func:`open_log_directory` chooses the layout from where the log directory is:

1. a local log directory: ``storage.log_manager.LogManager`` (writable, or read-only beside
   another writer, following it);
2. an object store's URI: a log directory copied into it as it is
   (``storage.remote.remote_log.RemoteLogDirectory``), or the root of Kafka's
   ``LocalTieredStorage`` (``kafka-tiered-storage/`` at its top:
   ``storage.remote.tiered.TieredLogDirectory``), read-only;
3. with ``remote``, the RemoteStorageManager's root of a tiered topic: each partition its
   remote segments below the local log, then the local log
   (``storage.remote.tiered.UnifiedLogDirectory``); the remote tier in Aiven's plugin's layout
   (``storage.remote.aiven``) when ``options.remote_config``, the broker's properties, says
   so, which also says where the root is (``remote`` overrides it); ``location`` that root
   itself reads its remote tier alone.

How to reach an object store (endpoint, region) is one :class:`StoreOptions`, parsed once, with
the names Spark's options use. Adding a place where segment bytes live touches this module and
the one that reads that place; nothing in ``kfs/``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import InvalidConfigError, KafkaStorageError
from .location import Location

if TYPE_CHECKING:  # (pyarrow loads only when an object store is opened)
    from .protocols import LogDirectory
    from .remote.object_store import ObjectStore
    from .segment_source import SegmentSource

__all__ = ["Location", "ReadOnlyStoreError", "StoreOptions", "check_file", "check_writable",
           "open_cluster_directory", "open_log_directory", "open_remote_tier",
           "open_segment_source", "open_store", "read_file"]


class ReadOnlyStoreError(KafkaStorageError):
    """A write was asked of a location kfs only reads (an object store, a remote tier)."""


@dataclass(frozen=True)
class StoreOptions:
    """How to reach an object store, over what the environment says (``AWS_*``, the credential
    chain): ``endpoint`` (``http[s]://host:port`` of an S3-compatible server) and ``region``.
    Credentials are never options: they stay in the standard chains. ``remote_config``: a
    broker's properties file (its ``server.properties``, or one with the same keys) saying
    which RemoteStorageManager wrote the remote tier, where it is and its key ring
    (``storage.remote.rsm_config``), read once per process while the file is unchanged."""

    endpoint: str | None = None
    region: str | None = None
    remote_config: str | None = None

    # the names of the options it is parsed from, as Spark's options and the CLI spell them
    NAMES = ("endpoint", "region", "remote.config")

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> StoreOptions:
        """The store options among ``options`` (keys case-insensitive; empty values unset)."""
        lowered = {k.lower(): v for k, v in options.items()}
        return cls(endpoint=lowered.get("endpoint") or None, region=lowered.get("region") or None,
                   remote_config=lowered.get("remote.config") or None)

    def remote_storage(self):
        """The remote tier ``remote_config`` configures (``RemoteStorageConfig``) and its key
        ring, parsed once; (None, None) without a file. Raises InvalidConfigError (also for
        a file that cannot be read)."""
        if self.remote_config is None:
            return None, None
        path = os.path.abspath(self.remote_config)
        try:
            st = os.stat(path)
            return _remote_storage(path, st.st_mtime_ns, st.st_size)
        except OSError as e:
            raise InvalidConfigError(f"the remote config (the broker's properties) "
                                     f"{self.remote_config} cannot be read: "
                                     f"{e.strerror or e}") from None


@functools.lru_cache(maxsize=8)
def _remote_storage(path: str, mtime_ns: int, size: int):
    from .remote.rsm_config import load_remote_config

    config = load_remote_config(path)
    return config, config.key_ring()


DEFAULT_OPTIONS = StoreOptions()


def open_log_directory(location: str | os.PathLike | Location, *, read_only: bool = True,
                       remote: str | os.PathLike | Location | None = None,
                       options: StoreOptions = DEFAULT_OPTIONS,
                       partitions: Callable[[str, int], bool] | None = None,
                       fail_on_data_loss: bool = True, check_root: bool = True,
                       **local_options) -> LogDirectory:
    """The log directory at ``location``, in whichever layout it is (see the module).

    ``read_only``: never change a byte (safe beside a running broker or mount); a writable
    directory must be local. ``remote``: where a tiered topic's remote segments are (a URI or
    a local path of the RemoteStorageManager's root); the live ones are those
    ``__remote_log_metadata`` in ``location`` says, when it holds it. ``partitions(topic, n)``
    keeps only the partitions it accepts (such an open reads no ``__remote_log_metadata`` for
    the notice a tiered directory read without ``remote`` gets). ``fail_on_data_loss``: whether offsets in neither
    tier are an error (``storage.remote.tiered.OffsetGapError``) or stepped over with a warning
    (Spark's ``failOnDataLoss``). ``check_root``: whether an object store's root is asked for
    once in the process before anything else (False where a planner checked it: a Spark
    task). ``local_options`` go to a local ``LogManager`` (``clock``, ``lock_timeout_s``,
    ``force_recovery``, ``quarantine``).

    Raises ReadOnlyStoreError for a writable object store or remote tier;
    ``storage.remote.object_store.ObjectStoreError`` for a store that cannot be opened or a
    root that is not there ("no such bucket or directory"), checked before anything is read;
    FileNotFoundError / NotADirectoryError for a bad local directory; as ``LogManager`` does.
    """
    where = Location.parse(location) if read_only else check_writable(location)
    config, _ = options.remote_storage()
    explicit = remote is not None
    if remote is None and config is not None and config.location is not None:
        remote = config.location  # (remote.path, when given, overrides the backend's place)
    tier = None if remote is None else Location.parse(remote)
    if not read_only and tier is not None:
        raise ReadOnlyStoreError(f"{tier.display}: a remote tier is read-only to kfs: open "
                                 "the log directory read-only to read it")
    if config is not None and config.layout == "aiven" and tier is not None \
            and _same_place(where, tier):  # (the plugin's root itself: its remote tier alone)
        return _aiven_directory(tier, options, partitions, None, check_root, explicit)
    if where.is_remote:
        from .remote.tiered import open_object_store_directory

        local = open_object_store_directory(open_store(where, options, check_root=check_root),
                                            partitions)
    else:
        from .log_manager import LogManager

        local = LogManager(where.path, read_only=read_only, partitions=partitions,
                           **local_options)
    if tier is None:
        # the notice is for a whole directory's reader (a mount), not a task opening one log
        if read_only and not where.is_remote and partitions is None:
            local.notices.extend(_remote_history_notice(where, local.partition_names()))
        return local
    return _with_remote_tier(local, where, tier, options, partitions, fail_on_data_loss,
                             check_root, explicit)


def open_cluster_directory(settings: Mapping[str, str], *,
                           remote: str | os.PathLike | Location | None = None,
                           options: StoreOptions = DEFAULT_OPTIONS,
                           isolation=None, fail_on_data_loss: bool = True) -> LogDirectory:
    """Every partition of a live cluster, read-only (``storage.cluster.directory``): its
    remote tier at ``remote`` (or where ``options.remote_config`` says) read straight from the
    object store, only the offsets after it through the brokers, fetched at ``isolation``
    (``storage.isolation.IsolationLevel``, default read_uncommitted). ``settings``: a Java
    client's settings (``bootstrap.servers`` and the rest, as Spark's Kafka source takes its
    ``kafka.`` options). Without a remote tier every offset comes through the brokers.

    Raises ``storage.cluster.client.ClusterError`` (the cluster did not answer), ValueError
    (bad settings), and as :func:`open_remote_tier`."""
    from .cluster.directory import ClusterLogDirectory
    from .isolation import IsolationLevel

    config, _ = options.remote_storage()
    tier = remote if remote is not None else (config.location if config is not None else None)
    opener = None if tier is None else (
        lambda live: open_remote_tier(tier, options, None, live, explicit=remote is not None))
    return ClusterLogDirectory(settings, opener, isolation or IsolationLevel.READ_UNCOMMITTED,
                               fail_on_data_loss)


def check_writable(location: str | os.PathLike | Location) -> Location:
    """``location``, when kfs may write there (a local directory). Raises ReadOnlyStoreError
    for an object store's URI: a writer checks before it plans anything, so that no front end
    ever takes a URI for a local path."""
    where = Location.parse(location)
    if where.is_remote:
        raise ReadOnlyStoreError(f"{where.display}: an object store is read-only to kfs (kfs "
                                 "reads object storage, it does not write it)")
    return where


def remote_history(location: str | os.PathLike | Location) -> dict[str, tuple[int, int]]:
    """``{"<topic>-<N>": (first, last offset)}`` of what a broker's log directory says its
    partitions hold in their remote tier (``__remote_log_metadata``,
    ``storage.remote.tiered.remote_history``); empty for a URI or a directory holding none of
    it (nothing of pyarrow is loaded then). Raises OSError."""
    where = Location.parse(location)
    if where.is_remote or not _holds_remote_log_metadata(where.path):
        return {}
    from .remote.tiered import remote_history as tiered_history

    return tiered_history(where.path)


def _holds_remote_log_metadata(path) -> bool:
    from .remote.metadata import REMOTE_LOG_METADATA_TOPIC

    with os.scandir(path) as entries:
        return any(e.name.startswith(REMOTE_LOG_METADATA_TOPIC + "-") for e in entries)


def _remote_history_notice(where: Location, names: list[str]) -> list[str]:
    """A tiered topic's broker log directory read without its remote tier: which partitions'
    history is elsewhere, and what reads it."""
    tiered = sorted(set(remote_history(where)) & set(names))
    if not tiered:
        return []
    shown = ", ".join(tiered[:3]) + (f" and {len(tiered) - 3} more" if len(tiered) > 3 else "")
    return [f"warning: {where.display} holds the local log of tiered partitions ({shown}): "
            "their history is in the remote tier (__remote_log_metadata names its segments); "
            "give the RemoteStorageManager's root (remote.path, --remote-path) to read it"]


def _with_remote_tier(local, where: Location, tier: Location, options: StoreOptions,
                      partitions, fail_on_data_loss: bool, check_root: bool,
                      explicit: bool = True) -> LogDirectory:
    from .remote.tiered import UnifiedLogDirectory, live_metadata_of

    try:
        live = None if where.is_remote else live_metadata_of(where.path)
        remote = open_remote_tier(tier, options, partitions, live, check_root, explicit)
    except BaseException:
        local.close()
        raise
    return UnifiedLogDirectory(local, remote, fail_on_data_loss)


def open_remote_tier(tier: str | Location, options: StoreOptions = DEFAULT_OPTIONS,
                     partitions: Callable[[str, int], bool] | None = None, live=None,
                     check_root: bool = True, explicit: bool = True) -> LogDirectory:
    """The remote tier at ``tier`` (the RemoteStorageManager's root: LocalTieredStorage's, or
    Aiven's plugin's when ``options.remote_config`` says so) alone, read-only. ``live``: its live
    segments as ``__remote_log_metadata`` says (``RemoteLogMetadataCache
    .live_metadata_by_directory()``), None: the listing's. Raises ObjectStoreError,
    UnsupportedRemoteLayoutError, InvalidConfigError."""
    from .remote.tiered import TieredLogDirectory

    tier = Location.parse(tier)
    config, _ = options.remote_storage()
    if config is not None and config.layout == "aiven":
        return _aiven_directory(tier, options, partitions, live, check_root, explicit)
    return TieredLogDirectory(open_store(tier, options, check_root=check_root), partitions, live)


def _aiven_directory(tier: Location, options: StoreOptions, partitions, live, check_root: bool,
                     explicit: bool):
    """The remote tier Aiven's plugin wrote at ``tier``, as ``options.remote_config``
    configures it (its S3 endpoint and region unless ``options`` give them). ``explicit``:
    ``tier`` was given (``remote.path``), not the properties' own: it is the backend's root
    when the key prefix is a directory in it, else the URI under the prefix, where the
    ``<topic>-<topic id>/`` are (one look at open)."""
    from .remote.aiven import AivenLogDirectory, root_prefix

    config, key_ring = options.remote_storage()
    store_options = StoreOptions(options.endpoint or config.endpoint,
                                 options.region or config.region)
    store = open_store(tier, store_options, check_root=check_root)
    prefix = root_prefix(store, config.key_prefix) if explicit else config.key_prefix
    return AivenLogDirectory(store, prefix, partitions, live, key_ring)


def _same_place(a: Location, b: Location) -> bool:
    """Whether ``a`` and ``b`` name one place (a local path and its ``file://`` URI too)."""
    def uri(where: Location) -> str:
        return (where.text if where.is_remote else where.path.resolve().as_uri()).rstrip("/")

    return uri(a) == uri(b)


def open_store(location: str | Location, options: StoreOptions = DEFAULT_OPTIONS, *,
               shared: bool = True, check_root: bool = True) -> ObjectStore:
    """The object store at ``location`` (a local path is taken as its ``file://`` URI), with
    ``check_root`` its root checked once in its life (ObjectStoreError "no such bucket or
    directory" for a wrong bucket or prefix). ``shared``: the process's store for it
    (``ObjectStore.shared``: connections and index objects kept for the next reader, e.g. the
    next Spark task of a reused worker); else a store of its own, to close. Raises
    ObjectStoreError."""
    from .remote.object_store import ObjectStore

    where = Location.parse(location)
    uri = where.text if where.is_remote else where.path.resolve().as_uri()
    make = ObjectStore.shared if shared else ObjectStore.from_uri
    store = make(uri, endpoint=options.endpoint, region=options.region)
    if check_root:
        store.check_root_once()
    return store


# -- single files (kfs dump): a segment's .log and its companions, wherever they are ----------


def check_file(location: str | Location, options: StoreOptions = DEFAULT_OPTIONS) -> None:
    """FileNotFoundError / IsADirectoryError unless ``location`` is a file (an object);
    ObjectStoreError when the store refuses."""
    where = Location.parse(location)
    if where.is_remote:
        _object(where, options)[0].close()
        return
    if not os.path.exists(where.text):
        raise FileNotFoundError(f"{where.display}: No such file or directory")
    if os.path.isdir(where.text):
        raise IsADirectoryError(f"{where.display}: Is a directory")


def read_file(location: str | Location, options: StoreOptions = DEFAULT_OPTIONS) -> bytes:
    """The whole file (an index, a checkpoint, a snapshot). Raises OSError,
    ObjectStoreError."""
    where = Location.parse(location)
    if not where.is_remote:
        return where.path.read_bytes()
    store, info = _object(where, options)
    try:
        return store.read_small_object(info.path) or b""
    finally:
        store.close()


def open_segment_source(location: str | Location, options: StoreOptions = DEFAULT_OPTIONS, *,
                        indexes: Mapping[str, str] | None = None) -> SegmentSource:
    """How the segment file at ``location`` is read (``storage.segment_source``): pread of a
    local file, or ranged requests of an object; a ``.log`` object of Aiven's
    RemoteStorageManager (its ``.rsm-manifest`` beside it) through its manifest, its chunks
    decoded (``options.remote_config``'s key ring for an encrypted one). ``indexes``: for an object, its companion
    objects by suffix (``{".txnindex": …}``; the path in the object's store, None: the object
    itself). Close it when done; an object's store closes with it. Raises as
    :func:`check_file`."""
    from .segment_source import LocalSegmentSource

    where = Location.parse(location)
    if _aiven_manifest_beside(where, options):
        from .remote.aiven import open_aiven_segment

        return open_aiven_segment(where.text if where.is_remote
                                  else where.path.resolve().as_uri(),
                                  endpoint=options.endpoint, region=options.region,
                                  key_ring=options.remote_storage()[1])
    if not where.is_remote:
        check_file(where)
        return LocalSegmentSource.of_path(where.path)
    from .segment_source import ObjectSegmentSource

    store, info = _object(where, options)
    paths = {suffix: path or info.path for suffix, path in (indexes or {}).items()}
    return ObjectSegmentSource(store, info, paths, owns_store=True)


def _aiven_manifest_beside(where: Location, options: StoreOptions) -> bool:
    """Whether ``where`` is the ``.log`` object of a segment Aiven's RemoteStorageManager
    wrote: its ``.rsm-manifest`` beside it (one look, a HEAD for an object)."""
    from .remote.aiven import LOG_OBJECT, MANIFEST_OBJECT

    if not where.name.endswith(LOG_OBJECT):
        return False
    name = where.name[:-len(LOG_OBJECT)] + MANIFEST_OBJECT
    if not where.is_remote:
        return (where.path.parent / name).is_file()
    try:
        check_file(where.sibling(name), options)
    except (FileNotFoundError, IsADirectoryError):
        return False
    return True


def _object(where: Location, options: StoreOptions):
    """(a store of its own, the object's listing entry) of the object ``where``."""
    from .remote.object_store import object_at

    return object_at(where.text, endpoint=options.endpoint, region=options.region)
