"""``kfs`` command line: ``kfs mount [options] BACKING_DIR MOUNTPOINT``, ``kfs dump FILE...``
(``kafka-dump-log``), ``kfs verify BACKING_DIR [PARTITION...]``, ``kfs retention
BACKING_DIR`` and ``kfs compact BACKING_DIR [PARTITION...]`` (the log cleaner, now).

Without ``-f`` the command behaves like sshfs: it returns (status 0) only once the mount serves,
and the file system keeps running in a detached background process.  It does so by re-running
itself with ``--foreground`` in a new session and waiting on a pipe for one byte written after
``pyfuse3.init`` succeeded (or for the child's error text / exit status, reported as one line
on stderr with exit status 1).

The serve loop ends cleanly on SIGTERM, SIGINT, SIGHUP and on ``fusermount3 -u MOUNTPOINT``;
then the mount is released and ``LogManager.close()`` runs (Kafka's clean shutdown).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import io
import logging
import os
import re
import select
import signal
import subprocess
import sys
from pathlib import Path
import tempfile
import time
from typing import Callable, TextIO

from . import adopt, compact
from .append import parse_separator
from .mounts import FSTYPE, alive, fsname_for, mounted_at, mounts_at, serving_processes

log = logging.getLogger("kfs")

READY = b"R"
FAILED = b"E"
# How long the background launcher waits for the mount to serve before giving up.
READY_TIMEOUT_S = 120.0
LOG_LEVELS = ("debug", "info", "warning", "error")


class CliError(Exception):
    """A user-facing failure: printed as ``kfs: error: <message>``, exit status 1."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kfs",
        description="Kafka partition logs (Apache Kafka's own on-disk format) as plain files.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    mount = sub.add_parser(
        "mount",
        help="mount a backing directory of Kafka partition directories",
        description=(
            "Mount BACKING_DIR (a directory of <topic>-<N> Kafka partition directories; created "
            "if missing) at MOUNTPOINT, an empty directory (a stale kfs mount left there by a "
            "killed kfs process is unmounted first). Returns once the mount serves; the file "
            "system keeps running in the background until `kfs umount MOUNTPOINT` (or "
            "`fusermount3 -u`, or SIGTERM); --log-file says where it logs."
        ),
    )
    mount.add_argument("backing_dir", metavar="BACKING_DIR")
    mount.add_argument("mountpoint", metavar="MOUNTPOINT")
    mount.add_argument("-f", "--foreground", action="store_true",
                       help="serve in the foreground (Ctrl-C or fusermount3 -u ends it)")
    mount.add_argument("--read-only", action="store_true",
                       help="mount read-only: nothing on disk changes (mkdir and appends get EROFS)")
    mount.add_argument("--log-level", choices=LOG_LEVELS, default="warning",
                       help="logging threshold (default: warning)")
    mount.add_argument("--log-file", metavar="PATH",
                       help="append log messages to PATH (default: stderr in the foreground; "
                            "in the background a file named after MOUNTPOINT in "
                            "$XDG_STATE_HOME/kfs/, by default ~/.local/state/kfs/, e.g. "
                            "home-me-mnt.log for /home/me/mnt)")
    mount.add_argument("--key-separator", metavar="SEP", default="\\t",
                       help="what splits key from value in lines written to append-keyed and "
                            "read from keyed-values, like the console producer's and "
                            "consumer's key.separator (default: TAB; the escapes "
                            "\\t and \\\\ are understood)")
    mount.add_argument("--isolation-level", choices=("read_uncommitted", "read_committed"),
                       default="read_uncommitted",
                       help="as Kafka's consumer isolation.level: read_committed hides records "
                            "of aborted transactions and everything at or past the last stable "
                            "offset (default: read_uncommitted, every record but markers)")
    mount.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    mount.set_defaults(func=cmd_mount)

    umount = sub.add_parser(
        "umount",
        help="unmount a kfs mount and wait until its logs are closed",
        description=("Unmount MOUNTPOINT (fusermount3 -u) and return once the kfs process "
                     "serving it has closed every log and exited, so the backing directory "
                     "can be mounted again at once."),
    )
    umount.add_argument("mountpoint", metavar="MOUNTPOINT")
    umount.add_argument("--timeout", type=_positive_float, default=CLOSE_WAIT_S, metavar="SECONDS",
                        help=f"how long to wait for the close (default {CLOSE_WAIT_S:g})")
    umount.set_defaults(func=cmd_umount)

    retention = sub.add_parser(
        "retention",
        help="apply retention.ms / retention.bytes now",
        description=(
            "Say which segments of BACKING_DIR retention.ms / retention.bytes (and log start "
            "offsets) no longer keep, as a broker's retention check would delete them, and "
            "with --yes (or a yes on a terminal) delete them and print what moved. A running "
            "mount already does this every log.retention.check.interval.ms; this takes the "
            "directory's lock, so run it while no writer has the directory."),
    )
    retention.add_argument("backing_dir", metavar="BACKING_DIR", type=existing_directory)
    retention.add_argument("--yes", action="store_true",
                           help="delete without asking (default: print the plan only)")
    retention.set_defaults(func=cmd_retention)
    _add_dump_parser(sub)
    _add_verify_parser(sub)
    _add_transactions_parser(sub)
    compact.add_parser(sub)
    adopt.add_parser(sub)
    return parser


