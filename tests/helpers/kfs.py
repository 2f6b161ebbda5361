"""The ``kfs`` command as the tests run it: ``python -m kfs`` importing this checkout."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .paths import REPO, TESTS

# A background mount without --log-file logs under $XDG_STATE_HOME/kfs/: the tests' go here,
# not to the user's ~/.local/state.
TEST_STATE_HOME = Path(tempfile.gettempdir()) / f"kfs-tests-state-{os.getuid()}"


def kfs_env(tests: bool = False) -> dict[str, str]:
    """Environment in which ``python -m kfs`` imports this checkout (and logs, in the
    background without --log-file, under TEST_STATE_HOME); with ``tests``, a child process may
    import ``helpers`` too."""
    env = dict(os.environ)
    paths = (str(REPO), str(TESTS) if tests else None, env.get("PYTHONPATH"))
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    env["XDG_STATE_HOME"] = str(TEST_STATE_HOME)
    return env


def kfs_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "kfs", *args]


def kfs_verify(*args) -> subprocess.CompletedProcess:
    """``kfs verify ARGS`` (text output, no terminal to ask on)."""
    return subprocess.run(kfs_command("verify", *map(str, args)), cwd=REPO, env=kfs_env(),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
