"""Spark figures for the kfs data source, each beside its ceilings re-measured in the same run.
The machines are noisy: every figure is measured ``--rounds`` times, interleaved with its
ceilings, and the tables give medians (min-max); the useful figures are the ratios.

* full read: rows/s of an aggregate over every column of N records with ``format("kfs")``,
  beside
  - the ceiling: a Python data source (defined here) yielding prebuilt Arrow record batches of
    the same rows in the same schema (memory-mapped Arrow IPC files, as many input partitions
    as kfs plans), i.e. Spark's Python data source path with nothing to decode;
  - Spark reading the same rows from Parquet;
* a 1% time range read (``startingTimestamp``/``endingTimestamp``, through the time index) vs
  the full read;
* write rows/s of the N values with ``df.write.format("kfs")``, beside
  - the ceiling: a ``DataSourceArrowWriter`` (defined here) that only counts rows;
  - writing the same rows as Parquet.

Every result is checked: each read's aggregate against the rows prepared, each kfs write by
reading it back (``read_committed``: row count, bytes and a hash sum of the values), the
counting sink's total against N. Values are ``VALUE`` (100) bytes, records 1 ms apart.

    .venv/bin/python benchmarks/bench_spark.py [--records 1000000] [--rounds 5] [--master local[2]]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402
from pyspark.sql.datasource import (  # noqa: E402
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from bench import Table, med, ratio, spread  # noqa: E402  (benchmarks/ is sys.path[0])

VALUE = 100  # bytes per value
T0 = 1_700_000_000_000  # timestamp of record 0, epoch ms; record i has T0 + i
TOPIC = "bench"
PRODUCER_BATCH = 1000  # records per batch appended to the log
CEILING_BATCH_ROWS = 32768  # rows per prebuilt Arrow batch
KAFKA_DDL = ("key binary, value binary, topic string, partition int, offset bigint, "
             "timestamp timestamp, timestampType int")  # Spark's Kafka source schema
# Every column, so no reader skips one (Parquet would prune columns the query does not name).
FULL = ["count(key)", "sum(length(value))", "count(topic)", "max(partition)", "max(offset)",
        "max(unix_micros(timestamp))", "max(timestampType)"]
CHECK = ["count(*)", "sum(length(value))", "sum(hash(value))"]  # of written values


def value(i: int) -> bytes:
    return b"%0*d" % (VALUE, i)


# --------------------------------------------------------------------------- ceilings
# Defined in __main__, so Spark ships them to its Python workers by value (cloudpickle).

class ArrowCeiling(DataSource):
    """Read ceiling: option ``paths`` (comma-separated Arrow IPC files, one input partition
    each) yielded batch by batch as stored, memory-mapped: no decoding, no copying."""

    @classmethod
    def name(cls) -> str:
        return "bench_arrow_ceiling"

    def schema(self) -> str:
        return KAFKA_DDL

    def reader(self, schema):
        return _ArrowCeilingReader(self.options["paths"].split(","))


class _ArrowCeilingReader(DataSourceReader):
    def __init__(self, paths: list[str]):
        self.paths = paths

    def partitions(self):
        return [InputPartition(p) for p in self.paths]

    def read(self, partition):
        reader = pa.ipc.open_file(pa.memory_map(partition.value))
        for i in range(reader.num_record_batches):
            yield reader.get_batch(i)


@dataclass
class _Rows(WriterCommitMessage):
    rows: int


class CountingSink(DataSource):
    """Write ceiling: counts the rows it is given and nothing else; the job's total goes to
    the file named by option ``path``."""

    @classmethod
    def name(cls) -> str:
        return "bench_counting_sink"

    def writer(self, schema, overwrite: bool):
        return _CountingWriter(self.options["path"])


class _CountingWriter(DataSourceArrowWriter):
    def __init__(self, path: str):
        self.path = path

    def write(self, iterator) -> _Rows:
        return _Rows(sum(batch.num_rows for batch in iterator))

    def commit(self, messages) -> None:
        Path(self.path).write_text(str(sum(m.rows for m in messages)))


# --------------------------------------------------------------------------- data

def write_log(backing: Path, n: int) -> None:
    """``n`` records (value ``value(i)``, no key, timestamp T0 + i) in ``TOPIC``-0, through
    storage's public API."""
    from storage import LogManager
    from storage.records import build_batch

    mgr = LogManager(backing)
    log = mgr.create(f"{TOPIC}-0")
    for first in range(0, n, PRODUCER_BATCH):
        idx = range(first, min(first + PRODUCER_BATCH, n))
        log.append_as_leader(build_batch(0, [value(i) for i in idx], None, [T0 + i for i in idx]))
    mgr.close()


