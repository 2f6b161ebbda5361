"""``kfs adopt BACKING_DIR BROKER_LOG_DIR [PARTITION...]``: hand kfs's partition directories to
a stopped Kafka broker (KRaft), so that it serves them as they are.

A KRaft broker serves only the partitions its cluster metadata knows, and treats a partition
directory whose ``partition.metadata`` names another topic ID as stray. So the topic must exist
in the cluster first, with the same name and at least as many partitions (its partition
directories, holding no records yet, are in the broker's log directory), and the broker must be
stopped cleanly (``.kafka_cleanshutdown``). Then, for each partition:

1. The backing directory is opened and closed by the engine (under its ``.lock``: no kfs mount
   may be running), which leaves every partition as Kafka's loader keeps it: indexes trimmed, a
   producer snapshot at the log end offset, none that the loader would delete (stray snapshots,
   one at the log start offset), the clean-shutdown marker.
2. The partition directory is copied into the broker's log directory under a name Kafka itself
   uses for a directory to delete (``<topic>-<N>.<32 hex>-delete``: a broker started after an
   interrupted copy deletes it), fsynced, its ``partition.metadata`` written with the cluster's
   topic ID (Kafka's exact text), then swapped in for the broker's empty directory.
3. The broker's log-directory checkpoints get the partition's offsets: recovery point,
   high watermark (``replication-offset-checkpoint``: the log end offset, every record being
   committed), log start offset (when above the first segment's base offset) and the cleaner's
   checkpoint (so that a compacted partition is not cleaned again from its start).

The broker's ``.lock`` is held throughout, so it cannot start in the middle. When it starts, it
loads the partitions with no recovery, truncation or file changed. One change is by design: when
the broker becomes the partitions' leader it appends its new leader epoch (with the log end
offset) to ``leader-epoch-checkpoint``; and while it runs, the active segment's ``.index`` and
``.timeindex`` are preallocated to ``segment.index.bytes`` (trimmed back at its clean shutdown).

From then on the cluster's topic configuration applies (retention, compaction): create the
topic with the settings kfs had (``<topic>.topic.properties``). Refused: a partition with
damage (``kfs verify --repair`` first), one with a transaction still open (the cluster's
coordinator knows nothing of it and would leave it hanging: end it with ``kfs transactions
... abort`` first, or pass ``--allow-open-transactions``), and a broker partition that already
holds records (``--overwrite`` replaces them). ``--dry-run`` says what would be done.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from storage.log_files import (
    CLEAN_SHUTDOWN_FILE,
    CLEANER_OFFSET_CHECKPOINT,
    DELETE_DIR_SUFFIX,
    HIGH_WATERMARK_CHECKPOINT,
    LEADER_EPOCH_CHECKPOINT,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    LOG_SUFFIX,
    META_PROPERTIES_FILE,
    PARTITION_FILE_SUFFIXES,
    PARTITION_METADATA_FILE,
    RECOVERY_POINT_CHECKPOINT,
)

# What a partition directory of Kafka's holds (other files are not copied)
_NAMED_FILES = (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA_FILE)


class AdoptError(Exception):
    """Why nothing (more) was adopted; printed as ``kfs adopt: error: ...``, exit status 1."""


@dataclass
class Partition:
    """One partition to adopt: what the engine found in the backing directory, and the
    cluster's topic ID from the broker's directory of the same name."""

    name: str
    topic: str
    log_start_offset: int
    log_end_offset: int
    first_base_offset: int
    segments: int
    open_transactions: int
    latest_epoch: int  # the highest leader epoch of leader-epoch-checkpoint (-1: none)
    topic_id: str = ""
    replaces_records: bool = False


def add_parser(sub) -> None:
    p = sub.add_parser(
        "adopt",
        help="hand partition directories to a stopped Kafka broker, which then serves them",
        description=(
            "Copy the partitions of BACKING_DIR (all, or the PARTITIONs named) into "
            "BROKER_LOG_DIR, the log.dirs directory of a stopped KRaft broker, so that it "
            "serves them as they are: no recovery, no truncation, no file changed at its load. "
            "First create each topic in the cluster with the same name, at least as many "
            "partitions and the settings kfs had (kafka-topics.sh --create --topic T "
            "--partitions N --replication-factor 1 --config ...), then stop the broker cleanly. "
            "kfs adopt then writes the cluster's topic ID into each partition.metadata, swaps "
            "the partition directories in for the broker's empty ones and sets the partitions' "
            "offsets in the broker's checkpoints (recovery point, high watermark, log start, "
            "cleaner). No kfs mount may be running on BACKING_DIR: it is opened and closed as "
            "a mount would (recovered first after a crash), and keeps its partitions (they are "
            "copied). Refused: damaged partitions (kfs verify --repair first), open "
            "transactions, broker partitions holding records. When the broker starts and leads "
            "the partitions, it appends its leader epoch to each leader-epoch-checkpoint. Exit "
            "status: 0 adopted, 1 refused (the broker's directory unchanged), 2 usage error."),
    )
    p.add_argument("backing_dir", metavar="BACKING_DIR")
    p.add_argument("broker_log_dir", metavar="BROKER_LOG_DIR",
                   help="the stopped broker's log directory (its log.dirs)")
    p.add_argument("partitions", metavar="PARTITION", nargs="*",
                   help="partitions to adopt, e.g. orders-0 (default: all of BACKING_DIR)")
    p.add_argument("-n", "--dry-run", action="store_true",
                   help="check everything and say what would be done; change nothing")
    p.add_argument("--overwrite", action="store_true",
                   help="replace broker partitions that already hold records (they are lost)")
    p.add_argument("--allow-open-transactions", action="store_true",
                   help="adopt partitions with transactions that have no COMMIT/ABORT marker "
                        "(the cluster's coordinator does not know them: they stay open, and "
                        "read_committed consumers stop at them)")
    p.set_defaults(func=main, more_positionals="partitions")


def main(args: argparse.Namespace) -> int:
    for path, what in ((args.backing_dir, "backing directory"),
                       (args.broker_log_dir, "broker log directory")):
        if not os.path.isdir(path):
            print(f"kfs adopt: error: {what} {path} does not exist", file=sys.stderr)
            return 2
    try:
        adopt(args.backing_dir, args.broker_log_dir, args.partitions, dry_run=args.dry_run,
              overwrite=args.overwrite, allow_open_transactions=args.allow_open_transactions)
    except AdoptError as exc:
        print(f"kfs adopt: error: {exc}", file=sys.stderr)
        return 1
    return 0


def adopt(backing_dir, broker_log_dir, partitions: list[str] | None = None, *,
          dry_run: bool = False, overwrite: bool = False,
          allow_open_transactions: bool = False, out: TextIO | None = None) -> list[Partition]:
    """Adopt ``partitions`` (default: all) of ``backing_dir`` into ``broker_log_dir`` as the
    module's text says; returns them. Raises AdoptError when anything is refused (before any
    change to the broker's directory); OSError from the copy."""
    from storage.checkpoint import write_offsets
    from storage.errors import KafkaStorageError, LogDirLockedError
    from storage.file_lock import FileLock

    out = out or sys.stdout
    backing, broker = Path(backing_dir), Path(broker_log_dir)
    if not (broker / META_PROPERTIES_FILE).is_file():
        raise AdoptError(f"{broker} is not a formatted Kafka log directory (no {META_PROPERTIES_FILE}): "
                         "format it (kafka-storage.sh format), start the broker, create the "
                         "topics, stop the broker")
    lock_file = broker / LOCK_FILE
    lock_existed = lock_file.exists()  # a broker deletes its .lock at a clean shutdown
    try:
        broker_lock = FileLock(broker)  # held throughout: the broker cannot start meanwhile
    except LogDirLockedError:
        raise AdoptError(f"a broker is running on {broker} (it holds {lock_file}): "
                         "stop it cleanly first") from None
    try:
        if not (broker / CLEAN_SHUTDOWN_FILE).exists():
            raise AdoptError(f"the broker of {broker} did not shut down cleanly (no "
                             f"{CLEAN_SHUTDOWN_FILE}): start it and stop it cleanly first")
        _check_settings(backing, partitions)
        try:
            found = _close_cleanly(backing, partitions)
        except LogDirLockedError:
            raise AdoptError(f"{backing} is in use (a kfs mount or another writer holds its "
                             ".lock): unmount it first") from None
        except KafkaStorageError as exc:
            raise AdoptError(str(exc)) from None
        _verify(backing, found)
        _check(found, backing, broker, overwrite, allow_open_transactions)
        for p in found:
            print(f"{p.name}: {_describe(p)} -> {broker / p.name} (topic ID {p.topic_id})"
                  + (", replacing the broker's records" if p.replaces_records else ""),
                  file=out)
        for p in found:
            if p.latest_epoch > 0:
                print(f"note: {p.name}'s records carry leader epochs up to {p.latest_epoch}, "
                      "from the cluster that led it before: a broker that leads it at a lower "
                      "epoch drops the higher ones from its leader-epoch-checkpoint (as after "
                      "an unclean election; the records stay)", file=out)
        checkpoints = _checkpoints(backing, broker, found)  # read (and checked) first
        if dry_run:
            print("nothing changed (--dry-run)", file=out)
            return found
        for p in found:
            _swap_in(backing / p.name, broker, p)
        try:
            for path, offsets in checkpoints.items():
                write_offsets(path, offsets)
        except OSError as exc:  # (each partition is whole: a new adopt writes them again)
            raise _copied_in_whole(exc, f"the broker's {path.name}") from exc
        print(f"adopted {len(found)} partition{'s' if len(found) != 1 else ''}: start the "
              "broker; it appends its leader epoch to each leader-epoch-checkpoint when it "
              "leads them", file=out)
        return found
    finally:
        if not lock_existed:  # as Kafka's FileLock.destroy, but before the lock is let go
            lock_file.unlink(missing_ok=True)
        broker_lock.release()


