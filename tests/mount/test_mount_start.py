"""Starting a mount as a new user does (issue 19): ``kfs mount`` over a stale mount (its process
``kill -9``'d), over a live mount or a non-empty directory; where a background mount's log goes
when no ``--log-file`` is given; ``scripts/mount.sh`` with options anywhere and its defaults in
the checkout, run from another directory. Driven from a shell; every mount made here is handed
to the ``mount`` fixture, which unmounts it in teardown."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from helpers.kfs import kfs_env
from helpers.mounts import Mount, daemon_pids, is_mounted
from helpers.paths import REPO
from helpers.waits import wait_for_exit


def run(script: str, cwd: Path, state: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    """``bash -c script`` with ``$PY -m kfs`` as this checkout's kfs; ``state`` as
    XDG_STATE_HOME."""
    full = {**kfs_env(), "PY": sys.executable, **env}
    if state is not None:
        full["XDG_STATE_HOME"] = str(state)
    return subprocess.run(["bash", "-c", script], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=150)


def track(mount, backing: Path, *mountpoints: Path) -> None:
    """Hand whatever is mounted at ``mountpoints`` to the fixture (unmounted in teardown)."""
    known = {m.path for m in mount.mounts if m.mounted}
    for path in mountpoints:
        if is_mounted(path) and path not in known:
            pids = daemon_pids(path)
            mount.mounts.append(Mount(path, backing, path.parent / "none.log",
                                      pids[0] if pids else None))


def mounts_at(path: Path) -> list[str]:
    """The mountinfo lines of mounts at ``path`` (stacked mounts give several)."""
    target = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return [line for line in f if line.split()[4] == target]


def log_name(mountpoint: Path) -> str:
    """The documented name: the mountpoint's absolute path, ``/`` as ``-``."""
    return "-".join(p for p in os.path.realpath(mountpoint).split("/") if p) + ".log"


# --------------------------------------------------------------------------- stale and live mounts


def test_mount_over_a_stale_kfs_mount_clears_it_and_says_so(mount, tmp_path):
    m = mount()
    mnt = m.path.name
    run(f"mkdir {mnt}/orders-0 && echo kept >> {mnt}/orders-0/append", tmp_path)
    os.kill(m.pid, signal.SIGKILL)
    assert wait_for_exit(m.pid, 30)
    dead = run(f"ls {mnt}", tmp_path)
    assert dead.returncode != 0 and ("Transport endpoint is not connected" in dead.stderr
                                     or "Software caused connection abort" in dead.stderr)
    res = run(f'"$PY" -m kfs mount --log-file=again.log data {mnt}', tmp_path)
    try:
        assert res.returncode == 0, res.stderr
        assert res.stderr == (f"kfs: unmounted a stale kfs mount of {m.backing} at {m.path} "
                              "(its kfs process is gone)\n")
        assert len(mounts_at(m.path)) == 1  # not stacked on the dead one
        assert run(f"cat {mnt}/orders-0/by-offset/0", tmp_path).stdout == "kept"
        done = run(f'"$PY" -m kfs umount {mnt}', tmp_path)
        assert done.returncode == 0, done.stderr
        assert mounts_at(m.path) == []  # one umount was enough
    finally:  # (the fixture unmounts one mount per mountpoint: a stacked one is left to us)
        if len(mounts_at(m.path)) > 1:
            subprocess.run(["fusermount3", "-u", str(m.path)], capture_output=True, timeout=30)
            for _ in range(len(mounts_at(m.path))):
                subprocess.run(["fusermount3", "-uz", str(m.path)], capture_output=True, timeout=30)


def test_mount_refuses_a_live_mount_and_a_non_empty_directory(mount, tmp_path):
    m = mount()
    mnt = m.path.name
    for options in ("", "--read-only", "-f"):
        res = run(f'"$PY" -m kfs mount {options} data {mnt}', tmp_path)
        track(mount, m.backing, m.path)
        assert res.returncode == 1, res.stderr
        assert res.stderr == (f"kfs: error: mountpoint {m.path} is already a kfs mount of "
                              f"{m.backing}: unmount it first (kfs umount {m.path})\n")
        assert len(mounts_at(m.path)) == 1
    full = tmp_path / "full"
    full.mkdir()
    (full / ".notes").write_text("mine")
    for options in ("", "-f"):
        res = run(f'"$PY" -m kfs mount {options} --create data2 full', tmp_path)
        track(mount, tmp_path / "data2", full)
        assert res.returncode == 1, res.stderr
        assert res.stderr == (f"kfs: error: mountpoint {full} is not empty: a mount would hide "
                              "its files (use an empty directory)\n")
        assert not is_mounted(full) and (full / ".notes").read_text() == "mine"
    assert not (tmp_path / "data2").exists()


