"""Crash trials at scale: the kill -9 loop of tests/mount/test_mount_crash.py (CI runs 12 trials of it)
run N times against one backing directory.

Each trial mounts the directory (after the first, that is recovery without the clean-shutdown
marker), starts the test's writer (``writer_main``: lines ``line_for(n)`` at offset n, through
one open file and through files closed on a partial line), waits until the writer has
acknowledged a random number of writes (a write() that returned; a partial line: its close()),
then kills the serving process with SIGKILL and detaches the dead mount. The next mount must
serve every acknowledged line whole at its offset (none missing, none torn), possibly more
(a write in flight may have landed, whole), and nothing else; every record appended since the
last trial is read back through ``from/<offset>/values`` and a sample of older ones through
``by-offset``. At the end the directory is unmounted cleanly, checked by ``kfs verify`` and read
whole by the engine.

    .venv/bin/python benchmarks/crash_trials.py [N] [--dir DIR] [--seed S]     (N: 1000)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path[:0] = [str(ROOT), str(TESTS)]

from kfs.mount_table import alive, serving_processes  # noqa: E402
from helpers.append_writer import acknowledged, line_for  # noqa: E402

TOPIC_PROPERTIES = "segment.bytes=20000\nindex.interval.bytes=500\n"  # as the test: many segments
WRITER = "import sys, helpers.append_writer as t; t.writer_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))"
MAX_ACKS = 40  # a trial kills after 1..MAX_ACKS acknowledged writes
SAMPLE = 5  # older records read back per trial
HANG_S = 300  # ends a hung wait only


def env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]))


def mount(backing: Path, mnt: Path, log: Path) -> int:
    subprocess.run([sys.executable, "-m", "kfs", "mount", f"--log-file={log}", str(backing), str(mnt)],
                   check=True, cwd=ROOT, env=env())
    return next(pid for pid, _, m in serving_processes() if m == os.fspath(mnt))


def wait_for(condition, what: str, proc: subprocess.Popen) -> None:
    """Until ``condition()`` (polled: the writer's output is a file), failing if the writer died."""
    deadline = time.monotonic() + HANG_S
    while not condition():
        if proc.poll() is not None:
            raise RuntimeError(f"the writer exited ({proc.returncode}) before {what}: {proc.stderr.read()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"no {what} in {HANG_S} s")
        time.sleep(0.005)


def kill9(pid: int, mnt: Path) -> None:
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + HANG_S
    while alive(pid):
        if time.monotonic() > deadline:
            raise RuntimeError("the killed mount never exited")
        time.sleep(0.005)
    subprocess.run(["fusermount3", "-u", "-z", str(mnt)], check=True, capture_output=True)


def writer_then_kill(pid: int, mnt: Path, first: int, trial: int, out_path: Path, acks: int) -> int:
    """Start the writer at line ``first``, kill -9 the mount after ``acks`` acknowledged writes;
    returns the last acknowledged line."""
    with open(out_path, "w") as out:
        writer = subprocess.Popen([sys.executable, "-c", WRITER, str(mnt / "orders-0" / "append"),
                                   str(first), str(trial)], stdout=out, stderr=subprocess.PIPE,
                                  text=True, env=env(), cwd=ROOT)
    try:
        wait_for(lambda: out_path.read_text().count("\n") > acks, f"{acks} acknowledged writes", writer)
        kill9(pid, mnt)
        writer.wait(timeout=HANG_S)  # its next write fails: the connection is gone
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    return acknowledged(out_path.read_text())


def check(mnt: Path, verified: int, acked: int, rng: random.Random) -> tuple[int, list[str]]:
    """The recovered log: (its end, what is wrong). Offsets [verified, end) are read back
    whole, and a sample of older ones."""
    part = mnt / "orders-0"
    end = int(os.getxattr(part, "user.kafka.logEndOffset"))
    problems = []
    if int(os.getxattr(part, "user.kafka.logStartOffset")) != 0:
        problems.append("the log start offset moved")
    if end < acked + 1:
        problems.append(f"acknowledged lines missing: log end {end}, acknowledged up to {acked}")
    got = (part / "from" / str(verified) / "values").read_bytes()
    want = b"".join(line_for(o) + b"\n" for o in range(verified, end))
    if got != want:
        lines = got.split(b"\n")
        bad = next((verified + k for k, line in enumerate(lines[:-1]) if line != line_for(verified + k)), None)
        problems.append(f"records {verified}..{end} differ from what was written (first at {bad}; "
                        f"{len(lines) - 1} lines read, {end - verified} expected)")
    for o in rng.sample(range(verified), min(SAMPLE, verified)):
        if (part / "by-offset" / str(o)).read_bytes() != line_for(o):
            problems.append(f"offset {o} changed")
    return end, problems


def final_check(backing: Path, mnt: Path, log: Path, end: int) -> list[str]:
    """Unmounted cleanly: kfs verify, and every record read by the engine."""
    from storage import LogManager

    pid = mount(backing, mnt, log)
    subprocess.run([sys.executable, "-m", "kfs", "umount", str(mnt)], check=True, cwd=ROOT, env=env())
    problems = [] if not alive(pid) else ["the last mount did not exit at unmount"]
    res = subprocess.run([sys.executable, "-m", "kfs", "verify", str(backing)], capture_output=True,
                         text=True, cwd=ROOT, env=env())
    if res.returncode != 0:
        problems.append(f"kfs verify: {res.stdout[-3000:]}")
    mgr = LogManager(backing, read_only=True)
    try:
        log_ = mgr.get("orders-0")
        records = log_.reader.records_from(0, log_.log_end_offset + 1)
        if log_.log_end_offset < end or [r.offset for r in records] != list(range(log_.log_end_offset)):
            problems.append(f"engine: log end {log_.log_end_offset}, offsets not 0..end")
        if any(r.value != line_for(r.offset) for r in records):
            problems.append("engine: a record differs from what was written")
        print(f"final: {log_.log_end_offset:,} records in {len(log_.segments)} segments, "
              f"kfs verify: {(res.stdout.strip().splitlines() or ['?'])[-1]}")
    finally:
        mgr.close()
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trials", nargs="?", type=int, default=1000)
    parser.add_argument("--dir", help="work directory, kept (default: a temporary one, removed when clean)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    root = Path(args.dir or tempfile.mkdtemp(prefix="kfs-crash-"))
    backing, mnt = root / "data", root / "mnt"
    backing.mkdir(parents=True)
    mnt.mkdir()
    (backing / "orders.topic.properties").write_text(TOPIC_PROPERTIES)
    rng = random.Random(args.seed)
    verified = acked_total = landed = 0
    problems: list[str] = []
    t0 = time.monotonic()
    pid = mount(backing, mnt, root / "kfs.log")
    (mnt / "orders-0").mkdir()
    for trial in range(1, args.trials + 1):
        acked = writer_then_kill(pid, mnt, verified, trial, root / "writer.out", rng.randint(1, MAX_ACKS))
        pid = mount(backing, mnt, root / "kfs.log")  # recovery: no clean-shutdown marker
        end, found = check(mnt, verified, acked, rng)
        problems += [f"trial {trial}: {p}" for p in found]
        acked_total += acked + 1 - verified
        landed += end - (acked + 1)
        verified = end
        if trial % 10 == 0 or found:
            print(f"trial {trial}: log end {end:,}, {acked_total:,} lines acknowledged, "
                  f"{landed} more landed unacknowledged, {len(problems)} problems, "
                  f"{(time.monotonic() - t0) / trial:.2f} s/trial", flush=True)
    subprocess.run([sys.executable, "-m", "kfs", "umount", str(mnt)], check=True, cwd=ROOT, env=env())
    problems += final_check(backing, mnt, root / "kfs.log", verified)
    seconds = time.monotonic() - t0
    print(f"crash trials: {args.trials} kill -9 of the mount under a writer in {seconds / 60:.1f} min "
          f"({seconds / args.trials:.2f} s each; 1000 would take {seconds / args.trials * 1000 / 60:.0f} min)")
    print(f"  acknowledged lines: {acked_total:,}, all present and whole: {not problems}; "
          f"lines of writes in flight that landed whole: {landed:,}; problems: {len(problems)}")
    for p in problems[:30]:
        print(f"    {p}")
    if not args.dir and not problems:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