def _close_cleanly(backing: Path, names: list[str] | None) -> list[Partition]:
    """Open ``backing`` writable and close it: what Kafka's loader would change, the engine's
    own load and close settle now (recovery after a crash, stray snapshots, the snapshot at
    the log end offset). Returns the partitions named (all by default)."""
    from storage.directory import open_log_directory

    if not backing.is_dir():
        raise AdoptError(f"backing directory {backing} does not exist")
    mgr = open_log_directory(backing, read_only=False)
    try:
        known = mgr.partition_names()
        if not known:
            raise AdoptError(f"{backing} holds no partition directory")
        unknown = [n for n in names or () if n not in known]
        if unknown:
            raise AdoptError(f"no partition {', '.join(unknown)} in {backing}")
        found = []
        for name in names or known:
            log_ = mgr.get(name)
            if log_.damage is not None:
                raise AdoptError(f"{name} is damaged ({log_.damage}): run kfs verify --repair "
                                 f"{backing} {name} first")
            segments = log_.segments.all()
            found.append(Partition(name, log_.topic, log_.log_start_offset,
                                   log_.log_end_offset, segments[0].base_offset, len(segments),
                                   len(log_.open_transactions()), log_.epochs.latest_epoch))
        return found
    finally:
        mgr.close()


def _check_settings(backing: Path, names: list[str] | None) -> None:
    """AdoptError for the first partition (of ``names``, default all) whose topic has a setting
    a Kafka broker refuses (``segment.bytes`` under 1 MiB): ``kafka-topics.sh --create
    --config`` would fail, and the cluster's settings replace kfs's anyway. Checked before the
    engine opens the directory, which would warn of it as well."""
    from storage.config import kafka_refusals
    from storage.errors import InvalidTopicError
    from storage.topic_partition import parse_partition_dir_name

    for name in names or sorted(os.listdir(backing)):
        try:
            topic, _ = parse_partition_dir_name(name)
        except InvalidTopicError:
            continue
        path, props = _topic_properties(backing, topic)
        if refusals := kafka_refusals(props):
            raise AdoptError(f"{name}: {refusals[0]} ({path}): the broker refuses it, and the "
                             "topic's settings in the cluster replace kfs's: set it in range "
                             "or remove it (the segments already written stay as they are), "
                             "then adopt again")


