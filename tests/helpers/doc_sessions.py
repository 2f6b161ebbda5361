"""The shell sessions the documentation shows: each ```console block of README.md and docs/*.md,
read into its commands and the output shown under each, and run in bash as a user at a
terminal would run them (``test_shown_sessions.py`` says the conventions)."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers.kfs import kfs_env
from helpers.paths import REPO

PLACEHOLDER = "…"  # in a shown output line: any text, within that line
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->", re.S)
SETUP = re.compile(r"<!--\s*setup:\s*(.*?)\s*-->", re.S)
COLUMNS = 100  # the terminal's width the sessions are shown at (ls's columns)
# what a user's checkout holds that the sessions use (the rest of the scratch checkout is theirs)
CHECKOUT_LINKS = ("scripts", ".venv", "storage", "kfs", "tests", "examples", "benchmarks")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SENTINEL = "\x1ekfs-doc-step-done\x1e"


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


@dataclass
class Step:
    command: str  # as bash reads it (continuation lines joined by their backslash-newline)
    shown: list[str]  # the output lines the block shows under it
    line: int  # the line of its `$ ` in the document


@dataclass
class Block:
    path: Path
    line: int  # the line of the ```console fence
    steps: list[Step] = field(default_factory=list)
    not_run: str | None = None  # why, from a <!-- not run: ... --> marker
    setup: str | None = None  # a prepared state, from a <!-- setup: ... --> marker

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


def console_blocks(path: Path) -> list[Block]:
    """The ```console blocks of ``path``, with the marker comment just before each (blank
    lines between allowed)."""
    lines = path.read_text().split("\n")
    blocks, i = [], 0
    while i < len(lines):
        fence = lines[i].strip()
        if not fence.startswith("```"):
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        if fence == "```console":
            block = Block(path, i + 1)
            before = i - 1
            while before >= 0 and not lines[before].strip():
                before -= 1
            comment = ""
            if before >= 0 and lines[before].rstrip().endswith("-->"):
                start = before
                while "<!--" not in lines[start]:
                    start -= 1
                comment = "\n".join(lines[start:before + 1])
            if m := NOT_RUN.search(comment):
                block.not_run = " ".join(m.group(1).split())
            if m := SETUP.search(comment):
                block.setup = m.group(1).strip()
            block.steps = _steps(lines[i + 1:end], i + 2)
            blocks.append(block)
        i = end + 1
    return blocks


def _steps(body: list[str], first_line: int) -> list[Step]:
    steps, k = [], 0
    while k < len(body):
        text = body[k]
        if not text.startswith("$ "):
            raise ValueError(f"line {first_line + k}: output before any `$ ` command: {text!r}")
        command, line = text[2:], first_line + k
        while command.endswith("\\") and k + 1 < len(body):
            k += 1
            command += "\n" + body[k]
        k += 1
        shown = []
        while k < len(body) and not body[k].startswith("$ "):
            shown.append(body[k])
            k += 1
        steps.append(Step(command, shown, line))
    return steps


def all_blocks() -> list[Block]:
    return [b for path in documents() for b in console_blocks(path)]


# -- matching ------------------------------------------------------------------------------

def line_matches(shown: str, actual: str) -> bool:
    """Whether ``actual`` is the line ``shown`` (tabs at a terminal's stops of 8, trailing
    blanks ignored, ``…`` any text)."""
    shown, actual = shown.expandtabs(8).rstrip(), actual.expandtabs(8).rstrip()
    if PLACEHOLDER not in shown:
        return shown == actual
    pattern = ".*".join(re.escape(part) for part in shown.split(PLACEHOLDER))
    return re.fullmatch(pattern, actual, re.S) is not None


def lines_match(shown: list[str], actual: list[str]) -> bool:
    return len(shown) == len(actual) and all(map(line_matches, shown, actual))


def could_grow_into(shown: list[str], actual: list[str]) -> bool:
    """Whether ``actual`` is so far a beginning of ``shown`` (more output may be on its way:
    a background ``tail -f``), its last line perhaps cut short."""
    if len(actual) > len(shown) or lines_match(shown, actual):
        return False
    if not actual:
        return True
    *whole, last = actual
    partial = shown[len(whole)]
    return all(map(line_matches, shown, whole)) and (
        line_matches(partial, last) or PLACEHOLDER in partial
        or partial.expandtabs(8).startswith(last.expandtabs(8)))