def _add_transactions_parser(sub) -> None:
    txns = sub.add_parser(
        "transactions",
        help="list, find hanging and abort open transactions, as kafka-transactions.sh does",
        description=(
            "The open transactions of BACKING_DIR (a producer's transactional batches with no "
            "COMMIT/ABORT marker yet), with kafka-transactions.sh's verbs. A running writable "
            "mount aborts transactions open longer than transaction.timeout.ms by itself; "
            "abort writes through such a mount, else under the directory's lock."),
    )
    txns.add_argument("backing_dir", metavar="BACKING_DIR", type=existing_directory)
    verbs = txns.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, help_text in (("list", "every open transaction"),
                            ("find-hanging", "open transactions whose producer has been "
                                             "silent longer than --max-transaction-timeout")):
        p = verbs.add_parser(verb, help=help_text)
        p.add_argument("--topic", help="only this topic")
        p.add_argument("--partition", type=int, help="only this partition (with --topic)")
        if verb == "find-hanging":
            p.add_argument("--max-transaction-timeout", type=_positive_int, metavar="MINUTES",
                           default=15, help="Kafka's transaction.max.timeout.ms in minutes "
                                            "(default 15)")
    p = verbs.add_parser("abort", help="write an ABORT marker for one open transaction")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, help="the transaction's first offset")
    p.add_argument("--producer-id", type=int)
    p.add_argument("--producer-epoch", type=int)
    p.add_argument("--coordinator-epoch", type=int)
    txns.set_defaults(func=cmd_transactions)


def _add_dump_parser(sub) -> None:
    dump = sub.add_parser(
        "dump",
        help="print .log/.index/.timeindex/.snapshot/.txnindex files as kafka-dump-log does",
        description=(
            "Print segment files as Kafka's kafka-dump-log does: a line per batch of a .log (and "
            "a '| offset: ...' line per record with --deep-iteration), the entries of .index and "
            ".timeindex files (checked against their .log; mismatches go to stderr), producer "
            "snapshots and transaction indexes. Nothing is written."
        ),
    )
    dump.add_argument("files", metavar="FILE", nargs="*", help="segment files to dump")
    dump.add_argument("--files", dest="files_csv", metavar="FILE[,FILE...]", action="append",
                      default=[], help="comma-separated files, as kafka-dump-log takes them")
    dump.add_argument("--deep-iteration", action="store_true",
                      help="print every record, not just batches")
    dump.add_argument("--print-data-log", action="store_true",
                      help="print record keys and values as UTF-8 text (implies --deep-iteration)")
    dump.add_argument("--skip-record-metadata", action="store_true",
                      help="with --print-data-log, print only keys and values")
    dump.add_argument("--verify-index-only", action="store_true",
                      help="check index entries against the .log without printing them")
    dump.add_argument("--index-sanity-check", action="store_true",
                      help="only run Kafka's sanity check on .index/.timeindex files")
    dump.add_argument("--max-bytes", type=_positive_int, metavar="N",
                      help="read at most N bytes of each .log (default: all)")
    dump.add_argument("--json", action="store_true",
                      help="one JSON object per line (kcat -J fields for records); "
                           "non-UTF-8 bytes as {\"base64\": ...}")
    dump.add_argument("--offsets-decoder", action="store_true",
                      help="decode the records as __consumer_offsets records (implies "
                           "--print-data-log; with --json: decoded key and value objects)")
    dump.add_argument("--transaction-log-decoder", action="store_true",
                      help="decode the records as __transaction_state records (implies "
                           "--print-data-log; with --json: decoded key and value objects)")
    dump.set_defaults(func=cmd_dump, more_positionals="files")


