"""What a Spark task pays to open a tiered partition (``path`` = the broker's log directory,
``remote.path`` = LocalTieredStorage's root in a bucket of S3Proxy, the ``s3_server``
fixture), and what the next task in the same Python worker (Spark reuses workers) no longer
pays: with ``__remote_log_metadata`` at hand nothing is listed and no remote segment is read
to find where it ends (its ``endOffset`` says); the next task of the process opens no object
again (index objects and opened ``.log`` objects kept by the process's store) and folds the
metadata again only when its files changed. Every task reads the same rows as a read of the
original partition."""

from __future__ import annotations

import base64

import pytest

from helpers.paths import KAFKA_WRITTEN
from helpers.remote_metadata import segment_record, update_record
from helpers.tiered import bases_of, tier
from storage import LogManager
from storage.records import build_batch
from storage.remote.object_store import ObjectStore
from storage.remote.tiered import TIERED_ROOT, live_metadata_of

needs_fixtures = pytest.mark.needs_fixture("kafka-written")
pytest.importorskip("pyspark")

NAME = "plain-0"
DELETE_SEGMENT_STARTED = 2  # RemoteLogSegmentState


class CountingFileSystem:
    """A ``pyarrow.fs`` file system's calls counted by name (what ObjectStore asks of it:
    listings and entries, ``get_file_info``; opening objects, ``open_input_file``)."""

    def __init__(self, fs):
        self._fs, self.calls = fs, {}

    def __getattr__(self, name):
        method = getattr(self._fs, name)

        def counted(*args, **kwargs):
            self.calls[name] = self.calls.get(name, 0) + 1
            return method(*args, **kwargs)
        return counted


def _id_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def tiered_in_bucket(s3, tmp_path, remote_bases, local_bases):
    """``NAME``'s segments at ``remote_bases`` under LocalTieredStorage's root in a new bucket,
    those at ``local_bases`` in a broker log directory whose ``__remote_log_metadata-0`` says
    every remote one copied (``endOffset`` the next segment's base - 1, as Kafka's
    RemoteLogManager writes it); (the root's URI, the log directory, append(value) to add a
    metadata record)."""
    bucket = s3.new_bucket("tiered")
    root, local_dir = tier(tmp_path, NAME, remote_bases, local_bases)
    (s3.base_dir / bucket).rmdir()
    root.rename(s3.base_dir / bucket)
    (directory,) = (s3.base_dir / bucket / TIERED_ROOT).iterdir()
    topic, topic_id = NAME[:-2], _id_bytes(directory.name[-22:])
    bases = bases_of(KAFKA_WRITTEN / NAME)
    values = []
    for log in sorted(directory.glob("*.log")):
        base, segment = int(log.name[:20]), _id_bytes(log.name[21:43])
        end = bases[bases.index(base) + 1] - 1
        values += [segment_record(topic_id, segment, base, end, topic=topic, partition=0,
                                  size=log.stat().st_size,
                                  txn_empty=not log.with_suffix(".txnindex").exists()),
                   update_record(topic_id, segment, topic=topic, partition=0)]
    manager = LogManager(local_dir, partitions=lambda t, _: t == "__remote_log_metadata")
    metadata = manager.create("__remote_log_metadata-0")

    def append(*records):
        metadata.append_as_leader(build_batch(0, list(records), None))
        metadata.flush()

    append(*values)
    return f"s3://{bucket}", local_dir, append, manager, (topic_id, directory)


def read_task(local_dir, uri, end):
    """One Spark task's read of offsets [0, end) of ``NAME``: (offset, key, value) rows."""
    from kfs.reading.offsets import OffsetRange
    from kfs.spark.reader import read_range

    batches = read_range(str(local_dir), OffsetRange("plain", 0, 0, end), False,
                         remote_path=uri)
    return [row for b in batches
            for row in zip(*(b.column(c).to_pylist() for c in ("offset", "key", "value")))]


@pytest.fixture
def s3(s3_server, monkeypatch):
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


@needs_fixtures
def test_the_next_task_in_a_process_lists_nothing_and_opens_no_object_again(s3, tmp_path):
    bases = bases_of(KAFKA_WRITTEN / NAME)
    uri, local_dir, _, manager, _ = tiered_in_bucket(s3, tmp_path, bases[:3], bases[3:])
    original = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        want = [(r.offset, r.key, r.value) for batch in original.get(NAME).reader.record_lists(0)
                for r in batch]
        end = original.get(NAME).log_end_offset
        store = ObjectStore.shared(uri)  # the one every task of this process opens
        store.fs = first = CountingFileSystem(store.fs)
        assert read_task(local_dir, uri, end) == want
        # no listing, no HEAD of the root: the metadata names every object
        assert first.calls.get("get_file_info", 0) == 0, first.calls
        assert first.calls.get("open_input_file", 0) > 0
        store.fs = second = CountingFileSystem(first._fs)
        assert read_task(local_dir, uri, end) == want
        assert second.calls == {}, "the second task of the process asked the store again"
    finally:
        original.close()
        manager.close()


@needs_fixtures
def test_end_offsets_come_from_the_metadata_and_a_change_to_it_is_seen(s3, tmp_path):
    """No remote segment is read to find its end; a segment whose deletion started after the
    last task is not in the next task's log (the fold is read again when its files changed)."""
    from kfs.reading.offsets import open_log

    bases = bases_of(KAFKA_WRITTEN / NAME)
    uri, local_dir, append, manager, (topic_id, directory) = tiered_in_bucket(
        s3, tmp_path, bases[:3], bases[3:])
    try:
        log = open_log(str(local_dir), "plain", 0, remote_path=uri)
        try:
            remote = log.remote.segments.all()
            assert [s.base_offset for s in remote] == bases[:3]
            original = LogManager(KAFKA_WRITTEN, read_only=True)
            try:  # endOffset + 1 is each segment's real next offset
                real = {s.base_offset: s.read_next_offset()
                        for s in original.get(NAME).segments.all()}
            finally:
                original.close()
            store = ObjectStore.shared(uri)
            store.fs = counted = CountingFileSystem(store.fs)
            assert [s.read_next_offset() for s in remote] == [real[b] for b in bases[:3]]
            assert [s.size for s in remote] == \
                [(KAFKA_WRITTEN / NAME / f"{b:020d}.log").stat().st_size for b in bases[:3]]
            assert counted.calls == {}
            store.fs = counted._fs
        finally:
            log.close()
        first = next(directory.glob(f"{bases[0]:020d}-*.log"))
        append(update_record(topic_id, _id_bytes(first.name[21:43]), DELETE_SEGMENT_STARTED,
                             topic="plain", partition=0))
        live = live_metadata_of(local_dir)[directory.name]
        assert sorted(int(stem[:20]) for stem in live) == bases[1:3]
        log = open_log(str(local_dir), "plain", 0, remote_path=uri, fail_on_data_loss=False)
        try:
            assert log.log_start_offset == bases[1]
        finally:
            log.close()
    finally:
        manager.close()
