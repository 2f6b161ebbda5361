"""Errors raised by the log engine, named after the Kafka exceptions they mirror.

Callers at the edge (the mount, the CLI) map them to errno values; I/O failures from the
operating system (ENOSPC, EIO, ...) are raised as the plain ``OSError`` they are.
"""

import errno


class KafkaStorageError(Exception):
    """Base class of every error the engine raises on purpose."""


class CorruptRecordError(KafkaStorageError):
    """Bytes that are not a valid record batch: bad CRC, bad size, truncated or undecodable
    records (Kafka's ``CorruptRecordException``)."""


class InvalidRecordError(KafkaStorageError):
    """A record or batch that is well-formed but violates a rule (Kafka's
    ``InvalidRecordException``), e.g. an unknown compression codec id."""


class KeySeparatorMissingError(InvalidRecordError):
    """A keyed line without the key separator (``Log.append_lines``; the console producer's
    "No key separator found"). Nothing of that append is stored. ``line``: the first such
    line's number in the append, from 1."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.line = line


class KeylessRecordError(InvalidRecordError):
    """A record without a key appended to a compacted topic (``cleanup.policy`` with compact):
    Kafka's LogValidator refuses it ("Compacted topic cannot accept message without key").
    Nothing of that append is stored."""


class InvalidTimestampError(InvalidRecordError):
    """A CreateTime record whose timestamp is further from now than
    ``message.timestamp.before.max.ms`` / ``message.timestamp.after.max.ms`` allow (Kafka's
    ``InvalidTimestampException`` from ``LogValidator``)."""


class RecordTooLargeError(KafkaStorageError):
    """A record batch larger than ``max.message.bytes`` or ``segment.bytes`` (Kafka's
    ``RecordTooLargeException`` / ``RecordBatchTooLargeException``)."""


class InvalidTopicError(KafkaStorageError):
    """A topic or partition directory name that breaks Kafka's naming rules
    (``Topic.validate``, ``LocalLog.parseTopicPartitionName``)."""


class UnknownTopicOrPartitionError(KafkaStorageError):
    """No such partition in the backing directory (Kafka's
    ``UnknownTopicOrPartitionException``)."""


class PartitionExistsError(KafkaStorageError):
    """Creating a partition that is already there."""


class OffsetOutOfRangeError(KafkaStorageError):
    """An offset outside [log start offset, log end offset] (Kafka's
    ``OffsetOutOfRangeException``)."""


class ReadOnlyLogError(KafkaStorageError):
    """A write to a log opened read-only."""


class DamagedLogError(KafkaStorageError):
    """A write to a log whose end could not be read when it was opened (``Log.damage``): where
    the next offset goes is unknown until ``kfs verify --repair`` mends it. (Kafka takes such
    a log directory offline: ``KafkaStorageException``.)"""


class OfflineLogError(KafkaStorageError, OSError):
    """A write to a log taken offline by an I/O error (``Log.offline``), as Kafka's
    ``LogDirFailureChannel`` takes a log directory offline and answers its produce requests
    with ``KafkaStorageException``: reads go on, writes are refused with ``EIO`` (its
    ``errno``) until the next open recovers the log."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EIO, message)


class InvalidConfigError(KafkaStorageError):
    """A config value Kafka would refuse (Kafka's ``ConfigException``)."""


class LogDirLockedError(KafkaStorageError):
    """The backing directory's ``.lock`` is held by another writer: a running mount, a Kafka
    broker or another engine (as Kafka's ``LogManager.lockLogDirs`` refuses a second broker)."""


class NotALogDirectoryError(KafkaStorageError):
    """A writable open of a directory that is not Kafka's: one not empty with nothing of a log
    directory in it, or a ``<topic>-<N>`` directory holding files neither kfs nor a broker
    writes (``/etc/dbus-1``). kfs writes nothing into a directory it does not recognise."""


class CorruptCheckpointError(KafkaStorageError):
    """A checkpoint file that does not parse (Kafka's ``CheckpointFile`` "Malformed line")."""


class CorruptIndexError(KafkaStorageError, ValueError):
    """An index file that fails its sanity check or holds an entry of an unknown version
    (Kafka's ``CorruptIndexException``)."""


class CorruptSnapshotError(KafkaStorageError):
    """A producer state ``.snapshot`` that is too short, has an unknown version, a bad CRC or a
    malformed entry array (Kafka's ``CorruptSnapshotException``)."""


class InvalidProducerEpochError(KafkaStorageError):
    """A client batch or marker whose producer epoch is older than the one last seen
    (Kafka's ``InvalidProducerEpochException``)."""


class OutOfOrderSequenceError(KafkaStorageError):
    """A client batch whose first sequence does not follow the producer's last one
    (Kafka's ``OutOfOrderSequenceException``)."""


class InvalidTxnStateError(KafkaStorageError):
    """A non-transactional batch from a producer with an open transaction
    (Kafka's ``InvalidTxnStateException``)."""


class TransactionCoordinatorFencedError(KafkaStorageError):
    """A marker from a coordinator epoch older than the producer's last one
    (Kafka's ``TransactionCoordinatorFencedException``)."""


class LogCleaningAbortedError(Exception):
    """A cleaning pass was abandoned (``LogCleaningAbortedException``): the log changed under
    it."""
