"""A broker-sized directory through a read-only mount, within a workstation's descriptor limit.

    .venv/bin/python benchmarks/bench_many_partitions.py [--partitions 10000] [--segments 20]
        [--nofile 1024] [--touch 2000]

Builds (once, in build/many-partitions/) PARTITIONS partition directories of SEGMENTS segments
each: one partition written by the engine (a batch of 10 records per segment, rolled after
each), hard-linked into the others. Then, with the mount's descriptor limit set to NOFILE
(``ulimit -n``, 1,024 as on a workstation), prints: the time ``kfs mount --read-only`` takes
to return, the serving process's open descriptors and RSS just mounted, after ``cat`` of one
record in the last partition, and after a ``cat`` of one record in each of TOUCH partitions
spread over the directory (every segment of each one opened). Targets: mount ≤ 5 s,
≤ 1,024 descriptors, ≤ 500 MB RSS.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from storage import LogConfig  # noqa: E402
from storage.log import Log  # noqa: E402


def build(root: Path, partitions: int, segments: int) -> Path:
    data = root / f"{partitions}x{segments}"
    if (data / ".built").exists():
        return data
    shutil.rmtree(data, ignore_errors=True)
    template = data / "t-0"
    template.mkdir(parents=True)
    log = Log(template, "t", 0, LogConfig())
    for s in range(segments):
        log.append([b"value-%d-%d" % (s, i) for i in range(10)])
        if s < segments - 1:
            log.roll()
    log.close()
    (template / "partition.metadata").write_text("version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAA")
    files = sorted(template.iterdir())
    for p in range(1, partitions):
        target = data / f"t-{p}"
        target.mkdir()
        for f in files:
            os.link(f, target / f.name)
    (data / ".built").touch()
    return data


def process_figures(pid: int) -> tuple[int, float]:
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    rss_kb = next(int(line.split()[1]) for line in open(f"/proc/{pid}/status")
                  if line.startswith("VmRSS:"))
    return fds, rss_kb / 1024


def serving_pid(mountpoint: Path) -> int:
    sys.path.insert(0, str(REPO))
    from kfs.mount_table import serving_processes
    return next(pid for pid, _, mnt in serving_processes() if mnt == str(mountpoint))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--segments", type=int, default=20)
    ap.add_argument("--nofile", type=int, default=1024)
    ap.add_argument("--touch", type=int, default=2000)
    args = ap.parse_args()
    root = REPO / "build" / "many-partitions"
    t = time.perf_counter()
    data = build(root, args.partitions, args.segments)
    print(f"directory: {args.partitions} partitions x {args.segments} segments "
          f"(built or found in {time.perf_counter() - t:.1f} s)")
    mnt = root / "mnt"
    mnt.mkdir(exist_ok=True)
    kfs = REPO / ".venv" / "bin" / "kfs"
    t = time.perf_counter()
    subprocess.run(["bash", "-c", f'ulimit -n {args.nofile} && exec "$0" mount --read-only '
                    f'"$1" "$2"', str(kfs), str(data), str(mnt)], check=True)
    mount_s = time.perf_counter() - t
    try:
        pid = serving_pid(mnt)
        fds, rss = process_figures(pid)
        print(f"mount --read-only returned in {mount_s:.2f} s (target <= 5 s); "
              f"{fds} descriptors, RSS {rss:.0f} MB (limit {args.nofile})")
        last = mnt / f"t-{args.partitions - 1}" / "by-offset"
        t = time.perf_counter()
        value = (last / str(args.segments * 10 - 1)).read_bytes()
        assert value == b"value-%d-9" % (args.segments - 1), value
        fds, rss = process_figures(pid)
        print(f"cat of one record in the last partition: {time.perf_counter() - t:.3f} s; "
              f"{fds} descriptors, RSS {rss:.0f} MB")
        step = max(args.partitions // max(args.touch, 1), 1)
        t = time.perf_counter()
        touched = 0
        for p in range(0, args.partitions, step):
            # a record of the first segment after reading the last one: every segment opened
            (mnt / f"t-{p}" / "values").read_bytes()
            touched += 1
        fds, rss = process_figures(pid)
        print(f"cat values of {touched} partitions ({touched * args.segments} segments read): "
              f"{time.perf_counter() - t:.1f} s; {fds} descriptors (target <= 1,024), "
              f"RSS {rss:.0f} MB (target <= 500 MB)")
    finally:
        subprocess.run([str(kfs), "umount", str(mnt)], check=False)


if __name__ == "__main__":
    main()
