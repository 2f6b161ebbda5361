"""Stream-file figures: a partition read as one stream by unix tools, each beside its ceiling
measured in the same run.

* ``cat values > /dev/null`` and ``grep -c`` over N x 100-B records: records/s and MB/s,
  beside bare pyfuse3 serving one file of the same size with the same request sizes
  (``bare_fs.py`` ``/stream``: direct_io, as kfs's streams); goal >= 0.9x. Beside them the
  render alone (``render_values``: every chunk of the mount's ``LogStream`` rendered once, in
  process, one thread, no FUSE): the mount renders ahead on a thread of its own, so ``cat``
  over kfs can go no faster than that, however well the render overlaps the requests.
* ``jq -c . records.jsonl | wc -l``: records/s, beside jq over the same text served by bare
  pyfuse3 (``bare_fs.py --stream-file``: every 8 KiB read of jq's a request, as on kfs) and
  over a local copy of it (jq's own pace, with no file system requests at all).
* ``tail -n 10 values`` on a BIG-record partition: wall time of a first and a second call and
  the bytes the kfs process read for each (``rchar`` of /proc/PID/io); the second must read
  O(one segment).
* ``ls -l`` of that partition's directory right after mounting (target <= 0.1 s).
* ``tail -f`` latency: from ``echo >> append`` returning to the line on tail's output,
  median and worst of ``--follows``.

    python benchmarks/bench_streams.py [--records N] [--big-records M] [--rounds R]
"""

from __future__ import annotations

import argparse
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import BARE_FS, Mounts, Table, med, ratio, spread  # noqa: E402

from storage import LogConfig  # noqa: E402
from storage.log import Log  # noqa: E402

VALUE = 99  # bytes of each value: 100 with its newline


def write_partition(path: Path, n: int) -> int:
    """``n`` records of 99-byte values; returns the size of ``values`` (n x 100 bytes)."""
    path.mkdir(parents=True)
    log = Log(path, "s", 0, LogConfig())
    for lo in range(0, n, 100_000):
        log.append([b"%099d" % i for i in range(lo, min(n, lo + 100_000))])
    log.close()
    return n * (VALUE + 1)


def render_values(path: Path, caches=None) -> float:
    """The mount's ``values`` of the partition at ``path`` rendered without FUSE, every chunk
    once (each batch read and CRC-checked), on one thread, as a new stream's index renders
    them (``LogStream.refresh``: the first reader's pass); seconds. A pass of reads would find
    the chunks the index kept already rendered. ``caches``: the ``StreamCaches`` the stream
    shares, as a mount's stream table hands its streams (its buffers reused across rounds)."""
    from kfs.mount.text_stream import LogStream
    from kfs.record_format import StreamFormat
    log = Log(path, "s", 0, LogConfig())
    try:
        stream = LogStream(log, StreamFormat.VALUES, caches=caches)
        t0 = time.perf_counter()
        stream.refresh()
        return time.perf_counter() - t0
    finally:
        log.close()


def sh_time(cmd: str, cwd: Path) -> tuple[float, str]:
    t = time.perf_counter()
    out = subprocess.run(["bash", "-c", cmd], cwd=cwd, capture_output=True, check=True,
                         text=True).stdout
    return time.perf_counter() - t, out


