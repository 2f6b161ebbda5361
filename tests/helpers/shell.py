"""``sh``: the one way the tests run a shell command (``bash -c``), as a user at a prompt would."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

SH_TIMEOUT_S = 120.0  # one command; a test that needs longer says so


class Shell(subprocess.CompletedProcess):
    """What ``bash -c`` left: ``returncode``, ``stdout`` and ``stderr`` (bytes) as
    CompletedProcess has them, and ``out`` / ``err``: the same decoded (UTF-8)."""

    @property
    def out(self) -> str:
        return self.stdout.decode()

    @property
    def err(self) -> str:
        return self.stderr.decode()


def sh(script: str, cwd: Path | str | None = None, *, env: dict[str, str] | None = None,
       check: bool = True, timeout: float = SH_TIMEOUT_S, deadline: float | None = None) -> Shell:
    """Run ``script`` with ``bash -c`` in ``cwd`` (default: this process's), with ``env``'s
    variables added to this process's environment; stdout and stderr are captured.

    ``check``: the command must exit 0 (else AssertionError naming it, its status and its
    stderr). It must end within ``timeout`` seconds, and before ``deadline`` (a
    ``time.monotonic()`` value: a loop of commands sharing one) when given, else
    AssertionError saying so (the command is killed)."""
    if deadline is not None:
        timeout = min(timeout, max(deadline - time.monotonic(), 0.0))
    try:
        res = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True,
                             timeout=timeout, env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{script!r} did not end within {timeout:.3g} s; it printed "
                             f"{exc.stdout or b''!r} and {exc.stderr or b''!r}") from None
    if check:
        assert res.returncode == 0, (
            f"{script!r} exited {res.returncode}: {res.stderr.decode(errors='replace')}")
    return Shell(res.args, res.returncode, res.stdout, res.stderr)
