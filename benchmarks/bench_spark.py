"""Spark figures for the kfs data source, each beside its ceiling measured in the same run:

* rows/s of a full read (count of every column) of N records vs Spark reading the same rows
  from Parquet;
* a 1% time range read (``startingTimestamp``/``endingTimestamp``, resolved through the time
  index) vs the full read;
* write rows/s (``df.write.format("kfs")``) vs writing the same rows as Parquet.

    .venv/bin/python benchmarks/bench_spark.py [--records 1000000] [--master local[2]]
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(description="kfs on Spark: read, range and write figures")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH")) if p)

    from pyspark.sql import SparkSession

    import kfs.spark
    from storage import LogManager
    from storage.records import build_batch

    spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kfs.spark.register(spark)
    n = args.records
    with tempfile.TemporaryDirectory() as tmp:
        backing, parquet = Path(tmp) / "kfs", Path(tmp) / "parquet"
        t0 = 1_700_000_000_000
        # setup: N 100-byte records, 1 ms apart, in 1000-record producer batches
        mgr = LogManager(backing)
        log = mgr.create("bench-0")
        for first in range(0, n, 1000):
            count = min(1000, n - first)
            values = [b"%099d" % i for i in range(first, first + count)]
            log.append_as_leader(build_batch(0, values, None, [t0 + i for i in range(first, first + count)]))
        mgr.close()
        df = spark.read.format("kfs").option("path", str(backing)).option("subscribe", "bench").load()
        df.write.parquet(str(parquet))
        pq = spark.read.parquet(str(parquet))

        def full(frame):
            return frame.selectExpr("count(key)", "sum(length(value))", "max(offset)",
                                    "max(timestamp)").collect()

        full(df), full(pq)  # warm the Python workers and the page cache
        kfs_s, kfs_rows = timed(lambda: full(df))
        pq_s, pq_rows = timed(lambda: full(pq))
        assert kfs_rows[0][1] == pq_rows[0][1] == 99 * n
        lo, hi = t0 + n // 2, t0 + n // 2 + n // 100
        ranged = (spark.read.format("kfs").option("path", str(backing)).option("subscribe", "bench")
                  .option("startingTimestamp", str(lo)).option("endingTimestamp", str(hi)).load())
        range_s, range_rows = timed(lambda: ranged.count())
        assert range_rows == n // 100
        out = Path(tmp) / "out"
        src = spark.read.parquet(str(parquet)).select("value")
        write_s, _ = timed(lambda: src.write.format("kfs").option("path", str(out))
                           .option("topic", "copy").mode("append").save())
        pq_write_s, _ = timed(lambda: src.write.parquet(str(Path(tmp) / "out.parquet")))

    print(f"records: {n:,} x 100-byte values, master {args.master}")
    print(f"full read      kfs {n / kfs_s:12,.0f} rows/s   parquet {n / pq_s:12,.0f} rows/s"
          f"   ratio {pq_s / kfs_s:.2f}x of parquet")
    print(f"1% time range  {range_s:.2f} s vs full read {kfs_s:.2f} s"
          f"   ({range_s / kfs_s:.1%} of the full read's time)")
    print(f"write          kfs {n / write_s:12,.0f} rows/s   parquet {n / pq_write_s:12,.0f} rows/s")
    spark.stop()


if __name__ == "__main__":
    main()
