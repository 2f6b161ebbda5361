"""``kfs verify`` of segments in an object store, run as a command against a real S3 API server
(S3Proxy, ``s3_server``) holding Kafka-written partitions: a log directory copied into a bucket
and a LocalTieredStorage root verify clean with the counts of the same files verified locally;
a flipped byte, a truncated object, a deleted index object, a lost segment, a live segment's
lost ``.log`` or one cut between batches (against ``__remote_log_metadata``) and offsets in
neither tier are problems naming the object by its URI; an object cut short while it is read
is a problem of its segment and the next partition is still checked; ``--repair``, a bad
bucket, a wrong secret and no credentials are one clear line, exit status 2, no secret. What
a real Kafka 4.1.1 broker tiered (``tiered_broker``) verifies clean, metadata and all."""

import base64
import os
import re
import shutil
import subprocess

import pytest
from helpers.kfs import kfs_command, kfs_env
from helpers.paths import KAFKA_WRITTEN, REPO
from helpers.remote_metadata import segment_record, update_record
from helpers.s3 import AWS_VARIABLES, copy_into_bucket
from helpers.tiered import bases_of, tier

from storage import LogConfig
from storage.log import Log
from storage.records import build_batch, iter_batches
from storage.remote.tiered import TIERED_ROOT

needs_fixtures = pytest.mark.needs_fixture("kafka-written")
SUMMARY = re.compile(r"^(\d+ partitions?, \d+ segments?, \d+ bytes?) checked in [\d.]+ s: (.*)$")


def kfs_verify(s3_server, *args) -> subprocess.CompletedProcess:
    """``kfs verify ARGS`` with the standard AWS chain pointing at ``s3_server`` only."""
    env = {k: v for k, v in kfs_env().items() if k not in AWS_VARIABLES}
    env.update(s3_server.env())
    return subprocess.run(kfs_command("verify", *map(str, args)), cwd=REPO, env=env,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)


def summary(done) -> tuple[str, str]:
    """(the counts, the verdict) of a run's summary line."""
    match = SUMMARY.match(done.stdout.splitlines()[-1])
    assert match, done.stdout + done.stderr
    return match.group(1), match.group(2)


def problems(done) -> list[str]:
    """The problem lines (not the notices, not the summary)."""
    return [line for line in done.stdout.splitlines()[:-1] if not line.startswith("no __remote")]


def batch_positions(path) -> list[tuple[int, int]]:
    """(position, base offset) of every batch of a .log."""
    data, out, position = path.read_bytes(), [], 0
    for batch in iter_batches(data):
        out.append((position, batch.base_offset))
        position += batch.size_in_bytes
    return out


def in_bucket(s3_server):
    """A fresh bucket: its directory on the server's disk, its URI."""
    bucket = s3_server.new_bucket()
    return s3_server.base_dir / bucket, f"s3://{bucket}"


# -- layout 1: a log directory copied into a bucket ----------------------------------------


@needs_fixtures
def test_a_clean_bucket_verifies_as_the_same_files_do_locally(s3_server):
    uri, _ = copy_into_bucket(s3_server, KAFKA_WRITTEN)
    remote, local = kfs_verify(s3_server, uri), kfs_verify(s3_server, KAFKA_WRITTEN)
    assert remote.returncode == local.returncode == 0, remote.stdout + remote.stderr
    assert summary(remote) == summary(local)
    assert summary(remote)[0].startswith("5 partitions, ")
    assert summary(remote)[1] == "no problems" and problems(remote) == []


@needs_fixtures
def test_a_flipped_byte_is_a_crc_problem_naming_the_object_and_position(s3_server):
    uri, target = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0", "txn-0"])
    log = target / "plain-0" / "00000000000000000253.log"
    position, offset = batch_positions(log)[3]
    data = bytearray(log.read_bytes())
    data[position + 80] ^= 0xFF  # (a record's bytes: the size and offsets stay right)
    log.write_bytes(bytes(data))
    done = kfs_verify(s3_server, uri)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = problems(done)
    assert line.startswith(f"{uri}/plain-0/00000000000000000253.log:{position}: Record batch at "
                           f"offset {offset} is corrupt (stored crc = ")
    assert summary(done)[0] == summary(kfs_verify(s3_server, KAFKA_WRITTEN, "plain-0",
                                                  "txn-0"))[0]  # every segment still checked


