"""The door every reader of a segment goes through (storage.segment_source): positioned reads of
a ``.log``, short only at its end, an index read whole up to its first hole, a bare ``.log``'s
bytes bounded at its length when opened (Kafka's ``FileRecordsTest``: reads past the end, a
file that grows while a slice of it is held), and an object's bytes fetched with ranged
requests that never ask for a byte past the object (Kafka's ``RemoteStorageManager``:
``fetchLogSegment`` from a position, ``fetchIndex`` for one index)."""

import errno
import os
from pathlib import Path

import pytest

from storage.open_files import FilePool, PooledFile
from storage.segment_source import (EMPTY_INDEX, FileRecords, IndexContents,
                                    LocalSegmentSource, ObjectSegmentSource, SegmentSource,
                                    read_local_index)

BYTES = bytes(range(256)) * 4  # 1 KiB, every byte telling its position


def held(path: Path) -> bool:
    """Whether this process holds ``path`` open."""
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                return True
        except OSError:
            continue
    return False


@pytest.fixture
def log_path(tmp_path):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(BYTES)
    return path


# -- LocalSegmentSource: a segment's local files ---------------------------------------------

def test_a_local_source_names_and_sizes_its_log(log_path):
    os.utime(log_path, ns=(1_700_000_000_123_456_789, 1_700_000_000_987_654_321))
    source = LocalSegmentSource.of_path(log_path)
    try:
        assert source.name == "00000000000000000000.log"
        assert source.log_size() == len(BYTES)
        assert source.modified_ms() == 1_700_000_000_987  # whole milliseconds of the mtime
        with open(log_path, "ab") as f:  # a writer appends: the size now, past what was read
            f.write(b"more")
        assert source.log_size() == len(BYTES) + 4
    finally:
        source.close()


@pytest.mark.parametrize("nowait", [False, True])
def test_a_local_read_is_short_only_at_the_end_of_the_log(log_path, nowait):
    """FileRecordsTest.testRead: a slice from a position, its bytes exactly; at the end what
    is left, past it nothing (``nowait``: bytes in the page cache, as just written are)."""
    source = LocalSegmentSource.of_path(log_path)
    try:
        assert source.read_at(0, 10, nowait) == BYTES[:10]
        assert source.read_at(300, 200, nowait) == BYTES[300:500]
        assert source.read_at(1000, 100, nowait) == BYTES[1000:]  # short at the end
        assert source.read_at(len(BYTES), 8, nowait) == b""
        assert source.read_at(len(BYTES) + 100, 8, nowait) == b""
    finally:
        source.close()


def test_a_local_read_into_fills_what_the_log_has(log_path):
    source = LocalSegmentSource.of_path(log_path)
    try:
        buffer = bytearray(300)
        got = source.read_into(memoryview(buffer), 100)
        assert bytes(got) == BYTES[100:400] and len(got) == 300
        got = source.read_into(memoryview(buffer), 900)
        assert bytes(got) == BYTES[900:] and len(got) == len(BYTES) - 900  # the part filled
        assert len(source.read_into(memoryview(buffer), len(BYTES))) == 0
    finally:
        source.close()


def test_a_nowait_read_not_all_in_the_page_cache_would_block(log_path, monkeypatch):
    """``RWF_NOWAIT`` gives what the page cache holds: short of the log's end, the rest would
    wait for the disk, so the read says EAGAIN instead of returning a short read."""
    source = LocalSegmentSource.of_path(log_path)
    real = os.preadv

    def cached_first_100(fd, buffers, position, *flags):
        n = real(fd, buffers, position, *flags)
        return min(n, max(100 - position, 0))

    monkeypatch.setattr(os, "preadv", cached_first_100)
    try:
        assert source.read_at(0, 50, nowait=True) == BYTES[:50]
        with pytest.raises(BlockingIOError) as err:
            source.read_at(50, 100, nowait=True)
        assert err.value.errno == errno.EAGAIN
        assert str(log_path) in str(err.value) and "page cache" in str(err.value)
        assert source.read_at(50, 100) == BYTES[50:150]  # a read that may wait gets it all
    finally:
        source.close()


