"""Directories written by Kafka's own code (tests/fixtures/kafka-written), read through the
engine: every record by offset and the ListOffsets answer for every timestamp, compared with the
``.expected.jsonl`` Kafka's verifier wrote beside each directory."""

import base64
import bisect

import pytest

from helpers.kafka_written import FIXTURE_NAMES, expected_records
from helpers.paths import KAFKA_WRITTEN
from storage import LogManager, TimestampType
from storage.isolation import IsolationLevel

FIXTURES = KAFKA_WRITTEN
needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def b64(text):
    return None if text is None else base64.b64decode(text)


def as_expected(record):
    return {
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestampType": TimestampType(record.timestamp_type).name,
        "key": record.key,
        "value": record.value,
        "headers": [[k, v] for k, v in record.headers],
    }


def from_expected(row):
    return {
        "offset": row["offset"],
        "timestamp": row["timestamp"],
        "timestampType": row["timestampType"],
        "key": b64(row["key"]),
        "value": b64(row["value"]),
        "headers": [[k, b64(v)] for k, v in row["headers"]],
    }


@pytest.fixture(scope="module")
def manager():
    mgr = LogManager(FIXTURES, read_only=True)
    yield mgr
    mgr.close()


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_record_by_offset(manager, name):
    log = manager.get(name)
    rows = expected_records(name)
    by_offset = {row["offset"]: row for row in rows}
    assert log.log_end_offset == rows[-1]["offset"] + 1
    for offset in range(log.log_start_offset, log.log_end_offset + 2):
        record = log.reader.read(offset)
        if offset in by_offset:
            assert record is not None, offset
            assert as_expected(record) == from_expected(by_offset[offset])
        else:
            assert record is None, offset  # gaps left by compaction are not the neighbour


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_records_from_lists_every_record_in_order(manager, name):
    log = manager.get(name)
    got = []
    offset = 0
    while chunk := log.reader.records_from(offset, 97):
        got.extend(chunk)
        offset = chunk[-1].offset + 1
    assert [as_expected(r) for r in got] == [from_expected(row) for row in expected_records(name)]


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_list_offsets_by_time(manager, name):
    log = manager.get(name)
    rows = expected_records(name)
    # the answer for t >= 0 is the first offset whose timestamp is >= t: a suffix minimum over
    # the records sorted by timestamp (v0 records have none: -1; negative targets are
    # ListOffsets' special values, not times)
    by_time = sorted((r["timestamp"], r["offset"]) for r in rows if r["timestamp"] >= 0)
    suffix_min = [0] * len(by_time)
    for i in range(len(by_time) - 1, -1, -1):
        later = suffix_min[i + 1] if i + 1 < len(by_time) else by_time[i][1]
        suffix_min[i] = min(by_time[i][1], later)
    times = [t for t, _ in by_time]
    targets = sorted({t + d for t in times for d in (-1, 0, 1)} | {0, times[-1] + 10**6})
    assert targets[0] >= 0
    for target in targets:
        i = bisect.bisect_left(times, target)
        expected = suffix_min[i] if i < len(times) else None
        record = log.reader.find_offset_by_timestamp(target)
        assert (record.offset if record else None) == expected, target


@needs_fixtures
def test_txn_fixture_read_committed_hides_aborted_records_and_stops_at_the_lso(manager):
    """txn-0: one aborted transaction (producer 2000, offsets 189..262); every transaction is
    decided by the end, so the last stable offset is the log end offset."""
    log = manager.get("txn-0")
    rows = {r["offset"]: r for r in expected_records("txn-0")}
    aborted = {o for o, r in rows.items() if r["producerId"] == 2000 and 189 <= o <= 262}
    lso = log.last_stable_offset
    assert aborted and lso == log.log_end_offset
    committed = [r.offset for r in log.reader.records_from(0, 10_000, IsolationLevel.READ_COMMITTED)]
    assert committed == [o for o in sorted(rows) if o < lso and o not in aborted]
    everything = [r.offset for r in log.reader.records_from(0, 10_000)]
    assert everything == sorted(rows)  # read_uncommitted: all but the markers
    for offset in sorted(aborted)[:5]:
        assert log.reader.read(offset, IsolationLevel.READ_COMMITTED) is None
        assert log.reader.read(offset).offset == offset
    first_aborted = min(aborted)
    found = log.reader.find_offset_by_timestamp(rows[first_aborted]["timestamp"], IsolationLevel.READ_COMMITTED)
    assert found.offset not in aborted and found.timestamp >= rows[first_aborted]["timestamp"]
