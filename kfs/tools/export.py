"""``kfs export``: topics as Parquet files, partitioned by topic and partition, incrementally and
exactly once, as Kafka Connect's sinks commit by offset.

Layout under the destination directory (Hive-style, so ``pyarrow.dataset``, DuckDB's
``read_parquet(..., hive_partitioning=true)`` and Spark read it partitioned)::

    DEST/topic=<topic>/partition=<N>/<topic>+<N>+<start>+<end>.parquet

A file holds the data records of offsets ``[start, end)`` (20-digit offsets, so names sort in
offset order) in ``kfs.read``'s schema with headers. The names are the export's only state (no
side database): the next run of a partition starts at the largest ``end`` there. A file is
written under a hidden temporary name (``.<name>.tmp``, which readers skip), flushed to disk,
then renamed to its final name, so a run killed anywhere leaves only whole files visible and its
next run repeats none of their records (and deletes the leftovers).
"""

from __future__ import annotations

import argparse
import datetime as dt
import fcntl
import json
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..args import CliError, add_store_arguments, directory_or_uri

ROWS_PER_FILE = 1_000_000
_NAME = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)\+(?P<start>\d{20})"
                   r"\+(?P<end>\d{20})\.parquet")
_LOCK = ".kfs-export.lock"
# what is exported when no topic is named: every topic but Kafka's internal ones (__*)
EVERY_TOPIC = "(?!__).*"
_SUBSCRIPTIONS = ("topics", "subscribe", "subscribepattern", "assign")


@dataclass(frozen=True)
class ExportedFile:
    """One committed file: ``path``, the offsets ``[start, end)`` it covers, its ``rows``."""

    path: Path
    topic: str
    partition: int
    start: int
    end: int
    rows: int


def partition_directory(dest: Path, topic: str, partition: int) -> Path:
    return dest / f"topic={topic}" / f"partition={partition}"


def file_name(topic: str, partition: int, start: int, end: int) -> str:
    return f"{topic}+{partition}+{start:020d}+{end:020d}.parquet"


def exported_end(directory: Path) -> int | None:
    """Where the export of a partition stopped: the largest ``end`` of its files' names in
    ``directory`` (None: nothing exported yet)."""
    ends = [int(m["end"]) for m in map(_NAME.fullmatch, _names(directory)) if m]
    return max(ends, default=None)


def export(location: str | os.PathLike, dest: str | os.PathLike, *,
           rows_per_file: int = ROWS_PER_FILE,
           progress: Callable[[ExportedFile], None] | None = None,
           **read_args: Any) -> list[ExportedFile]:
    """Export the records ``kfs.read(location, **read_args)`` names (topics, partitions,
    start/end, isolation level, the Spark source's options) into ``dest`` (a local directory,
    made when missing; every topic but the internal ``__*`` ones when ``read_args`` name none)
    as Parquet files of at most about ``rows_per_file`` rows, after those
    already there: a partition that has files starts at their largest end offset, whatever
    ``start`` says. Calls ``progress`` with each file once it is committed; returns them.

    Raises ValueError for a destination inside the log directory or an object store's URI,
    and as ``kfs.read`` (DataLossError when records after the exported ones are no longer in
    the log, unless ``failOnDataLoss=false``); BlockingIOError when another export is writing
    into ``dest``."""
    import pyarrow.parquet as pq

    from ..library import COLUMNS, plan
    from ..reading.columns import ROWS_PER_ARROW_BATCH, read_log_range
    from ..reading.offsets import clamp_to_log

    if all(value is None for k, value in read_args.items() if k.lower() in _SUBSCRIPTIONS):
        read_args = {**read_args, "subscribePattern": EVERY_TOPIC}
    dest = _destination(location, dest)
    with _locked(dest):
        read = plan(location, read_args, columns=COLUMNS)
        done: list[ExportedFile] = []
        try:
            for rng in _whole_partitions(read.ranges):
                directory = partition_directory(dest, rng.topic, rng.partition)
                _remove_leftovers(directory)
                log = read.directory.get(f"{rng.topic}-{rng.partition}")
                after = exported_end(directory)
                if after is not None:
                    rng = clamp_to_log(replace(rng, start=after, end=max(rng.end, after)), log,
                                       read.opts.fail_on_data_loss)
                if rng.start >= rng.end:
                    continue
                batches = read_log_range(log, rng, True, read.opts.fail_on_data_loss,
                                         read.opts.isolation_level,
                                         min(rows_per_file, ROWS_PER_ARROW_BATCH))
                for exported in _write_files(pq, batches, rng, directory, rows_per_file,
                                             read.schema):
                    done.append(exported)
                    if progress is not None:
                        progress(exported)
        finally:
            read.directory.close()
        return done


