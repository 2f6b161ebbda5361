"""``kfs export``: topics as Parquet files, partitioned by topic and partition (and by date when
asked), incrementally and exactly once, as Kafka Connect's sinks commit by offset.

Layout under the destination (a local directory, or an object store's prefix
``s3://bucket/prefix``), Hive-style, so ``pyarrow.dataset``, DuckDB's
``read_parquet(..., hive_partitioning=true)`` and Spark read it partitioned and prune by it::

    DEST/topic=<topic>/partition=<N>/[date=<YYYY-MM-DD>/]<topic>+<N>+<start>+<end>.parquet

A file holds the data records of offsets ``[start, end)`` (20-digit offsets: names sort in
offset order). ``partition_by_date`` adds the ``date`` level, the records' UTC date (of Kafka's
epoch ms; -1, a v0 record's "none", is 1969-12-31); a file is cut where the date changes, so it
never spans two (timestamps need not grow with offsets: a date may hold several files, and a
partition's files follow one another across dates). The columns are ``kfs.read``'s, headers
included, or those ``columns`` names; ``offset`` is always written (a file says which offsets it
holds); ``topic`` and ``partition`` need not be (the path says them; Hive partitioning gives
them back as columns).

The names are the export's only state: the next run of a partition starts at the largest
``end`` of its files, of all its dates. A file becomes visible under its final name only once
it is whole (``kfs.tools.export_destination``: a local file renamed from a hidden name after an
fsync, an object uploaded in one stream that completes or leaves nothing), so a run killed
anywhere leaves only whole files and its next run repeats none of their records. A local
destination admits one run at a time (a lock file); an object store's has no lock: run one
export per destination at a time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..args import CliError, add_store_arguments, directory_or_uri

ROWS_PER_FILE = 1_000_000
_NAME = re.compile(r"(?P<topic>[A-Za-z0-9._-]+)\+(?P<partition>\d+)\+(?P<start>\d{20})"
                   r"\+(?P<end>\d{20})\.parquet")
# what is exported when no topic is named: every topic but Kafka's internal ones (__*)
EVERY_TOPIC = "(?!__).*"
_SUBSCRIPTIONS = ("topics", "subscribe", "subscribepattern", "assign")


@dataclass(frozen=True)
class ExportedFile:
    """One committed file: ``path`` (a Path in a local destination, the object's URI, without
    credentials, in an object store), the offsets ``[start, end)`` it covers, its ``rows``,
    and its ``date`` directory's date (``YYYY-MM-DD``) when partitioned by date."""

    path: Path | str
    topic: str
    partition: int
    start: int
    end: int
    rows: int
    date: str | None = None


@dataclass(frozen=True)
class _Shape:
    """What the files hold and where they are cut: ``columns`` written (``schema``), a file
    ending at ``rows_per_file`` rows, and with ``by_date`` at each change of date."""

    columns: tuple[str, ...]
    schema: Any
    rows_per_file: int
    by_date: bool

    @property
    def read(self) -> list[str]:
        """The columns read: those written, and the timestamp a date is taken from."""
        extra = ["timestamp"] if self.by_date and "timestamp" not in self.columns else []
        return [*self.columns, *extra]


def file_name(topic: str, partition: int, start: int, end: int) -> str:
    return f"{topic}+{partition}+{start:020d}+{end:020d}.parquet"


def exported_end(directory: str | os.PathLike) -> int | None:
    """Where the export of a partition stopped: the largest ``end`` of its files' names in the
    local partition ``directory`` and its ``date=`` directories (None: nothing exported yet)."""
    from .export_destination import LocalDirectory

    return _largest_end(LocalDirectory(Path(directory)).files(), None, str(directory))


def _largest_end(files: Iterable[tuple[str, ...]], by_date: bool | None,
                 where: str) -> int | None:
    """The largest ``end`` among ``files`` (paths below a partition directory, as parts): its
    files, or its ``date=`` directories' (other files are not the export's). Raises ValueError
    when they are laid out otherwise than ``by_date`` says (None: either)."""
    ends = []
    for rel in files:
        match = _NAME.fullmatch(rel[-1])
        dated = len(rel) == 2 and rel[0].startswith("date=")
        if match is None or not (len(rel) == 1 or dated):
            continue
        if by_date is not None and dated != by_date:
            raise ValueError(
                f"{where} holds files {'not ' if by_date else ''}partitioned by date: export "
                f"{'without' if by_date else 'with'} partition_by_date (--partition-by-date) "
                "or into another destination (the layouts would mix)")
        ends.append(int(match["end"]))
    return max(ends, default=None)


