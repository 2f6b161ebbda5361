"""What a shell user sees of a refused append: a shell ignores the error of a redirection's
``close()``, so what is already known to be bad is refused at ``write()`` (which the shell
reports), and the last refusal of each partition (at close too) is its ``user.kfs.last_error``
attribute, which ``kfs last-error`` prints."""

from __future__ import annotations

import os
import shlex

import pytest

from helpers.kfs import kfs_command, kfs_env
from helpers.records import EXAMPLE_2_7
from helpers.shell import sh

pytestmark = pytest.mark.fuse


def kfs_last_error(*paths) -> str:
    return sh(shlex.join(kfs_command("last-error", *map(str, paths))), env=kfs_env()).out


def test_a_partial_json_line_that_cannot_become_an_object_fails_in_the_shell(tmp_path, mount):
    m = mount(tmp_path / "data")
    os.mkdir(m.path / "p-0")
    res = sh("printf '{bad' >> p-0/append.jsonl", m.path, check=False)
    assert res.returncode != 0 and "Invalid argument" in res.err, res.err
    # a line that can still become one is not refused before its end (stored at close)
    sh("""{ printf '{"payload": "a"}\\n{"payload": "b"'; printf '}'; } >> p-0/append.jsonl""",
       m.path)
    assert sh("cat p-0/values", m.path).out == "a\nb\n"
    assert "line 1: not JSON (b'bad' at byte 2 of the line" in kfs_last_error(m.path / "p-0")


def test_a_batch_header_that_cannot_be_a_producers_fails_in_the_shell(tmp_path, mount):
    m = mount(tmp_path / "data")
    os.mkdir(m.path / "p-0")
    header = EXAMPLE_2_7[:16] + b"\x01"  # a plausible size, then magic 1
    escaped = "".join(f"\\x{b:02x}" for b in header)  # (bash ignores a close's error)
    res = sh(f"printf '{escaped}' >> p-0/append-batches", m.path, check=False)
    assert res.returncode != 0 and "Invalid argument" in res.err, res.err
    assert os.listdir(m.path / "p-0" / "by-offset") == []


def test_a_refusal_at_close_is_the_partitions_last_error(tmp_path, mount):
    """``printf 'nokey' >> append-keyed`` exits 0 (bash ignores the close's EINVAL; the line
    had no newline, so it was refused at close): ``kfs last-error`` and the partition's
    ``user.kfs.last_error`` say what was refused and why; a mount's root lists every
    partition with one."""
    m = mount(tmp_path / "data")
    os.mkdir(m.path / "p-0")
    os.mkdir(m.path / "q-0")
    assert kfs_last_error(m.path) == ""
    sh("printf 'nokey' >> p-0/append-keyed", m.path)  # the shell sees nothing
    assert os.listdir(m.path / "p-0" / "by-offset") == []
    text = kfs_last_error(m.path / "p-0" / "append-keyed")
    assert text.startswith(f"{m.path / 'p-0'}: 20"), text
    assert ("p-0/append-keyed: write refused (EINVAL): line 1 has no key separator b'\\t', "
            "nothing of it stored") in text, text
    attr = sh("getfattr --only-values -n user.kfs.last_error p-0", m.path).out
    assert attr in text
    escaped = "".join(f"\\x{b:02x}" for b in EXAMPLE_2_7[:12])  # (cat reports close errors)
    sh(f"printf '{escaped}' >> q-0/append-batches", m.path)  # refused at close, bash exits 0
    text = kfs_last_error(m.path)
    assert text.count("\n") == 2, text
    assert ("q-0/append-batches: write refused (EINVAL): 12 bytes of a partial record batch "
            "at close, nothing of it stored") in text, text
