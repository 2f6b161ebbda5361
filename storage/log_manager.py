"""The backing directory: its partition logs, broker config, lock, checkpoints and
clean-shutdown marker (Kafka's ``LogManager`` for one log directory)."""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from typing import Any
from pathlib import Path

from storage.checkpoint import read_offsets, write_atomically, write_offsets
from storage.clock import SYSTEM_CLOCK, Clock
from storage.config import (
    TOPIC_PROPERTIES_SUFFIX,
    load_broker_config,
    load_log_config,
    load_manager_config,
)
from storage.errors import (
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaStorageError,
    NotALogDirectoryError,
    PartitionExistsError,
    ReadOnlyLogError,
    UnknownTopicOrPartitionError,
)
from storage.damage import LogDamage
from storage.dir_watch import RETIRED_S, DirectoryWatch
from storage.file_lock import FileLock
from storage.log_files import (
    CLEAN_SHUTDOWN_FILE,
    CLUSTER_METADATA_TOPIC,
    LOG_DIR_FILES,
    NOT_A_LOG_DIR,
    NOT_DATA_LOGS,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT,
    is_partition_file,
    parse_segment_file_name,
)
from storage.log import Log
from storage.log_reader import decoded_batch_cache
from storage.log_loader import IntactDataAfterDamageError
from storage.open_files import FilePool
from storage.quarantine import Quarantine, QuarantineError, default_root
from storage.salvage import plan_partition, salvage_partition
from storage.topic_partition import has_collision, parse_partition_dir_name

log = logging.getLogger(__name__)

# What a partition's own bytes can raise while it opens: that partition alone is affected.
_DAMAGE = (CorruptRecordError, InvalidRecordError, CorruptIndexError, QuarantineError)


def is_log_directory(path: str | os.PathLike) -> bool:
    """Whether ``path`` looks like a Kafka log directory: it holds a ``<topic>-<N>`` partition
    directory (not one holding foreign files: :func:`foreign_file`), a broker's
    ``meta.properties`` or a file kfs or a broker keeps at the top of one (``.lock``, the
    checkpoints, ``.kafka_cleanshutdown``, ``server.properties``, ``<topic>.topic.properties``).
    False for an empty directory, or ``/etc`` (whose ``dbus-1/`` only looks like a partition)."""
    with os.scandir(path) as entries:
        for entry in entries:
            if entry.name in LOG_DIR_FILES or entry.name.endswith(TOPIC_PROPERTIES_SUFFIX):
                return True
            try:
                parse_partition_dir_name(entry.name)
            except InvalidTopicError:
                continue
            if entry.is_dir() and foreign_file(entry.path) is None:
                return True
    return False


def foreign_file(partition_dir: str | os.PathLike) -> str | None:
    """The first (by name) entry of a ``<topic>-<N>`` directory that neither kfs nor a broker
    writes there (``storage.log_files.is_partition_file``), when the directory also holds no
    segment and no ``partition.metadata``: then it is not a partition, only named like one
    (``/etc/dbus-1``), and kfs must neither load nor write it. None for a partition (an empty
    directory is one, as Kafka loads it; so is one that cannot be listed: opening it says why)."""
    foreign = []
    try:
        with os.scandir(partition_dir) as entries:
            for entry in entries:
                if entry.name == PARTITION_METADATA_FILE or parse_segment_file_name(entry.name):
                    return None
                if not is_partition_file(entry.name):
                    foreign.append(entry.name)
    except OSError:
        return None
    return min(foreign, default=None)


def not_a_partition(path: str | os.PathLike, foreign: str) -> str:
    """Why ``path`` is not loaded as a partition, ``foreign`` its first foreign file."""
    return (f"{path} is not a Kafka partition directory: it holds {foreign}, which neither kfs "
            "nor a broker writes, and no segment or partition.metadata")


