"""``kfs verify BACKING_DIR [PARTITION...]``: check every segment of a backing directory,
read-only, as a broker's recovery would judge it, and report each problem.

Per partition directory ``<topic>-<N>``:

* every batch of every ``.log``: size and CRC-32C (headers only; records are not decoded),
  offsets increasing across batches and segments, the first batch not below the segment's base
  offset, no segment starting below the end of the one before, no bytes after the last whole
  batch (a torn write);
* every ``.index`` entry (``OffsetIndex``): strictly increasing, at the start of a batch, not
  past the batch holding its offset (a lookup would skip it), within the segment, and no
  zero-filled slots left untrimmed; Kafka's ``sanityCheck``;
* every ``.timeindex`` entry (``TimeIndex``): strictly increasing timestamps, naming the last
  offset of a batch, whose timestamp is the largest up to that offset and is that batch's largest;
  the last entry holding the segment's largest timestamp; Kafka's ``sanityCheck``;
* every ``.txnindex`` (Kafka's ``sanityCheck``, increasing entries) and every producer
  ``.snapshot`` (version, size and CRC);
* missing index files, index files without a ``.log``, and leftover ``.cleaned``, ``.swap`` and
  ``.deleted`` files.

The checks read a partition through a :class:`PartitionFiles` (its files listed once, each
segment opened read-only through its ``SegmentSource``): a local directory here; segments in an
object store (``kfs verify URI``, ``--remote-path``) in ``kfs.tools.verify_remote``.

Nothing is written. :func:`plan_repair` says what a repair would cut and :func:`repair` does
it (a local directory only): the damaged bytes only go, into a quarantine outside the
backing directory, and every intact batch stays (``storage.salvage``); then the engine
recovers the directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import os
import sys
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from crc32c import crc32c

from storage.config import LogConfig
from storage.errors import (
    CorruptIndexError,
    CorruptRecordError,
    CorruptSnapshotError,
    InvalidRecordError,
    InvalidTopicError,
)
from storage.producer_state import decode_snapshot
from storage.records import iter_batches
from storage.records.framing import COMPRESSION_CODEC_MASK
from storage.log_files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    SWAP_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    SegmentFileName,
    log_file,
    parse_segment_file_name,
    producer_snapshot_file,
)
from storage.log_reader import LogReader
from storage.segment import LogSegment, SegmentScan
from storage.topic_partition import parse_partition_dir_name
from storage.transaction_index import AbortedTxn

from storage.clock import SYSTEM_CLOCK

from kfs.args import (
    add_store_arguments,
    confirm,
    count,
    directory_or_uri,
    store_options,
    with_stdout,
)

__all__ = [
    "LocalPartition",
    "LogDirectoryFiles",
    "PartitionFiles",
    "Problem",
    "RepairError",
    "RepairPlan",
    "SegmentFiles",
    "UsageError",
    "VerifyStats",
    "check_partition_name",
    "describe_plan",
    "find_partitions",
    "plan_repair",
    "repair",
    "verify_partition",
    "verify_partitions",
]

def _segment_file(name: str) -> SegmentFileName | None:
    """A segment file's name parsed (not one being deleted, cleaned or swapped), else None."""
    f = parse_segment_file_name(name)
    return f if f and not f.extra else None


_LEFTOVER_SUFFIXES = {
    CLEANED_SUFFIX: "output of an interrupted compaction",
    SWAP_SUFFIX: "a compaction result not yet swapped in",
    DELETED_SUFFIX: "a file whose deletion did not finish",
}
_INDEX_KINDS = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_BLOCK = 1024 * 1024  # bytes read at a time from a .log, into one reused buffer
_MAX_CODEC_ID = 4


