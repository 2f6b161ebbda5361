"""A model-based test of the mount: hypothesis drives a real FUSE mount with random sequences of
``mkdir``, appends through ``append``, ``append-keyed`` and ``append-batches`` (valid and invalid
input; lines and batches split across ``write()`` calls, open files held across steps), reads
(``cat`` by offset and by time, ``ls``, the ``values``/``records.jsonl``/``from/`` streams),
retention by size and by time, clean remounts and ``kill -9`` of the serving process, and after
every step compares what the mount serves with an in-memory model of the partitions.

The model holds what was acknowledged: the lines of a ``write()`` that returned (a trailing
partial line: when its ``close()`` returned), the batches of an accepted ``append-batches``
write. A refused write stores nothing (docs/writing.md: "Each write() is stored all-or-nothing").

Retention runs in the mount's background, so the model does not predict the log start offset:
it reads it (``user.kafka.logStartOffset``) and checks that it only moves forward and only as
far as the topic allows (``retention.bytes``: at least the limit stays; ``retention.ms``: never
past a record younger than the limit; no retention: never). Every read is taken between two
readings of the log start offset and retried until they agree: without appends a retention
pass leaves nothing more to delete, so they soon do.

CI runs ``KFS_MODEL_EXAMPLES`` examples (default 6) of up to ``KFS_MODEL_STEPS`` steps
(default 30); ``scripts/model-soak.sh MINUTES`` runs it for as long as asked.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.mounts import Mounter, is_mounted
from helpers.shell import sh
from helpers.waits import POLL_S, Deadline, Lines, wait_for_exit, wait_until
from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

EXAMPLES = int(os.environ.get("KFS_MODEL_EXAMPLES", "6"))
STEPS = int(os.environ.get("KFS_MODEL_STEPS", "30"))
# The suite's runs are seed-stable (hypothesis derandomized: the same examples on every
# machine, so a failure replays as it happened, not as "flaky"); the soak
# (scripts/model-soak.sh) sets KFS_MODEL_RANDOM=1 to explore new ones each run.
RANDOM = os.environ.get("KFS_MODEL_RANDOM") == "1"

SEGMENT_BYTES = 1024
RETENTION_BYTES = 2048
RETENTION_MS = 3_600_000
OLD_MS = 2 * RETENTION_MS  # how far back an "old" batch is stamped: past retention.ms
SERVER_PROPERTIES = "log.retention.check.interval.ms=200\n"
TOPIC_PROPERTIES = {
    # no retention, dense indexes (by-time and by-offset go through many index entries)
    "plain": "segment.bytes=4096\nindex.interval.bytes=64\n",
    # retention by size, compressed
    "kept": f"segment.bytes={SEGMENT_BYTES}\nretention.bytes={RETENTION_BYTES}\n"
            "file.delete.delay.ms=0\ncompression.type=lz4\n",
    # retention by time: batches stamped OLD_MS ago expire at the next check
    "aged": f"segment.bytes={SEGMENT_BYTES}\nretention.ms={RETENTION_MS}\nfile.delete.delay.ms=0\n",
}
PARTITIONS = ("plain-0", "plain-1", "kept-0", "aged-0")
BAD_NAMES = ("plain", "bad name-0", "..-0")
KIND = ("append", "append-keyed", "append-batches")
MAX_HANDLES = 3
# Ordinary lines are under 60 bytes; a big one is past every topic's largest batch
# (min(max.message.bytes, segment.bytes)), so EFBIG. A piece of one (a line cut short by a
# close) between FITS and BIG may be either: its batch's size depends on overhead and codec.
BIG = b"big" * 1700
FITS = 700
SETTLE_TRIES = 200
HANG_S = 300  # ends a hung wait only: the conditions waited for come within a few checks

BYTE = st.sampled_from([b"a", b"b", b"z", b"0", b" ", b"%", b"\\", b"'", b'"', b"\r",
                        "\u00e9".encode(), b"\xff"])
KEY = st.lists(BYTE, max_size=6).map(b"".join)
TEXT = st.lists(st.one_of(BYTE, st.just(b"\t")), max_size=24).map(b"".join)  # a value may hold tabs


# The append files stay open in this process, which never forks: the kernel sends FUSE a flush
# on every close of a descriptor, the close-on-exec ones of a forked child included, and a
# flush stores the pending partial line (kfs/mount/append_files.py). The test itself spawns shells.
FD_HOLDER = r"""
import base64, json, os, sys
for line in sys.stdin:
    op, *args = json.loads(line)
    try:
        if op == "open":
            out = os.open(args[0], os.O_WRONLY | os.O_APPEND)
        elif op == "write":
            out = os.write(args[0], base64.b64decode(args[1]))
        else:
            out = os.close(args[0])
        reply = [out, 0]
    except OSError as exc:
        reply = [None, exc.errno]
    print(json.dumps(reply), flush=True)