# --------------------------------------------------------------------------- the log's default place


def test_a_background_mount_logs_under_xdg_state_home_by_default(mount, tmp_path):
    state = tmp_path / "state"
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "orders.topic.properties").write_text("bogus.key=1\n")
    (tmp_path / "mnt").mkdir()
    res = run('"$PY" -m kfs mount data mnt', tmp_path, state)
    track(mount, tmp_path / "data", tmp_path / "mnt")
    assert res.returncode == 0 and res.stdout == "" and res.stderr == "", res.stderr
    assert run("mkdir mnt/orders-0", tmp_path).returncode != 0
    log = state / "kfs" / log_name(tmp_path / "mnt")
    assert "unknown topic config 'bogus.key'" in log.read_text()
    # issue 37 item 12: the log is its owner's alone, and so is the directory made for it
    assert (oct(log.stat().st_mode & 0o777), oct((state / "kfs").stat().st_mode & 0o777)) == \
        ("0o600", "0o700")
    assert run('"$PY" -m kfs umount mnt', tmp_path).returncode == 0
    # without XDG_STATE_HOME (or with a relative one, which the XDG spec says to ignore)
    where = ('"$PY" -c "from kfs.mount.daemon import default_log_file as f; '
             'print(f(\'/home/me/mnt\')); print(f(\'/\'))"')
    for xdg in ("", "relative/state"):
        res = run(where, tmp_path, HOME="/home/me", XDG_STATE_HOME=xdg)
        assert res.stdout.split() == ["/home/me/.local/state/kfs/home-me-mnt.log",
                                      "/home/me/.local/state/kfs/root.log"], res.stderr
    text = run('"$PY" -m kfs mount --help', tmp_path).stdout
    assert "$XDG_STATE_HOME/kfs/" in text and "~/.local/state/kfs/" in text


def test_the_log_said_exists_once_the_mount_serves_and_says_which_mount(mount, tmp_path):
    """Issue 25, item 12: the log file scripts/mount.sh names is there at once, not at the first
    warning, and its first line names the mount whatever the level; a --log-file that cannot be
    made is said in one line (before: 'exited with status 1 before serving (see <that file>)')."""
    root = fake_checkout(tmp_path)
    state = tmp_path / "state"
    res = run(f"{root}/scripts/mount.sh", tmp_path, state)
    track(mount, root / "data", root / "mnt")
    assert res.returncode == 0, res.stderr
    log = state / "kfs" / log_name(root / "mnt")
    assert res.stdout.endswith(f"log: {log})\n"), res.stdout
    first = log.read_text().splitlines()[0]
    assert first.endswith(f"INFO kfs: mounting {root}/data at {root}/mnt; logging warning and "
                          "up"), first
    assert run('"$PY" -m kfs umount mnt', root).returncode == 0
    res = run(f'"$PY" -m kfs mount --log-file nodir/m.log {root}/data {root}/mnt', tmp_path)
    track(mount, root / "data", root / "mnt")
    assert res.returncode == 1 and not is_mounted(root / "mnt")
    assert res.stderr == ("kfs: error: cannot create the log file nodir/m.log: No such file or "
                          "directory\n")


# --------------------------------------------------------------------------- scripts/mount.sh


