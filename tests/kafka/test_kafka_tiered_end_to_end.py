"""A tiered topic read every way kfs reads it equals what Kafka's consumer reads through the
broker (issue 26, "Equal to Kafka").

One Kafka 4.1.1 broker with tiered storage on for the module (:func:`tiered`): Kafka's
LocalTieredStorage writes its remote tier straight into a directory S3Proxy serves as a bucket
(``s3://<bucket>/rsm``, no copy). Two topics of 1 MiB segments take a few MB each until most of
them is remote-only:

* ``history``: records with keys and null keys, headers (one with a null value), null values,
  in lz4 and zstd batches of two producers, and a committed and an aborted transaction (zstd)
  among them;
* ``appended``: ``message.timestamp.type=LogAppendTime``, binary keys and values, zstd.

What the consumer (confluent-kafka, from the log start, ``read_uncommitted`` and
``read_committed``; the broker serving the remote segments) gets is then what these get:

* Spark ``format("kfs")`` on the standalone cluster (a master and two workers, the bucket's
  credentials as ``spark.executorEnv.AWS_*``) over layout 3 (``path`` the broker's log
  directory, ``remote.path`` the bucket), layout 2 (``path`` the bucket: the remote segments,
  up to where the remote tier ends) and layout 1 (the broker's log directory copied into a
  bucket: from the local log start);
* ``kfs mount --read-only s3://<bucket>/rsm``: ``records.jsonl``, ``by-offset/``, at each
  isolation level;
* ``kfs dump --json --deep-iteration`` of each live remote ``.log`` by its ``s3://`` URI;
* a stream (``readStream.format("kfs")``, layout 3): its first micro-batch ends at the
  broker's high watermark, and records produced after it started come in a later one;
* after the broker's remote retention deleted the oldest remote segments (``retention.bytes``
  lowered through the admin client): the consumer from the new log start equals Spark over
  layouts 3 and 2 again;
* after DeleteRecords up to the middle of a live remote segment: Spark over layout 3 starts
  where the consumer does, at the log start the broker checkpointed.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import types

import pytest
from helpers.kafka import (
    SEGMENT_BYTES,
    TIERED_TOPIC_CONFIG,
    KafkaBroker,
    consume_all,
    flushed,
)
from helpers.kfs import kfs_command, kfs_env
from helpers.mounts import Mounter
from helpers.paths import REPO
from helpers.s3 import copy_into_bucket
from helpers.waits import DEADLINE_S, wait_until, within

from storage.remote.metadata import RemoteLogSegmentState, read_metadata_log_dir

pytestmark = [pytest.mark.kafka, pytest.mark.needs_modules("pyspark", "pyarrow")]

HISTORY, APPENDED = "history", "appended"
TOPICS = (HISTORY, APPENDED)
LOCAL_RETENTION_BYTES = int(TIERED_TOPIC_CONFIG["local.retention.bytes"])
ISOLATIONS = ("read_uncommitted", "read_committed")


# -- the broker, its topics and the bucket ------------------------------------------------


def producer(broker: KafkaBroker, **config):
    from confluent_kafka import Producer

    return Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0, "linger.ms": 5,
                     **config})


def history_record(n: int) -> dict:
    """The n-th plain record of ``history``: a null key every 11th, a null value every 97th,
    headers every 5th (a null header value every 13th)."""
    headers = []
    if n % 5 == 0:
        headers.append(("n", b"%d" % n))
    if n % 13 == 0:
        headers.append(("empty", None))
    return {"key": None if n % 11 == 0 else b"k%d" % (n % 17),
            "value": None if n % 97 == 0 else os.urandom(300).hex().encode(),
            "headers": headers or None}


def produce(broker: KafkaBroker) -> None:
    """``history``: a committed then an aborted transaction, each with plain records of both
    codecs between its records, then blocks of lz4 and zstd records by turns (about 6 MB);
    ``appended``: about 3.5 MB of binary records."""
    lz4, zstd = producer(broker, **{"compression.type": "lz4"}), producer(
        broker, **{"compression.type": "zstd"})
    txn = producer(broker, **{"compression.type": "zstd", "transactional.id": "end-to-end"})
    txn.init_transactions(60)
    n = 0
    for commit in (True, False):
        txn.begin_transaction()
        for i in range(300):
            txn.produce(HISTORY, key=b"t%d" % (i % 3), value=b"%s-%d" % (
                b"committed" if commit else b"aborted", i), headers=[("txn", b"%d" % commit)])
            if i % 30 == 0:
                flushed(txn)
                for p in (lz4, zstd):
                    p.produce(HISTORY, **history_record(n))
                    n += 1
                    flushed(p)
        flushed(txn)
        (txn.commit_transaction if commit else txn.abort_transaction)(60)
    for block in range(16):
        p = (lz4, zstd)[block % 2]
        for _ in range(1000):
            p.produce(HISTORY, **history_record(n))
            n += 1
        flushed(p)
    for i in range(6000):
        zstd.produce(APPENDED, key=None if i % 7 == 0 else os.urandom(8), value=os.urandom(600),
                     headers=[("i", b"%d" % i)] if i % 3 == 0 else None)
        if i % 1000 == 999:
            flushed(zstd)
    flushed(zstd)


def live_segments(broker: KafkaBroker, topic: str) -> list:
    """``__remote_log_metadata``'s live segments of ``topic``-0 now."""
    cache = read_metadata_log_dir(broker.log_dir)
    return [m for tp in cache.partitions if tp.topic == topic for m in cache.live_segments(tp)]