def test_a_nowait_read_the_kernel_refuses_would_block(log_path, monkeypatch):
    """EAGAIN from ``preadv`` (or a file system without ``RWF_NOWAIT``: EOPNOTSUPP) is
    BlockingIOError naming the file: the caller reads again from a thread that may wait."""
    source = LocalSegmentSource.of_path(log_path)

    def refused(fd, buffers, position, *flags):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(os, "preadv", refused)
    try:
        with pytest.raises(BlockingIOError) as err:
            source.read_at(0, 10, nowait=True)
        assert err.value.errno == errno.EAGAIN
        assert str(err.value) == f"[Errno {errno.EAGAIN}] {log_path}: " \
                                 f"{os.strerror(errno.EOPNOTSUPP)}"
    finally:
        source.close()


def test_a_nowait_read_of_a_replaced_log_is_not_retried(tmp_path, log_path):
    """A ``.log`` replaced while its descriptor was idle (a cleaner's swap) is
    FileNotFoundError at once, as a read that may wait gets: waiting would not bring it back."""
    pool = FilePool(1)
    source = LocalSegmentSource(PooledFile(log_path, os.O_RDONLY, pool))
    other = PooledFile(tmp_path / "other", os.O_RDONLY | os.O_CREAT, pool)
    try:
        assert source.read_at(0, 4, nowait=True) == BYTES[:4]
        other.open_now()  # the pool closes the idle .log
        swapped = log_path.with_suffix(".log.swap")
        swapped.write_bytes(b"new bytes")
        os.replace(swapped, log_path)
        for nowait in (True, False):
            with pytest.raises(FileNotFoundError):
                source.read_at(0, 4, nowait)
    finally:
        source.close()
        other.close()


def test_closing_a_local_source_releases_its_descriptor(log_path):
    source = LocalSegmentSource.of_path(log_path)
    source.read_at(0, 1)
    assert held(log_path)
    source.close()
    assert not held(log_path)
    with pytest.raises(ValueError):
        source.read_at(0, 1)


def test_a_local_source_reads_its_indexes_whole(log_path):
    index = log_path.with_suffix(".index")
    index.write_bytes(b"\x00\x00\x00\x05\x00\x00\x01\x00")
    source = LocalSegmentSource.of_path(log_path)
    try:
        assert source.read_index(index) == IndexContents(index.read_bytes(), 8)
        assert source.read_index(log_path.with_suffix(".timeindex")) == EMPTY_INDEX
    finally:
        source.close()


# -- read_local_index: an index file read once, up to its first hole --------------------------

def test_an_index_is_read_up_to_its_first_hole(tmp_path):
    """An active index is preallocated sparse (Kafka's ``AbstractIndex`` sets the file's
    length to its maximum): the hole reads as no entries, the length is the file's."""
    entries = bytes(range(1, 256)) * 48 + b"\x01" * 48  # 3 whole 4 KiB blocks, no zero block
    path = tmp_path / "00000000000000000000.index"
    with open(path, "wb") as f:
        f.write(entries)
        f.truncate(1 << 20)
    got = read_local_index(path)
    assert got.length == 1 << 20
    assert got.data == entries


def test_an_index_without_holes_is_read_whole(tmp_path, monkeypatch):
    """Where ``SEEK_HOLE`` is refused (an old file system) the whole file is read."""
    path = tmp_path / "00000000000000000000.timeindex"
    data = b"\x00" * 12 + b"\x07" * 12
    path.write_bytes(data)
    assert read_local_index(path) == IndexContents(data, 24)

    def no_seek_hole(fd, position, how):
        raise OSError(errno.EINVAL, "no SEEK_HOLE")

    monkeypatch.setattr(os, "lseek", no_seek_hole)
    assert read_local_index(path) == IndexContents(data, 24)


def test_an_index_just_created_reads_as_no_entries(tmp_path):
    """OffsetIndexTest's empty index: created at its maximum length, all of it a hole."""
    path = tmp_path / "00000000000000000000.index"
    with open(path, "wb") as f:
        f.truncate(10 << 20)
    assert read_local_index(path) == IndexContents(b"", 10 << 20)