def _write_files(pq, batches, rng, directory: Path, rows_per_file: int, schema):
    """Files of ``batches`` (the records of ``rng``), each committed once it has
    ``rows_per_file`` rows, the last one ending at ``rng.end``."""
    file, start = None, rng.start
    for batch in batches:
        if file is None:
            directory.mkdir(parents=True, exist_ok=True)
            file = _File(pq, directory / f".{rng.topic}+{rng.partition}+{start:020d}"
                                         ".parquet.tmp", schema)
        file.add(batch)
        if file.rows >= rows_per_file:
            end = batch.column("offset")[-1].as_py() + 1
            yield _commit(file, rng, start, end)
            file, start = None, end
    if file is not None:
        yield _commit(file, rng, start, rng.end)


class _File:
    """A Parquet file being written under its temporary name ``tmp``: batches gathered into
    row groups of up to ``ROW_GROUP_ROWS`` rows or ``ROW_GROUP_BYTES`` (one row group per
    batch would be many small ones: slower to write and to read, less compressed)."""

    ROW_GROUP_ROWS = 1 << 20  # pyarrow.parquet's default largest row group
    ROW_GROUP_BYTES = 64 << 20

    def __init__(self, pq, tmp: Path, schema):
        self.tmp, self.writer = tmp, pq.ParquetWriter(tmp, schema)
        self.pending: list = []
        self.pending_rows = self.pending_bytes = self.rows = 0

    def add(self, batch) -> None:
        self.pending.append(batch)
        self.rows += batch.num_rows
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        if self.pending_rows >= self.ROW_GROUP_ROWS or self.pending_bytes >= self.ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            import pyarrow as pa

            self.writer.write_table(pa.Table.from_batches(self.pending),
                                    row_group_size=self.pending_rows)
            self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def close(self) -> None:
        self.flush()
        self.writer.close()


def _commit(file: _File, rng, start: int, end: int) -> ExportedFile:
    """The temporary file made durable under its final name: written, fsynced, renamed, and
    the rename fsynced (its directory's entry), so a crash never shows a partial file."""
    file.close()
    tmp, rows = file.tmp, file.rows
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    final = tmp.with_name(file_name(rng.topic, rng.partition, start, end))
    os.rename(tmp, final)
    _fsync_directory(final.parent)
    return ExportedFile(final, rng.topic, rng.partition, start, end, rows)


def _fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _whole_partitions(ranges) -> list:
    """One range per partition (a plan may cut one for parallelism: ``minPartitions``)."""
    whole: dict[tuple[str, int], Any] = {}
    for rng in ranges:
        key = (rng.topic, rng.partition)
        seen = whole.get(key)
        whole[key] = rng if seen is None else replace(seen, start=min(seen.start, rng.start),
                                                       end=max(seen.end, rng.end))
    return list(whole.values())


