"""Producer state: per producer id the epoch, last sequence/offset and open transaction, the
partition's ongoing transactions, and the ``<offset>.snapshot`` files that persist it (Kafka's
``ProducerStateManager``, ``ProducerStateEntry``, ``ProducerAppendInfo``, ``BatchMetadata``,
``TxnMetadata``, ``CompletedTxn``).

A batch with a producer id updates its producer's entry; a transactional data batch opens a
transaction at its base offset if the producer has none open; the producer's next transaction
marker (a control batch, see ``storage.records.control``) closes it and yields a
:class:`CompletedTxn`. For an aborted one the log appends an ``AbortedTxn`` to the active
segment's ``.txnindex`` (:meth:`ProducerStateManager.aborted_txn`), then calls
:meth:`ProducerStateManager.complete_txn`; :meth:`ProducerStateManager.apply_batch` does all of
it for one batch, as ``LogSegment.updateProducerState``.

Snapshot file (``ProducerSnapshot`` v1, all integers big-endian)::

    0 version int16 (1) | 2 crc uint32: CRC-32C of bytes [6, end) | 6 entry count int32
    10 entries, 46 bytes each: producerId int64 | epoch int16 | lastSequence int32 |
       lastOffset int64 | offsetDelta int32 | timestamp int64 | coordinatorEpoch int32 |
       currentTxnFirstOffset int64 (-1 = no open transaction)

The file name is the 20-digit *exclusive* end offset of the state it holds. Offsets are Kafka
offsets, timestamps epoch ms.
"""

from __future__ import annotations

import enum
import logging
import os
import struct
from collections import deque
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from crc32c import crc32c

from storage.log_files import (
    DELETED_SUFFIX,
    SNAPSHOT_SUFFIX,
    offset_from_file_name,
    producer_snapshot_file,
)
from storage import disk_calls
from storage.checkpoint import write_atomically
from storage.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.clock import SYSTEM_CLOCK, Clock
from storage.records.batch import RecordBatch
from storage.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    end_transaction_marker,
)
from storage.transaction_index import AbortedTxn, TransactionIndex

__all__ = [
    "AppendOrigin",
    "BatchMetadata",
    "CompletedTxn",
    "TxnMetadata",
    "ProducerStateEntry",
    "ProducerAppendInfo",
    "ProducerStateManager",
    "encode_snapshot",
    "decode_snapshot",
    "write_snapshot",
    "read_snapshot",
    "list_snapshot_files",
]

log = logging.getLogger(__name__)

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1
NUM_BATCHES_TO_RETAIN = 5  # ProducerStateEntry.NUM_BATCHES_TO_RETAIN
PRODUCER_SNAPSHOT_VERSION = 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms

_INT32_MAX = 0x7FFFFFFF
_SNAPSHOT_HEADER = struct.Struct(">hIi")  # version, crc, entry count
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")
_ENTRIES_OFFSET = 6  # where the CRC starts


def _decrement_sequence(sequence: int, decrement: int) -> int:
    # DefaultRecordBatch.decrementSequence: sequences wrap at Integer.MAX_VALUE
    if sequence < decrement:
        return _INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


class AppendOrigin(enum.Enum):
    """Who appends (``AppendOrigin``): REPLICATION (followers, log recovery and replay) is not
    validated; COORDINATOR (markers, offset commits) checks epochs; CLIENT checks epochs and
    sequences."""

    REPLICATION = "replication"
    COORDINATOR = "coordinator"
    CLIENT = "client"


class BatchMetadata(NamedTuple):
    """One retained batch of a producer (``BatchMetadata``): its last sequence and offset,
    ``offset_delta`` = last offset - first offset, and its max timestamp (epoch ms)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


class CompletedTxn(NamedTuple):
    """A transaction closed by a marker (``CompletedTxn``): its first data offset, the marker's
    offset (``last_offset``) and whether the marker is an ABORT."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class TxnMetadata:
    """An ongoing or not yet replicated transaction (``TxnMetadata``); ``last_offset`` is the
    marker's offset once completed, else None. ``start_ms`` (epoch ms) is when this process
    saw it begin, or loaded it: what its timeout counts from (a coordinator's
    txnStartTimestamp; kfs has no coordinator to persist one)."""

    __slots__ = ("producer_id", "first_offset", "last_offset", "start_ms")

    def __init__(self, producer_id: int, first_offset: int, start_ms: int):
        self.producer_id = producer_id
        self.first_offset = first_offset
        self.last_offset: int | None = None  # set by complete_txn
        self.start_ms = start_ms

    def __repr__(self) -> str:
        return (f"TxnMetadata(producer_id={self.producer_id}, first_offset={self.first_offset}, "
                f"last_offset={self.last_offset})")


class OpenTransaction(NamedTuple):
    """A transaction with data but no marker yet, as ``kafka-transactions.sh find-hanging``
    lists one (from DescribeProducers): its producer's epoch and coordinator epoch, the
    offset of its first batch, when it began (``start_ms``, see :class:`TxnMetadata`) and
    the producer's last timestamp (epoch ms)."""

    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    first_offset: int
    start_ms: int
    last_timestamp: int


