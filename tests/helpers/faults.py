"""Disk-fault trials (issue 37 item 3): a workload runs on a backing directory opened as a
writable mount opens it (``LogManager``), with the Nth engine file call
(``storage.disk_calls``) failing with EIO once, or with ENOSPC from then on; then the checks
of SQLite's I/O-error tests and Kafka's log-dir failure tests:

* while the fault lasts: every acknowledged record is served, whole, in order; nothing of a
  refused write is; reads keep serving;
* the directory is closed as an unmount does (still under the fault), then opened again
  without it (the next mount recovers): the same records, no more, the partition takes
  appends again, and ``kfs verify`` finds nothing wrong after that open's clean close.

A workload is a function ``(mgr, log, write, other)``: each ``write(values, call)`` is one
write of a front end, ``call()`` its engine call, returning the offsets given to ``values`` (a
range, a first offset, or a (first, last) pair); its records are acknowledged when it returns,
refused when it raises. Operations that are no write (retention, a cleaner pass) go through
``other(call)``. A workload that opens the directory again (recovery) returns the new
``(mgr, log)``, or None when that open failed (the mount would not start: nothing is served).
Its ``prepare`` runs the same way before the faults are armed.

A compacted workload's check is the cleaner's promise instead: every record served was
acknowledged, and the last acknowledged value of every key is served. A Spark write's is what a
read_committed reader sees (a failed job's transaction is aborted, or left open). ``kfs adopt``
adds its own (``after``): a refused adopt leaves the broker's directory as it was, and a later
one gives it the backing directory's files.
"""

from __future__ import annotations

import dataclasses
import errno
import shutil
from collections.abc import Callable
from pathlib import Path

from storage import disk_calls
from storage.errors import KafkaStorageError
from storage.isolation import IsolationLevel
from storage.log_manager import LogManager
from storage.records.control import ControlRecordType, build_control_batch

TOPIC = "t"
PARTITION = f"{TOPIC}-0"


@dataclasses.dataclass
class Workload:
    name: str
    run: Callable  # (mgr, log, write, other) -> None, or (mgr, log) | None when it reopens
    config: dict[str, str] = dataclasses.field(default_factory=dict)  # topic settings
    prepare: Callable | None = None  # as run, before the faults are armed
    compacted: bool = False
    isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED  # what the checks read
    after: Callable | None = None  # (root, trial): its own checks, after the others


@dataclasses.dataclass
class Trial:
    """What one run saw: the records acknowledged ``{offset: value}``, the values refused,
    the faults fired (``disk_calls.Faults.failed``) and every problem the checks found."""

    acked: dict[int, bytes] = dataclasses.field(default_factory=dict)
    refused: list[bytes] = dataclasses.field(default_factory=list)
    failed: list[tuple[int, str]] = dataclasses.field(default_factory=list)
    calls: list[str] = dataclasses.field(default_factory=list)
    problems: list[str] = dataclasses.field(default_factory=list)


def _offsets(result, count: int) -> list[int]:
    if isinstance(result, (range, list)):
        return list(result)
    if isinstance(result, tuple):
        return list(range(result[0], result[0] + count))
    return list(range(result, result + count))


def _served(log, isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
            ) -> list[tuple[int, bytes]]:
    start = log.log_start_offset
    return [(r.offset, r.value) for r in log.reader.records_from(start, 1 << 30, isolation)]


def _check_served(trial: Trial, log, when: str, compacted: bool = False,
                  isolation: IsolationLevel = IsolationLevel.READ_UNCOMMITTED) -> None:
    """Every acknowledged record at or past the log start offset, in order, nothing refused,
    nothing else (``compacted``: see the module's doc), as a reader at ``isolation`` sees it."""
    served = _served(log, isolation)
    expected = [(o, v) for o, v in sorted(trial.acked.items()) if o >= log.log_start_offset]
    if compacted:
        latest = {_key(v): (o, v) for o, v in expected}
        if not set(served) <= set(expected) or not set(latest.values()) <= set(served):
            trial.problems.append(f"{when}: {len(served)} records served, not the compaction "
                                  f"of the {len(expected)} acknowledged")
    elif served != expected:
        refused = set(trial.refused)
        stored = [v for _, v in served if v in refused]
        lost = [o for o, _ in expected if (o, trial.acked[o]) not in served]
        trial.problems.append(f"{when}: served {len(served)} records, expected {len(expected)}"
                              + (f"; refused but stored: {stored[:3]}" if stored else "")
                              + (f"; acknowledged but lost: offsets {lost[:5]}" if lost else ""))