def _verify(backing: Path, found: list[Partition]) -> None:
    """AdoptError for the first partition ``kfs verify`` finds a problem in (a batch failing
    its CRC that a clean shutdown let through, a bad index entry, ...): the broker would
    serve it as it is, and its consumers would fail on it."""
    from .verify import verify_partition

    for p in found:
        problems = [str(problem) for problem in verify_partition(backing / p.name)]
        if problems:
            more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
            raise AdoptError(f"{p.name} is damaged ({problems[0]}{more}): run kfs verify "
                             f"--repair {backing} {p.name} first")


def _check(found: list[Partition], backing: Path, broker: Path, overwrite: bool,
           allow_open_transactions: bool) -> None:
    """Fill in each partition's cluster topic ID; AdoptError for anything that refuses it."""
    missing: dict[str, int] = {}
    for p in found:
        try:
            p.topic_id = _topic_id(broker / p.name / PARTITION_METADATA_FILE)
        except FileNotFoundError:
            partitions = 1 + max(int(q.name.rpartition("-")[2]) for q in found
                                 if q.topic == p.topic)
            missing[p.topic] = partitions
    if missing:
        lines = [f"kafka-topics.sh --bootstrap-server HOST:PORT --create --topic {topic} "
                 f"--partitions {n} --replication-factor 1{_config_flags(backing, topic)}"
                 for topic, n in sorted(missing.items())]
        raise AdoptError("the cluster does not have these partitions in "
                         f"{broker}: create the topics (same partition counts, the settings "
                         "kfs had), stop the broker, adopt again:\n  " + "\n  ".join(lines))
    for p in found:
        if p.open_transactions and not allow_open_transactions:
            raise AdoptError(
                f"{p.name} has {p.open_transactions} open transaction(s) the cluster's "
                f"coordinator does not know (they would hang): end them with kfs transactions "
                f"{backing} abort ..., or pass --allow-open-transactions")
    for p in found:
        p.replaces_records = _holds_records(broker / p.name)
        if p.replaces_records and not overwrite:
            raise AdoptError(f"{broker / p.name} already holds records: pass --overwrite to "
                             "replace them")