def watermarks(broker: KafkaBroker, topic: str) -> tuple[int, int]:
    """The partition's (log start offset, high watermark) as the broker answers a consumer."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "watermarks",
                         "log_level": 0})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
    finally:
        consumer.close()


def settled(broker: KafkaBroker, topic: str) -> bool:
    """Whether the partition's tiers are at rest: no copy or deletion of a remote segment in
    flight, the broker's log start the first live segment's (remote retention moves the log
    start before it marks the segments it deletes), LocalTieredStorage's files exactly the
    live segments, every rolled local segment copied, and the local log no longer than local
    retention keeps (Kafka's size rule: the oldest segment goes while the log is still at
    least ``local.retention.bytes`` without it), no ``.deleted`` file left."""
    cache = read_metadata_log_dir(broker.log_dir)
    segments = [m for tp in cache.partitions if tp.topic == topic for m in cache.segments(tp)]
    if not segments or any(m.state != RemoteLogSegmentState.COPY_SEGMENT_FINISHED
                           for m in segments):
        return False
    if watermarks(broker, topic)[0] != segments[0].start_offset:
        return False
    if set(broker.remote_segment_files(topic)) != {m.file_stem for m in segments}:
        return False
    directory = broker.log_dir / f"{topic}-0"
    if any(p.name.endswith(".deleted") for p in directory.iterdir()):
        return False
    local = broker.local_segment_offsets(topic)
    if not local or segments[-1].end_offset + 1 != local[-1]:
        return False
    try:
        sizes = [(directory / f"{base:020d}.log").stat().st_size for base in local]
    except FileNotFoundError:  # (a segment deleted since the listing: not at rest)
        return False
    return len(sizes) == 1 or sum(sizes) - LOCAL_RETENTION_BYTES < sizes[0]


def wait_settled(broker: KafkaBroker) -> None:
    for topic in TOPICS:
        wait_until(lambda: settled(broker, topic), f"{topic}-0's tiers at rest",
                   timeout=DEADLINE_S * 2)


@pytest.fixture(scope="module")
def tiered(s3_server, tmp_path_factory):
    """The module's broker (``.broker``), its topics produced and mostly remote-only, at
    rest; ``.remote`` the bucket URI of its remote tier (LocalTieredStorage's root)."""
    root = tmp_path_factory.mktemp("tiered-end-to-end")
    bucket = s3_server.new_bucket("tiered")
    # the log start offsets checkpointed every second (Kafka's default: every minute)
    broker = KafkaBroker(root / "kafka-logs", root / "broker",
                         {"log.flush.start.offset.checkpoint.interval.ms": "1000"},
                         remote_storage_dir=s3_server.base_dir / bucket / "rsm")
    try:
        broker.start()
        broker.create_topic(HISTORY, 1, TIERED_TOPIC_CONFIG)
        broker.create_topic(APPENDED, 1, {**TIERED_TOPIC_CONFIG,
                                          "message.timestamp.type": "LogAppendTime"})
        produce(broker)
        broker.wait_tiered(HISTORY, 0, segments=3)
        broker.wait_tiered(APPENDED, 0, segments=1)
        wait_settled(broker)
        yield types.SimpleNamespace(broker=broker, remote=f"s3://{bucket}/rsm")
    finally:
        broker.tear_down()


# -- what each reader gives, in one shape -------------------------------------------------


def consumed(broker: KafkaBroker, isolation: str) -> dict[str, list[tuple]]:
    """{topic: the consumer's records of its partition 0 from the log start}: (offset,
    timestamp, timestamp type, key, value, headers)."""
    return {topic: consume_all(broker, topic, 0, isolation) for topic in TOPICS}


def spark_records(session, path: str, isolation: str, **options) -> dict[str, list[tuple]]:
    reader = (session.read.format("kfs").option("path", path)
              .option("subscribe", ",".join(TOPICS)).option("includeHeaders", "true")
              .option("isolation.level", isolation))
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load().selectExpr("topic", "partition", "offset", "unix_millis(timestamp)",
                                    "timestampType", "key", "value", "headers").collect()
    out: dict[str, list[tuple]] = {topic: [] for topic in TOPICS}
    for topic, partition, offset, ts, ts_type, key, value, headers in rows:
        assert partition == 0
        out[topic].append((offset, ts, ts_type, None if key is None else bytes(key),
                           None if value is None else bytes(value),
                           tuple((h.key, None if h.value is None else bytes(h.value))
                                 for h in headers or ())))
    return {topic: sorted(records) for topic, records in out.items()}


def below(records: dict[str, list[tuple]], ends: dict[str, int]) -> dict[str, list[tuple]]:
    return {t: [r for r in rs if r[0] < ends[t]] for t, rs in records.items()}


def from_offsets(records: dict[str, list[tuple]], starts: dict[str, int]) -> dict[str, list]:
    return {t: [r for r in rs if r[0] >= starts[t]] for t, rs in records.items()}


def as_json(data: bytes | None):
    """Bytes as records.jsonl and ``kfs dump --json`` write them."""
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode()}