def _add_verify_parser(sub) -> None:
    verify = sub.add_parser(
        "verify",
        help="check every segment of a backing directory (read-only); --repair recovers it",
        description=(
            "Check the partitions of BACKING_DIR (all, or the PARTITIONs named) read-only: batch "
            "sizes and CRCs, offsets, segment base offsets, every .index and .timeindex entry, "
            "leftover .cleaned/.swap/.deleted files. One line per problem (partition/file:byte: "
            "what), then a summary. Exit status: 0 clean, 1 problems found, 2 usage error."
        ),
    )
    verify.add_argument("backing_dir", metavar="BACKING_DIR", type=existing_directory)
    verify.add_argument("partitions", metavar="PARTITION", nargs="*",
                        help="partition directories to check, e.g. orders-0 (default: all)")
    verify.add_argument("--repair", action="store_true",
                        help="when problems are found, say what a repair would cut (files, byte "
                             "ranges, offsets, records) and, with --yes or a yes on a terminal, "
                             "do it: only bytes that are not intact batches go, into the "
                             "quarantine; every intact batch stays (the log keeps an offset gap); "
                             "then the whole directory is recovered (indexes rebuilt, leftovers "
                             "settled), and verified again")
    verify.add_argument("--yes", action="store_true",
                        help="with --repair: repair without asking")
    verify.add_argument("--quarantine", metavar="DIR",
                        help="with --repair: keep what is cut under DIR/<UTC time>/ (default: "
                             "BACKING_DIR.quarantine beside the backing directory; never inside it)")
    verify.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: when stderr is a terminal "
                             "or there is more than 1 GiB to check)")
    verify.set_defaults(func=cmd_verify, more_positionals="partitions")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("kfs")
    except PackageNotFoundError:  # run from a checkout without an install
        return "(not installed)"