class UsageError(Exception):
    """A backing directory or partition name that cannot be verified (exit status 2)."""


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem: the partition (``<topic>-<N>``), the file's name, the byte position in that
    file (None when the problem is the whole file) and what is wrong. ``directory`` is where
    the partition's files are when that is not the local directory named ``partition``
    (an object's URI, without credentials)."""

    partition: str
    file: str
    position: int | None
    what: str
    directory: str | None = None
    # the state an unclean shutdown leaves in a segment Kafka's loader recovers at the next
    # start (an active segment's preallocated indexes): said, but not damage
    recovered: bool = False

    def __str__(self) -> str:
        where = self.directory or self.partition
        where += f"/{self.file}" if self.file else ""
        if self.position is not None:
            where += f":{self.position}"
        return f"{where}: {self.what}"


@dataclasses.dataclass
class VerifyStats:
    """What was checked: partitions, segments and .log bytes."""

    partitions: int = 0
    segments: int = 0
    bytes: int = 0


@dataclasses.dataclass(frozen=True)
class SegmentFiles:
    """One segment as listed: its base offset, the name of its files before the kind
    (``<20-digit base>``, or a remote tier's ``<20-digit base>-<segment id>``) and the kinds
    there are besides the ``.log`` (``.index``, ``.timeindex``, ``.txnindex``)."""

    base: int
    stem: str
    kinds: frozenset[str]

    def name(self, kind: str) -> str:
        return self.stem + kind


class PartitionFiles:
    """One partition's files as verify reads them, wherever they are: :class:`LocalPartition`
    here, a bucket's in ``kfs.tools.verify_remote``. A subclass lists the files once
    (``segments``, ``strays``: the problems of the listing itself, e.g. leftovers) and opens
    each segment read-only (``open_segment``: a ``LogSegment`` reading through its
    ``SegmentSource``); the checks are the same for all."""

    partition: str  # <topic>-<N>
    directory: str | None = None  # Problem.directory
    # a gap between segments is a problem (a remote tier: Kafka tiers no compacted topic)
    contiguous = False
    # read failures reported as a problem of the segment, the next segment checked (a store's)
    read_errors: tuple[type[BaseException], ...] = ()
    torn = "a torn write, or a corrupt batch size"  # why whole batches end before the .log
    bad_snapshot = "Kafka deletes it and rebuilds the producer state from the log"
    missing = {
        INDEX_SUFFIX: "missing (Kafka rebuilds it by recovering the segment)",
        TIME_INDEX_SUFFIX: "missing (Kafka would create it empty and lose the segment's "
                           "largest timestamp; recovery rebuilds it)",
    }

    def segments(self) -> list[SegmentFiles]:
        raise NotImplementedError

    def strays(self) -> Iterator[Problem]:
        raise NotImplementedError

    def open_segment(self, segment: SegmentFiles) -> LogSegment:
        raise NotImplementedError

    def log_bytes(self) -> int:
        """The size of the segments' ``.log`` files (what the progress bar counts)."""
        raise NotImplementedError

    def problem(self, file: str, position: int | None, what: str,
                recovered: bool = False) -> Problem:
        return Problem(self.partition, file, position, what, self.directory, recovered)

    def audit(self, segment: SegmentFiles, scan: _LogScan) -> Iterator[Problem]:
        """Problems of a ``.log`` just scanned beyond its bytes' own (what a record of its
        copy says of it): none here."""
        return iter(())

    def unreadable(self, file: str, error: BaseException) -> Problem:
        """The problem of ``file`` that raised ``error`` (one of ``read_errors``)."""
        return self.problem(file, None, f"cannot be read: {error}")


class LogDirectoryFiles(PartitionFiles):
    """A partition directory as a broker keeps it (``<20-digit base>.<kind>`` files), listed
    once: ``names()`` its file names, ``read(name)`` one small file whole."""

    def names(self) -> list[str]:
        raise NotImplementedError

    def read(self, name: str) -> bytes:
        raise NotImplementedError

    @functools.cached_property
    def _listing(self) -> tuple[list[str], list[SegmentFiles]]:
        names = self.names()
        present = set(names)
        stems = sorted((f.offset, n[:-len(LOG_SUFFIX)]) for n in names
                       if (f := _segment_file(n)) and f.kind == LOG_SUFFIX)
        segments = [SegmentFiles(base, stem, frozenset(k for k in _INDEX_KINDS
                                                       if stem + k in present))
                    for base, stem in stems]
        return names, segments

    def segments(self) -> list[SegmentFiles]:
        return self._listing[1]

    def strays(self) -> Iterator[Problem]:
        names, segments = self._listing
        bases = {s.base for s in segments}
        for name in names:
            suffix = name[name.rfind("."):]
            if suffix in _LEFTOVER_SUFFIXES:
                yield self.problem(name, None, f"leftover: {_LEFTOVER_SUFFIXES[suffix]} (Kafka "
                                               "finishes or removes it at the next start)")
            elif (f := _segment_file(name)) and f.kind != LOG_SUFFIX and f.offset not in bases:
                yield self.problem(name, None, "index file without its .log (Kafka deletes it "
                                               "at the next start)")
            elif name.endswith(SNAPSHOT_SUFFIX) and name[:-len(SNAPSHOT_SUFFIX)].isdigit():
                yield from _check_snapshot(self, name)


class LocalPartition(LogDirectoryFiles):
    """A local partition directory, read where it is."""

    def __init__(self, directory: Path) -> None:
        self.path = Path(directory)
        self.partition = self.path.name

    def names(self) -> list[str]:
        return sorted(p.name for p in self.path.iterdir())

    def read(self, name: str) -> bytes:
        return (self.path / name).read_bytes()

    def open_segment(self, segment: SegmentFiles) -> LogSegment:
        return LogSegment(self.path, segment.base, LogConfig(), writable=False)

    def log_bytes(self) -> int:
        return sum((self.path / s.name(LOG_SUFFIX)).stat().st_size for s in self.segments())


def _as_files(partition):
    """A partition as given (a local directory's path, or what lists and opens its files)."""
    return LocalPartition(partition) if isinstance(partition, (str, os.PathLike)) else partition


# -- which partitions ----------------------------------------------------------------------


def find_partitions(backing_dir: str | os.PathLike, names: Sequence[str] = ()) -> list[Path]:
    """The partition directories to check: every ``<topic>-<N>`` directory of ``backing_dir``
    (as ``LogManager`` loads them), or the named ones. Raises UsageError for a missing
    directory, one that is not a Kafka log directory (``/etc``) or a name that is not a
    partition directory in it."""
    backing = Path(backing_dir)
    if not backing.is_dir():
        raise UsageError(f"backing directory {backing} "
                         f"{'is not a directory' if backing.exists() else 'does not exist'}")
    if not names:
        found = []
        for child in sorted(backing.iterdir()):
            try:
                parse_partition_dir_name(child.name)
            except InvalidTopicError:
                continue
            if child.is_dir():
                found.append(child)
        if not found and any(_segment_file(p.name) for p in backing.iterdir()):
            raise UsageError(f"{backing} holds segment files: it is a partition directory; "
                             f"give its parent and the partition name ({backing.name})")
        if not found:
            from storage.log_files import NOT_A_LOG_DIR
            from storage.log_manager import is_log_directory

            if not is_log_directory(backing):
                raise UsageError(f"{backing} is {NOT_A_LOG_DIR}")
        _refuse_foreign(found)
        return found
    paths = []
    for name in names:
        check_partition_name(name)
        if not (backing / name).is_dir():
            raise UsageError(f"no partition {name} in {backing}")
        paths.append(backing / name)
    _refuse_foreign(paths)
    return paths


def _refuse_foreign(partitions: list[Path]) -> None:
    """UsageError naming the first ``<topic>-<N>`` directory that is not a partition (it holds
    files neither kfs nor a broker writes, and no segment: ``/etc/dbus-1``) and its first
    foreign file: the directory is not the log directory it was taken for."""
    from storage.log_manager import foreign_file, not_a_partition

    for path in partitions:
        foreign = foreign_file(path)
        if foreign is not None:
            raise UsageError(not_a_partition(path, foreign))


def check_partition_name(name: str) -> None:
    """UsageError unless ``name`` is a partition directory's name (``<topic>-<N>``)."""
    try:
        parse_partition_dir_name(name)
    except InvalidTopicError as e:
        raise UsageError(str(e)) from None


def log_bytes(partitions: Iterable[Path | PartitionFiles]) -> int:
    """Total size of the ``.log`` files of ``partitions`` (what the progress bar counts)."""
    return sum(_as_files(p).log_bytes() for p in partitions)


def verify_partitions(partitions: Sequence[Path | PartitionFiles],
                      on_bytes: Callable[[int], None] = lambda n: None,
                      in_use: bool = False, unclean: bool = False
                      ) -> Iterator[Problem | VerifyStats]:
    """Problems of every partition in order, then the VerifyStats of the whole run.
    ``on_bytes(n)`` is called as .log bytes are checked. ``in_use``: a writer (a kfs mount,
    a broker) holds the directory; ``unclean``: it was not shut down cleanly (see
    :func:`verify_partition`). A partition with a remote tier
    (``kfs.tools.verify_remote.Tiers``) is checked by its own ``verify``."""
    stats = VerifyStats()
    for partition in partitions:
        stats.partitions += 1
        if hasattr(partition, "verify"):
            yield from partition.verify(stats, on_bytes, in_use, unclean)
        else:
            yield from verify_partition(partition, stats, on_bytes, in_use, unclean)
    yield stats


# -- one partition -------------------------------------------------------------------------


def verify_partition(partition: Path | PartitionFiles, stats: VerifyStats | None = None,
                     on_bytes: Callable[[int], None] = lambda n: None,
                     in_use: bool = False, unclean: bool = False
                     ) -> Generator[Problem, None, int | None]:
    """Every problem of one partition (a local directory, or ``PartitionFiles`` wherever they
    are), segment by segment (read-only); returns the offset after its last batch (None when
    it has none). ``in_use``: a running writer holds the directory, so its active segment is
    checked as Kafka checks a running log: indexes preallocated (zero-filled past their
    entries) and a batch still being written at the end of the ``.log`` are not problems.

    ``unclean``: the directory was not shut down cleanly (no ``.kafka_cleanshutdown``) and
    nobody holds it. Kafka's loader then recovers every segment from the recovery point on,
    the active one always among them (``LogLoader.recoverLog``: ``recoverSegment`` rebuilds
    their indexes), as the next mount does, so the state a writer stopped mid-segment leaves
    in the active segment's indexes (zero-filled preallocated slots, a time index without the
    segment's largest timestamp: a rolled segment's are trimmed and final) is yielded with
    ``recovered`` set: said, not damage."""
    files = _as_files(partition)
    stats = stats if stats is not None else VerifyStats()
    try:
        segments = files.segments()
    except files.read_errors as e:  # (the next partition is still checked)
        yield files.unreadable("", e)
        return None
    yield from files.strays()
    previous_end: int | None = None  # the offset after the last batch of the earlier segments
    for segment in segments:
        stats.segments += 1
        if files.contiguous and previous_end is not None and segment.base > previous_end:
            yield files.problem(segment.name(LOG_SUFFIX), None,
                                f"{files.partition}: offsets {previous_end}..{segment.base - 1} "
                                f"are in no segment (the segment before ends at offset "
                                f"{previous_end - 1})")
        scan = _LogScan(files, segment, previous_end, on_bytes,
                        active=in_use and segment is segments[-1],
                        recovered=unclean and segment is segments[-1])
        try:
            yield from scan.run()
        except files.read_errors as e:
            yield files.unreadable(scan.file, e)
        stats.bytes += scan.size
        if scan.last_offset is not None:
            previous_end = scan.last_offset + 1
    return previous_end


class _LogScan:
    """One pass over a ``.log`` and then its indexes: its problems, and per batch the
    position, last offset and max timestamp the index checks need, kept by the compiled
    ``SegmentScan`` (v2 batches are checked there, a block at a time; legacy v0/v1 entries
    here, one by one)."""

    def __init__(self, files: PartitionFiles, segment: SegmentFiles, previous_end: int | None,
                 on_bytes: Callable[[int], None], active: bool = False,
                 recovered: bool = False) -> None:
        self.files = files
        self.segment = segment
        self.partition = files.partition
        self.active = active  # the segment a running writer appends to
        self.recovered = recovered  # one the loader recovers at the next start (unclean)
        self.base = segment.base
        self.file = segment.name(LOG_SUFFIX)
        self.previous_end = previous_end
        self.on_bytes = on_bytes
        self.batches = SegmentScan(self.base, crc32c,
                                   -1 if previous_end is None else previous_end)
        self.readable = True  # False when a structural error stopped the scan early
        self.size = 0

    @property
    def last_offset(self) -> int | None:
        return self.batches.last_offset

    @property
    def valid_end(self) -> int:
        """The end of the last whole batch read."""
        return self.batches.valid_end

    def problem(self, position: int | None, what: str, kind: str = LOG_SUFFIX,
                recovered: bool = False) -> Problem:
        return self.files.problem(self.segment.name(kind), position, what, recovered)

    def run(self) -> Iterator[Problem]:
        """The .log's problems, then its indexes'."""
        segment = self.files.open_segment(self.segment)
        try:
            self.size = segment.size
            if self.previous_end is not None and self.base < self.previous_end:
                yield self.problem(None, f"base offset {self.base} is below the end of the "
                                         f"segment before (offset {self.previous_end - 1})")
            self._read(segment)
            for position, what in self.batches.problems:
                yield self.problem(position, what)
            if self.readable and self.valid_end < self.size and not self.active:
                yield self.problem(self.valid_end, f"{self.size - self.valid_end} bytes after "
                                   f"the last whole batch ({self.files.torn})")
            self.on_bytes(self.size - self.valid_end)
            yield from self.files.audit(self.segment, self)
            yield from _check_offset_index(self, segment)
            yield from _check_time_index(self, segment)
            yield from _check_txn_index(self, segment)
        finally:
            segment.close()

    def _read(self, segment: LogSegment) -> None:
        """Feed the .log to the scan a block at a time, as the engine's reader gives them
        (``LogReader.blocks``)."""
        scan = self.batches
        segment.source.read_ahead_until(self.size)  # (all of it: a store's reads ahead at once)
        blocks = LogReader.blocks(segment, 0, self.size, block_size=min(_BLOCK, self.size))
        for block in blocks:
            consumed = scan.scan(block, blocks.position)
            if scan.at_legacy:
                consumed += self._legacy(block, blocks.position + consumed, consumed)
            if scan.broken:
                self.readable = False
                what, = scan.problems[-1:]
                scan.problems[-1] = (what[0], f"{what[1]}; the remaining "
                                               f"{self.size - what[0]} bytes of the segment "
                                               "cannot be read")
                return
            self.on_bytes(consumed)
            blocks.advance(consumed)

    def _legacy(self, block, position: int, at: int) -> int:
        """Check the legacy v0/v1 entry at ``block[at:]`` (the .log's ``position``); its
        size, or 0 when it is not whole in the block."""
        try:
            batch = next(iter_batches(block, at), None)
        except (CorruptRecordError, InvalidRecordError) as e:
            self.readable = False
            self.batches.problems.append((position, f"{e}; the remaining "
                                          f"{self.size - position} bytes of the segment cannot "
                                          "be read"))
            return 0
        if batch is None:
            return 0
        try:
            batch.ensure_valid()
        except CorruptRecordError as e:
            self.batches.problems.append((position, str(e)))
        codec = batch.attributes & COMPRESSION_CODEC_MASK
        if codec > _MAX_CODEC_ID:
            self.batches.problems.append((position, f"batch at offset {batch.base_offset}: "
                                                    f"unknown compression type id {codec}"))
        # a legacy entry's own offset is its last; the batch's first is only known inside it
        self.batches.add(position, batch.size_in_bytes, batch.base_offset, batch.last_offset,
                         batch.max_timestamp)
        return batch.size_in_bytes


# -- indexes -------------------------------------------------------------------------------


def _zero_tail(index, name: str, active: bool, entries: int | None = None) -> str | None:
    unused = index.max_entries - (index.entries if entries is None else entries)
    if unused <= 0 or active:  # (an active segment's index is preallocated, as Kafka's)
        return None
    where = "after the last entry" if (index.entries if entries is None else entries) else \
        "and no entry"
    return (f"{unused} zero-filled slots {where}: the {name} was not trimmed "
            "(Kafka would read them as entries)")


def _check_offset_index(scan: _LogScan, segment: LogSegment) -> Iterator[Problem]:
    if INDEX_SUFFIX not in scan.segment.kinds:
        yield scan.problem(None, scan.files.missing[INDEX_SUFFIX], INDEX_SUFFIX)
        return
    index = segment.offset_index  # (read through the segment's source)
    try:
        index.sanity_check()
    except ValueError as e:
        yield scan.problem(None, str(e), INDEX_SUFFIX)
    if (tail := _zero_tail(index, "index", scan.active)) is not None:
        yield scan.problem(index.entries * 8, tail, INDEX_SUFFIX, scan.recovered)
    beyond = None
    for slot, what in scan.batches.check_offset_index(index.raw_entries(), scan.readable):
        if what == "beyond":
            beyond = beyond or (slot * 8, 0)
            beyond = (beyond[0], beyond[1] + 1)
        else:
            offset, position = index.entry(slot)
            yield scan.problem(slot * 8, f"entry (offset {offset}, position {position}): {what}",
                               INDEX_SUFFIX)
    if beyond is not None:
        points = "entry points" if beyond[1] == 1 else "entries point"
        yield scan.problem(beyond[0], f"{beyond[1]} {points} at or past byte {scan.valid_end} "
                                      "of the .log, where its whole batches end", INDEX_SUFFIX)


def _check_time_index(scan: _LogScan, segment: LogSegment) -> Iterator[Problem]:
    largest = scan.batches.max_timestamp_and_offset()
    if TIME_INDEX_SUFFIX not in scan.segment.kinds:
        yield scan.problem(None, scan.files.missing[TIME_INDEX_SUFFIX], TIME_INDEX_SUFFIX)
        return
    index = segment.time_index
    try:
        index.sanity_check()
    except ValueError as e:
        yield scan.problem(None, str(e), TIME_INDEX_SUFFIX)
    entries = 0 if _unwritten_time_index(scan, index) else index.entries
    if (tail := _zero_tail(index, "time index", scan.active, entries)) is not None:
        yield scan.problem(entries * 12, tail, TIME_INDEX_SUFFIX, scan.recovered)
    raw = index.raw_entries()[:entries * 12]
    for slot, what in scan.batches.check_time_index(raw, scan.readable):
        timestamp, offset = index.entry(slot)
        yield scan.problem(slot * 12, f"entry (timestamp {timestamp}, offset {offset}): {what}",
                           TIME_INDEX_SUFFIX)
    if scan.readable and largest[0] >= 0 and not scan.active:
        # (a running log keeps its largest timestamp in memory until the roll or close)
        last = index.last_entry if entries else None
        if last is None or last[0] != largest[0]:
            what = ("empty" if last is None else
                    f"last entry (timestamp {last[0]}, offset {last[1]})")
            yield scan.problem(None, f"{what}, but the segment's largest timestamp is "
                                     f"{largest[0]} (at offset {largest[1]}): Kafka takes it "
                                     "from the last entry (retention, ListOffsets)",
                               TIME_INDEX_SUFFIX, scan.recovered)


def _unwritten_time_index(scan: _LogScan, index) -> bool:
    """Whether the time index of a running or uncleanly closed log's active segment has no
    entry yet: preallocated, its first slot still zeros (timestamp 0 at the base offset),
    which the file alone cannot tell from an entry. Kafka's running log knows it has none
    (``TimeIndex`` entries are counted in memory); its recovery rebuilds the index."""
    return ((scan.active or scan.recovered) and index.entries == 1
            and index.max_entries > 1 and index.entry(0) == (0, scan.base))


def _check_snapshot(files, name: str) -> Iterator[Problem]:
    """The producer snapshot ``name`` of ``files`` (anything with ``read(name)``)."""
    try:
        decode_snapshot(files.read(name))
    except CorruptSnapshotError as e:
        yield files.problem(name, None, f"{e} ({files.bad_snapshot})")
    except files.read_errors as e:
        yield files.unreadable(name, e)


def _check_txn_index(scan: _LogScan, segment: LogSegment) -> Iterator[Problem]:
    """``TransactionIndex.sanityCheck`` (entries' last offsets not below the segment's base),
    strictly increasing last offsets, no partial trailing entry."""
    if TXN_INDEX_SUFFIX not in scan.segment.kinds:
        return  # created only when the segment gets an aborted transaction
    index = segment.txn_index  # (read through the segment's source)
    try:
        txns = index.all_aborted_txns()
        index.sanity_check()
    except CorruptIndexError as e:
        yield scan.problem(None, str(e), TXN_INDEX_SUFFIX)
        return
    for i in range(1, len(txns)):
        if txns[i].last_offset <= txns[i - 1].last_offset:
            yield scan.problem(i * AbortedTxn.SIZE,
                               f"last offset {txns[i].last_offset} does not follow the entry "
                               f"before ({txns[i - 1].last_offset}): entries must strictly "
                               "increase", TXN_INDEX_SUFFIX)
    extra = segment.source.read_index(index.path).length % AbortedTxn.SIZE
    if extra:
        yield scan.problem(len(txns) * AbortedTxn.SIZE,
                           f"{extra} bytes of a partial entry at the end", TXN_INDEX_SUFFIX)


# -- repair --------------------------------------------------------------------------------


class RepairError(Exception):
    """A repair that cannot go ahead (the directory changed since its plan); nothing changed."""


@dataclasses.dataclass
class RepairPlan:
    """What :func:`repair` would do: the salvage of each partition that has something to cut
    (``storage.salvage``), the leftover ``.log`` files recovery settles, and the partitions
    whose problems a recovery mends without cutting (indexes, snapshots); then, since the
    recovery is of the whole directory, what it changes in every partition, damaged or not
    (``snapshots``: the producer snapshots it deletes and the one it keeps or writes at the
    log end; ``recovered``: the partitions without problems, their indexes rebuilt) and at
    the directory's top (``top``: the files written there)."""

    salvage: list  # of storage.salvage.PartitionPlan, each with changes
    leftovers: list[Path]
    rebuilt: list[str]
    snapshots: dict[str, tuple[list[Path], Path | None]] = dataclasses.field(
        default_factory=dict)
    recovered: list[str] = dataclasses.field(default_factory=list)
    top: list[str] = dataclasses.field(default_factory=list)

    @property
    def cut_bytes(self) -> int:
        return sum(c.size for p in self.salvage for s in p.segments for c in s.cuts)


def plan_repair(partitions: Sequence[Path], problems: Iterable[Problem] = ()) -> RepairPlan:
    """The repair of ``partitions`` (read-only: every ``.log`` is read); ``problems`` (from
    a verify run) name the partitions that need a recovery even with nothing to cut."""
    from storage.salvage import plan_partition

    salvage = [plan for plan in map(plan_partition, partitions) if plan.changed]
    leftovers = sorted(p for d in partitions for p in d.iterdir()
                       if f"{LOG_SUFFIX}." in p.name and p.suffix in _LEFTOVER_SUFFIXES)
    cut = {plan.directory.name for plan in salvage}
    rebuilt = sorted({p.partition for p in problems} - cut)
    plan = RepairPlan(salvage, leftovers, rebuilt)
    if partitions:
        _plan_recovery(plan, partitions[0].parent)
    return plan


def _plan_recovery(plan: RepairPlan, backing: Path) -> None:
    """What the repair's recovery of the whole of ``backing`` (every partition, as a broker
    starting without a clean shutdown: ``LogManager(force_recovery=True)``, then a clean
    close) changes beyond the salvage: every partition's producer state is replayed from its
    first segment, which deletes every snapshot but the one at the log end (written again at
    the close, as Kafka takes one there), and its indexes are rebuilt from the .log files;
    the checkpoints and the clean-shutdown marker are written at the top."""
    from storage.directory import open_log_directory
    from storage.errors import KafkaStorageError
    from storage.log_files import (CLEAN_SHUTDOWN_FILE, LOCK_FILE, LOG_START_OFFSET_CHECKPOINT,
                                   RECOVERY_POINT_CHECKPOINT)

    salvaged = {p.directory.name: p for p in plan.salvage}
    mentioned = set(salvaged) | set(plan.rebuilt)
    mgr = open_log_directory(backing)
    try:
        for directory in find_partitions(backing):
            name = directory.name
            try:
                log_ = mgr.get(name)
                start, end = log_.log_start_offset, log_.log_end_offset
            except (KafkaStorageError, OSError):  # (damaged: its salvage plan says the end)
                start = end = None
            if name in salvaged:
                kept = [s.last_offset for s in salvaged[name].segments if s.last_offset is not None]
                end = max(kept) + 1 if kept else None
            if start is None:
                bases = sorted(f.offset for p in directory.iterdir()
                               if (f := _segment_file(p.name)) is not None and
                               p.name.endswith(LOG_SUFFIX))
                start = bases[0] if bases else 0
            end = start if end is None else end
            snapshots = sorted(p for p in directory.iterdir() if p.suffix == SNAPSHOT_SUFFIX)
            at_end = producer_snapshot_file(directory, end) if end > start else None
            doomed = [p for p in snapshots if p != at_end]
            if doomed or (at_end is not None and not at_end.exists()):
                plan.snapshots[name] = (doomed, at_end)
            if name not in mentioned:
                plan.recovered.append(name)
    finally:
        mgr.close()
    written = [RECOVERY_POINT_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT, CLEAN_SHUTDOWN_FILE]
    plan.top = ([LOCK_FILE] if not (backing / LOCK_FILE).exists() else []) + written


def describe_plan(plan: RepairPlan) -> list[str]:
    """The plan in words, a line each: every cut (file, byte range, bytes, offsets lost,
    records its headers claim, why) with the intact batches kept after it, segments moved
    whole or renamed, leftovers, rebuilt partitions."""
    lines = []
    for partition in plan.salvage:
        for segment in partition.segments:
            name = f"{partition.directory.name}/{segment.path.name}"
            if segment.remove:
                lines.append(f"{name}: move the whole segment ({_count(segment.size, 'byte')}, "
                             "no intact batch in it) to the quarantine")
                continue
            for cut in segment.cuts:
                lines.append(f"{name}: cut bytes {cut.start}-{cut.end} ({_cut_text(partition, segment, cut)}): "
                             f"{cut.reason}")
            if segment.new_base is not None:
                lines.append(f"{name}: rename to {log_file(partition.directory, segment.new_base).name} "
                             "(its base offset is below the end of the segment before)")
    for path in plan.leftovers:
        lines.append(f"{path.parent.name}/{path.name}: settled as Kafka does at start-up "
                     f"({_LEFTOVER_SUFFIXES[path.suffix]}); what it removes goes to the quarantine")
    for name in sorted({p.directory.name for p in plan.salvage} | set(plan.rebuilt)):
        lines.append(f"{name}: indexes, time indexes, transaction indexes and producer snapshots "
                     "rebuilt from the .log files")
    for name in plan.recovered:
        lines.append(f"{name}: no problem, recovered too (the repair recovers the whole "
                     "directory, as a broker starting without a clean shutdown): indexes, time "
                     "indexes and transaction indexes rebuilt from the .log files, changed only "
                     "where they differ")
    for name, (doomed, at_end) in sorted(plan.snapshots.items()):
        kept = ("" if at_end is None else
                f"; {at_end.name} {'written again' if at_end.exists() else 'written'} at the "
                "close (the producer state at the log end)")
        if doomed:
            lines.append(f"{name}: {_count(len(doomed), 'producer snapshot')} deleted "
                         f"({', '.join(p.name for p in doomed)}): the producer state is "
                         f"replayed from the first segment{kept}")
        else:
            lines.append(f"{name}: {at_end.name} written at the close (the producer state at "
                         "the log end)")
    if plan.top:
        lines.append(f"the directory's top: {', '.join(plan.top)} written")
    return lines


def _cut_text(partition, segment, cut) -> str:
    first, last = partition.lost_offsets(segment, cut)
    offsets = f"offsets {first}-{last}" if last is not None else f"offsets from {first}"
    records = ("record count unknown (a header is damaged)" if cut.records is None
               else f"{_count(cut.records, 'record')} by the headers")
    kept = partition.kept_after(segment, cut)
    after = (f"; the intact batches after it stay: offsets {kept[0]}-{kept[1]}"
             if kept else "; nothing intact follows")
    return f"{_count(cut.size, 'byte')}, {offsets}, {records}{after}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _file_states(partitions: Iterable[Path]) -> dict[str, tuple[int, bytes | None]]:
    """relative path -> (size, digest); digests for everything but .log files."""
    states = {}
    for directory in partitions:
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            if not path.is_file():
                continue
            size = path.stat().st_size
            digest = None if path.suffix == LOG_SUFFIX else hashlib.blake2b(path.read_bytes()).digest()
            states[f"{directory.name}/{path.name}"] = (size, digest)
    return states


def repair(backing_dir: str | os.PathLike, partitions: Sequence[Path], plan: RepairPlan,
           quarantine_root: str | os.PathLike) -> tuple[list[str], "Quarantine"]:
    """Do ``plan``: under the directory's lock, salvage each partition (every cut kept in a
    quarantine under ``quarantine_root``, intact batches kept), then recover the whole
    backing directory as a broker start without a clean shutdown does
    (``LogManager(force_recovery=True)``: indexes rebuilt, leftovers settled), keeping in the
    same quarantine whatever that removes, and close it cleanly.

    Returns (what changed, one line per segment or other file, e.g.
    ``orders-0/00000000000000000253: .index rebuilt``; the Quarantine, whose ``pieces`` are
    its manifest entries). Raises RepairError when the directory no longer matches the plan,
    and whatever opening the directory raises (LogDirLockedError while a mount has it)."""
    from storage.directory import open_log_directory
    from storage.file_lock import FileLock
    from storage.quarantine import Quarantine
    from storage.salvage import salvage_partition

    quarantine = Quarantine(quarantine_root, keep_all=True)
    lock = FileLock(Path(backing_dir))
    try:
        if plan_repair(partitions).salvage != plan.salvage:
            raise RepairError("the directory changed since the repair plan was made; "
                              "nothing was changed: run the repair again")
        changes = [line for p in plan.salvage for line in salvage_partition(p, quarantine)]
    finally:
        lock.release()
    before = _file_states(partitions)
    open_log_directory(backing_dir, read_only=False, force_recovery=True,
                       quarantine=quarantine).close()
    after = _file_states(partitions)
    grouped: dict[str, list[str]] = {}
    for name in sorted(before.keys() | after.keys()):
        old, new = before.get(name), after.get(name)
        if old != new:
            group, _, suffix = name.partition(".")
            grouped.setdefault(group, []).append(_describe_change("." + suffix, old, new))
    changes += [f"{group}: {', '.join(parts)}" for group, parts in grouped.items()]
    return changes, quarantine


def _describe_change(suffix: str, old: tuple[int, bytes | None] | None,
                     new: tuple[int, bytes | None] | None) -> str:
    if new is None:
        return f"{suffix} removed ({old[0]} bytes)"
    if old is None:
        return f"{suffix} created ({new[0]} bytes)"
    if suffix == LOG_SUFFIX:
        return f"{suffix} cut by {old[0] - new[0]} bytes (to {new[0]})"
    if suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):
        return f"{suffix} rebuilt"
    return f"{suffix} rewritten"