class ProducerStateEntry:
    """The state of one producer id (``ProducerStateEntry``): ``producer_epoch``,
    ``coordinator_epoch`` (-1 before any marker), ``last_timestamp`` (epoch ms of the last
    batch's max timestamp or the last marker), ``current_txn_first_offset`` (None without an
    open transaction) and up to 5 :class:`BatchMetadata` of its latest batches, oldest first
    (cleared when the epoch changes). A snapshot keeps only the last batch.

    kafka-dump-log prints an entry read from a ``.snapshot`` as::

        producerId: {producer_id} producerEpoch: {producer_epoch}
        coordinatorEpoch: {coordinator_epoch} currentTxnFirstOffset: {OptionalLong}
        lastTimestamp: {last_timestamp} [firstSequence: {b.first_seq} lastSequence: {b.last_seq}
        lastOffset: {b.last_offset} offsetDelta: {b.offset_delta} timestamp: {b.timestamp}]

    on one line, single spaces, where OptionalLong is ``OptionalLong.empty`` or
    ``OptionalLong[189]`` and ``b`` is ``batch_metadata[0]``; without batch metadata the
    bracketed part is omitted and the line ends with the space after lastTimestamp.
    """

    __slots__ = ("producer_id", "producer_epoch", "coordinator_epoch", "last_timestamp",
                 "current_txn_first_offset", "batch_metadata")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH,
                 coordinator_epoch: int = -1, last_timestamp: int = NO_TIMESTAMP,
                 current_txn_first_offset: int | None = None,
                 batch_metadata: Iterable[BatchMetadata] = ()):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.coordinator_epoch = coordinator_epoch
        self.last_timestamp = last_timestamp
        self.current_txn_first_offset = current_txn_first_offset
        self.batch_metadata: deque[BatchMetadata] = deque(batch_metadata, NUM_BATCHES_TO_RETAIN)

    @property
    def is_empty(self) -> bool:
        """True without batch metadata."""
        return not self.batch_metadata

    @property
    def first_seq(self) -> int:
        return self.batch_metadata[0].first_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batch_metadata[-1].last_seq if self.batch_metadata else NO_SEQUENCE

    @property
    def first_data_offset(self) -> int:
        return self.batch_metadata[0].first_offset if self.batch_metadata else -1

    @property
    def last_data_offset(self) -> int:
        return self.batch_metadata[-1].last_offset if self.batch_metadata else -1

    @property
    def last_offset_delta(self) -> int:
        return self.batch_metadata[-1].offset_delta if self.batch_metadata else 0

    def add_batch(self, producer_epoch: int, last_seq: int, last_offset: int,
                  offset_delta: int, timestamp: int) -> None:
        """Record a data batch (``addBatch``); a new epoch first drops the retained batches."""
        self.maybe_update_producer_epoch(producer_epoch)
        self.batch_metadata.append(BatchMetadata(last_seq, last_offset, offset_delta, timestamp))
        self.last_timestamp = timestamp

    def maybe_update_producer_epoch(self, producer_epoch: int) -> None:
        """Adopt ``producer_epoch`` if it differs, dropping the retained batches."""
        if self.producer_epoch != producer_epoch:
            self.batch_metadata.clear()
            self.producer_epoch = producer_epoch

    def update(self, next_entry: ProducerStateEntry) -> None:
        """Take over ``next_entry``'s epoch, batches, coordinator epoch, open transaction and
        last timestamp (``update(ProducerStateEntry)``)."""
        self.maybe_update_producer_epoch(next_entry.producer_epoch)
        self.batch_metadata.extend(next_entry.batch_metadata)
        self.coordinator_epoch = next_entry.coordinator_epoch
        self.current_txn_first_offset = next_entry.current_txn_first_offset
        self.last_timestamp = next_entry.last_timestamp

    def end_transaction(self, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> None:
        """State after a transaction marker (``update(short, int, long)``): no open
        transaction; the batch metadata stays unless the epoch changes."""
        self.maybe_update_producer_epoch(producer_epoch)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = None
        self.last_timestamp = timestamp

    def find_duplicate_batch(self, batch: RecordBatch) -> BatchMetadata | None:
        """The retained batch with ``batch``'s epoch and exact sequence range, if any
        (``findDuplicateBatch``): a producer retry of an already written batch."""
        if batch.producer_epoch != self.producer_epoch:
            return None
        first, last = batch.base_sequence, batch.last_sequence
        for metadata in self.batch_metadata:
            if metadata.first_seq == first and metadata.last_seq == last:
                return metadata
        return None

    def copy(self, with_batches: bool = True) -> ProducerStateEntry:
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.coordinator_epoch,
                                  self.last_timestamp, self.current_txn_first_offset,
                                  self.batch_metadata if with_batches else ())

    def snapshot_fields(self) -> tuple[int, int, int, int, int, int, int, int]:
        """The entry as a snapshot stores it: (producerId, epoch, lastSequence, lastOffset,
        offsetDelta, timestamp, coordinatorEpoch, currentTxnFirstOffset or -1)."""
        txn = -1 if self.current_txn_first_offset is None else self.current_txn_first_offset
        return (self.producer_id, self.producer_epoch, self.last_seq, self.last_data_offset,
                self.last_offset_delta, self.last_timestamp, self.coordinator_epoch, txn)

    def __eq__(self, other) -> bool:
        if not isinstance(other, ProducerStateEntry):
            return NotImplemented
        return (self.snapshot_fields() == other.snapshot_fields()
                and list(self.batch_metadata) == list(other.batch_metadata))

    __hash__ = None

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producer_id={self.producer_id}, "
                f"producer_epoch={self.producer_epoch}, "
                f"current_txn_first_offset={self.current_txn_first_offset}, "
                f"coordinator_epoch={self.coordinator_epoch}, "
                f"last_timestamp={self.last_timestamp}, "
                f"batch_metadata={list(self.batch_metadata)})")


