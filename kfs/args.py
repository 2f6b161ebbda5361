"""What every ``kfs`` sub-command shares: the user-facing error, argparse types for backing
directories and positive numbers, stdout for piped output, and the yes/no question."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import signal
import sys
from typing import Callable, TextIO


class CliError(Exception):
    """A user-facing failure: printed as ``kfs: error: <message>``, exit status 1."""


def existing_directory(text: str) -> str:
    """An argparse type: a backing directory that exists (one message and status 2 for a bad
    path, whichever command was given it)."""
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"backing directory {text} does not exist")
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"backing directory {text} is not a directory")
    return text


def directory_or_uri(text: str) -> str:
    """An argparse type: an object store's URI as given, else a backing directory that
    exists."""
    from storage.location import Location

    return text if Location.parse(text).is_remote else existing_directory(text)


def add_store_arguments(parser: argparse.ArgumentParser, remote_path: str | None) -> None:
    """``--endpoint``, ``--region`` (how to reach an object store, as Spark's ``endpoint``
    and ``region`` options) and ``--remote-config`` (Spark's ``remote.config``), and with ``remote_path`` (its help) ``--remote-path``: the options
    every command that opens a log directory takes (``storage.directory``)."""
    if remote_path is not None:
        parser.add_argument("--remote-path", metavar="URI", help=remote_path)
    parser.add_argument("--endpoint", metavar="URL",
                        help="an S3-compatible store's endpoint (http[s]://host:port), over "
                             "the environment's (AWS_ENDPOINT_URL)")
    parser.add_argument("--region", metavar="NAME",
                        help="an S3 store's region, over the environment's (AWS_REGION)")
    parser.add_argument("--remote-config", metavar="FILE",
                        help="the broker's properties (its server.properties, or a file with "
                             "the same keys): which RemoteStorageManager wrote the remote tier "
                             "(Aiven's tiered-storage plugin or LocalTieredStorage), where it "
                             "is (rsm.config.*; --remote-path overrides) and its key ring")


def store_options(args: argparse.Namespace):
    """The ``storage.directory.StoreOptions`` of :func:`add_store_arguments`'s options."""
    from storage.directory import StoreOptions

    return StoreOptions(endpoint=args.endpoint, region=args.region,
                        remote_config=args.remote_config)


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


positive_int = _positive(int, "an integer")
positive_float = _positive(float, "a number")

def with_stdout(run: Callable[[TextIO], int]) -> int:
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

def confirm(out: TextIO, question: str) -> bool:
    """A yes from the user on a terminal; False when stdin or stdout is not one."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return False
    out.write(question)
    out.flush()
    try:
        return input().strip().lower() in ("y", "yes")
    except EOFError:
        return False



def count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"

