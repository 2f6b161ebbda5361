"""A topic larger than the fixtures', laid out in a bucket as Aiven's tiered-storage plugin lays
it out (``../shared/aiven-tiered-layout.md``), for ``bench_aiven.py``'s narrow read: the plugin
cannot run here (it is not on Maven Central), and its fixtures (1 MiB segments, 256 KiB chunks)
are too small for a 1% range to be 1% of anything. kfs never writes this layout; this module
exists for the benchmark alone, and the reader's correctness is tested on the plugin's own
bytes (``tests/engine/test_aiven_tiered.py``).

Segments are written by kfs's engine (``segment.bytes``), then each rolled one becomes
``<key.prefix><topic>-<topic id>/0/<20-digit base offset>-<segment id>.{log,indexes,rsm-manifest}``:
the ``.log`` cut into ``chunk_size`` chunks, each zstd-compressed on its own when
``compress`` (a ``variable`` chunk index, ``ChunkSizesBinaryCodec``'s encoding in a zstd frame,
base64), else as they are (a ``fixed`` index); ``.indexes`` the offset index, the time index
and the leader-epoch checkpoint back to back (no producer snapshot: size 0)."""

from __future__ import annotations

import base64
import json
import os
import struct
from pathlib import Path

import zstandard

PLUGIN = "io.aiven.kafka.tieredstorage.RemoteStorageManager"
S3_BACKEND = "io.aiven.kafka.tieredstorage.storage.s3.S3Storage"


def uuid_text() -> str:
    """A random Kafka Uuid as its text (``storage.coordinator.schema.uuid_string``)."""
    from storage.coordinator.schema import uuid_string

    return uuid_string(os.urandom(16))


def write_partition(backing: Path, topic: str, megabytes: int, segment_bytes: int,
                    start_ms: int) -> int:
    """About ``megabytes`` MB of records in ``topic``-0 under ``backing`` (kfs's engine,
    ``segment_bytes`` segments), timestamps ``start_ms`` + the offset; values of 100 random hex
    characters (zstd halves them). The record count."""
    from storage import LogManager
    from storage.records import build_batch

    backing.mkdir(parents=True, exist_ok=True)
    (backing / f"{topic}.topic.properties").write_text(f"segment.bytes={segment_bytes}\n")
    manager = LogManager(backing)
    try:
        log = manager.create(f"{topic}-0")
        n, per_batch = 0, 500
        while log.segments.size_in_bytes < megabytes << 20:
            values = [os.urandom(50).hex().encode() for _ in range(per_batch)]
            log.append_as_leader(build_batch(0, values, None,
                                             [start_ms + n + i for i in range(per_batch)]))
            n += per_batch
    finally:
        manager.close()
    return n


def chunk_sizes_codec(sizes: list[int]) -> bytes:
    """``ChunkSizesBinaryCodec``'s encoding of ``sizes`` (big-endian): the count, then for two
    or more the smallest of all but the last, the bytes per value, each but the last less
    that base, and the last in full."""
    if len(sizes) < 2:
        return struct.pack(">i", len(sizes)) + b"".join(struct.pack(">i", s) for s in sizes)
    base = min(sizes[:-1])
    width = max(1, (max(sizes[:-1]) - base).bit_length() + 7 >> 3)
    body = b"".join((s - base).to_bytes(width, "big") for s in sizes[:-1])
    return struct.pack(">iib", len(sizes), base, width) + body + struct.pack(">i", sizes[-1])


def upload_segments(partition_dir: Path, root: Path, key_prefix: str, topic: str,
                    chunk_size: int, compress: bool) -> int:
    """Every rolled segment of ``partition_dir`` as the plugin's three objects under ``root``
    (a bucket's directory); the active segment stays local, as a broker keeps it. The bytes
    written."""
    topic_id = uuid_text()
    where = root / f"{key_prefix}{topic}-{topic_id}" / "0"
    where.mkdir(parents=True)
    logs = sorted(partition_dir.glob("*.log"))
    written = 0
    for log in logs[:-1]:
        base = log.stem
        stem = where / f"{base}-{uuid_text()}"
        data = log.read_bytes()
        chunks = [data[i:i + chunk_size] for i in range(0, len(data), chunk_size)]
        if compress:
            zstd = zstandard.ZstdCompressor()
            chunks = [zstd.compress(c) for c in chunks]
            index = {"type": "variable", "originalChunkSize": chunk_size,
                     "originalFileSize": len(data), "transformedChunks": base64.b64encode(
                         zstandard.ZstdCompressor(write_content_size=True).compress(
                             chunk_sizes_codec([len(c) for c in chunks]))).decode()}
        else:
            index = {"type": "fixed", "originalChunkSize": chunk_size,
                     "originalFileSize": len(data), "transformedChunkSize": chunk_size,
                     "finalTransformedChunkSize": len(chunks[-1])}
        pieces = {"offset": log.with_suffix(".index").read_bytes(),
                  "timestamp": log.with_suffix(".timeindex").read_bytes(),
                  "producerSnapshot": b"", "leaderEpoch": b"0\n1\n0 %d\n" % int(base)}
        positions, at = {}, 0
        for name, piece in pieces.items():
            positions[name] = {"position": at, "size": len(piece)}
            at += len(piece)
        positions["transaction"] = None
        manifest = {"version": "1", "chunkIndex": index, "segmentIndexes": positions,
                    "compression": compress}
        objects = {".log": b"".join(chunks), ".indexes": b"".join(pieces.values()),
                   ".rsm-manifest": json.dumps(manifest, separators=(",", ":")).encode()}
        for suffix, body in objects.items():
            stem.with_name(stem.name + suffix).write_bytes(body)
            written += len(body)
    return written


def s3_properties(target: Path, bucket: str, server, key_prefix: str) -> Path:
    """A broker's properties naming the plugin with ``bucket`` of ``server`` (S3Proxy) as its
    S3 backend and ``key_prefix``."""
    target.write_text("\n".join([
        f"remote.log.storage.manager.class.name={PLUGIN}",
        f"rsm.config.storage.backend.class={S3_BACKEND}",
        f"rsm.config.s3.bucket.name={bucket}", f"rsm.config.s3.region={server.region}",
        f"rsm.config.s3.endpoint.url={server.endpoint}",
        "rsm.config.s3.path.style.access.enabled=true", f"rsm.config.key.prefix={key_prefix}",
    ]) + "\n")
    return target
