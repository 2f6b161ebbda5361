"""kfs benchmark: each kfs figure beside its ceiling, re-measured in the same run.

    .venv/bin/python benchmarks/bench.py [--records N] [--quick] [--rounds R] [--profile] [--keep]
                                         [--no-streams]

Ceilings (see ../shared/fuse-and-performance-notes.md): a bare pyfuse3 file system doing the same
requests (``benchmarks/bare_fs.py``), kafka-python's record codec on the same records, and plain
local files for context.  The machines are noisy: kfs and its ceiling are measured interleaved,
``--rounds`` times, and the tables give medians (min-max); the useful figures are the ratios.

Measured:
  1. ``cat file >> MNT/bench-0/append`` with N lines of 100 bytes (99 + newline): records/s and
     MB/s; beside it the same ``cat`` into bare_fs's ``sink``, and the same records encoded into
     ~16 KiB v2 batches by kafka-python's builder and by the engine (``engine_encode``), each
     choosing its own batch boundaries.
     The landed count is checked (user.kafka.logEndOffset, and by reopening the engine after
     unmount).  Round 1 fills bench-0 (read below); later rounds append to fresh partitions.
     "Engine alone" stores the same 128 KiB writes in process (``engine_append``: the mount's
     framing and ``Log.append_lines``, no FUSE); since a write is stored before it is answered,
     the sink's time plus that is the best kfs can do per write ("kfs / sink at best").
  2. random ``by-offset/<o>`` open+read+close: a Python loop (per-file latency p50/p99) and real
     ``cat`` in a shell loop, at 10k records (bench-1) and N records (bench-0), beside bare_fs's
     small-file loop.  Every file is read once (distinct offsets), so no kernel cache helps.
     Diagnostic rows open the names relative to
     an open by-offset/ directory (openat), leaving out the path walk through the partition.
     "Engine alone" reads random records of round 1's in-process partition with
     ``LogReader.read`` (``engine_reads``); bare's time per file plus that is the best kfs can
     do per file ("kfs / bare at best").
  3. ``by-time/<t>`` likewise, random t within the partition's timestamps (distinct when the
     range has enough ms). kfs resolves many t to the same record, and a record read before
     (section 2, earlier rounds) is in the kernel's cache: bare_fs's symlinks replay exactly the
     same cold/warm pattern (see ``bench_by_time``).
  4. decode: ``engine_decode`` over every batch of bench-0's .log files vs aiokafka's compiled
     ``DefaultRecordBatch`` and kafka-python's over the same bytes (with and without CRC), each
     reading offset, timestamp, key and value of every record.
  5. ``kfs verify`` of the backing directory after unmount (MB/s of .log verified, as the command
     and in process), beside ``crc_ceiling.py`` run the same two ways: reading the same files in
     large blocks into one buffer and CRC-32C over all their bytes.

Everything lives in a temp dir under /tmp; every mount is unmounted in ``finally`` blocks (also
on Ctrl-C and SIGTERM).  ``--profile`` samples the kfs process with py-spy during the append and
the 1M-record lookups (``.venv/bin/pip install py-spy``) and prints where its time goes.
The default run (1M records) takes ~3.5-5 minutes on a 2-core machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import platform
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
BARE_FS = Path(__file__).resolve().parent / "bare_fs.py"
LINE = 100  # bytes per line, newline included
VALUE = LINE - 1
BATCH_SIZE = 16384  # producer batch.size default, ~16 KiB batches
READY_TIMEOUT = 120.0
DATA_TOPIC = "bench"


# --------------------------------------------------------------------------- output

class Table:
    """Rows of (what, kfs, ceiling, ratio, note), printed aligned."""

    def __init__(self, title: str, headers: tuple[str, ...]):
        self.title = title
        self.headers = headers
        self.rows: list[tuple[str, ...]] = []

    def add(self, *cells: Any) -> None:
        self.rows.append(tuple("" if c is None else str(c) for c in cells))

    def sep(self) -> None:
        self.rows.append(())

    def print(self) -> None:
        cols = len(self.headers)
        widths = [len(h) for h in self.headers]
        for row in self.rows:
            for i, cell in enumerate(row[:cols]):
                widths[i] = max(widths[i], len(cell))
        print()
        print(f"== {self.title}")
        line = "  ".join(h.ljust(widths[i]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(self.headers))
        print(line)
        print("-" * len(line))
        for row in self.rows:
            if not row:
                print()
                continue
            cells = list(row) + [""] * (cols - len(row))
            print("  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(cells[:cols]))
                  + ("  " + "  ".join(row[cols:]) if len(row) > cols else ""))
        sys.stdout.flush()


def fmt_rate(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    if x >= 1e3:
        return f"{x / 1e3:.1f}k"
    return f"{x:.0f}"


def fmt_us(ns: float) -> str:
    us = ns / 1000
    return f"{us:.0f} µs" if us < 10_000 else f"{us / 1000:.1f} ms"


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def spread(xs: list[float], f: Callable[[float], str] = fmt_rate) -> str:
    """'median (min-max)' of rates."""
    if len(xs) == 1:
        return f(xs[0])
    return f"{f(med(xs))} ({f(min(xs))}-{f(max(xs))})"


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}×" if b else "n/a"


def log(msg: str) -> None:
    print(f"  … {msg}", file=sys.stderr, flush=True)


def pct(sorted_ns: list[int], p: float) -> float:
    if not sorted_ns:
        return float("nan")
    k = min(len(sorted_ns) - 1, max(0, int(round(p / 100 * (len(sorted_ns) - 1)))))
    return sorted_ns[k]


# --------------------------------------------------------------------------- mounts

class Mounts:
    """The file system processes this run started (by pid), each unmounted in ``close``."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.live: list[tuple[subprocess.Popen, Path, str]] = []

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        return env

    def start(self, argv: list[str], mnt: Path, name: str) -> subprocess.Popen:
        mnt.mkdir(parents=True, exist_ok=True)
        logf = open(self.tmp / f"{name}.stderr", "wb")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=logf,
                                env=self._env(), cwd="/", start_new_session=True)
        logf.close()
        self.live.append((proc, mnt, name))
        deadline = time.monotonic() + READY_TIMEOUT
        while not os.path.ismount(mnt):
            if proc.poll() is not None:
                err = (self.tmp / f"{name}.stderr").read_text(errors="replace")
                raise RuntimeError(f"{name} exited with status {proc.returncode} before mounting:\n{err}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not mount {mnt} within {READY_TIMEOUT:.0f} s")
            time.sleep(0.02)
        return proc

    def start_kfs(self, backing: Path, mnt: Path, name: str = "kfs") -> subprocess.Popen:
        # -f: this run owns the serving process (its pid: for py-spy, and to wait for its exit).
        argv = [sys.executable, "-m", "kfs", "mount", "-f", "--create", "--log-level=warning",
                f"--log-file={self.tmp / (name + '.log')}", str(backing), str(mnt)]
        return self.start(argv, mnt, name)

    def start_bare(self, mnt: Path, files: int, size: int, name: str = "bare") -> subprocess.Popen:
        argv = [sys.executable, str(BARE_FS), str(mnt), "--files", str(files), "--size", str(size)]
        return self.start(argv, mnt, name)

    def stop(self, proc: subprocess.Popen) -> None:
        for entry in list(self.live):
            if entry[0] is proc:
                self._stop(*entry)
                self.live.remove(entry)

    def _stop(self, proc: subprocess.Popen, mnt: Path, name: str) -> None:
        # fusermount3 -u fails (EBUSY) while an interrupted cat still has a file open: retry a
        # little, then SIGTERM (both file systems then unmount themselves, lazily if need be).
        deadline = time.monotonic() + 5
        unmounted = False
        while proc.poll() is None and os.path.ismount(mnt) and time.monotonic() < deadline:
            if subprocess.run(["fusermount3", "-u", str(mnt)], stderr=subprocess.DEVNULL).returncode == 0:
                unmounted = True
                break
            time.sleep(0.2)
        try:
            proc.wait(timeout=60 if unmounted else 0.1)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if os.path.ismount(mnt):
            subprocess.run(["fusermount3", "-uz", str(mnt)], stderr=subprocess.DEVNULL)

    def close(self) -> None:
        while self.live:
            entry = self.live.pop()
            try:
                self._stop(*entry)
            except BaseException as exc:  # keep unmounting the others
                print(f"warning: stopping {entry[2]} failed: {exc!r}", file=sys.stderr)