def test_an_empty_or_missing_index_reads_as_no_entries(tmp_path):
    empty = tmp_path / "00000000000000000000.index"
    empty.touch()
    assert read_local_index(empty) == EMPTY_INDEX
    assert read_local_index(tmp_path / "00000000000000000000.txnindex") == EMPTY_INDEX


def test_an_index_read_holds_no_descriptor(tmp_path):
    """The file is read once and its descriptor closed: a writer may trim or delete it."""
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"\x01" * 8)
    assert read_local_index(path).data == b"\x01" * 8
    assert not held(path)


# -- FileRecords: a bare .log's bytes [0, size) -------------------------------------------------

def test_file_records_are_bounded_at_the_size_when_opened(log_path):
    """FileRecordsTest.testFileSize / testIterationOverPartialAndTruncation: bytes appended
    after the records were opened are not theirs."""
    source = LocalSegmentSource.of_path(log_path)
    try:
        records = FileRecords(source)
        assert records.size == len(BYTES)
        with open(log_path, "ab") as f:
            f.write(b"appended later")
        assert records.size == len(BYTES)
        buffer = bytearray(100)
        assert bytes(records.read_into(buffer, 0)) == BYTES[:100]
        assert bytes(records.read_into(buffer, 1000)) == BYTES[1000:]  # not the appended bytes
        assert len(records.read_into(buffer, len(BYTES))) == 0
        assert len(records.read_into(buffer, len(BYTES) + 50)) == 0
        assert records.read_at(1020, 8) == BYTES[1020:] + b"appe"  # a read at: the source's
    finally:
        source.close()


def test_file_records_pass_nowait_to_their_source():
    calls = []

    class Recording(SegmentSource):
        name = "recording"

        def log_size(self):
            return 10

        def read_at(self, position, size, nowait=False):
            calls.append((position, size, nowait))
            return b"x" * size

    records = FileRecords(Recording())
    assert records.read_at(2, 3, True) == b"xxx"
    assert records.read_at(4, 1) == b"x"
    assert calls == [(2, 3, True), (4, 1, False)]


# -- ObjectSegmentSource: a segment's objects in an object store ---------------------------------

class Info:
    """A listing entry (``pyarrow.fs.FileInfo``'s fields a source reads)."""

    def __init__(self, path, size, mtime_ns=None):
        self.path, self.size, self.mtime_ns = path, size, mtime_ns


class RangedObject:
    """An object read with ranged requests that, as S3 does (416), refuses a range starting at
    or past the object's end; it records each request."""

    def __init__(self, data, requests):
        self.data, self.requests = data, requests
        self.until = "unsaid"
        self.closed = False

    def read_at(self, nbytes, position):
        self.requests.append((position, nbytes))
        assert 0 < nbytes and position + nbytes <= len(self.data), "range not satisfiable"
        return self.data[position:position + nbytes]

    def read_into(self, view, position):
        data = self.read_at(len(view), position)
        view[:len(data)] = data
        return view[:len(data)]

    def read_ahead_until(self, end):
        self.until = end

    def close(self):
        self.closed = True


class Store:
    """An object store holding ``objects`` (path -> bytes)."""

    def __init__(self, objects):
        self.objects = objects
        self.opened = []  # (path, size, mtime_ns) of each open
        self.requests = []
        self.ranged = []
        self.closed = False

    def open(self, path, size, mtime_ns=None):
        self.opened.append((path, size, mtime_ns))
        self.ranged.append(RangedObject(self.objects[path], self.requests))
        return self.ranged[-1]

    def read_small_object(self, where):
        return self.objects.get(where.path)

    def close(self):
        self.closed = True


