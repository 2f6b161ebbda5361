"""The partition log: appends, index and roll rules of Kafka's LogSegment/UnifiedLog (§5.3,
§6.2, §8.2 of the reference), reads by offset and time, reopening and recovery."""

import dataclasses
import errno
import json
import logging
import os
import random
import threading
import time
import struct

import pytest

from helpers.waits import DEADLINE_S, Deadline, held_by_another_thread, joined
from storage import LogConfig, LogManager
from storage.clock import now_ms
from storage.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTopicError,
    KeySeparatorMissingError,
    PartitionExistsError,
    ReadOnlyLogError,
    RecordTooLargeError,
)
from storage.isolation import IsolationLevel
from storage.log import Log
from storage.log_files import log_file, offset_from_file_name, offset_index_file, time_index_file
from storage.records import RecordBatch, build_batch, iter_batches


def open_log(path, **config):
    path.mkdir(parents=True, exist_ok=True)
    return Log(path, "t", 0, LogConfig(**config))


def batch(base, n, ts, size=100):
    """A batch of ``n`` records of ``size``-byte values, every record stamped ``ts``."""
    return build_batch(base, [bytes([65 + i % 26]) * size for i in range(n)], None, ts)


def index_entries(path, fmt):
    data = path.read_bytes()
    size = struct.calcsize(fmt)
    return [struct.unpack_from(fmt, data, i) for i in range(0, len(data), size)]


def test_append_assigns_offsets_and_reads_back(tmp_path):
    log = open_log(tmp_path / "t-0")
    assert log.append([b"hello"]) == 0
    assert log.append([b"a", b"b", b"c"], keys=[b"k1", None, b""]) == 1
    assert log.log_end_offset == 4
    rec = log.reader.read(2)
    assert (rec.offset, rec.key, rec.value) == (2, None, b"b")
    assert log.reader.read(1).key == b"k1" and log.reader.read(3).key == b""
    assert log.reader.read(4) is None and log.reader.read(-1) is None
    assert [r.value for r in log.reader.records_from(1, 10)] == [b"a", b"b", b"c"]
    assert [r.value for r in log.reader.records_from(0, 2)] == [b"hello", b"a"]


def test_timestamps_are_append_time_in_epoch_ms(tmp_path):
    import time

    log = open_log(tmp_path / "t-0")
    before = time.time_ns() // 10**6
    log.append([b"x"])
    after = time.time_ns() // 10**6
    assert before <= log.reader.read(0).timestamp <= after


def test_appends_group_records_into_batches_of_batch_size(tmp_path):
    log = open_log(tmp_path / "t-0", batch_size=16384)
    values = [b"v" * 100 for _ in range(1000)]
    log.append(values)
    data = log_file(tmp_path / "t-0", 0).read_bytes()
    sizes, pos, counts = [], 0, []
    while pos < len(data):
        b = RecordBatch(data, pos)
        sizes.append(b.size_in_bytes)
        counts.append(b.records_count)
        pos += b.size_in_bytes
    assert sum(counts) == 1000
    assert len(sizes) > 1 and max(sizes) <= 16384
    assert all(s > 0.95 * 16384 for s in sizes[:-1])  # nearly full batches before the last


def test_one_append_of_more_batches_than_one_pwritev_takes(tmp_path):
    """An append cut into more batches than IOV_MAX (the kernel refuses a pwritev of more
    buffers with EINVAL) is written whole, every record readable, the .log as long as its
    batches."""
    from storage.segment import IOV_MAX

    log = open_log(tmp_path / "t-0", batch_size=1024)
    values = [b"%06d" % i + b"v" * 1000 for i in range(IOV_MAX * 2 + 5)]
    log.append(values)
    data = log_file(tmp_path / "t-0", 0).read_bytes()
    pos, batches = 0, 0
    while pos < len(data):
        pos += RecordBatch(data, pos).size_in_bytes
        batches += 1
    assert batches > IOV_MAX and pos == len(data)
    assert [r.value for r in log.reader.records_from(0, len(values))] == values


def test_append_takes_null_values_headers_and_timestamps_per_record(tmp_path):
    """What ``append.jsonl`` hands the engine: per record a key, a value or None (a
    tombstone), headers and a CreateTime of its own (None: now); batches of at most
    batch.size whatever the headers, timestamps as deltas from each batch's first."""
    log = open_log(tmp_path / "t-0", batch_size=1024)
    now = time.time_ns() // 10**6
    n = 200
    values = [None if i % 7 == 3 else b"v%d" % i for i in range(n)]
    keys = [b"k%d" % i if i % 5 else None for i in range(n)]
    headers = [[("h", b"x" * 30), ("\u00e9", None)] if i % 2 else None for i in range(n)]
    stamps = [None if i % 11 == 0 else 10**12 + (-1) ** i * 1000 * i for i in range(n)]
    assert log.append(values, keys, headers, stamps) == 0
    got = [r for rs in log.reader.record_lists(0) for r in rs]
    assert [r.value for r in got] == values and [r.key for r in got] == keys
    assert [list(r.headers) for r in got] == [h or [] for h in headers]
    assert all(r.timestamp == t for r, t in zip(got, stamps) if t is not None)
    assert all(now <= r.timestamp <= time.time_ns() // 10**6 for r, t in zip(got, stamps)
               if t is None)
    batches = list(iter_batches(log_file(tmp_path / "t-0", 0).read_bytes()))
    assert len(batches) > 5 and max(b.size_in_bytes for b in batches) <= 1024
    for b in batches:  # the time index's view: each batch's max timestamp
        assert b.max_timestamp == max(r.timestamp for r in b.records())
    with pytest.raises(ValueError):
        log.append([b"x"], timestamps=[-5])
    with pytest.raises(ValueError):
        log.append([b"x", b"y"], headers=[None])
    with pytest.raises(RecordTooLargeError):
        open_log(tmp_path / "u-0", max_message_bytes=500).append(
            [b"x"], headers=[[("h", b"y" * 500)]])
    assert log.log_end_offset == n


