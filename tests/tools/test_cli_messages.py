"""What the command line says to a user's mistakes: one message and one exit status for one
mistake, whichever command made it; quiet ends in a pipeline; ``--version``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers.kfs import kfs_command, kfs_env
from helpers.paths import KAFKA_WRITTEN, REPO


def kfs(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(kfs_command(*args), capture_output=True, text=True, cwd=REPO,
                          env=kfs_env(), timeout=120)


@pytest.mark.parametrize("command", [["retention"], ["compact"], ["transactions", "X", "list"],
                                     ["verify"]])
def test_a_file_as_the_backing_directory(command, tmp_path):
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    args = [command[0], str(a_file), *command[2:]]
    res = kfs(*args)
    assert res.returncode == 2
    assert f"backing directory {a_file} is not a directory" in res.stderr
    missing = kfs(command[0], str(tmp_path / "nope"), *command[2:])
    assert missing.returncode == 2
    assert f"backing directory {tmp_path / 'nope'} does not exist" in missing.stderr


@pytest.mark.needs_fixture("kafka-written/plain-0")
def test_dump_into_head_ends_quietly():
    res = subprocess.run(["bash", "-c", 'set -o pipefail; "$@" | head -n 1', "_",
                          *kfs_command("dump", "--deep-iteration", "--print-data-log",
                                       str(KAFKA_WRITTEN / "plain-0" / "00000000000000000000.log"))],
                         capture_output=True, text=True, cwd=REPO, env=kfs_env(), timeout=120)
    assert res.stdout.startswith("Dumping ")
    assert "Broken pipe" not in res.stderr and res.stderr == ""
    assert res.returncode in (0, 141)  # head's status, or SIGPIPE's as unix tools end


def test_version_and_bad_umount_timeout(tmp_path):
    version = kfs("--version")
    assert version.returncode == 0 and version.stdout.startswith("kfs ")
    res = kfs("umount", "--timeout", "-1", str(tmp_path))
    assert res.returncode == 2 and "must be positive" in res.stderr


def test_compact_and_transactions_say_what_is_missing(tmp_path):
    res = kfs("compact", str(tmp_path))
    assert res.returncode == 0 and "nothing to clean" in res.stderr
    res = kfs("transactions", str(tmp_path), "abort", "--topic", "nosuch", "--partition", "0",
              "--start-offset", "0")
    assert res.returncode == 1 and "no partition nosuch-0" in res.stderr


# -- Ctrl-C --------------------------------------------------------------------------------

def blocked_writing(proc: subprocess.Popen) -> bool:
    """Whether ``proc`` sleeps in a write to a full pipe (its stdout, which the test stopped
    reading): the kernel's wait channel, ``pipe_write`` (``anon_pipe_write`` on newer kernels)."""
    return Path(f"/proc/{proc.pid}/wchan").read_text().endswith("pipe_write")


@pytest.mark.needs_fixture("kafka-written/plain-0")
def test_ctrl_c_in_dump_is_one_line_and_status_130():
    """SIGINT while ``kfs dump`` writes (issue 25): one line on stderr, no traceback, status
    130. The test stops reading the dump's output after a line and sends the signal once the
    dump sleeps writing to the full pipe (issue 41: sent at once, it landed wherever a busy
    machine's scheduler had left the dump), so it comes mid-run, at the same point each run."""
    from helpers.waits import Lines, wait_until

    logs = sorted(str(p) for p in (KAFKA_WRITTEN / "plain-0").glob("*.log"))
    proc = subprocess.Popen(kfs_command("dump", "--deep-iteration", "--print-data-log", *logs),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO,
                            env=kfs_env())
    try:
        assert Lines(proc.stdout, "kfs dump", proc).readline().startswith(b"Dumping ")
        wait_until(lambda: blocked_writing(proc), "kfs dump blocked on its full stdout", proc=proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    assert (err, proc.returncode) == (b"kfs dump: interrupted\n", 130)


COMPACT_CHILD = textwrap.dedent("""
    import json, os, signal, sys
    sys.path.insert(0, {repo!r})
    import storage.cleaner as cleaner
    from kfs.cli import main
    steps, at = [], int(sys.argv[2])
    def step(name):
        steps.append(name)
        if len(steps) == at:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, right after this step
    cleaner.crash_point = step
    status = main(["compact", "--now-ms", "1800000000000", sys.argv[1]])
    if not at:
        print(json.dumps(steps))
    sys.exit(status)
""")


def compacted_partition(backing):
    from storage import LogManager

    backing.mkdir()
    (backing / "c.topic.properties").write_text("cleanup.policy=compact\n")
    mgr = LogManager(backing)
    log = mgr.create("c-0")
    for r in range(3):
        log.append([b"v%d-%d" % (r, k) for k in range(20)], [b"k%d" % k for k in range(20)])
        log.roll()
    log.append([b"active"], [b"k0"])
    mgr.close()
    return backing


def key_values(backing):
    from storage import LogManager

    mgr = LogManager(backing, read_only=True)
    try:
        return {r.offset: (r.key, r.value) for r in mgr.get("c-0").reader.records_from(0, 1000)}
    finally:
        mgr.close()


def test_ctrl_c_in_compact_at_every_step_leaves_no_cleaned_or_swap_file(tmp_path):
    """SIGINT after each step of a pass (writing the .cleaned segment, each rename of the
    swap): one line, status 130, no ``.cleaned``/``.swap`` file left, and the partition is as
    before the pass or as after it (a Ctrl-C during the swap's renames lands once it is
    whole)."""
    script = COMPACT_CHILD.format(repo=str(REPO))
    before = key_values(compacted_partition(tmp_path / "model"))
    full = compacted_partition(tmp_path / "full")
    res = subprocess.run([sys.executable, "-c", script, str(full), "0"], capture_output=True,
                         text=True, timeout=120, env=kfs_env())
    assert res.returncode == 0, res.stderr
    steps = json.loads(res.stdout.splitlines()[-1])
    after = key_values(full)
    assert after != before and "renamed .log.cleaned to .log.swap" in steps
    for n, name in enumerate(steps, 1):
        backing = compacted_partition(tmp_path / f"ctrl-c-{n}")
        res = subprocess.run([sys.executable, "-c", script, str(backing), str(n)],
                             capture_output=True, text=True, timeout=120, env=kfs_env())
        assert res.returncode == 130, (name, res.stderr)
        assert res.stderr == "kfs compact: interrupted\n", (name, res.stderr)
        left = [p.name for p in (backing / "c-0").iterdir() if p.suffix in (".cleaned", ".swap")]
        assert left == [], (name, left)
        assert key_values(backing) in (before, after), name
