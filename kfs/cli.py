"""``kfs`` command line: argparse and dispatch only. Each sub-command's module registers it
(``add_parser``) and runs it: ``kfs mount`` / ``kfs umount`` (``kfs.mount.command``), and the
offline tools of ``kfs.tools``: ``retention``, ``dump`` (``kafka-dump-log``), ``verify``,
``transactions`` (``kafka-transactions.sh``), ``compact`` (the log cleaner, now),
``adopt`` and ``export`` (Parquet); ``last-error`` (``kfs.mount.last_error``). Only the module of the command given is imported (all of them for ``kfs --help``),
so a command starts without loading the others.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys

from .args import CliError

INTERRUPTED = 128 + signal.SIGINT  # a command ended by Ctrl-C, as shells report it (130)

# sub-command -> the module that registers and runs it, in the order --help lists them
COMMANDS = {
    "mount": "kfs.mount.command", "umount": "kfs.mount.command",
    "retention": "kfs.tools.retention", "dump": "kfs.tools.dump", "verify": "kfs.tools.verify",
    "transactions": "kfs.tools.transactions", "compact": "kfs.tools.compact",
    "adopt": "kfs.tools.adopt", "export": "kfs.tools.export",
    "last-error": "kfs.mount.last_error",
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``kfs``, with every sub-command, or only ``command``'s when it is one."""
    parser = argparse.ArgumentParser(
        prog="kfs",
        description="Kafka partition logs (Apache Kafka's own on-disk format) as plain files.",
    )
    parser.add_argument("--version", action=_Version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    modules = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    for module in dict.fromkeys(modules):
        importlib.import_module(module).add_parser(sub)
    return parser


class _Version(argparse.Action):
    """``--version``: the installed package's version, looked up only when asked for."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, help="show program's version number and exit")

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib.metadata import PackageNotFoundError, version
        try:
            text = version("kfs")
        except PackageNotFoundError:  # run from a checkout without an install
            text = "(not installed)"
        print(f"{parser.prog} {text}")
        parser.exit()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``kfs`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
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
    except KeyboardInterrupt:  # Ctrl-C: one line, and the status of a shell's interrupted job
        print(f"kfs {args.command}: interrupted", file=sys.stderr)
        return INTERRUPTED
