"""``kfs compact BACKING_DIR [PARTITION...] [--now-ms MS]``: one cleaning pass of Kafka's log
cleaner over each compacted partition (``cleanup.policy`` with ``compact``), now rather than
when the mount's cleaner gets to it, whatever its dirty ratio.

It takes the directory's lock (run it unmounted, or beside a ``--read-only`` mount), shows a
progress bar on a terminal, and prints LogCleaner's summary of each pass. ``--now-ms`` fixes
the clock of the whole command (producer expiry when the logs load, delete horizons and the
compaction lags of the pass, retention of ``compact,delete`` logs), so that a run can be held to
Kafka's own cleaner run with the same clock.
"""

from __future__ import annotations

import argparse
import sys
from kfs.args import existing_directory

PROGRESS_BYTES = 1 << 30  # a progress bar even off a terminal from this many bytes on


def add_parser(sub) -> None:
    p = sub.add_parser(
        "compact",
        help="clean compacted partitions now, as Kafka's log cleaner does",
        description=(
            "Run one pass of Kafka's log cleaner over each partition of BACKING_DIR whose "
            "cleanup.policy contains compact (all, or the PARTITIONs named): keep the latest "
            "record of each key below the first uncleanable offset, drop aborted transactions' "
            "records and expired tombstones, swap the cleaned segments in. Takes the "
            "directory's lock: run it unmounted or beside a --read-only mount. Exit status: 0 "
            "done, 1 a partition could not be cleaned, 2 usage error."),
    )
    p.add_argument("backing_dir", metavar="BACKING_DIR", type=existing_directory)
    p.add_argument("partitions", metavar="PARTITION", nargs="*",
                   help="partitions to clean, e.g. orders-0 (default: every compacted one)")
    p.add_argument("--now-ms", type=int, metavar="MS",
                   help="the clock of the run, epoch ms (default: the system clock)")
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar on stderr (default: when stderr is a terminal "
                        "or there is more than 1 GiB to clean)")
    p.set_defaults(func=main, more_positionals="partitions")


def main(args: argparse.Namespace) -> int:
    from storage.directory import open_log_directory
    from storage.clock import SYSTEM_CLOCK, FixedClock
    from storage.errors import KafkaStorageError

    try:
        clock = SYSTEM_CLOCK if args.now_ms is None else FixedClock(args.now_ms)
        mgr = open_log_directory(args.backing_dir, read_only=False, clock=clock)
    except (KafkaStorageError, OSError) as exc:
        print(f"kfs compact: error: {exc}", file=sys.stderr)
        return 1
    try:
        names = args.partitions or [n for n in mgr.partition_names()
                                    if mgr.get(n).config.compact]
        unknown = [n for n in names if n not in mgr.partition_names()]
        if unknown:
            print(f"kfs compact: error: no partition {', '.join(unknown)} in {args.backing_dir}",
                  file=sys.stderr)
            return 2
        if not names:
            print(f"kfs compact: no partition of {args.backing_dir} has cleanup.policy=compact: "
                  "nothing to clean", file=sys.stderr)
            return 0
        return _clean_all(mgr, names, args)
    finally:
        mgr.close()


def _clean_all(mgr, names: list[str], args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from storage.log_cleaner import for_log_manager, stats_message

    cleaner = for_log_manager(mgr)
    now = mgr.clock.milliseconds()
    for name in names:
        mgr.get(name).remove_expired_producers(now)
    total = sum(_work_bytes(cleaner, mgr.get(n), now) for n in names if mgr.get(n).config.compact)
    show = args.progress if args.progress is not None else (
        sys.stderr.isatty() or total > PROGRESS_BYTES)
    failed = 0
    with tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="compact",
              disable=not show, file=sys.stderr, leave=False) as bar:
        for name in names:
            try:
                result = cleaner.clean_log(name, now, bar.update)
                if mgr.get(name).config.deletes:
                    mgr.get(name).delete_old_segments(now)
            except Exception as exc:  # noqa: BLE001 - each partition's failure is one line
                failed += 1
                tqdm.write(f"kfs compact: {name}: not cleaned: {exc}", file=sys.stderr)
                continue
            text = (stats_message(result) if result is not None
                    else f"{name}: nothing to clean (no segment below the first uncleanable "
                         "offset is dirty)")
            tqdm.write(text, file=sys.stdout)
    mgr.checkpoint_log_start_offsets()
    return 1 if failed else 0


def _work_bytes(cleaner, log_, now: int) -> int:
    """The bytes a pass reads, about: the dirty section to map, the segments to recopy."""
    ltc = cleaner.manager.log_to_clean(log_, now)
    return ltc.cleanable_bytes + ltc.clean_bytes + ltc.cleanable_bytes