class LogManager:
    """Every partition log of ``backing_dir``.

    A writable manager creates ``backing_dir`` if missing, takes its ``.lock`` (waiting up to
    ``lock_timeout_s`` seconds; LogDirLockedError when another writer keeps it) and consumes
    Kafka's clean-shutdown marker: when it is absent (a crash), every segment from each log's
    recovery point (``recovery-point-offset-checkpoint``) on is revalidated.
    ``force_recovery=True`` revalidates every segment of every log, whatever the marker says.
    ``read_only=True`` takes no lock and never changes a byte; ``partitions(topic, n)`` (for
    read-only readers) opens only the partitions it accepts. Raises FileNotFoundError /
    NotADirectoryError for a bad directory and InvalidConfigError for bad settings. kfs writes
    nothing into a directory it does not recognise as Kafka's: a writable manager raises
    NotALogDirectoryError, before it takes the lock, for a non-empty directory that is not a log
    directory (``is_log_directory``) or one holding a ``<topic>-<N>`` directory of foreign files
    (``foreign_file``); a read-only one warns (``notices``) and skips such directories.

    A damaged partition never keeps the others from opening: one whose end cannot be read is
    served up to the damage with its appends refused (``Log.damage``); every byte recovery
    takes out goes to ``quarantine`` (default ``<backing_dir>.quarantine/<UTC time>/``, see
    ``storage.quarantine``) instead of being deleted, and is said in ``notices`` and
    ``Log.salvaged``; a partition that cannot be opened even so is logged and left out.

    ``clock`` (``storage.clock``) is the time of every log it opens and of their cleaner: a
    ``FixedClock`` holds a whole run at one instant (``kfs compact --now-ms``). ``files`` (a
    ``storage.open_files.FilePool``: ``KFS_OPEN_FILES`` descriptors, default 512) holds the
    ``.log`` descriptors of every log it opens, opened when read and closed when idle.
    ``decoded_batches`` (``storage.log_reader.decoded_batch_cache``) keeps the recently decoded
    batches of all its logs, bounded in all however many partitions are read.
    """

    def __init__(self, backing_dir: str | os.PathLike, read_only: bool = False, *,
                 force_recovery: bool = False, lock_timeout_s: float = 0.0,
                 partitions: Callable[[str, int], bool] | None = None,
                 quarantine: Quarantine | None = None, clock: Clock = SYSTEM_CLOCK):
        self.dir = Path(backing_dir)
        self.clock = clock
        self.files = FilePool()  # every log's .log descriptors, bounded together
        self.read_only = read_only
        # the recently decoded batches of all its logs' readers, bounded in all
        self.decoded_batches = decoded_batch_cache()
        self.quarantine = None if read_only else (
            quarantine or Quarantine(default_root(self.dir), keep_all=False, clock=clock))
        if not read_only:
            self.dir.mkdir(parents=True, exist_ok=True)
        if not self.dir.exists():
            raise FileNotFoundError(f"backing directory {self.dir} does not exist")
        if not self.dir.is_dir():
            raise NotADirectoryError(f"backing directory {self.dir} is not a directory")
        # what opening found that a user must hear of (a salvage at recovery), one line each
        self.notices: list[str] = []
        # <topic>-<N> directories that are not partitions ({name: first foreign file}): never
        # loaded, never written
        self.foreign: dict[str, str] = {}
        self._accepts = partitions
        # (before a byte is written: the lock, the marker consumed)
        found = self._partition_dirs(os.listdir(self.dir))
        self._refuse_or_skip_foreign()
        if not is_log_directory(self.dir) and (read_only or any(self.dir.iterdir())):
            if not read_only:  # (kfs would write its lock and checkpoints there)
                raise NotALogDirectoryError(
                    f"{self.dir} is {NOT_A_LOG_DIR}, and not empty: kfs writes nothing there "
                    "(it can be read read-only; to write, give an empty or new directory)")
            warning = f"{self.dir} is {NOT_A_LOG_DIR}: nothing to show until partitions appear there"
            log.warning("%s", warning)
            self.notices.append(f"warning: {warning}")
        self._broker_config = load_broker_config(self.dir)
        self.config = load_manager_config(self.dir)
        self._file_lock = None if read_only else FileLock(self.dir, lock_timeout_s, clock)
        self._lock = threading.RLock()
        self._logs: dict[str, Log] = {}
        # read-only: partitions listed but not opened yet ({name: (topic, partition)})
        self._unopened: dict[str, tuple[str, int]] = {}
        # (recovery point, log start offset) of partitions left out: kept in the checkpoints
        self._left_out: dict[str, tuple[int, int]] = {}
        # following another writer (read-only): what the directory and checkpoint looked like,
        # and logs of deleted partitions waiting to close
        self._retired: list[tuple[float, Log]] = []
        self._dir_watch = DirectoryWatch(self.dir, clock)
        self._start_offsets_stamp: tuple[int, int] | None = None
        try:
            self._clean = self._consume_clean_shutdown_marker() and not force_recovery
            self._recovery_points_read = ({} if force_recovery else
                                          self._read_checkpoint(RECOVERY_POINT_CHECKPOINT))
            self._start_offsets = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
            if not read_only:  # (listed again under the lock: its last holder may have added some)
                found = self._partition_dirs(os.listdir(self.dir), known=set(found))
            for name, topic_partition in found.items():
                if read_only:  # opened when first asked for: memory and descriptors follow use
                    self._unopened[name] = topic_partition
                else:
                    self._open(name, *topic_partition)
        except BaseException:
            for log_ in self._logs.values():
                log_.close()
            if self._file_lock is not None:
                self._file_lock.release()
            raise

    def _partition_dirs(self, names: list[str], known=frozenset()) -> dict[str, tuple[str, int]]:
        """``{name: (topic, partition)}`` of the partition directories among ``names`` that
        this manager serves (not KRaft's metadata log, nor what ``partitions`` refuses, nor a
        directory only named like a partition: noted in ``foreign``, the ``known`` names are
        not looked into again)."""
        found = {}
        for name in sorted(names):
            if name in NOT_DATA_LOGS or name in self.foreign:
                continue
            try:
                topic, partition = parse_partition_dir_name(name)
            except InvalidTopicError:
                continue
            if (self._accepts is None or self._accepts(topic, partition)) and \
                    (self.dir / name).is_dir():
                foreign = None if name in known else foreign_file(self.dir / name)
                if foreign is None:
                    found[name] = (topic, partition)
                else:
                    self.foreign[name] = foreign
        return found

    def _refuse_or_skip_foreign(self) -> None:
        """A writable manager refuses a directory with a ``<topic>-<N>`` directory that is not
        a partition (it would write Kafka's files into it: NotALogDirectoryError naming the
        first); a read-only one skips each, with a warning."""
        for name, foreign in sorted(self.foreign.items()):
            reason = not_a_partition(self.dir / name, foreign)
            if not self.read_only:
                raise NotALogDirectoryError(
                    f"{reason}: kfs writes nothing there (move it out of {self.dir}; a "
                    "read-only open skips it)")
            log.warning("%s: skipped", reason)
            self.notices.append(f"warning: {reason}: skipped")

    def _open(self, name: str, topic: str, partition: int) -> Log | None:
        """Open partition ``name`` into ``_logs`` (None, noted as left out, when it cannot
        be read)."""
        opened = self._open_damaged_too(
            self.dir / name, topic, partition, had_clean_shutdown=self._clean,
            recovery_point=self._recovery_points_read.get(name, 0),
            log_start_offset=self._start_offsets.get(name, 0))
        if opened is None:
            self._left_out[name] = (self._recovery_points_read.get(name, 0),
                                    self._start_offsets.get(name, 0))
        else:
            self._logs[name] = opened
        return opened

    def _read_checkpoint(self, name: str) -> dict[str, int]:
        try:
            return read_offsets(self.dir / name)
        except CorruptCheckpointError as e:  # recover everything rather than refuse the directory
            log.warning("%s; treating it as absent", e)
            return {}

    def _consume_clean_shutdown_marker(self) -> bool:
        """Kafka deletes the marker at startup: a crash before the next clean close leaves
        none, and the next start recovers."""
        marker = self.dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean and not self.read_only:
            marker.unlink()
        return clean

    def _open_log(self, path: Path, topic: str, partition: int, writable: bool, **offsets) -> Log:
        """The log of ``path``. A writable open whose recovery meets damage with intact
        batches after it salvages the partition first (``storage.salvage``: only the bytes
        that are not intact batches go to the quarantine, every intact batch stays, the offsets
        keep a gap and are never reused), then recovers it, and says so (``notices``, the log,
        ``Log.salvaged``): kfs has no replica to fetch the rest from, as a Kafka follower
        truncating there would. What recovery cuts (kept in the quarantine) is said the same
        way."""
        config = load_log_config(self.dir, topic, self._broker_config)
        if not writable:
            return Log(path, topic, partition, config, writable=False, clock=self.clock,
                       files=self.files, decoded_batches=self.decoded_batches, **offsets)
        try:
            log_ = Log(path, topic, partition, config, quarantine=self.quarantine,
                       salvage=True, clock=self.clock, files=self.files,
                       decoded_batches=self.decoded_batches,
                       **offsets)
        except IntactDataAfterDamageError as damage:
            plan = plan_partition(path)
            salvage_partition(plan, self.quarantine)
            offsets.update(had_clean_shutdown=False, recovery_point=0)
            log_ = Log(path, topic, partition, config, quarantine=self.quarantine,
                       clock=self.clock, files=self.files,
                       decoded_batches=self.decoded_batches, **offsets)
            salvaged = _salvage_summary(plan, damage, self.quarantine.directory)
            for line in salvaged:
                log.error("%s: %s", path.name, line)
            log_.salvaged[:0] = salvaged
        # every cut at open (recovery's are logged by the loader) is said to the user too
        self.notices.extend(f"{path.name}: {line}" for line in log_.salvaged)
        return log_

    def _open_damaged_too(self, path: Path, topic: str, partition: int, **offsets) -> Log | None:
        """The log of ``path``; when its data stops even a recovering open, the log opened
        read-only with that damage (appends refused); None (logged) when it cannot be read
        at all."""
        try:
            return self._open_log(path, topic, partition, not self.read_only, **offsets)
        except _DAMAGE as exc:
            log.error("%s: cannot open the partition: %s", path, exc)
            if self.read_only:
                return None
            reason = str(exc)
        try:
            log_ = self._open_log(path, topic, partition, False, **offsets)
        except _DAMAGE as again:
            log.error("%s: left out, it cannot be read either: %s", path, again)
            return None
        log_.damage = log_.damage or LogDamage("", None, log_.log_end_offset, reason)
        log.error("%s is served read-only up to its damage (%s); appends are refused until "
                  "`kfs verify --repair`", path, log_.damage)
        return log_

    def partition_names(self) -> list[str]:
        """Sorted ``<topic>-<N>`` names of the partitions (in memory: no disk)."""
        return sorted([*self._logs, *self._unopened])

    def get(self, name: str) -> Log:
        """The log of partition ``name``, opened on first use by a read-only manager (in memory
        after that); raises UnknownTopicOrPartitionError (also for a partition that cannot be
        read: logged, and left out from then on)."""
        log_ = self._logs.get(name)
        if log_ is not None:
            return log_
        with self._lock:
            topic_partition = self._unopened.pop(name, None)
            log_ = self._logs.get(name) or (
                self._open(name, *topic_partition) if topic_partition else None)
        if log_ is None:
            raise UnknownTopicOrPartitionError(f"no partition {name!r} in {self.dir}")
        return log_

    # -- following another writer (a read-only manager of a running broker's directory) -----

    def catch_up_partitions(self) -> bool:
        """Take in the partitions another process (a running broker) created or deleted in
        the backing directory since the last call: one ``stat`` of the directory, and a listing
        only when its mtime moved (see ``Log.catch_up``). A deleted partition's log closes a
        minute later (readers may be in it). Returns whether the set changed. A writable
        manager (kfs is the only writer) never changes here."""
        if not self.read_only:
            return False
        names = self._dir_watch.names()
        if names is None:
            return False
        with self._lock:
            known = set(self._logs) | set(self._unopened) | set(self._left_out)
        found = self._partition_dirs(names, known)
        with self._lock:
            for name in known - set(found):
                log.info("%s: partition %s is gone", self.dir, name)
                self._unopened.pop(name, None)
                self._left_out.pop(name, None)
                gone = self._logs.pop(name, None)
                if gone is not None:
                    self._retired.append((self.clock.monotonic() + RETIRED_S, gone))
            for name in set(found) - known:
                log.info("%s: new partition %s", self.dir, name)
                self._unopened[name] = found[name]
            due = [l for t, l in self._retired if t <= self.clock.monotonic()]
            self._retired = [(t, l) for t, l in self._retired if l not in due]
        for log_ in due:
            log_.close()
        return bool(known ^ set(found))

    def catch_up(self, name: str) -> Log:
        """The log of ``name`` (as :meth:`get`) brought up to date with the files another
        process writes (``Log.catch_up``), with the log start offset the broker checkpointed
        (``log-start-offset-checkpoint``, read again when it changed)."""
        log_ = self.get(name)
        if self.read_only:
            log_.catch_up(self._checkpointed_start_offsets().get(name, 0))
        return log_

    def checkpointed_log_start_offset(self, name: str) -> int:
        """The log start offset of ``name`` in ``log-start-offset-checkpoint`` now (0 when it
        has none; read again when the file changed): a broker's word for where a tiered
        partition starts, which its local segments cannot say."""
        return self._checkpointed_start_offsets().get(name, 0)

    def _checkpointed_start_offsets(self) -> dict[str, int]:
        try:
            st = os.stat(self.dir / LOG_START_OFFSET_CHECKPOINT)
        except FileNotFoundError:
            return self._start_offsets
        stamp = (st.st_ino, st.st_mtime_ns)
        if stamp != self._start_offsets_stamp:
            self._start_offsets_stamp = stamp
            self._start_offsets = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        return self._start_offsets

    def create(self, name: str) -> Log:
        """Create partition ``name`` (``<topic>-<N>``): its directory, ``partition.metadata``
        (the topic id shared by the topic's partitions) and an empty active segment at offset 0.
        Raises ReadOnlyLogError, InvalidTopicError (also for KRaft's ``__cluster_metadata``,
        whose creation Kafka refuses), PartitionExistsError, InvalidConfigError (the topic's
        settings), OSError (nothing is left behind)."""
        if self.read_only:
            raise ReadOnlyLogError(f"{self.dir} is mounted read-only")
        topic, partition = parse_partition_dir_name(name)
        if topic == CLUSTER_METADATA_TOPIC:
            raise InvalidTopicError(f"Creation of internal topic {topic} is prohibited.")
        config = load_log_config(self.dir, topic, self._broker_config)
        with self._lock:
            path = self.dir / name
            if name in self._logs or path.exists():
                raise PartitionExistsError(f"partition {name} already exists")
            self._refuse_collision(topic)
            path.mkdir()
            try:
                write_atomically(path / PARTITION_METADATA_FILE,
                                  f"version: 0\ntopic_id: {self._topic_id(topic)}")
                log_ = Log(path, topic, partition, config, writable=True, clock=self.clock,
                           files=self.files, decoded_batches=self.decoded_batches)
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)  # no half-made partition
                raise
            self._logs[name] = log_
            return log_

    def _refuse_collision(self, topic: str) -> None:
        """InvalidTopicError when ``topic`` collides with a topic of the directory (``a.b``
        beside ``a_b``), as Kafka refuses to create it (``Topic.hasCollision``)."""
        topics = {t for t, _ in self._unopened.values()} | {l.topic for l in self._logs.values()}
        for name in os.listdir(self.dir):  # (partitions left out count too)
            try:
                topics.add(parse_partition_dir_name(name)[0])
            except InvalidTopicError:
                continue
        colliding = sorted(t for t in topics if t != topic and has_collision(t, topic))
        if colliding:
            raise InvalidTopicError(f"Topic '{topic}' collides with existing topics: "
                                    f"{', '.join(colliding)}")

    def _topic_id(self, topic: str) -> str:
        """The topic id of an existing partition of ``topic``, else a new random one, as
        base64url without padding (Kafka's ``Uuid.toString``)."""
        for log_ in self._logs.values():
            if log_.topic == topic:
                try:
                    text = (log_.dir / PARTITION_METADATA_FILE).read_text()
                    return text.split("topic_id:")[1].split()[0]
                except (OSError, IndexError):
                    continue
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    # -- background work (the mount schedules it; the CLI runs it on demand) ----------------

    def cleanup_logs(self, now: int | None = None) -> dict[str, int]:
        """Apply retention to every log (``LogManager.cleanupLogs``); returns
        ``{partition: segments deleted}`` for the partitions that lost any."""
        for log_ in self._writable_logs():
            log_.remove_expired_producers(now)
        deleted = {log_.name: n for log_ in self._writable_logs()
                   if (n := log_.delete_old_segments(now))}
        if deleted:
            self.checkpoint_log_start_offsets()
        return deleted

    def retention_plans(self, now: int | None = None) -> dict[str, list[tuple[Any, str]]]:
        """``{partition: Log.retention_plan}`` of the partitions retention would change now
        (nothing is deleted). A read-only manager plans too, beside the writer that holds the
        directory (a mount, a broker): every partition it can open, but a damaged one, as a
        writable manager would leave it to a repair."""
        if not self.read_only:
            logs = self._writable_logs()
        else:
            logs = []
            for name in self.partition_names():
                try:
                    log_ = self.get(name)
                except UnknownTopicOrPartitionError:  # (cannot be read: logged)
                    continue
                if log_.damage is None:
                    logs.append(log_)
        return {log_.name: plan for log_ in logs if (plan := log_.retention_plan(now))}

    def abort_timed_out_transactions(self, now: int | None = None) -> dict[str, list]:
        """Abort, fencing their producers, the transactions open longer than
        ``transaction.timeout.ms`` (the coordinator's job each
        ``transaction.abort.timed.out.transaction.cleanup.interval.ms``); returns
        ``{partition: [OpenTransaction aborted]}`` for the partitions that had any (each
        logged). A partition whose marker cannot be written is logged and skipped."""
        out = {}
        for log_ in self._writable_logs():
            try:
                aborted = log_.abort_timed_out_transactions(self.config.transaction_timeout_ms,
                                                            now)
            except (KafkaStorageError, OSError) as exc:
                log.error("%s: cannot abort its timed-out transactions: %s", log_.name, exc)
                continue
            for txn in aborted:
                log.warning("%s: aborted the transaction of producer %d (epoch %d) open since "
                            "offset %d for more than transaction.timeout.ms=%d; the producer "
                            "is fenced", log_.name, txn.producer_id, txn.producer_epoch,
                            txn.first_offset, self.config.transaction_timeout_ms)
            if aborted:
                out[log_.name] = aborted
        return out

    def delete_due_files(self, now: int | None = None) -> None:
        """Remove ``.deleted`` files whose ``file.delete.delay.ms`` has passed."""
        for log_ in self._writable_logs():
            log_.delete_due_files(now)

    def flush_dirty_logs(self, now: int) -> None:
        """Flush every log whose ``flush.ms`` has passed (``LogManager.flushDirtyLogs``)."""
        for log_ in self._writable_logs():
            log_.flush_if_due(now)

    def checkpoint_recovery_points(self) -> None:
        """Write ``recovery-point-offset-checkpoint`` (``LogManager.checkpointLogRecoveryOffsets``)."""
        if not self.read_only:
            write_offsets(self.dir / RECOVERY_POINT_CHECKPOINT, self._recovery_points())

    def checkpoint_log_start_offsets(self) -> None:
        """Write ``log-start-offset-checkpoint`` for logs whose log start offset is above their
        first segment's base offset, as Kafka does."""
        if not self.read_only:
            write_offsets(self.dir / LOG_START_OFFSET_CHECKPOINT, self._log_start_offsets())

    def _recovery_points(self) -> dict[str, int]:
        return {**{name: rp for name, (rp, _) in self._left_out.items() if rp},
                **{name: l.recovery_point for name, l in self._logs.items()}}

    def _log_start_offsets(self) -> dict[str, int]:
        return {**{name: start for name, (_, start) in self._left_out.items() if start},
                **{name: l.log_start_offset for name, l in self._logs.items()
                   if l.log_start_offset > (l.segments.first_base_offset or 0)}}

    def _writable_logs(self) -> list[Log]:
        """The logs background jobs may change: none of a damaged one (left for a repair)."""
        with self._lock:
            return [] if self.read_only else [l for l in self._logs.values()
                                              if l.damage is None and l.offline is None]

    def close(self) -> None:
        """Flush and close every log, write the checkpoints and, when writable, Kafka's
        clean-shutdown marker (written last: it tells the next start that recovery can be
        skipped; not when a log went offline, ``Log.offline``: the next start recovers it), then
        release the lock. An OSError (e.g. ENOSPC) is raised after everything is closed and the
        lock released; the next start then recovers."""
        with self._lock:
            try:
                offline = [l for l in self._logs.values() if l.offline is not None]
                for log_ in self._logs.values():
                    if log_.offline is None:
                        log_.flush()
                recovery_points, start_offsets = self._recovery_points(), self._log_start_offsets()
                for log_ in self._logs.values():
                    log_.close()  # trims the indexes: frees the space the checkpoints need
                self._logs.clear()
                if not self.read_only:
                    write_offsets(self.dir / RECOVERY_POINT_CHECKPOINT, recovery_points)
                    write_offsets(self.dir / LOG_START_OFFSET_CHECKPOINT, start_offsets)
                if not self.read_only and not offline:
                    write_atomically(self.dir / CLEAN_SHUTDOWN_FILE,
                                     json.dumps({"version": 0, "brokerEpoch": 0},
                                                separators=(",", ":")))
            finally:
                try:
                    for log_ in [*self._logs.values(), *(l for _, l in self._retired)]:
                        log_.close()
                finally:  # (a close failing on a failing disk still lets the next start in)
                    self._logs.clear()
                    self._retired.clear()
                    if self._file_lock is not None:
                        self._file_lock.release()
                        self._file_lock = None


def _salvage_summary(plan, damage: IntactDataAfterDamageError, quarantine: Path | None
                     ) -> list[str]:
    """What a salvage at open did, for the user: the damage, each run of offsets cut into the
    quarantine, and that the intact batches after it stayed."""
    lines = [f"recovery found {damage.problem} at byte {damage.position} of {damage.path.name}"]
    for segment in plan.segments:
        for cut in segment.cuts:
            first, last = plan.lost_offsets(segment, cut)
            kept = plan.kept_after(segment, cut)
            lines.append(
                f"offsets {first}-{'end' if last is None else last} ({cut.end - cut.start} bytes "
                f"of {segment.path.name}) were cut into the quarantine {quarantine}"
                + (f"; offsets {kept[0]}-{kept[1]} after them are kept where they were (an "
                   "offset gap remains; no offset is reused)" if kept else ""))
    return lines