@needs_fixtures
def test_a_truncated_object_is_named_with_where_its_whole_batches_end(s3_server):
    uri, target = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0"])
    log = target / "plain-0" / "00000000000000000446.log"
    position, _ = batch_positions(log)[-2]
    os.truncate(log, position + 30)  # (in the middle of the last batch but one)
    done = kfs_verify(s3_server, uri)
    assert done.returncode == 1
    assert f"{uri}/plain-0/00000000000000000446.log:{position}: 30 bytes after the last whole " \
           "batch (a truncated object, or a corrupt batch size)" in problems(done)


@needs_fixtures
def test_a_deleted_index_object_is_missing(s3_server):
    uri, target = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0"])
    (target / "plain-0" / "00000000000000000692.index").unlink()
    done = kfs_verify(s3_server, uri, "plain-0")
    assert done.returncode == 1
    assert problems(done) == [f"{uri}/plain-0/00000000000000000692.index: missing (Kafka "
                              "rebuilds it by recovering the segment)"]


@needs_fixtures
def test_an_object_cut_while_read_is_a_problem_and_the_next_partition_is_checked(s3_server):
    from kfs.tools.verify import VerifyStats, verify_partitions
    from kfs.tools.verify_remote import CopiedPartition
    from storage.remote.object_store import ObjectStore

    uri, target = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0", "txn-0"])
    store = ObjectStore(s3_server.filesystem(), uri[len("s3://"):], uri)
    partitions = [CopiedPartition(store, "plain-0"), CopiedPartition(store, "txn-0")]
    listed = [p.log_bytes() for p in partitions]  # (listed now: sizes as they are now)
    log = target / "plain-0" / "00000000000000000253.log"
    size = log.stat().st_size
    os.truncate(log, 1000)
    try:
        out = list(verify_partitions(partitions))
    finally:
        store.close()
    *found, stats = out
    assert isinstance(stats, VerifyStats) and stats.partitions == 2
    (cut,) = [p for p in found if p.file == "00000000000000000253.log"]
    assert str(cut) == (f"{uri}/plain-0/00000000000000000253.log: cannot be read: 1000 bytes "
                        f"at byte 0 where {size} were listed (the object changed)")
    assert not [p for p in found if p.partition == "txn-0"]
    txn_segments = len(bases_of(KAFKA_WRITTEN / "txn-0"))
    assert stats.segments == len(bases_of(KAFKA_WRITTEN / "plain-0")) + txn_segments
    assert stats.bytes == sum(listed)  # txn-0 read whole after plain-0's failure


# -- layout 2: a LocalTieredStorage root ------------------------------------------------------


@needs_fixtures
def test_a_tiered_storage_root_verifies_as_the_partition_does_locally(s3_server):
    disk, uri = in_bucket(s3_server)
    bases = bases_of(KAFKA_WRITTEN / "txn-0")
    tier(disk, "txn-0", bases, [])
    done = kfs_verify(s3_server, f"{uri}/rsm")
    assert done.returncode == 0, done.stdout + done.stderr
    assert summary(done) == summary(kfs_verify(s3_server, KAFKA_WRITTEN, "txn-0"))
    assert done.stdout.startswith("no __remote_log_metadata at hand: ")


@needs_fixtures
def test_a_tiered_segment_lost_from_the_middle_is_a_gap(s3_server):
    disk, uri = in_bucket(s3_server)
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    tier(disk, "plain-0", bases[:5], [])
    (partition,) = (disk / "rsm" / TIERED_ROOT).iterdir()
    for path in partition.glob(f"{bases[2]:020d}-*"):
        path.unlink()
    (index,) = partition.glob(f"{bases[3]:020d}-*.index")
    index.unlink()
    (log,) = partition.glob(f"{bases[3]:020d}-*.log")
    done = kfs_verify(s3_server, f"{uri}/rsm")
    assert done.returncode == 1
    where = f"{uri}/rsm/{TIERED_ROOT}/{partition.name}"
    assert problems(done) == [
        f"{where}/{log.name}: plain-0: offsets {bases[2]}..{bases[3] - 1} are in no segment "
        f"(the segment before ends at offset {bases[2] - 1})",
        f"{where}/{index.name}: missing (a fetch from the remote tier looks offsets up in it: "
        "Kafka's RemoteIndexCache fails without it)"]


# -- layout 3: a broker's local log with its remote tier ----------------------------------


