"""Shared fixtures.

``mount``: a factory that mounts a backing directory through the real CLI in background mode
(``python -m kfs mount ...``, so every use also proves the command returns only once the mount
serves) and ALWAYS unmounts in teardown: ``fusermount3 -u``, then ``-uz``, then the daemon is
ended by its pid.

What a test needs beyond the checkout is declared per test, so a missing piece skips only the
tests that need it, never a whole module:

* ``@pytest.mark.fuse``: a real FUSE mount (``/dev/fuse`` and ``fusermount3``); every test
  using the ``mount`` fixture gets this mark by itself;
* ``@pytest.mark.needs_fixture("kafka-written/txn-0", ...)``: directories or files under
  ``tests/fixtures`` (``FIXTURES_ROOT``), the data Kafka's own code wrote;
* ``@pytest.mark.root``: root (the ``small_disk`` fixture asks for it itself).

Under CI (environment variable ``CI=true``) a missing requirement fails the test instead: a CI
run never passes by skipping.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import pytest

from kafka_broker import KafkaBroker, kafka_missing
from kfs.mount.mount_table import alive as _alive
from kfs.mount.mount_table import serving_processes

REPO = Path(__file__).resolve().parent.parent
# Partition directories written by Kafka's own code (each set with a README.txt saying how).
FIXTURES_ROOT = REPO / "tests" / "fixtures"
KAFKA_WRITTEN = FIXTURES_ROOT / "kafka-written"
INTERNAL_TOPICS = FIXTURES_ROOT / "internal-topics"
KAFKA_CLEANED = FIXTURES_ROOT / "kafka-cleaned"
# CI=true (as GitHub Actions and GitLab CI set it): what a test needs must be there.
CI = os.environ.get("CI", "").lower() == "true"


def unavailable(reason: str) -> NoReturn:
    """End the running test for want of ``reason``: a skip, or under CI a failure."""
    if CI:
        pytest.fail(f"{reason} (CI=true: every test must run)", pytrace=False)
    pytest.skip(reason)


def require_modules(*names: str) -> None:
    """For a test module's top: each of ``names`` must import, else the module is skipped, or
    under CI its collection fails (a CI run never passes by skipping)."""
    import importlib.util

    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        reason = f"{', '.join(missing)} not installed (the test extras: scripts/setup.sh test)"
        if CI:
            pytest.fail(f"{reason} (CI=true: every test must run)", pytrace=False)
        pytest.skip(reason, allow_module_level=True)


def fixture_path(*parts: str) -> Path:
    """``FIXTURES_ROOT/<parts>``; the calling test is unavailable() when it does not exist."""
    path = FIXTURES_ROOT.joinpath(*parts)
    if not path.exists():
        unavailable(f"fixture {path} is missing")
    return path


def _fuse_missing() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (FUSE kernel module not available)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (install the fuse3 package)"
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "/dev/fuse is not accessible to this user"
    return None


FUSE_MISSING = _fuse_missing()


def require_fuse() -> None:
    """For code that mounts without the ``mount`` fixture: unavailable() without FUSE."""
    if FUSE_MISSING is not None:
        unavailable(f"FUSE unavailable: {FUSE_MISSING}")


def pytest_configure(config):
    config.addinivalue_line("markers", "fuse: drives a real FUSE mount (needs /dev/fuse and fusermount3)")
    config.addinivalue_line("markers", "needs_fixture(*paths): reads these paths under tests/fixtures")
    config.addinivalue_line("markers", "root: needs to run as root")
    config.addinivalue_line("markers", "kafka: runs Kafka's own jars (a broker or its tools)")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "mount" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.fuse)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before any fixture is set up: the test's declared needs (skip, or fail under CI)."""
    for mark in item.iter_markers("needs_fixture"):
        for part in mark.args:
            fixture_path(part)
    if item.get_closest_marker("fuse") is not None:
        require_fuse()
    if item.get_closest_marker("kafka") is not None and kafka_missing() is not None:
        unavailable(kafka_missing())
    if item.get_closest_marker("root") is not None and os.geteuid() != 0:
        unavailable("needs root")


# A background mount without --log-file logs under $XDG_STATE_HOME/kfs/: the tests' go here,
# not to the user's ~/.local/state.
TEST_STATE_HOME = Path(tempfile.gettempdir()) / f"kfs-tests-state-{os.getuid()}"


def kfs_env() -> dict[str, str]:
    """Environment in which ``python -m kfs`` imports this checkout (and logs, in the
    background without --log-file, under TEST_STATE_HOME)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    env["XDG_STATE_HOME"] = str(TEST_STATE_HOME)
    return env


def kfs_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kfs", *args]


@dataclass
class Mount:
    """A live mount: ``path`` the mountpoint, ``backing`` the backing directory, ``log`` the
    daemon's log file, ``pid`` the serving process."""

    path: Path
    backing: Path
    log: Path
    pid: int | None
    options: tuple[str, ...] = ()
    mounted: bool = field(default=True)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""


def daemon_pids(mountpoint: Path) -> list[int]:
    """Pids of kfs serve processes whose mountpoint is ``mountpoint`` (the ones the fixture
    started: each test has its own temporary mountpoint)."""
    return [pid for pid, _, mnt in serving_processes() if mnt == os.fspath(mountpoint)]


