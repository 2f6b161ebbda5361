"""Coordinator-view figures: a ``__consumer_offsets`` partition of SIZE bytes of offset
commits (OffsetCommitKey type 1, OffsetCommitValue v3, as the group coordinator writes them),
then

* the first ``ls consumer-groups`` of a fresh read-only mount (the whole partition replayed)
  beside ``kfs verify`` of the same directory as a command, in the same run (target <= 2x);
* the cost of one more commit becoming visible: from writing it to ``append-batches`` to
  ``cat consumer-groups/<group>/<topic>-<N>`` showing it, median and worst of ``--commits``.

    python benchmarks/bench_coordinator.py [--size BYTES] [--groups G] [--commits N]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Mounts, Table  # noqa: E402

from storage import LogConfig  # noqa: E402
from storage.log import Log  # noqa: E402
from storage.records import build_batch  # noqa: E402

PARTITIONS_PER_TOPIC = 20
TOPICS_PER_GROUP = 5
BATCH = 200  # records per append (one coordinator write)


def _string(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def commit_key(group: int, topic: int, partition: int) -> bytes:
    return (struct.pack(">h", 1) + _string(f"group-{group}") + _string(f"topic-{topic}")
            + struct.pack(">i", partition))


def commit_value(offset: int, timestamp: int) -> bytes:
    return struct.pack(">hqi", 3, offset, 7) + _string("") + struct.pack(">q", timestamp)


def write_partition(path: Path, size: int, groups: int) -> int:
    """Offset commits round-robin over every (group, topic, partition) until the .log holds
    ``size`` bytes; returns the number of records."""
    path.mkdir(parents=True)
    log = Log(path, "__consumer_offsets", 0, LogConfig())
    keys = [commit_key(g, t, p) for g in range(groups) for t in range(TOPICS_PER_GROUP)
            for p in range(PARTITIONS_PER_TOPIC)]
    n, now = 0, 1_700_000_000_000
    while log.segments.size_in_bytes < size:
        values = [commit_value(n + i, now + n + i) for i in range(BATCH)]
        batch_keys = [keys[(n + i) % len(keys)] for i in range(BATCH)]
        log.append(values, batch_keys)
        n += BATCH
    log.close()
    return n


def timed(argv: list[str], cwd: Path | None = None) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(argv, cwd=cwd, capture_output=True, check=True, text=True).stdout
    return time.perf_counter() - t, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", type=int, default=1 << 30, help=".log bytes (default 1 GiB)")
    p.add_argument("--groups", type=int, default=500)
    p.add_argument("--commits", type=int, default=50)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-coordinator-"))
    mounts = Mounts(tmp)
    try:
        data = tmp / "data"
        t = time.perf_counter()
        records = write_partition(data / "__consumer_offsets-0", args.size, args.groups)
        keys = args.groups * TOPICS_PER_GROUP * PARTITIONS_PER_TOPIC
        print(f"wrote {records:,} commits over {keys:,} keys ({args.size / 1e6:.0f} MB) in "
              f"{time.perf_counter() - t:.0f} s")
        verify_s, _ = timed([sys.executable, "-m", "kfs", "verify", "--no-progress", str(data)])
        kfs = mounts.start([sys.executable, "-m", "kfs", "mount", "-f", "--read-only",
                            f"--log-file={tmp / 'ro.log'}", str(data), str(tmp / "ro")],
                           tmp / "ro", "kfs-ro")
        list_s, out = timed(["ls", str(tmp / "ro" / "consumer-groups")])
        assert len(out.split()) == args.groups, out[:200]
        again_s, _ = timed(["ls", str(tmp / "ro" / "consumer-groups")])
        mounts.stop(kfs)

        rw = mounts.start_kfs(data, tmp / "rw", "kfs-rw")
        timed(["ls", str(tmp / "rw" / "consumer-groups")])  # replayed once
        latencies = []
        target = tmp / "rw" / "consumer-groups" / "group-0" / "topic-0-0"
        for i in range(args.commits):
            offset = 10**9 + i
            batch = build_batch(0, [commit_value(offset, 1_800_000_000_000)],
                                [commit_key(0, 0, 0)])
            t = time.perf_counter()
            with open(tmp / "rw" / "__consumer_offsets-0" / "append-batches", "ab",
                      buffering=0) as f:
                f.write(batch)
            shown = target.read_text()
            latencies.append(time.perf_counter() - t)
            assert shown == f"{offset}\n", shown
        mounts.stop(rw)

        table = Table(f"__consumer_offsets-0: {records:,} commits, {args.size / 1e6:.0f} MB",
                      ("what", "figure", ""))
        table.add("kfs verify (command)", f"{verify_s:.2f} s", f"{args.size / verify_s / 1e6:.0f} MB/s")
        table.add("first ls consumer-groups (replay)", f"{list_s:.2f} s",
                  f"{list_s / verify_s:.2f}x verify (target <= 2x: "
                  f"{'met' if list_s <= 2 * verify_s else 'NOT met'})")
        table.add("second ls consumer-groups", f"{again_s * 1000:.0f} ms", "")
        latencies.sort()
        table.add("one more commit visible (append + cat)",
                  f"{statistics.median(latencies) * 1000:.1f} ms",
                  f"worst {latencies[-1] * 1000:.1f} ms of {len(latencies)}")
        table.print()
    finally:
        mounts.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
