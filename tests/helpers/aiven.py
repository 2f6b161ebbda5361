"""Aiven's tiered storage as Kafka 4.1.1 with the plugin wrote it (``tests/fixtures/aiven-tiered``,
runs A plain, B zstd chunks, C AES-GCM chunks): the records a real KafkaConsumer read, and a
run copied where a test may damage it."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
from pathlib import Path

from .paths import AIVEN_TIERED

RUNS = ("A", "B", "C")
TOPICS = ("plain", "lz4", "txn")
_TIMESTAMP_TYPES = {0: "CreateTime", 1: "LogAppendTime"}


def expected(run: str, topic: str, isolation: str) -> list[dict]:
    """What the consumer read of ``topic`` at ``isolation`` (``read_committed`` or
    ``read_uncommitted``), by (partition, offset)."""
    path = AIVEN_TIERED / run / "expected" / topic / f"expected-{isolation}.jsonl.gz"
    with gzip.open(path, "rt") as f:
        return [json.loads(line) for line in f]


def _b64(value: bytes | None) -> str | None:
    return None if value is None else base64.b64encode(value).decode("ascii")


def as_expected(partition: int, record) -> dict:
    """A kfs ``Record`` as the expected files write a ConsumerRecord."""
    return {"partition": partition, "offset": record.offset, "timestamp": record.timestamp,
            "timestampType": _TIMESTAMP_TYPES[record.timestamp_type],
            "key_b64": _b64(record.key), "value_b64": _b64(record.value),
            "headers": [[k, _b64(v)] for k, v in record.headers]}


def spark_row_as_expected(row) -> dict:
    """A row of Spark's ``format("kfs")`` (``includeHeaders``) as the expected files write a
    ConsumerRecord (the timestamp as epoch ms)."""
    epoch_ms = round(row.timestamp.timestamp() * 1000)
    return {"partition": row.partition, "offset": row.offset, "timestamp": epoch_ms,
            "timestampType": _TIMESTAMP_TYPES[row.timestampType],
            "key_b64": _b64(None if row.key is None else bytes(row.key)),
            "value_b64": _b64(None if row.value is None else bytes(row.value)),
            "headers": [[h.key, _b64(None if h.value is None else bytes(h.value))]
                        for h in row.headers or []]}


def topic_records(directory, topic: str, isolation) -> list[dict]:
    """Every record of ``topic``'s partitions in ``directory`` (a ``LogDirectory``) at
    ``isolation`` (an ``IsolationLevel``), as :func:`as_expected` writes them."""
    out = []
    for name in directory.partition_names():
        if name.rpartition("-")[0] != topic:
            continue
        log = directory.get(name)
        out.extend(as_expected(log.partition, r)
                   for batch in log.reader.record_lists(0, isolation=isolation) for r in batch)
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


def copy_run(tmp_path: Path, run: str) -> Path:
    """Run ``run`` copied into ``tmp_path`` (writable: a test damages its objects)."""
    target = tmp_path / run
    shutil.copytree(AIVEN_TIERED / run, target, ignore=shutil.ignore_patterns("expected"))
    for path in [target, *target.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o200)
    return target


def segment_objects(root: Path, topic: str, partition: int = 0) -> list[Path]:
    """The ``.rsm-manifest`` objects of a partition under a run's ``remote/``, by offset."""
    (directory,) = (root / "remote" / "tiered-storage").glob(f"{topic}-" + "?" * 22)
    return sorted((directory / str(partition)).glob("*.rsm-manifest"))