def json_record(topic: str, record: tuple) -> dict:
    """A consumer's record as a records.jsonl line (kcat ``-J`` fields)."""
    offset, ts, ts_type, key, value, headers = record
    return {"topic": topic, "partition": 0, "offset": offset,
            "tstype": ("create", "logappend")[ts_type], "ts": ts,
            "headers": [x for k, v in headers for x in (k, as_json(v))],
            "key": as_json(key), "payload": as_json(value)}


def remote_ends(broker: KafkaBroker) -> dict[str, int]:
    """{topic: the offset after its last live remote segment}."""
    return {topic: live_segments(broker, topic)[-1].end_offset + 1 for topic in TOPICS}


def check_shape(records: dict[str, list[tuple]], isolation: str) -> None:
    """The consumer's records hold what the module produced: keys and null keys, headers,
    null values, both transactions as the isolation level shows them, LogAppendTime."""
    history, appended = records[HISTORY], records[APPENDED]
    assert len(history) > 15_000 and len(appended) == 6000
    values = [r[4] for r in history]
    assert None in values and any(r[3] is None for r in history)
    assert any(("empty", None) in r[5] for r in history)
    assert b"committed-299" in values
    assert (b"aborted-0" in values) == (isolation == "read_uncommitted")
    assert {r[2] for r in history} == {0} and {r[2] for r in appended} == {1}


# -- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_spark_over_the_three_layouts_equals_the_consumer(tiered, s3_cluster, s3_server,
                                                          isolation):
    broker, session = tiered.broker, s3_cluster.session
    want = consumed(broker, isolation)
    check_shape(want, isolation)
    local_starts = {t: broker.local_segment_offsets(t)[0] for t in TOPICS}
    assert all(start > 0 for start in local_starts.values())  # the first offsets remote-only

    # 3: the broker's log directory and its remote tier, the live set from the metadata
    got, tasks = s3_cluster.tasks_by_executor(lambda: spark_records(
        session, str(broker.log_dir), isolation,
        **{"remote.path": tiered.remote, "maxRecordsPerPartition": "4000"}))
    assert got == want
    assert len(tasks) == 2 and all(tasks.values()), tasks  # read on both workers

    # 2: the remote tier alone (its listing), up to where it ends
    ends = remote_ends(broker)
    assert all(ends[t] >= local_starts[t] for t in TOPICS)
    got = spark_records(session, tiered.remote, isolation)
    assert got == below(want, ends)
    assert all(got.values())

    # 1: the broker's log directory copied into a bucket as it is, from the local log start
    uri, _ = copy_into_bucket(s3_server, broker.log_dir, [f"{t}-0" for t in TOPICS])
    got = spark_records(session, uri, isolation)
    assert got == from_offsets(want, local_starts)
    assert all(got.values())


