"""The Python library's figures beside their ceilings, measured in the same run (issue 38):

    .venv/bin/python benchmarks/bench_library.py [--records N] [--rounds R] [--keep]

1. ``kfs.read`` of an N-record partition (default 1M records of 100-byte values, ~16 KiB
   batches, written by the engine) into Arrow batches, beside the engine's own decode of the
   same ``.log`` bytes into columns (``bench.py``'s ``engine_decode``, CRC-checked as a read is,
   over bytes already in memory) and the engine's ``LogReader.read_columns`` of the partition
   (the same decode, reading the files): what the API adds (planning, the one door, Spark's
   schema).
2. ``kfs export`` of that partition (one Parquet file, ``pyarrow.parquet``), beside
   ``pyarrow.parquet.write_table`` of the same Arrow table alone (already read): what the Parquet
   writer bounds.
3. DuckDB's ``SELECT count(*), sum(octet_length(value))`` over the reader, beside the same query
   over the exported Parquet.

One unmeasured round warms up (imports, the page cache); then rounds run interleaved; the
table gives medians (min-max) and the ratio of medians. Everything
is in a temp dir under /tmp, removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from needs import require  # noqa: E402

require("bench_library.py", "duckdb", "pyarrow")

import duckdb  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

import kfs  # noqa: E402
from bench import engine_decode  # noqa: E402
from kfs.tools.export import export  # noqa: E402
from storage import LogManager  # noqa: E402

TOPIC = "bench"
VALUE = 99


def make_partition(root: Path, records: int) -> None:
    """``bench-0`` with ``records`` records of 99-byte values (a counter, then padding), as
    lines appended through the engine (producer-sized batches)."""
    manager = LogManager(root)
    try:
        log = manager.create(f"{TOPIC}-0")
        step = 100_000
        for first in range(0, records, step):
            n = min(step, records - first)
            log.append_lines(b"".join(b"%010d" % i + b"x" * (VALUE - 10) + b"\n"
                                      for i in range(first, first + n)))
    finally:
        manager.close()


def timed(fn) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def read_all(root: Path) -> int:
    return sum(batch.num_rows for batch in kfs.read(root, topics=TOPIC))


def decode_all(files: list[bytes]) -> int:
    return sum(engine_decode(buf, check_crc=True) for buf in files)


def read_columns(root: Path) -> int:
    manager = LogManager(root, read_only=True)
    try:
        return sum(b.num_rows for b in manager.get(f"{TOPIC}-0").reader.read_columns(0))
    finally:
        manager.close()


def export_once(root: Path, out: Path, records: int) -> int:
    shutil.rmtree(out, ignore_errors=True)
    return sum(f.rows for f in export(root, out, topics=TOPIC, rows_per_file=records + 1))


def duckdb_reader(root: Path):
    reader = kfs.read(root, topics=TOPIC, columns=["value"])  # noqa: F841 - DuckDB finds it by name
    return duckdb.sql("SELECT count(*), sum(octet_length(value)) FROM reader").fetchall()


def duckdb_parquet(out: Path):
    return duckdb.sql("SELECT count(*), sum(octet_length(value)) FROM "
                      f"read_parquet('{out}/**/*.parquet')").fetchall()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-library-"))
    try:
        root, out = tmp / "data", tmp / "parquet"
        root.mkdir()
        print(f"writing {args.records} records into {root}/{TOPIC}-0 ...", file=sys.stderr)
        make_partition(root, args.records)
        files = [p.read_bytes() for p in sorted((root / f"{TOPIC}-0").glob("*.log"))]
        table = kfs.read_table(root, topics=TOPIC, includeHeaders=True)
        times: dict[str, list[float]] = {k: [] for k in (
            "read", "decode", "read_columns", "export", "write_table", "duckdb_reader",
            "duckdb_parquet")}
        for round in range(args.rounds + 1):
            for name, fn, want in (
                    ("read", lambda: read_all(root), args.records),
                    ("decode", lambda: decode_all(files), args.records),
                    ("read_columns", lambda: read_columns(root), args.records),
                    ("export", lambda: export_once(root, out, args.records), args.records),
                    ("write_table", lambda: pq.write_table(table, tmp / "plain.parquet"), None),
                    ("duckdb_reader", lambda: duckdb_reader(root), None),
                    ("duckdb_parquet", lambda: duckdb_parquet(out), None)):
                took, got = timed(fn)
                if want is not None and got != want:
                    raise SystemExit(f"{name}: {got} records, not {want}")
                if round:  # (round 0 warms up)
                    times[name].append(took)
        size = sum(len(b) for b in files)
        print(f"\n{args.records} records, {size / 1e6:.0f} MB of .log, {args.rounds} rounds "
              "(median, min-max)")
        rows = (("kfs.read into Arrow", "read", "engine decode into columns", "decode",
                 "records/s"),
                ("kfs.read into Arrow", "read", "LogReader.read_columns", "read_columns",
                 "records/s"),
                ("kfs export to Parquet", "export", "pyarrow.parquet.write_table", "write_table",
                 "records/s"),
                ("DuckDB over kfs.read", "duckdb_reader", "DuckDB over the Parquet",
                 "duckdb_parquet", "s"))
        for what, mine, ceiling_what, ceiling, unit in rows:
            a, b = statistics.median(times[mine]), statistics.median(times[ceiling])
            spread = lambda k: f"{min(times[k]):.3f}-{max(times[k]):.3f} s"  # noqa: E731
            if unit == "records/s":
                print(f"  {what:<24} {args.records / a / 1e6:6.2f} M/s ({spread(mine)})   "
                      f"{ceiling_what:<28} {args.records / b / 1e6:6.2f} M/s "
                      f"({spread(ceiling)})   ratio {b / a:.2f}x")
            else:
                print(f"  {what:<24} {a:6.3f} s ({spread(mine)})   {ceiling_what:<28} "
                      f"{b:6.3f} s ({spread(ceiling)})   time ratio {a / b:.2f}x")
    finally:
        if args.keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
