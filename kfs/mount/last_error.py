"""``user.kfs.last_error`` and ``kfs last-error PATH...``: the last write a mount refused in a
partition, where a shell user can read it.

A shell ignores the error of a redirection's ``close()`` (bash's ``printf 'x' >> append``
exits 0 when the mount refuses the last line, stored at close, or a partial batch), so the
mount keeps the text of each partition's last refused write (the line its log has, and why)
as the partition directory's ``user.kfs.last_error`` attribute, for the mount's lifetime;
``kfs last-error`` prints it (``getfattr -n user.kfs.last_error --only-values DIR`` too).
"""

from __future__ import annotations

import argparse
import errno
import os
import datetime
from pathlib import Path

from storage.clock import SYSTEM_CLOCK

from kfs.args import CliError

LAST_ERROR_XATTR = b"user.kfs.last_error"
_PARTITION_XATTR = b"user.kafka.logEndOffset"  # what only a mount's partition directory has


def stamped(text: str) -> bytes:
    """``text`` after the UTC time it happened (ISO-8601, milliseconds), as the xattr holds
    it."""
    now = datetime.datetime.fromtimestamp(SYSTEM_CLOCK.milliseconds() / 1000, datetime.timezone.utc)
    when = now.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return f"{when} {text}".encode("utf-8", "replace")


def add_parser(sub) -> None:
    """Register ``kfs last-error``."""
    cmd = sub.add_parser(
        "last-error",
        help="print the last write a kfs mount refused in a partition",
        description=("Print the last write the mount refused in each partition PATH is in (a "
                     "partition directory of a kfs mount or a file in it; a mount's root: "
                     "every partition with a refused write), with its time and why, as the "
                     "partition's user.kfs.last_error attribute holds it. A shell does not "
                     "report an error at close (a last line without a newline, a partial "
                     "batch): this does. Prints nothing for a partition without one."),
    )
    cmd.add_argument("paths", metavar="PATH", nargs="+")
    cmd.set_defaults(func=cmd_last_error)


def cmd_last_error(args: argparse.Namespace) -> int:
    for path in args.paths:
        for partition in _partitions(Path(path)):
            text = _xattr(partition, LAST_ERROR_XATTR)
            if text is not None:
                print(f"{partition}: {text.decode('utf-8', 'replace')}")
    return 0


def _partitions(path: Path) -> list[Path]:
    """The partition directory ``path`` is (or is in), else the partitions right under it
    (a mount's root); CliError when there are none."""
    if not path.exists():
        raise CliError(f"{path} does not exist")
    for candidate in (path, *path.parents):
        if _xattr(candidate, _PARTITION_XATTR) is not None:
            return [candidate]
        if os.path.ismount(candidate):
            break
    found = []
    if path.is_dir():
        found = [p for p in sorted(path.iterdir())
                 if p.is_dir() and _xattr(p, _PARTITION_XATTR) is not None]
    if not found:
        raise CliError(f"{path} is not in a partition directory of a kfs mount, nor holds one")
    return found


def _xattr(path: Path, name: bytes) -> bytes | None:
    try:
        return os.getxattr(path, name)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.ENOENT, errno.ENOTDIR,
                         errno.EACCES, errno.EPERM):
            return None
        raise CliError(f"{path}: {exc.strerror}") from None
