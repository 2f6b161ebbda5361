"""Recovery throughput: how fast kfs revalidates segments after an unclean shutdown
(``LogManager(force_recovery=True)``: every batch CRC-checked, indexes rebuilt, producer state
replayed), against the floor of the same work: reading the bytes and computing CRC-32C over
them once. (``kfs verify`` throughput is table 5 of ``bench.py``.)

    python benchmarks/bench_recovery.py [--mb 256] [--rounds 3]

Prints MB/s (of .log bytes) and the ratio to the floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from crc32c import crc32c

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from storage import LogManager  # noqa: E402
from storage.records import build_batch  # noqa: E402

RECORD = 100  # bytes per value, as the main benchmark
BATCH = 160  # records per batch: ~16 KiB batches, the producer's batch.size


def write_log(backing: Path, megabytes: int) -> int:
    """A partition of ~``megabytes`` MiB in 100 MiB segments; returns the .log bytes."""
    backing.mkdir()
    (backing / "server.properties").write_text("log.segment.bytes=104857600\n")
    mgr = LogManager(backing)
    log = mgr.create("bench-0")
    values = [b"%099d" % i for i in range(BATCH)]
    ts = int(time.time() * 1000)
    while log.size_in_bytes < megabytes << 20:
        chunk = b"".join(build_batch(log.log_end_offset + i * BATCH, values, None, ts)
                         for i in range(64))
        log.append_batches(chunk)
    size = log.size_in_bytes
    mgr.close()
    return size


def floor_pass(backing: Path) -> None:
    """Read every .log and CRC it: the least any revalidation must do."""
    for path in sorted((backing / "bench-0").glob("*.log")):
        with open(path, "rb") as f:
            while block := f.read(8 << 20):
                crc32c(block)


def recovery_pass(backing: Path) -> None:
    LogManager(backing, force_recovery=True).close()


def timed(fn, backing: Path) -> float:
    os.sync()
    t = time.perf_counter()
    fn(backing)
    return time.perf_counter() - t


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=256, help="MiB of segments (default 256)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-recovery-"))
    try:
        backing = tmp / "backing"
        size = write_log(backing, args.mb)
        mb = size / 1e6
        print(f"{size / 2**20:.0f} MiB of .log in {len(list((backing / 'bench-0').glob('*.log')))}"
              f" segments, {BATCH}-record batches of {RECORD} B values (page cache warm)")
        times: dict[str, list[float]] = {"floor (read + CRC-32C)": [], "recovery": []}
        for _ in range(args.rounds):  # interleaved, so drift hits all alike
            times["floor (read + CRC-32C)"].append(timed(floor_pass, backing))
            times["recovery"].append(timed(recovery_pass, backing))
        floor = statistics.median(times["floor (read + CRC-32C)"])
        print(f"{'what':<24}{'median s':>10}{'MB/s':>10}{'vs floor':>10}")
        for name, xs in times.items():
            t = statistics.median(xs)
            print(f"{name:<24}{t:>10.2f}{mb / t:>10.0f}{floor / t:>9.2f}x")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
