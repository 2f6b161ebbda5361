"""Copies of Kafka-written partitions (tests/fixtures/kafka-written) and the damage the tests
do to them: a flipped bit, a lying batchLength."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct

from .paths import KAFKA_WRITTEN

CLEAN_SHUTDOWN = '{"version":0,"brokerEpoch":0}'
FIRST = "00000000000000000000.log"  # plain-0's first segment
LAST = "00000000000000004903.log"  # and its last


def copy_partitions(backing, *names, clean_shutdown=True):
    """Copies of Kafka-written partitions in ``backing``, with Kafka's clean-shutdown marker."""
    backing.mkdir(parents=True, exist_ok=True)
    for name in names:
        shutil.copytree(KAFKA_WRITTEN / name, backing / name)
        for path in [backing / name, *(backing / name).iterdir()]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
    if clean_shutdown:
        (backing / ".kafka_cleanshutdown").write_text(CLEAN_SHUTDOWN)
    return backing


def batches(path):
    """(position, base offset, size) of every batch of a .log, walked by the sizes."""
    data, position, out = path.read_bytes(), 0, []
    while position < len(data):
        base, length = struct.unpack_from(">qi", data, position)
        out.append((position, base, length + 12))
        position += length + 12
    return out


def flip_bit(path, position):
    data = bytearray(path.read_bytes())
    data[position] ^= 0x01
    path.write_bytes(data)


def lie_about_length(path, batch, length=5):
    """Write a batchLength of ``length`` into the ``batch``-th batch of ``path``; its
    position."""
    position = batches(path)[batch][0]
    data = bytearray(path.read_bytes())
    struct.pack_into(">i", data, position + 8, length)
    path.write_bytes(data)
    return position


def expected(name="plain-0"):
    """offset -> (key, value) of a fixture's data records."""
    rows = [json.loads(line) for line in open(KAFKA_WRITTEN / f"{name}.expected.jsonl")]
    b64 = lambda t: None if t is None else base64.b64decode(t)  # noqa: E731
    return {r["offset"]: (b64(r["key"]), b64(r["value"])) for r in rows if not r["isControl"]}


def digests(directory):
    return {p.relative_to(directory).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}
