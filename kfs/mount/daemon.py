"""The kfs process that serves a mount: ``launch_background`` starts it detached (as sshfs does)
and returns once it reports on a pipe that the mount serves, or why not; ``serve`` opens the
backing directory, mounts (``pyfuse3.init``) and runs the trio loop with the writable mount's
background jobs until ``fusermount3 -u`` or SIGTERM/SIGINT/SIGHUP, then closes every log as
Kafka's clean shutdown does.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import logging
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
from typing import Callable

from kfs.args import CliError, store_options
from kfs.mount_table import fsname_for
from storage.clock import SYSTEM_CLOCK
from storage.isolation import IsolationLevel
from storage.location import Location
from storage.log_retention import describe_retention_plan

log = logging.getLogger("kfs")

READY = b"R"
FAILED = b"E"
# How long the background launcher waits for the mount to serve before giving up.
READY_TIMEOUT_S = 120.0


def _child_command(backing: str, mountpoint: str, args: argparse.Namespace, ready_fd: int,
                   backing_fd: int | None = None) -> list[str]:
    """The serving process's argv. With ``backing_fd``, the backing location and the remote
    tier's are read from that descriptor and argv names them redacted: argv is any user's to
    read (``ps``), and a URI may carry credentials."""
    cmd = [sys.executable, "-m", "kfs", "mount", "--foreground", f"--ready-fd={ready_fd}",
           f"--log-level={args.log_level}", f"--key-separator={args.key_separator}",
           f"--isolation-level={args.isolation_level}"]
    if args.read_only:
        cmd.append("--read-only")
    remote_path = args.remote_path
    if backing_fd is not None:
        cmd.append(f"--backing-fd={backing_fd}")
        backing = Location.parse(backing).display
        remote_path = remote_path and Location.parse(remote_path).display
    remote_config = args.remote_config and os.path.abspath(args.remote_config)  # (cwd is /)
    command_config = args.command_config and os.path.abspath(args.command_config)
    for option, value in (("remote-path", remote_path), ("endpoint", args.endpoint),
                          ("region", args.region), ("remote-config", remote_config),
                          ("bootstrap-server", args.bootstrap_server),
                          ("command-config", command_config)):
        if value:
            cmd.append(f"--{option}={value}")
    if args.log_file:
        cmd.append(f"--log-file={os.path.abspath(args.log_file)}")
    # (a cluster's mount: MOUNTPOINT alone, the cluster standing for the backing directory)
    return cmd + ["--", *(() if args.bootstrap_server else (backing,)), mountpoint]


def read_backing_location(fd: int) -> tuple[str, str | None]:
    """(the backing location, the remote tier's or None) the launcher wrote to inherited
    descriptor ``fd`` (read to EOF, then closed)."""
    with os.fdopen(fd, "rb") as f:
        backing, _, remote = os.fsdecode(f.read()).partition("\0")
    return backing, remote or None


def close_report_file(pid: int) -> str:
    """Where serving process ``pid`` leaves one line when closing its logs failed, for ``kfs
    umount`` to print (it cannot see that process's exit status): in ``$XDG_RUNTIME_DIR``,
    else the temporary directory."""
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if not (os.path.isabs(runtime) and os.path.isdir(runtime)):
        runtime = tempfile.gettempdir()
    return os.path.join(runtime, f"kfs-{os.getuid()}-close-{pid}.txt")


def _report_close_failure(text: str) -> None:
    """Leave ``text`` in this process's close_report_file (atomically: a reader sees all of
    it or nothing)."""
    path = close_report_file(os.getpid())
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".kfs-close-")
        with os.fdopen(fd, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, path)
    except OSError:
        log.warning("cannot leave the close failure for kfs umount in %s", path)


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
            os.makedirs(os.path.dirname(args.log_file), mode=0o700, exist_ok=True)
        except OSError as exc:
            print(f"kfs: the mount's log is discarded: cannot create "
                  f"{os.path.dirname(args.log_file)}: {exc.strerror} (see --log-file)",
                  file=sys.stderr)
            args.log_file = None
    if args.log_file:  # (made here, so that the path said exists from the start, or said why not)
        try:
            _create_private(args.log_file)
        except OSError as exc:
            raise CliError(f"cannot create the log file {args.log_file}: {exc.strerror}") from None
    read_fd, write_fd = os.pipe()
    env = dict(os.environ)
    # The child must import this very kfs (and storage) even when it is not installed.
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
    # a URI (it may carry credentials) goes to the child through a pipe, never in its argv
    uris = [Location.parse(p).is_remote for p in (backing, args.remote_path) if p]
    location_fd, location_w = os.pipe() if any(uris) else (None, None)
    try:
        child = subprocess.Popen(
            _child_command(backing, mountpoint, args, write_fd, location_fd),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            pass_fds=tuple(fd for fd in (write_fd, location_fd) if fd is not None),
            start_new_session=True, cwd="/", env=env,
        )
    finally:
        os.close(write_fd)
        if location_fd is not None:
            os.close(location_fd)
    if location_w is not None:
        with contextlib.suppress(BrokenPipeError), os.fdopen(location_w, "wb") as f:
            f.write(os.fsencode(backing + "\0" + (args.remote_path or "")))
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
    deadline = SYSTEM_CLOCK.monotonic() + timeout
    chunks = []
    while True:
        remaining = deadline - SYSTEM_CLOCK.monotonic()
        if remaining <= 0:
            return None
        readable, _, _ = select.select([fd], [], [], remaining)
        if not readable:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _create_private(path: str) -> None:
    """Create the log file ``path`` readable by its owner alone (0600: it names partitions,
    records' offsets and refused lines); an existing file keeps its mode."""
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600))


