"""Every shell session the documentation shows is true: each ```console block of README.md and
docs/*.md is run, its commands in order, and what each printed is compared with the lines the
block shows under it. A doc change that makes a shown output false fails here.

How a block is run:

* In one bash, at a terminal 100 columns wide (a pty: ``ls`` prints columns, as a reader sees
  it; colours are dropped), each ``$ `` line typed as at a prompt (continuation lines after a
  trailing backslash belong to it; a ``&`` job and ``%1`` carry on to the next command), stdin
  empty. What a command printed, stdout and stderr as a terminal shows them, must be the lines
  shown under it up to the next ``$ `` line. Output a background job prints (a ``tail -f``) is
  waited for: a command whose output so far is the beginning of what is shown is given up to
  ``ASYNC_WAIT_S`` for the rest (a wait on the output itself, never a sleep).
* In a scratch checkout of its own (a fresh temporary directory holding links to this
  checkout's ``scripts/``, ``.venv``, ``tests/`` (its fixtures), ``examples/``, ...; its own
  ``data/`` and ``mnt/``), with ``kfs`` on PATH (``.venv/bin``) importing this checkout, and
  ``$XDG_STATE_HOME`` (where a mount logs) in the scratch directory. Every mount a block leaves
  is unmounted after it, then its jobs are ended.
* ``…`` in a shown output line stands for any text within that line: what differs from one
  machine or run to the next (a checkout's path, a timestamp of an append). Use it sparingly:
  prefer a deterministic session (``append.jsonl`` with a ``ts``, a fixture).
* A marker comment just before a block (blank lines between allowed):
  ``<!-- setup: mounted -->`` — the scratch checkout's empty ``data/`` is mounted writable at
  ``mnt/`` before the block (``kfs mount --create data mnt``), so a page's session can start
  where the README's short session stands;
  ``<!-- not run: REASON -->`` — the block is not run (it needs what CI does not have: a live
  cluster, a bucket), said in the run's summary with its reason.

```sh blocks (commands without their output) are not run. docs/internals.md says the same for
contributors.
"""

from __future__ import annotations

import difflib
import os
import re
import subprocess
import time

import pytest

from helpers.mounts import daemon_pids
from helpers.needs import fixture_path, unavailable
from helpers.paths import REPO
from helpers.waits import wait_for_exit
from helpers.doc_sessions import (NOT_RUN, PLACEHOLDER, SETUP, Block, Session, all_blocks,
                                  console_blocks,
                                  could_grow_into, documents, line_matches, lines_match,
                                  output_lines, scratch_checkout)

COMMAND_TIMEOUT_S = 120.0  # one command of a session (a deadline, not a wait)
ASYNC_WAIT_S = 15.0  # for the rest of a command's output a background job prints
SETUPS = ("mounted",)

BLOCKS = all_blocks()
RUN = [b for b in BLOCKS if b.not_run is None]


def kfs_mounts_under(root) -> list[str]:
    """Mountpoints under ``root`` (a session may mount anywhere in its scratch checkout)."""
    prefix = os.fsencode(os.path.realpath(root)) + b"/"
    with open("/proc/self/mountinfo", "rb") as f:
        points = [line.split()[4] for line in f]
    return [os.fsdecode(p) for p in points if p.startswith(prefix)]


def unmount_all(root) -> None:
    for point in reversed(kfs_mounts_under(root)):
        pids = daemon_pids(point)
        if subprocess.run(["fusermount3", "-u", point], capture_output=True, timeout=60).returncode:
            subprocess.run(["fusermount3", "-uz", point], capture_output=True, timeout=60)
        for pid in pids:
            if not wait_for_exit(pid, 60):
                os.kill(pid, 9)


def fixtures_used(block: Block) -> set[str]:
    return {m.group(1) for s in block.steps
            for m in re.finditer(r"tests/fixtures/([\w.-]+)", s.command)}


def report(block: Block, step_index: int, actual: list[str], transcript: list[str]) -> str:
    step = block.steps[step_index]
    diff = "\n".join(difflib.unified_diff(step.shown, actual, "shown", "printed", lineterm=""))
    return (f"{block.name}: the output of `$ {step.command}` (line {step.line}) is not what "
            f"the block shows ({PLACEHOLDER} matches any text in a line)\n{diff}\n"
            f"--- the session so far ---\n" + "\n".join(transcript))