def existing_directory(text: str) -> str:
    """An argparse type: a backing directory that exists (one message and status 2 for a bad
    path, whichever command was given it)."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"backing directory {text} does not exist")
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"backing directory {text} is not a directory")
    return text


def _positive(cast, what: str):
    """An argparse type: a positive ``cast`` (int, float) of the text, else ``not <what>``."""
    def parse(text: str):
        try:
            value = cast(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be positive: {text}")
        return value
    return parse


_positive_int = _positive(int, "an integer")
_positive_float = _positive(float, "a number")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kfs`` console script; returns the exit status."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    # argparse takes a command's trailing positionals (FILE...) only before its options; the
    # ones given after an option come back here
    more = getattr(args, "more_positionals", None)
    if extras and more and not any(e.startswith("-") for e in extras):
        setattr(args, more, getattr(args, more) + extras)
    elif extras:
        parser.error(f"unrecognized arguments: {' '.join(extras)}")
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return args.func(args)
    except CliError as exc:
        print(f"kfs: error: {exc}", file=sys.stderr)
        return 1


# --------------------------------------------------------------------------- dump


def cmd_dump(args: argparse.Namespace) -> int:
    from .dump import MAX_BYTES_DEFAULT, DumpOptions, dump_files

    files = list(args.files) + [f for csv in args.files_csv for f in csv.split(",") if f]
    if not files:
        print("kfs dump: error: no FILE given", file=sys.stderr)
        return 2
    options = DumpOptions(
        deep_iteration=args.deep_iteration, print_data_log=args.print_data_log,
        verify_index_only=args.verify_index_only, index_sanity_check=args.index_sanity_check,
        skip_record_metadata=args.skip_record_metadata,
        max_bytes=args.max_bytes or MAX_BYTES_DEFAULT, json=args.json,
        offsets_decoder=args.offsets_decoder, transaction_log_decoder=args.transaction_log_decoder,
    )
    return _with_stdout(lambda out: dump_files(files, options, out, sys.stderr))


def _with_stdout(run: Callable[[TextIO], int]) -> int:
    """Run with a UTF-8 stdout; a reader that goes away (``| head``) ends the command quietly
    with the status of a process killed by SIGPIPE."""
    out = io.TextIOWrapper(sys.stdout.buffer, encoding="utf-8", errors="replace",
                           newline="\n", write_through=False)
    try:
        status = run(out)
        out.flush()
        return status
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit-time flush does not fail again
        return 128 + signal.SIGPIPE
    finally:
        with contextlib.suppress(BrokenPipeError, ValueError):
            out.detach()


# --------------------------------------------------------------------------- verify

PROGRESS_BYTES = 1 << 30  # a progress bar even off a terminal from this many bytes on


def cmd_verify(args: argparse.Namespace) -> int:
    from . import verify

    from storage.quarantine import check_outside, default_root

    try:
        partitions = verify.find_partitions(args.backing_dir, args.partitions)
        args.quarantine = args.quarantine or default_root(args.backing_dir)
        check_outside(args.quarantine, args.backing_dir)
    except (verify.UsageError, ValueError) as exc:
        print(f"kfs verify: error: {exc}", file=sys.stderr)
        return 2
    return _with_stdout(lambda out: _verify_and_repair(out, args, partitions))


def _verify_and_repair(out: TextIO, args: argparse.Namespace, partitions) -> int:
    from . import verify

    problems = _verify_run(out, partitions, args.progress)
    if not problems or not args.repair:
        return 1 if problems else 0
    try:
        plan = verify.plan_repair(partitions, problems)
    except Exception as exc:  # noqa: BLE001 - any failure to plan is reported as one line
        print(f"kfs verify: error: cannot plan the repair: {exc}", file=sys.stderr)
        return 1
    out.write("repair plan (nothing has changed yet):\n")
    for line in verify.describe_plan(plan):
        out.write(f"  {line}\n")
    out.write(f"what is cut is kept, with a manifest, in {args.quarantine}/<UTC time>/\n")
    if not (args.yes or _confirm(out, "repair now? [y/N] ")):
        out.write("nothing changed: run with --yes to repair\n")
        return 1
    try:
        changes, quarantine = verify.repair(args.backing_dir, partitions, plan, args.quarantine)
    except Exception as exc:  # noqa: BLE001 - any failure to recover is reported as one line
        print(f"kfs verify: error: repair failed: {exc}", file=sys.stderr)
        return 1
    for piece in quarantine.pieces:
        out.write(f"kept {piece['source']} bytes {piece['start']}-{piece['end']} as "
                  f"{quarantine.directory / piece['file']}\n")
    if quarantine.directory is not None:
        out.write(f"quarantine manifest: {quarantine.directory / 'manifest.jsonl'}\n")
    for change in changes:
        out.write(f"repaired {change}\n")
    out.write(f"repair done ({len(changes)} changed); verifying again\n")
    out.flush()
    return 1 if _verify_run(out, partitions, args.progress) else 0


def _confirm(out: TextIO, question: str) -> bool:
    """A yes from the user on a terminal; False when stdin or stdout is not one."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return False
    out.write(question)
    out.flush()
    try:
        return input().strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _verify_run(out: TextIO, partitions, progress: bool | None) -> list:
    """Verify ``partitions``, printing each problem and a summary; returns the problems."""
    from tqdm import tqdm

    from . import verify

    from storage.file_lock import held_elsewhere

    in_use = bool(partitions) and held_elsewhere(partitions[0].parent)
    if in_use:
        out.write(f"{partitions[0].parent} is in use (a kfs mount or a Kafka broker holds its "
                  ".lock): its active segments are checked as Kafka checks a running log "
                  "(preallocated indexes and a batch being written are not problems)\n")
    total = verify.log_bytes(partitions)
    show = progress if progress is not None else (sys.stderr.isatty() or total > PROGRESS_BYTES)
    problems = []
    started = time.monotonic()
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="verify",
              disable=not show, file=sys.stderr, leave=False) as bar:
        for item in verify.verify_partitions(partitions, bar.update, in_use):
            if isinstance(item, verify.VerifyStats):
                stats = item
                continue
            problems.append(item)
            if show:
                tqdm.write(str(item), file=out)
            else:
                out.write(f"{item}\n")
    seconds = time.monotonic() - started
    out.write(f"{_count(stats.partitions, 'partition')}, {_count(stats.segments, 'segment')}, "
              f"{_count(stats.bytes, 'byte')} checked in {seconds:.1f} s: "
              f"{_count(len(problems), 'problem') if problems else 'no problems'}\n")
    out.flush()
    return problems


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# --------------------------------------------------------------------------- retention