# --------------------------------------------------------------------------- the command

PROGRESS_BYTES = 1 << 30  # a progress bar even off a terminal from this many bytes on


def add_parser(sub) -> None:
    p = sub.add_parser(
        "verify",
        help="check every segment of a backing directory (read-only); --repair recovers it",
        description=(
            "Check the partitions of BACKING_DIR (all, or the PARTITIONs named) read-only: batch "
            "sizes and CRCs, offsets, segment base offsets, every .index and .timeindex entry, "
            "leftover .cleaned/.swap/.deleted files. BACKING_DIR may be a URI (s3://bucket/"
            "prefix, gs://, hdfs://, file://): a log directory copied into an object store, or "
            "a tiered storage root holding kafka-tiered-storage/ (its segments read with "
            "ranged requests, never written). One line per problem (partition/file:byte: "
            "what), then a summary. Exit status: 0 clean, 1 problems found, 2 usage error."
        ),
    )
    p.add_argument("backing_dir", metavar="BACKING_DIR", type=directory_or_uri)
    p.add_argument("partitions", metavar="PARTITION", nargs="*",
                   help="partition directories to check, e.g. orders-0 (default: all)")
    add_store_arguments(p, "the tiered storage root (RemoteStorageManager's, holding "
                           "kafka-tiered-storage/) of the broker log directory BACKING_DIR: its "
                           "remote segments are checked too, the live ones as "
                           "__remote_log_metadata in BACKING_DIR says, and offsets in neither "
                           "tier (the remote tier ending below the local log) are a problem")
    p.add_argument("--repair", action="store_true",
                   help="when problems are found, say what a repair would cut (files, byte "
                        "ranges, offsets, records) and, with --yes or a yes on a terminal, "
                        "do it: only bytes that are not intact batches go, into the "
                        "quarantine; every intact batch stays (the log keeps an offset gap); "
                        "then the whole directory is recovered (indexes rebuilt, leftovers "
                        "settled), and verified again; a local directory only")
    p.add_argument("--yes", action="store_true",
                   help="with --repair: repair without asking")
    p.add_argument("--quarantine", metavar="DIR",
                   help="with --repair: keep what is cut under DIR/<UTC time>/ (default: "
                        "BACKING_DIR.quarantine beside the backing directory; never inside it)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar on stderr (default: when stderr is a terminal "
                        "or there is more than 1 GiB to check)")
    p.set_defaults(func=run, more_positionals="partitions")