def _names(directory: Path) -> list[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _remove_leftovers(directory: Path) -> None:
    """The temporary files of a run that was killed (they were never visible)."""
    for name in _names(directory):
        if name.startswith(".") and name.endswith(".parquet.tmp"):
            os.unlink(directory / name)


def _destination(location, dest) -> Path:
    from storage.location import Location

    if Location.parse(dest).is_remote:
        raise ValueError(f"{dest}: kfs export writes to a local directory (an object store "
                         "destination is not supported yet)")
    path = Path(dest).resolve()
    where = Location.parse(location)
    if not where.is_remote:
        source = where.path.resolve()
        if path == source or source in path.parents:
            raise ValueError(f"{dest} is inside the log directory {location}: export to a "
                             "directory outside it (Kafka keeps only <topic>-<N> there)")
    path.mkdir(parents=True, exist_ok=True)
    return path


class _locked:
    """``dest``'s export lock (an flock on ``.kfs-export.lock``): one export at a time, or two
    would commit the same offsets."""

    def __init__(self, dest: Path):
        self.path = dest / _LOCK

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


# -- the command -----------------------------------------------------------------------------

def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write topics as Parquet files, partitioned by topic/partition, incrementally",
        description=(
            "Write the records of LOCATION's topics (a log directory, or an object store's URI) "
            "as Parquet files into DEST: DEST/topic=<T>/partition=<N>/<T>+<N>+<start>+<end>"
            ".parquet, the records of offsets [start, end) in kfs.read's columns (key, value, "
            "topic, partition, offset, timestamp, timestampType, headers). Incremental and "
            "exactly once: a partition already exported continues after its last file's end "
            "offset, and a killed run leaves no partial file (each is written under a hidden "
            "name, then renamed). Options are the Spark source's (-o name=value). One line per "
            "file written on stderr."),
    )
    p.add_argument("location", metavar="LOCATION", type=directory_or_uri)
    p.add_argument("dest", metavar="DEST", help="the directory to write (made when missing)")
    p.add_argument("--topic", action="append", dest="topics", metavar="TOPIC",
                   help="a topic to export (repeatable; default: every topic there but Kafka's "
                        "internal __* ones)")
    p.add_argument("--partition", action="append", type=int, dest="partitions", metavar="N",
                   help="only these partitions of the --topic(s) (repeatable)")
    p.add_argument("--start", metavar="WHERE",
                   help="where a partition not yet exported starts: earliest (default), an "
                        "offset (with --topic and --partition), a time with its zone "
                        "(2026-11-29T00:00:00Z), or Spark's JSON offsets")
    p.add_argument("--end", metavar="WHERE",
                   help="where to stop, exclusive: latest (default), or as --start")
    p.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"))
    p.add_argument("--rows-per-file", type=_positive, default=ROWS_PER_FILE, metavar="N",
                   help=f"records per Parquet file at most, about (default {ROWS_PER_FILE})")
    p.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help="an option of the Spark source (failOnDataLoss=false, "
                        "startingOffsetsByTimestamp=..., ...)")
    add_store_arguments(p, "the RemoteStorageManager's root of a tiered topic (remote.path)")
    p.set_defaults(func=run)


def _positive(text: str) -> int:
    from ..args import positive_int

    return positive_int(text)


def run(args: argparse.Namespace) -> int:
    read_args = _read_args(args)
    started = dt.datetime.now(dt.timezone.utc)
    total = [0, 0]

    def report(f: ExportedFile) -> None:
        total[0] += 1
        total[1] += f.rows
        print(f"kfs export: {f.topic}-{f.partition}: offsets {f.start}..{f.end - 1}, "
              f"{f.rows} records -> {f.path}", file=sys.stderr, flush=True)

    from storage.errors import KafkaStorageError

    try:
        export(args.location, args.dest, rows_per_file=args.rows_per_file, progress=report,
               **read_args)
    except (ValueError, KafkaStorageError, OSError) as e:
        raise CliError(str(e)) from None
    took = (dt.datetime.now(dt.timezone.utc) - started).total_seconds()
    print(f"kfs export: {total[1]} records in {total[0]} new files ({took:.1f} s)",
          file=sys.stderr, flush=True)
    return 0


def _read_args(args: argparse.Namespace) -> dict[str, Any]:
    read_args: dict[str, Any] = {"topics": args.topics, "partitions": args.partitions}
    if args.topics is None and args.partitions:
        raise CliError("--partition needs --topic")
    for name in ("start", "end"):
        text = getattr(args, name)
        if text is not None:
            read_args[name] = _bound(text, name)
    if args.isolation_level:
        read_args["isolation_level"] = args.isolation_level
    for option in args.option:
        key, eq, value = option.partition("=")
        if not eq or not key:
            raise CliError(f"-o {option!r}: give NAME=VALUE")
        read_args[key] = value
    for key, value in (("remote.path", args.remote_path), ("endpoint", args.endpoint),
                       ("region", args.region)):
        if value:
            read_args[key] = value
    return read_args


def _bound(text: str, name: str):
    """``--start``/``--end``: an offset, a time with its zone, else the text (earliest, latest,
    Spark's JSON)."""
    text = text.strip()
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text[:1].isdigit():
        try:
            when = dt.datetime.fromisoformat(text)
        except ValueError:
            raise CliError(f"--{name} {text!r}: not an offset nor an ISO time") from None
        if when.tzinfo is None:
            raise CliError(f"--{name} {text!r}: give the time's zone (Z, +01:00)")
        return when
    if text.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise CliError(f"--{name}: not JSON offsets ({e})") from None
    return text