def cmd_retention(args: argparse.Namespace) -> int:
    from storage import LogManager
    from storage.errors import KafkaStorageError
    try:
        mgr = LogManager(args.backing_dir)
    except (KafkaStorageError, OSError) as exc:
        raise CliError(str(exc)) from None
    try:
        plans = mgr.retention_plans()
        if not plans:
            print("retention deletes nothing now")
            return 0
        print("retention would delete (nothing has changed yet):")
        for name, plan in sorted(plans.items()):
            print(f"  {describe_retention(mgr.get(name), plan)}")
        if not (args.yes or _confirm(sys.stdout, "delete now? [y/N] ")):
            print("nothing changed: run with --yes to delete")
            return 0
        before = {n: mgr.get(n).log_start_offset for n in mgr.partition_names()}
        for name, count in sorted(mgr.cleanup_logs().items()):
            print(f"{name}: deleted {count} segment(s); log start offset"
                  f" {before[name]} -> {mgr.get(name).log_start_offset}")
    finally:
        mgr.close()
    return 0


def cmd_transactions(args: argparse.Namespace) -> int:
    from storage.errors import KafkaStorageError

    from . import transactions as tx

    backing = Path(args.backing_dir)
    if not backing.is_dir():
        raise CliError(f"backing directory {backing} does not exist")
    if args.verb != "abort" and args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic")
    try:
        if args.verb == "list":
            found = tx.open_transactions(backing, args.topic, args.partition)
            print(tx.table(tx.COLUMNS, [tx.row(*f) for f in found]))
        elif args.verb == "find-hanging":
            found = tx.open_transactions(backing, args.topic, args.partition)
            print(tx.table((*tx.COLUMNS, "Duration(min)"),
                           tx.hanging(found, args.max_transaction_timeout)))
        else:
            print(f"aborted the transaction of producer {_abort(tx, backing, args)} in "
                  f"{args.topic}-{args.partition}")
    except (tx.TransactionsError, KafkaStorageError, OSError) as exc:
        raise CliError(str(exc)) from None
    return 0


def _abort(tx, backing: Path, args: argparse.Namespace) -> int:
    by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None and not any(v is not None for v in by_producer):
        return tx.abort(backing, args.topic, args.partition, start_offset=args.start_offset)
    if args.start_offset is None and all(v is not None for v in by_producer):
        return tx.abort(backing, args.topic, args.partition, producer=by_producer)
    raise CliError("abort takes --start-offset, or --producer-id, --producer-epoch and "
                   "--coordinator-epoch")


# --------------------------------------------------------------------------- mount


def cmd_mount(args: argparse.Namespace) -> int:
    try:
        separator = parse_separator(args.key_separator)
    except ValueError as exc:
        raise CliError(f"--key-separator: {exc}") from None
    backing = os.path.abspath(args.backing_dir)
    mountpoint = os.path.abspath(args.mountpoint)
    _clear_stale_mount(mountpoint)
    check_paths(backing, mountpoint, args.read_only)
    check_mountpoint_free(mountpoint)
    if not args.read_only:
        _wait_for_closing(backing)
    if args.foreground:
        return serve(backing, mountpoint, args, separator)
    return launch_background(backing, mountpoint, args)


CLOSE_WAIT_S = 60.0  # how long mount and umount wait for a kfs process to finish closing
_POLL_S = 0.05


def _wait_for(pids: list[int], timeout_s: float) -> list[int]:
    """Wait until every process of ``pids`` has exited (at most ``timeout_s``); the ones still
    running."""
    deadline = time.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(_POLL_S)
    return left


def _wait_for_closing(backing: str) -> None:
    """A kfs process that was unmounted from ``backing`` but still closes its logs holds the
    directory's lock for a moment: wait for it, saying so (never for this very process, the
    server of a mount not made yet)."""
    closing = [pid for pid, b, m in serving_processes() if pid != os.getpid()
               and os.path.realpath(b) == os.path.realpath(backing) and not mounted_at(m)]
    if closing:
        print(f"kfs: waiting for the kfs process {', '.join(map(str, closing))} that is closing "
              f"{backing}", file=sys.stderr)
        _wait_for(closing, CLOSE_WAIT_S)


