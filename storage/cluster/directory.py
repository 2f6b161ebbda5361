"""A live cluster as a log directory (the mount of a cluster): every partition of its topics,
read-only, each its remote segments straight from the object store, then its tail through the
brokers kept in a local replica (``storage.cluster.replica``), as a consumer of the cluster
sees the partition.

The cluster is the source of truth: the partitions are the ones it describes (looked at again
by :meth:`ClusterLogDirectory.catch_up_partitions`), and each catch-up asks it for the
partition's log start offset and high watermark (one ``ListOffsets`` each) and fetches what is
new. The remote tier's live segments are those ``__remote_log_metadata`` named at open (read as
a consumer, ``storage.cluster.remote_metadata``); the tail starts where they end, so segments
tiered later are in the replica already, and segments deleted by retention are below the log
start offset the cluster gives.

The replicas live in a spool directory of the process's own (``$TMPDIR/kfs-cluster-*``),
removed at :meth:`ClusterLogDirectory.close`: nothing is written anywhere else.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from storage.clock import SYSTEM_CLOCK, Clock
from storage.config import LogConfig
from storage.errors import UnknownTopicOrPartitionError
from storage.isolation import IsolationLevel
from storage.log import Log
from storage.log_reader import decoded_batch_cache
from storage.open_files import FilePool
from storage.protocols import LogDirectory

from .client import ClusterClient, PartitionInfo
from .remote_metadata import read_remote_log_metadata
from .replica import TailReplica

__all__ = ["ClusterLogDirectory"]

log = logging.getLogger(__name__)

# opens the remote tier, given its live segments by directory (None: no remote tier)
TierOpener = Callable[[Mapping], LogDirectory]


class ClusterLogDirectory:
    """The partitions of the cluster at ``settings["bootstrap.servers"]`` (``settings``: a Java
    client's settings, as ``storage.cluster.client.client_config`` takes them), each a
    ``storage.remote.tiered.UnifiedLog``: the remote tier ``open_tier`` opens (given the live
    segments ``__remote_log_metadata`` names), then the offsets after it through the brokers at
    ``isolation``. ``fail_on_data_loss`` as ``UnifiedLog``'s. Raises ClusterError (the cluster
    did not answer), ValueError (bad settings), as ``open_tier`` does."""

    def __init__(self, settings: Mapping[str, str], open_tier: TierOpener | None = None,
                 isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED,
                 fail_on_data_loss: bool = True, clock: Clock = SYSTEM_CLOCK) -> None:
        self.client = ClusterClient(settings)
        self.isolation = isolation
        self.fail_on_data_loss = fail_on_data_loss
        self.clock = clock
        self.notices: list[str] = []
        self._lock = threading.RLock()  # (the mount's worker threads catch up concurrently)
        self._infos = self._describe()
        self._tier = None
        if open_tier is not None:
            cache = read_remote_log_metadata(self.client, self._infos.values())
            self._tier = open_tier(cache.live_metadata_by_directory())
        self._spool = Path(tempfile.mkdtemp(prefix="kfs-cluster-"))
        self._files = FilePool()
        self._decoded_batches = decoded_batch_cache()
        self._logs: dict = {}

    def _describe(self) -> dict[str, PartitionInfo]:
        infos = self.client.partitions(self.client.topic_names())
        return {f"{p.topic}-{p.partition}": p for p in infos}

    def partition_names(self) -> list[str]:
        return sorted(self._infos)

    def get(self, name: str):
        """The partition ``name``, its tail fetched up to the high watermark (the last stable
        offset at read_committed) on first use. Raises UnknownTopicOrPartitionError,
        ClusterError."""
        with self._lock:
            if name not in self._logs:
                self._logs[name] = self._open(name)
            return self._logs[name]

    def _open(self, name: str):
        from storage.remote.tiered import UnifiedLog

        info = self._infos.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"{name} is not a partition of the cluster at "
                                               f"{self.client.bootstrap}")
        log_start, end = self._offsets(info)
        remote = None
        if self._tier is not None and name in self._tier.partition_names():
            remote = self._tier.get(name)
        # (the tail starts where the remote tier ends: a segment tiered later is in it)
        start = max(log_start, remote.log_end_offset if remote is not None else 0)
        directory = self._spool / name
        directory.mkdir()
        local = Log(directory, info.topic, info.partition, LogConfig(),
                    log_start_offset=start, recovery_point=start, clock=self.clock,
                    files=self._files, decoded_batches=self._decoded_batches)
        replica = TailReplica(local, self.client.config, self.isolation, self.client.timeout_s)
        try:
            replica.fetch_to(end)
        except BaseException:
            local.close()
            shutil.rmtree(directory, ignore_errors=True)  # (the next get starts afresh)
            raise
        if remote is not None:
            log.info("%s: offsets %d..%d from the remote tier, %d.. through the brokers "
                     "(to %d)", name, remote.log_start_offset, start - 1, start, end)
        else:
            log.info("%s: offsets %d.. through the brokers (to %d)", name, start, end)
        return UnifiedLog(remote, replica, self.fail_on_data_loss, log_start,
                          self._decoded_batches)

    def _offsets(self, info: PartitionInfo) -> tuple[int, int]:
        """(log start offset, high watermark or at read_committed last stable offset)."""
        tp = (info.topic, info.partition)
        return (self.client.offsets([tp], "earliest")[tp],
                self.client.offsets([tp], "latest", self.isolation)[tp])

    def catch_up(self, name: str):
        """The partition ``name`` as the cluster has it now: what was appended fetched, the
        log start offset moved by retention or DeleteRecords."""
        with self._lock:
            unified = self.get(name)
            log_start, end = self._offsets(self._infos[name])
            unified.local.fetch_to(end)
            return unified.catch_up(log_start)

    def catch_up_partitions(self) -> bool:
        """Take in topics created and deleted (or deleted and made again: a new topic id)
        since the last look; whether any were."""
        with self._lock:
            infos = self._describe()
            ids = {name: p.topic_id for name, p in infos.items()}
            if ids == {name: p.topic_id for name, p in self._infos.items()}:
                self._infos = infos  # (leaders moved, perhaps)
                return False
            for name in [n for n in self._logs
                         if n not in ids or ids[n] != self._infos[n].topic_id]:
                self._drop(name)
            self._infos = infos
            return True

    def _drop(self, name: str) -> None:
        """Close partition ``name``'s replica and remove its files (its remote segments stay
        the tier's)."""
        self._logs.pop(name).local.close()
        shutil.rmtree(self._spool / name, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            for name in list(self._logs):
                self._drop(name)
            if self._tier is not None:
                self._tier.close()
            shutil.rmtree(self._spool, ignore_errors=True)
