"""``kfs retention BACKING_DIR [--yes]``: what retention.ms / retention.bytes (and log start
offsets) no longer keep, as a broker's retention check would delete it; deleted with ``--yes``
or a yes on a terminal, each plan in ``storage.log_retention``'s words (the mount's too)."""

from __future__ import annotations

import argparse
import sys

from kfs.args import CliError, confirm, existing_directory
from storage.log_retention import describe_retention_plan


def add_parser(sub) -> None:
    retention = sub.add_parser(
        "retention",
        help="apply retention.ms / retention.bytes now",
        description=(
            "Say which segments of BACKING_DIR retention.ms / retention.bytes (and log start "
            "offsets) no longer keep, as a broker's retention check would delete them, and "
            "with --yes (or a yes on a terminal) delete them and print what moved. A running "
            "mount already does this every log.retention.check.interval.ms. The plan is read "
            "only (it is printed beside a mount or a broker too); deleting takes the "
            "directory's lock, so it runs while no writer has the directory."),
    )
    retention.add_argument("backing_dir", metavar="BACKING_DIR", type=existing_directory)
    retention.add_argument("--yes", action="store_true",
                           help="delete without asking (default: print the plan only)")
    retention.set_defaults(func=run)


def _open(backing_dir, read_only: bool):
    from storage.directory import open_log_directory
    from storage.errors import KafkaStorageError
    try:
        return open_log_directory(backing_dir, read_only=read_only)
    except (KafkaStorageError, OSError) as exc:
        raise CliError(str(exc)) from None


def _print_plan(mgr) -> bool:
    """Print what retention would delete now; False when nothing."""
    plans = mgr.retention_plans()
    if not plans:
        print("retention deletes nothing now")
        return False
    print("retention would delete (nothing has changed yet):")
    for name, plan in sorted(plans.items()):
        print(f"  {describe_retention_plan(mgr.get(name), plan)}")
    return True


def run(args: argparse.Namespace) -> int:
    from storage.file_lock import held_elsewhere

    if not args.yes:  # the plan changes nothing: read-only, beside a mount or a broker too
        mgr = _open(args.backing_dir, read_only=True)
        try:
            if not _print_plan(mgr):
                return 0
        finally:
            mgr.close()
        if held_elsewhere(args.backing_dir):
            print(f"nothing changed: {args.backing_dir} is in use by another writer (a kfs "
                  "mount or a Kafka broker holds its .lock), which applies retention itself "
                  "every log.retention.check.interval.ms; run with --yes once it has stopped "
                  "to delete now")
            return 0
        if not confirm(sys.stdout, "delete now? [y/N] "):
            print("nothing changed: run with --yes to delete")
            return 0
    mgr = _open(args.backing_dir, read_only=False)
    try:
        if args.yes and not _print_plan(mgr):
            return 0
        before = {n: mgr.get(n).log_start_offset for n in mgr.partition_names()}
        for name, count in sorted(mgr.cleanup_logs().items()):
            print(f"{name}: deleted {count} segment(s); log start offset"
                  f" {before[name]} -> {mgr.get(name).log_start_offset}")
    finally:
        mgr.close()
    return 0
