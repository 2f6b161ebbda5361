"""Same bytes as the broker: the same produce requests sent to a real Kafka 4.1.1 broker and
written to kfs mounts' ``append-batches`` leave the partition directories equal byte for byte:
every ``.log``, ``.index``, ``.timeindex``, ``.txnindex``, producer ``.snapshot`` and the
``leader-epoch-checkpoint``.

The requests are raw produce requests (kafka-python's protocol classes over a plain socket) whose
record batches this test builds with ``storage.records.build_batch``, so both sides get identical
batches in the same order: records without a producer, an idempotent producer and three
transactional producers interleaved, uncompressed batches and batches of every codec, timestamps
(CreateTime) that sometimes go back, committed and aborted transactions, one left open at the
shutdown, and rolls of 1 MiB segments (``segment.bytes``' minimum in Kafka 4).

Kafka 4.1.1 takes one batch per partition in a produce request (``LogValidator`` refuses a second
one, compressed or not, with "Compressed outer record has more than one batch"), so every batch
is one request to the broker. Two mounts get them: ``each`` one ``write()`` per request;
``grouped`` a producer's consecutive batches in one ``write()``, as kfs's Spark writer writes a
task's batches. Both must leave the broker's bytes: the indexes follow each batch (Kafka 4.1's
``LogSegment.append``), and a grouped write that rolls the segment rolls where the broker's
requests did.

Producer ids and epochs come from the broker (``InitProducerId``), as a producer gets them. The
broker's transaction coordinator writes the COMMIT/ABORT markers itself (``EndTxn`` →
``WriteTxnMarkers``) at its own clock, so "the same requests" for a marker means the marker the
coordinator wrote: once it is in the broker's log, that control batch (its producer id and
epoch, coordinator epoch and timestamp) is written to ``append-batches`` as the next write, as
the coordinator's WriteTxnMarkers request hands it to a leader (kfs assigns the offset and stamps
the leader epoch itself). The test also checks that ``build_control_batch`` builds exactly the
broker's marker.
"""

from __future__ import annotations

import os
import random
import socket
import struct
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage.log_files import log_file, offset_from_file_name
from storage.records import CompressionType, build_batch, iter_batches
from storage.records.batch import RecordBatch
from storage.records.control import ControlRecordType, build_control_batch

pytestmark = pytest.mark.kafka

TOPIC = "same"
SEGMENT_BYTES = 1048576  # Kafka 4's minimum segment.bytes
INDEX_INTERVAL_BYTES = 3000  # not the default, so the setting must reach both sides
TOPIC_CONFIG = {"segment.bytes": str(SEGMENT_BYTES),
                "index.interval.bytes": str(INDEX_INTERVAL_BYTES),
                "retention.ms": "-1"}
TARGET_BYTES = 3_300_000  # a little over three segments
TXN_TIMEOUT_MS = 600_000  # neither side may abort a transaction on its own during the test
DEADLINE_S = 60.0
KINDS = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")
CODECS = (CompressionType.GZIP, CompressionType.SNAPPY, CompressionType.LZ4, CompressionType.ZSTD)
WORDS = [b"alpha", b"beta", b"gamma", b"delta", b"kafka", b"segment", b"offset", b"index", b"{}",
         b"\x00\xff", b"txn", b"marker"]


# -- a minimal blocking Kafka client: kafka-python's message classes over a socket ------------

class Connection:
    def __init__(self, bootstrap: str):
        host, port = bootstrap.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=DEADLINE_S)
        self.correlation_id = 0

    def call(self, request, version: int):
        self.correlation_id += 1
        request.API_VERSION = version
        request.with_header(correlation_id=self.correlation_id, client_id="kfs-same-bytes")
        self.sock.sendall(request.encode(header=True, framed=True))
        (size,) = struct.unpack(">i", self._read(4))
        response = request.header.get_response_class().decode(self._read(size), header=True)
        assert response.header.correlation_id == self.correlation_id
        return response

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


