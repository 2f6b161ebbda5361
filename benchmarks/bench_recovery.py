"""Recovery throughput: how fast kfs revalidates segments after an unclean shutdown
(the clean-shutdown marker removed as a crash leaves it, and ``LogManager(force_recovery=True)``;
the close that follows, which fsyncs the rebuilt indexes, is timed apart:
every batch CRC-checked, indexes rebuilt, producer state replayed), against the ceiling of the
same work: reading the same .log bytes and computing CRC-32C over them, in 1 MiB blocks and
batch by batch (crc_ceiling.py; the second is the CRC work the format requires).
(``kfs verify`` throughput is table 5 of ``bench.py``.)

    python benchmarks/bench_recovery.py [--mb 256] [--rounds 3]

Checks each round that recovery ran (no marker, every segment recovered, the log end offset
unchanged) and prints MB/s (of .log bytes) of both, interleaved, and their ratio.
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

from crc_ceiling import batch_plan, read_crc, read_crc_batches

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from storage import LogManager  # noqa: E402
from storage.log_files import CLEAN_SHUTDOWN_FILE  # noqa: E402
from storage.records import build_batch  # noqa: E402
from storage.segment import LogSegment  # noqa: E402

RECORD = 100  # bytes per value, as the main benchmark
BATCH = 160  # records per batch: ~16 KiB batches, the producer's batch.size

# The log files LogSegment.recover ran on, appended by a wrapper (a check, not a timing: one
# call per segment). storage/log_loader.py recovers, when the marker is absent or
# force_recovery is set, every segment from the one holding the recovery point (0 under
# force_recovery), plus any whose indexes are missing or fail their sanity check.
recovered: list[Path] = []
_recover = getattr(LogSegment, "recover", None)
if _recover is not None:
    def _counting_recover(self, *args, **kwargs):
        out = _recover(self, *args, **kwargs)
        recovered.append(Path(self.log_path))
        return out
    LogSegment.recover = _counting_recover


def write_log(backing: Path, megabytes: int) -> tuple[int, int]:
    """A partition of ~``megabytes`` MiB in 100 MiB segments; (.log bytes, log end offset)."""
    backing.mkdir()
    (backing / "server.properties").write_text("log.segment.bytes=104857600\n")
    mgr = LogManager(backing)
    log = mgr.create("bench-0")
    values = [b"%099d" % i for i in range(BATCH)]
    ts = int(time.time() * 1000)
    while log.segments.size_in_bytes < megabytes << 20:
        chunk = b"".join(build_batch(log.log_end_offset + i * BATCH, values, None, ts)
                         for i in range(64))
        log.append_batches(chunk)
    size, leo = log.segments.size_in_bytes, log.log_end_offset
    mgr.close()
    return size, leo


def logs_of(backing: Path) -> list[Path]:
    return sorted((backing / "bench-0").glob("*.log"))


def ceiling_pass(backing: Path) -> int:
    """Read every .log in large blocks and CRC-32C it in 1 MiB blocks."""
    return read_crc(map(str, logs_of(backing)))


def batch_ceiling(backing: Path):
    """Read every .log a block of whole batches at a time and CRC-32C each batch's CRC range:
    the least any revalidation must do (the batch ends are found before the clock starts)."""
    plans = {str(p): batch_plan(str(p)) for p in logs_of(backing)}
    return lambda _backing: read_crc_batches(plans)


def recovery_pass(backing: Path) -> tuple[float, float, int]:
    """Open after a crash (the recovery, timed), then close (timed apart: the clean shutdown
    fsyncs the rebuilt indexes, which is not revalidation); (recovery s, close s, log end
    offset)."""
    os.sync()
    t = time.perf_counter()
    mgr = LogManager(backing, force_recovery=True)
    opened = time.perf_counter()
    try:
        leo = mgr.get("bench-0").log_end_offset
    finally:
        closing = time.perf_counter()
        mgr.close()
    return opened - t, time.perf_counter() - closing, leo


def timed(fn, backing: Path) -> tuple[float, int]:
    os.sync()
    t = time.perf_counter()
    out = fn(backing)
    return time.perf_counter() - t, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mb", type=int, default=256, help="MiB of segments (default 256)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-recovery-"))
    failures = []
    try:
        backing = tmp / "backing"
        size, leo = write_log(backing, args.mb)
        logs = logs_of(backing)
        mb = size / 1e6
        print(f"{size / 2**20:.0f} MiB of .log in {len(logs)} segments, log end offset {leo:,}, "
              f"{BATCH}-record batches of {RECORD} B values (page cache warm)")
        bulk, per_batch = "ceiling: read + CRC-32C", "ceiling: same, batch by batch"
        times: dict[str, list[float]] = {bulk: [], per_batch: [], "recovery": [],
                                         "close after it (fsyncs)": []}
        batches_pass = batch_ceiling(backing)
        for r in range(args.rounds):  # interleaved, so drift hits all alike
            for name, fn in ((bulk, ceiling_pass), (per_batch, batches_pass)):
                dt, n = timed(fn, backing)
                times[name].append(dt)
                if n != size:
                    failures.append(f"round {r + 1}: {name} read {n:,} bytes, expected {size:,}")
            (backing / CLEAN_SHUTDOWN_FILE).unlink()  # the crash: the marker close() wrote is gone
            recovered.clear()
            dt, close_s, got = recovery_pass(backing)
            times["recovery"].append(dt)
            times["close after it (fsyncs)"].append(close_s)
            covered = sum(p.stat().st_size for p in set(recovered))
            if _recover is None:
                seg_check = "n/a (no LogSegment.recover to count)"
            else:
                seg_check = (f"{len(set(recovered))}/{len(logs)} segments recovered "
                             f"({covered / 2**20:.0f} of {size / 2**20:.0f} MiB)")
                if set(recovered) != set(logs) or covered != size:
                    failures.append(f"round {r + 1}: recovery ran on {sorted(p.name for p in recovered)}, "
                                    f"not on every segment")
            if got != leo:
                failures.append(f"round {r + 1}: log end offset {got:,} after recovery, {leo:,} before the crash")
            print(f"round {r + 1} check: clean-shutdown marker absent at open; {seg_check}; "
                  f"log end offset {got:,} (before the crash {leo:,}) -> "
                  f"{'ok' if got == leo and (_recover is None or set(recovered) == set(logs)) else 'FAILED'}")
        ceilings = [statistics.median(times[c]) for c in (bulk, per_batch)]
        print(f"{'what':<32}{'median s':>10}{'MB/s (min-max)':>22}"
              f"{'vs 1 MiB CRC':>14}{'vs batch CRC':>14}")
        for name, xs in times.items():
            t = statistics.median(xs)
            rates = f"{mb / t:.0f} ({mb / max(xs):.0f}-{mb / min(xs):.0f})"
            print(f"{name:<32}{t:>10.3f}{rates:>22}" + "".join(f"{c / t:>13.2f}×" for c in ceilings))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