def run_trial(root: Path, workload: Workload, faults: disk_calls.Faults | None,
              verify: bool = True, topic: str = TOPIC) -> Trial:
    """One trial in a fresh ``root`` (emptied first) on partition ``<topic>-0``; ``faults``
    None: count the calls only."""
    from kfs.tools.verify import Problem, verify_partitions

    shutil.rmtree(root, ignore_errors=True)
    shutil.rmtree(root.with_name(root.name + ".quarantine"), ignore_errors=True)
    shutil.rmtree(_broker_of(root), ignore_errors=True)
    root.mkdir(parents=True)
    if workload.config:
        (root / f"{topic}.topic.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in workload.config.items()))
    trial = Trial()

    def write(values: list[bytes], call: Callable) -> bool:
        try:
            result = call()
        except (OSError, KafkaStorageError):  # (e.g. DamagedLogError: EIO at the mount too)
            trial.refused.extend(values)
            return False
        trial.acked.update(zip(_offsets(result, len(values)), values))
        return True

    def other(call: Callable) -> None:
        try:
            call()
        except OSError:
            pass

    partition = f"{topic}-0"
    mgr = LogManager(root)
    log = mgr.create(partition)
    if workload.prepare is not None:
        mgr, log = workload.prepare(mgr, log, write, other)
    plan = faults or disk_calls.Faults()
    disk_calls.inject(plan)
    try:
        reopened = workload.run(mgr, log, write, other)
        if reopened is not None or workload.prepare is None:
            mgr, log = reopened or (mgr, log)
            _check_served(trial, log, "while the fault lasts", workload.compacted,
                          workload.isolation)
            try:
                mgr.close()  # the unmount, on the failing disk
            except OSError:
                pass
            if mgr._file_lock is not None:  # (so the next open is still tried)
                trial.problems.append("the unmount left the directory locked")
                mgr._file_lock.release()
    finally:
        disk_calls.remove()
        trial.failed, trial.calls = list(plan.failed), list(plan.calls)
    if faults is not None and not faults.failed:
        return trial  # (the workload never reached call N: nothing more to see)
    mgr = LogManager(root)  # the next mount
    try:
        log = mgr.get(partition)
        _check_served(trial, log, "after the next mount", workload.compacted,
                      workload.isolation)
        try:
            if workload.compacted:
                log.append_lines(b"K9\tK9=after\n", b"\t")
            else:
                log.append_lines(b"after\n")
        except OSError as exc:
            trial.problems.append(f"the next mount refuses appends: {exc}")
    finally:
        mgr.close()
    if verify:
        problems = [p for p in verify_partitions([root / partition]) if isinstance(p, Problem)]
        trial.problems.extend(f"kfs verify: {p}" for p in problems)
    if workload.after is not None:
        workload.after(root, trial)
    return trial


# -- workloads ------------------------------------------------------------------------------


def kp_batch(values, producer_id=-1, sequence=-1, transactional=False) -> bytes:
    """A v2 batch as kafka-python's producer builds it (base offset 0, keys ``k<i>``)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=0,
                                        base_sequence=sequence, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=value, headers=[])
    return bytes(builder.build())


def lines(n_writes: int = 4, per_write: int = 3):
    """``append``: lines, a few per write() (``Log.append_lines``, as the mount calls it)."""
    def run(mgr, log, write, other):
        for i in range(n_writes):
            values = [b"L%d-%d" % (i, j) for j in range(per_write)]
            write(values, lambda: log.append_lines(b"".join(v + b"\n" for v in values)))
    return run


def producer_batches(n_writes: int = 4):
    """``append-batches``: an idempotent producer's batches, one per write
    (``Log.append_as_leader``); the sequence follows the records acknowledged, as a producer's."""
    def run(mgr, log, write, other):
        sequence = 0
        for i in range(n_writes):
            values = [b"P%d-%d" % (i, j) for j in range(2)]
            if write(values, lambda: log.append_as_leader(
                    kp_batch(values, producer_id=7, sequence=sequence))):
                sequence += len(values)
    return run


def transactions(n_txns: int = 2):
    """``append-batches``: a transactional producer's data batch then its COMMIT marker, per
    transaction (a marker refused leaves the data acknowledged, read_uncommitted)."""
    def run(mgr, log, write, other):
        sequence = 0
        for i in range(n_txns):
            values = [b"T%d-%d" % (i, j) for j in range(2)]
            if write(values, lambda: log.append_as_leader(
                    kp_batch(values, producer_id=9, sequence=sequence, transactional=True))):
                sequence += len(values)
            marker = build_control_batch(0, 9, 0, ControlRecordType.COMMIT, timestamp_ms=0)
            write([], lambda: log.append_as_leader(marker))
    return run


def retention(n_writes: int = 6):
    """Lines that roll small segments, then a retention pass (``LogManager.cleanup_logs``, the
    mount's job) deleting the oldest by ``retention.bytes``, then more lines."""
    def run(mgr, log, write, other):
        append = lines(n_writes, 3)
        append(mgr, log, write, other)
        other(mgr.cleanup_logs)
        more = [b"R-%d" % j for j in range(3)]
        write(more, lambda: log.append_lines(b"".join(v + b"\n" for v in more)))
    return run


def keyed_lines(n_writes: int = 6, keys: int = 3):
    """``append-keyed``: ``key<TAB>value`` lines, the same few keys again and again; a value
    names its key (``K<k>=...``) so the check can find it."""
    def run(mgr, log, write, other):
        for i in range(n_writes):
            values = [b"K%d=%d" % (k, i) for k in range(keys)]
            write(values, lambda: log.append_lines(
                b"".join(v.split(b"=")[0] + b"\t" + v + b"\n" for v in values), b"\t"))
    return run


def compaction(n_writes: int = 6):
    """Keyed lines over small segments, a cleaner pass (``.cleaned``, ``.swap``, the renames,
    the cleaner checkpoint), then more lines."""
    from storage.log_cleaner import for_log_manager

    def run(mgr, log, write, other):
        keyed_lines(n_writes)(mgr, log, write, other)
        other(lambda: for_log_manager(mgr).clean_log(log.name))
        keyed_lines(1, 2)(mgr, log, write, other)
    return run


def _crashed(mgr, log, write, other):
    """Unflushed lines, a torn batch at the end of the .log, then the process dies (no close,
    no clean-shutdown marker): what the next open recovers."""
    lines(4, 3)(mgr, log, write, other)
    torn = log.segments.active.read_at(0, 40)
    with open(log.segments.active.log_path, "ab") as f:
        f.write(torn)
    mgr._file_lock.release()
    return mgr, log


def _recover(mgr, log, write, other):
    """The next mount's open (recovery, on the failing disk), then lines."""
    try:
        mgr = LogManager(mgr.dir)
    except OSError:
        return None
    log = mgr.get(log.name)
    lines(2, 2)(mgr, log, write, other)
    return mgr, log


def _spark_ready(mgr, log, write, other):
    """The directory unlocked (a Spark write locks it task by task), its partition made."""
    mgr.close()
    return mgr, log


def spark_write(jobs: int = 3):
    """``df.write.format("kfs")`` as Spark drives ``KfsWriter``: per job, one task's
    ``write`` (its transactional batches under the directory's lock), then the driver's
    ``commit`` (COMMIT markers), or ``abort`` (ABORT markers) when the task failed. A job's
    rows are acknowledged when its commit returns, refused when the job fails: a
    read_committed reader must see exactly the acknowledged rows."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from kfs.spark.writer import KfsWriter

    schema = StructType([StructField("value", BinaryType())])

    def run(mgr, log, write, other):
        options = {"path": str(mgr.dir), "topic": log.topic}

        def job(values):
            writer = KfsWriter(options, schema, False)
            message = None
            try:  # a failed task or commit: Spark aborts the job
                message = writer.write(iter([pa.record_batch([pa.array(values, pa.binary())],
                                                             names=["value"])]))
                writer.commit([message])
            except BaseException:
                other(lambda: writer.abort([message]))
                raise
            return _offsets_of(mgr.dir, log.name, values)

        for i in range(jobs):
            values = [b"S%d-%d" % (i, j) for j in range(3)]
            write(values, lambda: job(values))
        reader = LogManager(mgr.dir, read_only=True)
        return reader, reader.get(log.name)
    return run


def _offsets_of(directory: Path, name: str, values: list[bytes]) -> list[int]:
    """The offsets of ``values`` (the last of each), as a job's writer does not say them."""
    reader = LogManager(directory, read_only=True)
    try:
        log = reader.get(name)
        where = {r.value: r.offset for r in log.reader.records_from(log.log_start_offset, 1 << 30)}
    finally:
        reader.close()
    return [where[v] for v in values]


def _broker_of(root: Path) -> Path:
    return root.with_name(root.name + "-broker")


def _tree(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() if p.is_file() else b"dir"
            for p in sorted(path.rglob("*"))}


def _adoptable(mgr, log, write, other):
    """Lines written and the directory closed; beside it a broker's log directory as a
    formatted broker leaves it after the topic's creation and a clean stop."""
    lines(3, 3)(mgr, log, write, other)
    mgr.close()
    broker = _broker_of(mgr.dir)
    broker.mkdir()
    (broker / "meta.properties").write_text("version=1\nnode.id=1\ncluster.id=c\n")
    (broker / ".kafka_cleanshutdown").write_text('{"version":0,"brokerEpoch":1}')
    (broker / log.name).mkdir()
    (broker / log.name / "partition.metadata").write_text(
        "version: 0\ntopic_id: AAAAAAAAAAAAAAAAAAAAAQ")
    return mgr, log


def kfs_adopt():
    """``kfs adopt`` on a failing disk (its engine open and close of the backing directory,
    the copy, the renames, the broker's checkpoints). Refused, it leaves the broker's log
    directory as it was; either way a later adopt (``--overwrite``) without the fault gives
    the broker the backing directory's files."""
    import io

    from kfs.tools.adopt import AdoptError, adopt

    def run(mgr, log, write, other):
        broker = _broker_of(mgr.dir)
        before = _tree(broker)
        try:
            adopt(mgr.dir, broker, out=io.StringIO())
        except (OSError, AdoptError) as exc:
            copied = "copied in whole" in str(exc)  # (only the broker's checkpoints failed)
            if _tree(broker) != before and not (copied and _same_partition(mgr.dir, broker)):
                _refused_changes.append(mgr.dir)
        reader = LogManager(mgr.dir, read_only=True)
        return reader, reader.get(log.name)
    return run


_refused_changes: list[Path] = []


def _adopted_again(root: Path, trial: Trial) -> None:
    import io

    from kfs.tools.adopt import adopt

    if root in _refused_changes:
        _refused_changes.remove(root)
        trial.problems.append("a refused adopt changed the broker's directory")
    broker = _broker_of(root)
    adopt(root, broker, overwrite=True, out=io.StringIO())
    if not _same_partition(root, broker):
        trial.problems.append("the broker's partition is not the backing directory's")


def _same_partition(backing: Path, broker: Path) -> bool:
    """Whether the broker's copy of the backing directory's partition has its files."""
    part = next(p for p in backing.iterdir() if p.is_dir())
    ours = {k: v for k, v in _tree(part).items() if k != "partition.metadata"}
    theirs = {k: v for k, v in _tree(broker / part.name).items() if k != "partition.metadata"}
    return ours == theirs


def _key(value: bytes) -> bytes:
    return value.split(b"=")[0]


WORKLOADS = {
    "append lines, flush.messages=1": Workload(
        "append lines, flush.messages=1", lines(), {"flush.messages": "1"}),
    "append lines, unflushed": Workload("append lines, unflushed", lines()),
    "producer batches, idempotent, flush.messages=1": Workload(
        "producer batches, idempotent, flush.messages=1", producer_batches(),
        {"flush.messages": "1"}),
    "producer batches, transactional": Workload(
        "producer batches, transactional", transactions(), {"flush.messages": "1"}),
    "append lines with rolls": Workload(
        "append lines with rolls", lines(6, 3), {"segment.bytes": "300", "flush.messages": "2"}),
    "retention": Workload(
        "retention", retention(), {"segment.bytes": "300", "retention.bytes": "400",
                                   "file.delete.delay.ms": "0"}),
    "compaction": Workload(
        "compaction", compaction(), {"cleanup.policy": "compact", "segment.bytes": "200",
                                     "file.delete.delay.ms": "0"}, compacted=True),
    "recovery": Workload("recovery", _recover, {"segment.bytes": "300"}, prepare=_crashed),
    "spark write": Workload("spark write", spark_write(), prepare=_spark_ready,
                            isolation=IsolationLevel.READ_COMMITTED),
    "kfs adopt": Workload("kfs adopt", kfs_adopt(), prepare=_adoptable, after=_adopted_again),
}


def fault_plans(calls: list[str]) -> list[disk_calls.Faults]:
    """Every fault a workload of ``calls`` can meet: each call failing once with EIO, and
    ENOSPC from each call on that is not a truncate (ENOSPC spares truncates: from such a
    call on, the first failure is the next other call's, already a trial)."""
    plans = [disk_calls.Faults(n, errno.EIO) for n in range(1, len(calls) + 1)]
    plans += [disk_calls.Faults(n, errno.ENOSPC, persist=True)
              for n, name in enumerate(calls, 1) if name not in ("ftruncate", "truncate")]
    return plans