def fake_checkout(tmp_path: Path) -> Path:
    """A checkout holding this scripts/mount.sh, a setup.sh that has nothing to do and a .venv
    whose kfs and python run this checkout's kfs (so no package is installed here)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "mount.sh", root / "scripts" / "mount.sh")
    (root / "scripts" / "setup.sh").write_text("#!/bin/sh\nexit 0\n")
    (root / ".venv" / "bin").mkdir(parents=True)
    for name, module in (("kfs", "-m kfs "), ("python", "")):
        shim = root / ".venv" / "bin" / name
        shim.write_text(f'#!/bin/sh\nPYTHONPATH="{REPO}" exec "{sys.executable}" {module}"$@"\n')
    for path in (*(root / "scripts").iterdir(), *(root / ".venv" / "bin").iterdir()):
        path.chmod(0o755)
    return root


def test_mount_sh_defaults_to_the_checkout_and_takes_options_anywhere(mount, tmp_path):
    root = fake_checkout(tmp_path)
    state = tmp_path / "state"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    res = run(f"{root}/scripts/mount.sh --log-level info", elsewhere, state)
    track(mount, root / "data", root / "mnt", elsewhere / "mnt")
    assert res.returncode == 0, res.stderr
    assert list(elsewhere.iterdir()) == []  # nothing made in the current directory
    assert res.stdout == (f"kfs: {root}/data mounted at {root}/mnt (unmount: fusermount3 -u "
                          f"{root}/mnt; log: {state}/kfs/{log_name(root / 'mnt')})\n")
    assert run("mkdir mnt/orders-0 && echo hello >> mnt/orders-0/append", root).returncode == 0
    assert "INFO kfs: serving" in (state / "kfs" / log_name(root / "mnt")).read_text()
    assert run('"$PY" -m kfs umount mnt', root).returncode == 0

    # options before, between and after BACKING_DIR and MOUNTPOINT
    (tmp_path / "ro").mkdir()
    res = run(f"{root}/scripts/mount.sh --read-only {root}/data --log-file ro.log ro "
              "--isolation-level read_committed", tmp_path, state)
    track(mount, root / "data", tmp_path / "ro", tmp_path / "mnt")
    assert res.returncode == 0, res.stderr
    assert res.stdout == (f"kfs: {root}/data mounted at ro (unmount: fusermount3 -u ro; "
                          "log: ro.log)\n")
    assert run("cat ro/orders-0/by-offset/0", tmp_path).stdout == "hello"
    refused = run("mkdir ro/clicks-0", tmp_path)
    assert "Read-only file system" in refused.stderr
    assert (tmp_path / "ro.log").exists()
    assert run('"$PY" -m kfs umount ro', tmp_path).returncode == 0

    # a BACKING_DIR given is not made (a mistyped path); the checkout's own data/ was
    res = run(f"{root}/scripts/mount.sh {root}/dta ro", tmp_path, state)
    track(mount, root / "dta", tmp_path / "ro")
    assert res.returncode == 1 and res.stdout == ""
    assert res.stderr == (f"kfs: error: backing directory {root}/dta does not exist (--create "
                          "makes a new one)\n")
    assert not (root / "dta").exists() and not is_mounted(tmp_path / "ro")


# --------------------------------------------------------------------------- scripts/setup.sh

# What pip -v prints for kfs's editable install on a fresh .venv, trimmed (pip 26, Python 3.11)
PIP_OUTPUT = """\
Obtaining file:///checkout
  Installing build dependencies: started
  Running command installing build dependencies
  Collecting Cython>=3.0
    Downloading cython-3.3.1-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl (3.5 MB)
  Installing collected packages: setuptools, Cython
  Successfully installed Cython-3.3.1 setuptools-84.2.1
  Installing build dependencies: finished with status 'done'
  Compiling storage/records/_c/records.pyx because it changed.
  [1/2] Cythonizing kfs/spark/_partitioner.pyx
  [2/2] Cythonizing storage/records/_c/records.pyx
Collecting pyarrow>=15 (from kfs==0.1.0)
  Downloading pyarrow-26.0.1-cp311-cp311-manylinux_2_28_x86_64.whl (55.0 MB)
     ━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━━ 55.0/55.0 MB 280.6 MB/s  0:00:00
Building wheels for collected packages: kfs
  Building editable for kfs (pyproject.toml): started
  running build_ext
  building 'storage.records._c.records' extension
  x86_64-linux-gnu-gcc -O3 -c storage/records/_c/records.c -o build/records.o
  building 'kfs.spark._partitioner' extension
  Building editable for kfs (pyproject.toml): finished with status 'done'
Installing collected packages: pyarrow, trio, kfs
Successfully installed kfs-0.1.0 pyarrow-26.0.1 trio-0.35.0
"""


def fake_machine(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A checkout holding this scripts/setup.sh on a machine whose dpkg, apt-get and python
    are stand-ins: apt-get 'installs' packages (dpkg -s then finds them), python makes a .venv
    whose pip prints PIP_OUTPUT (exit status $PIP_STATUS); every call is noted in calls.txt."""
    root = tmp_path / "checkout"
    for d in ("scripts", "storage", "kfs", "bin"):
        (root / d).mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "setup.sh", root / "scripts" / "setup.sh")
    (root / "pyproject.toml").write_text("")
    (root / "setup.py").write_text("")
    (tmp_path / "pip-output.txt").write_text(PIP_OUTPUT)
    fake = tmp_path / "bin"
    fake.mkdir()
    scripts = {
        "dpkg": '[ -e "$FAKE/installed-$2" ]',
        "sudo": 'exec "$@"',
        "apt-get": ('echo "apt-get $*" >> "$FAKE/calls.txt"\n'
                    'for p in "$@"; do case "$p" in -*|install|update) ;; *)\n'
                    '  touch "$FAKE/installed-$p"; echo "Unpacking $p (1.0) ..."; '
                    'echo "Setting up $p (1.0) ..." ;; esac; done'),
        "python3": ('[ "$1" = -c ] && exec "$REAL_PYTHON" "$@"\n'
                    'echo "python3 $*" >> "$FAKE/calls.txt"; mkdir -p .venv/bin\n'
                    'printf \'#!/bin/sh\\necho "pip $*" >> "$FAKE/calls.txt"\\n'
                    'case "$*" in *" -e "*) cat "$FAKE/pip-output.txt"; exit ${PIP_STATUS:-0} ;; '
                    '*) echo "  Downloading pip-26.3-py3-none-any.whl (2.0 MB)" ;; esac\\n'
                    '\' > .venv/bin/python; chmod +x .venv/bin/python'),
    }
    for name, body in scripts.items():
        (fake / name).write_text(f"#!/bin/sh\n{body}\n")
        (fake / name).chmod(0o755)
    (root / "scripts" / "setup.sh").chmod(0o755)
    env = {"PATH": f"{fake}:{os.environ['PATH']}", "FAKE": str(tmp_path),
           "REAL_PYTHON": sys.executable, "PYTHON": str(fake / "python3")}
    return root, env