def exported_columns(columns: str | Iterable[str] | None) -> tuple[str, ...]:
    """The columns the files hold: ``columns`` (names of :data:`kfs.library.COLUMNS`, in the
    order given, repeats dropped; None: all of them), with ``offset`` added when missing.
    Raises ValueError naming an unknown column and listing the valid ones."""
    from ..library import COLUMNS

    if columns is None:
        return COLUMNS
    names = [columns] if isinstance(columns, str) else list(columns)
    unknown = [name for name in names if name not in COLUMNS]
    if unknown or not names:
        what = f"unknown column {', '.join(map(repr, unknown))}" if unknown else "no column"
        raise ValueError(f"{what}: the columns are {', '.join(COLUMNS)}")
    return tuple(dict.fromkeys([*names, "offset"]))


def export(location: str | os.PathLike, dest: str | os.PathLike, *,
           rows_per_file: int = ROWS_PER_FILE, partition_by_date: bool = False,
           columns: str | Iterable[str] | None = None,
           progress: Callable[[ExportedFile], None] | None = None,
           **read_args: Any) -> list[ExportedFile]:
    """Export the records ``kfs.read(location, **read_args)`` names (topics, partitions,
    start/end, isolation level, the Spark source's options) into ``dest`` (a local directory,
    made when missing, or an object store's URI ``s3://bucket/prefix``, reached with the
    ``endpoint``/``region`` options and the ``AWS_*`` chain as ``location`` is; every topic but
    the internal ``__*`` ones when ``read_args`` name none) as Parquet files of at most about
    ``rows_per_file`` rows, after those already there: a partition that has files starts at
    their largest end offset, whatever ``start`` says. ``partition_by_date``: a ``date=``
    level under each partition, files cut at each change of date. ``columns``: the columns
    written (:func:`exported_columns`; default all, headers included). Calls ``progress`` with
    each file once it is committed; returns them.

    Raises ValueError for a destination inside the log directory, a missing bucket, an unknown
    column, a partition already exported in the other layout (with/without dates), and as
    ``kfs.read`` (DataLossError when records after the exported ones are no longer in the log,
    unless ``failOnDataLoss=false``); BlockingIOError when another export is writing into a
    local ``dest`` (an object store's is not guarded); ObjectStoreError when the store
    refuses."""
    import pyarrow as pa

    from ..library import SCHEMA, plan
    from .export_destination import open_destination

    written = exported_columns(columns)
    shape = _Shape(written, pa.schema([SCHEMA.field(n) for n in written]), rows_per_file,
                   partition_by_date)
    if all(value is None for k, value in read_args.items() if k.lower() in _SUBSCRIPTIONS):
        read_args = {**read_args, "subscribePattern": EVERY_TOPIC}
    out = open_destination(location, dest, **_store_options(read_args))
    try:
        with out.locked():
            read = plan(location, read_args, columns=shape.read)
            done: list[ExportedFile] = []
            try:
                for rng in _whole_partitions(read.ranges):
                    for exported in _export_partition(read, rng, out, shape):
                        done.append(exported)
                        if progress is not None:
                            progress(exported)
            finally:
                read.directory.close()
            return done
    finally:
        out.close()


def _store_options(read_args) -> dict[str, str | None]:
    """The destination's ``endpoint`` and ``region``: the read's (one store's settings for
    every URI of the command)."""
    lowered = {k.lower(): v for k, v in read_args.items()}
    return {"endpoint": lowered.get("endpoint") or None, "region": lowered.get("region") or None}


def _export_partition(read, rng, out, shape: _Shape):
    """The files of the records of ``rng`` after those already exported, each as committed."""
    from ..reading.columns import ROWS_PER_ARROW_BATCH, read_log_range
    from ..reading.offsets import clamp_to_log

    parts = (f"topic={rng.topic}", f"partition={rng.partition}")
    out.remove_leftovers(*parts)
    log = read.directory.get(f"{rng.topic}-{rng.partition}")
    after = _largest_end(out.files(*parts), shape.by_date, out.display(*parts))
    if after is not None:
        rng = clamp_to_log(replace(rng, start=after, end=max(rng.end, after)), log,
                           read.opts.fail_on_data_loss)
    if rng.start >= rng.end:
        return
    batches = read_log_range(log, rng, "headers" in shape.columns, read.opts.fail_on_data_loss,
                             read.opts.isolation_level,
                             min(shape.rows_per_file, ROWS_PER_ARROW_BATCH))
    yield from _write_files(out, _pieces(batches, shape.by_date), rng, parts, shape)