@pytest.mark.fuse
@pytest.mark.parametrize("block", RUN, ids=[b.name for b in RUN])
def test_shown_session(block: Block, tmp_path):
    for name in sorted(fixtures_used(block)):
        fixture_path(name)
    if any("scripts/mount.sh" in s.command for s in block.steps) and not any(
            (REPO / ".venv" / f".kfs-installed{x}").exists() for x in ("", "-test")):
        # (its setup.sh would install into .venv from the scratch checkout)
        unavailable("scripts/setup.sh has not installed kfs into .venv yet")
    checkout = tmp_path / "kfs"
    checkout.mkdir()
    env = scratch_checkout(checkout)
    session = None
    try:
        if block.setup == "mounted":
            (checkout / "data").mkdir()
            (checkout / "mnt").mkdir()
            subprocess.run([str(checkout / ".venv" / "bin" / "kfs"), "mount", "data", "mnt"],
                           cwd=checkout, env=env, check=True, timeout=COMMAND_TIMEOUT_S)
        session = Session(checkout, env)
        transcript = []
        for index, step in enumerate(block.steps):
            start = session.run(step.command, COMMAND_TIMEOUT_S)
            actual = output_lines(session.output_since(start))
            deadline = time.monotonic() + ASYNC_WAIT_S
            while not lines_match(step.shown, actual) and could_grow_into(step.shown, actual) \
                    and time.monotonic() < deadline:
                session.wait_for_more(session.size(), deadline - time.monotonic())
                actual = output_lines(session.output_since(start))
            transcript += [f"$ {step.command}", *actual]
            assert lines_match(step.shown, actual), report(block, index, actual, transcript)
    finally:  # the jobs first (a `tail -f` keeps a mount busy); the mounts serve in sessions of their own
        if session is not None:
            session.close()
        unmount_all(checkout)


def test_every_block_is_known():
    """Each ```console block parses (commands, then their output), its marker is one the test
    knows, and a block not run says why."""
    assert BLOCKS, "no ```console block found"
    for block in BLOCKS:
        assert block.steps, f"{block.name}: a ```console block without a `$ ` command"
        assert block.setup in (None, *SETUPS), f"{block.name}: unknown setup {block.setup!r}"
        if block.not_run is not None:
            assert block.not_run, f"{block.name}: a `not run` marker without its reason"


def test_placeholder_matches_only_within_a_line():
    assert line_matches("log: …/kfs/…-mnt.log)", "log: /tmp/x/kfs/tmp-x-mnt.log)")
    assert not line_matches("log: …/kfs/…-mnt.log)", "log: /tmp/x/kfs/tmp-x-mnt.log")
    assert line_matches("a=\"…\"", "a=\"\"")
    assert not lines_match(["…"], ["one", "two"])
    assert could_grow_into(["more", "again"], ["more"])
    assert not could_grow_into(["more"], ["less"])


def test_markers_are_before_console_blocks():
    """A marker comment is read only before a ```console block: one elsewhere is a typo."""
    for path in documents():
        lines = path.read_text().split("\n")
        for number, text in enumerate(lines, 1):
            if text.lstrip().startswith("<!--") and (NOT_RUN.search(text) or SETUP.search(text)):
                after = next((t for t in lines[number:] if t.strip()), "")
                assert after.strip() == "```console", \
                    f"{path.relative_to(REPO)}:{number}: a marker not followed by a ```console block"


def test_markers_are_read(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("text\n\n<!-- not run: needs a live\n     cluster -->\n\n```console\n$ kfs mount x\n```\n\n"
                    "<!-- setup: mounted -->\n```console\n$ echo a \\\n    b\na b\n$ true\n```\n\n"
                    "```sh\n$ not a session\n```\n")
    first, second = console_blocks(page)
    assert (first.not_run, first.setup) == ("needs a live cluster", None)
    assert (second.not_run, second.setup) == (None, "mounted")
    assert [(s.command, s.shown) for s in second.steps] == [("echo a \\\n    b", ["a b"]), ("true", [])]