def wait_for_exit(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return not _alive(pid)


def is_mounted(path: Path) -> bool:
    target = os.fsencode(os.path.realpath(path))
    with open("/proc/self/mountinfo", "rb") as f:
        return any(line.split()[4] == target for line in f)


class Mounter:
    """The ``mount`` fixture's value: call it to mount, ``unmount(m)`` to end a mount early
    (waiting until the daemon has exited, i.e. ``LogManager.close()`` ran)."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.mounts: list[Mount] = []
        self._count = 0

    def __call__(self, backing: Path | str | None = None, *options: str, mountpoint: Path | None = None) -> Mount:
        self._count += 1
        backing = Path(backing) if backing is not None else self.tmp_path / "data"
        mountpoint = mountpoint or self.tmp_path / f"mnt{self._count}"
        mountpoint.mkdir(parents=True, exist_ok=True)
        log = self.tmp_path / f"kfs{self._count}.log"
        cmd = kfs_command("mount", "--log-level=debug", f"--log-file={log}", *options, str(backing), str(mountpoint))
        proc = subprocess.run(cmd, cwd=REPO, env=kfs_env(), capture_output=True, timeout=150)
        pids = daemon_pids(mountpoint)
        mount = Mount(mountpoint, backing, log, pids[0] if pids else None, options, is_mounted(mountpoint))
        self.mounts.append(mount)
        assert proc.returncode == 0, (
            f"kfs mount failed ({proc.returncode}): {proc.stderr.decode(errors='replace')}\n{mount.log_text()}"
        )
        assert proc.stdout == b"", proc.stdout
        # The CLI returned: the file system must already be mounted and answering.
        assert mount.mounted, f"{mountpoint} is not a mount point after kfs mount returned"
        assert mount.pid is not None, "no serving process found"
        os.stat(mountpoint)
        return mount

    def unmount(self, mount: Mount, timeout: float = 30.0) -> None:
        """fusermount3 -u (falling back to -uz), then wait for the daemon to exit cleanly;
        asserts the unmount was clean."""
        clean = self._teardown(mount, timeout)
        assert clean, f"unclean unmount of {mount.path}\n{mount.log_text()}"

    def _teardown(self, mount: Mount, timeout: float = 30.0) -> bool:
        clean = True
        if is_mounted(mount.path):
            res = subprocess.run(["fusermount3", "-u", str(mount.path)], capture_output=True, timeout=30)
            if res.returncode != 0:
                clean = False
                subprocess.run(["fusermount3", "-uz", str(mount.path)], capture_output=True, timeout=30)
        mount.mounted = False
        pids = [mount.pid] if mount.pid else []
        pids += [p for p in daemon_pids(mount.path) if p not in pids]
        for pid in pids:
            if wait_for_exit(pid, timeout):
                continue
            clean = False
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                if wait_for_exit(pid, 10):
                    break
        return clean

    def close_all(self) -> None:
        for mount in self.mounts:
            if mount.mounted or (mount.pid and _alive(mount.pid)):
                self._teardown(mount)
            text = mount.log_text()
            if text:  # shown by pytest when the test failed
                print(f"----- daemon log {mount.log} -----\n{text[-20000:]}")


@pytest.fixture
def mount(tmp_path):
    """Factory: ``mount(backing=None, *cli_options)`` -> Mount (see Mounter)."""
    require_fuse()
    mounter = Mounter(tmp_path)
    try:
        yield mounter
    finally:
        mounter.close_all()


@pytest.fixture
def kafka_broker(tmp_path):
    """Factory: ``kafka_broker(log_dir=None, **server_properties)`` -> a started
    ``KafkaBroker`` (``tests/kafka_broker.py``) on loopback with ``log.dirs`` under
    ``tmp_path``; every broker it started is stopped in teardown, even on failure (killed if a
    clean shutdown hangs), and its log printed (pytest shows it for a failed test)."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    brokers: list[KafkaBroker] = []

    def start(log_dir: Path | None = None, **overrides: str) -> KafkaBroker:
        n = len(brokers)
        broker = KafkaBroker(log_dir or tmp_path / f"kafka-logs{n}", tmp_path / f"broker{n}",
                             {k.replace("_", "."): str(v) for k, v in overrides.items()})
        brokers.append(broker)
        return broker.start()

    try:
        yield start
    finally:
        for broker in brokers:
            try:
                broker.stop()
            finally:
                broker.kill()
            print(f"----- broker log {broker.work_dir} -----\n{broker.log_tail(40)}")


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: a real disk that fills up (unavailable() where mounting one is not
    allowed: it needs root)."""
    path = tmp_path / "disk"
    path.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(path)],
                         capture_output=True)
    if res.returncode != 0:
        unavailable(f"cannot mount a tmpfs here (needs root): {res.stderr.decode(errors='replace').strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.fixture(scope="module")
def spark():
    """A local[2] SparkSession with the ``kfs`` format registered, one per test module (a cold
    session takes seconds). Filter pushdown starts off; tests that turn it on re-register.
    Skips only when pyspark is not importable."""
    pytest.importorskip("pyspark")
    pytest.importorskip("pyarrow")
    from pyspark.sql import SparkSession

    import kfs.spark

    # Python workers must import this checkout with this interpreter's packages.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = kfs_env()["PYTHONPATH"]
    session = (
        SparkSession.builder.master("local[2]")
        .appName("kfs-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    kfs.spark.register(session, filter_pushdown=False)
    yield session
    session.stop()