"""


class FdHolder:
    """open/write/close of append files, done by the FD_HOLDER process; OSError as there."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", FD_HOLDER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.replies = Lines(self.proc.stdout, "the descriptor holder", self.proc)

    def _call(self, *request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        reply = self.replies.readline(timeout=HANG_S)
        assert reply, f"the descriptor holder ended ({self.proc.poll()}) instead of replying"
        out, code = json.loads(reply)
        if code:
            raise OSError(code, os.strerror(code))
        return out

    def open(self, path: Path) -> int:
        return self._call("open", os.fspath(path))

    def write(self, fd: int, data: bytes) -> int:
        return self._call("write", fd, base64.b64encode(data).decode())

    def close(self, fd: int) -> None:
        self._call("close", fd)

    def stop(self) -> None:
        """Ends the process: the kernel closes what it still holds."""
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# Draws whose choices depend on the clock or on where retention moved the log start: from a
# fixed range, reduced to the choices at hand (hypothesis needs a draw's bounds to depend on
# earlier draws only).
ANY = st.integers(0, 1 << 20)


def pick(data, choices: list, label: str):
    return choices[data.draw(ANY, label=label) % len(choices)]


def between(data, low: int, high: int, label: str) -> int:
    return low + data.draw(ANY, label=label) % (high - low + 1)


def strerror(code: int) -> bytes:
    return os.strerror(code).encode()


# --------------------------------------------------------------------------- the model


@dataclass
class Stamp:
    """The timestamp of one append (all its records share it): between ``lo`` and ``hi``,
    learned exactly from the mount the first time one of its records is read."""

    lo: int
    hi: int
    ts: int | None = None


@dataclass
class Rec:
    key: bytes | None
    value: bytes | None
    stamp: Stamp
    headers: tuple[tuple[str, bytes], ...] = ()

    @property
    def ts(self) -> int | None:
        return self.stamp.ts


@dataclass
class Part:
    name: str
    records: list[Rec | None] = field(default_factory=list)  # at offset = index; None: a
    # record a salvage cut (a batch damaged while the mount was down: an offset gap)
    start: int = 0
    crashed: bool = False  # the next reading may find the start lower (see observe_start)

    @property
    def topic(self) -> str:
        return self.name.rsplit("-", 1)[0]

    @property
    def leo(self) -> int:
        return len(self.records)

    def max_start(self) -> int:
        """How far retention may have moved the log start offset."""
        if self.topic == "kept":
            return self.leo
        if self.topic == "aged":  # never past a record younger than retention.ms
            young = now_ms() - RETENTION_MS
            return next((o for o in range(self.start, self.leo)
                         if self.records[o] is not None and
                         (self.records[o].ts is None or self.records[o].ts >= young)), self.leo)
        return 0

    def first_at(self, start: int, t: int) -> int | None:
        """ListOffsets: the first offset from ``start`` stamped ``t`` or later."""
        return next((o for o in range(start, self.leo)
                     if self.records[o] is not None and self.records[o].ts >= t), None)

    def present(self, start: int) -> list[tuple[int, Rec]]:
        """(offset, record) of the records from ``start`` that are there (not cut)."""
        return [(o, r) for o, r in enumerate(self.records[start:], start) if r is not None]


@dataclass
class Planned:
    """A batch written to an ``append-batches`` file: its records, None when it is corrupt."""

    data: bytes
    records: list[Rec] | None


@dataclass
class Handle:
    """An open append file. ``unsent``: bytes planned but not written yet (written in pieces by
    later steps). ``pending``: what the mount holds of it, a partial line or batch bytes."""

    fd: int
    part: str
    kind: str
    unsent: bytearray = field(default_factory=bytearray)
    pending: bytes = b""
    abandoned: bool = False
    abandon_errno: int = 0
    planned: deque = field(default_factory=deque)

    def abandon(self, chunk: bytes, code: int) -> None:
        """The mount's rule (kfs.mount.append): a failed write drops the partial line or batch, and
        for lines, unless the chunk ended one, the rest of the line (later writes refused until
        a refused chunk ends with a newline); a batch stream never resynchronises."""
        self.pending = b""
        self.planned.clear()
        self.abandoned = self.kind == "append-batches" or not chunk.endswith(b"\n")
        self.abandon_errno = code


def line_record(line: bytes, keyed: bool, stamp: Stamp) -> Rec | int:
    """The record a line stores, or the errno refusing it."""
    if keyed:
        key, sep, value = line.partition(b"\t")
        if not sep:
            return errno.EINVAL
    else:
        key, value = None, line
    if len(line) >= len(BIG):  # (never a line without separator too)
        return errno.EFBIG
    return Rec(key, value, stamp)


@dataclass
class Outcome:
    """What the mount may answer to a write (or a close storing a partial line)."""

    codes: set[int]  # one of these refuses it; empty: it is stored...
    records: list[Rec]
    maybe_big: bool  # ...unless it is refused with EFBIG (a line between FITS and BIG)

    def stored(self, got: int | None) -> bool:
        """Whether the write was stored, once ``got`` (its errno or None) is checked."""
        if self.codes:
            assert got in self.codes | ({errno.EFBIG} if self.maybe_big else set()), (got, self)
            return False
        if self.maybe_big and got == errno.EFBIG:
            return False
        assert got is None, (got, self)
        return True


def lines_outcome(lines: list[bytes], keyed: bool, stamp: Stamp) -> Outcome:
    outcome = [line_record(line, keyed, stamp) for line in lines]
    codes = {x for x in outcome if isinstance(x, int)}
    return Outcome(codes, [] if codes else outcome, any(FITS < len(x) < len(BIG) for x in lines))


def producer_batch(records: list[Rec]) -> bytes:
    """A v2 batch as a non-idempotent producer builds it (kafka-python, independent of kfs)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 20)
    for i, r in enumerate(records):
        builder.append(i, timestamp=r.ts, key=r.key, value=r.value, headers=list(r.headers))
    return bytes(builder.build())


def decoded(field_value) -> bytes | None:
    """A key or payload of records.jsonl as bytes (strings are UTF-8, others base64)."""
    if field_value is None or isinstance(field_value, str):
        return None if field_value is None else field_value.encode()
    return base64.b64decode(field_value["base64"])


@st.composite
def batch_records(draw, old: bool) -> list[Rec]:
    """1-4 records of one producer batch, stamped now (or OLD_MS ago)."""
    ts = now_ms() - (OLD_MS if old else 0)
    out = []
    for i in range(draw(st.integers(1, 4))):
        key = draw(st.one_of(st.none(), KEY))
        value = draw(st.one_of(st.none(), TEXT))
        headers = draw(st.sampled_from([(), (("h", b"1"),), (("h", b"1"), ("h2", b""))]))
        out.append(Rec(key, value, Stamp(ts + i, ts + i, ts + i), headers))
    return out


# --------------------------------------------------------------------------- the machine


class MountModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="kfs-model-"))
        self.backing = self.tmp / "data"
        self.backing.mkdir()
        (self.backing / "server.properties").write_text(SERVER_PROPERTIES)
        for topic, props in TOPIC_PROPERTIES.items():
            (self.backing / f"{topic}.topic.properties").write_text(props)
        self.mounter = Mounter(self.tmp)
        self.parts: dict[str, Part] = {}
        self.handles: list[Handle] = []
        self.stale_reads = 0
        self.fds = FdHolder()
        try:
            self.m = self.mounter(self.backing)
        except BaseException:
            self._cleanup()
            raise

    # ---- helpers

    def pdir(self, name: str) -> Path:
        return self.m.path / name

    def xattr(self, name: str, attr: str) -> int:
        return int(os.getxattr(self.pdir(name), f"user.kafka.{attr}"))

    def observe_start(self, name: str) -> int:
        """Read the log start offset and check it against what retention may do."""
        p = self.parts[name]
        start = self.xattr(name, "logStartOffset")
        if start < p.start:
            # A kill -9 between a retention pass moving the start and renaming its segments
            # leaves them on disk: they load again, as in Kafka (never data lost).
            assert p.crashed, (name, start, p.start)
            note(f"{name}: log start {p.start} -> {start} after kill -9")
            event("log start offset lower after kill -9")
        else:
            assert start <= p.max_start(), (name, start, p.start, p.max_start())
        if p.topic == "kept" and start > 0:
            assert self.xattr(name, "sizeInBytes") >= RETENTION_BYTES, name
        if start > p.start:
            event(f"retention moved the log start of {p.topic}")
        p.start, p.crashed = start, False
        return start

    def settled(self, name: str, read):
        """``(start, read())`` with the log start offset the same before and after the read."""
        for _ in range(SETTLE_TRIES):
            before = self.observe_start(name)
            result = read()
            if self.observe_start(name) == before:
                return before, result
        raise AssertionError(f"{name}: the log start offset never settled")

    def learn(self, rec: Rec, ts: int) -> None:
        """A record's timestamp as the mount serves it: within its append's window, the same
        for every record of one append."""
        if rec.stamp.ts is None:
            assert rec.stamp.lo <= ts <= rec.stamp.hi, (ts, rec.stamp)
            rec.stamp.ts = ts
        assert ts == rec.stamp.ts, (ts, rec.stamp)

    def store(self, name: str, records: list[Rec]) -> None:
        self.parts[name].records.extend(records)

    def line_parts(self) -> list[str]:
        """Partitions lines may go to: not ``aged`` (records stamped now would stop its
        retention for an hour)."""
        return [n for n in sorted(self.parts) if not n.startswith("aged")]

    def read_or_errno(self, fn):
        try:
            return fn()
        except OSError as exc:
            return exc.errno

    # ---- the check after every step

    @invariant()
    def mount_matches_model(self) -> None:
        assert sorted(os.listdir(self.m.path)) == sorted(self.parts)
        for name in sorted(self.parts):
            self.check_partition(name)

    def check_partition(self, name: str) -> None:
        p = self.parts[name]
        assert self.xattr(name, "logEndOffset") == p.leo, name
        d = self.pdir(name)
        start, (listed, values, jsonl) = self.settled(name, lambda: (
            [int(n) for n in os.listdir(d / "by-offset")],
            (d / "values").read_bytes(), (d / "records.jsonl").read_bytes()))
        kept = [r for _, r in p.present(start)]
        assert listed == [o for o, _ in p.present(start)], name
        assert values == b"".join((b"null" if r.value is None else r.value) + b"\n" for r in kept)
        lines = [json.loads(line) for line in jsonl.splitlines()]
        assert [x["offset"] for x in lines] == [o for o, _ in p.present(start)], name
        for x, r in zip(lines, kept):
            assert (x["topic"], x["partition"], x["tstype"]) == (p.topic, int(name.rsplit("-", 1)[1]), "create")
            assert (decoded(x["key"]), decoded(x["payload"])) == (r.key, r.value), (name, x)
            assert x["headers"] == [s for k, v in r.headers for s in (k, v.decode())], (name, x)
            self.learn(r, x["ts"])

    # ---- partitions

    @initialize(names=st.lists(st.sampled_from(PARTITIONS), min_size=1, unique=True))
    def first_partitions(self, names: list[str]) -> None:
        """Some partitions from the start (so that rules reading them can run); the others
        come by the mkdir rule."""
        for name in names:
            self.mkdir(name)

    @rule(name=st.sampled_from(PARTITIONS + BAD_NAMES))
    def mkdir(self, name: str) -> None:
        res = sh(f"mkdir -- {shlex.quote(name)}", self.m.path, check=False)
        if name in BAD_NAMES:
            assert res.returncode != 0 and strerror(errno.EINVAL) in res.stderr, res
        elif name in self.parts:
            assert res.returncode != 0 and strerror(errno.EEXIST) in res.stderr, res
        else:
            assert res.returncode == 0, res
            self.parts[name] = Part(name)

    # ---- appends from the shell: printf for lines, cat for one write() of a file

    @rule(name=st.sampled_from([n for n in PARTITIONS if not n.startswith("aged")]),
          lines=st.lists(TEXT, min_size=1, max_size=6), partial=st.booleans())
    def printf_lines(self, name: str, lines: list[bytes], partial: bool) -> None:
        """bash's printf writes line by line: every line is stored, each stamped on its own;
        a last line without newline is stored at close."""
        partial = partial and lines[-1] != b""  # (an empty partial line is no line)
        fmt = "%s\\n" * (len(lines) - partial) + "%s" * partial
        args = " ".join(shlex.quote(os.fsdecode(line)) for line in lines)
        lo = now_ms()
        res = sh(f"printf '{fmt}' {args} >> {name}/append", self.m.path, check=False)
        hi = now_ms()
        if name not in self.parts:
            assert res.returncode != 0 and strerror(errno.ENOENT) in res.stderr, res
            return
        assert res.returncode == 0, res
        self.store(name, [Rec(None, line, Stamp(lo, hi)) for line in lines])

    @precondition(lambda self: self.line_parts())
    @rule(data=st.data(), bad=st.booleans())
    def cat_keyed_lines(self, data, bad: bool) -> None:
        """One write() of keyed lines: a line without the separator refuses all of them."""
        name = data.draw(st.sampled_from(self.line_parts()), label="partition")
        lines = [k + b"\t" + v for k, v in data.draw(st.lists(st.tuples(KEY, TEXT), min_size=1, max_size=6))]
        if bad:
            lines.insert(data.draw(st.integers(0, len(lines))), data.draw(KEY))
        src = self.tmp / "keyed.txt"
        src.write_bytes(b"".join(line + b"\n" for line in lines))
        stamp = Stamp(now_ms(), 0)
        res = sh(f"cat {src} >> {name}/append-keyed", self.m.path, check=False)
        stamp.hi = now_ms()
        outcome = lines_outcome(lines, True, stamp)
        if outcome.codes:
            assert res.returncode != 0 and strerror(errno.EINVAL) in res.stderr, res
        else:
            assert res.returncode == 0, res
            self.store(name, outcome.records)

    @precondition(lambda self: self.parts)
    @rule(data=st.data(), corrupt=st.booleans())
    def cat_batches(self, data, corrupt: bool) -> None:
        """One write() of producer batches: a corrupt one refuses all of them."""
        name = data.draw(st.sampled_from(sorted(self.parts)), label="partition")
        batches = data.draw(st.lists(batch_records(name.startswith("aged")), min_size=1, max_size=3))
        raw = [producer_batch(b) for b in batches]
        if corrupt:
            i = data.draw(st.integers(0, len(raw) - 1))
            raw[i] = raw[i][:-1] + bytes([raw[i][-1] ^ 0x55])  # a record byte: the CRC fails
        src = self.tmp / "batches.bin"
        src.write_bytes(b"".join(raw))
        res = sh(f"cat {src} >> {name}/append-batches", self.m.path, check=False)
        if corrupt:
            assert res.returncode != 0 and strerror(errno.EINVAL) in res.stderr, res
        else:
            assert res.returncode == 0, res
            self.store(name, [r for b in batches for r in b])

    # ---- appends from Python: exact write() boundaries, files open across steps

    @precondition(lambda self: self.parts and len(self.handles) < MAX_HANDLES)
    @rule(data=st.data(), kind=st.sampled_from(KIND))
    def open_append_file(self, data, kind: str) -> None:
        names = sorted(self.parts) if kind == "append-batches" else self.line_parts()
        if not names:
            return
        name = data.draw(st.sampled_from(names), label="partition")
        fd = self.fds.open(self.pdir(name) / kind)
        self.handles.append(Handle(fd, name, kind))
        for _ in range(data.draw(st.integers(0, 2), label="writes")):
            self.write_next(data, self.handles[-1])

    def plan(self, data, h: Handle) -> bytes:
        """More bytes for ``h``: lines (some without separator, some too big) or batches
        (some corrupt, some with a bad batchLength)."""
        if h.kind != "append-batches":
            keyed = h.kind == "append-keyed"
            good = st.tuples(KEY, TEXT).map(lambda kv: kv[0] + b"\t" + kv[1]) if keyed else TEXT
            big = st.just(b"k\t" + BIG if keyed else BIG)
            line = st.one_of(good, good, good, KEY if keyed else good, big)
            return b"".join(x + b"\n" for x in data.draw(st.lists(line, min_size=1, max_size=5)))
        out = b""
        for _ in range(data.draw(st.integers(1, 3))):
            what = data.draw(st.sampled_from(["batch"] * 6 + ["corrupt", "garbage"]))
            if what == "garbage":  # batchLength below a batch header, or past any limit
                size = data.draw(st.sampled_from([3, 0x7FFFFFFF]))
                item = Planned(bytes(8) + size.to_bytes(4, "big") + b"junk", None)
            else:
                records = data.draw(batch_records(h.part.startswith("aged") and data.draw(
                    st.integers(0, 9)) > 0), label="records")
                raw = producer_batch(records)
                if what == "corrupt":
                    raw = raw[:-1] + bytes([raw[-1] ^ 0x55])
                item = Planned(raw, None if what == "corrupt" else records)
            h.planned.append(item)
            out += item.data
        return out

    def model_write(self, h: Handle, chunk: bytes, stamp: Stamp) -> tuple[Outcome, bytes]:
        """What the mount may answer to ``chunk`` on ``h``, and what it then holds pending."""
        if h.abandoned:
            return Outcome({h.abandon_errno}, [], False), b""
        if h.kind != "append-batches":
            if b"\n" not in chunk:
                return Outcome(set(), [], False), h.pending + chunk
            last = chunk.rindex(b"\n") + 1
            lines = (h.pending + chunk[:last]).split(b"\n")[:-1]
            return lines_outcome(lines, h.kind == "append-keyed", stamp), chunk[last:]
        buf, end, done = h.pending + chunk, 0, []
        while len(buf) - end >= 12:  # Kafka's framing: 8 bytes offset, 4 bytes batchLength
            size = 12 + int.from_bytes(buf[end + 8:end + 12], "big", signed=True)
            if size < 12 + 14 or size > 1048588 + 12:
                return Outcome({errno.EINVAL}, [], False), b""
            if len(buf) - end < size:
                break
            item = h.planned.popleft()
            assert item.data == buf[end:end + size]
            done.append(item)
            end += size
        if any(item.records is None for item in done):
            return Outcome({errno.EINVAL}, [], False), b""
        return Outcome(set(), [r for item in done for r in item.records], False), buf[end:]

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def write_pieces(self, data) -> None:
        """write() the next pieces of an open file's planned bytes: lines and batches end up
        split anywhere, across steps and across other steps' appends."""
        h = data.draw(st.sampled_from(self.handles), label="handle")
        for _ in range(data.draw(st.integers(1, 3), label="writes")):
            self.write_next(data, h)

    def write_next(self, data, h: Handle) -> None:
        if not h.unsent or data.draw(st.booleans(), label="plan more"):
            h.unsent += self.plan(data, h)
        n = data.draw(st.integers(1, len(h.unsent)), label="bytes")
        chunk = bytes(h.unsent[:n])
        del h.unsent[:n]
        stamp = Stamp(now_ms(), 0)
        try:
            assert self.fds.write(h.fd, chunk) == len(chunk)
            got = None
        except OSError as exc:
            got = exc.errno
        stamp.hi = now_ms()
        outcome, pending = self.model_write(h, chunk, stamp)
        event(f"write to {h.kind}: {errno.errorcode[got] if got else 'stored'}"
              f"{' (continuing a refused one)' if h.abandoned else ''}")
        if outcome.stored(got):
            h.pending = pending
            self.store(h.part, outcome.records)
        else:
            h.abandon(chunk, got)

    def close_handle(self, h: Handle) -> None:
        """close(): a partial line is stored (or refused: its errno reaches close); a partial
        batch is refused."""
        stamp = Stamp(now_ms(), 0)
        try:
            self.fds.close(h.fd)
            got = None
        except OSError as exc:
            got = exc.errno
        stamp.hi = now_ms()
        self.handles.remove(h)
        event(f"close of {h.kind}: {errno.errorcode[got] if got else 'ok'}")
        if h.abandoned or not h.pending:
            assert got is None, got
        elif h.kind == "append-batches":
            assert got == errno.EINVAL, got
        else:
            outcome = lines_outcome([h.pending], h.kind == "append-keyed", stamp)
            if outcome.stored(got):
                self.store(h.part, outcome.records)

    @precondition(lambda self: self.handles)
    @rule(data=st.data())
    def close_append_file(self, data) -> None:
        self.close_handle(data.draw(st.sampled_from(self.handles), label="handle"))

    # ---- reads from the shell

    @precondition(lambda self: self.parts)
    @rule(data=st.data())
    def cat_by_offset(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.parts)), label="partition")
        p = self.parts[name]
        offset = between(data, max(p.start - 2, 0), p.leo + 1, "offset")
        path = self.pdir(name) / "by-offset" / str(offset)

        def read():
            res = sh(f"cat {name}/by-offset/{offset}", self.m.path, check=False)
            key = self.read_or_errno(lambda: os.getxattr(path, "user.kafka.key"))
            return res, key

        start, (res, key) = self.settled(name, read)
        if offset < p.leo and p.records[offset] is None:  # cut by a salvage
            assert res.returncode != 0 and strerror(errno.ENOENT) in res.stderr, res
        elif start <= offset < p.leo or (offset < start and res.returncode == 0):
            # (a record retention deleted may still be served while the kernel's entry for it
            # is being invalidated: its bytes must still be right)
            self.stale_reads += offset < start
            r = p.records[offset]
            assert res.returncode == 0 and res.stdout == (r.value or b""), (res, r)
            assert key == (errno.ENODATA if r.key is None else r.key), (key, r)
        else:
            assert res.returncode != 0 and strerror(errno.ENOENT) in res.stderr, res

    @precondition(lambda self: self.parts)
    @rule(data=st.data())
    def cat_by_time(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.parts)), label="partition")
        p = self.parts[name]
        stamps = sorted({r.ts for _, r in p.present(p.start)})  # all learned by the last check
        t = pick(data, [0, *stamps, *(s + 1 for s in stamps), *(s - 1 for s in stamps)], "time")
        start, (link, cat) = self.settled(name, lambda: (
            sh(f"readlink {name}/by-time/{t}", self.m.path, check=False),
            sh(f"cat {name}/by-time/{t}", self.m.path, check=False)))
        offset = p.first_at(start, t)
        if offset is None:
            assert link.returncode != 0 and cat.returncode != 0, (link, cat)
            assert strerror(errno.ENOENT) in cat.stderr, cat
        else:
            assert link.stdout == f"../by-offset/{offset}\n".encode(), (link, offset)
            assert cat.returncode == 0 and cat.stdout == (p.records[offset].value or b""), cat

    @precondition(lambda self: self.parts)
    @rule(data=st.data())
    def ls(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.parts)), label="partition")
        assert sh("ls", self.m.path, check=False).stdout.split() == [
            n.encode() for n in sorted(self.parts)]
        assert sh(f"ls {name}", self.m.path, check=False).stdout.split() == [
            b"append", b"append-batches", b"append-keyed", b"append.jsonl", b"by-offset",
            b"by-time", b"from", b"keyed-values", b"records.jsonl", b"values"]
        start, res = self.settled(name, lambda: sh(f"ls -f {name}/by-offset", self.m.path,
                                                   check=False))
        names = [n for n in res.stdout.split() if n not in (b".", b"..")]
        assert names == [b"%d" % o for o, _ in self.parts[name].present(start)], res

    @precondition(lambda self: self.parts)
    @rule(data=st.data())
    def cat_values_from(self, data) -> None:
        """``from/<offset>/values`` and ``from/-N/values``: ENOENT out of [start, end]."""
        name = data.draw(st.sampled_from(sorted(self.parts)), label="partition")
        p = self.parts[name]
        arg = (f"-{data.draw(st.integers(1, 5), label='last')}" if data.draw(st.booleans(), label="-N")
               else str(between(data, max(p.start - 1, 0), p.leo + 1, "from")))
        start, res = self.settled(name, lambda: sh(f"cat {name}/from/{arg}/values", self.m.path,
                                                   check=False))
        if arg.startswith("-"):
            first = max(start, p.leo + int(arg))
        elif start <= int(arg) <= p.leo:
            first = int(arg)
        else:
            assert res.returncode != 0 and strerror(errno.ENOENT) in res.stderr, res
            return
        assert res.returncode == 0, res
        assert res.stdout == b"".join((b"null" if r.value is None else r.value) + b"\n"
                                      for _, r in p.present(first)), (first, res)

    # ---- retention

    @precondition(lambda self: "kept-0" in self.parts)
    @rule()
    def retention_by_size(self) -> None:
        """Append to kept-0 until retention.bytes deletes its oldest segment."""
        first = self.observe_start("kept-0")
        deadline = Deadline(HANG_S, "retention.bytes to delete a segment of kept-0")
        while self.observe_start("kept-0") == first:
            deadline.check()
            if self.xattr("kept-0", "sizeInBytes") < RETENTION_BYTES + 3 * SEGMENT_BYTES:
                self.printf_lines("kept-0", [b"x" * 50] * 8, False)
            else:  # more than a segment past the limit: the next check deletes one
                time.sleep(POLL_S)

    @precondition(lambda self: "aged-0" in self.parts)
    @rule()
    def retention_by_time(self) -> None:
        """Batches stamped OLD_MS ago: when aged-0 holds nothing younger, the next check
        deletes every segment."""
        records = [Rec(None, b"old %d" % i, Stamp(0, 0, now_ms() - OLD_MS + i)) for i in range(3)]
        src = self.tmp / "old.bin"
        src.write_bytes(producer_batch(records))
        sh(f"cat {src} >> aged-0/append-batches", self.m.path)
        self.store("aged-0", records)
        p = self.parts["aged-0"]
        if p.max_start() < p.leo:
            return  # a younger record stops the deletion at its segment
        wait_until(lambda: self.observe_start("aged-0") >= p.leo,
                   "retention.ms to delete the old segments of aged-0", timeout=HANG_S)

    # ---- restarts

    @rule(kill=st.booleans())
    def restart(self, kill: bool) -> None:
        """Unmount cleanly (the open files closed first: their partial lines stored), or
        kill -9 the serving process (their partial lines were never acknowledged: lost)."""
        event("kill -9" if kill else "unmount")
        if kill:
            self.kill9()
        else:
            for h in list(self.handles):
                self.close_handle(h)
            self.mounter.unmount(self.m)
        self.m = self.mounter(self.backing)

    @precondition(lambda self: self.parts)
    @rule(data=st.data())
    def kill9_then_a_corrupt_batch(self, data) -> None:
        """kill -9, then a bit flips in a batch of a partition's active segment that intact
        batches follow (not its first record left): the next mount salvages it, so only that
        batch's records go (an offset gap), every other stays at its offset."""
        name = data.draw(st.sampled_from(sorted(self.parts)), label="partition")
        p = self.parts[name]
        self.kill9()
        active = max((self.backing / name).glob("*.log"), default=None)
        found = _batches(active.read_bytes()) if active else []
        candidates = [(pos, b) for pos, b in found[:-1] if b.base_offset > p.start and
                      all(p.records[o] is not None for o in range(b.base_offset, b.last_offset + 1))]
        if candidates:
            position, bad = data.draw(st.sampled_from(candidates), label="batch")
            raw = bytearray(active.read_bytes())
            raw[position + 61 + (bad.size_in_bytes - 61) // 2] ^= 0x10
            active.write_bytes(bytes(raw))
            for o in range(bad.base_offset, bad.last_offset + 1):
                p.records[o] = None
            event("a batch corrupted after kill -9: salvaged at the next mount")
        self.m = self.mounter(self.backing)

    def kill9(self) -> None:
        """kill -9 the serving process: its open files' partial lines were never acknowledged."""
        os.kill(self.m.pid, signal.SIGKILL)
        assert wait_for_exit(self.m.pid, 30)
        subprocess.run(["fusermount3", "-u", "-z", str(self.m.path)], check=True,
                       capture_output=True, timeout=30)
        self.m.mounted = False
        assert not is_mounted(self.m.path)
        for h in self.handles:
            try:
                self.fds.close(h.fd)
            except OSError:
                pass
        self.handles.clear()
        for p in self.parts.values():
            p.crashed = True

    # ---- end of an example

    def _cleanup(self) -> None:
        self.fds.stop()
        self.handles.clear()
        for m in self.mounter.mounts:
            self.mounter._teardown(m)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def teardown(self) -> None:
        logs = [m.log_text() for m in self.mounter.mounts]
        self._cleanup()
        note(f"{self.stale_reads} deleted records still served while being invalidated")
        for text in logs:
            assert "Traceback" not in text and "unexpected error" not in text, text[-5000:]


def _batches(data: bytes) -> list:
    """(position, batch) of each whole batch of a .log's bytes."""
    from storage.records import iter_batches

    out, position = [], 0
    for batch in iter_batches(data):
        out.append((position, batch))
        position += batch.size_in_bytes
    return out


TestMountModel = pytest.mark.fuse(MountModel.TestCase)
TestMountModel.settings = settings(
    max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None, derandomize=not RANDOM,
    database=None if not RANDOM else settings.default.database,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