class ProducerAppendInfo:
    """The changes one append makes to one producer's state (``ProducerAppendInfo``), checked
    against ``current_entry`` as ``origin`` requires. Apply with
    :meth:`ProducerStateManager.update`."""

    def __init__(self, producer_id: int, current_entry: ProducerStateEntry, origin: AppendOrigin,
                 clock: Clock = SYSTEM_CLOCK):
        self.producer_id = producer_id
        self.clock = clock
        self.current_entry = current_entry
        self.origin = origin
        self.updated_entry = current_entry.copy(with_batches=False)
        self.updated_entry.producer_id = producer_id
        self.started_transactions: list[TxnMetadata] = []

    def append(self, batch: RecordBatch, first_offset: int | None = None) -> CompletedTxn | None:
        """Apply one batch (``append``): a control batch's marker closes the open transaction
        (a CompletedTxn, or None for a marker without data or an empty control batch); a data
        batch (first offset ``first_offset`` or its base offset) updates sequences and may
        open a transaction.

        Raises InvalidRecordError for a control batch that is not a transaction marker;
        for non-REPLICATION origins InvalidProducerEpochError, OutOfOrderSequenceError,
        InvalidTxnStateError or TransactionCoordinatorFencedError (nothing is applied then to
        the manager, only this object is left half-updated).
        """
        if batch.is_control_batch:
            if batch.records_count == 0:  # the cleaner removed the whole transaction
                return None
            marker = end_transaction_marker(batch)
            timestamp = batch.records()[0].timestamp
            return self.append_end_txn_marker(marker, batch.producer_epoch, batch.base_offset,
                                              timestamp)
        self.append_data_batch(
            batch.producer_epoch, batch.base_sequence, batch.last_sequence, batch.max_timestamp,
            batch.base_offset if first_offset is None else first_offset, batch.last_offset,
            batch.is_transactional)
        return None

    def append_data_batch(self, epoch: int, first_seq: int, last_seq: int, last_timestamp: int,
                          first_offset: int, last_offset: int, is_transactional: bool) -> None:
        """Record a data batch (``appendDataBatch``). Raises as :meth:`append`."""
        self._check_producer_epoch(epoch, first_offset)
        if self.origin is AppendOrigin.CLIENT:
            self._check_sequence(epoch, first_seq, first_offset)
        entry = self.updated_entry
        entry.add_batch(epoch, last_seq, last_offset, last_offset - first_offset, last_timestamp)
        if entry.current_txn_first_offset is not None and not is_transactional:
            raise InvalidTxnStateError(
                f"Expected transactional write from producer {self.producer_id} at offset "
                f"{first_offset}")
        if entry.current_txn_first_offset is None and is_transactional:
            entry.current_txn_first_offset = first_offset
            self.started_transactions.append(
                TxnMetadata(self.producer_id, first_offset, self.clock.milliseconds()))

    def append_end_txn_marker(self, marker: EndTransactionMarker, producer_epoch: int,
                              offset: int, timestamp: int) -> CompletedTxn | None:
        """Close the open transaction with a marker at ``offset`` (``appendEndTxnMarker``).
        Returns None when no transaction is open (a marker without data changes no LSO and
        is not indexed). Raises as :meth:`append`."""
        self._check_producer_epoch(producer_epoch, offset)
        entry = self.updated_entry
        if entry.coordinator_epoch > marker.coordinator_epoch:
            message = (f"Invalid coordinator epoch for producerId {self.producer_id} at offset "
                       f"{offset}: {marker.coordinator_epoch} (zombie), "
                       f"{entry.coordinator_epoch} (current)")
            if self.origin is not AppendOrigin.REPLICATION:
                raise TransactionCoordinatorFencedError(message)
            log.info("%s", message)
        completed = None
        if entry.current_txn_first_offset is not None:
            completed = CompletedTxn(self.producer_id, entry.current_txn_first_offset, offset,
                                     marker.control_type == ControlRecordType.ABORT)
        entry.end_transaction(producer_epoch, marker.coordinator_epoch, timestamp)
        return completed

    def _check_producer_epoch(self, producer_epoch: int, offset: int) -> None:
        current = self.updated_entry.producer_epoch
        if producer_epoch < current:
            message = (f"Epoch of producer {self.producer_id} at offset {offset} is "
                       f"{producer_epoch}, which is smaller than the last seen epoch {current}")
            if self.origin is not AppendOrigin.REPLICATION:
                raise InvalidProducerEpochError(message)
            log.warning("%s", message)

    def _check_sequence(self, producer_epoch: int, first_seq: int, offset: int) -> None:
        updated, current = self.updated_entry, self.current_entry
        if producer_epoch != updated.producer_epoch:
            if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
                raise OutOfOrderSequenceError(
                    f"Invalid sequence number for new epoch of producer {self.producer_id} at "
                    f"offset {offset}: {producer_epoch} (request epoch), {first_seq} (seq. "
                    f"number), {updated.producer_epoch} (current producer epoch)")
            return
        if not updated.is_empty:
            last_seq = updated.last_seq
        elif producer_epoch == current.producer_epoch:
            last_seq = current.last_seq
        else:
            last_seq = NO_SEQUENCE
        # No known epoch (all of its batches deleted): any sequence is accepted.
        in_sequence = first_seq == last_seq + 1 or (first_seq == 0 and last_seq == _INT32_MAX)
        if current.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence:
            raise OutOfOrderSequenceError(
                f"Out of order sequence number for producer {self.producer_id} at offset "
                f"{offset}: {first_seq} (incoming seq. number), {last_seq} (current end "
                "sequence number)")

    def to_entry(self) -> ProducerStateEntry:
        return self.updated_entry

    def __repr__(self) -> str:
        return (f"ProducerAppendInfo(producer_id={self.producer_id}, "
                f"updated_entry={self.updated_entry!r}, "
                f"started_transactions={self.started_transactions!r})")