def test_setup_sh_says_each_step_as_it_goes_and_a_second_run_does_nothing(tmp_path):
    """Issue 25, item 12: a fresh machine's setup (2 minutes) printed one line; now each step
    says itself as it starts (the packages apt-get installs, the .venv, pip's downloads, Cython
    and each module's compile, the slow part, said up front) and how long it took; a second run
    prints and installs nothing; a failed step shows the end of its log and names it."""
    root, env = fake_machine(tmp_path)
    calls = tmp_path / "calls.txt"
    first = run(f"{root}/scripts/setup.sh", tmp_path, **env)
    assert first.returncode == 0, first.stderr
    lines = [line.removeprefix("kfs setup: ") for line in first.stderr.splitlines()]
    assert all(line.startswith("kfs setup: ") for line in first.stderr.splitlines()), lines
    debs = "fuse3 libfuse3-dev pkg-config gcc attr libssl-dev libisal-dev".split()
    assert lines[0].startswith(f"installing system packages with apt-get: {' '.join(debs)} ("), \
        lines
    step = lines.index("  apt-get update")
    assert lines[step + 1:step + 1 + len(debs)] == [f"  set up {p}" for p in debs]
    assert lines[step + 1 + len(debs)].startswith("  done in ")
    venv = lines.index(f"creating the virtualenv .venv ({env['PYTHON']} -m venv: a few seconds)")
    assert lines[venv + 1].startswith("  done in ")
    assert lines[venv + 2].startswith("installing kfs and its Python packages into .venv with "
                                      "pip: about a minute on a fresh 2-core machine, most of it "
                                      "compiling kfs's record codec"), lines
    assert lines[venv + 3:] == [
        "  upgrading pip",
        "  downloading pip-26.3 (2.0 MB)",
        "  fetching the build tools (setuptools, Cython)",
        "  downloading cython-3.3.1 (3.5 MB)",
        "  Cython: kfs/spark/_partitioner.pyx [1/2]",
        "  Cython: storage/records/_c/records.pyx [2/2]",
        "  downloading pyarrow-26.0.1 (55.0 MB)",
        "  building kfs's compiled modules",
        "  compiling storage.records._c.records (gcc -O3)",
        "  compiling kfs.spark._partitioner (gcc -O3)",
        "  installing 3 packages into .venv",
        lines[-1]]
    assert lines[-1].startswith("  done in ")
    assert (root / ".cache" / "setup" / "pip.log").read_text().endswith(PIP_OUTPUT)
    before = calls.read_text()
    assert before.count("pip -m pip install") == 2 and before.count("apt-get install") == 1

    again = run(f"{root}/scripts/setup.sh", tmp_path, **env)
    assert again.returncode == 0 and again.stderr == "" and again.stdout == ""
    assert calls.read_text() == before  # nothing installed again

    os.utime(root / "setup.py")  # (newer than the install: pip again, nothing else)
    (root / ".venv" / ".kfs-installed").touch()
    os.utime(root / ".venv" / ".kfs-installed", (1, 1))
    failed = run(f"{root}/scripts/setup.sh", tmp_path, PIP_STATUS="1", **env)
    assert failed.returncode == 1
    assert "  x86_64-linux-gnu-gcc -O3 -c storage/records/_c/records.c" in failed.stderr
    assert failed.stderr.endswith(f"(its whole output: .cache/setup/pip.log)\n"), failed.stderr
    assert "apt-get" not in failed.stderr and "virtualenv" not in failed.stderr
    assert calls.read_text().count("apt-get install") == 1
