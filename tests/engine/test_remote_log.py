"""A log directory read through an object store's API (``storage.remote``: pyarrow.fs, here
its local file system by ``file://`` URI) gives what the engine gives from the same directory
on disk: every record at both isolation levels, the Arrow columns, ListOffsets answers, the
log's offsets, and what the text streams render; and it reads only the bytes it needs."""

import pytest

from helpers.kafka_written import FIXTURE_NAMES
from helpers.paths import KAFKA_WRITTEN
from kfs.mount.text_stream import LogStream
from kfs.record_format import StreamFormat
from storage import LogConfig, LogManager
from storage.errors import UnknownTopicOrPartitionError
from storage.isolation import IsolationLevel
from storage.remote.object_store import ObjectStore, ObjectStoreError, RangedObject
from storage.remote.uri import redact
from storage.remote.remote_log import RemoteLogDirectory

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def rows(log, isolation):
    return [(r.offset, r.timestamp, int(r.timestamp_type), r.key, r.value, tuple(r.headers))
            for batch in log.reader.record_lists(0, isolation=isolation) for r in batch]


@pytest.fixture(scope="module")
def both():
    remote = RemoteLogDirectory(ObjectStore.from_uri(KAFKA_WRITTEN.as_uri()))
    local = LogManager(KAFKA_WRITTEN, read_only=True)
    yield remote, local
    remote.close()
    local.close()


@needs_fixtures
def test_partitions_are_the_directorys(both):
    remote, local = both
    assert remote.partition_names() == sorted(local.partition_names()) == sorted(FIXTURE_NAMES)


@needs_fixtures
@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_records_offsets_and_columns_equal_the_local_reads(both, name, isolation):
    remote, local = both
    r, lg = remote.get(name), local.get(name)
    assert (r.log_start_offset, r.log_end_offset, r.last_stable_offset) == \
        (lg.log_start_offset, lg.log_end_offset, lg.last_stable_offset)
    assert rows(r, isolation) == rows(lg, isolation) != []
    columns = [t.to_pylist() for t in r.reader.read_columns(0, None, isolation, headers=True)]
    assert columns == [t.to_pylist() for t in lg.reader.read_columns(0, None, isolation,
                                                                       headers=True)]
    for record in rows(lg, isolation)[::37]:
        found = [log.reader.find_offset_by_timestamp(record[1], isolation) for log in (r, lg)]
        assert [getattr(f, "offset", None) for f in found][0] == \
            [getattr(f, "offset", None) for f in found][1]


@needs_fixtures
@pytest.mark.parametrize("fmt", list(StreamFormat))
def test_text_streams_render_the_same_bytes(both, fmt):
    remote, local = both
    for name in FIXTURE_NAMES:
        a = LogStream(remote.get(name), fmt)
        b = LogStream(local.get(name), fmt)
        a.refresh()
        b.refresh()
        size = b.size(0)
        assert a.size(0) == size > 0
        assert a.read(0, 0, size) == b.read(0, 0, size)


@needs_fixtures
def test_a_narrow_read_fetches_index_objects_and_a_few_ranges(tmp_path, monkeypatch):
    """A read of one offset asks the store for the segment's index objects and byte ranges
    near the offset, not the whole .log."""
    store = ObjectStore.from_uri(KAFKA_WRITTEN.as_uri())
    fetched = []
    fetch = RangedObject._fetch

    def counting_fetch(self, position, nbytes):
        fetched.append(nbytes)
        return fetch(self, position, nbytes)
    monkeypatch.setattr(RangedObject, "_fetch", counting_fetch)
    logs = RemoteLogDirectory(store)
    try:
        log = logs.get("plain-0")
        fetched.clear()
        middle = log.log_end_offset // 2
        assert log.reader.read(middle).offset == middle
        size = sum(s.size for s in log.segments.all())
        assert 0 < sum(fetched) < size / 4, (fetched, size)
    finally:
        logs.close()


def test_a_missing_partition_and_a_missing_directory(tmp_path):
    (tmp_path / "t-0").mkdir()
    logs = RemoteLogDirectory(ObjectStore.from_uri(tmp_path.as_uri()))
    assert logs.partition_names() == ["t-0"]
    assert logs.get("t-0").log_end_offset == 0
    with pytest.raises(UnknownTopicOrPartitionError):
        logs.get("u-0")
    logs.close()
    with pytest.raises(ObjectStoreError, match="nothing: no such bucket or directory"):
        RemoteLogDirectory(ObjectStore.from_uri((tmp_path / "nothing").as_uri()))


def test_an_unknown_scheme_is_a_clear_error():
    with pytest.raises(ObjectStoreError, match="nope://"):
        ObjectStore.from_uri("nope://bucket/x")


def test_credentials_never_appear_in_messages():
    assert redact("s3://AKIA:SECRET@bucket/logs?x=1") == "s3://***@bucket/logs?…"
    assert "SECRET" not in ObjectStore(None, "bucket/logs",
                                       "s3://AKIA:SECRET@bucket/logs").describe("t-0")