def run(args: argparse.Namespace) -> int:
    from storage.location import Location

    where = Location.parse(args.backing_dir)
    if _tiered_root(where):  # LocalTieredStorage's root on a local disk
        args.backing_dir = where.path.resolve().as_uri()
        where = Location.parse(args.backing_dir)
    remote = where.is_remote or args.remote_path is not None or args.remote_config is not None
    if remote and args.repair:
        store = where if where.is_remote else Location.parse(args.remote_path
                                                             or args.remote_config)
        print(f"kfs verify: error: --repair mends a local directory only, not the object store "
              f"{store.display}: verify it without --repair", file=sys.stderr)
        return 2
    if args.remote_path is not None and where.is_remote:
        print("kfs verify: error: --remote-path goes with the broker's local log directory, "
              f"not {where.display}", file=sys.stderr)
        return 2
    if remote:
        return _verify_remote(args)
    from storage.quarantine import check_outside, default_root

    try:
        partitions = find_partitions(args.backing_dir, args.partitions)
        args.quarantine = args.quarantine or default_root(args.backing_dir)
        check_outside(args.quarantine, args.backing_dir)
    except (UsageError, ValueError) as exc:
        print(f"kfs verify: error: {exc}", file=sys.stderr)
        return 2
    return with_stdout(lambda out: _verify_and_repair(out, args, partitions))