def test_append_with_log_append_time_stamps_batches_now(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    before = time.time_ns() // 10**6
    log.append([b"a", None], [b"k", b"k"], timestamps=[5, 7])
    assert all(before <= r.timestamp <= time.time_ns() // 10**6 for r in log.reader.records_from(0, 2))


def test_offset_index_entry_rule(tmp_path):
    # §5.3: an entry (last offset of the append, position before it) is added only when more
    # than index.interval.bytes were appended since the last entry; the first append never is.
    log = open_log(tmp_path / "t-0", index_interval_bytes=1000)
    positions, offset, pos = [], 0, 0
    for n in (3, 3, 12, 1, 20, 2):
        data = batch(offset, n, 1000 + offset)
        positions.append((offset + n - 1, pos, len(data)))
        log.append_batches(data)
        offset += n
        pos += len(data)
    expected, since = [], 0
    for last_offset, position, size in positions:
        if since > 1000:
            expected.append((last_offset, position))
            since = 0
        since += size
    log.close()
    got = index_entries(offset_index_file(tmp_path / "t-0", 0), ">ii")
    assert got == expected and expected



@pytest.mark.parametrize("interval", [1, 1000, 4096], ids=["every batch indexed", "sparse",
                                                          "sparser"])
def test_find_batch_answers_as_a_scan_from_the_segment_start(tmp_path, interval):
    # find_batch reads the batch the next index entry names alone when it holds the offset;
    # whatever the index's density, the answer is the scan's (LogSegment.translateOffset).
    log = open_log(tmp_path / "t-0", index_interval_bytes=interval)
    offset = 0
    for n in (3, 1, 12, 1, 20, 2, 7, 1, 30, 5):
        log.append_batches(batch(offset, n, 1000 + offset))
        offset += n
    segment = log.segments.floor(0)
    assert segment.offset_index.entries > (1 if interval > 1 else 8)
    scan = list(segment.scan_batches(0))
    for target in range(-1, offset + 1):
        want = next(((p, b.base_offset) for p, b in scan if b.last_offset >= target), None)
        found = segment.find_batch(target)
        assert (found and (found[0], found[1].base_offset)) == (want or None), target
    log.close()

def test_time_index_tracks_max_timestamp_so_far(tmp_path):
    # §6.2: entries (max timestamp so far, last offset of the first batch carrying it), only
    # at offset-index points, strictly increasing; a final entry on close.
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    timestamps = [500, 300, 800, 800, 700, 900, 100]
    for i, ts in enumerate(timestamps):
        log.append_batches(batch(i * 2, 2, ts))
    log.close()
    got = index_entries(time_index_file(tmp_path / "t-0", 0), ">qi")
    # entries are attempted from the second append on (first append never indexed)
    expected, max_ts, max_off = [], -1, -1
    for i, ts in enumerate(timestamps):
        if ts > max_ts:
            max_ts, max_off = ts, i * 2 + 1
        if i >= 1 and (not expected or max_ts > expected[-1][0]):
            expected.append((max_ts, max_off))
    assert got == expected
    assert got[-1] == (900, 11)


def test_roll_on_segment_bytes_and_new_base_is_log_end_offset(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=2000)
    for i in range(30):
        log.append([b"x" * 150])
    bases = sorted(offset_from_file_name(p.name) for p in (tmp_path / "t-0").glob("*.log"))
    assert len(bases) > 2 and bases[0] == 0
    for base in bases[1:]:
        assert log.reader.read(base).offset == base  # every segment starts at its first record
    for p in (tmp_path / "t-0").glob("*.log"):
        assert p.stat().st_size <= 2000
    assert [log.reader.read(i).value for i in range(30)] == [b"x" * 150] * 30


def test_roll_on_segment_ms_uses_record_timestamps(tmp_path):
    log = open_log(tmp_path / "t-0", segment_ms=1000)
    log.append_batches(batch(0, 1, 10_000))
    log.append_batches(batch(1, 1, 10_900))  # 900 ms after the first batch: same segment
    log.append_batches(batch(2, 1, 11_001))  # 1001 ms: roll
    bases = sorted(offset_from_file_name(p.name) for p in (tmp_path / "t-0").glob("*.log"))
    assert bases == [0, 2]


def test_roll_when_index_is_full_trims_and_adds_final_time_entry(tmp_path):
    log = open_log(tmp_path / "t-0", segment_index_bytes=36, index_interval_bytes=0)
    for i in range(10):
        log.append_batches(batch(i, 1, 1000 + i))
    segs = sorted((tmp_path / "t-0").glob("*.log"))
    assert len(segs) > 2
    offsets = index_entries(offset_index_file(tmp_path / "t-0", 0), ">ii")
    times = index_entries(time_index_file(tmp_path / "t-0", 0), ">qi")
    assert len(offsets) <= 4 and len(times) <= 3
    # the final time-index entry names the segment's true max timestamp
    next_base = offset_from_file_name(segs[1].name)
    assert times[-1] == (1000 + next_base - 1, next_base - 1)
    # the active segment's indexes are preallocated
    active = segs[-1].with_suffix("")
    assert active.with_suffix(".index").stat().st_size == 32
    assert active.with_suffix(".timeindex").stat().st_size == 36


def test_reopen_resumes_at_log_end_offset(tmp_path):
    mgr = LogManager(tmp_path)
    log = mgr.create("orders-0")
    log.append([b"a", b"b"])
    log.append([b"c"])
    mgr.close()
    assert (tmp_path / ".kafka_cleanshutdown").exists()
    assert offset_index_file(tmp_path / "orders-0", 0).stat().st_size == 0
    mgr = LogManager(tmp_path)
    assert not (tmp_path / ".kafka_cleanshutdown").exists()  # consumed at startup, as Kafka
    log = mgr.get("orders-0")
    assert log.log_end_offset == 3
    assert log.append([b"d"]) == 3
    assert [log.reader.read(i).value for i in range(4)] == [b"a", b"b", b"c", b"d"]
    mgr.close()


def test_unclean_open_cuts_torn_tail(tmp_path):
    mgr = LogManager(tmp_path)
    log = mgr.create("orders-0")
    log.append([b"one"])
    log.append([b"two"])
    mgr.close()
    os.remove(tmp_path / ".kafka_cleanshutdown")
    path = log_file(tmp_path / "orders-0", 0)
    whole = path.stat().st_size
    with open(path, "ab") as f:
        f.write(batch(2, 1, 5)[:40])  # a torn batch, as after a crash mid-write
    mgr = LogManager(tmp_path)
    log = mgr.get("orders-0")
    assert path.stat().st_size == whole
    assert log.log_end_offset == 2
    assert log.append([b"three"]) == 2
    assert log.reader.read(2).value == b"three"
    mgr.close()


def _crash_then(backing, damage):
    """Two appends to orders-0 in ``backing``, an unclean stop (no clean-shutdown marker),
    then ``damage(.log path)``; the .log's bytes after the damage."""
    mgr = LogManager(backing)
    log = mgr.create("orders-0")
    log.append([b"one"])
    log.append([b"two"])
    mgr.close()
    os.remove(backing / ".kafka_cleanshutdown")
    path = log_file(backing / "orders-0", 0)
    damage(path)
    return path.read_bytes()


def _flip_fifth_byte_from_the_end(path):
    data = bytearray(path.read_bytes())
    data[-5] ^= 0x01
    path.write_bytes(data)


def _random_bytes(path):
    path.write_bytes(random.Random(25).randbytes(5000))


def _torn_tail(path):
    with open(path, "ab") as f:
        f.write(batch(2, 1, 5)[:40])


@pytest.mark.parametrize("damage, kept_from, reason", [
    (_flip_fifth_byte_from_the_end, "second", "Record batch at offset 1 is corrupt"),
    (_random_bytes, 0, "offsets from 0"),
    (_torn_tail, "end", "runs past the end of the file (a torn write"),
], ids=["corrupt-last-batch", "random-bytes", "torn-tail"])
def test_every_byte_recovery_cuts_is_kept_and_said(tmp_path, damage, kept_from, reason):
    # Issue 25, item 1: a corrupt last batch, a segment of random bytes and a torn tail, cut
    # by the recovery after an unclean stop, are kept in the quarantine with a manifest line,
    # logged, in the manager's notices (a mount's stderr) and in Log.salvaged (user.kfs.damage)
    backing = tmp_path / "data"
    whole = log_file(backing / "orders-0", 0)
    data = _crash_then(backing, damage)
    first_batch = len(batch(0, 1, 0, size=3))  # the size of each appended batch
    start = {"second": first_batch, "end": 2 * first_batch}.get(kept_from, kept_from)
    mgr = LogManager(backing)
    log = mgr.get("orders-0")
    assert whole.stat().st_size == start
    (run,) = (tmp_path / "data.quarantine").iterdir()
    piece = run / "orders-0" / f"00000000000000000000.log.{start}-{len(data)}"
    assert piece.read_bytes() == data[start:]
    (entry,) = [json.loads(line) for line in (run / "manifest.jsonl").read_text().splitlines()]
    assert (entry["start"], entry["end"], entry["firstOffset"]) == \
        (start, len(data), 0 if start == 0 else start // first_batch)
    (line,) = log.salvaged
    assert line.startswith(f"recovery cut bytes {start}-{len(data)} of 00000000000000000000.log")
    assert reason in line and f"kept in the quarantine {run}" in line
    assert mgr.notices == [f"orders-0: {line}"]
    assert log.log_end_offset == start // first_batch
    mgr.close()


def test_read_only_manager_changes_nothing(tmp_path):
    mgr = LogManager(tmp_path)
    mgr.create("orders-0").append([b"x"])
    mgr.close()
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    ro = LogManager(tmp_path, read_only=True)
    log = ro.get("orders-0")
    assert log.reader.read(0).value == b"x"
    with pytest.raises(ReadOnlyLogError):
        log.append([b"y"])
    with pytest.raises(ReadOnlyLogError):
        ro.create("other-0")
    ro.close()
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


def test_create_validates_names_and_shares_topic_id(tmp_path):
    mgr = LogManager(tmp_path)
    for bad in ("orders", "-0", "orders-x", "orders-01", "a b-0", "../x-0", "x" * 250 + "-0", "..-0"):
        with pytest.raises(InvalidTopicError):
            mgr.create(bad)
    mgr.create("my.orders_v2-0")
    mgr.create("my.orders_v2-1")
    with pytest.raises(PartitionExistsError):
        mgr.create("my.orders_v2-0")
    meta0 = (tmp_path / "my.orders_v2-0" / "partition.metadata").read_text()
    meta1 = (tmp_path / "my.orders_v2-1" / "partition.metadata").read_text()
    assert meta0 == meta1 and meta0.startswith("version: 0\ntopic_id: ") and not meta0.endswith("\n")
    assert len(meta0.split("topic_id: ")[1]) == 22
    assert mgr.partition_names() == ["my.orders_v2-0", "my.orders_v2-1"]
    mgr.close()


def test_oversized_record_is_refused_and_nothing_is_written(tmp_path):
    log = open_log(tmp_path / "t-0", max_message_bytes=1000)
    log.append([b"ok"])
    size = log.segments.size_in_bytes
    with pytest.raises(RecordTooLargeError):
        log.append([b"small", b"y" * 1000])
    assert log.log_end_offset == 1 and log.segments.size_in_bytes == size


def test_failed_write_truncates_back_and_takes_the_log_offline(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0", batch_size=200)
    log.append([b"keep"])
    size = log.segments.size_in_bytes
    from storage import disk_calls
    from storage.errors import OfflineLogError

    calls = {"n": 0}
    real_pwrite = os.pwrite

    def failing_pwritev(fd, buffers, pos):
        calls["n"] += 1  # the batches go down in one write: half of it lands, then the disk fills
        data = b"".join(buffers)
        real_pwrite(fd, data[:len(data) // 2], pos)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(disk_calls, "pwritev", failing_pwritev)
    with pytest.raises(OSError) as err:
        log.append([b"z" * 150] * 5)  # several batches; the write fails half-way
    assert err.value.errno == 28
    monkeypatch.undo()
    assert log.log_end_offset == 1 and log.segments.size_in_bytes == size
    assert log.reader.read(1) is None and log.reader.read(0).value == b"keep"  # reads go on
    with pytest.raises(OfflineLogError) as refused:  # Kafka's LogDirFailureChannel
        log.append([b"after"])
    assert refused.value.errno == errno.EIO
    log.close()
    reopened = open_log(tmp_path / "t-0")  # the next open recovers it
    assert reopened.log_end_offset == 1 and reopened.append([b"after"]) == 1
    reopened.close()


def test_find_offset_by_timestamp_is_list_offsets(tmp_path):
    log = open_log(tmp_path / "t-0", index_interval_bytes=0, segment_bytes=600)
    timestamps = [100, 300, 200, 200, 500, 400, 600]
    for i, ts in enumerate(timestamps):
        log.append_batches(batch(i, 1, ts))
    assert len(log.segments) > 1
    for target in range(0, 700, 25):
        expected = next((i for i, ts in enumerate(timestamps) if ts >= target), None)
        rec = log.reader.find_offset_by_timestamp(target)
        assert (rec.offset if rec else None) == expected, target
    assert log.reader.find_offset_by_timestamp(601) is None


def test_config_from_server_and_topic_properties(tmp_path):
    (tmp_path / "server.properties").write_text(
        "log.segment.bytes=5000\nlog.roll.hours=2\ncompression.type=zstd\n"
    )
    (tmp_path / "orders.topic.properties").write_text("segment.bytes = 3000\n")
    mgr = LogManager(tmp_path)
    orders = mgr.create("orders-0")
    other = mgr.create("other-0")
    assert orders.config.segment_bytes == 3000 and other.config.segment_bytes == 5000
    assert other.config.segment_ms == 7_200_000
    other.append([b"compress me " * 50])
    data = log_file(tmp_path / "other-0", 0).read_bytes()
    assert RecordBatch(data).compression_type.kafka_name == "zstd"
    assert other.reader.read(0).value == b"compress me " * 50
    mgr.close()


def test_nowait_reads_answer_from_the_page_cache_or_raise(tmp_path, monkeypatch):
    log = open_log(tmp_path / "t-0")
    log.append([b"cached"])
    assert log.reader.read(0, nowait=True).value == b"cached"
    assert log.reader.find_offset_by_timestamp(0, nowait=True).offset == 0
    from storage import segment as segment_module

    def not_cached(fd, buffers, offset, flags):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(segment_module.os, "preadv", not_cached)
    with pytest.raises(BlockingIOError):
        log.reader.read(0, nowait=True)
    with pytest.raises(BlockingIOError):
        log.reader.find_offset_by_timestamp(0, nowait=True)
    assert log.reader.read(0).value == b"cached"  # the waiting path is unaffected


def test_full_disk_raises_enospc_and_keeps_the_log_valid(small_disk):
    import errno as errno_module

    mgr = LogManager(small_disk)
    log = mgr.create("t-0")
    stored = 0
    with pytest.raises(OSError) as err:
        for i in range(10_000):
            log.append([b"%04d" % i + b"x" * 500] * 20)
            stored += 20
    assert err.value.errno == errno_module.ENOSPC
    assert log.log_end_offset == stored  # the failed append left nothing behind
    assert log.reader.read(stored - 1).value.startswith(b"%04d" % (stored // 20 - 1))
    assert log.reader.read(stored) is None
    try:
        mgr.close()
    except OSError as e:  # the checkpoints may not fit either: the next start then recovers
        assert e.errno == errno_module.ENOSPC
    reopened = LogManager(small_disk, read_only=True)
    log = reopened.get("t-0")
    assert log.log_end_offset == stored
    assert [log.reader.read(o).value[:4] for o in range(0, stored, 20)] == [
        b"%04d" % i for i in range(stored // 20)]
    reopened.close()


def test_concurrent_reader_never_sees_half_a_batch(tmp_path):
    import threading

    log = open_log(tmp_path / "t-0", segment_bytes=64 * 1024, index_interval_bytes=512)
    done = threading.Event()

    def writer():
        for i in range(300):
            log.append([b"%05d:" % i + b"v" * (i % 97)] * 7)
        done.set()

    thread = threading.Thread(target=writer, name="writer")
    thread.start()
    seen = 0
    deadline = Deadline(DEADLINE_S, "the writer thread's 300 appends, read as they came")
    while not done.is_set() or seen < log.log_end_offset:
        deadline.check(f"{seen} records seen")
        assert thread.is_alive() or done.is_set(), "the writer thread died"
        end = log.log_end_offset
        if end == 0:
            continue
        last = log.reader.read(end - 1)
        assert last is not None and last.offset == end - 1
        i = int(last.value[:5])
        assert last.value == b"%05d:" % i + b"v" * (i % 97)
        seen = end
    joined(thread)
    assert log.log_end_offset == 2100 and len(log.segments) > 1


def test_readers_never_see_an_append_until_it_is_whole(tmp_path, monkeypatch):
    from storage.segment import LogSegment

    log = open_log(tmp_path / "t-0", batch_size=300, segment_bytes=700)
    log.append([b"a"])
    real_append = LogSegment.append
    seen = []

    def append_then_fail(segment, *args):
        if seen:
            raise OSError(28, "No space left on device")
        real_append(segment, *args)  # the first batch of the append lands on disk...
        seen.append([r.value for r in log.reader.records_from(0, 100)])  # ...a reader looks now
        seen.append(log.reader.read(1))

    monkeypatch.setattr(LogSegment, "append", append_then_fail)
    with pytest.raises(OSError):
        log.append([b"OLD" * 50] * 6)  # several batches and a roll
    monkeypatch.undo()
    assert seen == [[b"a"], None]
    assert log.log_end_offset == 1 and len(log.segments) == 1
    log.close()
    log = open_log(tmp_path / "t-0", batch_size=300, segment_bytes=700)  # (offline until then)
    log.append([b"NEW"])
    assert log.reader.read(1).value == b"NEW"
    assert [r.value for r in log.reader.records_from(0, 10)] == [b"a", b"NEW"]


def test_flush_fsyncs_every_segment_from_the_recovery_point(tmp_path, monkeypatch):
    from storage.segment import LogSegment

    log = open_log(tmp_path / "t-0", segment_bytes=400)
    log.append([b"x" * 150])
    log.flush()
    flushed = []
    monkeypatch.setattr(LogSegment, "flush", lambda segment: flushed.append(segment.base_offset))
    monkeypatch.setattr("storage.log.fsync_directory", lambda d: flushed.append(d))
    for _ in range(6):
        log.append([b"y" * 150])  # rolls several times
    log.flush()
    bases = [s.base_offset for s in log.segments.all()]
    # the rolled segments too, not just the active; not segment 0, flushed before; then the
    # directory, which holds the names of the new segments (Kafka's LocalLog.flush)
    assert len(bases) > 2 and flushed == bases[1:] + [tmp_path / "t-0"]
    assert log.recovery_point == log.log_end_offset
    flushed.clear()
    log.flush()
    assert flushed == []  # nothing past the recovery point
    log.append([b"z"])
    log.flush()
    assert flushed == [bases[-1]]  # no new segment: the directory is not fsynced again


def test_bad_config_values_are_refused_when_read(tmp_path):
    from storage.errors import InvalidConfigError

    mgr = LogManager(tmp_path)
    for text in ("compression.gzip.level=12", "compression.type=brotli", "segment.bytes=10",
                 "segment.bytes=lots", "retention.fortnights=2"):
        (tmp_path / "t.topic.properties").write_text(text + "\n")
        with pytest.raises(InvalidConfigError):
            mgr.create("t-0")
        assert not (tmp_path / "t-0").exists()
    mgr.close()


def test_missing_time_index_of_an_old_segment_is_rebuilt(tmp_path):
    log = open_log(tmp_path / "t-0", segment_bytes=600, index_interval_bytes=0)
    for i in range(8):
        log.append_batches(batch(i, 1, 1000 + i))
    log.close()
    first = time_index_file(tmp_path / "t-0", 0)
    original = first.read_bytes()
    first.unlink()
    log = open_log(tmp_path / "t-0", segment_bytes=600, index_interval_bytes=0)
    assert first.read_bytes() == original  # trimmed, as the appends wrote it
    assert log.segments.all()[0].largest_timestamp == 1000 + log.segments.all()[1].base_offset - 1
    assert log.reader.find_offset_by_timestamp(1001).offset == 1
    log.close()


def test_read_only_open_of_a_crashed_log_ignores_the_zero_filled_index_tail(tmp_path):
    log = open_log(tmp_path / "t-0", index_interval_bytes=0)
    for i in range(20):
        log.append_batches(batch(i, 1, 5000 + i))
    log.flush()  # no close: the active indexes stay preallocated, as after a crash
    ro = Log(tmp_path / "t-0", "t", 0, LogConfig(), writable=False)
    assert ro.segments.active.offset_index.entries == 19
    assert ro.segments.active.largest_timestamp == 5019
    assert ro.reader.find_offset_by_timestamp(5007).offset == 7
    assert [ro.reader.read(i).timestamp for i in range(20)] == [5000 + i for i in range(20)]


def test_recovery_cuts_a_batch_whose_offsets_go_backwards_and_keeps_the_rest(tmp_path):
    """Kafka would end the log there; without a replica, kfs salvages: only that batch goes
    to the quarantine, the batches after it keep their offsets."""
    mgr = LogManager(tmp_path)
    log = mgr.create("t-0")
    for i in range(5):
        log.append([b"r%d" % i])
    mgr.close()
    path = log_file(tmp_path / "t-0", 0)
    data = bytearray(path.read_bytes())
    third = sum(RecordBatch(bytes(data), 0).size_in_bytes for _ in range(2))
    struct.pack_into(">q", data, third, 0)  # baseOffset is not covered by the CRC
    path.write_bytes(bytes(data))
    os.remove(tmp_path / ".kafka_cleanshutdown")
    mgr = LogManager(tmp_path)
    log = mgr.get("t-0")
    assert log.log_end_offset == 5 and log.reader.read(2) is None
    assert [log.reader.read(i).value for i in (0, 1, 3, 4)] == [b"r0", b"r1", b"r3", b"r4"]
    assert any("offsets 2-2" in line for line in mgr.notices)
    mgr.close()


def test_kraft_metadata_log_is_not_a_data_partition(tmp_path):
    (tmp_path / "__cluster_metadata-0").mkdir()
    mgr = LogManager(tmp_path)
    assert mgr.partition_names() == []
    assert list((tmp_path / "__cluster_metadata-0").iterdir()) == []
    mgr.close()


@pytest.mark.parametrize("name", ["__cluster_metadata-0", "__cluster_metadata-3"])
def test_kraft_metadata_topic_cannot_be_created(tmp_path, name):
    mgr = LogManager(tmp_path)
    with pytest.raises(InvalidTopicError, match="Creation of internal topic __cluster_metadata"):
        mgr.create(name)
    assert not (tmp_path / name).exists() and mgr.partition_names() == []
    mgr.create("__cluster_metadatax-0")  # only that exact name is Kafka's
    mgr.close()


def test_kafka_topic_configs_not_applied_yet_are_accepted(tmp_path, caplog):
    # Kafka topic keys kfs reads without acting on them, beside one it applies
    (tmp_path / "t.topic.properties").write_text(
        "message.downconversion.enable=true\npreallocate=true\nmin.insync.replicas=2\n"
        "segment.bytes=4096\nmin.compaction.lag.ms=1000\n")
    mgr = LogManager(tmp_path)
    with caplog.at_level(logging.WARNING, logger="storage.config"):
        log = mgr.create("t-0")
    assert (tmp_path / "t-0").is_dir()
    # only the applied keys
    assert log.config == dataclasses.replace(LogConfig(), segment_bytes=4096,
                                             min_compaction_lag_ms=1000)
    warned = [r.getMessage() for r in caplog.records if r.name == "storage.config"]
    for key in ("message.downconversion.enable=true", "preallocate=true",
                "min.insync.replicas=2"):
        assert any(key in message and "does not apply" in message for message in warned), warned
    assert log.append([b"x"]) == 0 and log.reader.read(0).value == b"x"
    mgr.close()


# -- append_as_leader: producer-built batches, offsets assigned by the log ----------------------


def kafka_python_batch(values, producer_id=-1, sequence=-1, transactional=False):
    """A v2 batch built by kafka-python (an independent producer), base offset 0."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=transactional,
                                        producer_id=producer_id, producer_epoch=0,
                                        base_sequence=sequence, batch_size=1 << 20)
    for i, value in enumerate(values):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=value, headers=[])
    return bytes(builder.build())


def test_append_as_leader_assigns_offsets_and_epoch_and_keeps_the_crc(tmp_path):
    from kafka.record import MemoryRecords

    log = open_log(tmp_path / "t-0")
    log.append([b"first"])
    data = kafka_python_batch([b"a", b"b"]) + kafka_python_batch([b"c"])
    assert log.append_as_leader(data) == (1, 3)
    assert log.log_end_offset == 4
    assert [(r.offset, r.key, r.value) for r in log.reader.records_from(1, 10)] == [
        (1, b"k0", b"a"), (2, b"k1", b"b"), (3, b"k0", b"c")]
    log.close()
    records = MemoryRecords((tmp_path / "t-0" / "00000000000000000000.log").read_bytes())
    seen = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        seen += [(r.offset, r.value) for r in batch]
    assert seen == [(0, b"first"), (1, b"a"), (2, b"b"), (3, b"c")]


def test_append_as_leader_with_log_append_time_stamps_now(tmp_path):
    log = open_log(tmp_path / "t-0", message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    log.append_as_leader(kafka_python_batch([b"a", b"b"]))
    records = log.reader.records_from(0, 10)
    assert all(r.timestamp_type == 1 and r.timestamp >= before for r in records)
    assert log.segments.active.find_batch(0)[1].max_timestamp == records[0].timestamp
    log.close()


@pytest.mark.parametrize("damage", ["crc", "partial", "empty"])
def test_append_as_leader_refuses_bad_bytes_and_writes_nothing(tmp_path, damage):
    log = open_log(tmp_path / "t-0")
    log.append([b"kept"])
    data = bytearray(kafka_python_batch([b"a"]))
    if damage == "crc":
        data[-1] ^= 0xFF
    elif damage == "partial":
        data = kafka_python_batch([b"b"]) + data[:-3]
    else:
        data = b""
    with pytest.raises(CorruptRecordError):
        log.append_as_leader(bytes(data))
    segment = log.segments.active
    assert log.log_end_offset == 1 and segment.size == segment.last_whole_batch_end()
    log.close()


def test_append_as_leader_refuses_batches_over_max_message_bytes(tmp_path):
    log = open_log(tmp_path / "t-0", max_message_bytes=200)
    with pytest.raises(RecordTooLargeError):
        log.append_as_leader(kafka_python_batch([b"x" * 300]))
    assert log.log_end_offset == 0
    log.close()


def test_open_transaction_holds_the_last_stable_offset_until_its_marker(tmp_path):
    from storage.records.control import ControlRecordType, build_control_batch

    log = open_log(tmp_path / "t-0")
    log.append([b"plain"])
    log.append_as_leader(kafka_python_batch([b"t1", b"t2"], producer_id=7, sequence=0,
                                            transactional=True))
    log.append([b"after"])
    assert log.last_stable_offset == 1 and log.log_end_offset == 4
    assert [r.value for r in log.reader.records_from(0, 10, IsolationLevel.READ_COMMITTED)] == [b"plain"]
    assert log.reader.read(3, IsolationLevel.READ_COMMITTED) is None and log.reader.read(3).value == b"after"
    log.append_as_leader(build_control_batch(0, 7, 0, ControlRecordType.ABORT, timestamp_ms=now_ms()))
    assert log.last_stable_offset == log.log_end_offset == 5
    assert [r.value for r in log.reader.records_from(0, 10, IsolationLevel.READ_COMMITTED)] == [b"plain", b"after"]
    assert [r.value for r in log.reader.records_from(0, 10)] == [b"plain", b"t1", b"t2", b"after"]
    log.close()
    reopened = open_log(tmp_path / "t-0")  # the .txnindex and snapshot carry it over
    assert [r.value for r in reopened.reader.records_from(0, 10, IsolationLevel.READ_COMMITTED)] == [b"plain", b"after"]
    assert reopened.last_stable_offset == 5
    reopened.close()


def test_append_as_leader_refuses_batches_a_producer_cannot_send(tmp_path):
    from storage.records.control import ControlRecordType, build_control_batch

    log = open_log(tmp_path / "t-0")
    gap = build_batch(0, [b"a"], None, 1_700_000_000_000, last_offset_delta=5)
    mixed = kafka_python_batch([b"d"], producer_id=9, sequence=0, transactional=True) + \
        build_control_batch(0, 9, 0, ControlRecordType.COMMIT, timestamp_ms=now_ms())
    for data in (gap, mixed):
        with pytest.raises(InvalidRecordError):
            log.append_as_leader(data)
    assert log.log_end_offset == 0 and log.segments.active.size == 0
    log.close()


def test_a_failed_txnindex_write_rolls_the_whole_append_back(tmp_path, monkeypatch):
    import errno as errno_module

    from storage.records.control import ControlRecordType, build_control_batch
    from storage.transaction_index import TransactionIndex

    log = open_log(tmp_path / "t-0")
    log.append_as_leader(kafka_python_batch([b"t1", b"t2"], producer_id=5, sequence=0,
                                            transactional=True))
    size = log.segments.size_in_bytes

    def full_disk(self, txn):
        raise OSError(errno_module.ENOSPC, "No space left on device")

    monkeypatch.setattr(TransactionIndex, "append", full_disk)
    with pytest.raises(OSError):
        log.append_as_leader(build_control_batch(0, 5, 0, ControlRecordType.ABORT, timestamp_ms=now_ms()))
    monkeypatch.undo()
    assert log.log_end_offset == 2 and log.segments.size_in_bytes == size  # no orphan marker
    assert log.last_stable_offset == 0  # the transaction is still open
    log.close()
    log = open_log(tmp_path / "t-0")  # (the error took the log offline until reopened)
    assert log.last_stable_offset == 0
    log.append([b"next"])
    assert log.reader.read(2).value == b"next"
    log.append_as_leader(build_control_batch(0, 5, 0, ControlRecordType.ABORT, timestamp_ms=now_ms()))
    assert [r.value for r in log.reader.records_from(0, 10, IsolationLevel.READ_COMMITTED)] == [b"next"]
    log.close()


def split_keys(tmp_path, lines, sep=b"\t"):
    """Keys and values of keyed lines as ``Log.append_lines`` stores them."""
    log = open_log(tmp_path)
    try:
        first = log.append_lines(b"".join(line + b"\n" for line in lines), sep).start
        records = log.reader.records_from(first, len(lines))
        assert log.log_end_offset == first + len(lines)
        return [r.key for r in records], [r.value for r in records]
    finally:
        log.close()


def test_split_keys_at_first_separator(tmp_path):
    cases = [(b"k\tv", b"\t", b"k", b"v"), (b"k\tv\twith tab", b"\t", b"k", b"v\twith tab"),
             (b"\tv", b"\t", b"", b"v"), (b"k\t", b"\t", b"k", b""),
             (b"k:v", b":", b"k", b"v"), (b"k::v", b"::", b"k", b"v")]
    for i, (line, sep, key, value) in enumerate(cases):
        assert split_keys(tmp_path / str(i), [line], sep) == ([key], [value])


def test_split_keys_without_separator_is_an_error(tmp_path):
    with pytest.raises(KeySeparatorMissingError):
        split_keys(tmp_path / "a", [b"no separator here"])
    with pytest.raises(InvalidRecordError):  # it is an InvalidRecordError too
        split_keys(tmp_path / "b", [b"k:v"])



@pytest.mark.parametrize("batch_size", [16384, 64], ids=["one batch", "a batch a line"])
def test_a_keyed_line_without_separator_is_named_by_its_number(tmp_path, batch_size):
    log = open_log(tmp_path / "t-0", batch_size=batch_size)
    with pytest.raises(KeySeparatorMissingError, match="in line 4$") as info:
        log.append_lines(b"a\t1\nb\t2\nc\t3\noops\nd\t4\nno\n", b"\t")
    assert info.value.line == 4 and log.log_end_offset == 0
    log.close()

def test_split_keys_all_or_nothing(tmp_path):
    assert split_keys(tmp_path / "a", [b"a\t1", b"b\t2"]) == ([b"a", b"b"], [b"1", b"2"])
    assert split_keys(tmp_path / "b", []) == ([], [])
    with pytest.raises(KeySeparatorMissingError):
        split_keys(tmp_path / "c", [b"a\t1", b"oops", b"c\t3"])
    log = open_log(tmp_path / "c")
    assert log.log_end_offset == 0  # nothing of the refused append was stored
    log.close()


def test_split_keys_on_a_128k_chunk(tmp_path):
    lines = [b"key-%06d\t" % i + b"v" * 88 for i in range(1310)]
    keys, values = split_keys(tmp_path, lines)
    assert keys == [b"key-%06d" % i for i in range(1310)]
    assert values == [b"v" * 88] * 1310


def test_nowait_append_refuses_whatever_would_wait_and_changes_nothing(tmp_path):
    log = open_log(tmp_path / "a", segment_bytes=2000)
    assert log.append_lines(b"a\nb\n", nowait=True) == range(0, 2)  # page cache only: done in place
    files = sorted(p.name for p in (tmp_path / "a").iterdir())
    with pytest.raises(BlockingIOError):  # it would roll
        log.append_lines(b"x" * 1900 + b"\n", nowait=True)
    assert log.log_end_offset == 2 and sorted(p.name for p in (tmp_path / "a").iterdir()) == files
    assert log.append_lines(b"x" * 1900 + b"\n") == range(2, 3) and len(log.segments) == 2  # it waits
    log.close()

    log = open_log(tmp_path / "b", flush_messages=3)
    log.append_lines(b"1\n", nowait=True)
    with pytest.raises(BlockingIOError):  # the third unflushed record would flush
        log.append_lines(b"2\n3\n", nowait=True)
    assert log.log_end_offset == 1
    with held_by_another_thread(log._lock), pytest.raises(BlockingIOError):
        log.append_lines(b"2\n", nowait=True)
    assert log.append_lines(b"2\n3\n") == range(1, 3) and log.recovery_point == 3
    log.close()


def test_short_writes_are_continued(tmp_path, monkeypatch):
    from storage import disk_calls
    real_pwritev = os.pwritev

    def short_pwritev(fd, buffers, pos):  # the kernel may write less than asked
        data = b"".join(bytes(b) for b in buffers)[:777]
        return real_pwritev(fd, [data], pos)

    log = open_log(tmp_path / "t-0", batch_size=1000)
    monkeypatch.setattr(disk_calls, "pwritev", short_pwritev)
    lines = [b"line %d " % i + b"x" * (i % 50) for i in range(300)]
    assert log.append_lines(b"".join(line + b"\n" for line in lines)) == range(len(lines))
    monkeypatch.undo()
    assert [r.value for r in log.reader.records_from(0, 1000)] == lines
    log.close()
    reopened = open_log(tmp_path / "t-0")
    assert reopened.log_end_offset == 300
    reopened.close()


def test_the_decoded_batch_cache_is_bounded_by_memory_as_well_as_batches():
    from storage.record_cache import RecordCache, records_cost
    from storage.records import Record

    def batch(n, size):
        return [Record(offset=i, timestamp=0, timestamp_type=0, key=None, value=b"x" * size,
                       headers=(), sequence=-1) for i in range(n)]

    cache = RecordCache(256, 1 << 20, records_cost)
    for base in range(10):
        cache.put((0, base), batch(1000, 300))  # about 500 KB each
    kept = [base for base in range(10) if cache.get((0, base)) is not None]
    assert kept == [8, 9]  # the newest that fit in a megabyte
    cache.put((0, 99), batch(10, 1 << 20))  # alone over the bound: still kept
    assert cache.get((0, 99)) is not None and cache.get((0, 9)) is None


def _index_files(path):
    """Every .index and .timeindex of the partition directory ``path``: name -> bytes."""
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())
            if p.suffix in (".index", ".timeindex")}


@pytest.mark.parametrize("clean", [True, False], ids=["clean-reopens", "recovered-reopens"])
def test_indexes_do_not_depend_on_how_many_writers_appended(tmp_path, clean):
    # Issue 25, item 14: a writer that opens a log continues the index interval (bytes since
    # the last offset-index entry) and the largest timestamp so far from the .log, and the
    # final time-index entry its predecessor's close (or a recovery) added goes: the files
    # equal one uninterrupted writer's, and Kafka's rebuild of the same .log (LogSegment.recover).
    config = LogConfig(index_interval_bytes=700, segment_bytes=6000)
    timestamps = [500, 300, 800, 800, 950, 700, 900, 100, 1200, 1100, 1000, 1300, 1250, 400,
                  1500, 1400, 1600, 1550, 1700, 1650, 1800, 1750, 1900, 1850, 2000, 1990]
    chunks, offset = [], 0
    for i, ts in enumerate(timestamps):
        n = 1 + i % 4
        chunks.append(batch(offset, n, ts, size=60 + 17 * (i % 5)))
        offset += n

    def write(path, sessions):
        path.mkdir(parents=True)
        for first, end in zip(sessions, sessions[1:]):
            log = Log(path, "t", 0, config, had_clean_shutdown=clean or first == 0)
            for data in chunks[first:end]:
                log.append_batches(data)
            log.close()
        return _index_files(path)

    one_writer = write(tmp_path / "one" / "t-0", [0, len(chunks)])
    # a writer per batch, and writers that stop just after an index entry or between entries
    per_batch = write(tmp_path / "many" / "t-0", list(range(len(chunks) + 1)))
    uneven = write(tmp_path / "uneven" / "t-0", [0, 3, 4, 9, 10, 11, 17, 20, len(chunks)])
    assert len(one_writer) == 4  # two segments: the roll is part of it
    entries = index_entries(tmp_path / "one" / "t-0" / "00000000000000000000.index", ">ii")
    assert len(entries) >= 3
    assert per_batch == one_writer
    assert uneven == one_writer
    # Kafka's rebuild of the same .log files: the indexes deleted, recovery makes them again
    rebuilt = tmp_path / "rebuilt" / "t-0"
    rebuilt.mkdir(parents=True)
    for p in (tmp_path / "one" / "t-0").glob("*.log"):
        (rebuilt / p.name).write_bytes(p.read_bytes())
    Log(rebuilt, "t", 0, config, had_clean_shutdown=False).close()
    assert _index_files(rebuilt) == one_writer