@needs_fixtures
def test_a_log_written_by_kfs_reads_back_through_the_store(tmp_path):
    mgr = LogManager(tmp_path)
    (tmp_path / "t.topic.properties").write_text("segment.bytes=4096\n")
    log = mgr.create("t-0")
    for i in range(50):
        log.append([b"v-%d-%d" % (i, j) for j in range(20)], [b"k%d" % j for j in range(20)])
    expected = rows(log, IsolationLevel.READ_UNCOMMITTED)
    mgr.close()
    remote = RemoteLogDirectory(ObjectStore.from_uri(tmp_path.as_uri()))
    try:
        got = remote.get("t-0")
        assert len(got.segments) > 3
        assert rows(got, IsolationLevel.READ_UNCOMMITTED) == expected
    finally:
        remote.close()


def test_a_bulk_read_is_served_from_ranges_fetched_ahead(tmp_path):
    """Reads of a MiB at a time come from ranged requests of range_bytes, a few in flight;
    every byte equals the object's."""
    data = bytes(range(256)) * (40 * 4096)  # 40 MiB
    (tmp_path / "blob").write_bytes(data)
    store = ObjectStore.from_uri(tmp_path.as_uri())
    store.range_bytes, store.read_ahead = 4 << 20, 2
    blob = store.open(store.path("blob"), len(data))
    try:
        step = 1 << 20
        got = b"".join(blob.read_at(step, p) for p in range(0, len(data), step))
        assert got == data
        assert blob.read_at(100, 12345) == data[12345:12445]  # a small read: its bytes only
        assert blob.read_at(3 << 20, len(data) - (1 << 20)) == data[-(1 << 20):]
    finally:
        blob.close()
        store.close()


def test_a_range_read_fetches_nothing_past_its_end(tmp_path, monkeypatch):
    """``read_columns`` of the first quarter of a segment tells the store where it stops: the
    ranges read ahead (the whole window from the first read on) end there, not a window past
    it (a Spark task's 32 MiB of a 64 MiB segment fetched up to 24 MiB more)."""
    mgr = LogManager(tmp_path)
    (tmp_path / "t.topic.properties").write_text(f"segment.bytes={64 << 20}\n")
    log = mgr.create("t-0")
    for i in range(80):
        log.append([b"%0100d" % (i * 1000 + j) for j in range(1000)])
    mgr.close()
    fetched = []
    fetch = RangedObject._fetch

    def counting_fetch(self, position, nbytes):
        fetched.append((position, nbytes))
        return fetch(self, position, nbytes)
    monkeypatch.setattr(RangedObject, "_fetch", counting_fetch)
    store = ObjectStore.from_uri(tmp_path.as_uri())
    store.range_bytes, store.read_ahead = 1 << 20, 3
    remote = RemoteLogDirectory(store)
    try:
        got = remote.get("t-0")
        (segment,) = got.segments.all()
        end = got.log_end_offset // 4
        fetched.clear()  # (opening read the last batch, for the log end offset)
        rows_read = sum(t.num_rows for t in got.reader.read_columns(0, end))
        assert rows_read == end
        stop = got.reader.position_after(segment, end)
        assert segment.size // 4 < stop < segment.size // 4 + (64 << 10)
        assert max(p + n for p, n in fetched) <= stop, sorted(fetched)
        assert sum(n for _, n in fetched) <= stop
    finally:
        remote.close()


def test_an_object_replaced_since_it_was_read_is_read_again(tmp_path):
    """A store keeps index objects and opened ``.log`` objects by their listing entry (path,
    size, mtime): one replaced in place (a log directory synced again) is listed anew and read
    anew, never served from what was kept; one listed as empty is not requested."""
    import os

    store = ObjectStore.from_uri(tmp_path.as_uri())
    index, log = tmp_path / "x.index", tmp_path / "x.log"
    index.write_bytes(b"a" * 8)
    log.write_bytes(b"old")
    (tmp_path / "e.index").write_bytes(b"")

    def entries():
        return {info.base_name: info for info in store.list()}

    before = entries()
    assert store.read_small_object(before["x.index"]) == b"a" * 8
    assert store.open(before["x.log"].path, 3, before["x.log"].mtime_ns).read_at(3, 0) == b"old"
    index.write_bytes(b"b" * 16)
    log.write_bytes(b"newer")
    os.utime(log, ns=(before["x.log"].mtime_ns + 10**9,) * 2)
    after = entries()
    assert store.read_small_object(after["x.index"]) == b"b" * 16
    assert store.open(after["x.log"].path, 5, after["x.log"].mtime_ns).read_at(5, 0) == b"newer"
    store.fs = None  # (any request now fails)
    assert store.read_small_object(after["e.index"]) == b""
    assert store.read_small_object(after["x.index"]) == b"b" * 16
    store.close()