@pytest.mark.fuse
@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_mount_over_the_bucket_equals_the_consumer(tiered, s3_server, tmp_path,
                                                       monkeypatch, isolation):
    """``kfs mount --read-only s3://<bucket>/rsm``: what a user reads of each partition."""
    broker = tiered.broker
    want = below(consumed(broker, isolation), remote_ends(broker))
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    mounter = Mounter(tmp_path)
    try:
        mount = mounter(tiered.remote, "--read-only", "--isolation-level", isolation)
        assert sorted(os.listdir(mount.path)) == sorted(f"{t}-0" for t in TOPICS)
        for topic in TOPICS:
            partition = mount.path / f"{topic}-0"
            lines = (partition / "records.jsonl").read_bytes().decode().splitlines()
            assert [json.loads(line) for line in lines] == [json_record(topic, r)
                                                            for r in want[topic]]
            offsets = sorted(int(n) for n in os.listdir(partition / "by-offset"))
            records = {r[0]: r for r in want[topic]}
            assert offsets == sorted(records)
            for offset in [o for o in records][::101]:
                assert (partition / "by-offset" / str(offset)).read_bytes() == (
                    records[offset][4] or b"")
        assert s3_server.secret_key not in mount.log_text()
    finally:
        mounter.close_all()


def test_dump_of_the_remote_segments_equals_the_consumer(tiered, s3_server):
    """``kfs dump --json --deep-iteration`` of every live remote ``.log`` by URI: its records
    (control records aside) are the consumer's at read_uncommitted in the segments' offsets."""
    broker = tiered.broker
    want = consumed(broker, "read_uncommitted")
    bucket = tiered.remote[len("s3://"):].split("/")[0]
    for topic in TOPICS:
        segments = live_segments(broker, topic)
        uris = [f"{tiered.remote}/" + "/".join(
            (m.local_tiered_storage_path(broker.remote_root) / f"{m.file_stem}.log")
            .relative_to(s3_server.base_dir / bucket / "rsm").parts) for m in segments]
        done = subprocess.run(kfs_command("dump", "--json", "--deep-iteration", *uris), cwd=REPO,
                              env={**kfs_env(), **s3_server.env()}, capture_output=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        objects = [json.loads(line) for line in done.stdout.splitlines()]
        got = [{k: o[k] for k in ("offset", "tstype", "ts", "headers", "key", "payload")}
               for o in objects if "payload" in o and not o["isControl"]]
        end = segments[-1].end_offset + 1
        expected = []
        for r in want[topic]:
            if segments[0].start_offset <= r[0] < end:
                e = json_record(topic, r)
                expected.append({k: e[k] for k in ("offset", "tstype", "ts", "headers", "key",
                                                   "payload")})
        assert got == expected and got


def test_a_stream_of_the_tiered_topic(tiered, s3_cluster):
    """``readStream.format("kfs")``, ``path`` the broker's log directory and ``remote.path``
    the bucket, from the earliest offset: the first micro-batch ends at the broker's high
    watermark; records produced after the query started come in a later micro-batch."""
    broker, session = tiered.broker, s3_cluster.session
    query = (session.readStream.format("kfs").option("path", str(broker.log_dir))
             .option("remote.path", tiered.remote).option("subscribe", HISTORY)
             .option("startingOffsets", "earliest").option("includeHeaders", "true").load()
             .selectExpr("offset", "key", "value")
             .writeStream.format("memory").queryName("tiered_stream").start())
    try:  # (processAllAvailable takes no timeout: bounded by within(), query.stop() ends it)
        first_high = watermarks(broker, HISTORY)[1]
        within(DEADLINE_S, "the stream's first micro-batch", query.processAllAvailable)
        batches = [p for p in query.recentProgress if p["numInputRows"]]
        assert json.loads(batches[0]["sources"][0]["endOffset"]) == {HISTORY: {"0": first_high}}
        p = producer(broker)
        for i in range(50):
            p.produce(HISTORY, key=b"late", value=b"late-%d" % i)
        flushed(p)
        later_high = watermarks(broker, HISTORY)[1]
        assert later_high == first_high + 50
        within(DEADLINE_S, "the micro-batch of the late records", query.processAllAvailable)
        assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {
            HISTORY: {"0": later_high}}
        rows = session.sql("select offset, key, value from tiered_stream").collect()
        got = sorted((r.offset, None if r.key is None else bytes(r.key),
                      None if r.value is None else bytes(r.value)) for r in rows)
        want = [(r[0], r[3], r[4]) for r in consume_all(broker, HISTORY, 0, "read_uncommitted")]
        assert got == want
        assert got[-1] == (later_high - 1, b"late", b"late-49")
        assert len([p for p in query.recentProgress if p["numInputRows"]]) >= 2
    finally:
        query.stop()


def test_still_equal_after_remote_retention(tiered, s3_cluster):
    """``retention.bytes`` of ``history`` lowered to three segments through the admin client:
    the broker's remote retention deletes the oldest remote segments (the log start moves
    up); the consumer from the new log start equals Spark over layouts 3 and 2."""
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    broker, session = tiered.broker, s3_cluster.session
    first = live_segments(broker, HISTORY)[0].start_offset
    admin = broker.admin()
    resource = ConfigResource(ResourceType.TOPIC, HISTORY, incremental_configs=[ConfigEntry(
        "retention.bytes", str(3 * SEGMENT_BYTES),
        incremental_operation=AlterConfigOpType.SET)])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(60)
    wait_until(lambda: live_segments(broker, HISTORY)[0].start_offset > first,
               "remote retention deleting history-0's oldest remote segments",
               timeout=DEADLINE_S * 2)
    wait_settled(broker)
    start = watermarks(broker, HISTORY)[0]
    assert start == live_segments(broker, HISTORY)[0].start_offset > first
    for isolation in ISOLATIONS:
        want = consumed(broker, isolation)
        assert want[HISTORY][0][0] >= start > 0
        got = spark_records(session, str(broker.log_dir), isolation,
                            **{"remote.path": tiered.remote})
        assert got == want
        assert got[HISTORY][0][0] >= start
        got = spark_records(session, tiered.remote, isolation)
        assert got == below(want, remote_ends(broker))


def checkpointed_log_start(broker: KafkaBroker, name: str) -> int | None:
    """The broker's ``log-start-offset-checkpoint`` entry of partition ``name`` (None: none)."""
    try:
        lines = (broker.log_dir / "log-start-offset-checkpoint").read_text().splitlines()
    except FileNotFoundError:
        return None
    for line in lines[2:]:
        topic, partition, offset = line.split()
        if f"{topic}-{partition}" == name:
            return int(offset)
    return None


def test_delete_records_inside_a_remote_segment(tiered, s3_cluster):
    """DeleteRecords (the admin client) up to the middle of the first live remote segment of
    ``appended``: the broker serves from there while ``__remote_log_metadata`` still has the
    whole segment live (remote retention deletes a segment only once it is all below the log
    start). Spark over layout 3 starts where the consumer does: at the log start the broker
    checkpointed (``log-start-offset-checkpoint``), not at the segment's base."""
    from confluent_kafka import TopicPartition

    broker, session = tiered.broker, s3_cluster.session
    segment = live_segments(broker, APPENDED)[0]
    target = (segment.start_offset + segment.end_offset) // 2
    admin = broker.admin()
    for future in admin.delete_records([TopicPartition(APPENDED, 0, target)]).values():
        future.result(60)
    assert watermarks(broker, APPENDED)[0] == target
    wait_until(lambda: checkpointed_log_start(broker, f"{APPENDED}-0") == target,
               f"the broker checkpointing {APPENDED}-0's log start {target}")
    assert live_segments(broker, APPENDED)[0].start_offset == segment.start_offset
    for isolation in ISOLATIONS:
        want = consumed(broker, isolation)
        assert want[APPENDED][0][0] == target
        got = spark_records(session, str(broker.log_dir), isolation,
                            **{"remote.path": tiered.remote})
        assert got[APPENDED][0][0] == target
        assert got == want
