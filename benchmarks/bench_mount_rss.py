"""The resident memory of a read-only mount streaming partitions: the mount process's RSS
after 10, 50 and 200 MB read, about equal.

A read-only mount of a broker's directory held 300 MB RSS after streaming 25 MB (issue 25,
item 13): every stream kept its own rendered chunks and .log buffers, and every log its own
decoded batches, so what a mount held grew with the partitions read. This writes ``--mb`` MB
of .log over ``--partitions`` partitions (100-byte values in lz4 batches of 160 records, as a
producer's 16 KiB batch.size), mounts it ``--read-only`` in the foreground (a child process),
reads every partition's ``values``, then every partition's ``records.jsonl``, with ``cat``'s
128 KiB reads, and prints the mount process's RSS (anonymous and file-backed, from
/proc/PID/status) after each of ``--at`` MB read, and the ratios of the last to the first two:
about 1 is the target, and under 1.2 once the bounded caches are full (the first MBs fill them:
16 MiB of rendered text, 32 MiB of decoded batches; the page cache holding the .log is not the
process's memory). Before the bounds: 271 MB after 200 MB, 599 MB after 600 MB.

    .venv/bin/python benchmarks/bench_mount_rss.py [--mb 260] [--partitions 40] [--at 10,50,200] [--codec lz4] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

READ_SIZE = 128 << 10  # as cat reads
MB = 1 << 20


def fill(backing: Path, mb: float, codec: str, partitions: int) -> int:
    """``partitions`` partitions rss-<N> of about ``mb`` MB of .log in all, in 64 MiB segments:
    100-byte values in batches of 160 records (a producer's 16 KiB batch.size), compressed
    with ``codec``; their records."""
    from storage import LogManager
    from storage.records import CompressionType, build_batch
    backing.mkdir(parents=True)
    (backing / "rss.topic.properties").write_text(f"segment.bytes={64 * MB}\n")
    manager = LogManager(backing)
    rng = random.Random(7)
    words = [b"%08x" % rng.getrandbits(32) for _ in range(4096)]
    values = [b" ".join(rng.choices(words, k=11))[:100] for _ in range(16_000)]
    codec_id = getattr(CompressionType, codec.upper())
    batches = b"".join(build_batch(0, values[i:i + 160], codec=codec_id)
                       for i in range(0, len(values), 160))
    records = 0
    for n in range(partitions):
        log = manager.create(f"rss-{n}")
        while log.segments.size_in_bytes < mb * MB / partitions:
            log.append_as_leader(batches)
        records += log.log_end_offset
    manager.close()
    return records


def memory(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and VmHWM of ``pid`` in kB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "RssAnon", "RssFile", "VmHWM")}


def stream(files: list[Path], total: int, upto: int, current=None):
    """Read ``files`` one after the other, each from its start to its end, with READ_SIZE reads,
    until ``upto`` bytes were read in all (``total`` so far): (bytes read in all, the file being
    read, to go on from). Pops the files it opened."""
    while total < upto:
        if current is None:
            if not files:
                break
            current = open(files.pop(0), "rb", buffering=0)
        data = current.read(min(READ_SIZE, upto - total))
        if not data:
            current.close()
            current = None
        total += len(data)
    return total, current


def wait_mounted(path: Path, child: subprocess.Popen, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while not os.path.ismount(path):
        if child.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"the mount did not come up (status {child.poll()})")
        time.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=float, default=260, help="partition size in MB")
    parser.add_argument("--at", default="10,50,200", help="MB read when RSS is taken")
    parser.add_argument("--partitions", type=int, default=40, help="partitions (they share --mb)")
    parser.add_argument("--codec", default="lz4", choices=("none", "gzip", "snappy", "lz4", "zstd"),
                        help="the batches' compression (default: lz4, a producer's usual)")
    parser.add_argument("--dir", help="where to write it (default: a temporary directory)")
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="kfs-rss-"))
    child = None
    mnt = root / "mnt"
    try:
        t = time.perf_counter()
        records = fill(root / "data", args.mb, args.codec, args.partitions)
        logs = list((root / "data").glob("rss-*/*.log"))
        print(f"{args.partitions} partitions rss-N: {records:,} records, "
              f"{sum(p.stat().st_size for p in logs) / MB:.0f} MB of {args.codec} .log in "
              f"{len(logs)} segments (written in {time.perf_counter() - t:.0f} s)")
        mnt.mkdir()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        child = subprocess.Popen([sys.executable, "-m", "kfs", "mount", "-f", "--read-only",
                                  str(root / "data"), str(mnt)], env=env,
                                 stderr=open(root / "mount.log", "w"))
        wait_mounted(mnt, child)
        idle = memory(child.pid)
        print(f"mount process after mounting: RSS {idle['VmRSS'] / 1024:.0f} MB")
        # every partition's values, then every partition's records.jsonl, as cat reads them
        files = [mnt / f"rss-{n}" / name for name in ("values", "records.jsonl")
                 for n in range(args.partitions)]
        seen, read, current = [], 0, None
        for limit in (float(x) for x in args.at.split(",")):
            read, current = stream(files, read, int(limit * MB), current)
            seen.append((read, memory(child.pid)))
        if current is not None:
            current.close()
        for got, m in seen:
            print(f"RSS after {got / MB:.0f} MB streamed: {m['VmRSS'] / 1024:.0f} MB "
                  f"(anonymous {m['RssAnon'] / 1024:.0f}, file-backed {m['RssFile'] / 1024:.0f}); "
                  f"peak {m['VmHWM'] / 1024:.0f} MB")
        last = seen[-1]
        for got, m in seen[:2]:
            ratio = last[1]["VmRSS"] / m["VmRSS"]
            print(f"RSS after {last[0] / MB:.0f} MB / after {got / MB:.0f} MB: {ratio:.2f}")
        # the target: flat once the bounded caches are full (the second point)
        ratio = last[1]["VmRSS"] / seen[min(1, len(seen) - 1)][1]["VmRSS"]
        ok = ratio < 1.2
        print(f"flat once the caches are full (last / second point < 1.2): "
              f"{'met' if ok else 'NOT met'}")
        return 0 if ok else 1
    finally:
        if child is not None:
            subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
            try:
                child.wait(60)
            except subprocess.TimeoutExpired:
                child.kill()
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