def _topic_id(path: Path) -> str:
    for line in path.read_text().splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "topic_id" and value.strip():
            return value.strip()
    raise AdoptError(f"{path} names no topic_id")


def _topic_properties(backing: Path, topic: str) -> tuple[Path, dict[str, str]]:
    from storage.config import TOPIC_PROPERTIES_SUFFIX, read_properties

    path = backing / f"{topic}{TOPIC_PROPERTIES_SUFFIX}"
    return path, read_properties(path)


def _config_flags(backing: Path, topic: str) -> str:
    """`` --config k=v`` for each setting of ``<topic>.topic.properties`` in ``backing`` that
    Kafka knows (not kfs's own ``batch.size``)."""
    from storage.config import KFS_ONLY_KEYS

    props = _topic_properties(backing, topic)[1]
    return "".join(f" --config {key}={value.strip()}" for key, value in props.items()
                   if key not in KFS_ONLY_KEYS)


def _holds_records(directory: Path) -> bool:
    return any(path.suffix == LOG_SUFFIX and path.stat().st_size > 0
               for path in directory.iterdir() if path.is_file())


def _describe(p: Partition) -> str:
    records = (f"offsets {p.log_start_offset}-{p.log_end_offset - 1}"
               if p.log_end_offset > p.log_start_offset else f"empty at offset {p.log_end_offset}")
    return f"{p.segments} segment{'s' if p.segments != 1 else ''}, {records}"


def _files(source: Path) -> list[Path]:
    return [path for path in sorted(source.iterdir()) if path.is_file() and (
        path.name in _NAMED_FILES or path.name.endswith(PARTITION_FILE_SUFFIXES))]