def cmd_umount(args: argparse.Namespace) -> int:
    """``fusermount3 -u MOUNTPOINT``, then wait until the kfs process serving it has closed
    its logs and exited (so the backing directory can be mounted again at once)."""
    mountpoint = os.path.abspath(args.mountpoint)
    if not mounted_at(mountpoint):
        raise CliError(f"{mountpoint} is not a kfs mount")
    pids = [pid for pid, _, m in serving_processes() if os.path.realpath(m) ==
            os.path.realpath(mountpoint)]
    done = subprocess.run(["fusermount3", "-u", mountpoint], capture_output=True, text=True)
    if done.returncode != 0:
        raise CliError(done.stderr.strip() or f"fusermount3 -u {mountpoint} failed")
    if _wait_for(pids, args.timeout):
        raise CliError(f"unmounted {mountpoint}, but its kfs process is still closing after "
                       f"{args.timeout:g} s")
    return 0


def _clear_stale_mount(mountpoint: str) -> None:
    """A kfs mount whose process died (``kill -9``) leaves its mountpoint answering ENOTCONN:
    unmount it (``fusermount3 -uz``), saying so, so that the new mount does not stack on the
    dead one. A dead mount of another file system is left alone (CliError)."""
    for _ in range(8):  # (stacked dead mounts, one at a time)
        try:
            os.stat(mountpoint)
            os.statvfs(mountpoint)  # (a stat may be answered from the kernel's cache)
            return
        except OSError as exc:
            if exc.errno not in (errno.ENOTCONN, errno.ECONNABORTED):  # (the latter: just dead)
                return  # check_paths says what is wrong
        stack = mounts_at(mountpoint)
        fstype, source = stack[-1] if stack else ("", "")
        if fstype != FSTYPE:
            raise CliError(f"mountpoint {mountpoint} is a disconnected {fstype or 'FUSE'} mount: "
                           f"unmount it first (fusermount3 -uz {mountpoint})")
        done = subprocess.run(["fusermount3", "-uz", mountpoint], capture_output=True, text=True)
        if done.returncode != 0:
            raise CliError(f"cannot unmount the stale kfs mount at {mountpoint}: "
                           f"{done.stderr.strip() or 'fusermount3 -uz failed'}")
        print(f"kfs: unmounted a stale kfs mount of {source} at {mountpoint} (its kfs process "
              f"is gone)", file=sys.stderr)


def check_mountpoint_free(mountpoint: str) -> None:
    """CliError for a mountpoint a mount would stack on or hide files in: a live kfs mount, or
    a directory that is not empty (FUSE's own rule before the ``nonempty`` option)."""
    stack = mounts_at(mountpoint)
    if stack and stack[-1][0] == FSTYPE:
        raise CliError(f"mountpoint {mountpoint} is already a kfs mount of {stack[-1][1]}: "
                       f"unmount it first (kfs umount {mountpoint})")
    try:
        with os.scandir(mountpoint) as entries:
            nonempty = next(entries, None) is not None
    except OSError:
        return  # (the mount itself says why it cannot use it)
    if nonempty:
        raise CliError(f"mountpoint {mountpoint} is not empty: a mount would hide its files "
                       f"(use an empty directory)")


def check_paths(backing: str, mountpoint: str, read_only: bool) -> None:
    """CliError with a clear message for paths that cannot work."""
    if not os.path.exists(mountpoint):
        raise CliError(f"mountpoint {mountpoint} does not exist")
    if not os.path.isdir(mountpoint):
        raise CliError(f"mountpoint {mountpoint} is not a directory")
    if os.path.exists(backing):
        if not os.path.isdir(backing):
            raise CliError(f"backing directory {backing} is not a directory")
    elif read_only:
        raise CliError(f"backing directory {backing} does not exist (and --read-only cannot create it)")
    elif not os.path.isdir(os.path.dirname(backing)):
        raise CliError(f"backing directory {backing} cannot be created: its parent does not exist")
    real_backing, real_mnt = os.path.realpath(backing), os.path.realpath(mountpoint)
    if os.path.commonpath([real_backing, real_mnt]) == real_mnt:
        # The daemon would read its own mount and deadlock.
        raise CliError(f"backing directory {backing} must not be the mountpoint or inside it")


def _child_command(backing: str, mountpoint: str, args: argparse.Namespace, ready_fd: int) -> list[str]:
    cmd = [sys.executable, "-m", "kfs", "mount", "--foreground", f"--ready-fd={ready_fd}",
           f"--log-level={args.log_level}", f"--key-separator={args.key_separator}",
           f"--isolation-level={args.isolation_level}"]
    if args.read_only:
        cmd.append("--read-only")
    if args.log_file:
        cmd.append(f"--log-file={os.path.abspath(args.log_file)}")
    return cmd + ["--", backing, mountpoint]


