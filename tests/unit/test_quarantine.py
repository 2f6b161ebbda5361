"""The quarantine (storage.quarantine): what recovery or repair takes out of a log is kept
byte for byte outside the backing directory, with a manifest line per piece, before the log
loses it. Kafka deletes what it cuts (a follower fetches it again); kfs, with no replica,
keeps it, so these tests pin where it goes, what the manifest says, and that a piece that
cannot be kept is noted nowhere."""

import errno
import hashlib
import json
import logging
import os
import time

import pytest

from storage import disk_calls, quarantine
from storage.clock import FixedClock
from storage.quarantine import (
    MANIFEST, Quarantine, QuarantineError, _offsets_text, check_outside, default_root)

MS = 1_735_787_045_005  # 2025-01-02T03:04:05.005Z


def segment(tmp_path, data=b"abcdefghij", name="00000000000000000000.log"):
    source = tmp_path / "data" / "t-0" / name
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(data)
    return source


def run(tmp_path):
    return Quarantine(tmp_path / "q", keep_all=False, clock=FixedClock(MS))


def manifest(q):
    return [json.loads(line) for line in (q.directory / MANIFEST).read_text().splitlines()]


def test_default_root_is_beside_the_backing_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert default_root("data") == tmp_path / "data.quarantine"
    assert default_root(tmp_path / "data" / "") == tmp_path / "data.quarantine"


def test_the_quarantine_must_be_outside_the_backing_directory(tmp_path):
    """A broker refuses a log dir holding a directory that is no partition."""
    backing = tmp_path / "data"
    for inside in (backing, backing / "q", backing / "a" / "b"):
        with pytest.raises(ValueError, match="must be outside the backing directory"):
            check_outside(inside, backing)
    for outside in (tmp_path / "data.quarantine", tmp_path, tmp_path / "data2" / "q"):
        check_outside(outside, backing)


def test_keep_bytes_copies_the_range_byte_for_byte_and_notes_it(tmp_path, caplog):
    source = segment(tmp_path)
    q = run(tmp_path)
    assert q.directory is None and not (tmp_path / "q").exists()  # made on the first piece
    with caplog.at_level(logging.INFO, logger="storage.quarantine"):
        kept = q.keep_bytes(source, 2, 7, reason="corrupt", first_offset=3, last_offset=4,
                            records=2)
    assert q.directory == tmp_path / "q" / "20250102T030405.005Z"
    assert kept == q.directory / "t-0" / "00000000000000000000.log.2-7"
    assert kept.read_bytes() == b"cdefg"
    assert source.read_bytes() == b"abcdefghij"  # the caller cuts
    entry = {"partition": "t-0", "source": "t-0/00000000000000000000.log", "start": 2,
             "end": 7, "bytes": 5, "firstOffset": 3, "lastOffset": 4, "records": 2,
             "reason": "corrupt", "file": "t-0/00000000000000000000.log.2-7",
             "sha256": hashlib.sha256(b"cdefg").hexdigest()}
    assert manifest(q) == q.pieces == [entry]
    assert caplog.records[-1].getMessage() == \
        f"kept t-0/00000000000000000000.log bytes 2-7 (offsets 3-4) as {kept}: corrupt"


def test_a_one_byte_piece_is_kept(tmp_path):
    kept = run(tmp_path).keep_bytes(segment(tmp_path), 9, 10, reason="r")
    assert kept.read_bytes() == b"j"


def test_the_run_is_named_in_utc_under_a_root_made_as_needed(tmp_path, monkeypatch):
    """The run's name is the clock's UTC time whatever the local zone; the root and its
    parents are created on the first piece; keep_all is what the loader asks."""
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        q = Quarantine(tmp_path / "a" / "b" / "q", keep_all=True, clock=FixedClock(MS))
        q.keep_bytes(segment(tmp_path), 0, 1, reason="r")
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert q.directory == tmp_path / "a" / "b" / "q" / "20250102T030405.005Z"
    assert q.keep_all is True and run(tmp_path).keep_all is False