def _setup_logging(level: str, log_file: str | None, started: str = "") -> None:
    """Log at ``level`` and up to ``log_file`` (else stderr); a log file gets the line
    ``started`` first, whatever the level, so it shows from the start which mount it is of."""
    handler: logging.Handler
    if log_file:
        with contextlib.suppress(OSError):  # (FileHandler says why it cannot)
            _create_private(log_file)
    handler = logging.FileHandler(log_file) if log_file else logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper()))
    if log_file and started:
        handler.handle(log.makeRecord(log.name, logging.INFO, __file__, 0, started, None, None))


class _Reporter:
    """Tells the launcher (if any) how start-up went: READY + notices for stderr, or FAILED +
    text. Without a launcher (``--foreground``), notices go to stderr at once. A failure is
    logged too when there is a log file (``logs``): the launcher may be gone, and the log is
    where the user looks."""

    def __init__(self, fd: int | None, logs: bool = False) -> None:
        self._fd = fd
        self._logs = logs
        self._settled = False
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
        self._settled = True
        text = "".join(f"kfs: {line}\n" for line in self.notices)
        if self._fd is None and text:
            print(text, end="", file=sys.stderr)
        self._send(READY + text.encode("utf-8", "replace"))

    def failed(self, message: str) -> None:
        """Report that start-up failed (nothing once it was reported ready or failed)."""
        if self._settled:
            return
        self._settled = True
        if self._logs:
            log.error("%s", message)
        self._send(FAILED + message.encode("utf-8", "replace"))


def _start_logging(backing: str, mountpoint: str, args: argparse.Namespace) -> None:
    """Logging set up for the serving process, its first line naming the mount."""
    _setup_logging(args.log_level, args.log_file,
                   f"mounting {Location.parse(backing).display} at {mountpoint}"
                   f"{' (read-only)' if args.read_only else ''}; logging {args.log_level} and up")


def report_refused_start(backing: str, mountpoint: str, args: argparse.Namespace,
                         message: str) -> None:
    """The background serving process refused to start before serving (a check of ``kfs
    mount`` failed in it, e.g. the mountpoint was filled meanwhile): say why in its log and to
    its launcher, which may be gone."""
    _start_logging(backing, mountpoint, args)
    _Reporter(args.ready_fd, logs=bool(args.log_file)).failed(message)


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


