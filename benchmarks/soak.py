"""Concurrency soak of one mount: readers and writers all at once, with the scheduler's
retention and flushes running, invariants checked as it goes and at the end.

Writers: shell appends (``printf >> append`` line by line, ``cat FILE >> append`` and
``>> append-keyed`` a file per write()), producer batches written to ``append-batches`` by
separate processes (kafka-python's builder), and Spark jobs (``df.write.format("kfs")``, which
hand their transactional batches to the mount). Readers: ``cat`` of ``by-offset`` files and of
``values``, ``ls`` of ``by-offset``, and Spark reads through the kfs source.

Every value names its writer, its sequence number and its unit (the records one write() or one
producer batch carries: ``W:seq:unit:i/n:digest``), so a reader checks each record on its own
(not torn: the digest) and in order (per writer the sequence goes up by one: nothing skipped or
duplicated; a unit's records are consecutive and whole: no reader sees a partial batch). A
partition with one writer also has offset == sequence. A record is acknowledged when the
command or write() that carried it returned; every acknowledged record must be readable unless
retention removed it (below the log start offset, read before and after each read). At the
end the writers stop, every partition is read whole, the mount is unmounted and
``kfs verify`` checks the directory. The mount's RSS is sampled throughout.

    .venv/bin/python benchmarks/soak.py [--minutes 10] [--no-spark] [--dir DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kfs.mount_table import serving_processes  # noqa: E402

SERVER_PROPERTIES = ("log.retention.check.interval.ms=1000\n"
                     "log.flush.offset.checkpoint.interval.ms=5000\n"
                     "log.flush.start.offset.checkpoint.interval.ms=5000\n")
RETAINED = ("segment.bytes=131072\nretention.bytes=524288\nfile.delete.delay.ms=1000\n"
            "index.interval.bytes=1024\n")
TOPICS = {  # topic -> its properties (the flusher runs on flush.ms, appends flush on flush.messages)
    "lines": RETAINED + "flush.ms=1000\n",
    "batches": RETAINED + "flush.messages=2000\ncompression.type=lz4\n",
    "mixed": RETAINED + "flush.ms=3000\n",
    "spark": "segment.bytes=1048576\n",
}
# partition -> its writers; a partition with one writer has offset == sequence
PARTITIONS = {
    "lines-0": ("P",), "lines-1": ("K",), "batches-0": ("B",), "mixed-0": ("C", "M"),
    "spark-0": ("S",), "spark-1": ("S",),
}
SPARK_ROWS = 3000
MAX_REPORTED = 30


# --------------------------------------------------------------------------- values


def digest(prefix: str) -> str:
    return hashlib.blake2b(prefix.encode(), digest_size=6).hexdigest()


def value(wid: str, seq: int, unit: int, i: int, n: int) -> str:
    """The record ``seq`` of writer ``wid``, record ``i`` of the ``n`` of its unit."""
    prefix = f"{wid}:{seq}:{unit}:{i}/{n}"
    return f"{prefix}:{digest(prefix) * (1 + seq % 4)}"


@dataclass(frozen=True)
class Rec:
    wid: str
    seq: int
    unit: int
    i: int
    n: int


def parse(line: bytes) -> Rec | None:
    """The record a value names, or None when it is not a whole value (torn)."""
    try:
        wid, seq, unit, part, dig = line.decode().split(":")
        i, n = part.split("/")
        rec = Rec(wid, int(seq), int(unit), int(i), int(n))
    except ValueError:
        return None
    prefix = f"{wid}:{seq}:{unit}:{part}"
    return rec if dig == digest(prefix) * (1 + rec.seq % 4) else None


# --------------------------------------------------------------------------- shared state


@dataclass
class Soak:
    mnt: Path
    backing: Path
    tmp: Path
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[str, int] = field(default_factory=lambda: defaultdict(lambda: -1))
    counts: Counter = field(default_factory=Counter)
    violations: list[str] = field(default_factory=list)
    spark_acked: set[int] = field(default_factory=set)
    splice: str | None = None  # the first read spliced by retention (see report)

    def ack(self, wid: str, last: int, records: int, what: str) -> None:
        with self.lock:
            assert last == self.acked[wid] + records, (wid, last, records)
            self.acked[wid] = last
            self.counts[f"appends: {what}"] += 1
            self.counts["records appended"] += records

    def count(self, what: str, n: int = 1) -> None:
        with self.lock:
            self.counts[what] += n

    def violation(self, text: str) -> None:
        with self.lock:
            self.violations.append(f"{time.strftime('%H:%M:%S')} {text}")
            self.counts["violations"] += 1

    def acked_now(self) -> dict[str, int]:
        with self.lock:
            return dict(self.acked)

    def sh(self, script: str) -> subprocess.CompletedProcess:
        return subprocess.run(["bash", "-c", script], cwd=self.mnt, capture_output=True, timeout=600)

    def xattr(self, part: str, name: str) -> int:
        return int(os.getxattr(self.mnt / part, f"user.kafka.{name}"))


# --------------------------------------------------------------------------- checks


def check_run(part: str, recs: list[Rec | None], acked: dict[str, int],
              starts: tuple[int, int]) -> list[str]:
    """What is wrong with ``recs``, the records of ``part`` from its log start (read between
    log starts ``starts``) to its end, read after ``acked`` were acknowledged."""
    problems, last_of = [], {}
    writers = PARTITIONS[part]
    for k, rec in enumerate(recs):
        if rec is None:
            problems.append(f"{part}: record #{k} of the read is torn")
            continue
        prev = last_of.get(rec.wid)
        if prev is not None and rec.seq != prev.seq + 1 and writers != ("S",):
            problems.append(f"{part}: {rec.wid} sequence {prev.seq} then {rec.seq}")
        if rec.i > 0 and k > 0 and (recs[k - 1] is None or (recs[k - 1].wid, recs[k - 1].unit,
                                                            recs[k - 1].i) != (rec.wid, rec.unit, rec.i - 1)):
            problems.append(f"{part}: unit {rec.wid}/{rec.unit} split at record {rec.i}")
        last_of[rec.wid] = rec
    if recs and recs[-1] is not None and recs[-1].i != recs[-1].n - 1:
        problems.append(f"{part}: the read ends inside unit {recs[-1].wid}/{recs[-1].unit} "
                        f"({recs[-1].i + 1} of {recs[-1].n} records): a partial batch")
    if len(writers) == 1 and writers != ("S",):
        problems += check_single_writer(part, recs, acked, starts)
    else:
        for wid in writers:
            if wid in last_of and last_of[wid].seq < acked.get(wid, -1) and wid != "S":
                problems.append(f"{part}: {wid} acknowledged {acked[wid]}, read ends at {last_of[wid].seq}")
    return problems


def check_single_writer(part: str, recs: list[Rec | None], acked: dict[str, int],
                        starts: tuple[int, int]) -> list[str]:
    """One writer: offset == sequence, the first record at the log start, the last at or past
    the last acknowledged one."""
    wid = PARTITIONS[part][0]
    whole = [r for r in recs if r is not None]
    if not whole:
        return [] if acked.get(wid, -1) < starts[1] else [f"{part}: nothing read, {wid} acknowledged {acked[wid]}"]
    problems = []
    low, high = starts
    if not low <= whole[0].seq <= high:
        problems.append(f"{part}: first record {whole[0].seq}, log start {low}..{high}")
    if whole[-1].seq < acked.get(wid, -1):
        problems.append(f"{part}: acknowledged up to {acked[wid]}, read ends at {whole[-1].seq}")
    return problems


def report(soak: Soak, problems: list[str], moved: bool, what: str) -> None:
    """A read's problems are violations, unless the log start moved during a stream read: the
    whole-partition stream shrinks at the front then, so a reader's position jumps (see the
    summary)."""
    if not problems:
        return
    if moved:
        soak.count(f"{what}: reads spliced by a log start moving during the read")
        soak.splice = soak.splice or problems[0]
        return
    for p in problems:
        soak.violation(f"{what}: {p}")


# --------------------------------------------------------------------------- writers


def shell_writer(soak: Soak, wid: str, part: str, mode: str, seed: int) -> None:
    """``printf`` (one write() per line: every line a unit of its own) or ``cat`` of a file (one
    write(): one unit) to ``append`` / ``append-keyed``."""
    rng, seq, unit = random.Random(seed), 0, 0
    scratch = soak.tmp / f"{wid}.lines"
    while not soak.stop.is_set():
        n = rng.choice([1, 2, 5, 20, 100])
        if mode == "printf":
            lines = [value(wid, seq + i, seq + i, 0, 1) for i in range(n)]
            script = f"printf '%s\\n' {' '.join(lines)} >> {part}/append"
        else:
            lines = [value(wid, seq + i, unit, i, n) for i in range(n)]
            keyed = mode == "keyed"
            scratch.write_text("".join((f"{wid}\t" if keyed else "") + v + "\n" for v in lines))
            script = f"cat {scratch} >> {part}/{'append-keyed' if keyed else 'append'}"
        res = soak.sh(script)
        if res.returncode != 0:
            soak.violation(f"{wid}: {script[:60]}... failed: {res.stderr.decode(errors='replace')}")
            return
        soak.ack(wid, seq + n - 1, n, f"shell {mode} ({part})")
        seq, unit = seq + n, unit + 1


def batch_worker(path: str, wid: str, stop_file: str, seed: int) -> None:
    """In its own process (it holds its file open; a process that forks would flush it): one
    producer batch per write(), acknowledged on stdout as ``<first> <last>``."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    rng, seq, unit = random.Random(seed), 0, 0
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    while not os.path.exists(stop_file):
        n = rng.choice([1, 3, 10, 50, 200])
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                            batch_size=1 << 20)
        now = time.time_ns() // 1_000_000
        for i in range(n):
            builder.append(i, timestamp=now, key=None, value=value(wid, seq + i, unit, i, n).encode(),
                           headers=[])
        data = bytes(builder.build())
        assert os.write(fd, data) == len(data)
        print(seq, seq + n - 1, flush=True)
        seq, unit = seq + n, unit + 1
    os.close(fd)