def object_source(owns_store=False, mtime_ns=1_700_000_000_987_654_321):
    store = Store({"t-0/0.log": BYTES, "t-0/0.index": b"\x00\x00\x00\x01" * 2,
                   "t-0/0.timeindex": b""})
    indexes = {".index": Info("t-0/0.index", 8), ".timeindex": Info("t-0/0.timeindex", 0),
               ".txnindex": Info("t-0/0.txnindex", 0)}
    log = Info("t-0/0.log", len(BYTES), mtime_ns)
    # (a directory's segments share its store: they are made without owns_store)
    return store, (ObjectSegmentSource(store, log, indexes, owns_store=True) if owns_store
                   else ObjectSegmentSource(store, log, indexes))


def test_an_object_source_names_and_sizes_its_log_as_listed():
    store, source = object_source()
    assert source.name == "t-0/0.log"
    assert source.log_size() == len(BYTES)
    assert source.modified_ms() == 1_700_000_000_987
    assert store.opened == []  # the listing says it all: no request
    _, unlisted = object_source(mtime_ns=None)
    assert unlisted.modified_ms() == 0


def test_an_object_read_asks_only_for_the_objects_bytes():
    """A read is one ranged request for its bytes, cut at the object's end; a read at or past
    the end asks for nothing (a range starting past an S3 object is refused)."""
    store, source = object_source()
    assert source.read_at(300, 200) == BYTES[300:500]
    assert source.read_at(1000, 100) == BYTES[1000:]
    assert source.read_at(len(BYTES), 8) == b""
    assert source.read_at(len(BYTES) + 100, 8) == b""
    assert source.read_at(5, 0) == b""
    assert store.requests == [(300, 200), (1000, 24)]
    assert store.opened == [("t-0/0.log", len(BYTES), 1_700_000_000_987_654_321)]  # once


def test_an_object_read_into_asks_only_for_the_objects_bytes():
    store, source = object_source()
    buffer = memoryview(bytearray(100))
    assert bytes(source.read_into(buffer, 100)) == BYTES[100:200]
    assert bytes(source.read_into(buffer, 1000)) == BYTES[1000:]
    assert len(source.read_into(buffer, len(BYTES))) == 0
    assert len(source.read_into(buffer, len(BYTES) + 100)) == 0
    assert store.requests == [(100, 100), (1000, 24)]
    assert len(store.opened) == 1


def test_an_object_read_that_may_not_wait_is_refused():
    """Every read is a request: a reader on an event loop sends it to a thread instead."""
    store, source = object_source()
    with pytest.raises(BlockingIOError) as err:
        source.read_at(0, 10, nowait=True)
    assert err.value.errno == errno.EAGAIN and "t-0/0.log" in str(err.value)
    assert store.opened == [] and store.requests == []


def test_an_object_source_passes_the_readers_end_on():
    store, source = object_source()
    source.read_ahead_until(700)
    assert store.ranged[0].until == 700
    source.read_ahead_until(None)
    assert store.ranged[0].until is None
    assert len(store.opened) == 1


def test_an_object_source_reads_an_index_by_its_suffix():
    """RemoteStorageManager.fetchIndex: the index object of the kind asked for, whole; a
    kind the segment has no object for reads as no entries."""
    store, source = object_source()
    assert source.read_index(Path("/anywhere/00000000000000000000.index")) == \
        IndexContents(b"\x00\x00\x00\x01" * 2, 8)
    assert source.read_index(Path("00000000000000000000.timeindex")) == IndexContents(b"", 0)
    assert source.read_index(Path("00000000000000000000.txnindex")) == EMPTY_INDEX  # no object
    del source._indexes[".txnindex"]
    assert source.read_index(Path("00000000000000000000.txnindex")) == EMPTY_INDEX  # unlisted


def test_closing_an_object_source_closes_what_it_opened():
    """Its object; the store only when the store was opened for it alone."""
    store, source = object_source()
    source.close()  # nothing read: nothing to close
    assert store.ranged == [] and not store.closed
    store, source = object_source()
    source.read_at(0, 1)
    source.close()
    assert store.ranged[0].closed and not store.closed
    source.close()  # closing again closes nothing again
    assert len(store.ranged) == 1 and not store.closed
    store, source = object_source(owns_store=True)
    source.read_at(0, 1)
    source.close()
    assert store.ranged[0].closed and store.closed
    store, source = object_source(owns_store=True)
    source.close()
    assert store.closed