def default_log_file(mountpoint: str) -> str:
    """Where a background mount logs without ``--log-file``: ``$XDG_STATE_HOME/kfs/`` (default
    ``~/.local/state/kfs/``) and the mountpoint's absolute path with ``/`` as ``-``
    (``/home/me/mnt`` -> ``home-me-mnt.log``; ``root.log`` for ``/``)."""
    state = os.environ.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):  # (the XDG spec: a relative value is to be ignored)
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    name = "-".join(p for p in os.path.realpath(mountpoint).split("/") if p) or "root"
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
    if len(name) > 200:  # (a file name has at most 255 bytes)
        name = f"{name[-180:]}-{hashlib.sha1(name.encode()).hexdigest()[:8]}"
    return os.path.join(state, "kfs", f"{name}.log")


def launch_background(backing: str, mountpoint: str, args: argparse.Namespace) -> int:
    """Start the serving process detached (new session, cwd /, stdio off the terminal) and
    return 0 once it reports that the mount serves; CliError otherwise. Without
    ``--log-file`` it logs to ``default_log_file(mountpoint)``."""
    if not args.log_file:
        args.log_file = default_log_file(mountpoint)
        try:
            os.makedirs(os.path.dirname(args.log_file), exist_ok=True)
        except OSError as exc:
            print(f"kfs: the mount's log is discarded: cannot create "
                  f"{os.path.dirname(args.log_file)}: {exc.strerror} (see --log-file)",
                  file=sys.stderr)
            args.log_file = None
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    # The child must import this very kfs (and storage) even when it is not installed.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    try:
        child = subprocess.Popen(
            _child_command(backing, mountpoint, args, write_fd),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=(write_fd,), start_new_session=True, cwd="/", env=env,
        )
    finally:
        os.close(write_fd)
    try:
        message = _read_until_eof(read_fd, READY_TIMEOUT_S)
    finally:
        os.close(read_fd)
    if message is None:
        child.kill()
        child.wait()
        raise CliError(f"the mount did not become ready within {READY_TIMEOUT_S:.0f} s")
    if message.startswith(READY):
        notices = message[1:].decode("utf-8", "replace").strip()
        if notices:  # (what the user must hear of: a salvage at recovery)
            print(notices, file=sys.stderr)
        return 0
    if message.startswith(FAILED):
        child.wait()
        raise CliError(message[1:].decode("utf-8", "replace").strip())
    status = child.wait()
    raise CliError(f"the mount process exited with status {status} before serving"
                   + (f" (see {args.log_file})" if args.log_file else " (rerun with -f to see why)"))


def _read_until_eof(fd: int, timeout: float) -> bytes | None:
    """All bytes from ``fd`` until EOF, or None on timeout."""
    deadline = time.monotonic() + timeout
    chunks = []
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _setup_logging(level: str, log_file: str | None) -> None:
    handler: logging.Handler
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))