class Profiler:
    """Optional py-spy sampling of the kfs process during a phase (``--profile``)."""

    def __init__(self, enabled: bool, out_dir: Path):
        self.exe = shutil.which("py-spy", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        self.enabled = enabled and self.exe is not None
        self.out_dir = out_dir
        self.reports: list[tuple[str, Path]] = []
        if enabled and not self.exe:
            print("note: --profile needs py-spy (.venv/bin/pip install py-spy); profiling off")

    def start(self, pid: int, name: str) -> subprocess.Popen | None:
        if not self.enabled:
            return None
        out = self.out_dir / f"profile-{name}.txt"
        proc = subprocess.Popen([self.exe, "record", "--pid", str(pid), "--format", "raw", "--rate", "250",
                                 "--nonblocking", "-o", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # let it attach
        self.reports.append((name, out))
        return proc

    @staticmethod
    def stop(proc: subprocess.Popen | None) -> None:
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    # py-spy cannot tell these waits from work: counted apart.
    ENTRY = frozenset({"<module> (kfs/__main__.py)", "main (kfs/cli.py)", "cmd_mount (kfs/mount/command.py)",
                       "serve (kfs/mount/daemon.py)"})
    WAITING = frozenset({"EpollIOManager.get_events", "EpollIOManager._epoll_wait", "WorkerThread._work"})

    @staticmethod
    def _frame(fr: str) -> tuple[str, str]:
        """'func (file:line)' -> ('func (file)', category)."""
        func, _, loc = fr.partition(" (")
        file = loc.rsplit(":", 1)[0]
        norm = "/" + file
        if func in Profiler.WAITING:
            cat = "waiting (epoll, idle worker threads)"
        elif "/storage/" in norm:
            cat = "engine (storage/)"
        elif "/kfs/" in norm:
            cat = "mount adapter (kfs/)"
        elif "/trio/" in norm:
            cat = "trio"
        elif "pyfuse3" in norm:
            cat = "pyfuse3 (its C loop, incl. /dev/fuse syscalls)"
        else:
            cat = "other"
        return f"{func} ({file})", cat

    def print(self, top: int = 10) -> None:
        for name, path in self.reports:
            if not path.exists():
                continue
            own: collections.Counter[str] = collections.Counter()
            cats: collections.Counter[str] = collections.Counter()
            incl: collections.Counter[str] = collections.Counter()
            total = 0
            for line in path.read_text(errors="replace").splitlines():
                stack, _, count = line.rpartition(" ")
                if not count.isdigit() or not stack.strip():
                    continue
                n = int(count)
                total += n
                frames = [self._frame(fr) for fr in stack.split(";") if fr]
                own[frames[-1][0]] += n
                cats[frames[-1][1]] += n
                for fr in {f for f, c in frames if c.startswith(("engine", "mount"))} - Profiler.ENTRY:
                    incl[fr] += n
            if not total:
                continue
            print(f"\n-- py-spy, kfs process during {name}: {total} samples (all threads, idle excluded)")
            print("   self time by layer: " + ", ".join(f"{c} {100 * n / total:.0f}%" for c, n in cats.most_common()))
            print("   self%  function")
            for fr, n in own.most_common(top):
                print(f"   {100 * n / total:5.1f}  {fr}")
            print("   incl%  kfs/ and storage/ functions")
            for fr, n in incl.most_common(top):
                print(f"   {100 * n / total:5.1f}  {fr}")


# --------------------------------------------------------------------------- helpers

def sh(cmd: str) -> float:
    """Run ``cmd`` in bash; seconds elapsed."""
    t0 = time.perf_counter()
    subprocess.run(["bash", "-c", cmd], check=True)
    return time.perf_counter() - t0


def make_values(n: int) -> list[bytes]:
    """n distinct 99-byte values (a JSON-ish line: id, then pseudo-random text)."""
    rnd = random.Random(42)
    alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 ,:_-"
    pool = bytes(rnd.choice(alphabet) for _ in range(8192))
    out = []
    for i in range(n):
        head = b'{"id":%012d,"user":"u%05d","t":"' % (i, i % 100000)
        body = VALUE - len(head) - 2
        j = (i * 7919) % (len(pool) - body)
        out.append(head + pool[j:j + body] + b'"}')
    assert all(len(v) == VALUE for v in out[:100])
    return out


def read_file(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        chunks = []
        while True:
            b = os.read(fd, 65536)
            if not b:
                return b"".join(chunks)
            chunks.append(b)
    finally:
        os.close(fd)


def read_loop(names: list[str], dir_fd: int | None = None) -> tuple[float, list[int]]:
    """open+read-to-EOF+close each path; (seconds, sorted per-file ns)."""
    lat = []
    clock = time.perf_counter_ns
    o_open, o_read, o_close, flags = os.open, os.read, os.close, os.O_RDONLY
    t_start = clock()
    for name in names:
        t0 = clock()
        fd = o_open(name, flags, dir_fd=dir_fd)
        try:
            while o_read(fd, 65536):
                pass
        finally:
            o_close(fd)  # an fd left open on Ctrl-C would keep the mount busy
        lat.append(clock() - t0)
    total = (clock() - t_start) / 1e9
    lat.sort()
    return total, lat


def shell_cat_loop(paths: list[str], list_file: Path) -> float:
    """Real ``cat`` of each path from a bash loop; files/s."""
    list_file.write_text("\n".join(paths) + "\n")
    dt = sh(f'while IFS= read -r p; do cat "$p"; done < {list_file} > /dev/null')
    return len(paths) / dt


def xattr_int(path: str, name: str) -> int:
    return int(os.getxattr(path, name))


def machine_info() -> list[str]:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.0f} GiB"
    except OSError:
        pass
    versions = []
    for mod in ("pyfuse3", "trio", "kafka"):
        try:
            m = __import__(mod)
            versions.append(f"{mod if mod != 'kafka' else 'kafka-python'} {getattr(m, '__version__', '?')}")
        except ImportError:
            versions.append(f"{mod} missing")
    fuse = subprocess.run(["fusermount3", "-V"], capture_output=True, text=True).stdout.strip()
    return [
        f"machine: nproc={os.cpu_count()} ({len(os.sched_getaffinity(0))} usable), {cpu}, {mem}, "
        f"Linux {platform.release()}",
        f"python {platform.python_version()} ({sys.executable}); {', '.join(versions)}; {fuse}",
    ]


# --------------------------------------------------------------------------- codec phases

def kp_encode(values: list[bytes], ts: int) -> tuple[list[bytes], list[int]]:
    """kafka-python: values -> ~16 KiB uncompressed v2 batches (as its producer builds them)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    def builder() -> Any:
        return DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                         producer_epoch=-1, base_sequence=-1, batch_size=BATCH_SIZE)

    batches, counts = [], []
    b = builder()
    n = 0
    for offset, v in enumerate(values):
        if b.append(n, ts, None, v, []) is None:
            batches.append(bytes(b.build()))
            counts.append(n)
            b, n = builder(), 0
            b.append(n, ts, None, v, [])
        n += 1
    batches.append(bytes(b.build()))
    counts.append(n)
    return batches, counts


def engine_encode(values: list[bytes], ts: int) -> list[bytes]:
    """The engine's encode as a real append does it (``Log.append``): it chooses its own batch
    boundaries (``batch.size``, ``storage.batch_planning``), then encodes each batch in one
    compiled call (``encode_records``) and seals it (header, compression, CRC-32C)."""
    from storage.batch_planning import plan_batches
    from storage.config import LogConfig
    from storage.records import encode_records, seal_batch
    cfg = LogConfig()
    chunks = plan_batches(values, None, cfg)
    return [seal_batch(encode_records(values[start:end]), end - start, start, ts, ts,
                       end - start - 1, codec=cfg.codec, level=cfg.compression_level)
            for start, end in chunks]


CAT_WRITE = 128 << 10  # bytes of each write() of ``cat file >> append`` (coreutils' io_blksize)


def engine_append(data: bytes, directory: Path) -> float:
    """The mount's write path without FUSE: ``data`` cut into ``cat``'s 128 KiB writes, each
    framed by the mount's ``LineFramer`` and stored by ``Log.append_lines`` (encode, CRC-32C,
    the page-cache write, the indexes) into a new partition under ``directory``; seconds."""
    from kfs.mount.append import LineFramer
    from storage import LogManager
    mgr = LogManager(directory)
    try:
        log, framer, view = mgr.create(f"{DATA_TOPIC}-0"), LineFramer(), memoryview(data)
        t0 = time.perf_counter()
        for pos in range(0, len(data), CAT_WRITE):
            lines = framer.feed(view[pos:pos + CAT_WRITE])
            if lines:
                log.append_lines(lines)
        return time.perf_counter() - t0
    finally:
        mgr.close()


def engine_reads(directory: Path, offsets: list[int]) -> float:
    """``LogReader.read`` of each offset of the partition ``engine_append`` made under
    ``directory`` (segment, offset index, the batch read and CRC-checked, the record decoded:
    what ``cat by-offset/<o>`` costs the engine); seconds. Raises if a record is missing."""
    from storage import LogManager
    mgr = LogManager(directory)
    try:
        read = mgr.get(f"{DATA_TOPIC}-0").reader.read
        t0 = time.perf_counter()
        for o in offsets:
            if read(o) is None:
                raise LookupError(f"engine: no record at offset {o}")
        return time.perf_counter() - t0
    finally:
        mgr.close()


def best_ratio(ceiling_s: float, added_s: float) -> str:
    """kfs / ceiling at best when kfs does the ceiling's work plus ``added_s`` one after the
    other (the engine's part of a request), as ``ratio`` prints it."""
    return ratio(1 / (ceiling_s + added_s), 1 / ceiling_s)


def touch(records: Any) -> int:
    """Iterate the records, reading offset, timestamp, key and value of each; their number."""
    n = 0
    for r in records:
        _ = (r.offset, r.timestamp, r.key, r.value)
        n += 1
    return n


def engine_decode(buf: bytes, check_crc: bool = False) -> int:
    """Every record of the v2 batches of one .log file's bytes, decoded into columns (offset,
    timestamp, key, value... as Arrow buffers: what the Spark source and bulk readers take),
    a run of batches per call and an Arrow batch per ~32k rows, as ``Log.read_columns`` does;
    the number of records."""
    from storage.records.columns import RecordColumns
    columns = RecordColumns()
    view, pos, n = memoryview(buf), 0, 0
    while pos + 61 <= len(buf):
        consumed, _ = columns.add_run(view[pos:pos + (1 << 20)], check_crc=check_crc)
        if not consumed:
            break
        pos += consumed
        if columns.num_rows >= 32768:
            n += columns.to_arrow().num_rows
    return n + columns.to_arrow().num_rows


def lib_decode(batch_cls: Any, buf: bytes, check_crc: bool) -> int:
    """The same with a client library's ``DefaultRecordBatch`` (kafka-python's or aiokafka's)."""
    unpack = struct.Struct(">i").unpack_from
    mv = memoryview(buf)
    n, pos, end = 0, 0, len(buf)
    while pos + 61 <= end:
        size = 12 + unpack(buf, pos + 8)[0]
        batch = batch_cls(mv[pos:pos + size])
        if check_crc and not batch.validate_crc():  # aiokafka: before iterating
            raise ValueError(f"{batch_cls.__module__}: bad CRC at {pos}")
        n += touch(batch)
        pos += size
    return n


def aiokafka_batch() -> tuple[Any, str]:
    """(aiokafka's compiled DefaultRecordBatch, why-not)."""
    try:
        import aiokafka  # noqa: F401
    except ImportError:
        return None, "n/a (pip install aiokafka)"
    try:  # the Cython class itself, not the pure-Python fallback (AIOKAFKA_NO_EXTENSIONS)
        from aiokafka.record._crecords import default_records
    except ImportError as exc:
        return None, f"n/a (aiokafka without its C extensions: {exc})"
    if not default_records.__file__.endswith(".so"):
        return None, f"n/a (aiokafka's decoder is not compiled: {default_records.__file__})"
    return default_records.DefaultRecordBatch, ""


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


# --------------------------------------------------------------------------- the run

class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path):
        self.a = args
        self.tmp = tmp
        self.n = args.records
        self.small = min(args.small, self.n)
        self.backing = tmp / "backing"
        self.mnt = tmp / "mnt"
        self.bare_mnt = tmp / "bare"
        self.mounts = Mounts(tmp)
        self.prof = Profiler(args.profile, tmp)
        self.kfs: subprocess.Popen | None = None
        self.failures: list[str] = []
        self.rng = random.Random(args.seed)

    def fail(self, msg: str) -> None:
        self.failures.append(msg)
        print(f"!! {msg}", flush=True)

    # ---- setup

    def setup(self) -> None:
        log(f"writing {self.n:,} lines of {LINE} bytes")
        self.values = make_values(self.n)
        self.data = self.tmp / "data.txt"
        with open(self.data, "wb") as f:
            f.write(b"\n".join(self.values) + b"\n")
        self.small_data = self.tmp / "data-small.txt"
        with open(self.small_data, "wb") as f:
            f.write(b"\n".join(self.values[: self.small]) + b"\n")
        log("mounting kfs and bare_fs")
        self.kfs = self.mounts.start_kfs(self.backing, self.mnt)
        self.bare = self.mounts.start_bare(self.bare_mnt, max(self.n, self.small), VALUE)
        self.p_big = str(self.mnt / f"{DATA_TOPIC}-0")
        self.p_small = str(self.mnt / f"{DATA_TOPIC}-1")
        os.mkdir(self.p_big)
        os.mkdir(self.p_small)

    # ---- 1. append

    def bench_append(self) -> None:
        a = self.a
        nbytes = self.n * LINE
        kfs_t, bare_t, plain_t, store_t = [], [], [], []
        sink = str(self.bare_mnt / "sink")
        plain = self.tmp / "plain-append"
        data = self.data.read_bytes()
        for r in range(a.rounds):
            part = self.p_big if r == 0 else str(self.mnt / f"append_r{r}-0")
            if r:
                os.mkdir(part)
            os.sync()
            log(f"append round {r + 1}/{a.rounds}: kfs")
            p = self.prof.start(self.kfs.pid, "append") if r == 0 else None
            try:
                kfs_t.append(sh(f"cat {self.data} >> {part}/append"))
            finally:
                self.prof.stop(p)
            landed = xattr_int(part, "user.kafka.logEndOffset")
            if landed != self.n:
                self.fail(f"append round {r + 1}: {landed:,} records landed in {part}, expected {self.n:,}")
            os.sync()
            log(f"append round {r + 1}/{a.rounds}: bare sink")
            os.getxattr(sink, "user.reset")
            bare_t.append(sh(f"cat {self.data} >> {sink}"))
            lines = xattr_int(sink, "user.lines")
            if lines != self.n:
                self.fail(f"bare sink counted {lines:,} lines, expected {self.n:,}")
            plain.unlink(missing_ok=True)
            plain_t.append(sh(f"cat {self.data} >> {plain}"))
            engine_dir = self.tmp / f"engine-{r}"
            engine_dir.mkdir()
            store_t.append(engine_append(data, engine_dir))
            if r:
                shutil.rmtree(engine_dir)
            else:
                self.engine_dir = engine_dir  # round 1's partition: section 2 reads it
        plain.unlink(missing_ok=True)
        del data
        # The small partition, for the lookups at 10k records.
        sh(f"cat {self.small_data} >> {self.p_small}/append")
        landed = xattr_int(self.p_small, "user.kafka.logEndOffset")
        if landed != self.small:
            self.fail(f"{self.small:,}-line append landed {landed:,} records")
        os.sync()

        # Codec peers over the same records, each choosing its own ~16 KiB batch boundaries.
        ts = int(time.time() * 1000)
        kp_t, eng_t = [], []
        counts: list[int] = []
        eng_batches: list[bytes] = []
        why = ""
        for warm_up in (kp_encode, engine_encode):  # imports and first calls, untimed
            try:
                warm_up(self.values[:100], ts)
            except Exception:  # noqa: BLE001 - reported by the timed rounds
                pass
        for r in range(a.codec_rounds):
            log(f"encode round {r + 1}/{a.codec_rounds}")
            dt, (_, counts) = timed(lambda: kp_encode(self.values, ts))
            kp_t.append(dt)
            if not why:
                try:
                    dt, eng_batches = timed(lambda: engine_encode(self.values, ts))
                    eng_t.append(dt)
                except Exception as exc:  # noqa: BLE001
                    why = f"engine encode failed: {type(exc).__name__}: {exc}"
                    eng_t = []
        if eng_t:
            self.check_engine_batches(eng_batches)

        t = Table(f"1. append: cat {self.n:,} lines of {LINE} B >> append   (medians of {a.rounds} interleaved rounds)",
                  ("what", "records/s", "MB/s", "kfs / it"))
        k = [self.n / x for x in kfs_t]
        t.add("kfs  cat >> bench-0/append", spread(k), f"{med([nbytes / x / 1e6 for x in kfs_t]):.0f}", "")
        b = [self.n / x for x in bare_t]
        t.add("bare pyfuse3 sink (ceiling)", spread(b), f"{med([nbytes / x / 1e6 for x in bare_t]):.0f}",
              ratio(med(k), med(b)))
        e = [self.n / x for x in store_t]
        t.add("engine alone: the same writes framed and stored, no FUSE", spread(e),
              f"{med([nbytes / x / 1e6 for x in store_t]):.0f}", ratio(med(k), med(e)))
        writes = -(-nbytes // CAT_WRITE)  # each write is a request, stored before it is answered
        t.add(f"  kfs / sink at best: the sink's request, then storing it "
              f"({med(bare_t) / writes * 1e6:.0f} + {med(store_t) / writes * 1e6:.0f} µs a write)",
              "", "", best_ratio(med(bare_t), med(store_t)))
        kp = [self.n / x for x in kp_t]
        t.add(f"kafka-python encode (its builder: {len(counts)} batches)", spread(kp),
              f"{med([nbytes / x / 1e6 for x in kp_t]):.0f}", ratio(med(k), med(kp)))
        if eng_t:
            e = [self.n / x for x in eng_t]
            t.add(f"engine encode (plans its own: {len(eng_batches)} batches)", spread(e),
                  f"{med([nbytes / x / 1e6 for x in eng_t]):.0f}",
                  ratio(med(k), med(e)))
            t.add("  engine encode / kafka-python", "", "", ratio(med(e), med(kp)))
        else:
            t.add("engine encode", "n/a", "", "", why)
        p = [self.n / x for x in plain_t]
        t.add("plain local file (context)", spread(p), f"{med([nbytes / x / 1e6 for x in plain_t]):.0f}",
              ratio(med(k), med(p)))
        met = med(k) >= 0.8 * med(b)
        t.add(f"goal: kfs ≥ 0.8× the bare pyfuse3 sink -> {'met' if met else 'not met'}")
        t.print()
        self.append_rate = med(k)

    def check_engine_batches(self, eng: list[bytes]) -> None:
        """The engine's batches are contiguous, hold every record, and decode (kafka-python) to
        the values appended (the first, middle and last batch)."""
        from kafka.record.default_records import DefaultRecordBatch
        batches = [DefaultRecordBatch(b) for b in eng]
        nxt = 0
        for b in batches:
            if b.base_offset != nxt:
                self.fail(f"engine batches: base offset {b.base_offset}, expected {nxt}")
                return
            nxt = b.next_offset
        if nxt != self.n:
            self.fail(f"engine batches hold {nxt:,} records, expected {self.n:,}")
        for i in {0, len(eng) // 2, len(eng) - 1}:
            base = batches[i].base_offset
            got = [bytes(r.value) for r in DefaultRecordBatch(eng[i])]
            if got != self.values[base:base + len(got)]:
                self.fail(f"engine batch {i} decodes (kafka-python) to other values than those appended")
                return

    # ---- 2./3. lookups

    def samples(self, size: int, taken: set[int] | None = None) -> Callable[[int], list[int]]:
        """A source of distinct random offsets in [0, size): each call takes the next k (and
        adds them to ``taken``)."""
        perm = list(range(size))
        self.rng.shuffle(perm)
        pos = 0

        def take(k: int) -> list[int]:
            nonlocal pos
            k = min(k, len(perm) - pos)
            out = perm[pos:pos + k]
            pos += k
            if taken is not None:
                taken.update(out)
            return out
        return take

    def check_values(self, part: str, offsets: list[int]) -> None:
        for o in offsets[:20]:
            got = read_file(f"{part}/by-offset/{o}")
            if got != self.values[o]:
                self.fail(f"{part}/by-offset/{o} reads {got[:40]!r}…, expected {self.values[o][:40]!r}…")
                return

    def bench_lookups(self) -> None:
        a = self.a
        parts = [(f"{self.small:,}", self.p_small, self.small), (f"{self.n:,}", self.p_big, self.n)]
        if self.small == self.n:
            parts = parts[1:]
        per_loop = a.reads
        # Every loop reads files never read before: per partition, rounds x (a loop by path and
        # a half-size loop by dirfd), the shell loop and 20 checked values.
        for _, _, size in parts:
            per_loop = min(per_loop, max(2, int((size - a.shell_reads - 20) / (1.5 * a.rounds))))
        diag_loop = per_loop // 2
        # Offsets whose by-offset/ file has been read (section 3 mirrors them on bare_fs).
        self.kfs_read = {p: set() for _, p, _ in parts}
        kfs_take = {p: self.samples(size, self.kfs_read[p]) for _, p, size in parts}
        bare_take = self.samples(max(self.n, self.small))
        bare_files = str(self.bare_mnt / "files")
        res: dict[str, list[tuple[float, list[int]]]] = collections.defaultdict(list)

        # Correctness first (outside any timed loop; these offsets are not reused).
        for _, part, _ in parts:
            self.check_values(part, kfs_take[part](20))

        for r in range(a.rounds):
            log(f"by-offset round {r + 1}/{a.rounds} ({per_loop} files per loop)")
            for label, part, _ in parts:
                offs = kfs_take[part](per_loop)
                p = self.prof.start(self.kfs.pid, f"by-offset-{label}") if (r == 0 and part == self.p_big) else None
                try:
                    res[f"kfs {label}"].append(read_loop([f"{part}/by-offset/{o}" for o in offs]))
                finally:
                    self.prof.stop(p)
                res["bare"].append(read_loop([f"{bare_files}/{o}" for o in bare_take(per_loop)]))
            # Diagnostic: names opened relative to an open by-offset/ directory: what is left
            # without the path walk through <partition>/by-offset (its LOOKUP/GETATTR requests).
            for label, part, _ in parts:
                fd = os.open(f"{part}/by-offset", os.O_RDONLY | os.O_DIRECTORY)
                try:
                    res[f"kfs dirfd {label}"].append(read_loop([str(o) for o in kfs_take[part](diag_loop)], fd))
                finally:
                    os.close(fd)
            fd = os.open(bare_files, os.O_RDONLY | os.O_DIRECTORY)
            try:
                res["bare dirfd"].append(read_loop([str(o) for o in bare_take(diag_loop)], fd))
            finally:
                os.close(fd)

        log(f"by-offset: shell cat loops ({a.shell_reads} files each)")
        shell: dict[str, float] = {}
        lst = self.tmp / "cat-list.txt"
        for label, part, _ in parts:
            shell[f"kfs {label}"] = shell_cat_loop([f"{part}/by-offset/{o}" for o in kfs_take[part](a.shell_reads)], lst)
        shell["bare"] = shell_cat_loop([f"{bare_files}/{o}" for o in bare_take(a.shell_reads)], lst)
        plain_dir = self.tmp / "plain-files"
        plain_dir.mkdir(exist_ok=True)
        for i in range(a.shell_reads):
            (plain_dir / str(i)).write_bytes(self.values[i])
        shell["plain"] = shell_cat_loop([str(plain_dir / str(i)) for i in range(a.shell_reads)], lst)

        log("by-offset: the engine's reads alone")
        reads = self.samples(self.n)  # (the engine's own copy: any offsets are new to it)
        engine_s = [engine_reads(self.engine_dir, reads(per_loop)) for _ in range(a.rounds)]

        t = Table(f"2. random cat by-offset/<o>: open+read+close, distinct files, {per_loop} per loop x {a.rounds} rounds",
                  ("what", "files/s", "p50", "p99", "kfs / bare"))
        bare_rate = med([per_loop / x[0] for x in res["bare"]])
        for label, _, _ in parts:
            self._lookup_row(t, f"kfs  {label} records", res[f"kfs {label}"], per_loop, bare_rate)
        self._lookup_row(t, "bare pyfuse3 small files (ceiling)", res["bare"], per_loop, None)
        engine_rate = med([per_loop / x for x in engine_s])
        t.add(f"engine alone: LogReader.read of {self.n:,} records, no FUSE", fmt_rate(engine_rate), "",
              "", "")
        t.add(f"  kfs / bare at best: bare's requests, then the engine's read "
              f"({1e6 / bare_rate:.0f} + {1e6 / engine_rate:.0f} µs a file)", "", "", "",
              best_ratio(1 / bare_rate, 1 / engine_rate))
        if len(parts) == 2:
            r10 = med([per_loop / x[0] for x in res[f"kfs {parts[0][0]}"]])
            r1m = med([per_loop / x[0] for x in res[f"kfs {parts[1][0]}"]])
            t.add(f"  kfs at {parts[1][0]} / at {parts[0][0]}", "", "", "", ratio(r1m, r10))
        t.sep()
        bare_dirfd = med([diag_loop / x[0] for x in res["bare dirfd"]])
        for label, _, _ in parts:
            self._lookup_row(t, f"diag: kfs {label}, openat(by-offset fd, o)", res[f"kfs dirfd {label}"], diag_loop,
                             bare_dirfd)
        self._lookup_row(t, "diag: bare, openat(files fd, o)", res["bare dirfd"], diag_loop, None)
        t.sep()
        for label, _, _ in parts:
            t.add(f"shell loop of cat: kfs {label}", fmt_rate(shell[f"kfs {label}"]), "", "",
                  ratio(shell[f"kfs {label}"], shell["bare"]))
        t.add("shell loop of cat: bare", fmt_rate(shell["bare"]), "", "", "")
        t.add("shell loop of cat: plain local files", fmt_rate(shell["plain"]), "", "", "")
        kfs_big = med([per_loop / x[0] for x in res[f"kfs {parts[-1][0]}"]])
        t.add(f"goal: kfs {parts[-1][0]} ≥ 0.95× bare -> {'met' if kfs_big >= 0.95 * bare_rate else 'not met'}")
        t.print()
        self.lookup_parts = parts
        self.kfs_take = kfs_take
        self.bare_take = bare_take
        self.per_loop = per_loop

    def _lookup_row(self, t: Table, name: str, runs: list[tuple[float, list[int]]], k: int,
                    base: float | None) -> None:
        rates = [k / x[0] for x in runs]
        lat = sorted(v for _, l in runs for v in l)
        t.add(name, spread(rates), fmt_us(pct(lat, 50)), fmt_us(pct(lat, 99)),
              ratio(med(rates), base) if base else "")

    def bench_by_time(self) -> None:
        """kfs resolves many t to the same record, and a record file read before (section 2,
        an earlier round, earlier in the loop) is in the kernel's cache. bare_fs replays the same
        cold/warm pattern: each kfs record maps to one bare file for the whole run (a fresh one
        the first time it is a target; one read once, untimed, before the loop when the record
        had been read before this section), and the loop reads the bare links in kfs's order."""
        a = self.a
        parts = self.lookup_parts
        per_loop = self.per_loop
        bare_links, bare_files = str(self.bare_mnt / "links"), str(self.bare_mnt / "files")
        res: dict[str, list[tuple[float, list[int]]]] = collections.defaultdict(list)
        distinct: dict[str, list[int]] = collections.defaultdict(list)
        warm: dict[str, list[int]] = collections.defaultdict(list)
        mirror: dict[str, dict[int, int]] = {label: {} for label, _, _ in parts}  # kfs offset -> bare file
        ranges = {}
        for label, part, size in parts:
            seen = self.kfs_read[part]  # by-offset/<o> looked up or read before: counted as cached
            lo = xattr_int(f"{part}/by-offset/0", "user.kafka.timestamp")
            hi = xattr_int(f"{part}/by-offset/{size - 1}", "user.kafka.timestamp")
            seen.update((0, size - 1))
            ranges[label] = (lo, hi)
            # Correctness: the answer is the first record with timestamp >= t.
            for t_ in (lo, (lo + hi) // 2, hi):
                target = os.readlink(f"{part}/by-time/{t_}")
                o = int(target.rsplit("/", 1)[1])
                ts = xattr_int(f"{part}/by-offset/{o}", "user.kafka.timestamp")
                prev = xattr_int(f"{part}/by-offset/{o - 1}", "user.kafka.timestamp") if o else None
                seen.update((o, max(o - 1, 0)))
                if ts < t_ or (prev is not None and prev >= t_):
                    self.fail(f"{part}/by-time/{t_} -> offset {o} (ts {ts}, previous {prev}): not ListOffsets' answer")
            if os.path.lexists(f"{part}/by-time/{hi + 1}"):
                self.fail(f"{part}/by-time/{hi + 1} exists past the last record's timestamp")
        for r in range(a.rounds):
            log(f"by-time round {r + 1}/{a.rounds}")
            for label, part, _ in parts:
                lo, hi = ranges[label]
                span = hi - lo + 1
                if span >= per_loop:  # distinct t
                    ts = self.rng.sample(range(lo, hi + 1), per_loop)
                else:  # fewer ms than lookups: t repeats (by-time entries are never cached)
                    ts = [self.rng.randrange(lo, hi + 1) for _ in range(per_loop)]
                p = self.prof.start(self.kfs.pid, f"by-time-{label}") if (r == 0 and part == self.p_big) else None
                try:
                    res[f"kfs {label}"].append(read_loop([f"{part}/by-time/{t_}" for t_ in ts]))
                finally:
                    self.prof.stop(p)
                offs = [int(os.readlink(f"{part}/by-time/{t_}").rsplit("/", 1)[1]) for t_ in ts]
                seen, m = self.kfs_read[part], mirror[label]
                new = [o for o in dict.fromkeys(offs) if o not in m]
                fresh = self.bare_take(len(new))
                if len(fresh) < len(new):
                    raise RuntimeError("bare_fs has too few files left for by-time")
                m.update(zip(new, fresh))
                read_loop([f"{bare_files}/{m[o]}" for o in new if o in seen])  # warm, untimed
                cached = 0
                for o in offs:
                    cached += o in seen
                    seen.add(o)
                distinct[label].append(len(set(offs)))
                warm[label].append(cached)
                res[f"bare {label}"].append(read_loop([f"{bare_links}/{m[o]}" for o in offs]))
        t = Table(f"3. random cat by-time/<t>: random t (distinct where the range allows), {per_loop} per loop "
                  f"x {a.rounds} rounds (bare: symlinks, same cold/warm pattern)",
                  ("what", "files/s", "p50", "p99", "kfs / bare"))
        for label, _, _ in parts:
            bare_rate = med([len(x[1]) / x[0] for x in res[f"bare {label}"]])
            lo, hi = ranges[label]
            self._lookup_row(t, f"kfs  {label} records", res[f"kfs {label}"], len(res[f"kfs {label}"][0][1]), bare_rate)
            self._lookup_row(t, "bare, same pattern", res[f"bare {label}"], len(res[f"bare {label}"][0][1]), None)
            t.add(f"  ({hi - lo + 1} ms of timestamps; distinct targets per loop: "
                  f"{', '.join(map(str, distinct[label]))}; reads of a record read before (cached, both "
                  f"sides): {', '.join(f'{100 * c / per_loop:.0f}%' for c in warm[label])})")
        t.print()

    # ---- 4. decode + final checks

    def finish(self) -> None:
        a = self.a
        log("unmounting kfs; reopening the engine")
        self.mounts.stop(self.kfs)
        self.kfs = None
        try:
            from storage import LogManager
            mgr = LogManager(self.backing, read_only=True)
            try:
                leo = mgr.get(f"{DATA_TOPIC}-0").log_end_offset
                small = mgr.get(f"{DATA_TOPIC}-1").log_end_offset
            finally:
                mgr.close()
            ok = leo == self.n and small == self.small
            print(f"\nreopened engine after unmount: {DATA_TOPIC}-0 log end offset {leo:,} (expected {self.n:,}), "
                  f"{DATA_TOPIC}-1 {small:,} (expected {self.small:,}) -> {'ok' if ok else 'MISMATCH'}")
            if not ok:
                self.fail("record counts after reopening the engine differ")
        except Exception as exc:  # noqa: BLE001
            self.fail(f"reopening the engine failed: {type(exc).__name__}: {exc}")

        part_dir = self.backing / f"{DATA_TOPIC}-0"
        logs = sorted(part_dir.glob("*.log"))
        bufs = [p.read_bytes() for p in logs]
        nbytes = sum(map(len, bufs))
        from kafka.record.default_records import DefaultRecordBatch as KpBatch
        aio_batch, aio_why = aiokafka_batch()
        decoders: dict[str, Callable[[bytes, bool], int] | None] = {
            "engine": engine_decode,
            "aiokafka": (lambda b, crc: lib_decode(aio_batch, b, crc)) if aio_batch else None,
            "kafka-python": lambda b, crc: lib_decode(KpBatch, b, crc),
        }
        why = {"engine": "", "aiokafka": aio_why, "kafka-python": ""}
        times: dict[tuple[str, bool], list[float]] = collections.defaultdict(list)
        for dec in decoders.values():  # imports (pyarrow) and first calls, untimed
            try:
                dec and dec(bufs[0][:1 << 16], True)
            except Exception:  # noqa: BLE001 - reported by the timed rounds
                pass
        for r in range(a.codec_rounds):  # interleaved: every decoder, with and without CRC, per round
            log(f"decode round {r + 1}/{a.codec_rounds}")
            for crc in (False, True):
                for who, dec in decoders.items():
                    if dec is None:
                        continue
                    try:
                        dt, n = timed(lambda: sum(dec(b, crc) for b in bufs))
                    except Exception as exc:  # noqa: BLE001 - the engine may be mid-rewrite
                        why[who], decoders[who] = f"n/a ({type(exc).__name__}: {exc})", None
                        continue
                    times[who, crc].append(dt)
                    if n != self.n:
                        self.fail(f"decode: {who} found {n:,} records in {DATA_TOPIC}-0's .log files, "
                                  f"expected {self.n:,}")
        if decoders["engine"] is not None:
            self.check_decoded_values(bufs)
        t = Table(f"4. decode {DATA_TOPIC}-0: {len(logs)} .log file(s), {nbytes / 1e6:.0f} MB, {self.n:,} records, "
                  f"offset/timestamp/key/value of each read (medians of {a.codec_rounds})",
                  ("what", "records/s", "MB/s", "engine / it"))
        names = {"engine": "engine decode into columns", "aiokafka": "aiokafka DefaultRecordBatch (C)",
                 "kafka-python": "kafka-python DefaultRecordBatch"}
        rate = {}
        for crc in (False, True):
            for who in names:
                xs = times[who, crc]
                if not xs:
                    t.add(names[who] + (" + CRC check" if crc else ""), why[who] or "n/a")
                    continue
                rate[who, crc] = med([self.n / x for x in xs])
                t.add(names[who] + (" + CRC check" if crc else ""), spread([self.n / x for x in xs]),
                      f"{med([nbytes / x / 1e6 for x in xs]):.0f}",
                      ratio(rate["engine", crc], rate[who, crc]) if who != "engine" and ("engine", crc) in rate else "")
            t.sep()
        for crc in (False, True):
            if ("engine", crc) not in rate:
                continue
            met = [rate["engine", crc] >= k * rate[who, crc]
                   for who, k in (("aiokafka", 2), ("kafka-python", 10)) if (who, crc) in rate]
            t.add(f"target{' (CRC checked)' if crc else ''}: engine ≥ 2× aiokafka and ≥ 10× "
                  f"kafka-python -> {'met' if met and all(met) else 'not met'}")
        t.print()

    def check_decoded_values(self, bufs: list[bytes]) -> None:
        """Every value the engine decodes equals the line appended at that offset."""
        from storage.records import RecordBatch
        for buf in bufs:
            pos = 0
            while pos + 61 <= len(buf):
                batch = RecordBatch(buf, pos)
                for rec in batch.records():
                    if rec.offset >= self.n or bytes(rec.value) != self.values[rec.offset]:
                        self.fail(f"decoded record {rec.offset} differs from the line appended")
                        return
                pos += batch.size_in_bytes

    # ---- 5. verify

    def bench_verify(self) -> None:
        """``kfs verify`` (the command, and in process when kfs.tools.verify's API allows) against the
        ceiling: read + CRC-32C of the same .log bytes (crc_ceiling.py, in process and as a
        command, so each kfs figure has a ceiling run the same way), and in process against the
        CRC-32C of each batch's CRC range, the CRC work the format requires."""
        a = self.a
        from crc_ceiling import batch_plan, read_crc, read_crc_batches
        logs = sorted(str(p) for p in self.backing.glob("*/*.log"))
        plans = {p: batch_plan(p) for p in logs}
        nbytes = sum(os.path.getsize(p) for p in logs)
        kfs_exe = Path(sys.executable).with_name("kfs")
        env = dict(os.environ, PYTHONPATH=str(REPO))
        runs: dict[str, Callable[[], Any]] = {
            "kfs verify, the command": lambda: subprocess.run(
                [str(kfs_exe), "verify", str(self.backing)] if kfs_exe.exists()
                else [sys.executable, "-m", "kfs", "verify", str(self.backing)],
                capture_output=True, text=True, env=env),
            "ceiling: read + CRC-32C, a command": lambda: subprocess.run(
                [sys.executable, str(Path(__file__).with_name("crc_ceiling.py")), *logs],
                capture_output=True, text=True, check=True),
            "ceiling: read + CRC-32C, in process": lambda: read_crc(logs),
            "ceiling: same, batch by batch, in process": lambda: read_crc_batches(plans),
        }
        try:
            from kfs.tools import verify
            parts = verify.find_partitions(self.backing)
            runs["kfs verify, in process"] = lambda: [i for i in verify.verify_partitions(parts)
                                                      if isinstance(i, verify.Problem)]
        except Exception as exc:  # noqa: BLE001 - an API the command no longer has
            print(f"note: kfs verify in process: n/a ({type(exc).__name__}: {exc})")
        times: dict[str, list[float]] = collections.defaultdict(list)
        out: dict[str, Any] = {}
        for r in range(a.codec_rounds):
            log(f"verify round {r + 1}/{a.codec_rounds}")
            for name, fn in runs.items():
                dt, out[name] = timed(fn)
                times[name].append(dt)
        cmd = out["kfs verify, the command"]
        if cmd.returncode != 0 or out.get("kfs verify, in process"):
            self.fail(f"kfs verify found problems in the benchmark's own data: exit status {cmd.returncode}, "
                      f"{cmd.stdout[-300:]!r} {[str(x) for x in out.get('kfs verify, in process', [])[:3]]}")
        if int(out["ceiling: read + CRC-32C, a command"].stdout) != nbytes:
            self.fail("crc_ceiling.py read another number of bytes than the .log files hold")
        if out["ceiling: same, batch by batch, in process"] != nbytes:
            self.fail("read_crc_batches read another number of bytes than the .log files hold")
        mb = {name: [nbytes / x / 1e6 for x in xs] for name, xs in times.items()}
        t = Table(f"5. verify {len({Path(p).parent for p in logs})} partitions: {len(logs)} .log file(s), {nbytes / 1e6:.0f} MB "
                  f"(medians of {a.codec_rounds})", ("what", "MB/s", "kfs / ceiling"))
        batch_ceil = "ceiling: same, batch by batch, in process"
        for how in ("the command", "in process"):
            name, ceil = f"kfs verify, {how}", f"ceiling: read + CRC-32C, {'a command' if how == 'the command' else how}"
            if name in mb:
                t.add(name, spread(mb[name], lambda x: f"{x:.0f}"), ratio(med(mb[name]), med(mb[ceil])))
                if how == "in process":
                    t.add("", "", f"{ratio(med(mb[name]), med(mb[batch_ceil]))} of the batch-by-batch CRC")
            t.add(ceil, spread(mb[ceil], lambda x: f"{x:.0f}"), "")
        t.add(batch_ceil, spread(mb[batch_ceil], lambda x: f"{x:.0f}"), "")
        t.print()

    def run(self) -> int:
        try:
            self.setup()
            self.bench_append()
            self.bench_lookups()
            self.bench_by_time()
            self.finish()
            self.bench_verify()
        finally:
            self.mounts.close()
        if self.a.streams:
            import bench_streams  # its own mounts and partitions

            big = 10 * self.n if not self.a.quick else 100_000
            bench_streams.run(self.n, big, self.a.rounds, 100 if not self.a.quick else 10)
        self.prof.print()
        if self.failures:
            print(f"\n{len(self.failures)} check(s) FAILED:")
            for f in self.failures:
                print(f"  - {f}")
            return 1
        return 0


def main(argv: list[str] | None = None) -> int:
    from needs import require

    require("bench.py", "kafka")
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=1_000_000, help="records in the big partition (default 1M)")
    p.add_argument("--quick", action="store_true", help="10k records, fewer reads (for development)")
    p.add_argument("--small", type=int, default=10_000, help="records in the small partition (default 10k)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of each mount measurement")
    p.add_argument("--codec-rounds", type=int, default=3, help="rounds of each codec measurement")
    p.add_argument("--reads", type=int, default=2000, help="files per Python read loop")
    p.add_argument("--shell-reads", type=int, default=300, help="files per shell cat loop")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profile", action="store_true", help="py-spy the kfs process during append and lookups")
    p.add_argument("--keep", action="store_true", help="keep the temp dir (backing data, logs, profiles)")
    p.add_argument("--streams", action=argparse.BooleanOptionalAction, default=True,
                   help="also the stream-file figures (bench_streams.py: cat/grep/jq, tail -n "
                        "on 10x the records, ls -l, tail -f latency)")
    args = p.parse_args(argv)
    if args.quick:
        args.records = 10_000
        args.reads = min(args.reads, 1000)
        args.shell_reads = min(args.shell_reads, 100)
    if args.records < 100:
        p.error("--records must be at least 100")

    # SIGTERM -> KeyboardInterrupt, so the finally blocks unmount everything.
    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored

    for line in machine_info():
        print(line)
    print(f"records: {args.records:,} x {LINE} B lines; small partition {min(args.small, args.records):,}; "
          f"rounds {args.rounds}; reads/loop {args.reads}; shell reads {args.shell_reads}")
    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-", dir="/tmp"))
    print(f"temp dir: {tmp}")
    sys.stdout.flush()
    t0 = time.perf_counter()
    status = 1
    try:
        status = Bench(args, tmp).run()
    except KeyboardInterrupt:
        print("\ninterrupted; everything unmounted", file=sys.stderr)
        status = 130
    finally:
        still = [p for p in tmp.iterdir() if os.path.ismount(p)]
        if args.keep or still:
            print(f"kept {tmp}" + (f" (still mounted: {', '.join(map(str, still))})" if still else ""))
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    return status


if __name__ == "__main__":
    sys.exit(main())