def _write_files(out, pieces, rng, parts: tuple[str, ...], shape: _Shape):
    """Files of ``pieces`` ((date, batch): the records of ``rng``), each committed once it has
    ``rows_per_file`` rows or before a piece of another date, the last one ending at
    ``rng.end``; so the files of a partition follow one another. A file not committed (an
    error, the generator closed) is abandoned."""
    import pyarrow.parquet as pq

    file, start = None, rng.start
    try:
        for date, piece in pieces:
            if file is not None and file.date != date:
                done, file, start = _commit(out, file, rng, start, file.next_offset)
                yield done
            if file is None:
                where = parts + ((f"date={date}",) if shape.by_date else ())
                file = _File(pq, out.begin(where, f"{rng.topic}+{rng.partition}+{start:020d}"),
                             where, date, shape.schema)
            file.add(piece.select(shape.columns))
            if file.rows >= shape.rows_per_file:
                done, file, start = _commit(out, file, rng, start, file.next_offset)
                yield done
        if file is not None:
            done, file, start = _commit(out, file, rng, start, rng.end)
            yield done
    finally:
        if file is not None:
            file.discard()
            out.abandon(file.path)


def _pieces(batches, by_date: bool):
    """(date, batch) of each batch, with ``by_date`` cut where the records' UTC date
    (``YYYY-MM-DD``) changes; else (None, batch)."""
    for batch in batches:
        if not by_date:
            yield None, batch
        elif batch.num_rows:
            yield from _by_date(batch)


def _by_date(batch):
    import pyarrow as pa
    import pyarrow.compute as pc

    # (a timestamp[us, UTC] cast to date32 is its UTC date, floored: -1 ms is 1969-12-31;
    # Kafka's timestamps are never null)
    days = pc.cast(batch.column("timestamp"), pa.date32())
    first, last = pc.min_max(days).values()
    if first == last:  # the usual batch: one date
        yield first.as_py().isoformat(), batch
        return
    n = batch.num_rows
    changed = pc.not_equal(days.slice(1), days.slice(0, n - 1))
    bounds = [0, *(i + 1 for i in pc.indices_nonzero(changed).to_pylist()), n]
    for a, b in zip(bounds, bounds[1:]):
        yield days[a].as_py().isoformat(), batch.slice(a, b - a)


class _File:
    """A Parquet file being written at ``path`` (the destination's :meth:`begin`), to be
    ``parts``/<name> (``date``: its date directory's, or None): batches gathered into row
    groups of up to ``ROW_GROUP_ROWS`` rows or ``ROW_GROUP_BYTES`` (one row group per batch
    would be many small ones: slower to write and to read, less compressed). ``next_offset``:
    the offset after its last record.

    A row group is written on a thread of its own while the next one is read and decoded
    (pyarrow's writer releases the GIL): at most one row group in flight beside the one
    gathering, and a write's error is raised at the next flush or at :meth:`close`."""

    ROW_GROUP_ROWS = 1 << 20  # pyarrow.parquet's default largest row group
    ROW_GROUP_BYTES = 64 << 20

    def __init__(self, pq, path: str, parts: tuple[str, ...], date: str | None, schema):
        from concurrent.futures import ThreadPoolExecutor

        self.path, self.parts, self.date = path, parts, date
        self.writer = pq.ParquetWriter(path, schema)
        self.pending: list = []
        self.pending_rows = self.pending_bytes = self.rows = 0
        self.next_offset: int | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="kfs-export-write")
        self._writing = None  # the row group being written (a Future)

    def add(self, batch) -> None:
        self.pending.append(batch)
        self.rows += batch.num_rows
        self.pending_rows += batch.num_rows
        self.pending_bytes += batch.nbytes
        self.next_offset = batch.column("offset")[-1].as_py() + 1
        if self.pending_rows >= self.ROW_GROUP_ROWS or self.pending_bytes >= self.ROW_GROUP_BYTES:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            import pyarrow as pa

            table = pa.Table.from_batches(self.pending)
            self._wait()
            self._writing = self._thread.submit(self.writer.write_table, table,
                                                row_group_size=self.pending_rows)
            self.pending, self.pending_rows, self.pending_bytes = [], 0, 0

    def _wait(self) -> None:
        """The row group in flight written (its error raised)."""
        writing, self._writing = self._writing, None
        if writing is not None:
            writing.result()

    def close(self) -> None:
        try:
            self.flush()
            self._wait()
            self.writer.close()
        finally:
            self._thread.shutdown()

    def discard(self) -> None:
        """Nothing more written (a write in flight finished, its error dropped: the file is
        being abandoned)."""
        self._thread.shutdown(wait=True)