def _delete_dir_name(p: Partition) -> str:
    """A directory name the broker deletes at its start, as Kafka's ``logDeleteDirName`` makes
    one: ``<topic>-<N>.<32 hex>-delete``, the topic cut short to fit 255 bytes (a topic name
    may have 249 characters)."""
    suffix = f"-{p.name.rpartition('-')[2]}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
    return p.topic[:255 - len(suffix)] + suffix


def _swap_in(source: Path, broker: Path, p: Partition) -> None:
    """Copy ``source`` beside the broker's directory of the partition under a name Kafka
    deletes, fsync it, write the cluster's topic ID, then rename it over the broker's. On
    OSError the broker's directory is put back (each write through ``storage.disk_calls``)."""
    from storage import disk_calls
    from storage.checkpoint import fsync_directory, write_atomically

    staging = broker / _delete_dir_name(p)
    target, old = broker / p.name, broker / _delete_dir_name(p)
    staging.mkdir()
    try:
        for path in _files(source):
            _copy(path, staging / path.name)
        # PartitionMetadataFile's text, byte for byte (no newline at the end)
        write_atomically(staging / PARTITION_METADATA_FILE, f"version: 0\ntopic_id: {p.topic_id}")
        fsync_directory(staging)
        disk_calls.rename(target, old)
        disk_calls.rename(staging, target)
        fsync_directory(broker)
    except BaseException:
        if old.exists() and not staging.exists():  # swapped in: the broker's goes back
            os.rename(target, staging)
        if old.exists():
            os.rename(old, target)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(old)
    try:
        fsync_directory(broker)
    except OSError as exc:
        raise _copied_in_whole(exc, f"{broker} (its fsync)") from exc


def _copied_in_whole(exc: OSError, what: str) -> OSError:
    """An error after the point of no return: the partition is the broker's, whole."""
    return OSError(exc.errno, f"the partitions were copied in whole, but {what} could not be "
                   f"written ({exc.strerror}): adopt again with --overwrite before starting "
                   "the broker")


def _copy(source: Path, target: Path) -> None:
    """``source`` copied to ``target`` with its times (a segment's mtime is what retention
    reads when its records carry none), then fsynced."""
    from storage import disk_calls

    with open(source, "rb") as src:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        try:
            while chunk := src.read(1 << 20):
                disk_calls.write_all(fd, chunk)
            disk_calls.fsync(fd)
        finally:
            os.close(fd)
    shutil.copystat(source, target)


def _checkpoints(backing: Path, broker: Path, found: list[Partition]) -> dict[Path, dict[str, int]]:
    """The broker's log-directory checkpoints with the adopted partitions' entries set (every
    other entry as the broker wrote it): {path: offsets}. Raises AdoptError for a checkpoint
    that cannot be read."""
    from storage.checkpoint import read_offsets
    from storage.errors import CorruptCheckpointError

    try:
        kfs_recovery = read_offsets(backing / RECOVERY_POINT_CHECKPOINT)
        kfs_cleaner = read_offsets(backing / CLEANER_OFFSET_CHECKPOINT)
        wanted = {
            RECOVERY_POINT_CHECKPOINT: {
                p.name: kfs_recovery.get(p.name, p.log_end_offset) for p in found},
            HIGH_WATERMARK_CHECKPOINT: {p.name: p.log_end_offset for p in found},
            LOG_START_OFFSET_CHECKPOINT: {
                p.name: p.log_start_offset for p in found
                if p.log_start_offset > p.first_base_offset},
            CLEANER_OFFSET_CHECKPOINT: {
                p.name: kfs_cleaner[p.name] for p in found if p.name in kfs_cleaner},
        }
        names = {p.name for p in found}
        out = {}
        for checkpoint, entries in wanted.items():
            path = broker / checkpoint
            offsets = {n: o for n, o in read_offsets(path).items() if n not in names}
            offsets.update(entries)
            if offsets or path.exists():
                out[path] = offsets
        return out
    except CorruptCheckpointError as exc:
        raise AdoptError(str(exc)) from None