def _tiered_root(backing_dir) -> bool:
    """Whether ``backing_dir`` (a ``storage.location.Location``) is a LocalTieredStorage root
    on a local disk (it holds ``kafka-tiered-storage/``) and no partition directories."""
    from storage.remote import TIERED_ROOT

    return (not backing_dir.is_remote
            and (backing_dir.path / TIERED_ROOT).is_dir()
            and not any(_is_partition_dir(name) for name in os.listdir(backing_dir.path)))


def _is_partition_dir(name: str) -> bool:
    try:
        parse_partition_dir_name(name)
    except InvalidTopicError:
        return False
    return True


def _verify_remote(args: argparse.Namespace) -> int:
    """Verify segments in an object store (``kfs.tools.verify_remote``): BACKING_DIR a URI,
    or a broker log directory with its ``--remote-path``."""
    from .verify_remote import OPEN_ERRORS, copied_unclean, one_line, open_remote, open_tiers

    local_dir = unclean_copy = None
    options = store_options(args)
    try:
        if args.remote_path is None and args.remote_config is None:
            partitions, notices, store = open_remote(args.backing_dir, args.partitions, options)
            unclean_copy = store.describe() if copied_unclean(store, partitions) else None
        else:
            partitions, notices, store = open_tiers(args.backing_dir, args.remote_path,
                                                    args.partitions, options)
            local_dir = args.backing_dir
    except OPEN_ERRORS as exc:
        print(f"kfs verify: error: {one_line(exc, args.backing_dir, args.remote_path)}",
              file=sys.stderr)
        return 2
    try:
        def verify(out: TextIO) -> int:
            for notice in notices:
                out.write(f"{notice}\n")
            return 1 if _verify_run(out, partitions, args.progress, local_dir,
                                    unclean_copy) else 0
        return with_stdout(verify)
    finally:
        store.close()