def output_lines(raw: bytes) -> list[str]:
    """A terminal's bytes as the lines a reader sees: CR LF as a newline, colours dropped."""
    text = ANSI.sub("", raw.decode("utf-8", "replace")).replace("\r\n", "\n")
    if not text:
        return []
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")


# -- running -------------------------------------------------------------------------------

# Reads each command (NUL-terminated) from fd 3 and evaluates it in this one shell, as typed at
# a prompt (so `&` jobs, `%1` and `cd` carry on), stdin from /dev/null, then marks its end.
DRIVER = f"""
exec </dev/null
while IFS= read -r -d '' __kfs_doc_command <&3; do
  eval "$__kfs_doc_command"
  printf '{SENTINEL}\\n'
done
"""


def scratch_checkout(root: Path) -> dict[str, str]:
    """``root`` made a checkout as a user's: the files the sessions use linked from this one
    (scripts/, .venv, tests/fixtures, ...), nothing else (its data/ and mnt/ its own); the
    environment the sessions run in: ``kfs`` on PATH (.venv/bin), importing this checkout."""
    for name in CHECKOUT_LINKS:
        (root / name).symlink_to(REPO / name)
    env = kfs_env()
    env["XDG_STATE_HOME"] = str(root.parent / "state")
    env["PATH"] = f"{REPO / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.update(LC_ALL="C.UTF-8", TERM="dumb", COLUMNS=str(COLUMNS))
    for name in ("VIRTUAL_ENV", "PYTHONSTARTUP", "LS_COLORS", "GREP_COLORS", "JQ_COLORS"):
        env.pop(name, None)
    return env


class Session:
    """One bash at a terminal (a pty COLUMNS wide) in ``cwd``; ``run(command)`` types a
    command and returns once it ended."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, COLUMNS, 0, 0))
        commands_r, self.commands = os.pipe()
        self.proc = subprocess.Popen(
            ["bash", "--noprofile", "--norc", "-c", f"exec 3<&{commands_r}; {DRIVER}"],
            cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave,
            pass_fds=(commands_r,), start_new_session=True)
        os.close(slave)
        os.close(commands_r)
        self.out = bytearray()
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every holder of the terminal is gone
                chunk = b""
            with self.changed:
                if not chunk:
                    self.out.extend(b"\0EOF")
                    self.changed.notify_all()
                    return
                self.out.extend(chunk)
                self.changed.notify_all()

    def run(self, command: str, timeout: float) -> int:
        """Types ``command``; returns where its output starts in ``self.out`` once the shell
        printed its end (TimeoutError after ``timeout`` s)."""
        with self.changed:
            start = len(self.out)
        os.write(self.commands, command.encode() + b"\0")
        deadline = time.monotonic() + timeout
        marker = SENTINEL.encode() + b"\n"  # (the terminal's CR before it is not needed)
        with self.changed:
            while marker not in self.out[start:].replace(b"\r\n", b"\n"):
                if self.out.endswith(b"\0EOF"):
                    raise RuntimeError(f"the shell ended during {command!r}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{command!r} did not end within {timeout:g} s")
                self.changed.wait(left)
        return start

    def output_since(self, start: int) -> bytes:
        """What the terminal showed from ``start``, the end marker(s) left out."""
        with self.changed:
            text = bytes(self.out[start:])
        return re.sub(re.escape(SENTINEL.encode()) + rb"\r?\n?", b"", text)

    def wait_for_more(self, seen: int, timeout: float) -> bool:
        """Waits (up to ``timeout`` s) until the terminal shows more than ``seen`` bytes."""
        with self.changed:
            return self.changed.wait_for(lambda: len(self.out) > seen, timeout)

    def size(self) -> int:
        with self.changed:
            return len(self.out)

    def close(self) -> None:
        """Ends the shell and every job it left (its process group: the session started it)."""
        try:
            os.close(self.commands)
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        try:
            os.close(self.master)
        except OSError:
            pass
