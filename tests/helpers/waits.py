"""Waits on events and conditions, each bounded by a deadline that fails it with a message
saying what never came. A deadline only ends a wait that would otherwise hang: it is never
what the wait is for, so on a busy machine a test waits longer, never differently.

* ``wait_until(condition, what)``: polls a condition (state a test cannot be told about: a
  file, an xattr, a broker's directory) until it holds;
* ``Lines``: the lines a child process prints on a pipe, read as they come (``select`` on the
  pipe: the test wakes when a line arrives);
* ``wait_for_exit(pid, timeout)``: a process (not our child) gone;
* ``within(seconds, what, call)``: a blocking call that takes no timeout of its own (Spark's
  ``processAllAvailable``), bounded all the same;
* ``joined(thread)``: a thread of the test ended.
"""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import threading
import time
from typing import Callable, Iterator, TypeVar

from kfs.mount_table import alive

T = TypeVar("T")

DEADLINE_S = 90.0  # a wait on a condition gives up after this (a loaded machine is slow)
POLL_S = 0.02  # between two looks at a condition nothing signals


class Deadline:
    """``seconds`` from now, for ``what``: ``check()`` raises TimeoutError once it passed."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what
        self.at = time.monotonic() + seconds

    def remaining(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def passed(self) -> bool:
        return time.monotonic() >= self.at

    def check(self, detail: str = "") -> None:
        if self.passed():
            raise TimeoutError(f"timed out after {self.seconds:g} s waiting for {self.what}"
                               + (f": {detail}" if detail else ""))


def wait_until(condition: Callable[[], T], what: str, timeout: float = DEADLINE_S,
               proc: subprocess.Popen | None = None) -> T:
    """Poll ``condition`` until it returns something true (returned); TimeoutError after
    ``timeout`` s. With ``proc``: fails at once if that process exited meanwhile (with what
    it printed on the pipes it has)."""
    deadline = Deadline(timeout, what)
    while True:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process {proc.args!r} exited ({proc.returncode}) "
                                 f"before {what}: {proc.communicate(timeout=30)!r}")
        deadline.check()
        time.sleep(POLL_S)


def wait_for_exit(pid: int, timeout: float) -> bool:
    """Whether process ``pid`` (not necessarily our child) is gone within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(POLL_S)
    return not alive(pid)


def within(seconds: float, what: str, call: Callable[[], T]) -> T:
    """``call()``'s result, run in a daemon thread that must end within ``seconds`` (its
    exception raised here); TimeoutError naming ``what`` otherwise (the caller's cleanup, such
    as stopping a streaming query, then ends the call)."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (raised again in the caller's thread)
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"within: {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"timed out after {seconds:g} s waiting for {what}")
    if "error" in box:
        raise box["error"]
    return box["value"]


def joined(thread: threading.Thread, timeout: float = DEADLINE_S) -> None:
    """Wait for ``thread`` to end; AssertionError naming it if it did not within ``timeout``."""
    thread.join(timeout)
    assert not thread.is_alive(), f"the thread {thread.name} did not end within {timeout:g} s"


@contextlib.contextmanager
def held_by_another_thread(lock) -> Iterator[None]:
    """``lock`` taken by a thread of its own for the ``with`` body (another writer appending,
    flushing or checking retention), given back and the thread joined after it."""
    held, done = threading.Event(), threading.Event()

    def hold():
        with lock:
            held.set()
            done.wait(DEADLINE_S)  # (set once the body ran; the bound ends a hang only)

    holder = threading.Thread(target=hold, name="lock holder")
    holder.start()
    try:
        assert held.wait(DEADLINE_S), "the holder thread never took the lock"
        yield
    finally:
        done.set()
        joined(holder)


class Lines:
    """The lines a child process writes to ``pipe`` (its stdout or stderr, or a pty's master
    fd), read as they arrive. Every wait has a deadline; ``what`` names the writer in the
    failure message. Reads the file descriptor directly: use no other reader of the pipe."""

    def __init__(self, pipe, what: str = "the process", proc: subprocess.Popen | None = None) -> None:
        self.fd = pipe if isinstance(pipe, int) else pipe.fileno()
        self.what = what
        self.proc = proc  # the writer: its exit status and stderr (if piped) when it ends early
        self.lines: list[bytes] = []  # every complete line so far, newline included
        self.partial = b""  # what came after the last newline
        self.eof = False
        self._next = 0  # the next line readline() returns
        self._mark = 0  # where the text until() looks for starts

    def _read(self, deadline: Deadline, waiting_for: str) -> None:
        ready, _, _ = select.select([self.fd], [], [], deadline.remaining())
        if not ready:
            deadline.check(f"{self.what} printed {self.lines[-3:]!r} then {self.partial!r} "
                           f"but not {waiting_for}")
            return
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:  # a pty's master reads EIO once the other side is closed
            chunk = b""
        if not chunk:
            self.eof = True
            return
        *complete, self.partial = (self.partial + chunk).split(b"\n")
        self.lines += [line + b"\n" for line in complete]

    def wait_for(self, count: int, timeout: float = DEADLINE_S) -> list[bytes]:
        """The first ``count`` lines, once they came; AssertionError at the end of the output
        before them, TimeoutError past the deadline."""
        deadline = Deadline(timeout, f"line {count} of {self.what}")
        while len(self.lines) < count:
            assert not self.eof, (f"{self.what} ended its output after {len(self.lines)} of "
                                  f"{count} lines: {self.lines[-3:]!r} {self.partial!r}"
                                  f"{self._ended()}")
            self._read(deadline, f"line {count}")
        return self.lines[:count]

    def readline(self, timeout: float = DEADLINE_S) -> bytes:
        """The next line not yet returned by readline() (as file.readline: b"" at the end)."""
        deadline = Deadline(timeout, f"line {self._next + 1} of {self.what}")
        while len(self.lines) <= self._next and not self.eof:
            self._read(deadline, f"line {self._next + 1}")
        if len(self.lines) <= self._next:
            return b""
        self._next += 1
        return self.lines[self._next - 1]

    def until(self, text: bytes, timeout: float = DEADLINE_S) -> bytes:
        """Once ``text`` came after what the last until() matched: everything read so far."""
        deadline = Deadline(timeout, f"{text!r} from {self.what}")
        while (found := self.text().find(text, self._mark)) < 0:
            assert not self.eof, (f"{self.what} ended its output without {text!r}: "
                                  f"{self.text()[-300:]!r}{self._ended()}")
            self._read(deadline, repr(text))
        self._mark = found + len(text)
        return self.text()

    def rest(self, timeout: float = DEADLINE_S) -> bytes:
        """Everything, once the writer closed its end (it exited: the pipe holds what it
        wrote before)."""
        deadline = Deadline(timeout, f"the end of the output of {self.what}")
        while not self.eof:
            self._read(deadline, "the end of its output")
        return self.text()

    def _ended(self) -> str:
        """What the writer left when its output ended early: exit status, stderr."""
        if self.proc is None:
            return ""
        try:
            status = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            return " (the process is still running)"
        err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
        return f" (it exited {status}){': ' + err[-3000:] if err else ''}"

    def text(self) -> bytes:
        return b"".join(self.lines) + self.partial
