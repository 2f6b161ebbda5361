"""Directories Kafka itself wrote, mounted read-only through a real FUSE mount: every record
(value, key, timestamp, headers) by offset, and the by-time answer for every timestamp, against
the ``.expected.jsonl`` beside each directory."""

import base64
import bisect
import json
import os
import subprocess

import pytest

from helpers.kafka_written import FIXTURE_NAMES, expected_records
from helpers.paths import KAFKA_WRITTEN

FIXTURES = KAFKA_WRITTEN

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def b64(text):
    return None if text is None else base64.b64decode(text)


def headers_json(headers):
    """Expected ``user.kafka.headers`` content, decoded."""
    out = []
    for key, value in headers:
        raw = b64(value)
        if raw is None:
            out.append([key, None])
        else:
            try:
                out.append([key, raw.decode("utf-8")])
            except UnicodeDecodeError:
                out.append([key, {"base64": value}])
    return out


@pytest.fixture(scope="module")
def fixtures_mount(tmp_path_factory):
    from helpers.mounts import Mounter
    from helpers.needs import require_fuse

    require_fuse()
    mounter = Mounter(tmp_path_factory.mktemp("fixtures"))
    try:
        yield mounter(FIXTURES, "--read-only").path
    finally:
        mounter.close_all()


@needs_fixtures
@pytest.mark.fuse
def test_root_lists_the_fixture_partitions(fixtures_mount):
    listing = subprocess.run(["ls", fixtures_mount], capture_output=True, check=True,
                             timeout=120).stdout.split()
    assert {name.encode() for name in FIXTURE_NAMES} <= set(listing)


@needs_fixtures
@pytest.mark.fuse
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_record_through_the_mount(fixtures_mount, name):
    rows = expected_records(name)
    by_offset = fixtures_mount / name / "by-offset"
    listed = sorted(int(n) for n in os.listdir(by_offset))
    assert listed == [r["offset"] for r in rows]
    topic, partition = name.rsplit("-", 1)
    for row in rows:
        path = by_offset / str(row["offset"])
        value = b64(row["value"])
        with open(path, "rb") as f:
            assert f.read() == (value or b""), row["offset"]
        st = os.stat(path)
        assert st.st_size == len(value or b"")
        assert st.st_mtime_ns == max(row["timestamp"], 0) * 1_000_000  # v0: none (-1)
        attrs = {a: os.getxattr(path, a) for a in os.listxattr(path)}
        assert attrs["user.kafka.offset"] == str(row["offset"]).encode()
        assert attrs["user.kafka.topic"] == topic.encode()
        assert attrs["user.kafka.partition"] == partition.encode()
        assert attrs["user.kafka.timestamp"] == str(row["timestamp"]).encode()
        assert attrs["user.kafka.timestampType"] == {
            "CREATE_TIME": b"CreateTime", "LOG_APPEND_TIME": b"LogAppendTime",
            "NO_TIMESTAMP_TYPE": b"NoTimestampType"}[row["timestampType"]]
        if row["key"] is None:
            assert "user.kafka.key" not in attrs and attrs["user.kafka.key.null"] == b"true"
        else:
            assert attrs["user.kafka.key"] == b64(row["key"])
        assert ("user.kafka.value.null" in attrs) == (value is None)
        assert json.loads(attrs["user.kafka.headers"]) == headers_json(row["headers"])


@needs_fixtures
@pytest.mark.fuse
@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_by_time_through_the_mount(fixtures_mount, name):
    rows = expected_records(name)
    by_time = sorted((r["timestamp"], r["offset"]) for r in rows if r["timestamp"] >= 0)
    times = [t for t, _ in by_time]
    suffix_min, best = [0] * len(by_time), None
    for i in range(len(by_time) - 1, -1, -1):
        best = by_time[i][1] if best is None else min(best, by_time[i][1])
        suffix_min[i] = best
    values = {r["offset"]: b64(r["value"]) for r in rows}
    candidates = set(times) | {t + 1 for t in times[::11]} | {0}  # every record's timestamp
    targets = sorted(t for t in candidates if t <= times[-1])
    for target in targets:
        link = fixtures_mount / name / "by-time" / str(target)
        expected = suffix_min[bisect.bisect_left(times, target)]
        assert os.readlink(link) == f"../by-offset/{expected}", target
        with open(link, "rb") as f:  # follows the link to the record
            assert f.read() == (values[expected] or b"")
    assert not (fixtures_mount / name / "by-time" / str(times[-1] + 1)).exists()


@needs_fixtures
@pytest.mark.fuse
def test_read_committed_mount_hides_the_aborted_transaction(tmp_path):
    from helpers.mounts import Mounter
    from helpers.needs import require_fuse

    require_fuse()
    rows = expected_records("txn-0")
    aborted = {r["offset"] for r in rows if r["producerId"] == 2000 and 189 <= r["offset"] <= 262}
    mounter = Mounter(tmp_path)
    try:
        root = mounter(FIXTURES, "--read-only", "--isolation-level", "read_committed").path
        by_offset = root / "txn-0" / "by-offset"
        listed = sorted(int(n) for n in os.listdir(by_offset))
        assert listed == [r["offset"] for r in rows if r["offset"] not in aborted]
        first = min(aborted)
        cat = subprocess.run(["cat", str(by_offset / str(first))], capture_output=True, timeout=120)
        assert cat.returncode != 0 and b"No such file" in cat.stderr
        lso = subprocess.run(["getfattr", "--only-values", "-n", "user.kafka.lastStableOffset",
                              str(root / "txn-0")], capture_output=True, check=True, timeout=120).stdout
        assert int(lso) == 396
    finally:
        mounter.close_all()