def arrow_batch(lo: int, hi: int, schema: pa.Schema) -> pa.RecordBatch:
    """Rows ``[lo, hi)`` as the kfs source gives them (partition 0, CreateTime)."""
    m = hi - lo
    return pa.RecordBatch.from_arrays([
        pa.nulls(m, pa.binary()),
        pa.array([value(i) for i in range(lo, hi)], pa.binary()),
        pa.array([TOPIC] * m, pa.string()),
        pa.array([0] * m, pa.int32()),
        pa.array(range(lo, hi), pa.int64()),
        pa.array([(T0 + i) * 1000 for i in range(lo, hi)], pa.int64()).cast(schema.field(5).type),
        pa.array([0] * m, pa.int32()),
    ], schema=schema)


def write_arrow_files(out: Path, n: int, parts: int, schema: pa.Schema) -> list[str]:
    """The ``n`` rows as ``parts`` Arrow IPC files of contiguous offsets."""
    out.mkdir()
    bounds = [n * k // parts for k in range(parts + 1)]
    paths = []
    for k in range(parts):
        path = str(out / f"part-{k}.arrow")
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            for lo in range(bounds[k], bounds[k + 1], CEILING_BATCH_ROWS):
                writer.write_batch(arrow_batch(lo, min(lo + CEILING_BATCH_ROWS, bounds[k + 1]), schema))
        paths.append(path)
    return paths


# --------------------------------------------------------------------------- the run

def python_error(exc: Exception) -> str:
    """The Python error line of a Spark exception (its message also holds a JVM trace)."""
    lines = str(exc).strip().splitlines()
    return next((line for line in reversed(lines) if re.match(r"\w+(Error|Exception): ", line)),
                lines[0] if lines else type(exc).__name__)


def timed(fn):
    """(seconds, fn())"""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> int:
    from needs import require

    require("bench_spark.py", "pyspark", "pyarrow")
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of each figure")
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    if args.records < 100:
        parser.error("--records must be at least 100")
    # The Python workers import this checkout with this interpreter's packages.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)

    import pyspark
    from pyspark.sql import SparkSession
    from pyspark.sql.pandas.types import to_arrow_schema

    n, rounds = args.records, args.rounds
    failures: list[str] = []

    def check(ok: bool, what: str) -> None:
        if not ok:
            failures.append(what)
            print(f"!! {what}", flush=True)

    def log(msg: str) -> None:
        print(f"  … {msg}", file=sys.stderr, flush=True)

    print(f"machine: nproc={os.cpu_count()}, python {platform.python_version()}, pyspark "
          f"{pyspark.__version__}, pyarrow {pa.__version__}, master {args.master}")
    print(f"records: {n:,} x {VALUE}-byte values, no keys; {rounds} interleaved rounds")
    spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(ArrowCeiling)
    spark.dataSource.register(CountingSink)
    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-spark-"))
    try:
        backing, parquet = tmp / "kfs", str(tmp / "parquet")
        log(f"writing {n:,} records")
        write_log(backing, n)

        def kfs(**options):
            reader = spark.read.format("kfs").option("path", str(backing)).option("subscribe", TOPIC)
            for k, v in options.items():
                reader = reader.option(k, v)
            return reader.load()

        df = kfs()
        parts = df.rdd.getNumPartitions()
        arrow_schema = to_arrow_schema(df.schema, timezone="UTC")
        paths = write_arrow_files(tmp / "arrow", n, parts, arrow_schema)
        ceiling = spark.read.format(ArrowCeiling.name()).option("paths", ",".join(paths)).load()
        check(ceiling.schema == df.schema, f"ceiling schema {ceiling.schema} != kfs {df.schema}")
        df.write.parquet(parquet)
        pq = spark.read.parquet(parquet)
        lo, hi = T0 + n // 2, T0 + n // 2 + n // 100
        ranged = kfs(startingTimestamp=str(lo), endingTimestamp=str(hi))

        expected = (0, VALUE * n, n, 0, n - 1, (T0 + n - 1) * 1000, 0)
        readers = {"kfs": df, "ceiling": ceiling, "parquet": pq}
        for frame in readers.values():  # warm the Python workers and the page cache
            frame.selectExpr(*FULL).collect()
        read_t: dict[str, list[float]] = {k: [] for k in readers}
        range_t: list[float] = []
        for r in range(rounds):
            log(f"read round {r + 1}/{rounds}")
            for name, frame in readers.items():
                seconds, rows = timed(lambda: frame.selectExpr(*FULL).collect())
                read_t[name].append(seconds)
                check(tuple(rows[0]) == expected, f"{name} read round {r + 1}: {tuple(rows[0])} "
                      f"!= {expected}")
            seconds, count = timed(ranged.count)
            range_t.append(seconds)
            check(count == n // 100, f"range read round {r + 1}: {count:,} rows != {n // 100:,}")

        rates = {k: [n / s for s in v] for k, v in read_t.items()}
        t = Table(f"read: aggregate over every column of {n:,} rows, {parts} input partition(s) "
                  f"(medians of {rounds} interleaved rounds)", ("what", "rows/s", "kfs / it"))
        t.add('kfs  format("kfs")', spread(rates["kfs"]), "")
        t.add("ceiling: Python source of prebuilt Arrow batches", spread(rates["ceiling"]),
              ratio(med(rates["kfs"]), med(rates["ceiling"])))
        t.add("Parquet", spread(rates["parquet"]), ratio(med(rates["kfs"]), med(rates["parquet"])))
        t.sep()
        t.add(f"1% time range ({n // 100:,} rows): seconds", spread(range_t, lambda x: f"{x:.2f}"),
              f"{med(range_t) / med(read_t['kfs']):.1%} of full")
        t.print()

        src = spark.read.parquet(parquet).select("value")
        want = tuple(src.selectExpr(*CHECK).collect()[0])
        write_t: dict[str, list[float]] = {"kfs": [], "ceiling": [], "parquet": []}
        for r in range(rounds):
            log(f"write round {r + 1}/{rounds}")
            out = tmp / f"out-{r}"
            try:
                seconds, _ = timed(lambda: src.write.format("kfs").option("path", str(out))
                                   .option("topic", "copy").mode("append").save())
            except Exception as exc:  # noqa: BLE001 - the other figures still stand
                check(False, f"kfs write round {r + 1} failed: {python_error(exc)}")
            else:
                write_t["kfs"].append(seconds)
                back = (spark.read.format("kfs").option("path", str(out))
                        .option("subscribe", "copy").option("isolation.level", "read_committed")
                        .load())
                got = tuple(back.selectExpr(*CHECK).collect()[0])
                check(got == want, f"kfs write round {r + 1}: read back (rows, bytes, hash sum) "
                      f"{got} != {want}")
            shutil.rmtree(out, ignore_errors=True)

            counted = tmp / "counted"
            seconds, _ = timed(lambda: src.write.format(CountingSink.name())
                               .option("path", str(counted)).mode("append").save())
            write_t["ceiling"].append(seconds)
            check(int(counted.read_text()) == n, f"counting sink round {r + 1}: "
                  f"{counted.read_text()} rows != {n}")

            seconds, _ = timed(lambda: src.write.parquet(str(tmp / f"pq-{r}")))
            write_t["parquet"].append(seconds)
            shutil.rmtree(tmp / f"pq-{r}")
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    rates = {k: [n / s for s in v] for k, v in write_t.items()}
    t = Table(f"write: {n:,} values of {VALUE} B (medians of {rounds} interleaved rounds)",
              ("what", "rows/s", "kfs / it"))
    kfs = rates["kfs"]  # empty when every kfs write failed
    t.add('kfs  format("kfs")', spread(kfs) if kfs else "failed", "")
    t.add("ceiling: DataSourceArrowWriter counting rows", spread(rates["ceiling"]),
          ratio(med(kfs), med(rates["ceiling"])) if kfs else "n/a")
    t.add("Parquet", spread(rates["parquet"]),
          ratio(med(kfs), med(rates["parquet"])) if kfs else "n/a")
    t.print()
    if failures:
        print(f"\n{len(failures)} check(s) FAILED")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