# -- snapshot files -------------------------------------------------------------------------

def list_snapshot_files(log_dir: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every regular ``*.snapshot`` file in ``log_dir``, by offset
    (``listSnapshotFiles``); names whose prefix is not a number are skipped."""
    found = []
    try:
        paths = list(Path(log_dir).iterdir())
    except FileNotFoundError:
        return []
    for path in paths:
        if path.name.endswith(SNAPSHOT_SUFFIX) and path.is_file():
            try:
                found.append((offset_from_file_name(path.name), path))
            except ValueError:
                continue
    return sorted(found)


def encode_snapshot(entries: Iterable[ProducerStateEntry]) -> bytes:
    """A snapshot file's bytes for ``entries``, in the given order (``writeSnapshot``).
    Raises ValueError for a field out of range."""
    try:
        body = b"".join(_SNAPSHOT_ENTRY.pack(*entry.snapshot_fields()) for entry in entries)
    except struct.error as exc:
        raise ValueError(f"producer state field out of range: {exc}") from None
    count = struct.pack(">i", len(body) // _SNAPSHOT_ENTRY.size)
    crc = crc32c(body, crc32c(count))
    return struct.pack(">hI", PRODUCER_SNAPSHOT_VERSION, crc) + count + body


def decode_snapshot(data: bytes) -> list[ProducerStateEntry]:
    """The entries of a snapshot file's bytes, in file order (``readSnapshot``).

    An entry with lastOffset >= 0 gets one BatchMetadata(lastSequence, lastOffset, offsetDelta,
    timestamp); ``current_txn_first_offset`` is None for a negative stored value.
    Raises CorruptSnapshotError, with Kafka's message where Kafka has one, when the bytes are
    too short for the header or the declared entries (or longer), the version is not 1, or the
    CRC does not match.
    """
    if len(data) < _SNAPSHOT_HEADER.size:
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: {len(data)} bytes, a snapshot has at "
            f"least {_SNAPSHOT_HEADER.size}")
    version, crc, count = _SNAPSHOT_HEADER.unpack_from(data)
    expected = _SNAPSHOT_HEADER.size + count * _SNAPSHOT_ENTRY.size
    if count < 0 or expected != len(data):
        raise CorruptSnapshotError(
            f"Snapshot failed schema validation: {count} entries declared "
            f"({expected} bytes), the file has {len(data)} bytes")
    if version != PRODUCER_SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"Snapshot contained an unknown file version {version}")
    computed = crc32c(memoryview(data)[_ENTRIES_OFFSET:])
    if computed != crc:
        raise CorruptSnapshotError(
            f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
            f"Computed crc: {computed}")
    entries = []
    for fields in _SNAPSHOT_ENTRY.iter_unpack(memoryview(data)[_SNAPSHOT_HEADER.size:]):
        pid, epoch, seq, offset, delta, timestamp, coordinator_epoch, txn_first = fields
        batches = [BatchMetadata(seq, offset, delta, timestamp)] if offset >= 0 else []
        entries.append(ProducerStateEntry(pid, epoch, coordinator_epoch, timestamp,
                                          txn_first if txn_first >= 0 else None, batches))
    return entries


def read_snapshot(path: Path) -> list[ProducerStateEntry]:
    """The entries of the ``.snapshot`` file at ``path``, in file order (``readSnapshot``).

    Each entry has ``producer_id``, ``producer_epoch``, ``coordinator_epoch`` (-1 if none),
    ``current_txn_first_offset`` (None if no open transaction), ``last_timestamp`` (epoch ms)
    and, when the stored lastOffset is >= 0, one ``batch_metadata[0]`` with ``first_seq``,
    ``last_seq``, ``last_offset``, ``offset_delta`` and ``timestamp`` (= last_timestamp).
    kafka-dump-log prints one line per entry, formatted as described on
    :class:`ProducerStateEntry`, e.g. ``producerId: 1000 producerEpoch: 0 coordinatorEpoch: -1
    currentTxnFirstOffset: OptionalLong.empty lastTimestamp: 1700000000000 firstSequence: 0
    lastSequence: 4 lastOffset: 4 offsetDelta: 4 timestamp: 1700000000000``; for a corrupt file
    it prints only Kafka's message (what follows ``"<path>: "`` below) to stderr.

    Raises CorruptSnapshotError ``"<path>: <Kafka's message>"`` (see :func:`decode_snapshot`);
    OSError if unreadable.
    """
    path = Path(path)
    try:
        return decode_snapshot(path.read_bytes())
    except CorruptSnapshotError as exc:
        raise CorruptSnapshotError(f"{path}: {exc}") from None


def write_snapshot(path: Path, entries: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    """Write ``entries`` (in that order) as a snapshot file at ``path``, atomically
    (``checkpoint.write_atomically``: temp file, fsync when ``sync``, rename, directory fsync). Raises ValueError for a field out of range, OSError on I/O failure (the
    temp file is removed and ``path`` left as it was)."""
    write_atomically(Path(path), encode_snapshot(entries), sync)


# -- Java HashMap iteration order ---------------------------------------------------------
# Kafka writes a snapshot's entries in the iteration order of its HashMap<Long, ...>; following
# it makes our snapshots byte-identical to Kafka's. Readers do not care about the order.

_MIN_TREEIFY_CAPACITY = 64
_TREEIFY_THRESHOLD = 8


def _java_long_hash(value: int) -> int:
    """``HashMap.hash(Long)``: Long.hashCode spread by ``h ^ (h >>> 16)``."""
    v = value & 0xFFFFFFFFFFFFFFFF
    h = (v ^ (v >> 32)) & 0xFFFFFFFF
    return h ^ (h >> 16)


class _JavaHashMapOrder:
    """Tracks the table capacity of a Java ``HashMap`` that got the same puts (it doubles
    when the size passes 3/4 of it, or when a bucket passes 8 entries in a table below 64, and
    never shrinks, not even on clear) and orders keys as its iterator would: by bucket, then by
    insertion within a bucket. (Buckets of more than 8 entries in a table of 64 or more
    become trees whose order is not followed; only 9+ colliding producer ids could do that.)"""

    def __init__(self) -> None:
        self.capacity = 0  # the table is allocated on the first put

    def on_insert(self, key: int, keys: Collection[int]) -> None:
        """Note that ``key`` was added; ``keys`` are all keys now present, ``key`` included."""
        if self.capacity == 0:
            self.capacity = 16
        if self.capacity < _MIN_TREEIFY_CAPACITY:  # at most 48 keys: cheap to count
            mask = self.capacity - 1
            bucket = _java_long_hash(key) & mask
            if sum(1 for k in keys if _java_long_hash(k) & mask == bucket) > _TREEIFY_THRESHOLD:
                self.capacity *= 2
        if len(keys) > self.capacity * 3 // 4:
            self.capacity *= 2

    def order(self, keys: Iterable[int]) -> list[int]:
        """``keys`` (in insertion order) in the map's iteration order."""
        mask = max(self.capacity, 16) - 1
        return sorted(keys, key=lambda k: _java_long_hash(k) & mask)


# -- the manager ----------------------------------------------------------------------------

class ProducerStateManager:
    """The producer state of one partition, and its snapshot files in ``log_dir``
    (``ProducerStateManager``).

    ``producer_id_expiration_ms`` is ``producer.id.expiration.ms``: an entry without an open
    transaction whose last timestamp is that old is dropped when loaded from a snapshot or by
    :meth:`remove_expired_producers`. ``map_end_offset`` is the exclusive end offset of the
    state. Mutations are serialized by the owning log. Raises OSError when ``log_dir`` cannot
    be listed. ``log_dir=None``: a state held in memory only (no snapshot files: a log whose
    segments are not local files).
    """

    def __init__(self, log_dir: Path | None,
                 producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
                 writable: bool = True, clock: Clock = SYSTEM_CLOCK):
        self.log_dir = None if log_dir is None else Path(log_dir)
        self.clock = clock
        self.writable = writable  # False: snapshots are read, never written or deleted
        self.producer_id_expiration_ms = producer_id_expiration_ms
        self._producers: dict[int, ProducerStateEntry] = {}
        self._hash_order = _JavaHashMapOrder()
        self._ongoing_txns: dict[int, TxnMetadata] = {}  # by first offset
        self._unreplicated_txns: dict[int, TxnMetadata] = {}  # completed, marker >= HW
        self._snapshots: dict[int, Path] = self._load_snapshots()
        self.map_end_offset = 0  # lastMapOffset
        self._last_snap_offset = 0

    def _load_snapshots(self) -> dict[int, Path]:
        return {} if self.log_dir is None else dict(list_snapshot_files(self.log_dir))

    # -- producers ----------------------------------------------------------------------------

    @property
    def active_producers(self) -> Mapping[int, ProducerStateEntry]:
        """Producer id -> entry, read-only (``activeProducers``)."""
        return MappingProxyType(self._producers)

    @property
    def producer_id_count(self) -> int:
        return len(self._producers)

    def is_empty(self) -> bool:
        return not self._producers and not self._unreplicated_txns

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self._producers.get(producer_id)

    def _add_producer(self, producer_id: int, entry: ProducerStateEntry) -> None:
        is_new = producer_id not in self._producers
        self._producers[producer_id] = entry
        if is_new:
            self._hash_order.on_insert(producer_id, self._producers)

    def load_producer_entry(self, entry: ProducerStateEntry) -> None:
        """Add an entry read from a snapshot, with its open transaction (``loadProducerEntry``)."""
        self._add_producer(entry.producer_id, entry)
        if entry.current_txn_first_offset is not None:
            self._ongoing_txns[entry.current_txn_first_offset] = TxnMetadata(
                entry.producer_id, entry.current_txn_first_offset, self.clock.milliseconds())

    def _is_expired(self, now: int, entry: ProducerStateEntry) -> bool:
        return (entry.current_txn_first_offset is None
                and now - entry.last_timestamp >= self.producer_id_expiration_ms)

    def remove_expired_producers(self, current_time_ms: int) -> None:
        """Drop producers idle for ``producer.id.expiration.ms`` without an open transaction
        (``removeExpiredProducers``)."""
        for pid in [p for p, e in self._producers.items() if self._is_expired(current_time_ms, e)]:
            del self._producers[pid]

    def prepare_update(self, producer_id: int, origin: AppendOrigin) -> ProducerAppendInfo:
        """A ProducerAppendInfo over the producer's current entry (``prepareUpdate``)."""
        current = self._producers.get(producer_id) or ProducerStateEntry(producer_id)
        return ProducerAppendInfo(producer_id, current, origin, self.clock)

    def update(self, append_info: ProducerAppendInfo) -> None:
        """Apply an append's changes and register the transactions it started (``update``).
        Raises ValueError for producer id -1."""
        pid = append_info.producer_id
        if pid == NO_PRODUCER_ID:
            raise ValueError(f"Invalid producer id {pid} passed to update")
        updated = append_info.to_entry()
        current = self._producers.get(pid)
        if current is not None:
            current.update(updated)
        else:
            self._add_producer(pid, updated)
        for txn in append_info.started_transactions:
            self._ongoing_txns[txn.first_offset] = txn

    def update_map_end_offset(self, offset: int) -> None:
        """Set the exclusive end offset of the state (``updateMapEndOffset``); the log calls it
        after every append with the append's last offset + 1, producer ids or not."""
        self.map_end_offset = offset

    # -- replay helpers (LogSegment.updateProducerState, UnifiedLog.append) -------------------

    def apply_batch(self, batch: RecordBatch, txn_index: TransactionIndex | None = None,
                    origin: AppendOrigin = AppendOrigin.REPLICATION) -> CompletedTxn | None:
        """Apply one batch as ``LogSegment.updateProducerState`` does during recovery: update
        its producer (if it has one), and when it completes a transaction append the
        AbortedTxn of an aborted one to ``txn_index`` (if given) and complete it; in every case
        the map end offset becomes ``batch.last_offset + 1``. Returns the CompletedTxn or None.
        Raises as :meth:`ProducerAppendInfo.append`; OSError from the index append (the
        transaction then stays open, as in Kafka)."""
        completed = None
        if batch.producer_id != NO_PRODUCER_ID:
            info = self.prepare_update(batch.producer_id, origin)
            completed = info.append(batch)
            self.update(info)
            if completed is not None:
                self._finish_txn(completed, txn_index)
        self.update_map_end_offset(batch.last_offset + 1)
        return completed

    def apply_append(self, batches: Iterable[RecordBatch], txn_index: TransactionIndex | None = None,
                     origin: AppendOrigin = AppendOrigin.REPLICATION) -> list[CompletedTxn]:
        """Apply the batches of one append as ``UnifiedLog.append`` does (and, with no
        ``txn_index``, as ``UnifiedLog.loadProducersFromRecords`` does for a segment being
        replayed): every batch is checked first, then each producer's entry is updated once,
        then each completed transaction is indexed (if aborted) and completed, so an LSO sees
        the transactions the whole append opened. The map end offset becomes the last batch's
        last offset + 1. Raises as :meth:`ProducerAppendInfo.append` before changing anything;
        OSError from an index append (the transactions not yet completed then stay open).
        """
        batches = list(batches)
        analysis = self.analyze(batches, origin)
        self.apply(analysis, txn_index)
        if batches:
            self.update_map_end_offset(batches[-1].last_offset + 1)
        return analysis[1]

    def find_duplicate(self, batches: Iterable[RecordBatch]) -> BatchMetadata | None:
        """The retained batch a client append repeats, if any (the duplicate check of
        ``UnifiedLog.analyzeAndValidateProducerState``): the first batch whose producer's
        last five batches include its epoch and exact sequence range. A leader acknowledges
        such a retry with the original offsets and stores nothing."""
        for batch in batches:
            entry = self._producers.get(batch.producer_id)
            duplicate = entry.find_duplicate_batch(batch) if entry is not None else None
            if duplicate is not None:
                return duplicate
        return None

    def analyze(self, batches: Iterable[RecordBatch], origin: AppendOrigin
                ) -> tuple[dict[int, ProducerAppendInfo], list[CompletedTxn]]:
        """Check what the batches of one append would do to the producers, changing nothing
        (``UnifiedLog.analyzeAndValidateProducerState``): (append info per producer id, the
        transactions they complete). Raises as :meth:`ProducerAppendInfo.append`."""
        infos: dict[int, ProducerAppendInfo] = {}
        completed: list[CompletedTxn] = []
        for batch in batches:
            if batch.producer_id == NO_PRODUCER_ID:
                continue
            info = infos.get(batch.producer_id)
            if info is None:
                info = infos[batch.producer_id] = self.prepare_update(batch.producer_id, origin)
            txn = info.append(batch)
            if txn is not None:
                completed.append(txn)
        return infos, completed

    def apply(self, analysis: tuple[dict[int, ProducerAppendInfo], list[CompletedTxn]],
              txn_index: TransactionIndex | None = None) -> None:
        """Apply what :meth:`analyze` found, once the batches are in the log: each producer's
        entry is updated, then each completed transaction is indexed in ``txn_index`` (if
        aborted) and completed. Raises OSError from an index append (the transactions not
        yet completed then stay open, as in Kafka)."""
        infos, completed = analysis
        for info in infos.values():
            self.update(info)
        for txn in completed:
            self._finish_txn(txn, txn_index)

    def _finish_txn(self, completed: CompletedTxn, txn_index: TransactionIndex | None) -> None:
        if completed.is_aborted and txn_index is not None:
            txn_index.append(self.aborted_txn(completed))
        self.complete_txn(completed)

    # -- transactions and stable offsets ------------------------------------------------------

    def txn_last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO to store with ``completed`` (``lastStableOffset(CompletedTxn)``): the first
        offset of the earliest ongoing transaction of another producer, else the marker's
        offset + 1. Call before :meth:`complete_txn`."""
        for first_offset in sorted(self._ongoing_txns):
            if self._ongoing_txns[first_offset].producer_id != completed.producer_id:
                return first_offset
        return completed.last_offset + 1

    def aborted_txn(self, completed: CompletedTxn) -> AbortedTxn:
        """The ``.txnindex`` entry for a completed (aborted) transaction, with the LSO Kafka
        stores (``new AbortedTxn(completedTxn, lastStableOffset)``). Call before
        :meth:`complete_txn`."""
        return AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset,
                          self.txn_last_stable_offset(completed))

    def complete_txn(self, completed: CompletedTxn) -> None:
        """Move the transaction from ongoing to completed-but-unreplicated (``completeTxn``);
        it leaves :meth:`first_unstable_offset` once the high watermark passes its marker.
        Raises ValueError if no ongoing transaction starts at ``completed.first_offset``."""
        txn = self._ongoing_txns.pop(completed.first_offset, None)
        if txn is None:
            raise ValueError(
                f"Attempted to complete transaction {completed} which was not started")
        txn.last_offset = completed.last_offset
        self._unreplicated_txns[completed.first_offset] = txn

    def open_transactions(self) -> list[OpenTransaction]:
        """The ongoing transactions with their producers' state, by first offset."""
        out = []
        for txn in self.ongoing_txns:
            entry = self._producers[txn.producer_id]
            out.append(OpenTransaction(txn.producer_id, entry.producer_epoch,
                                       entry.coordinator_epoch, txn.first_offset, txn.start_ms,
                                       entry.last_timestamp))
        return out

    @property
    def ongoing_txns(self) -> list[TxnMetadata]:
        """Undecided transactions, by first offset."""
        return [self._ongoing_txns[o] for o in sorted(self._ongoing_txns)]

    def first_undecided_offset(self) -> int | None:
        """First offset of the earliest ongoing transaction (``firstUndecidedOffset``)."""
        return min(self._ongoing_txns, default=None)

    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest transaction that is undecided or whose marker is not
        below the high watermark yet (``firstUnstableOffset``); None if there is none."""
        return min(self._ongoing_txns.keys() | self._unreplicated_txns.keys(), default=None)

    def on_high_watermark_updated(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is below ``high_watermark``
        (``onHighWatermarkUpdated``)."""
        self._remove_unreplicated_txns(high_watermark)

    def _remove_unreplicated_txns(self, offset: int) -> None:
        for first in [f for f, t in self._unreplicated_txns.items() if t.last_offset < offset]:
            del self._unreplicated_txns[first]

    def last_stable_offset(self, high_watermark: int, log_start_offset: int = 0) -> int:
        """The partition's LSO, the read_committed limit (``UnifiedLog.lastStableOffset``): the
        first unstable offset (raised to ``log_start_offset``) if below ``high_watermark``,
        else ``high_watermark``."""
        first = self.first_unstable_offset()
        if first is not None:
            first = max(first, log_start_offset)
            if first < high_watermark:
                return first
        return high_watermark

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot_entries(self) -> list[ProducerStateEntry]:
        """The entries in the order Kafka's HashMap would write them."""
        return [self._producers[p] for p in self._hash_order.order(self._producers)]

    def take_snapshot(self, sync: bool = True) -> Path | None:
        """Write ``<map_end_offset>.snapshot`` in ``log_dir`` if the state has moved past the
        last snapshot (``takeSnapshot``), atomically (see :func:`write_snapshot`). Returns its
        path, or None when nothing was written. Raises OSError."""
        if self.map_end_offset <= self._last_snap_offset or not self.writable:
            return None
        path = producer_snapshot_file(self.log_dir, self.map_end_offset)
        write_snapshot(path, self.snapshot_entries(), sync)
        self._snapshots[self.map_end_offset] = path
        self._last_snap_offset = self.map_end_offset
        return path

    def latest_snapshot_offset(self) -> int | None:
        """Offset of the newest snapshot file (``latestSnapshotOffset``), or None."""
        return max(self._snapshots, default=None)

    def oldest_snapshot_offset(self) -> int | None:
        return min(self._snapshots, default=None)

    def snapshot_file_for_offset(self, offset: int) -> Path | None:
        return self._snapshots.get(offset)

    @property
    def snapshot_offsets(self) -> list[int]:
        return sorted(self._snapshots)

    def load_from_snapshot(self, log_start_offset: int, current_time_ms: int | None = None) -> None:
        """Load the newest readable snapshot (``loadFromSnapshot``): corrupt ones are deleted
        (logged) and the next older one tried; expired producers are skipped. Without any,
        the state starts empty at ``log_start_offset``. Call on an empty state (as
        :meth:`truncate_and_reload` does); then replay the log from ``map_end_offset``."""
        now = self.clock.milliseconds() if current_time_ms is None else current_time_ms
        while self._snapshots:
            offset = max(self._snapshots)
            path = self._snapshots[offset]
            try:
                entries = read_snapshot(path)
            except CorruptSnapshotError as exc:
                log.warning("Failed to load producer snapshot from '%s': %s", path, exc)
                self._remove_and_delete_snapshot(offset)
                continue
            except FileNotFoundError:  # a writer beside this reader deleted it meanwhile
                self._snapshots.pop(offset, None)
                continue
            for entry in entries:
                if not self._is_expired(now, entry):
                    self.load_producer_entry(entry)
            self._last_snap_offset = self.map_end_offset = offset
            return
        self._last_snap_offset = self.map_end_offset = log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int,
                            current_time_ms: int | None = None, force: bool = False) -> None:
        """Delete snapshots above ``log_end_offset`` or at/below ``log_start_offset``; if the
        state does not end at ``log_end_offset`` (or ``force``: it may hold a failed append's
        updates), reload it from the newest remaining snapshot (``truncateAndReload``).
        Assumes the log end offset is at most the high watermark."""
        for offset in list(self._snapshots):
            if offset > log_end_offset or offset <= log_start_offset:
                self._remove_and_delete_snapshot(offset)
        if force or log_end_offset != self.map_end_offset:
            self._producers.clear()
            self._ongoing_txns.clear()
            self._unreplicated_txns.clear()
            self.load_from_snapshot(log_start_offset, current_time_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Empty state starting at ``offset``, every snapshot deleted (``truncateFullyAndStartAt``)."""
        self._producers.clear()
        self._ongoing_txns.clear()
        self._unreplicated_txns.clear()
        for snapshot_offset in list(self._snapshots):
            self._remove_and_delete_snapshot(snapshot_offset)
        self._last_snap_offset = 0
        self.map_end_offset = offset

    def truncate_fully_and_reload_snapshots(self) -> None:
        """Drop all state and snapshots and re-list the directory
        (``truncateFullyAndReloadSnapshots``)."""
        self.truncate_fully_and_start_at(0)
        self._snapshots = self._load_snapshots()

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        """Forget completed transactions below the new log start, and move the map end up to it
        (``onLogStartOffsetIncremented``)."""
        self._remove_unreplicated_txns(log_start_offset)
        self.map_end_offset = max(self.map_end_offset, log_start_offset)
        latest = self.latest_snapshot_offset()
        self._last_snap_offset = log_start_offset if latest is None else latest

    def delete_snapshots_before(self, offset: int) -> None:
        """Delete snapshot files with an offset below ``offset`` (``deleteSnapshotsBefore``)."""
        for snapshot_offset in [o for o in self._snapshots if o < offset]:
            self._remove_and_delete_snapshot(snapshot_offset)

    def delete_snapshots_above(self, offset: int) -> None:
        """Delete snapshot files with an offset above ``offset`` (the first step of
        ``truncateAndReload`` on its own, for a log truncated to ``offset``)."""
        for snapshot_offset in [o for o in self._snapshots if o > offset]:
            self._remove_and_delete_snapshot(snapshot_offset)

    def remove_stray_snapshots(self, segment_base_offsets: Iterable[int]) -> None:
        """Delete snapshots that match no segment base offset, except the largest such one if
        it lies above every base (the clean-shutdown snapshot at the log end)
        (``removeStraySnapshots``). Re-lists ``log_dir`` first."""
        bases = set(segment_base_offsets)
        snapshots = self._load_snapshots()
        strays = [o for o in sorted(snapshots) if o not in bases]
        keep = strays[-1] if strays and (not bases or strays[-1] > max(bases)) else None
        self._snapshots = snapshots
        for offset in strays:
            if offset != keep:
                self._remove_and_delete_snapshot(offset)

    def remove_snapshots_a_load_deletes(self, segment_base_offsets: Iterable[int],
                                        log_start_offset: int, log_end_offset: int) -> None:
        """Delete now the snapshots Kafka's ``LogLoader`` would delete when it next opens the
        directory after a clean shutdown, so that a broker adopting it changes no snapshot:
        first the strays (:meth:`remove_stray_snapshots`: at no segment base offset and not
        the newest), then those ``truncateAndReload`` drops (above the log end offset, or at
        or below the log start offset). Call at a clean close, after the last
        :meth:`take_snapshot`.

        Kafka's own broker leaves such snapshots and deletes them at its next load: a
        snapshot taken at one close is a stray once later appends move the log end and the
        next close snapshots there; a roll's snapshot at the base of a segment that retention
        made the first is at the log start offset. One case has no file set a load keeps as
        it is: a log that retention emptied (log start offset = log end offset = the only
        base offset > 0) loses its one snapshot at Kafka's load, or, without one, gets one
        written (``rebuildProducerState`` snapshots a clean log that has none); kfs deletes
        it here, as the load would."""
        self.remove_stray_snapshots(segment_base_offsets)
        for offset in [o for o in self._snapshots
                       if o > log_end_offset or o <= log_start_offset]:
            self._remove_and_delete_snapshot(offset)

    def remove_and_mark_snapshot_for_deletion(self, offset: int) -> Path | None:
        """Forget the snapshot at ``offset`` and rename it to ``….snapshot.deleted`` for
        asynchronous deletion (``removeAndMarkSnapshotForDeletion``); returns the new path, or
        None if there was no such snapshot or its file is already gone."""
        path = self._snapshots.pop(offset, None)
        if path is None:
            return None
        target = path.with_name(path.name + DELETED_SUFFIX)
        try:
            disk_calls.replace(path, target)
        except FileNotFoundError:
            log.info("Producer snapshot %s was already deleted", path)
            return None
        return target

    def _remove_and_delete_snapshot(self, offset: int) -> None:
        path = self._snapshots.pop(offset, None)
        if path is not None and self.writable:
            path.unlink(missing_ok=True)
