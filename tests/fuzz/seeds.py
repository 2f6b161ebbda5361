"""Seed corpora for the fuzz targets, cut from segments Kafka itself wrote.

``batch/``: one file per record batch (v2 batches and v0/v1 log entries), split at the batch
boundaries the 12-byte log overhead gives; ``segment/``: each non-empty ``.log`` file whole.
Files are named by a hash of their bytes, so equal batches are kept once.

Usage: ``python tests/fuzz/seeds.py OUT_DIR`` (fixtures from $KFS_FIXTURES, by default
tests/fixtures).
"""

from __future__ import annotations

import hashlib
import os
import struct
import sys
from pathlib import Path
from typing import Iterator

FIXTURES = Path(os.environ.get("KFS_FIXTURES", Path(__file__).resolve().parents[1] / "fixtures"))
_SIZE = struct.Struct(">i")


def segments(root: Path = FIXTURES) -> list[Path]:
    """Every non-empty ``.log`` segment under ``root``, sorted."""
    return sorted(p for p in root.rglob("*.log") if p.stat().st_size)


def split_batches(buf: bytes) -> Iterator[bytes]:
    """Each whole batch of a segment's bytes, walked by the size fields alone (independent of
    the codec under test); stops at a partial batch or a size below the smallest entry (14)."""
    pos = 0
    while pos + 12 <= len(buf):
        (length,) = _SIZE.unpack_from(buf, pos + 8)
        if length < 14 or pos + 12 + length > len(buf):
            return
        yield buf[pos:pos + 12 + length]
        pos += 12 + length


def _write(directory: Path, data: bytes) -> None:
    (directory / hashlib.sha1(data).hexdigest()).write_bytes(data)


def build(out: Path, root: Path = FIXTURES) -> tuple[int, int]:
    """Write ``out/batch`` and ``out/segment``; returns how many files each holds."""
    batch_dir, segment_dir = out / "batch", out / "segment"
    batch_dir.mkdir(parents=True, exist_ok=True)
    segment_dir.mkdir(parents=True, exist_ok=True)
    for path in segments(root):
        buf = path.read_bytes()
        _write(segment_dir, buf)
        for batch in split_batches(buf):
            _write(batch_dir, batch)
    return len(os.listdir(batch_dir)), len(os.listdir(segment_dir))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    batches, segs = build(Path(sys.argv[1]))
    print(f"seeds: {batches} batches, {segs} segments in {sys.argv[1]}")