@needs_fixtures
@pytest.mark.parametrize("remote_end", [8, 10])  # the tiers meet, or overlap
def test_tiers_that_meet_verify_clean(s3_server, remote_end):
    disk, uri = in_bucket(s3_server)
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    _, local = tier(disk, "plain-0", bases[:remote_end], bases[8:])
    done = kfs_verify(s3_server, "--remote-path", f"{uri}/rsm", local)
    assert done.returncode == 0, done.stdout + done.stderr
    counts, _ = summary(done)
    assert counts.startswith(f"1 partition, {remote_end + len(bases) - 8} segments, ")


@needs_fixtures
def test_a_gap_between_the_tiers_names_the_partition_and_offsets(s3_server):
    disk, uri = in_bucket(s3_server)
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    _, local = tier(disk, "plain-0", bases[:5], bases[8:])
    done = kfs_verify(s3_server, "--remote-path", f"{uri}/rsm", local)
    assert done.returncode == 1
    assert problems(done) == [
        f"plain-0/{bases[8]:020d}.log: plain-0: offsets {bases[5]}..{bases[8] - 1} are in "
        f"neither the remote tier (which ends at {bases[5] - 1}) nor the local log (which "
        f"starts at {bases[8]})"]


def _write_remote_log_metadata(log_dir, partition, live_stems, started_stems):
    """A ``__remote_log_metadata-0`` partition in ``log_dir`` saying the segments
    ``live_stems`` of LocalTieredStorage's directory ``partition`` were copied
    (COPY_SEGMENT_FINISHED) and ``started_stems`` are being copied; each record with its
    ``.log``'s size and last offset as they are now."""
    def raw(text):
        return base64.urlsafe_b64decode(text + "==")

    name, topic_id = partition.name[:-23], partition.name[-22:]  # <topic>-<N>-<topic id>
    topic, number = name.rsplit("-", 1)
    values = []
    for stem in [*live_stems, *started_stems]:
        log = partition / f"{stem}.log"
        end = list(iter_batches(log.read_bytes()))[-1].last_offset
        ids = raw(topic_id), raw(stem[21:])
        values.append(segment_record(*ids, start=int(stem[:20]), end=end, topic=topic,
                                     partition=int(number), size=log.stat().st_size))
        if stem in live_stems:
            values.append(update_record(*ids, topic=topic, partition=int(number)))
    directory = log_dir / "__remote_log_metadata-0"
    directory.mkdir()
    log = Log(directory, "__remote_log_metadata", 0, LogConfig())
    log.append_batches(build_batch(0, values, [None] * len(values), 1_700_000_000_000))
    log.close()


def tiered_with_metadata(s3_server, live, started=0):
    """plain-0's first 4 segments remote, the rest local, ``__remote_log_metadata`` saying
    the first ``live`` are live and the ``started`` after them being copied: (the root's URI,
    the local directory, LocalTieredStorage's partition directory, its stems, the bases)."""
    disk, uri = in_bucket(s3_server)
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    _, local = tier(disk, "plain-0", bases[:4], bases[4:])
    (partition,) = (disk / "rsm" / TIERED_ROOT).iterdir()
    stems = sorted({p.name.split(".")[0] for p in partition.iterdir()})
    _write_remote_log_metadata(local, partition, stems[:live], stems[live:live + started])
    return f"{uri}/rsm", local, partition, stems, bases


@needs_fixtures
def test_the_live_segments_are_those_of_the_remote_log_metadata(s3_server):
    root, local, partition, stems, bases = tiered_with_metadata(s3_server, 3, 1)
    # the segment being copied (not live) is not in the remote tier yet: its offsets are in
    # neither tier
    gap = (f"plain-0/{bases[4]:020d}.log: plain-0: offsets {bases[3]}..{bases[4] - 1} are in "
           f"neither the remote tier (which ends at {bases[3] - 1}) nor the local log (which "
           f"starts at {bases[4]})")
    assert problems(kfs_verify(s3_server, "--remote-path", root, local, "plain-0")) == [gap]
    (partition / f"{stems[1]}.log").unlink()  # a live segment's .log
    os.truncate(partition / f"{stems[3]}.log", 100)  # being copied: not checked
    done = kfs_verify(s3_server, "--remote-path", root, local, "plain-0")
    assert done.returncode == 1, done.stdout + done.stderr
    where = f"{root}/{TIERED_ROOT}/{partition.name}"
    assert problems(done) == [
        f"{where}/{stems[1]}.log: missing: __remote_log_metadata says this segment was copied "
        "(COPY_SEGMENT_FINISHED) and not deleted",
        f"{where}/{stems[2]}.log: plain-0: offsets {bases[1]}..{bases[2] - 1} are in no "
        f"segment (the segment before ends at offset {bases[1] - 1})", gap]


