"""Kafka's tiered-storage metadata (issue 26), held against a real Kafka 4.1.1 broker with tiered
storage on (the ``tiered_broker`` fixture: Kafka's LocalTieredStorage as the remote tier, the
TopicBasedRemoteLogMetadataManager writing ``__remote_log_metadata``).

The broker takes a few MB into topics of 1 MiB segments that tier within seconds
(:func:`tier_topics`): ``tiered`` (plain records), ``txn`` (an aborted and a committed
transaction, so a copied segment has a ``.txnindex``), ``expiring`` (``retention.bytes`` small:
remote retention deletes its oldest remote segments: ``DELETE_SEGMENT_STARTED`` /
``_FINISHED``) and ``doomed`` (deleted once tiered: Kafka 4.1.1 deletes each of its remote
segments the same way, writes no ``RemotePartitionDeleteMetadata`` and leaves the partition's
empty directory in LocalTieredStorage). Then:

* ``storage.remote.metadata``'s live segments (``COPY_SEGMENT_FINISHED``, not deleted) are
  exactly the segments whose files LocalTieredStorage holds, each matching its files: under
  ``<rsm dir>/kafka-tiered-storage/<topic>-<N>-<topic id>/``,
  ``<20-digit start offset>-<segment id>.{log,index,timeindex,snapshot,leader_epoch_checkpoint}``
  plus ``.txnindex`` exactly when the metadata says the transaction index is not empty; the
  ``.log``'s size, first and last offsets and largest timestamp are the metadata's, and its
  leader epochs are those of the uploaded checkpoint within the segment;
* ``kfs dump --remote-log-metadata-decoder`` prints what Kafka's ``kafka-dump-log
  --remote-log-metadata-decoder`` prints for the broker's ``__remote_log_metadata-0`` segments,
  line for line (with and without ``--skip-record-metadata``);
* values Kafka's broker never writes (a custom metadata, several leader epochs, snapshot records,
  every way a value fails to decode), built here, print as Kafka prints them too.
"""

from __future__ import annotations

import base64
import os
import uuid
from pathlib import Path

import pytest
from helpers.kafka import (
    REMOTE_LOG_METADATA_TOPIC,
    SEGMENT_BYTES,
    TIERED_TOPIC_CONFIG,
    KafkaBroker,
    flushed,
    run_tool,
)
from helpers.kfs import kfs_command, kfs_env
from helpers.paths import REPO
from helpers.remote_metadata import (
    partition_delete_record,
    segment_record,
    snapshot_record,
    update_record,
)
from helpers.waits import wait_until

from storage.log_reader import LogReader
from storage.records import build_batch
from storage.remote.metadata import (
    RemoteLogSegmentState,
    read_metadata_log_dir,
)
from storage.segment_source import FileRecords, LocalSegmentSource

pytestmark = pytest.mark.kafka

DUMP_LOG = "kafka.tools.DumpLogSegments"  # what bin/kafka-dump-log.sh runs
LOCALE = {"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}
SEGMENT_FILES = {".log", ".index", ".timeindex", ".snapshot", ".leader_epoch_checkpoint"}


def producer(broker: KafkaBroker, **config):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 5,
                     **{k.replace("_", "."): v for k, v in config.items()}})