def rchar(pid: int) -> int:
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def follow_latencies(part: Path, count: int) -> list[float]:
    tail = subprocess.Popen(["tail", "-f", "-n", "0", str(part / "values")],
                            stdout=subprocess.PIPE)
    out = []
    try:
        time.sleep(1.5)  # let tail take its first fstat (its -n 0 start)
        for i in range(count):
            line = b"follow-%d\n" % i
            with open(part / "append", "ab", buffering=0) as f:
                f.write(line)
            t = time.perf_counter()
            got = b""
            while not got.endswith(b"\n"):
                ready, _, _ = select.select([tail.stdout], [], [], 30)
                if not ready:
                    raise RuntimeError("tail -f showed nothing within 30 s")
                got += os.read(tail.stdout.fileno(), 4096)
            out.append(time.perf_counter() - t)
            if got != line:
                raise RuntimeError(f"tail -f printed {got!r}, expected {line!r}")
    finally:
        tail.kill()
        tail.wait()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000)
    p.add_argument("--big-records", type=int, default=10_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--follows", type=int, default=100)
    args = p.parse_args()
    return run(args.records, args.big_records, args.rounds, args.follows)


def run(records: int, big_records: int, rounds: int, follows: int) -> int:
    """Measure and print every figure (``bench.py`` runs this too)."""
    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-streams-"))
    mounts = Mounts(tmp)
    try:
        size = write_partition(tmp / "data" / "s-0", records)
        write_partition(tmp / "big" / "s-0", big_records)
        kfs = mounts.start_kfs(tmp / "data", tmp / "mnt")
        mounts.start([sys.executable, str(BARE_FS), str(tmp / "bare"),
                      "--files", "1", "--size", str(VALUE + 1), "--stream-bytes", str(size)],
                     tmp / "bare", "bare")
        part, bare = tmp / "mnt" / "s-0", tmp / "bare"
        n = records
        sh_time("cat values > /dev/null", part)  # index once, as any first reader does
        plain = tmp / "records.jsonl"  # jq's own pace: the same text from a local file
        sh_time(f"cat records.jsonl > {plain}", part)
        mounts.start([sys.executable, str(BARE_FS), str(tmp / "bare-jq"), "--files", "1",
                      "--stream-file", str(plain)], tmp / "bare-jq", "bare-jq")
        rows = {"cat kfs": [], "cat bare": [], "grep kfs": [], "grep bare": [], "jq": [],
                "jq bare": [], "jq plain": []}
        for _ in range(rounds):
            rows["cat kfs"].append(sh_time("cat values > /dev/null", part)[0])
            rows["cat bare"].append(sh_time("cat stream > /dev/null", bare)[0])
            t, out = sh_time("grep -c 9 values", part)
            rows["grep kfs"].append(t)
            rows["grep bare"].append(sh_time("grep -c x stream", bare)[0])
            t, out = sh_time("jq -c . records.jsonl | wc -l", part)
            assert int(out) == n, out
            rows["jq"].append(t)
            t, out = sh_time("jq -c . stream | wc -l", tmp / "bare-jq")
            assert int(out) == n, out
            rows["jq bare"].append(t)
            rows["jq plain"].append(sh_time(f"jq -c . {plain} | wc -l", part)[0])
        rate = {key: [n / s for s in times] for key, times in rows.items()}
        t = Table(f"stream reads: {n:,} records of {VALUE + 1} B (medians of {rounds})",
                  ("what", "records/s", "MB/s", "kfs / bare"))
        kfs_over_bare = []
        for what, tool in (("cat > /dev/null", "cat"), ("grep -c", "grep")):
            k, b = rate[f"{tool} kfs"], rate[f"{tool} bare"]
            kfs_over_bare.append(med(k) / med(b))
            t.add(f"kfs  {what} values", spread(k), f"{med(k) * 100 / 1e6:.0f}",
                  ratio(med(k), med(b)))
            t.add(f"bare {what} (one {size / 1e6:.0f} MB file)", spread(b),
                  f"{med(b) * 100 / 1e6:.0f}", "")
        j, jb, jp = rate["jq"], rate["jq bare"], rate["jq plain"]
        t.add("kfs  jq -c . records.jsonl | wc -l", spread(j), "", ratio(med(j), med(jb)))
        t.add("bare jq -c . over the same text", spread(jb), "",
              f"local: {ratio(med(jb), med(jp))}")
        t.add("jq over a local copy of it (jq's own pace)", spread(jp), "", "")
        latencies = sorted(follow_latencies(part, follows))
        mounts.stop(kfs)
        from kfs.mount.text_stream import StreamCaches
        caches = StreamCaches()  # (one for all rounds, as a mount's stream table keeps one)
        rendered = [n / render_values(tmp / "data" / "s-0", caches) for _ in range(rounds)]
        t.sep()
        t.add("render alone: values, every chunk once, one thread, no FUSE", spread(rendered),
              f"{med(rendered) * 100 / 1e6:.0f}",
              f"{ratio(med(rendered), med(rate['cat bare']))} of bare cat")
        t.add(f"goal: cat and grep -c ≥ 0.9× bare -> "
              f"{'met' if min(kfs_over_bare) >= 0.9 else 'not met'}")
        t.print()

        big = mounts.start_kfs(tmp / "big", tmp / "mnt-big", "kfs-big")
        bpart = tmp / "mnt-big" / "s-0"
        ls_s, _ = sh_time("ls -l > /dev/null", bpart)
        calls = []
        for _ in range(2):
            before = rchar(big.pid)
            seconds, out = sh_time("tail -n 10 values", bpart)
            assert out.splitlines()[-1] == "%099d" % (big_records - 1), out[-200:]
            calls.append((seconds, rchar(big.pid) - before))
        t = Table(f"a {big_records:,}-record partition", ("what", "figure", ""))
        t.add("ls -l of the partition directory, just mounted", f"{ls_s:.3f} s",
              "target <= 0.1 s: " + ("met" if ls_s <= 0.1 else "NOT met"))
        for k, (seconds, read) in enumerate(calls):
            t.add(f"tail -n 10 values, call {k + 1}", f"{seconds:.3f} s",
                  f"{read / 1e6:.1f} MB read by kfs")
        t.add("tail -f latency, echo >> append to tail's line (median)",
              f"{med(latencies) * 1000:.0f} ms", f"worst {latencies[-1] * 1000:.0f} ms "
              f"of {len(latencies)}")
        t.print()
    finally:
        mounts.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
