"""``ls -f by-offset | wc -l`` of a large partition, beside its ceiling measured in the same run:
bare pyfuse3 (``bare_fs.py``) listing as many names from memory (``ls -f files | wc -l``).

The partition (N records of 10-byte values, written with the engine directly, no mount) is
listed on a fresh mount each round, so no entry is in the kernel's dentry cache; the same for
the bare file system. Issue 37's goal: <= 2 s for 1M records.

    python benchmarks/bench_listing.py [--records N] [--rounds R] [--read-only] [--profile]

``--profile``: py-spy records the kfs process during the first kfs round (needs py-spy) and
writes ``listing.svg`` in the run's directory, printed at the end.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import Mounts, med  # noqa: E402

from storage import LogConfig  # noqa: E402
from storage.log import Log  # noqa: E402

BATCH = 100_000  # records per engine append while building the partition


def write_partition(path: Path, n: int) -> None:
    """``n`` records of 10-byte values in ``path`` (a partition directory ``s-0``)."""
    path.mkdir(parents=True)
    log = Log(path, "s", 0, LogConfig())
    for lo in range(0, n, BATCH):
        log.append([b"%010d" % i for i in range(lo, min(n, lo + BATCH))])
    log.close()


def start_kfs(mounts: Mounts, tmp: Path, read_only: bool) -> subprocess.Popen:
    """kfs serving ``tmp/data`` at ``tmp/mnt`` in the foreground (this run owns its pid)."""
    argv = [sys.executable, "-m", "kfs", "mount", "-f", "--log-level=warning",
            f"--log-file={tmp / 'kfs.log'}", str(tmp / "data"), str(tmp / "mnt")]
    return mounts.start(argv + (["--read-only"] if read_only else []), tmp / "mnt", "kfs")


def timed_count(cmd: str, cwd: Path) -> tuple[float, int]:
    """Seconds ``cmd`` took and the number it printed (``wc -l``)."""
    t = time.perf_counter()
    res = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, check=True)
    return time.perf_counter() - t, int(res.stdout)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--read-only", action="store_true", help="mount kfs --read-only")
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-listing-"))
    mounts = Mounts(tmp)
    try:
        t = time.perf_counter()
        write_partition(tmp / "data" / "s-0", a.records)
        print(f"built {a.records} records in {time.perf_counter() - t:.1f} s", flush=True)
        kfs_s, bare_s = [], []
        for r in range(a.rounds):
            kfs = start_kfs(mounts, tmp, a.read_only)
            prof = None
            if a.profile and r == 0:
                prof = subprocess.Popen(["py-spy", "record", "-p", str(kfs.pid), "-o",
                                         str(tmp / "listing.svg"), "-r", "200"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)  # py-spy attached
            seconds, count = timed_count("ls -f s-0/by-offset | wc -l", tmp / "mnt")
            if prof is not None:
                prof.terminate()
                prof.wait()
            assert count == a.records + 2, count  # with . and ..
            kfs_s.append(seconds)
            mounts.stop(kfs)
            bare = mounts.start_bare(tmp / "bare", a.records, 10)
            seconds, count = timed_count("ls -f files | wc -l", tmp / "bare")
            assert count == a.records, count  # (bare_fs lists no . and ..)
            bare_s.append(seconds)
            mounts.stop(bare)
            print(f"round {r + 1}: kfs {kfs_s[-1]:.2f} s, bare pyfuse3 {bare_s[-1]:.2f} s",
                  flush=True)
        print(f"ls -f by-offset | wc -l, {a.records} records: kfs {med(kfs_s):.2f} s "
              f"(median of {a.rounds}), bare pyfuse3 {med(bare_s):.2f} s, "
              f"ratio {med(kfs_s) / med(bare_s):.2f}")
        if a.profile:
            print(f"profile: {tmp / 'listing.svg'}")
    finally:
        mounts.close()
        if not a.profile:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
