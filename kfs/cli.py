"""``kfs`` command line: argparse and dispatch only. Each sub-command registers itself:
``kfs mount`` / ``kfs umount`` (``kfs.mount.command``), and the offline tools of
``kfs.tools``: ``dump`` (``kafka-dump-log``), ``verify``, ``retention``, ``transactions``
(``kafka-transactions.sh``), ``compact`` (the log cleaner, now) and ``adopt``.
"""

from __future__ import annotations

import argparse
import sys

from .args import CliError
from .mount import command as mount_command
from .tools import adopt, compact, dump, retention, transactions, verify


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kfs",
        description="Kafka partition logs (Apache Kafka's own on-disk format) as plain files.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    mount_command.add_parsers(sub)
    for tool in (retention, dump, verify, transactions, compact, adopt):
        tool.add_parser(sub)
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("kfs")
    except PackageNotFoundError:  # run from a checkout without an install
        return "(not installed)"


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