class _Reporter:
    """Tells the launcher (if any) how start-up went: READY + notices for stderr, or FAILED +
    text. Without a launcher (``--foreground``), notices go to stderr at once."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self.notices: list[str] = []

    def _send(self, data: bytes) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, data)
        except OSError:
            pass  # the launcher is gone; nothing to tell
        finally:
            os.close(self._fd)
            self._fd = None

    def ready(self) -> None:
        text = "".join(f"kfs: {line}\n" for line in self.notices)
        if self._fd is None and text:
            print(text, end="", file=sys.stderr)
        self._send(READY + text.encode("utf-8", "replace"))

    def failed(self, message: str) -> None:
        self._send(FAILED + message.encode("utf-8", "replace"))


@contextlib.contextmanager
def _capture_stderr(sink: list[str]):
    """Collect what C code (libfuse) prints on fd 2 while the block runs, and pass it on."""
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode("utf-8", "replace").strip()
            if text:
                sink.append(text)
                print(text, file=sys.stderr)


def describe_retention(log_, plan: list) -> str:
    """One line saying what ``plan`` (``Log.retention_plan``) deletes of ``log_``: segments,
    offsets, bytes and the rules."""
    doomed = [segment for segment, _ in plan]
    end = log_.log_segments()[len(doomed)].base_offset if len(doomed) < log_.segment_count \
        else log_.log_end_offset
    rules = ", ".join(dict.fromkeys(why for _, why in plan))
    size = sum(s.size for s in doomed)
    return (f"{log_.name}: {len(doomed)} of {log_.segment_count} segment(s), offsets "
            f"{log_.log_start_offset}-{end - 1} ({size} of {log_.size_in_bytes} bytes): {rules}")


def _retention_warnings(mgr) -> list[str]:
    """Before a writable mount's first retention pass: the partitions of which it would delete
    most (Kafka's rules applied to a directory the mount has not served before, e.g. data with
    old timestamps copied in), so that nobody is surprised."""
    warnings = []
    for name, plan in sorted(mgr.retention_plans().items()):
        log_ = mgr.get(name)
        if 2 * sum(s.size for s, _ in plan) > log_.size_in_bytes:
            warnings.append(f"retention will delete most of {describe_retention(log_, plan)} "
                            f"at its first pass, in log.retention.check.interval.ms="
                            f"{mgr.config.retention_check_interval_ms} ms (set retention.ms / "
                            "retention.bytes in <topic>.topic.properties to keep it)")
    for line in warnings:
        log.warning("%s", line)
    return warnings


def serve(backing: str, mountpoint: str, args: argparse.Namespace, separator: bytes) -> int:
    """Mount and serve until unmounted or signalled; returns the exit status."""
    _setup_logging(args.log_level, args.log_file)
    reporter = _Reporter(args.ready_fd)
    try:
        import pyfuse3
        import trio

        from storage import LogManager

        from .fs import KafkaFs
    except ImportError as exc:
        reporter.failed(f"cannot load kfs: {exc}")
        raise CliError(f"cannot load kfs: {exc}") from None

    try:
        mgr = LogManager(backing, read_only=args.read_only)
    except Exception as exc:  # noqa: BLE001 - any failure to open is reported as one line
        log.debug("opening %s failed", backing, exc_info=True)
        message = f"cannot open backing directory {backing}: {exc}"
        reporter.failed(message)
        raise CliError(message) from None

    reporter.notices.extend(mgr.notices)
    reporter.notices.extend(_retention_warnings(mgr))
    fs = KafkaFs(mgr, backing, read_only=args.read_only, key_separator=separator,
                 isolation_level=args.isolation_level)
    # The source column of mount/findmnt names the backing directory, as sshfs names user@host:path.
    options = set(pyfuse3.default_options) | {f"fsname={fsname_for(backing)}", "subtype=kfs",
                                               "noatime"}
    if args.read_only:
        options.add("ro")
    libfuse_said: list[str] = []
    try:
        with _capture_stderr(libfuse_said):
            pyfuse3.init(fs, mountpoint, options)
    except Exception as exc:  # noqa: BLE001
        mgr.close()
        detail = "; ".join(libfuse_said) or str(exc)
        message = f"cannot mount at {mountpoint}: {detail}"
        reporter.failed(message)
        raise CliError(message) from None

    log.info("serving %s at %s%s", backing, mountpoint, " (read-only)" if args.read_only else "")
    failed = True
    try:
        trio.run(_serve_loop, pyfuse3, reporter.ready,
                 None if args.read_only else (fs, mgr))
        failed = False
    except Exception:
        log.exception("the serve loop failed")
    finally:
        reporter.failed("the serve loop ended before it was ready")  # no-op once ready was sent
        fs.close_streams()
        pyfuse3.close(unmount=True)
        pending = fs.pending_partial_lines()
        if pending:
            log.warning("dropped %d bytes of partial lines from files still open at shutdown", pending)
        try:
            mgr.close()
        except Exception:  # noqa: BLE001 - report, and exit non-zero
            log.exception("closing the logs failed")
            failed = True
        log.info("unmounted %s", mountpoint)
    return 1 if failed else 0


async def _serve_loop(pyfuse3, ready: Callable[[], None], writer) -> None:
    """Serve until unmounted or signalled; ``writer`` is (fs, manager) of a writable mount,
    whose background jobs (retention, flush, checkpoints) run alongside."""
    import trio

    from .scheduler import start_jobs

    # Catch the signals before announcing readiness, so a prompt SIGTERM still unmounts cleanly.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_terminate_on_signal, pyfuse3, signals)
            if writer is not None:
                start_jobs(nursery, *writer)
            ready()
            await pyfuse3.main()  # returns on fusermount3 -u or after terminate()
            nursery.cancel_scope.cancel()


async def _terminate_on_signal(pyfuse3, signals) -> None:
    async for signum in signals:
        log.info("received %s, unmounting", signal.Signals(signum).name)
        pyfuse3.terminate()
        return