def _retention_warnings(mgr) -> list[str]:
    """Before a writable mount's first retention pass: the partitions of which it would delete
    most (Kafka's rules applied to a directory the mount has not served before, e.g. data with
    old timestamps copied in), so that nobody is surprised."""
    warnings = []
    for name, plan in sorted(mgr.retention_plans().items()):
        log_ = mgr.get(name)
        if 2 * sum(s.size for s, _ in plan) > log_.segments.size_in_bytes:
            warnings.append(f"retention will delete most of {describe_retention_plan(log_, plan)} "
                            f"at its first pass, in log.retention.check.interval.ms="
                            f"{mgr.config.retention_check_interval_ms} ms (set retention.ms / "
                            "retention.bytes in <topic>.topic.properties to keep it)")
    for line in warnings:
        log.warning("%s", line)
    return warnings


def serve(backing: str, mountpoint: str, args: argparse.Namespace, separator: bytes) -> int:
    """Mount and serve until unmounted or signalled; returns the exit status."""
    _start_logging(backing, mountpoint, args)
    with contextlib.suppress(OSError):  # (an earlier process's, with this pid)
        os.unlink(close_report_file(os.getpid()))
    reporter = _Reporter(args.ready_fd, logs=bool(args.log_file))
    try:
        import pyfuse3
        import trio

        from .operations import KafkaFs
    except ImportError as exc:
        reporter.failed(f"cannot load kfs: {exc}")
        raise CliError(f"cannot load kfs: {exc}") from None

    try:
        mgr = _open_backing(backing, args)
    except Exception as exc:  # noqa: BLE001 - any failure to open is reported as one line
        log.debug("opening %s failed", backing, exc_info=True)
        display = Location.parse(backing).display
        said = str(exc)
        if not said.startswith(display):  # (an object store's error names its URI already)
            said = f"{display}: {said}"
        what = "the cluster" if args.bootstrap_server else "backing directory"
        message = f"cannot open {what} {said}"
        reporter.failed(message)
        raise CliError(message) from None

    reporter.notices.extend(mgr.notices)
    if not args.read_only:
        reporter.notices.extend(_retention_warnings(mgr))
    fs = KafkaFs(mgr, backing, read_only=args.read_only, key_separator=separator,
                 isolation=IsolationLevel.parse(args.isolation_level))
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

    log.info("serving %s at %s%s", Location.parse(backing).display, mountpoint,
             " (read-only)" if args.read_only else "")
    failed = True
    try:
        trio.run(_serve_loop, pyfuse3, reporter.ready,
                 None if args.read_only else (fs, mgr))
        failed = False
    except Exception:
        log.exception("the serve loop failed")
    finally:
        reporter.failed("the serve loop ended before it was ready")  # no-op once ready was sent
        fs.streams.close()
        pyfuse3.close(unmount=True)
        pending = fs.handles.pending_partial_lines()
        if pending:
            log.warning("dropped %d bytes of partial lines from files still open at shutdown", pending)
        try:
            mgr.close()
        except Exception as exc:  # noqa: BLE001 - report, and exit non-zero
            log.exception("closing the logs failed")
            failed = True
            _report_close_failure(
                f"closing the logs of {backing} failed ({exc}): no clean-shutdown marker was "
                "written, so the next mount recovers its partitions as after a crash"
                + (f" (see {args.log_file})" if args.log_file else ""))
        log.info("unmounted %s", mountpoint)
    return 1 if failed else 0


def _open_backing(backing: str, args: argparse.Namespace):
    """The log directory the mount serves: ``backing``, or the live cluster of
    ``--bootstrap-server`` (its client settings from ``--command-config``)."""
    from storage.directory import open_cluster_directory, open_log_directory

    if args.bootstrap_server is None:
        return open_log_directory(backing, read_only=args.read_only, remote=args.remote_path,
                                  options=store_options(args))
    settings = {}
    if args.command_config is not None:
        from storage.config import read_properties

        if not os.path.isfile(args.command_config):
            raise FileNotFoundError(f"--command-config {args.command_config}: no such file")
        settings = read_properties(args.command_config)
    settings["bootstrap.servers"] = args.bootstrap_server
    return open_cluster_directory(settings, remote=args.remote_path,
                                  options=store_options(args),
                                  isolation=IsolationLevel.parse(args.isolation_level))


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
