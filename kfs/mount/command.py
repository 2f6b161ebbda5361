"""``kfs mount`` and ``kfs umount``: the checks a mountpoint and a backing directory must pass,
a stale mount of a killed kfs process cleared, and the wait for a kfs process still closing its
logs. Serving is ``kfs.mount.daemon``'s.
"""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys

from storage.clock import SYSTEM_CLOCK
from storage.isolation import IsolationLevel
from storage.location import Location

from kfs.args import CliError, add_store_arguments, positive_float
from kfs.mount_table import FSTYPE, alive, mounted_at, mounts_at, serving_processes

from .append import parse_separator

LOG_LEVELS = ("debug", "info", "warning", "error")

CLOSE_WAIT_S = 60.0  # how long mount and umount wait for a kfs process to finish closing
_POLL_S = 0.05


def add_parser(sub) -> None:
    """Register ``kfs mount`` and ``kfs umount``."""
    mount = sub.add_parser(
        "mount",
        help="mount a backing directory of Kafka partition directories",
        description=(
            "Mount BACKING_DIR (a Kafka log directory: <topic>-<N> partition directories; "
            "--create makes a new one) at MOUNTPOINT, an empty directory (a stale kfs mount "
            "left there by a killed kfs process is unmounted first). Returns once the mount "
            "serves; the file system keeps running in the background until `kfs umount "
            "MOUNTPOINT` (or `fusermount3 -u`, or SIGTERM); --log-file says where it logs."
        ),
    )
    mount.add_argument("backing_dir", metavar="BACKING_DIR", nargs="?")
    mount.add_argument("mountpoint", metavar="MOUNTPOINT", nargs="?")
    mount.add_argument("-f", "--foreground", action="store_true",
                       help="serve in the foreground (Ctrl-C or fusermount3 -u ends it)")
    mount.add_argument("--read-only", action="store_true",
                       help="mount read-only: nothing on disk changes (mkdir and appends get EROFS)")
    mount.add_argument("--create", action="store_true",
                       help="create BACKING_DIR (and its parents) when it does not exist "
                            "(without it, a missing BACKING_DIR is refused: a mistyped path "
                            "is not made)")
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
    mount.add_argument("--isolation-level", choices=IsolationLevel.names(),
                       default="read_uncommitted",
                       help="as Kafka's consumer isolation.level: read_committed hides records "
                            "of aborted transactions and everything at or past the last stable "
                            "offset (default: read_uncommitted, every record but markers)")
    add_store_arguments(mount, "with --read-only: the tiered storage root (RemoteStorageManager's: "
                               "LocalTieredStorage's, holding kafka-tiered-storage/, or with "
                               "--remote-config the one the broker's properties configure) of the "
                               "broker log directory BACKING_DIR: each partition serves its remote "
                               "segments below the local log, then the local log (as Spark's "
                               "remote.path)")
    mount.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help="with --read-only, instead of BACKING_DIR: the live cluster at "
                            "HOST:PORT (a comma-separated list, as Kafka's tools take it): "
                            "every partition of its topics, each its remote tier "
                            "(--remote-path or --remote-config) straight from the object "
                            "store, the offsets after it through the brokers; MOUNTPOINT is "
                            "then the only argument")
    mount.add_argument("--command-config", metavar="FILE",
                       help="with --bootstrap-server: the client's properties "
                            "(security.protocol, sasl.mechanism, sasl.jaas.config, ...), as "
                            "Kafka's tools take them: secrets stay out of the command line")
    mount.add_argument("--ready-fd", type=int, help=argparse.SUPPRESS)
    mount.add_argument("--backing-fd", type=int, help=argparse.SUPPRESS)  # (daemon.py)
    mount.set_defaults(func=cmd_mount)

    umount = sub.add_parser(
        "umount",
        help="unmount a kfs mount and wait until its logs are closed",
        description=("Unmount MOUNTPOINT (fusermount3 -u) and return once the kfs process "
                     "serving it has closed every log and exited, so the backing directory "
                     "can be mounted again at once."),
    )
    umount.add_argument("mountpoint", metavar="MOUNTPOINT")
    umount.add_argument("--timeout", type=positive_float, default=CLOSE_WAIT_S, metavar="SECONDS",
                        help=f"how long to wait for the close (default {CLOSE_WAIT_S:g})")
    umount.set_defaults(func=cmd_umount)


def cmd_mount(args: argparse.Namespace) -> int:
    from . import daemon

    try:
        separator = parse_separator(args.key_separator)
    except ValueError as exc:
        raise CliError(f"--key-separator: {exc}") from None
    _check_positionals(args)
    if args.backing_fd is not None:  # (the serving process of a URI: argv has it redacted)
        args.backing_dir, args.remote_path = daemon.read_backing_location(args.backing_fd)
    try:
        backing, mountpoint = _checked_paths(args)
    except CliError as exc:
        if args.ready_fd is not None:  # (the background serving process: the launcher may be gone)
            daemon.report_refused_start(args.backing_dir, os.path.abspath(args.mountpoint),
                                        args, str(exc))
        raise
    if args.foreground:
        return daemon.serve(backing, mountpoint, args, separator)
    return daemon.launch_background(backing, mountpoint, args)


