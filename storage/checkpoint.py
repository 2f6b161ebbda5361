"""Kafka's checkpoint text files (``CheckpointFile``): a version line, an entry count line, then
one entry per line, rewritten atomically (``<name>.tmp``, fsync, rename, fsync of the directory).

Two kinds live in a backing directory: the log-dir offset checkpoints
(``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``; entry ``<topic>
<partition> <offset>``) and each partition's ``leader-epoch-checkpoint`` (entry ``<epoch>
<start offset>``). All are version 0.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

from storage import disk_calls
from storage.errors import CorruptCheckpointError

_VERSION = 0
_FIELDS = re.compile(r"\s+")
# One lock per checkpoint file: the mount's retention job and its periodic job both write
# log-start-offset-checkpoint from worker threads, and two writers would share its .tmp
# (Kafka's CheckpointFile.write is synchronized). Checkpoint names are fixed per directory, so
# the table stays small.
_FILE_LOCKS: dict[str, threading.Lock] = {}
_FILE_LOCKS_GUARD = threading.Lock()

T = TypeVar("T")


def write_atomically(path: Path, data: str | bytes, sync: bool = True) -> None:
    """Write ``<path>.tmp``, fsync, rename over ``path``, fsync the directory, as Kafka writes
    its checkpoints and snapshots; a crash leaves the old file or the new one, never a mix.
    ``sync=False`` skips both fsyncs. On OSError the temp file is removed and ``path`` is left
    as it was."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:  # each call through storage.disk_calls, where tests inject faults
            disk_calls.write_all(fd, data.encode() if isinstance(data, str) else data)
            if sync:
                disk_calls.fsync(fd)
        finally:
            os.close(fd)
        disk_calls.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_directory(path.parent)


fsync_directory = disk_calls.fsync_directory


def write_checkpoint(path: Path, entries: Iterable[str]) -> None:
    """Write entry lines (already formatted) as a version-0 checkpoint file; writers of one
    file from several threads take turns."""
    lines = list(entries)
    with _FILE_LOCKS_GUARD:
        lock = _FILE_LOCKS.setdefault(os.path.abspath(path), threading.Lock())
    with lock:
        write_atomically(path, "".join(f"{line}\n" for line in [str(_VERSION), str(len(lines)), *lines]))


def read_checkpoint(path: Path, parse: Callable[[list[str]], T]) -> list[T]:
    """The entries of a checkpoint file, each parsed by ``parse`` from its whitespace-split
    fields. A missing or empty file has none. Raises CorruptCheckpointError for a wrong version,
    a count that does not match or a line that does not parse."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return parse_checkpoint(text, path, parse)


def parse_checkpoint(text: str, name, parse: Callable[[list[str]], T]) -> list[T]:
    """:func:`read_checkpoint` of a checkpoint's ``text`` (read from anywhere; ``name`` says
    which file in errors)."""
    lines = text.splitlines()
    if not lines:
        return []
    try:
        if int(lines[0]) != _VERSION:
            raise CorruptCheckpointError(f"{name}: unsupported version {lines[0]!r}")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise CorruptCheckpointError(f"{name}: expected {count} entries, found {len(lines) - 2}")
        return [parse(_FIELDS.split(line.strip())) for line in lines[2:]]
    except (ValueError, IndexError) as e:
        raise CorruptCheckpointError(f"{name}: malformed line ({e})") from None


def _offset_entry(fields: list[str]) -> tuple[str, int]:
    topic, partition, offset = fields  # ValueError when there are not exactly three
    return f"{topic}-{int(partition)}", int(offset)


def read_offsets(path: Path) -> dict[str, int]:
    """A log-dir offset checkpoint as ``{"<topic>-<N>": offset}``."""
    return dict(read_checkpoint(path, _offset_entry))


def parse_offsets(text: str, name) -> dict[str, int]:
    """:func:`read_offsets` of a checkpoint's ``text``."""
    return dict(parse_checkpoint(text, name, _offset_entry))


def write_offsets(path: Path, offsets: dict[str, int]) -> None:
    """Write ``{"<topic>-<N>": offset}`` as a log-dir offset checkpoint."""
    entries = []
    for name, offset in sorted(offsets.items()):
        topic, _, partition = name.rpartition("-")
        entries.append(f"{topic} {partition} {offset}")
    write_checkpoint(path, entries)


def _epoch_entry(fields: list[str]) -> tuple[int, int]:
    epoch, start_offset = fields
    return int(epoch), int(start_offset)


def read_epochs(path: Path) -> list[tuple[int, int]]:
    """A ``leader-epoch-checkpoint`` as [(epoch, start offset)] in file order."""
    return read_checkpoint(path, _epoch_entry)


def write_epochs(path: Path, entries: list[tuple[int, int]]) -> None:
    write_checkpoint(path, (f"{epoch} {start}" for epoch, start in entries))