def _verify_and_repair(out: TextIO, args: argparse.Namespace, partitions) -> int:
    problems = _verify_run(out, partitions, args.progress, args.backing_dir)
    if not problems or not args.repair:
        return 1 if problems else 0
    try:
        plan = plan_repair(partitions, problems)
    except Exception as exc:  # noqa: BLE001 - any failure to plan is reported as one line
        print(f"kfs verify: error: cannot plan the repair: {exc}", file=sys.stderr)
        return 1
    out.write("repair plan (nothing has changed yet):\n")
    for line in describe_plan(plan):
        out.write(f"  {line}\n")
    out.write(f"what is cut is kept, with a manifest, in {args.quarantine}/<UTC time>/\n")
    if not (args.yes or confirm(out, "repair now? [y/N] ")):
        out.write("nothing changed: run with --yes to repair\n")
        return 1
    try:
        changes, quarantine = repair(args.backing_dir, partitions, plan, args.quarantine)
    except Exception as exc:  # noqa: BLE001 - any failure to recover is reported as one line
        print(f"kfs verify: error: repair failed: {exc}", file=sys.stderr)
        return 1
    for piece in quarantine.pieces:
        out.write(f"kept {piece['source']} bytes {piece['start']}-{piece['end']} as "
                  f"{quarantine.directory / piece['file']}\n")
    if quarantine.directory is not None:
        out.write(f"quarantine manifest: {quarantine.directory / 'manifest.jsonl'}\n")
    for change in changes:
        out.write(f"repaired {change}\n")
    out.write(f"repair done ({len(changes)} changed); verifying again\n")
    out.flush()
    return 1 if _verify_run(out, partitions, args.progress, args.backing_dir) else 0




