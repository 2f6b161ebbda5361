"""Kafka's file names in a log directory, in one place (Kafka's ``LogFileUtils``, with the
names ``LogManager``, ``LogLoader``, ``LogCleanerManager``, ``ReplicaManager`` and the checkpoint
files keep beside it).

A segment's files are ``<base offset, 20 digits><kind>`` (``.log``, ``.index``, ``.timeindex``,
``.txnindex``), producer snapshots ``<offset, 20 digits>.snapshot``; a file being deleted,
cleaned or swapped in carries one more suffix (``.deleted``, ``.cleaned``, ``.swap``). Every
path of that form is made by :func:`offset_file` (through the builders named as Kafka's) and
read back by :func:`offset_from_file_name`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import NamedTuple

# -- a segment's and a snapshot's files (LogFileUtils) ----------------------------------------

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"  # renamed for a delayed delete (retention, a cleaner's swap)
CLEANED_SUFFIX = ".cleaned"  # a cleaner's output while it is written
SWAP_SUFFIX = ".swap"  # a cleaner's output about to replace the segments it cleaned

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# every file of a partition directory that holds records or state derived from them
PARTITION_FILE_SUFFIXES = (*SEGMENT_SUFFIXES, SNAPSHOT_SUFFIX)
# <base offset><segment suffix>[.cleaned|.swap|.deleted]: groups offset, suffix, extra suffix
_SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex)"
                          r"((?:\.cleaned|\.swap|\.deleted)?)")

# -- a partition directory's other files --------------------------------------------------------

PARTITION_METADATA_FILE = "partition.metadata"  # PartitionMetadataFile: the topic ID
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"  # LeaderEpochCheckpointFile
DELETE_DIR_SUFFIX = "-delete"  # UnifiedLog.DeleteDirSuffix: <topic>-<N>.<32 hex>-delete

# -- a log directory's files ----------------------------------------------------------------

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"  # LogManager
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"  # LogManager
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # LogCleanerManager
HIGH_WATERMARK_CHECKPOINT = "replication-offset-checkpoint"  # ReplicaManager (a broker's only)
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"  # LogLoader.CLEAN_SHUTDOWN_FILE
LOCK_FILE = ".lock"  # LogManager.LockFileName
META_PROPERTIES_FILE = "meta.properties"  # MetaPropertiesEnsemble (a formatted broker's only)
SERVER_PROPERTIES = "server.properties"  # the broker's settings, which kfs reads there too
# What a log directory holds at its top besides partitions: a formatted broker's
# meta.properties, and what kfs or a broker writes there (lock, checkpoints, clean-shutdown
# marker) or reads (kfs's settings)
LOG_DIR_FILES = frozenset({
    META_PROPERTIES_FILE, LOCK_FILE, CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT, CLEANER_OFFSET_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT,
    SERVER_PROPERTIES,
})
NOT_A_LOG_DIR = ("not a Kafka log directory (no <topic>-<N> partition directory, no "
                 "meta.properties, none of the files kfs or a broker writes there)")
CLUSTER_METADATA_TOPIC = "__cluster_metadata"  # KRaft's metadata log
# KRaft's metadata log is not a topic's data: no front end serves it as a partition
NOT_DATA_LOGS = frozenset({f"{CLUSTER_METADATA_TOPIC}-0"})


# what else Kafka keeps in a partition directory: snapshots, its two small files and their
# temporary copies while written (CheckpointFile, PartitionMetadataFile write "<name>.tmp")
_OTHER_PARTITION_FILE = re.compile(r"\d{20}\.snapshot(?:\.deleted)?|"
                                   r"(?:partition\.metadata|leader-epoch-checkpoint)(?:\.tmp)?")


def is_partition_file(name: str) -> bool:
    """Whether a broker or kfs writes a file named ``name`` in a partition directory: a
    segment's file (any extra suffix), a producer snapshot, ``partition.metadata``,
    ``leader-epoch-checkpoint`` or their ``.tmp`` copies."""
    return bool(_SEGMENT_FILE.fullmatch(name) or _OTHER_PARTITION_FILE.fullmatch(name))


class SegmentFileName(NamedTuple):
    """A segment file's name, parsed: base offset, kind (``.log``, ``.index``, ...) and the
    extra suffix (``""``, ``.cleaned``, ``.swap`` or ``.deleted``)."""

    offset: int
    kind: str
    extra: str


def filename_prefix(offset: int) -> str:
    """The 20-digit, zero-padded file name prefix of an offset
    (``LogFileUtils.filenamePrefixFromOffset``)."""
    return f"{offset:020d}"


def offset_file(directory: str | Path, offset: int, suffix: str) -> Path:
    """``<directory>/<20-digit offset><suffix>``: the one rule every builder below applies
    (``suffix`` is a kind with its extra suffix, e.g. ``.log.cleaned``)."""
    return Path(directory) / (filename_prefix(offset) + suffix)


def log_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """The ``.log`` of the segment at ``offset``, with an extra ``suffix``
    (``LogFileUtils.logFile``)."""
    return offset_file(directory, offset, LOG_SUFFIX + suffix)


def offset_index_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """The ``.index`` of the segment at ``offset`` (``LogFileUtils.offsetIndexFile``)."""
    return offset_file(directory, offset, INDEX_SUFFIX + suffix)


def time_index_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """The ``.timeindex`` of the segment at ``offset`` (``LogFileUtils.timeIndexFile``)."""
    return offset_file(directory, offset, TIME_INDEX_SUFFIX + suffix)


def transaction_index_file(directory: str | Path, offset: int, suffix: str = "") -> Path:
    """The ``.txnindex`` of the segment at ``offset`` (``LogFileUtils.transactionIndexFile``)."""
    return offset_file(directory, offset, TXN_INDEX_SUFFIX + suffix)


def producer_snapshot_file(directory: str | Path, offset: int) -> Path:
    """The producer snapshot taken at ``offset`` (``LogFileUtils.producerSnapshotFile``)."""
    return offset_file(directory, offset, SNAPSHOT_SUFFIX)


def offset_from_file_name(name: str) -> int:
    """The offset a file name starts with: the ASCII digits before its first ``.``
    (``LogFileUtils.offsetFromFileName``). Raises ValueError when there are none."""
    prefix = name.split(".", 1)[0]
    if not (prefix.isascii() and prefix.isdigit()):
        raise ValueError(f"no offset at the start of file name {name!r}")
    return int(prefix)


def parse_segment_file_name(name: str) -> SegmentFileName | None:
    """``name`` parsed as a segment file's (``<20 digits><kind>[.cleaned|.swap|.deleted]``),
    or None when it is not one."""
    m = _SEGMENT_FILE.fullmatch(name)
    return SegmentFileName(int(m.group(1)), m.group(2), m.group(3)) if m else None