@needs_fixtures
def test_a_live_segment_cut_between_batches_differs_from_its_metadata(s3_server):
    root, local, partition, stems, bases = tiered_with_metadata(s3_server, 4)
    log = partition / f"{stems[3]}.log"
    size = log.stat().st_size
    position, offset = batch_positions(log)[-1]
    os.truncate(log, position)  # (whole batches only: nothing torn to see)
    done = kfs_verify(s3_server, "--remote-path", root, local, "plain-0")
    assert done.returncode == 1, done.stdout + done.stderr
    where = f"{root}/{TIERED_ROOT}/{partition.name}/{log.name}"
    assert problems(done)[:2] == [
        f"{where}: {position} bytes, where __remote_log_metadata says {size} "
        "(segmentSizeInBytes): not the segment copied whole",
        f"{where}: last offset {offset - 1}, where __remote_log_metadata says {bases[4] - 1} "
        "(endOffset)"]
    assert problems(done)[-1].startswith(f"plain-0/{bases[4]:020d}.log: plain-0: offsets "
                                         f"{offset}..{bases[4] - 1} are in neither")


# -- refused ---------------------------------------------------------------------------------


@needs_fixtures
@pytest.mark.parametrize("layout", ["bucket", "remote-path"])
def test_repair_of_an_object_store_is_refused_and_nothing_changes(s3_server, tmp_path, layout):
    uri, target = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0"])
    log = target / "plain-0" / "00000000000000000253.log"
    os.truncate(log, 5000)
    local = tmp_path / "local"
    shutil.copytree(KAFKA_WRITTEN / "plain-0", local / "plain-0")
    args = [uri] if layout == "bucket" else ["--remote-path", uri, local]
    done = kfs_verify(s3_server, "--repair", "--yes", *args)
    assert done.returncode == 2
    assert done.stderr == (f"kfs verify: error: --repair mends a local directory only, not the "
                           f"object store {uri}: verify it without --repair\n")
    assert done.stdout == "" and log.stat().st_size == 5000


@pytest.mark.parametrize("where", ["unknown bucket", "wrong secret in the URI"])
def test_a_bad_bucket_is_one_line_without_a_secret(s3_server, where):
    uri = ("s3://no-such-bucket-kfs/logs" if where == "unknown bucket" else
           f"s3://{s3_server.access_key}:not-the-secret-1234@{s3_server.new_bucket()}/logs")
    done = kfs_verify(s3_server, uri)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith("kfs verify: error: ") and done.stderr.count("\n") == 1
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert "not-the-secret-1234" not in done.stderr
    assert s3_server.secret_key not in done.stderr


