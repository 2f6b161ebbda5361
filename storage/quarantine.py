"""Keeping what recovery or repair removes from a partition's log, instead of deleting it.

A Kafka broker cuts a corrupt tail and deletes the segments after it: a follower fetches them
again from the leader. kfs has no replica, so bytes it takes out of a log are moved here: a
directory OUTSIDE the backing directory (a broker refuses a log dir that holds a directory
which is not a partition), by default ``<backing dir>.quarantine/<UTC time>/``, holding per
partition the pieces cut out of segments (``<topic>-<N>/<segment file>.<start>-<end>``, the
bytes [start, end) of that file, byte for byte) and the files moved whole
(``<topic>-<N>/<file name>``), and ``manifest.jsonl``: one JSON object per piece saying where
it came from (``partition``, ``source`` file, byte range ``start``/``end``, ``bytes``,
``firstOffset``/``lastOffset``, ``records`` when known, ``reason``, the ``file`` it is kept as,
relative to the quarantine directory, and its ``sha256``).

Each piece is written and fsynced, and its manifest line too, before the log loses it.
"""

from __future__ import annotations

import datetime
import errno
import hashlib
import itertools
import json
import logging
import os
import shutil
from pathlib import Path

from storage import disk_calls
from storage.checkpoint import fsync_directory
from storage.clock import SYSTEM_CLOCK, Clock
from storage.errors import KafkaStorageError

log = logging.getLogger(__name__)

MANIFEST = "manifest.jsonl"
QUARANTINE_SUFFIX = ".quarantine"
_COPY_BLOCK = 1 << 20


class QuarantineError(KafkaStorageError):
    """A piece could not be kept (the quarantine directory cannot be written): the log is left
    as it was."""


def default_root(backing_dir: str | os.PathLike) -> Path:
    """``<backing dir>.quarantine``, beside the backing directory."""
    backing = Path(backing_dir).resolve()
    return backing.with_name(backing.name + QUARANTINE_SUFFIX)


def check_outside(root: str | os.PathLike, backing_dir: str | os.PathLike) -> None:
    """ValueError when ``root`` is the backing directory or inside it."""
    root, backing = Path(root).resolve(), Path(backing_dir).resolve()
    if root == backing or backing in root.parents:
        raise ValueError(f"the quarantine directory {root} must be outside the backing "
                         f"directory {backing}")