def _commit(out, file: _File, rng, start: int, end: int):
    """``file`` closed and committed as the offsets ``[start, end)``: (its ExportedFile, no
    file open, where the next file starts)."""
    file.close()
    name = file_name(rng.topic, rng.partition, start, end)
    path = out.commit(file.path, file.parts, name)
    return ExportedFile(path, rng.topic, rng.partition, start, end, file.rows, file.date), \
        None, end


def _whole_partitions(ranges) -> list:
    """One range per partition (a plan may cut one for parallelism: ``minPartitions``)."""
    whole: dict[tuple[str, int], Any] = {}
    for rng in ranges:
        key = (rng.topic, rng.partition)
        seen = whole.get(key)
        whole[key] = rng if seen is None else replace(seen, start=min(seen.start, rng.start),
                                                       end=max(seen.end, rng.end))
    return list(whole.values())


# -- the command -----------------------------------------------------------------------------

def add_parser(sub) -> None:
    p = sub.add_parser(
        "export",
        help="write topics as Parquet files, partitioned by topic/partition, incrementally",
        description=(
            "Write the records of LOCATION's topics (a log directory, or an object store's URI) "
            "as Parquet files into DEST (a directory, or an object store's URI "
            "s3://bucket/prefix): DEST/topic=<T>/partition=<N>/[date=<YYYY-MM-DD>/]"
            "<T>+<N>+<start>+<end>.parquet, the records of offsets [start, end) in kfs.read's "
            "columns (key, value, topic, partition, offset, timestamp, timestampType, headers; "
            "or --columns). Incremental and exactly once: a partition already exported "
            "continues after its files' largest end offset, and a killed run leaves no partial "
            "file (a local one is written under a hidden name, then renamed; an object is "
            "uploaded once whole). One export per DEST at a time: a local DEST is locked, an "
            "object store's is not. Options are the Spark source's (-o name=value). One line "
            "per file written on stderr."),
    )
    p.add_argument("location", metavar="LOCATION", type=directory_or_uri)
    p.add_argument("dest", metavar="DEST",
                   help="the directory to write (made when missing), or an object store's URI "
                        "(s3://bucket/prefix: the bucket must exist; --endpoint, --region and "
                        "the AWS_* variables reach it as they reach LOCATION)")
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
    p.add_argument("--partition-by-date", action="store_true",
                   help="add a date=<YYYY-MM-DD> level under partition=<N> (the records' UTC "
                        "date), cutting files where the date changes")
    p.add_argument("--columns", metavar="NAMES",
                   help="the columns to write, comma-separated, among kfs.read's (default all); "
                        "offset is always written")
    p.add_argument("-o", "--option", action="append", default=[], metavar="NAME=VALUE",
                   help="an option of the Spark source (failOnDataLoss=false, "
                        "startingOffsetsByTimestamp=..., ...)")
    add_store_arguments(p, "the RemoteStorageManager's root of a tiered topic (remote.path)")
    p.set_defaults(func=run)


def _column_names(text: str) -> tuple[str, ...]:
    """``--columns``: the names, checked (a CliError names an unknown one and the valid)."""
    try:
        return exported_columns([name.strip() for name in text.split(",") if name.strip()])
    except ValueError as e:
        raise CliError(f"--columns {text!r}: {e}") from None


def _positive(text: str) -> int:
    from ..args import positive_int

    return positive_int(text)


def run(args: argparse.Namespace) -> int:
    read_args = _read_args(args)
    columns = None if args.columns is None else _column_names(args.columns)
    started = dt.datetime.now(dt.timezone.utc)
    total = [0, 0]

    def report(f: ExportedFile) -> None:
        total[0] += 1
        total[1] += f.rows
        print(f"kfs export: {f.topic}-{f.partition}: offsets {f.start}..{f.end - 1}, "
              f"{f.rows} records -> {f.path}", file=sys.stderr, flush=True)

    from storage.errors import KafkaStorageError

    try:
        export(args.location, args.dest, rows_per_file=args.rows_per_file,
               partition_by_date=args.partition_by_date, columns=columns, progress=report,
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