def batch_writer(soak: Soak, wid: str, part: str, seed: int) -> None:
    """Runs batch_worker and takes its acknowledgements."""
    proc = subprocess.Popen([sys.executable, __file__, "--batch-worker", str(soak.mnt / part / "append-batches"),
                             wid, str(soak.tmp / "stop"), str(seed)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        first, last = map(int, line.split())
        soak.ack(wid, last, last - first + 1, f"append-batches ({part})")
    if proc.wait() != 0:
        soak.violation(f"{wid}: batch writer failed: {proc.stderr.read()[-2000:]}")


# --------------------------------------------------------------------------- readers


def cat_offsets(soak: Soak, rng: random.Random) -> None:
    """``cat`` of a few ``by-offset`` files of a one-writer partition: each holds its value
    (offset == sequence), or is ENOENT below the log start offset."""
    part = rng.choice([p for p, w in PARTITIONS.items() if len(w) == 1 and w != ("S",)])
    start, end = soak.xattr(part, "logStartOffset"), soak.xattr(part, "logEndOffset")
    if end == start:
        return
    offsets = sorted({rng.randrange(start, end) for _ in range(8)})
    script = "; ".join(f"echo @{o}; cat {part}/by-offset/{o} || printf '!'; echo" for o in offsets)
    out = soak.sh(script).stdout.split(b"\n")
    after = soak.xattr(part, "logStartOffset")
    for k, o in enumerate(offsets):
        content = out[2 * k + 1]
        soak.count("reads: cat by-offset")
        if content == b"!" and o < after:
            continue
        rec = parse(content)
        if rec is None or rec.seq != o:
            soak.violation(f"cat {part}/by-offset/{o}: {content[:80]!r} (log start {start}..{after})")


def cat_values(soak: Soak, rng: random.Random) -> None:
    part = rng.choice(list(PARTITIONS))
    acked = soak.acked_now()
    before = soak.xattr(part, "logStartOffset")
    res = soak.sh(f"cat {part}/values")
    after = soak.xattr(part, "logStartOffset")
    soak.count("reads: cat values")
    if res.returncode != 0:
        soak.violation(f"cat {part}/values: {res.stderr.decode(errors='replace')}")
        return
    recs = [parse(line) for line in res.stdout.split(b"\n")[:-1]]
    soak.count("records checked", len(recs))
    report(soak, check_run(part, recs, acked, (before, after)), before != after, "cat values")


def ls_offsets(soak: Soak, rng: random.Random) -> None:
    """``ls`` of ``by-offset``: each offset once, in order; every offset from the log start
    after the listing to the log end before it (retention may delete what the listing has not
    reached yet); a one-writer partition has no other gap (a Spark one: its markers')."""
    part = rng.choice(list(PARTITIONS))
    before, end = soak.xattr(part, "logStartOffset"), soak.xattr(part, "logEndOffset")
    res = soak.sh(f"ls -f {part}/by-offset")
    after, end_after = soak.xattr(part, "logStartOffset"), soak.xattr(part, "logEndOffset")
    soak.count("reads: ls by-offset")
    listed = [int(n) for n in res.stdout.split() if n not in (b".", b"..")]
    ok = res.returncode == 0 and listed == sorted(set(listed)) and (
        not listed or before <= listed[0] and listed[-1] < end_after)
    if ok and PARTITIONS[part] != ("S",):
        kept = set(listed)
        ok = all(o in kept for o in range(after, end))
    if not ok:
        soak.violation(f"ls {part}/by-offset: {len(listed)} names {listed[:3]}..{listed[-3:]}, "
                       f"log [{before}..{after}, {end}..{end_after}) {res.stderr[:200]!r}")


def reader(soak: Soak, fn, seed: int) -> None:
    rng = random.Random(seed)
    while not soak.stop.is_set():
        try:
            fn(soak, rng)
        except Exception as exc:  # noqa: BLE001 - a reader's failure is a finding, not the end
            soak.violation(f"{fn.__name__}: {exc!r}")


# --------------------------------------------------------------------------- Spark


def spark_session():
    from pyspark.sql import SparkSession

    import kfs.spark

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    spark = (SparkSession.builder.master("local[2]").appName("kfs-soak")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    kfs.spark.register(spark, filter_pushdown=False)
    return spark


def spark_round(soak: Soak, spark, job: int) -> None:
    """A Spark job writes SPARK_ROWS rows to topic ``spark`` through the mount, then Spark reads
    the topic (read_committed): every acknowledged row once; and reads lines-0 (retention under
    its feet): every row its offset's value."""
    first = job * SPARK_ROWS
    rows = [(value("S", first + i, first + i, 0, 1),) for i in range(SPARK_ROWS)]
    spark.createDataFrame(rows, "value string").repartition(2).write.format("kfs").option(
        "path", str(soak.backing)).option("topic", "spark").mode("append").save()
    with soak.lock:
        soak.spark_acked.update(range(first, first + SPARK_ROWS))
        soak.counts["appends: spark jobs"] += 1
        soak.counts["records appended"] += SPARK_ROWS
    check_spark_read(soak, spark)
    rows = spark.read.format("kfs").option("path", str(soak.backing)).option("subscribe", "lines").option(
        "failOnDataLoss", "false").load().where("partition = 0").select("offset", "value").collect()
    soak.count("reads: spark", 2)
    soak.count("records checked", len(rows))
    for row in rows:
        rec = parse(bytes(row.value))
        if rec is None or rec.seq != row.offset:
            soak.violation(f"spark read lines-0 offset {row.offset}: {bytes(row.value)[:80]!r}")
            break


def check_spark_read(soak: Soak, spark) -> None:
    got = spark.read.format("kfs").option("path", str(soak.backing)).option("subscribe", "spark").option(
        "isolation.level", "read_committed").load().select("value").collect()
    seqs = Counter()
    for row in got:
        rec = parse(bytes(row.value))
        if rec is None:
            soak.violation(f"spark read: torn value {bytes(row.value)[:80]!r}")
            return
        seqs[rec.seq] += 1
    with soak.lock:
        acked = set(soak.spark_acked)
    dup = [s for s, c in seqs.items() if c > 1]
    if set(seqs) != acked or dup:
        soak.violation(f"spark read: {len(acked - set(seqs))} acknowledged rows missing, "
                       f"{len(set(seqs) - acked)} unknown, {len(dup)} duplicated")
    soak.count("records checked", len(got))


def spark_loop(soak: Soak) -> None:
    try:
        spark = spark_session()
    except Exception as exc:  # noqa: BLE001
        soak.violation(f"spark: no session: {exc!r}")
        return
    job = 0
    try:
        while not soak.stop.is_set():
            spark_round(soak, spark, job)
            job += 1
        check_spark_read(soak, spark)
    except Exception as exc:  # noqa: BLE001
        soak.violation(f"spark job {job}: {str(exc)[:2000]}")
    finally:
        spark.stop()


# --------------------------------------------------------------------------- the mount


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def sample_rss(soak: Soak, pid: int, samples: list[tuple[float, int]]) -> None:
    t0 = time.monotonic()
    while not soak.stop.wait(2.0):  # a sampling period, not a synchronisation
        samples.append((time.monotonic() - t0, rss_kb(pid)))


def mount(backing: Path, mnt: Path, log: Path) -> int:
    subprocess.run([sys.executable, "-m", "kfs", "mount", "--log-level=info", f"--log-file={log}",
                    str(backing), str(mnt)], check=True, cwd=ROOT)
    return next(pid for pid, _, m in serving_processes() if m == os.fspath(mnt))


def setup(root: Path) -> tuple[Path, Path]:
    backing, mnt = root / "data", root / "mnt"
    backing.mkdir(parents=True)
    mnt.mkdir()
    (backing / "server.properties").write_text(SERVER_PROPERTIES)
    for topic, props in TOPICS.items():
        (backing / f"{topic}.topic.properties").write_text(props)
    return backing, mnt


# --------------------------------------------------------------------------- the end


def final_check(soak: Soak) -> None:
    """Writers stopped: every partition read whole (until its log start stays put over the
    read), every acknowledged record there unless below the log start."""
    acked = soak.acked_now()
    for part in PARTITIONS:
        for _ in range(100):
            before = soak.xattr(part, "logStartOffset")
            out = (soak.mnt / part / "values").read_bytes()
            if soak.xattr(part, "logStartOffset") == before:
                break
        recs = [parse(line) for line in out.split(b"\n")[:-1]]
        soak.count("records checked", len(recs))
        for p in check_run(part, recs, acked, (before, before)):
            soak.violation(f"final read: {p}")
        if PARTITIONS[part] != ("S",) and len(PARTITIONS[part]) == 1:
            end = soak.xattr(part, "logEndOffset")
            if end != acked[PARTITIONS[part][0]] + 1:
                soak.violation(f"final: {part} ends at {end}, acknowledged {acked[PARTITIONS[part][0]] + 1}")


def summary(soak: Soak, seconds: float, samples: list[tuple[float, int]], ends: dict, verify: str) -> None:
    print(f"\nsoak: {seconds / 60:.1f} min against one mount ({soak.mnt})")
    for what, n in sorted(soak.counts.items()):
        print(f"  {what:70} {n:>10,}")
    for part, (start, end) in ends.items():
        print(f"  {part:10} log start {start:>9,}  log end {end:>9,}")
    if samples:
        warm = [kb for t, kb in samples if t >= samples[-1][0] / 5] or [samples[-1][1]]
        print(f"  mount RSS: start {samples[0][1] / 1024:.0f} MB, after warm-up {warm[0] / 1024:.0f} MB, "
              f"end {samples[-1][1] / 1024:.0f} MB, max {max(kb for _, kb in samples) / 1024:.0f} MB "
              f"({len(samples)} samples)")
        per_minute = {int(t // 60): kb for t, kb in samples}
        print("  mount RSS by minute (MB): " + " ".join(f"{kb // 1024}" for _, kb in sorted(per_minute.items())))
        if samples[-1][1] > warm[0] * 1.25 + 16 * 1024:
            soak.violation(f"the mount's RSS grew from {warm[0] // 1024} MB to {samples[-1][1] // 1024} MB")
    if soak.splice:
        print(f"  (a spliced read, the first: {soak.splice})")
    print(f"  kfs verify after unmount: {verify}")
    print(f"  violations: {len(soak.violations)}")
    for v in soak.violations[:MAX_REPORTED]:
        print(f"    {v}")


def run(args) -> int:
    root = Path(args.dir or tempfile.mkdtemp(prefix="kfs-soak-"))
    backing, mnt = setup(root)
    pid = mount(backing, mnt, root / "kfs.log")
    soak = Soak(mnt, backing, root)
    for part in PARTITIONS:
        (mnt / part).mkdir()
    samples: list[tuple[float, int]] = [(0.0, rss_kb(pid))]
    writers = [
        threading.Thread(target=shell_writer, args=(soak, "P", "lines-0", "printf", 1)),
        threading.Thread(target=shell_writer, args=(soak, "K", "lines-1", "keyed", 2)),
        threading.Thread(target=shell_writer, args=(soak, "C", "mixed-0", "cat", 3)),
        threading.Thread(target=batch_writer, args=(soak, "B", "batches-0", 4)),
        threading.Thread(target=batch_writer, args=(soak, "M", "mixed-0", 5)),
    ]
    if args.spark:
        writers.append(threading.Thread(target=spark_loop, args=(soak,)))
    readers = [threading.Thread(target=reader, args=(soak, fn, 10 + k))
               for k, fn in enumerate((cat_offsets, cat_values, ls_offsets))]
    threads = writers + readers + [threading.Thread(target=sample_rss, args=(soak, pid, samples))]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    soak.stop.wait(args.minutes * 60)  # the soak's length
    soak.stop.set()
    (root / "stop").touch()
    for t in threads:
        t.join()
    final_check(soak)
    ends = {p: (soak.xattr(p, "logStartOffset"), soak.xattr(p, "logEndOffset")) for p in PARTITIONS}
    samples.append((time.monotonic() - t0, rss_kb(pid)))
    subprocess.run([sys.executable, "-m", "kfs", "umount", str(mnt)], check=True, cwd=ROOT)
    log_text = (root / "kfs.log").read_text(errors="replace")
    if "Traceback" in log_text or "unexpected error" in log_text:
        soak.violation(f"the mount logged an unexpected error: {root / 'kfs.log'}")
    res = subprocess.run([sys.executable, "-m", "kfs", "verify", str(backing)], capture_output=True,
                         text=True, cwd=ROOT)
    verify = (res.stdout.strip().splitlines() or ["?"])[-1]
    if res.returncode != 0:
        soak.violation(f"kfs verify: {res.stdout[-2000:]}")
    summary(soak, time.monotonic() - t0, samples, ends, verify)
    if not args.dir and not soak.violations:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if soak.violations else 0


def main() -> int:
    from needs import require

    require("soak.py", "kafka")
    if len(sys.argv) > 1 and sys.argv[1] == "--batch-worker":
        batch_worker(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--no-spark", dest="spark", action="store_false",
                        help="no Spark writer and reader (also implied when pyspark is missing)")
    parser.add_argument("--dir", help="work directory, kept (default: a temporary one, removed when clean)")
    args = parser.parse_args()
    if args.spark:
        try:
            import pyspark  # noqa: F401
        except ImportError:
            print("soak: pyspark is not installed: running without Spark (--no-spark)")
            args.spark = False
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
