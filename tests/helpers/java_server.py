"""What the tests' Java servers (helpers/kafka.py's KafkaBroker, helpers/s3.py's S3Server) share:
a JVM started in its own process group with its output appended to a file of its ``work_dir``,
waited for until it answers (its exit or the start timeout raising with its log's tail),
stopped by SIGTERM to its group (SIGKILL if that hangs), and torn down by a fixture.

A subclass names itself (:attr:`JavaServer.what`), its output file and other logs, says
whether it answers (``_answers``) and where (``address``), and starts by handing its command to
``_run``. Nothing here is used by kfs itself."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from .waits import POLL_S


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JavaServer:
    """One JVM process (``proc``) whose files are in ``work_dir``; a subclass sets
    ``work_dir`` and ``start_timeout_s``."""

    what = "the server"  # its name in messages
    output_name = "server.out"  # its stdout and stderr, in work_dir
    log_names: tuple[str, ...] = ()  # more logs of its own in work_dir, for log_tail
    stop_timeout_s = 30.0  # stop()'s wait for a clean exit before SIGKILL
    poll_s = POLL_S  # between two _answers() (0: _answers waits itself)

    work_dir: Path
    start_timeout_s: float
    proc: subprocess.Popen | None = None
    started_in: float | None = None  # the seconds the last start took

    @property
    def address(self) -> str:
        raise NotImplementedError

    def _answers(self) -> bool:
        raise NotImplementedError

    def _run(self, cmd: list[str], env: dict[str, str] | None = None,
             began: float | None = None) -> None:
        """Launch ``cmd`` in its own process group and return once it answers; stopped (killed
        if it hangs) when it does not. ``began``: the start's beginning, for ``started_in``."""
        began = time.monotonic() if began is None else began
        with open(self.work_dir / self.output_name, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=env,
                                         start_new_session=True)
        try:
            self._wait_serving()
        except BaseException:
            self.stop()
            raise
        self.started_in = time.monotonic() - began

    def _wait_serving(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while not self._answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.what} exited ({self.proc.returncode}) while starting:\n"
                                   f"{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{self.what} did not serve {self.address} within "
                                   f"{self.start_timeout_s:g} s:\n{self.log_tail()}")
            time.sleep(self.poll_s)

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` of its output and of each of its logs (those there)."""
        text = ""
        for name in (self.output_name, *self.log_names):
            try:
                text += "".join((self.work_dir / name).read_text(errors="replace")
                                .splitlines(keepends=True)[-lines:])
            except OSError:
                pass
        return text

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM to its process group (the JVM's clean shutdown), SIGKILL if it has not
        ended within ``timeout`` s (default :attr:`stop_timeout_s`)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(self.stop_timeout_s if timeout is None else timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def tear_down(self) -> None:
        """A fixture's teardown: a clean stop, killed if that fails or hangs, then the logs'
        tail printed (pytest shows it with a failure)."""
        try:
            self.stop()
        finally:
            self.kill()
        print(f"----- {self.what} log {self.work_dir} -----\n{self.log_tail(40)}")