@needs_fixtures
def test_refused_credentials_are_one_line_in_the_store_s_words(s3_server):
    """Issue 37 item 21: a wrong secret is the line every front end prints (the store's URI
    and ``REFUSED_CREDENTIALS``), not the AWS SDK's ``ACCESS_DENIED … No response body``."""
    from storage.remote.object_store import REFUSED_CREDENTIALS

    uri, _ = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0"])
    env = {k: v for k, v in kfs_env().items() if k not in AWS_VARIABLES}
    env.update(s3_server.env(), AWS_SECRET_ACCESS_KEY="not-the-secret-1234")
    done = subprocess.run(kfs_command("verify", uri), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr == f"kfs verify: error: {uri}: {REFUSED_CREDENTIALS}\n"


@needs_fixtures
def test_no_credentials_is_one_line(s3_server):
    uri, target = copy_into_bucket(s3_server, KAFKA_WRITTEN, ["plain-0"])
    for path in [target.parent, *target.rglob("*")]:  # (S3Proxy serves world-readable files
        path.chmod(0o700 if path.is_dir() else 0o600)  # to anyone: these to its identity only)
    assert kfs_verify(s3_server, uri).returncode == 0
    env = {k: v for k, v in kfs_env().items() if k not in AWS_VARIABLES}
    env.update({k: v for k, v in s3_server.env().items()
                if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")})
    done = subprocess.run(kfs_command("verify", uri), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.startswith(f"kfs verify: error: {uri}") and done.stderr.count("\n") == 1
    assert "refused the credentials" in done.stderr and "Traceback" not in done.stderr


# -- a real broker's remote tier -----------------------------------------------------------


@pytest.mark.kafka
def test_a_brokers_tiered_topic_verifies_clean_and_a_flipped_byte_is_named(tiered_broker):
    """What a Kafka 4.1.1 broker wrote (LocalTieredStorage, __remote_log_metadata, local
    retention), at rest: clean in both tiers and against the metadata; then a byte flipped in
    a remote .log is a CRC problem naming it."""
    from confluent_kafka import Producer
    from helpers.kafka import SEGMENT_BYTES, TIERED_TOPIC_CONFIG, flushed
    from helpers.waits import wait_until

    broker = tiered_broker
    broker.create_topic("audited", 1, TIERED_TOPIC_CONFIG)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                         "linger.ms": 5, "compression.type": "lz4"})
    for i in range(5 * SEGMENT_BYTES // 300):
        producer.produce("audited", key=b"k%d" % (i % 17), value=os.urandom(150).hex().encode())
    flushed(producer)
    broker.wait_tiered("audited", 0, segments=3)
    partition = broker.log_dir / "audited-0"
    wait_until(lambda: not list(partition.glob("*.deleted")),
               "local retention's deletions done (file.delete.delay.ms)")
    broker.stop()  # (at rest: no copy, deletion or append in flight)
    env = kfs_env()
    root = broker.remote_storage_dir.as_uri()

    def verify(*args):
        return subprocess.run(kfs_command("verify", *map(str, args)), cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=300)

    done = verify("--remote-path", root, broker.log_dir, "audited-0")
    assert done.returncode == 0, done.stdout + done.stderr
    remote = sorted(broker.remote_root.glob("audited-0-*/*.log"))
    local = broker.local_segment_offsets("audited", 0)
    assert summary(done)[0].startswith(f"1 partition, {len(remote) + len(local)} segments, ")
    assert verify(root).returncode == 0  # (the root alone: its listing)
    log = remote[1]
    position, offset = batch_positions(log)[-1]
    data = bytearray(log.read_bytes())
    data[position + 70] ^= 0xFF
    log.write_bytes(bytes(data))
    done = verify("--remote-path", root, broker.log_dir, "audited-0")
    assert done.returncode == 1
    assert problems(done)[0].startswith(
        f"{root}/kafka-tiered-storage/{log.parent.name}/{log.name}:{position}: Record batch at "
        f"offset {offset} is corrupt")


# -- a copy of a running broker's log directory ----------------------------------------------


@pytest.mark.kafka
def test_a_bucket_copy_of_a_running_brokers_directory_is_checked_as_on_disk(kafka_broker,
                                                                           s3_server):
    """Issue 37 item 18: a running Kafka 4.1.1 broker's log directory copied into a bucket
    (no ``.kafka_cleanshutdown``: the broker deleted it at start) holds its active segments'
    preallocated indexes, and a time index with no entry yet (its first slot zeros). The local
    verify of a copy nobody holds says what the next start recovers and finds no problem; the
    bucket's verify says the same of the same files, not a problem each."""
    from confluent_kafka import Producer
    from helpers.kafka import flushed

    broker = kafka_broker()
    for topic in ("busy", "quiet"):
        broker.create_topic(topic, 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    for i in range(2000):
        producer.produce("busy", key=b"k%d" % i, value=b"v" * 200)
    producer.produce("quiet", value=b"one record: no index entry yet")
    flushed(producer)
    bucket = s3_server.new_bucket()
    copy = s3_server.base_dir / bucket / "logs"
    shutil.copytree(broker.log_dir, copy, ignore=shutil.ignore_patterns(".lock"))
    assert not (copy / ".kafka_cleanshutdown").exists()
    names = ["busy-0", "quiet-0"]
    local, remote = kfs_verify(s3_server, copy, *names), kfs_verify(s3_server,
                                                                    f"s3://{bucket}/logs", *names)
    for done in (local, remote):
        assert done.returncode == 0, done.stdout + done.stderr
        assert summary(done)[1].startswith("no problems ("), done.stdout
        assert all(line.endswith("[recovered at the next start]") for line in problems(done)[1:])
    assert "holds no .kafka_cleanshutdown" in remote.stdout.splitlines()[0]
    assert summary(remote) == summary(local)
    assert [line.split(": ", 1)[1] for line in problems(remote)[1:]] == [
        line.split(": ", 1)[1] for line in problems(local)[1:]]
