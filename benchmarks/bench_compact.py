"""The log cleaner's figures: one pass over a partition of ``--size`` bytes (default 2 GiB) of
100-byte values over ``--keys`` distinct keys (default 1M), all of it cleanable (the active
segment holds one record), beside the read + CRC-32C ceiling of the same .log files in the same
run (``crc_ceiling.read_crc``), and the cleaning process's peak memory (VmHWM) against
``log.cleaner.dedupe.buffer.size`` (default 128 MiB).

    python benchmarks/bench_compact.py [--size 2G] [--keys 1000000] [--dir DIR] [--keep]

The pass runs in a child process (``kfs compact``'s code path, its own memory figures); the
ceiling runs here, over the files warmed in the page cache as the pass finds them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from crc_ceiling import read_crc  # noqa: E402

VALUE_BYTES = 100
CHUNK = 50_000  # records per append


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units \
        else int(text)


def generate(backing: Path, size: int, keys: int) -> int:
    """Write the partition; returns its record count."""
    from storage import LogManager

    backing.mkdir(parents=True, exist_ok=True)
    (backing / "bench.topic.properties").write_text("cleanup.policy=compact\n")
    mgr = LogManager(backing)
    log = mgr.create("bench-0")
    value = bytes(range(VALUE_BYTES))
    n = 0
    while log.segments.size_in_bytes < size:
        ks = [b"key-%07d" % ((i * 7919) % keys) for i in range(n, n + CHUNK)]
        log.append([value] * CHUNK, ks)
        n += CHUNK
    log.roll()
    log.append([value], [b"active"])
    mgr.close()
    return n + 1


CHILD = """
import json, sys, time
sys.path.insert(0, {repo!r})
from storage import LogManager
from storage.log_cleaner import for_log_manager
mgr = LogManager({backing!r})
cleaner = for_log_manager(mgr)
started = time.perf_counter()
result = cleaner.clean_log("bench-0")
seconds = time.perf_counter() - started
mgr.close()
status = open("/proc/self/status").read()
hwm = int(next(l for l in status.splitlines() if l.startswith("VmHWM:")).split()[1]) * 1024
s = result.stats
print(json.dumps(dict(seconds=seconds, bytes_read=s.bytes_read, map_bytes_read=s.map_bytes_read,
                      bytes_written=s.bytes_written, messages_read=s.messages_read,
                      messages_written=s.messages_written, index_seconds=s.elapsed_index_secs(),
                      peak_rss=hwm)))
"""


def clean(backing: Path) -> dict:
    script = CHILD.format(repo=str(REPO), backing=str(backing))
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=parse_size, default=2 << 30)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, help="where to build it (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the directory")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="bench-compact-"))
    backing = root / "backing"
    try:
        t = time.perf_counter()
        records = generate(backing, args.size, args.keys)
        print(f"generated {records:,} records in {time.perf_counter() - t:.1f} s")
        logs = sorted(str(p) for p in (backing / "bench-0").glob("*.log"))
        read_crc(logs)  # warm the page cache as the pass will find it
        t = time.perf_counter()
        ceiling_bytes = read_crc(logs)
        ceiling = ceiling_bytes / (time.perf_counter() - t)
        r = clean(backing)
        mb = 1e6
        log_bytes = r["bytes_read"]
        rate = log_bytes / r["seconds"]
        print(f"partition: {log_bytes / mb:,.0f} MB of .log, {records:,} records, "
              f"{args.keys:,} keys")
        print(f"read + CRC-32C ceiling: {ceiling / mb:,.0f} MB/s")
        print(f"cleaner: {rate / mb:,.0f} MB/s of segment read ({log_bytes / mb:,.0f} MB in "
              f"{r['seconds']:.1f} s; offset map {r['index_seconds']:.1f} s) = "
              f"{rate / ceiling:.2f}x the ceiling")
        print(f"kept {r['messages_written']:,} of {r['messages_read']:,} records, "
              f"{r['bytes_written'] / mb:,.1f} MB written")
        print(f"peak memory of the cleaning process: {r['peak_rss'] / (1 << 20):,.0f} MiB "
              f"(dedupe buffer 128 MiB + 100 MiB = 228 MiB target)")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