def _verify_run(out: TextIO, partitions, progress: bool | None, local_dir=None,
                unclean_copy: str | None = None) -> list:
    """Verify ``partitions``, printing each problem and a summary; returns the problems.
    ``local_dir``: the local log directory they are in, if any (a writer may hold it).
    ``unclean_copy``: the URI of the log directory copied into an object store they are in,
    when the copy holds no ``.kafka_cleanshutdown`` (``verify_remote.copied_unclean``): the
    same rule as a local directory nobody holds."""
    from tqdm import tqdm

    from storage.file_lock import held_elsewhere

    in_use = local_dir is not None and bool(partitions) and held_elsewhere(Path(local_dir))
    if in_use:
        out.write(f"{Path(local_dir)} is in use (a kfs mount or a Kafka broker holds its "
                  ".lock): its active segments are checked as Kafka checks a running log "
                  "(preallocated indexes and a batch being written are not problems)\n")
    unclean = not in_use and bool(partitions) and (_unclean(local_dir) or bool(unclean_copy))
    total = log_bytes(partitions)
    show = progress if progress is not None else (sys.stderr.isatty() or total > PROGRESS_BYTES)
    problems = []
    started = SYSTEM_CLOCK.monotonic()
    recovered = 0
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="verify",
              disable=not show, file=sys.stderr, leave=False) as bar:
        for item in verify_partitions(partitions, bar.update, in_use, unclean):
            if isinstance(item, VerifyStats):
                stats = item
                continue
            if item.recovered:
                if not recovered:
                    out.write(_unclean_notice(local_dir, unclean_copy))
                recovered += 1
                text = f"{item} [recovered at the next start]"
            else:
                problems.append(item)
                text = str(item)
            if show:
                tqdm.write(text, file=out)
            else:
                out.write(f"{text}\n")
    seconds = SYSTEM_CLOCK.monotonic() - started
    summary = count(len(problems), 'problem') if problems else 'no problems'
    if recovered:
        summary += (f" ({count(recovered, 'finding')} marked [recovered at the next start]: "
                    "an uncleanly closed log's state, not damage)")
    out.write(f"{count(stats.partitions, 'partition')}, {count(stats.segments, 'segment')}, "
              f"{count(stats.bytes, 'byte')} checked in {seconds:.1f} s: {summary}\n")
    out.flush()
    return problems


def _unclean_notice(local_dir, unclean_copy: str | None) -> str:
    """What a run says before its first finding marked [recovered at the next start]."""
    if unclean_copy is not None:
        why = (f"{unclean_copy} holds no .kafka_cleanshutdown (a copy of a log directory a "
               "broker or mount was writing, or whose writer was killed or crashed); a broker "
               "or mount started on a copy of it")
    else:
        why = (f"{Path(local_dir)} was not shut down cleanly (no .kafka_cleanshutdown: its "
               "writer was killed or crashed); the next mount or broker start")
    return (f"{why} recovers its active segments, as Kafka's loader does (their indexes "
            "rebuilt): what that recovery mends is marked [recovered at the next start], not "
            "a problem\n")


def _unclean(local_dir) -> bool:
    """Whether the local log directory ``local_dir`` was not shut down cleanly (no
    ``.kafka_cleanshutdown``: its writer was killed or crashed)."""
    from storage.log_files import CLEAN_SHUTDOWN_FILE

    return local_dir is not None and not (Path(local_dir) / CLEAN_SHUTDOWN_FILE).exists()