class Quarantine:
    """Where the pieces of one run (a repair, or a mount's recovery) go:
    ``root/<UTC time>/`` (``20250102T030405.678Z`` from ``clock``; ``.2``, ``.3``... appended
    when a run of the same millisecond has it), created on the first piece kept
    (:attr:`directory`).

    What recovery cuts (a corrupt or torn tail, the segments after it) is kept either way
    (``storage.log_loader``); ``keep_all`` also keeps the ``.log`` files a load deletes as
    leftovers (``.deleted``, ``.cleaned``, an unfinished ``.swap``: a repair).
    ``pieces`` lists the manifest entries written so far.
    """

    def __init__(self, root: str | os.PathLike, *, keep_all: bool, clock: Clock = SYSTEM_CLOCK):
        self.root = Path(root)
        self.keep_all = keep_all
        self.clock = clock
        self.directory: Path | None = None
        self.pieces: list[dict] = []

    def _dir(self) -> Path:
        if self.directory is None:
            ms = self.clock.milliseconds()
            stamp = datetime.datetime.fromtimestamp(ms // 1000, datetime.timezone.utc).strftime(
                f"%Y%m%dT%H%M%S.{ms % 1000:03d}Z")
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                for n in itertools.count(1):
                    directory = self.root / (stamp if n == 1 else f"{stamp}.{n}")
                    try:
                        directory.mkdir()
                    except FileExistsError:
                        continue
                    self.directory = directory
                    break
            except OSError as e:
                raise QuarantineError(f"cannot create a quarantine directory in {self.root}: "
                                      f"{e}") from e
        return self.directory

    def _target(self, partition: str, name: str) -> Path:
        folder = self._dir() / partition
        folder.mkdir(exist_ok=True)
        target, n = folder / name, 1
        while target.exists():  # the same name twice in one run: number the later ones
            n += 1
            target = folder / f"{name}.{n}"
        return target

    def keep_bytes(self, source: Path, start: int, end: int, *, reason: str,
                   first_offset: int | None = None, last_offset: int | None = None,
                   records: int | None = None) -> Path:
        """Copy bytes [start, end) of ``source`` (a file of a partition directory) into the
        quarantine, durably, and note them in the manifest; the caller then cuts them.
        Returns the copy's path. Raises QuarantineError (nothing noted)."""
        source = Path(source)
        try:
            target = self._target(source.parent.name, f"{source.name}.{start}-{end}")
            digest = hashlib.sha256()
            with open(source, "rb") as src, open(target, "xb", buffering=0) as dst:
                src.seek(start)
                left = end - start
                while left > 0:
                    chunk = src.read(min(_COPY_BLOCK, left))
                    if not chunk:
                        raise OSError(errno.EIO, f"{source} ends before byte {end}")
                    disk_calls.write_all(dst.fileno(), chunk)
                    digest.update(chunk)
                    left -= len(chunk)
                disk_calls.fsync(dst.fileno())
            fsync_directory(target.parent)
        except QuarantineError:
            raise
        except OSError as e:
            raise QuarantineError(f"cannot keep bytes {start}-{end} of {source}: {e}") from e
        self._note(source, start, end, target, digest.hexdigest(), reason, first_offset,
                   last_offset, records)
        return target

    def keep_file(self, source: Path, *, reason: str, first_offset: int | None = None,
                  last_offset: int | None = None, records: int | None = None) -> Path:
        """Move ``source`` (a file of a partition directory) into the quarantine (a rename, or
        a durable copy then unlink across file systems) and note it in the manifest. Returns
        its new path. Raises QuarantineError (``source`` left in place)."""
        source = Path(source)
        try:
            size = source.stat().st_size
            target = self._target(source.parent.name, source.name)
            digest = _sha256(source)
            try:
                disk_calls.rename(source, target)
            except OSError as e:
                if e.errno != errno.EXDEV:
                    raise
                shutil.copyfile(source, target)
                with open(target, "rb") as f:
                    disk_calls.fsync(f.fileno())
                source.unlink()
            fsync_directory(target.parent)
            fsync_directory(source.parent)
        except OSError as e:
            raise QuarantineError(f"cannot move {source} into the quarantine: {e}") from e
        self._note(source, 0, size, target, digest, reason, first_offset, last_offset, records)
        return target

    def _note(self, source: Path, start: int, end: int, target: Path, sha256: str, reason: str,
              first_offset: int | None, last_offset: int | None, records: int | None) -> None:
        entry = {"partition": source.parent.name, "source": f"{source.parent.name}/{source.name}",
                 "start": start, "end": end, "bytes": end - start, "firstOffset": first_offset,
                 "lastOffset": last_offset, "records": records, "reason": reason,
                 "file": str(target.relative_to(self.directory)), "sha256": sha256}
        try:
            with open(self.directory / MANIFEST, "ab", buffering=0) as f:
                disk_calls.write_all(f.fileno(), (json.dumps(entry) + "\n").encode())
                disk_calls.fsync(f.fileno())
        except OSError as e:
            raise QuarantineError(f"cannot write {self.directory / MANIFEST}: {e}") from e
        self.pieces.append(entry)
        log.info("kept %s bytes %d-%d (%s) as %s: %s", entry["source"], start, end,
                    _offsets_text(first_offset, last_offset), target, reason)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_COPY_BLOCK):
            digest.update(chunk)
    return digest.hexdigest()


def _offsets_text(first: int | None, last: int | None) -> str:
    if first is None:
        return "offsets unknown"
    if last is None:
        return f"offsets from {first}"
    return f"offsets {first}-{last}" if last >= first else "no offsets"