def retrying(call, ok, what: str):
    """``call()`` until ``ok(response)`` (the coordinator is not ready at once)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        response = call()
        if ok(response):
            return response
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: {response}")
        time.sleep(0.02)


@dataclass
class Producer:
    """A producer id and epoch from the broker and the next sequence number; for a
    transactional one, its id and whether a transaction is open."""

    producer_id: int
    epoch: int
    transactional_id: str | None = None
    sequence: int = 0
    in_txn: bool = False


class Broker:
    """The requests the test sends to the broker."""

    def __init__(self, bootstrap: str):
        from kafka.protocol.producer import ProduceRequest

        self.conn = Connection(bootstrap)
        self.Topic = ProduceRequest.TopicProduceData
        self.Partition = self.Topic.PartitionProduceData

    def init_producer(self, transactional_id: str | None) -> Producer:
        from kafka.protocol.metadata import FindCoordinatorRequest
        from kafka.protocol.producer import InitProducerIdRequest

        if transactional_id is not None:
            retrying(lambda: self.conn.call(FindCoordinatorRequest(
                key_type=1, coordinator_keys=[transactional_id]), 4),
                lambda r: r.coordinators[0].error_code == 0, "FindCoordinator")
        r = retrying(lambda: self.conn.call(InitProducerIdRequest(
            transactional_id=transactional_id, transaction_timeout_ms=TXN_TIMEOUT_MS,
            producer_id=-1, producer_epoch=-1), 4), lambda r: r.error_code == 0, "InitProducerId")
        return Producer(r.producer_id, r.producer_epoch, transactional_id)

    def add_partition(self, p: Producer) -> None:
        from kafka.protocol.producer import AddPartitionsToTxnRequest

        Topic = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic

        def errors(r) -> list[int]:
            return [q.partition_error_code for t in r.results_by_topic_v3_and_below
                    for q in t.results_by_partition]

        # CONCURRENT_TRANSACTIONS (51) until the coordinator has completed the last one
        r = retrying(lambda: self.conn.call(AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=p.transactional_id,
            v3_and_below_producer_id=p.producer_id, v3_and_below_producer_epoch=p.epoch,
            v3_and_below_topics=[Topic(name=TOPIC, partitions=[0])]), 3),
            lambda r: errors(r) != [51], "AddPartitionsToTxn")
        assert errors(r) == [0], r

    def produce(self, records: bytes, transactional_id: str | None) -> int:
        """One produce request carrying ``records``; the base offset the broker assigned."""
        from kafka.protocol.producer import ProduceRequest

        r = self.conn.call(ProduceRequest(
            transactional_id=transactional_id, acks=-1, timeout_ms=30000,
            topic_data=[self.Topic(name=TOPIC, partition_data=[
                self.Partition(index=0, records=records)])]), 9)
        (answer,) = r.responses[0].partition_responses
        assert answer.error_code == 0, answer
        return answer.base_offset

    def end_txn(self, p: Producer, commit: bool) -> None:
        from kafka.protocol.producer import EndTxnRequest

        r = self.conn.call(EndTxnRequest(transactional_id=p.transactional_id,
                                         producer_id=p.producer_id, producer_epoch=p.epoch,
                                         committed=commit), 3)
        assert r.error_code == 0, r


def batch_at_offset(partition_dir: Path, offset: int) -> bytes | None:
    """The bytes of the batch starting at ``offset`` in a partition directory (None while it
    is not there yet)."""
    bases = sorted(offset_from_file_name(p.name) for p in partition_dir.glob("*.log"))
    base = max((b for b in bases if b <= offset), default=None)
    if base is None:
        return None
    data = log_file(partition_dir, base).read_bytes()
    position = 0
    while position + 12 <= len(data):
        size = 12 + struct.unpack_from(">i", data, position + 8)[0]
        if position + size > len(data):
            return None  # being written
        if struct.unpack_from(">q", data, position)[0] == offset:
            return data[position:position + size]
        position += size
    return None


# -- the requests -------------------------------------------------------------------------------

def values(rng: random.Random, compressible: bool) -> list[bytes]:
    out = []
    for _ in range(rng.randint(1, 8)):
        size = rng.choice((0, 20, 300, 700, 1500, 2500))
        if compressible:
            value = b" ".join(rng.choice(WORDS) for _ in range(size // 6 + 1))[:size]
        else:
            value = rng.randbytes(size)
        out.append(value)
    return out


def a_batch(rng: random.Random, clock: list[int], producer: Producer | None = None,
            codec: int = CompressionType.NONE) -> bytes:
    """One batch as a producer builds it; timestamps move forward with some going back (the
    time index keeps the largest so far)."""
    vals = values(rng, codec != CompressionType.NONE)
    clock[0] += rng.randint(1, 40)
    stamps = [clock[0] + rng.randint(-300, 5) for _ in vals]
    keys = [None if rng.random() < 0.3 else b"k%d" % rng.randint(0, 50) for _ in vals]
    headers = [[("h", b"v")] if rng.random() < 0.2 else [] for _ in vals]
    pid = dict(producer_id=-1, producer_epoch=-1, base_sequence=-1)
    if producer is not None:
        pid = dict(producer_id=producer.producer_id, producer_epoch=producer.epoch,
                   base_sequence=producer.sequence,
                   is_transactional=producer.transactional_id is not None)
        producer.sequence += len(vals)
    return build_batch(0, vals, keys=keys, timestamps=stamps, headers=headers, codec=codec, **pid)


def some_batches(rng: random.Random, clock: list[int], producer: Producer | None
                 ) -> list[bytes]:
    """A producer's next one to three batches, some compressed: each one produce request
    (Kafka 4 takes one batch per partition in a request), all of them one ``write()`` for the
    grouped mount, as kfs's Spark writer writes a task's batches."""
    return [a_batch(rng, clock, producer, rng.choice(CODECS) if rng.random() < 0.25
                    else CompressionType.NONE)
            for _ in range(rng.choice((1, 1, 2, 3)))]


class KfsSide:
    """A kfs mount's ``append-batches`` of the partition, checked against the broker's log end
    offset after every write."""

    def __init__(self, mounter, backing: Path):
        backing.mkdir()
        (backing / f"{TOPIC}.topic.properties").write_text(
            "".join(f"{k}={v}\n" for k, v in TOPIC_CONFIG.items()))
        (backing / "server.properties").write_text(f"transaction.timeout.ms={TXN_TIMEOUT_MS}\n")
        self.mount = mounter(backing)
        self.part = self.mount.path / f"{TOPIC}-0"
        os.mkdir(self.part)
        self.dir = backing / f"{TOPIC}-0"
        self.fd = os.open(self.part / "append-batches", os.O_WRONLY | os.O_APPEND)

    def write(self, records: bytes, log_end_offset: int) -> None:
        assert len(records) < 128 * 1024  # one FUSE write (max_write), so one append
        assert os.write(self.fd, records) == len(records)
        leo = int(os.getxattr(self.part, "user.kafka.logEndOffset"))
        assert leo == log_end_offset, f"kfs's log end offset {leo}, the broker's {log_end_offset}"

    def close_file(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# -- comparing ----------------------------------------------------------------------------------

def compared_files(partition_dir: Path) -> list[str]:
    return sorted(p.name for p in partition_dir.iterdir()
                  if p.suffix in KINDS or p.name == "leader-epoch-checkpoint")


def describe(path: Path) -> str:
    """A readable form of an index file, for a failure message."""
    data = path.read_bytes()
    if path.suffix == ".index":
        return str(list(struct.iter_unpack(">ii", data)))
    if path.suffix == ".timeindex":
        return str(list(struct.iter_unpack(">qi", data)))
    if path.suffix == ".log":
        return str([(b.base_offset, b.position, b.size_in_bytes, b.max_timestamp)
                    for b in iter_batches(data)][:50])
    return repr(data[:400])


def test_the_same_produce_requests_leave_the_same_bytes_as_the_broker(tmp_path, kafka_broker,
                                                                      mount):
    """``each``: every request is one write to ``append-batches``; ``grouped``: a producer's
    consecutive batches are one write (each still one request to the broker)."""
    rng = random.Random(20251125)
    broker_server = kafka_broker()
    broker_server.create_topic(TOPIC, 1, TOPIC_CONFIG)
    broker_dir = broker_server.log_dir / f"{TOPIC}-0"
    each = KfsSide(mount, tmp_path / "kfs-each")
    grouped = KfsSide(mount, tmp_path / "kfs-grouped")

    broker = Broker(broker_server.bootstrap)
    idempotent = broker.init_producer(None)
    txns = [broker.init_producer(f"same-txn-{i}") for i in range(3)]
    clock = [int(time.time() * 1000)]
    next_offset = written = 0
    counts = {"requests": 0, "commits": 0, "aborts": 0, "grouped writes": 0}
    groups: list[tuple[int, int]] = []  # (first, last offset) of each write of several batches

    def send(batches: list[bytes], producer: Producer | None) -> None:
        nonlocal next_offset, written
        first = next_offset
        for batch in batches:
            tid = producer.transactional_id if producer else None
            assert broker.produce(batch, tid) == next_offset
            next_offset += RecordBatch(batch).last_offset_delta + 1
            each.write(batch, next_offset)
            written += len(batch)
            counts["requests"] += 1
        grouped.write(b"".join(batches), next_offset)
        if len(batches) > 1:
            groups.append((first, next_offset - 1))
        counts["grouped writes"] += len(batches) > 1

    def end(producer: Producer, commit: bool) -> None:
        nonlocal next_offset
        broker.end_txn(producer, commit)
        deadline = time.monotonic() + DEADLINE_S
        while (marker := batch_at_offset(broker_dir, next_offset)) is None:
            assert time.monotonic() < deadline, "the coordinator's marker never reached the log"
            time.sleep(0.02)
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        assert marker == build_control_batch(next_offset, producer.producer_id, producer.epoch,
                                             kind, 0, timestamp_ms=RecordBatch(marker).max_timestamp,
                                             partition_leader_epoch=0)
        next_offset += 1
        for side in (each, grouped):  # kfs assigns the offset and stamps the leader epoch itself
            side.write(marker, next_offset)
        producer.in_txn = False
        counts["commits" if commit else "aborts"] += 1

    try:
        while written < TARGET_BYTES:
            choice = rng.random()
            if choice < 0.25:
                send(some_batches(rng, clock, None), None)
            elif choice < 0.45:
                send(some_batches(rng, clock, idempotent), idempotent)
            else:
                p = rng.choice(txns)
                if p.in_txn and rng.random() < 0.15:
                    end(p, commit=rng.random() < 0.6)
                    continue
                if not p.in_txn:
                    broker.add_partition(p)
                    p.in_txn = True
                send(some_batches(rng, clock, p), p)
        for p in txns[:2]:  # the third stays open across the shutdown
            if p.in_txn:
                end(p, commit=p is txns[0])
        if not txns[2].in_txn:
            broker.add_partition(txns[2])
            txns[2].in_txn = True
        send(some_batches(rng, clock, txns[2]), txns[2])
    finally:
        broker.conn.close()
        each.close_file()
        grouped.close_file()
    assert counts["commits"] and counts["aborts"] and counts["grouped writes"], counts

    broker_server.stop()  # a clean shutdown, as the clean unmounts
    mount.unmount(each.mount)
    mount.unmount(grouped.mount)

    names = compared_files(broker_dir)
    bases = [offset_from_file_name(n) for n in names if n.endswith(".log")]
    assert len(bases) >= 4, names  # rolled at least three times
    # the broker rolled between two batches of one grouped write at least once
    assert any(first < base <= last for base in bases for first, last in groups), (bases, groups)
    assert any(n.endswith(".txnindex") for n in names), names
    for side in (each, grouped):
        assert compared_files(side.dir) == names, side.dir
        different = [n for n in names
                     if (side.dir / n).read_bytes() != (broker_dir / n).read_bytes()]
        details = "".join(f"\n--- {n}\nbroker: {describe(broker_dir / n)}\nkfs:    "
                          f"{describe(side.dir / n)}" for n in different[:4])
        assert not different, (f"{side.dir.parent.name}: {len(different)} of {len(names)} files "
                               f"differ ({counts}):{details}")
