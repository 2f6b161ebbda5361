"""The Kafka-written fixtures (tests/fixtures/kafka-written): the records Kafka's verifier
wrote beside each directory, and the index entries Kafka 4.1.1 leaves for a segment."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from storage.log_files import offset_from_file_name
from storage.records import iter_batches

from .paths import KAFKA_WRITTEN

FIXTURE_NAMES = ["plain-0", "codecs-0", "compacted-0", "legacy-0", "txn-0"]


def expected_records(name):
    with open(KAFKA_WRITTEN / f"{name}.expected.jsonl") as f:
        rows = [json.loads(line) for line in f]
    return [r for r in rows if not r["isControl"]]


def kafka_41_indexes(log_path: Path, interval: int = 4096) -> tuple[bytes, bytes]:
    """The ``.index`` and ``.timeindex`` Kafka 4.1.1 leaves for a segment written by appends
    and then rolled or closed, whatever the batches' grouping into appends: ``LogSegment.append``
    walks each batch: a larger maxTimestamp becomes the largest so far (with the batch's last
    offset); when more than ``interval`` bytes were appended since the last entry, the offset
    index gets (batch last offset, batch position) and the time index the largest so far if
    its timestamp is larger than its last entry's; ``onBecomeInactiveSegment``/``close`` add the
    largest so far the same way."""
    base = offset_from_file_name(log_path.name)
    offsets, times = [], []
    since, max_ts, max_ts_offset, last_time = 0, -1, base, -1

    def maybe_append_time():
        nonlocal last_time
        if max_ts > last_time:
            times.append(struct.pack(">qi", max_ts, max_ts_offset - base))
            last_time = max_ts

    for batch in iter_batches(log_path.read_bytes()):
        if batch.max_timestamp > max_ts:
            max_ts, max_ts_offset = batch.max_timestamp, batch.last_offset
        if since > interval:
            offsets.append(struct.pack(">ii", batch.last_offset - base, batch.position))
            maybe_append_time()
            since = 0
        since += batch.size_in_bytes
    maybe_append_time()
    return b"".join(offsets), b"".join(times)