def test_a_range_longer_than_a_copy_block_is_copied_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(quarantine, "_COPY_BLOCK", 3)
    source = segment(tmp_path)
    kept = run(tmp_path).keep_bytes(source, 1, 9, reason="r")
    assert kept.read_bytes() == b"bcdefghi"


def test_the_same_piece_twice_in_one_run_is_numbered(tmp_path):
    source = segment(tmp_path)
    q = run(tmp_path)
    names = [q.keep_bytes(source, 0, 2, reason="r").name for _ in range(3)]
    assert names == ["00000000000000000000.log.0-2", "00000000000000000000.log.0-2.2",
                     "00000000000000000000.log.0-2.3"]
    assert [e["file"].split("/")[1] for e in manifest(q)] == names


def test_a_range_past_the_end_of_the_file_is_refused_and_noted_nowhere(tmp_path):
    source = segment(tmp_path)
    q = run(tmp_path)
    with pytest.raises(QuarantineError, match="cannot keep bytes 5-20 of .*ends before byte 20"):
        q.keep_bytes(source, 5, 20, reason="r")
    assert q.pieces == [] and not (q.directory / MANIFEST).exists()


def test_keep_file_moves_the_file_whole(tmp_path):
    source = segment(tmp_path, name="00000000000000000000.log.deleted")
    q = run(tmp_path)
    kept = q.keep_file(source, reason="leftover", first_offset=0, last_offset=9, records=10)
    assert not source.exists() and kept.read_bytes() == b"abcdefghij"
    assert kept == q.directory / "t-0" / "00000000000000000000.log.deleted"
    (entry,) = manifest(q)
    assert (entry["start"], entry["end"], entry["bytes"], entry["firstOffset"],
            entry["lastOffset"], entry["records"], entry["reason"], entry["sha256"]) == \
        (0, 10, 10, 0, 9, 10, "leftover", hashlib.sha256(b"abcdefghij").hexdigest())


def test_keep_file_copies_across_file_systems(tmp_path, monkeypatch):
    """A rename across file systems fails with EXDEV: the file is copied, synced, unlinked."""
    def exdev(src, dst):
        raise OSError(errno.EXDEV, "cross-device link")
    monkeypatch.setattr(disk_calls, "rename", exdev)
    source = segment(tmp_path)
    kept = run(tmp_path).keep_file(source, reason="r")
    assert not source.exists() and kept.read_bytes() == b"abcdefghij"


def test_keep_file_that_cannot_move_leaves_the_source(tmp_path, monkeypatch):
    def eio(src, dst):
        raise OSError(errno.EIO, "I/O error")
    monkeypatch.setattr(disk_calls, "rename", eio)
    source = segment(tmp_path)
    q = run(tmp_path)
    with pytest.raises(QuarantineError, match="cannot move .* into the quarantine"):
        q.keep_file(source, reason="r")
    assert source.read_bytes() == b"abcdefghij" and q.pieces == []


def test_a_quarantine_root_that_cannot_be_made_is_refused(tmp_path):
    (tmp_path / "q").write_bytes(b"a file")
    with pytest.raises(QuarantineError, match="cannot create a quarantine directory in"):
        run(tmp_path).keep_bytes(segment(tmp_path), 0, 1, reason="r")


def test_a_manifest_that_cannot_be_written_is_refused(tmp_path):
    source = segment(tmp_path)
    q = run(tmp_path)
    q.keep_bytes(source, 0, 1, reason="r")
    (q.directory / MANIFEST).unlink()
    (q.directory / MANIFEST).mkdir()
    with pytest.raises(QuarantineError, match="cannot write .*manifest.jsonl"):
        q.keep_bytes(source, 1, 2, reason="r")
    assert len(q.pieces) == 1


def test_offsets_text():
    """How the log line names a piece's offsets, known or not."""
    assert _offsets_text(None, None) == "offsets unknown"
    assert _offsets_text(5, None) == "offsets from 5"
    assert _offsets_text(5, 9) == "offsets 5-9"
    assert _offsets_text(5, 5) == "offsets 5-5"
    assert _offsets_text(5, 4) == "no offsets"
