"""What the command line says to a user's mistakes: one message and one exit status for one
mistake, whichever command made it; quiet ends in a pipeline; ``--version``."""

from __future__ import annotations

import subprocess

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