def produce_bytes(broker: KafkaBroker, topic: str, total: int, record: int = 1000,
                  **config) -> None:
    """About ``total`` bytes of incompressible records of ``record`` bytes, keyed."""
    p = producer(broker, **config)
    for i in range(total // record):
        p.produce(topic, key=b"k%d" % (i % 13), value=os.urandom(record),
                  headers=[("i", b"%d" % i)] if i % 7 == 0 else None)
        if i % 1000 == 999:
            flushed(p)
    flushed(p)


def tier_topics(broker: KafkaBroker) -> None:
    """The topics of the module docstring, produced, tiered and (``expiring``, ``doomed``)
    deleted from the remote tier, each wait bounded by a deadline."""
    broker.create_topic("tiered", 1, TIERED_TOPIC_CONFIG)
    broker.create_topic("txn", 1, TIERED_TOPIC_CONFIG)
    # retention.bytes (both tiers together) of 3 segments: the remote tier drops the oldest
    broker.create_topic("expiring", 1, {**TIERED_TOPIC_CONFIG,
                                        "retention.bytes": str(3 * SEGMENT_BYTES)})
    broker.create_topic("doomed", 1, TIERED_TOPIC_CONFIG)
    produce_bytes(broker, "tiered", 6 * SEGMENT_BYTES)
    produce_bytes(broker, "expiring", 7 * SEGMENT_BYTES)
    produce_bytes(broker, "doomed", 4 * SEGMENT_BYTES)

    txn = producer(broker, transactional_id="tiered-txn")
    txn.init_transactions(60)
    for n, commit in enumerate((False, True, False, True)):
        txn.begin_transaction()
        for i in range(SEGMENT_BYTES // 1000 // 2 + 1):
            txn.produce("txn", key=b"t%d" % (i % 3), value=os.urandom(1000))
        flushed(txn)
        (txn.commit_transaction if commit else txn.abort_transaction)(60)
    produce_bytes(broker, "txn", 3 * SEGMENT_BYTES)

    # (expiring-0 keeps few remote segments: its retention.bytes counts both tiers)
    for topic, segments in (("tiered", 4), ("txn", 3), ("expiring", 1), ("doomed", 2)):
        broker.wait_tiered(topic, 0, segments)

    # the remote tier's own retention ran on "expiring": its first segment is gone there
    def expired() -> bool:
        cache = read_metadata_log_dir(broker.log_dir)
        return any(m.state == RemoteLogSegmentState.DELETE_SEGMENT_STARTED
                   for tp in cache.partitions if tp.topic == "expiring"
                   for m in cache.segments(tp)) or any(
            tp.topic == "expiring" and cache.live_segments(tp)
            and cache.live_segments(tp)[0].start_offset > 0 for tp in cache.partitions)

    wait_until(expired, "remote retention deleting expiring-0's first segments", timeout=180)

    admin = broker.admin()  # kept until the future resolves: its handle ends with it
    admin.delete_topics(["doomed"])["doomed"].result(60)
    # Kafka 4.1.1 deletes a deleted topic's remote segments one by one (DELETE_SEGMENT_STARTED,
    # _FINISHED; no RemotePartitionDeleteMetadata) and leaves LocalTieredStorage's directory
    wait_until(lambda: not any(p.is_file() for p in broker.remote_root.glob("doomed-0-*/*")),
               "doomed-0's remote segment files deleted", timeout=180)

    # (the broker records DELETE_SEGMENT_FINISHED after deleting a segment's files)
    def doomed_deleted() -> bool:
        cache = read_metadata_log_dir(broker.log_dir)
        doomed = [tp for tp in cache.partitions if tp.topic == "doomed"]
        return bool(doomed) and all(cache.segments(tp) == [] for tp in doomed)

    wait_until(doomed_deleted, "doomed-0's remote segments DELETE_SEGMENT_FINISHED in "
               "__remote_log_metadata", timeout=180)


# -- what LocalTieredStorage holds --------------------------------------------------------


def remote_files(root: Path) -> dict[tuple[str, int, str], dict[str, dict[str, Path]]]:
    """{(topic, partition, topic id): {file stem: {suffix: path}}} of LocalTieredStorage's
    directory ``root`` (``kafka-tiered-storage``)."""
    out: dict = {}
    for directory in root.iterdir():
        name, topic_id = directory.name[:-23], directory.name[-22:]
        topic, _, partition = name.rpartition("-")
        files = out.setdefault((topic, int(partition), topic_id), {})
        for path in directory.iterdir():
            stem, _, suffix = path.name.partition(".")
            files.setdefault(stem, {})["." + suffix] = path
    return out


def live_as_files(cache) -> dict[tuple[str, int, str], set[str]]:
    return {(tp.topic, tp.partition, tp.topic_id): {m.file_stem for m in segments}
            for tp, segments in cache.live().items()}


def files_as_stems(files) -> dict[tuple[str, int, str], set[str]]:
    return {key: set(stems) for key, stems in files.items() if stems}


def log_facts(path: Path) -> tuple[int, int, int, int]:
    """(size, first offset, last offset, largest record timestamp) of a ``.log``."""
    source = LocalSegmentSource.of_path(path)
    try:
        records = FileRecords(source)
        first = last = max_ts = None
        for batch in LogReader.whole_batches(records, 0, records.size):
            first = batch.base_offset if first is None else first
            last = batch.last_offset
            for record in batch.records():
                max_ts = record.timestamp if max_ts is None else max(max_ts, record.timestamp)
        return records.size, first, last, max_ts
    finally:
        source.close()


def checkpoint_epochs(path: Path, start: int, end: int) -> tuple[tuple[int, int], ...]:
    """The leader epochs of an uploaded ``leader-epoch-checkpoint`` (version, count, then
    ``epoch offset`` lines) as a segment [start, end] has them: epochs starting past the end
    dropped, the last one starting at or before ``start`` moved to ``start``."""
    lines = path.read_text().split("\n")
    assert lines[0] == "0", lines
    entries = [tuple(map(int, line.split())) for line in lines[2:2 + int(lines[1])]]
    before = [(e, o) for e, o in entries if o <= start]
    inside = [(e, o) for e, o in entries if start < o <= end]
    return tuple(([(before[-1][0], start)] if before else []) + inside)


def test_live_segments_are_the_files_local_tiered_storage_holds(tiered_broker):
    broker = tiered_broker
    tier_topics(broker)
    # the metadata and the files agree once every copy and deletion in flight has ended
    wait_until(lambda: live_as_files(read_metadata_log_dir(broker.log_dir))
               == files_as_stems(remote_files(broker.remote_root)),
               "the live remote segments in __remote_log_metadata and LocalTieredStorage's "
               "files to agree", timeout=120)
    cache = read_metadata_log_dir(broker.log_dir)
    files = remote_files(broker.remote_root)
    live = cache.live()
    by_topic = {tp.topic: (tp, segments) for tp, segments in live.items()}
    assert set(by_topic) == {"tiered", "txn", "expiring"}, live.keys()

    for topic, (tp, segments) in by_topic.items():
        assert tp.topic_id == broker.topic_id(topic)
        local = broker.local_segment_offsets(topic)
        # contiguous, from the remote log start up to the local log (at least its start)
        for a, b in zip(segments, segments[1:]):
            assert b.start_offset == a.end_offset + 1, (a.java_string(), b.java_string())
        assert segments[-1].end_offset + 1 >= local[0] > 0, (topic, local)
        for m in segments:
            assert m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
            assert m.broker_id == 1 and m.custom_metadata is None
            assert len(m.segment_id.id) == 22 and str(m.segment_id.uuid)
            segment_files = files[(tp.topic, tp.partition, tp.topic_id)][m.file_stem]
            expected = SEGMENT_FILES | (set() if m.txn_index_empty else {".txnindex"})
            assert set(segment_files) == expected, (m.java_string(), sorted(segment_files))
            assert m.local_tiered_storage_path(broker.remote_root) == segment_files[".log"].parent
            size, first, last, max_ts = log_facts(segment_files[".log"])
            assert (size, first, last, max_ts) == (
                m.segment_size_in_bytes, m.start_offset, m.end_offset, m.max_timestamp_ms)
            assert m.segment_leader_epochs == checkpoint_epochs(
                segment_files[".leader_epoch_checkpoint"], m.start_offset, m.end_offset)

    assert by_topic["tiered"][1][0].start_offset == 0 and len(by_topic["tiered"][1]) >= 4
    assert by_topic["expiring"][1][0].start_offset > 0  # the remote tier's retention ran
    assert any(not m.txn_index_empty for m in by_topic["txn"][1])  # the aborted transactions
    # the deleted topic: known to the cache, every segment of it deleted
    doomed = [tp for tp in cache.partitions if tp.topic == "doomed"]
    assert doomed and cache.segments(doomed[0]) == [] and not cache.warnings
    assert list(broker.remote_root.glob("doomed-0-*"))  # its directory, empty


# -- kfs dump against kafka-dump-log ------------------------------------------------------


def kafka_dump_log(files, *options) -> bytes:
    res = run_tool(DUMP_LOG, "--files", ",".join(map(str, files)), *options, check=False,
                   env={**os.environ, **LOCALE}, timeout=600)
    assert res.returncode == 0, res.stderr.decode(errors="replace")[-3000:]
    return res.stdout


def kfs_dump(files, *options) -> tuple[bytes, bytes]:
    import subprocess

    res = subprocess.run(kfs_command("dump", *options, *map(str, files)), cwd=REPO,
                         env={**kfs_env(), **LOCALE}, capture_output=True, timeout=600)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res.stdout, res.stderr


def assert_same_dump(files, *options) -> list[str]:
    expected = kafka_dump_log(files, *options).decode().split("\n")
    got, _ = kfs_dump(files, *options)
    got = got.decode().split("\n")
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g == e, f"line {i + 1}:\nkafka-dump-log: {e}\nkfs dump:       {g}"
    assert len(got) == len(expected)
    return expected


@pytest.mark.parametrize("options", [(), ("--skip-record-metadata",)], ids=" ".join)
def test_dump_of_the_brokers_remote_log_metadata(tiered_broker, options):
    broker = tiered_broker
    tier_topics(broker)
    broker.stop()  # the files are final: both tools read the same bytes
    files = sorted((broker.log_dir / f"{REMOTE_LOG_METADATA_TOPIC}-0").glob("*.log"))
    assert files
    out = "\n".join(assert_same_dump(files, "--remote-log-metadata-decoder", *options))
    for text in ("payload: RemoteLogSegmentMetadata{", "state=COPY_SEGMENT_STARTED",
                 "payload: RemoteLogSegmentMetadataUpdate{", "state=COPY_SEGMENT_FINISHED",
                 "state=DELETE_SEGMENT_STARTED", "state=DELETE_SEGMENT_FINISHED",
                 "topicIdPartition=", "txnIdxEmpty=false", "txnIdxEmpty=true"):
        assert text in out, text
    assert "Error at offset" not in out


# -- values the broker does not write -----------------------------------------------------


def test_values_the_broker_does_not_write_print_as_kafka_prints_them(tmp_path):
    tid, seg, seg2 = uuid.uuid4().bytes, uuid.uuid4().bytes, b"\xff" * 16
    values = [
        segment_record(tid, seg, epochs=((0, 0), (5, 40), (2, 10), (5, 50)), custom=b"\x00" * 17,
                       txn_empty=False),
        segment_record(tid, seg2, start=100, end=100, txn_empty=True, topic="", partition=0),
        update_record(tid, seg, state=1, custom=b"abc"),
        update_record(tid, seg, state=2),
        update_record(tid, seg, state=3),
        partition_delete_record(tid, 0), partition_delete_record(tid, 1),
        partition_delete_record(tid, 2),
        snapshot_record(seg), snapshot_record(seg2, txn_empty=False),
        # every way a value fails to decode
        None, b"", b"\x00", b"\x02\x00\x00", b"\x80", b"\x01\x09\x00", b"\x01\x00\x01",
        b"\x01\x00\x00", segment_record(tid, seg)[:-5], segment_record(tid, seg) + b"junk",
        b"\x01\xff\xff\x03\x00", b"\x01\x80\x80\x80\x80\x80",
        segment_record(tid, seg, start=-1), segment_record(tid, seg, start=10, end=9),
        segment_record(tid, seg, epochs=()), segment_record(tid, seg, state=9),
        update_record(tid, seg, state=4), partition_delete_record(tid, 3),
    ]
    part = tmp_path / f"{REMOTE_LOG_METADATA_TOPIC}-0"
    part.mkdir()
    data = b""
    for offset, value in enumerate(values):
        data += build_batch(offset, [value], [None], 1_700_000_000_000 + offset)
    (part / "00000000000000000000.log").write_bytes(data)
    for options in ((), ("--skip-record-metadata",)):
        out = assert_same_dump([part / "00000000000000000000.log"], "--remote-log-metadata-decoder",
                               *options)
    _, err = kfs_dump([part / "00000000000000000000.log"], "--remote-log-metadata-decoder")
    errors = [line for line in out if "Error at offset" in line]
    assert len(errors) == 18 and len(err.decode().splitlines()) == 18, "\n".join(out)
    assert "customMetadata=Optional[CustomMetadata{17 bytes}]" in "\n".join(out)
    assert "segmentLeaderEpochs={0=0, 2=10, 5=50}" in "\n".join(out)
    assert f"id={base64.urlsafe_b64encode(seg2).decode().rstrip('=')}" in "\n".join(out)