def cluster_location(bootstrap_servers: str) -> str:
    """How a mount of the cluster at ``bootstrap_servers`` is named (its fsname, its log)."""
    return f"kafka://{bootstrap_servers}"


def _check_positionals(args: argparse.Namespace) -> None:
    """BACKING_DIR and MOUNTPOINT, or MOUNTPOINT alone with --bootstrap-server (the cluster
    then stands for BACKING_DIR); CliError otherwise."""
    if args.bootstrap_server is None:
        if args.command_config is not None:
            raise CliError("--command-config is for a cluster's mount (--bootstrap-server)")
        if args.mountpoint is None:
            raise CliError("the following arguments are required: BACKING_DIR MOUNTPOINT")
        return
    if args.mountpoint is not None:
        raise CliError("--bootstrap-server mounts a live cluster: give MOUNTPOINT alone, "
                       "not a BACKING_DIR")
    if args.backing_dir is None:
        raise CliError("the following arguments are required: MOUNTPOINT")
    if not args.read_only:
        raise CliError("a live cluster is mounted --read-only (kfs reads a cluster, it does "
                       "not produce to it)")
    args.mountpoint, args.backing_dir = args.backing_dir, cluster_location(args.bootstrap_server)


def _checked_paths(args: argparse.Namespace) -> tuple[str, str]:
    """``(backing, mountpoint)`` of ``kfs mount`` once they passed every check (a stale mount
    cleared, a closing process waited for, a directory ``--create`` made); CliError."""
    mountpoint = os.path.abspath(args.mountpoint)
    _clear_stale_mount(mountpoint)
    where = Location.parse(args.backing_dir)
    if not args.read_only and (where.is_remote or args.remote_path or args.remote_config):
        tier = where if where.is_remote else Location.parse(args.remote_path
                                                            or args.remote_config)
        raise CliError(f"{tier.display}: an object "
                       "store or remote tier is mounted --read-only (kfs reads object storage, "
                       "it does not write it)")
    backing = where.text if where.is_remote else os.path.abspath(where.text)
    if not where.is_remote:
        check_paths(backing, mountpoint, args.read_only, args.create)
    check_mountpoint_free(mountpoint)
    if not args.read_only:
        _wait_for_closing(backing)
    if args.create and not where.is_remote and not os.path.exists(backing):
        try:
            os.makedirs(backing)
        except OSError as exc:
            raise CliError(f"cannot create backing directory {backing}: {exc.strerror}") from None
    return backing, mountpoint


def _wait_for(pids: list[int], timeout_s: float) -> list[int]:
    """Wait until every process of ``pids`` has exited (at most ``timeout_s``); the ones still
    running."""
    deadline = SYSTEM_CLOCK.monotonic() + timeout_s
    while (left := [p for p in pids if alive(p)]) and SYSTEM_CLOCK.monotonic() < deadline:
        SYSTEM_CLOCK.sleep(_POLL_S)
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
    its logs and exited (so the backing directory can be mounted again at once). CliError when
    that close failed (a full disk), with the process's own line (``close_report_file``)."""
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
    from .daemon import close_report_file

    for pid in pids:  # a process whose close failed says so
        try:
            with open(close_report_file(pid)) as f:
                failure = f.read().strip()
            os.unlink(close_report_file(pid))
        except OSError:
            continue
        raise CliError(f"unmounted {mountpoint}, but {failure}")
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


def check_paths(backing: str, mountpoint: str, read_only: bool, create: bool = False) -> None:
    """CliError with a clear message for paths that cannot work; a missing backing directory
    only passes with ``create`` (a writable mount makes it)."""
    if not os.path.exists(mountpoint):
        raise CliError(f"mountpoint {mountpoint} does not exist")
    if not os.path.isdir(mountpoint):
        raise CliError(f"mountpoint {mountpoint} is not a directory")
    real_backing, real_mnt = os.path.realpath(backing), os.path.realpath(mountpoint)
    if os.path.commonpath([real_backing, real_mnt]) == real_mnt:
        # The daemon would read its own mount and deadlock.
        raise CliError(f"backing directory {backing} must not be the mountpoint or inside it")
    if os.path.commonpath([real_backing, real_mnt]) == real_backing:
        # The same: the mount would show itself as a partition (DIR/loop-0) and wait on itself.
        raise CliError(f"mountpoint {mountpoint} must not be inside the backing directory "
                       f"{backing}")
    if os.path.exists(backing):
        if not os.path.isdir(backing):
            raise CliError(f"backing directory {backing} is not a directory")
    elif read_only:
        raise CliError(f"backing directory {backing} does not exist (and --read-only cannot create it)")
    elif not create:
        raise CliError(f"backing directory {backing} does not exist (--create makes a new one)")

