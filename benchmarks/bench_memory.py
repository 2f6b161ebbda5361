"""Peak memory of a Spark read task's Python worker over one large partition.

A Spark task of the kfs source runs ``kfs.spark.reader.read_range`` over its offset range in a
Python worker; this runs exactly that, in a fresh process (importing pyspark and pyarrow as the
worker does), over a whole partition of ``--gb`` GiB of 100-byte records, and prints the peak
RSS beside the partition's size. Target: under 300 MB on a 2 GiB partition (no segment is ever
read whole).

    .venv/bin/python benchmarks/bench_memory.py [--gb 2] [--dir DIR]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKER = """
import resource, sys, time
from kfs.reading.offsets import OffsetRange
from kfs.spark.reader import read_range
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
rows, start = 0, time.perf_counter()
for batch in read_range(sys.argv[1], OffsetRange("mem", 0, 0, int(sys.argv[2])), False):
    rows += batch.num_rows
print(rows, before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      time.perf_counter() - start)
"""


def fill(backing: Path, gib: float) -> int:
    """A partition mem-0 of about ``gib`` GiB of 100-byte values; its log end offset."""
    from storage import LogManager
    manager = LogManager(backing)
    log = manager.create("mem-0")
    values = [b"%0100d" % i for i in range(100_000)]
    while log.segments.size_in_bytes < gib * (1 << 30):
        log.append(values)
    end = log.log_end_offset
    manager.close()
    return end


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=2.0, help="partition size in GiB")
    parser.add_argument("--dir", help="where to write it (default: a temporary directory)")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="kfs-mem-"))
    try:
        t = time.perf_counter()
        end = fill(root / "data", args.gb)
        size = sum(p.stat().st_size for p in (root / "data" / "mem-0").glob("*.log"))
        print(f"partition mem-0: {end:,} records, {size / (1 << 30):.2f} GiB of .log "
              f"(written in {time.perf_counter() - t:.0f} s)")
        out = subprocess.run([sys.executable, "-c", WORKER, str(root / "data"), str(end)],
                             check=True, capture_output=True, text=True, cwd=ROOT).stdout
        rows, before_kb, peak_kb, seconds = out.split()
        ok = int(rows) == end
        print(f"read_range over all of it: {int(rows):,} rows ({'all' if ok else 'NOT all'}) in "
              f"{float(seconds):.1f} s, {int(rows) / float(seconds) / 1e6:.2f}M rows/s")
        print(f"peak RSS of the worker: {int(peak_kb) / 1024:.0f} MB "
              f"(after imports: {int(before_kb) / 1024:.0f} MB); target < 300 MB -> "
              f"{'met' if int(peak_kb) < 300 * 1024 else 'not met'}")
        return 0 if ok else 1
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
