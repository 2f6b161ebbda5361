"""Transactions and producer state: control records, the ``.txnindex``, producer state and its
``.snapshot`` files, read_committed visibility. Bytes are checked against the examples of the
format reference, kafka-python's reader and the Kafka-written txn-0 fixture."""

from __future__ import annotations

import json
import os
import shutil
import stat
import struct
import subprocess
from types import SimpleNamespace

import pytest
from kafka.consumer.fetcher import Fetcher
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.structs import TopicPartition

from helpers.kfs import kfs_command, kfs_env
from helpers.paths import KAFKA_WRITTEN, REPO
from storage.errors import (
    CorruptIndexError,
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    ReadOnlyLogError,
    TransactionCoordinatorFencedError,
)
from storage.producer_state import (
    AppendOrigin,
    BatchMetadata,
    CompletedTxn,
    ProducerStateEntry,
    ProducerStateManager,
    _JavaHashMapOrder,
    decode_snapshot,
    encode_snapshot,
    read_snapshot,
    write_snapshot,
)
from storage.log_files import offset_from_file_name, producer_snapshot_file, transaction_index_file
from storage.read_committed import AbortedTxnFilter, collect_aborted_txns
from storage.records import RecordBatch, build_batch, iter_batches
from storage.records.control import (
    ControlRecordType,
    EndTransactionMarker,
    build_control_batch,
    decode_control_record_key,
    decode_end_txn_marker_value,
    encode_control_record_key,
    encode_end_txn_marker_value,
    end_transaction_marker,
)
from storage.transaction_index import AbortedTxn, TransactionIndex, TxnIndexSearchResult

FIXTURES = KAFKA_WRITTEN
TXN_FIXTURE = FIXTURES / "txn-0"
needs_fixture = pytest.mark.needs_fixture("kafka-written/txn-0", "kafka-written/txn-0.expected.jsonl")


def fixture_batches():
    """(segment base offset, batch bytes, RecordBatch) of every batch of txn-0, in order."""
    out = []
    for path in sorted(TXN_FIXTURE.glob("*.log")):
        data = path.read_bytes()
        for batch in iter_batches(data):
            out.append((offset_from_file_name(path.name), data[batch.position:batch.position + batch.size_in_bytes],
                        batch))
    return out


# -- control records --------------------------------------------------------------------------

def test_control_key_round_trip_for_every_type():
    for control_type in ControlRecordType:
        if control_type is ControlRecordType.UNKNOWN:
            continue
        key = encode_control_record_key(control_type)
        assert key == struct.pack(">hh", 0, int(control_type))
        decoded = decode_control_record_key(key)
        assert (decoded.version, decoded.type_id, decoded.type) == (0, control_type, control_type)


def test_control_key_unknown_type_and_later_versions_decode():
    decoded = decode_control_record_key(struct.pack(">hh", 3, 42) + b"extra")
    assert decoded.version == 3 and decoded.type_id == 42
    assert decoded.type is ControlRecordType.UNKNOWN
    assert decode_control_record_key(struct.pack(">hh", 0, -7)).type is ControlRecordType.UNKNOWN
    assert decode_control_record_key(struct.pack(">hh", 0, 2)).type is ControlRecordType.LEADER_CHANGE


@pytest.mark.parametrize("key", [None, b"", b"\x00\x00\x00", struct.pack(">hh", -1, 0)])
def test_control_key_invalid(key):
    with pytest.raises(InvalidRecordError):
        decode_control_record_key(key)


def test_control_key_cannot_encode_unknown():
    with pytest.raises(ValueError):
        encode_control_record_key(ControlRecordType.UNKNOWN)


def test_control_key_errors_are_kafkas():
    """ControlRecordType.parse's messages, which a dump or a consumer reports."""
    with pytest.raises(InvalidRecordError, match=r"^Invalid value size found for end control "
                       r"record key\. Must have at least 4 bytes, but found only 3$"):
        decode_control_record_key(b"\x00\x00\x00")
    with pytest.raises(InvalidRecordError, match=r"at least 4 bytes, but found only null$"):
        decode_control_record_key(None)
    with pytest.raises(InvalidRecordError, match=r"^Invalid version found for control record: "
                       r"-1\. May indicate data corruption$"):
        decode_control_record_key(struct.pack(">hh", -1, 1))
    with pytest.raises(ValueError, match=r"^Cannot serialize UNKNOWN control record type$"):
        encode_control_record_key(ControlRecordType.UNKNOWN)
    with pytest.raises(ValueError, match=r"^control record key field out of range: "):
        encode_control_record_key(ControlRecordType.COMMIT, version=1 << 15)


def test_marker_value_round_trip_and_leniency():
    assert encode_end_txn_marker_value(7) == bytes.fromhex("000000000007")
    assert decode_end_txn_marker_value(bytes.fromhex("000000000007")) == (0, 7)
    assert decode_end_txn_marker_value(bytes.fromhex("0001ffffffff") + b"more") == (1, -1)
    for bad in (None, b"\x00" * 5, bytes.fromhex("ffff00000007")):
        with pytest.raises(InvalidRecordError):
            decode_end_txn_marker_value(bad)
    with pytest.raises(ValueError):
        encode_end_txn_marker_value(2**31)


def test_marker_value_errors_are_kafkas():
    """EndTransactionMarker.deserializeValue's messages."""
    with pytest.raises(InvalidRecordError, match=r"^Invalid value size found for end transaction "
                       r"marker\. Must have at least 6 bytes, but found only 5$"):
        decode_end_txn_marker_value(b"\x00" * 5)
    with pytest.raises(InvalidRecordError, match=r"^Invalid version found for end transaction "
                       r"marker: -1\. May indicate data corruption$"):
        decode_end_txn_marker_value(bytes.fromhex("ffff00000007"))
    with pytest.raises(ValueError, match=r"^end transaction marker field out of range: "):
        encode_end_txn_marker_value(2**31)


def test_control_batch_matches_reference_example():
    # format reference §2.8: COMMIT, offset 5, pid 1000, epoch 0, coordinatorEpoch 0
    expected = bytes.fromhex(
        "0000000000000005 00000042 00000000 02 a1ac499f 0030 00000000 0000018bcfe56800"
        "0000018bcfe56800 00000000000003e8 0000 ffffffff 00000001 20 00 00 00 08 00000001 0c"
        "000000000000 00".replace(" ", ""))
    built = build_control_batch(5, 1000, 0, ControlRecordType.COMMIT, 0, timestamp_ms=1700000000000,
                                partition_leader_epoch=0)
    assert built == expected
    assert len(built) == 78
    # coordinatorEpoch 0 when not given (the Spark writer's markers)
    assert build_control_batch(5, 1000, 0, ControlRecordType.COMMIT, timestamp_ms=1700000000000,
                               partition_leader_epoch=0) == expected


@needs_fixture
def test_control_batches_rebuilt_byte_identical_from_fixture():
    controls = [(raw, b) for _, raw, b in fixture_batches() if b.is_control_batch]
    assert len(controls) == 4
    for raw, batch in controls:
        marker = end_transaction_marker(batch)
        rebuilt = build_control_batch(
            batch.base_offset, batch.producer_id, batch.producer_epoch, marker.control_type,
            marker.coordinator_epoch, timestamp_ms=batch.max_timestamp,
            partition_leader_epoch=batch.partition_leader_epoch)
        assert rebuilt == raw
    markers = [(b.base_offset, end_transaction_marker(b)) for _, b in controls]
    assert markers == [
        (153, EndTransactionMarker(ControlRecordType.COMMIT, 7)),
        (262, EndTransactionMarker(ControlRecordType.ABORT, 7)),
        (267, EndTransactionMarker(ControlRecordType.COMMIT, 7)),
        (368, EndTransactionMarker(ControlRecordType.COMMIT, 7)),
    ]


@pytest.mark.parametrize("marker", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_control_batch_read_by_kafka_python(marker):
    built = build_control_batch(123, 4242, 3, marker, coordinator_epoch=9,
                                timestamp_ms=1700000000123, partition_leader_epoch=5)
    oracle = KafkaPythonBatch(bytearray(built))
    assert oracle.validate_crc()
    assert oracle.is_control_batch and oracle.is_transactional
    assert (oracle.base_offset, oracle.producer_id, oracle.producer_epoch,
            oracle.base_sequence) == (123, 4242, 3, -1)
    (record,) = list(oracle)
    assert (record.version, record.type) == (0, int(marker))
    assert record.value == encode_end_txn_marker_value(9)
    assert record.timestamp == 1700000000123
    ours = RecordBatch(built)
    ours.ensure_valid()
    assert end_transaction_marker(ours) == (marker, 9)


def test_control_batch_rejects_non_marker_types():
    with pytest.raises(ValueError, match=r"^Invalid control record type for end transaction "
                       r"marker: LEADER_CHANGE$"):
        build_control_batch(0, 1, 0, ControlRecordType.LEADER_CHANGE, timestamp_ms=0)


def test_end_transaction_marker_rejects_other_batches():
    data_batch = RecordBatch(build_batch(0, [b"v"], timestamps=1, producer_id=1,
                                         producer_epoch=0, base_sequence=0, is_transactional=True))
    with pytest.raises(InvalidRecordError, match="not a control batch"):
        end_transaction_marker(data_batch)
    leader_change = RecordBatch(build_batch(
        0, [b"\x00\x00"], keys=[encode_control_record_key(ControlRecordType.LEADER_CHANGE)],
        timestamps=1, is_control=True))
    assert decode_control_record_key(leader_change.records()[0].key).type_id == 2
    with pytest.raises(InvalidRecordError, match="LEADER_CHANGE"):
        end_transaction_marker(leader_change)
    # an empty control batch, as the cleaner can leave one
    empty = bytearray(build_control_batch(0, 1, 0, ControlRecordType.ABORT, timestamp_ms=1))
    header = RecordBatch(empty)
    empty = empty[:61]
    struct.pack_into(">i", empty, 8, 61 - 12)
    struct.pack_into(">i", empty, 57, 0)
    assert header.records_count == 1 and RecordBatch(bytes(empty)).records_count == 0
    with pytest.raises(InvalidRecordError, match="no record"):
        end_transaction_marker(RecordBatch(bytes(empty)))


# -- transaction index ------------------------------------------------------------------------

def txn_index(tmp_path, base=0):
    return TransactionIndex(transaction_index_file(tmp_path, base))


def test_aborted_txn_entry_matches_reference_example():
    entry = AbortedTxn(1000, 10, 20, 21)
    assert entry.to_bytes() == bytes.fromhex(
        "0000 00000000000003e8 000000000000000a 0000000000000014 0000000000000015".replace(" ", ""))
    assert AbortedTxn.from_bytes(entry.to_bytes()) == entry
    assert AbortedTxn.SIZE == 34


def test_txn_index_created_lazily_and_appends(tmp_path):
    index = txn_index(tmp_path, 100)
    assert index.start_offset == 100
    assert index.all_aborted_txns() == []
    index.flush()
    index.close()
    assert not index.path.exists()
    txns = [AbortedTxn(1, 90, 100, 95), AbortedTxn(2, 101, 110, 111), AbortedTxn(1, 112, 120, 121)]
    for txn in txns:
        index.append(txn)
    index.flush()
    assert index.path.read_bytes() == b"".join(t.to_bytes() for t in txns)
    assert index.all_aborted_txns() == txns
    index.close()
    assert TransactionIndex(index.path).all_aborted_txns() == txns


def test_txn_index_last_offsets_must_increase_across_reopen(tmp_path):
    index = txn_index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    with pytest.raises(ValueError, match="must increase"):
        index.append(AbortedTxn(2, 5, 10, 11))
    index.close()
    reopened = TransactionIndex(index.path)
    before = index.path.read_bytes()
    with pytest.raises(ValueError, match="must increase"):
        reopened.append(AbortedTxn(2, 5, 9, 11))
    assert index.path.read_bytes() == before
    reopened.append(AbortedTxn(2, 5, 11, 12))
    assert [t.last_offset for t in reopened.all_aborted_txns()] == [10, 11]


def test_txn_index_collect_aborted_txns(tmp_path):
    index = txn_index(tmp_path)
    a = AbortedTxn(1, 0, 10, 11)
    b = AbortedTxn(2, 5, 20, 5)
    c = AbortedTxn(3, 25, 30, 40)
    for txn in (a, b, c):
        index.append(txn)
    assert index.collect_aborted_txns(0, 5) == TxnIndexSearchResult([a], True)
    # b's LSO (5) is below the bound: the search goes on through c, whose LSO ends it
    assert index.collect_aborted_txns(11, 26) == TxnIndexSearchResult([b, c], True)
    assert index.collect_aborted_txns(21, 25) == TxnIndexSearchResult([], True)
    assert index.collect_aborted_txns(31, 100) == TxnIndexSearchResult([], False)
    assert index.collect_aborted_txns(0, 100) == TxnIndexSearchResult([a, b, c], False)


@pytest.mark.parametrize("fetch, upper, expected, complete", [
    (10, 35, "abcd", True),  # from an abort marker's own offset: that transaction is in
    (11, 35, "bcd", True),  # one past it: it is not
    (0, 32, "abc", True),  # up to a transaction's first offset: it is not
    (0, 33, "abcd", True),
    (20, 41, "cd", False),  # no entry's LSO reaches 41: later segments may add some
    (20, 40, "cd", True),  # d's LSO is the bound itself: complete
])
def test_txn_index_collect_aborted_txns_at_the_range_bounds(tmp_path, fetch, upper, expected,
                                                             complete):
    """``collectAbortedTxns`` over [fetch, upper): an entry overlaps when its last offset is
    >= fetch and its first offset < upper; the search is complete once an entry's LSO is >=
    upper (TransactionIndexTest's cases, and the boundaries between them)."""
    index = txn_index(tmp_path)
    txns = dict(a=AbortedTxn(0, 0, 10, 11), b=AbortedTxn(1, 5, 15, 13),
                c=AbortedTxn(2, 18, 35, 25), d=AbortedTxn(3, 32, 50, 40))
    for txn in txns.values():
        index.append(txn)
    assert index.collect_aborted_txns(fetch, upper) == TxnIndexSearchResult(
        [txns[k] for k in expected], complete)


def test_txn_index_refusals_say_what_and_where(tmp_path):
    index = txn_index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    with pytest.raises(ValueError) as e:
        index.append(AbortedTxn(2, 5, 10, 11))
    assert str(e.value) == ("The last offset of appended transactions must increase "
                            f"sequentially, but 10 is not greater than current last offset 10 "
                            f"of index {index.path.absolute()}")
    with pytest.raises(ValueError, match=r"^aborted transaction field out of range: "):
        AbortedTxn(2**63, 0, 0, 0).to_bytes()
    read_only = TransactionIndex(index.path, writable=False)
    with pytest.raises(ReadOnlyLogError, match=f"^transaction index {index.path} is read-only$"):
        read_only.reset()
    assert repr(index) == f"TransactionIndex({str(index.path)!r}, start_offset=0)"


def test_txn_index_last_offset_after_a_truncation(tmp_path):
    """After ``truncateTo`` the entries kept set the last offset an append must exceed; with
    none kept, any append goes."""
    index = txn_index(tmp_path)
    for txn in (AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 12, 20, 21)):
        index.append(txn)
    index.truncate_to(15)
    with pytest.raises(ValueError, match="must increase"):
        index.append(AbortedTxn(3, 5, 10, 11))
    index.truncate_to(0)
    index.append(AbortedTxn(3, 0, 1, 2))
    assert index.all_aborted_txns() == [AbortedTxn(3, 0, 1, 2)]


def test_txn_index_short_write_leaves_no_partial_entry(tmp_path, monkeypatch):
    """A write that stores part of an entry (a full disk) is cut back to the entries before
    it and reported; the index goes on from there."""
    from storage import disk_calls

    index = txn_index(tmp_path)
    index.append(AbortedTxn(1, 0, 10, 11))
    real = os.pwrite
    monkeypatch.setattr(disk_calls, "pwrite", lambda fd, data, at: real(fd, data[:20], at))
    with pytest.raises(OSError, match=f"^short write to transaction index {index.path}$"):
        index.append(AbortedTxn(2, 12, 20, 21))
    assert index.path.stat().st_size == AbortedTxn.SIZE
    monkeypatch.setattr(disk_calls, "pwrite", real)
    index.append(AbortedTxn(2, 12, 20, 21))
    assert [t.producer_id for t in index.all_aborted_txns()] == [1, 2]


def test_txn_index_file_is_made_by_the_first_append_only(tmp_path):
    """TransactionIndexTest's "do not create file until needed": opening, reset and flush make
    no file; the first append makes it, rw-r--r-- as Kafka's files (less the umask)."""
    index = txn_index(tmp_path, 5)
    index.reset()
    index.flush()
    assert not index.path.exists()
    index.append(AbortedTxn(1, 5, 6, 7))
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(index.path.stat().st_mode) == 0o644 & ~umask


def test_txn_index_start_offset_given_or_from_its_name(tmp_path):
    """TransactionIndexTest's sanity check: the same file opened with a later start offset
    holds entries below it."""
    index = txn_index(tmp_path, 0)
    index.append(AbortedTxn(1, 0, 50, 51))
    assert TransactionIndex(index.path).start_offset == 0
    later = TransactionIndex(index.path, start_offset=100)
    assert later.start_offset == 100
    with pytest.raises(CorruptIndexError, match="less than start offset 100"):
        later.sanity_check()


def test_read_only_txn_index_reads_through_its_source(tmp_path):
    """A read-only index of a segment read elsewhere (an object store) reads its bytes from
    the segment's source, asked for by the index's path."""
    from storage.segment_source import IndexContents

    entry = AbortedTxn(7, 1, 2, 3)
    asked = []

    class Source:
        def read_index(self, path):
            asked.append(path)
            return IndexContents(entry.to_bytes(), AbortedTxn.SIZE)

    path = transaction_index_file(tmp_path, 0)
    index = TransactionIndex(path, writable=False, source=Source())
    assert index.all_aborted_txns() == [entry] and asked == [path]
    assert not path.exists()


def test_collect_aborted_txns_stops_at_the_first_complete_index(tmp_path):
    """``UnifiedLog.collectAbortedTransactions``: segment after segment until one index's
    search is complete; later indexes are not read."""
    first = txn_index(tmp_path, 0)
    first.append(AbortedTxn(1, 0, 10, 30))  # its LSO (30) reaches the bound: complete

    class Unread:
        def collect_aborted_txns(self, *_):
            raise AssertionError("a later index was read")

    assert collect_aborted_txns([first, Unread()], 0, 20) == [AbortedTxn(1, 0, 10, 30)]
    second = txn_index(tmp_path, 40)
    second.append(AbortedTxn(2, 41, 50, 51))
    assert collect_aborted_txns([first, second], 0, 45) == [AbortedTxn(1, 0, 10, 30),
                                                             AbortedTxn(2, 41, 50, 51)]


def test_only_a_transactional_data_batch_is_aborted():
    """A producer's non-transactional batch, or its ABORT marker, inside its aborted span is
    not an aborted data batch."""
    flt = AbortedTxnFilter([AbortedTxn(7, 10, 20, 21)])
    batch = lambda transactional, control: SimpleNamespace(  # noqa: E731
        producer_id=7, base_offset=15, is_transactional=transactional, is_control_batch=control)
    assert flt.is_aborted(batch(True, False))
    assert not flt.is_aborted(batch(False, False))
    assert not flt.is_aborted(batch(True, True)) and not flt.is_visible(batch(True, True))


def test_txn_index_truncate_reset_rename_delete(tmp_path):
    index = txn_index(tmp_path)
    txns = [AbortedTxn(1, 0, 10, 11), AbortedTxn(2, 5, 20, 21), AbortedTxn(3, 25, 30, 31)]
    for txn in txns:
        index.append(txn)
    index.truncate_to(31)
    assert index.all_aborted_txns() == txns
    index.truncate_to(20)
    assert index.all_aborted_txns() == txns[:1]
    assert index.path.stat().st_size == 34
    index.append(AbortedTxn(4, 12, 15, 16))  # 15 > 10: allowed again after the truncation
    index.rename_to(tmp_path / "x.txnindex.deleted")
    assert not transaction_index_file(tmp_path, 0).exists()
    assert [t.producer_id for t in index.all_aborted_txns()] == [1, 4]
    index.reset()
    assert index.all_aborted_txns() == [] and index.path.stat().st_size == 0
    index.append(AbortedTxn(5, 0, 1, 2))
    assert index.delete() is True
    assert not index.path.exists() and index.delete() is False
    # a rename before the file exists only changes the path
    lazy = txn_index(tmp_path, 7)
    lazy.rename_to(tmp_path / "moved.txnindex")
    lazy.append(AbortedTxn(1, 7, 8, 9))
    assert (tmp_path / "moved.txnindex").stat().st_size == 34


def test_txn_index_sanity_check(tmp_path):
    index = txn_index(tmp_path, 100)
    index.append(AbortedTxn(1, 50, 100, 101))
    index.sanity_check()
    index.append(AbortedTxn(1, 50, 101, 102))
    index.sanity_check()
    bad = TransactionIndex(tmp_path / "00000000000000000200.txnindex")
    bad.path.write_bytes(AbortedTxn(1, 50, 150, 151).to_bytes())
    with pytest.raises(CorruptIndexError, match="less than start offset 200"):
        bad.sanity_check()


def test_txn_index_unknown_version_and_torn_tail(tmp_path):
    path = transaction_index_file(tmp_path, 0)
    good = AbortedTxn(1, 0, 10, 11).to_bytes()
    path.write_bytes(good + good[:20])  # a torn second entry is ignored
    index = TransactionIndex(path)
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 10, 11)]
    index.append(AbortedTxn(2, 11, 12, 13))  # overwrites the torn bytes
    assert path.read_bytes() == good + AbortedTxn(2, 11, 12, 13).to_bytes()
    # version 1 (the high byte of the int16) is rejected
    path.write_bytes(b"\x01" + good[1:])
    with pytest.raises(CorruptIndexError, match="version 1"):
        TransactionIndex(path).all_aborted_txns()
    # the low byte is not part of the version Kafka reads
    path.write_bytes(b"\x00\x05" + good[2:])
    assert TransactionIndex(path).all_aborted_txns()[0].version == 0


def test_txn_index_read_only_changes_nothing(tmp_path):
    path = transaction_index_file(tmp_path, 0)
    index = TransactionIndex(path, writable=False)
    with pytest.raises(ReadOnlyLogError):
        index.append(AbortedTxn(1, 0, 1, 2))
    assert not path.exists()
    path.write_bytes(AbortedTxn(1, 0, 1, 2).to_bytes())
    for mutate in (lambda: index.truncate_to(0), index.reset, index.delete,
                   lambda: index.rename_to(tmp_path / "y")):
        with pytest.raises(ReadOnlyLogError):
            mutate()
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 1, 2)]


@needs_fixture
def test_fixture_txn_index_reads(tmp_path):
    index = TransactionIndex(TXN_FIXTURE / "00000000000000000184.txnindex", writable=False)
    assert index.all_aborted_txns() == [AbortedTxn(2000, 189, 262, 184)]
    index.sanity_check()
    assert index.collect_aborted_txns(190, 200) == ([AbortedTxn(2000, 189, 262, 184)], False)
    assert index.collect_aborted_txns(263, 300) == ([], False)


# -- producer state ---------------------------------------------------------------------------

NOW = 1700000000000


def data_batch(offset, pid, epoch, seq, count=1, ts=NOW, txn=True):
    return RecordBatch(build_batch(offset, [b"v"] * count, timestamps=ts, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq, is_transactional=txn))


def marker_batch(offset, pid, epoch, marker, coordinator_epoch=0, ts=NOW):
    return RecordBatch(build_control_batch(offset, pid, epoch, marker, coordinator_epoch,
                                           timestamp_ms=ts))


ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def test_batch_metadata_and_entry_bookkeeping():
    assert BatchMetadata(4, 14, 4, NOW).first_seq == 0
    assert BatchMetadata(4, 14, 4, NOW).first_offset == 10
    assert BatchMetadata(2, 14, 4, NOW).first_seq == 2**31 - 2  # MAX-1, MAX, 0, 1, 2
    entry = ProducerStateEntry(7)
    assert (entry.last_seq, entry.last_data_offset, entry.last_offset_delta) == (-1, -1, 0)
    for i in range(7):
        entry.add_batch(0, i, 100 + i, 0, NOW + i)
    assert len(entry.batch_metadata) == 5 and entry.first_seq == 2 and entry.last_seq == 6
    assert entry.last_timestamp == NOW + 6
    duplicate = data_batch(0, 7, 0, 4)
    assert entry.find_duplicate_batch(duplicate) == BatchMetadata(4, 104, 0, NOW + 4)
    assert entry.find_duplicate_batch(data_batch(0, 7, 1, 4)) is None
    entry.add_batch(1, 0, 200, 0, NOW)  # a new epoch drops the older epoch's batches
    assert list(entry.batch_metadata) == [BatchMetadata(0, 200, 0, NOW)]


def test_transaction_lifecycle_and_stable_offsets(tmp_path):
    psm = ProducerStateManager(tmp_path)
    assert psm.apply_batch(data_batch(0, 1, 0, 0, count=3)) is None       # pid 1 opens at 0
    assert psm.apply_batch(data_batch(3, 2, 0, 0, count=2)) is None       # pid 2 opens at 3
    assert psm.apply_batch(data_batch(5, 3, 0, 0, txn=False)) is None     # idempotent only
    assert psm.first_unstable_offset() == 0 and psm.first_undecided_offset() == 0
    assert [t.first_offset for t in psm.ongoing_txns] == [0, 3]
    assert psm.last_stable_offset(high_watermark=6) == 0
    assert psm.last_stable_offset(high_watermark=6, log_start_offset=2) == 2
    index = TransactionIndex(transaction_index_file(tmp_path, 0))
    completed = psm.apply_batch(marker_batch(6, 1, 0, ABORT, coordinator_epoch=3), index)
    assert completed == CompletedTxn(1, 0, 6, True)
    # LSO stored: pid 2's transaction is still open at 3
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 6, 3)]
    entry = psm.last_entry(1)
    assert (entry.current_txn_first_offset, entry.coordinator_epoch, entry.last_seq,
            entry.last_data_offset) == (None, 3, 2, 2)
    # the aborted transaction stays unstable until the high watermark passes its marker
    assert psm.first_unstable_offset() == 0
    psm.on_high_watermark_updated(7)
    assert psm.first_unstable_offset() == 3 and psm.last_stable_offset(7) == 3
    assert psm.apply_batch(marker_batch(7, 2, 0, COMMIT), index) == CompletedTxn(2, 3, 7, False)
    assert len(index.all_aborted_txns()) == 1  # commits are not indexed
    assert psm.last_stable_offset(8) == 3
    psm.on_high_watermark_updated(8)
    assert psm.first_unstable_offset() is None and psm.last_stable_offset(8) == 8
    # a marker with no open transaction completes nothing
    assert psm.apply_batch(marker_batch(8, 2, 0, ABORT)) is None
    assert psm.map_end_offset == 9
    with pytest.raises(ValueError, match="not started"):
        psm.complete_txn(CompletedTxn(2, 3, 7, False))


def test_lso_of_completed_txn_is_marker_plus_one_without_other_open_txns(tmp_path):
    psm = ProducerStateManager(tmp_path)
    psm.apply_batch(data_batch(10, 1, 0, 0, count=2))
    info = psm.prepare_update(1, AppendOrigin.REPLICATION)
    completed = info.append(marker_batch(12, 1, 0, ABORT))
    psm.update(info)
    assert psm.aborted_txn(completed) == AbortedTxn(1, 10, 12, 13)
    psm.complete_txn(completed)


def test_client_validation(tmp_path):
    psm = ProducerStateManager(tmp_path)
    psm.apply_batch(data_batch(0, 1, 2, 0, count=2), origin=AppendOrigin.CLIENT)
    def client():
        return psm.prepare_update(1, AppendOrigin.CLIENT)

    with pytest.raises(OutOfOrderSequenceError, match="Out of order"):
        client().append(data_batch(2, 1, 2, 5))
    with pytest.raises(OutOfOrderSequenceError, match="new epoch"):
        client().append(data_batch(2, 1, 3, 1))
    with pytest.raises(InvalidProducerEpochError):
        client().append(data_batch(2, 1, 1, 2))
    with pytest.raises(InvalidTxnStateError):
        client().append(data_batch(2, 1, 2, 2, txn=False))
    assert psm.last_entry(1).last_seq == 1  # nothing applied
    info = client()
    info.append(data_batch(2, 1, 2, 2))
    info.append(data_batch(3, 1, 2, 3))
    psm.update(info)
    assert psm.last_entry(1).last_seq == 3
    coordinator = psm.prepare_update(1, AppendOrigin.COORDINATOR)
    coordinator.append(marker_batch(4, 1, 2, COMMIT, coordinator_epoch=5))
    psm.update(coordinator)
    with pytest.raises(TransactionCoordinatorFencedError):
        psm.prepare_update(1, AppendOrigin.COORDINATOR).append(
            marker_batch(5, 1, 2, COMMIT, coordinator_epoch=4))
    # replication takes whatever the leader wrote, older epochs included
    replica = psm.prepare_update(1, AppendOrigin.REPLICATION)
    replica.append(data_batch(5, 1, 1, 9, txn=False))
    psm.update(replica)
    assert psm.last_entry(1).producer_epoch == 1


def test_apply_append_groups_like_unified_log(tmp_path):
    """One append holding a marker and a later transaction of another producer: the LSO stored
    with the abort sees the transaction the same append opened."""
    batches = [data_batch(0, 1, 0, 0), marker_batch(1, 1, 0, ABORT), data_batch(2, 2, 0, 0)]
    grouped = ProducerStateManager(tmp_path / "a")
    index = TransactionIndex(transaction_index_file(tmp_path, 0))
    assert grouped.apply_append(batches, index) == [CompletedTxn(1, 0, 1, True)]
    assert index.all_aborted_txns() == [AbortedTxn(1, 0, 1, 2)]
    one_by_one = ProducerStateManager(tmp_path / "b")
    completed = [one_by_one.apply_batch(b) for b in batches]
    assert completed[1] == CompletedTxn(1, 0, 1, True)
    assert grouped.snapshot_entries() == one_by_one.snapshot_entries()
    assert grouped.map_end_offset == one_by_one.map_end_offset == 3
    with pytest.raises(InvalidTxnStateError):  # checked before anything changes
        grouped.apply_append([data_batch(3, 3, 0, 0), data_batch(4, 2, 0, 1, txn=False)])
    assert grouped.last_entry(3) is None and grouped.map_end_offset == 3


# -- snapshot files ---------------------------------------------------------------------------

REFERENCE_SNAPSHOT = bytes.fromhex(
    "0001 64c47816 00000001 00000000000003e8 0000 00000004 0000000000000004 00000004"
    "0000018bcfe56800 ffffffff ffffffffffffffff".replace(" ", ""))


def test_snapshot_matches_reference_example():
    entry = ProducerStateEntry(1000, 0, -1, NOW, None, [BatchMetadata(4, 4, 4, NOW)])
    assert encode_snapshot([entry]) == REFERENCE_SNAPSHOT
    (decoded,) = decode_snapshot(REFERENCE_SNAPSHOT)
    assert decoded == entry and decoded.first_seq == 0


def test_snapshot_round_trip_without_batches_and_with_txn(tmp_path):
    entries = [ProducerStateEntry(5, 3, 7, NOW, 42),
               ProducerStateEntry(-5, 0, -1, 1, None, [BatchMetadata(2**31 - 1, 2**62, 0, 1)])]
    path = producer_snapshot_file(tmp_path, 123)
    assert path.name == "00000000000000000123.snapshot"
    write_snapshot(path, entries)
    assert read_snapshot(path) == entries
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left
    no_batches = read_snapshot(path)[0]
    assert no_batches.is_empty and no_batches.snapshot_fields()[2:5] == (-1, -1, 0)
    write_snapshot(path, [])
    assert path.read_bytes()[6:] == b"\x00\x00\x00\x00" and read_snapshot(path) == []


@pytest.mark.parametrize("mangle, message", [
    (lambda b: b[:5], "schema validation"),
    (lambda b: b[:-1], "schema validation"),
    (lambda b: b + b"\x00", "schema validation"),
    (lambda b: b[:6] + b"\xff\xff\xff\xff" + b[10:], "schema validation"),
    (lambda b: b"\x00\x02" + b[2:], "unknown file version 2"),
    (lambda b: b[:-1] + bytes([b[-1] ^ 1]), "CRC is no longer valid"),
])
def test_corrupt_snapshots_raise(tmp_path, mangle, message):
    path = tmp_path / "00000000000000000005.snapshot"
    path.write_bytes(mangle(REFERENCE_SNAPSHOT))
    with pytest.raises(CorruptSnapshotError, match=message) as info:
        read_snapshot(path)
    assert str(path) in str(info.value)


def test_write_snapshot_leaves_old_file_on_bad_input(tmp_path):
    path = producer_snapshot_file(tmp_path, 9)
    path.write_bytes(REFERENCE_SNAPSHOT)
    with pytest.raises(ValueError):
        write_snapshot(path, [ProducerStateEntry(2**63)])
    assert path.read_bytes() == REFERENCE_SNAPSHOT
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_java_hash_map_order():
    # Long.hashCode spread, 16 buckets: 2000 -> 0, 1000 and 3000 -> 8 (insertion order kept)
    order = _JavaHashMapOrder()
    keys = {}
    for pid in (1000, 3000, 2000):
        keys[pid] = None
        order.on_insert(pid, keys)
    assert order.order(keys) == [2000, 1000, 3000]
    # 13 entries grow the table to 32: 16 and 48 then land in bucket 16
    keys = {}
    for pid in [48, 16] + list(range(1, 12)):
        keys[pid] = None
        order.on_insert(pid, keys)
    assert order.capacity == 32
    assert order.order(keys) == list(range(1, 12)) + [48, 16]


def test_snapshot_lifecycle(tmp_path):
    psm = ProducerStateManager(tmp_path)
    assert psm.take_snapshot() is None  # nothing past offset 0 yet
    psm.apply_batch(data_batch(0, 1, 0, 0, count=5))
    assert psm.take_snapshot() == producer_snapshot_file(tmp_path, 5)
    assert psm.take_snapshot() is None  # not a new offset
    psm.apply_batch(data_batch(5, 1, 0, 5, count=5))
    psm.take_snapshot()
    psm.update_map_end_offset(20)
    psm.take_snapshot()
    assert psm.snapshot_offsets == [5, 10, 20] and psm.latest_snapshot_offset() == 20
    psm.delete_snapshots_above(10)
    psm.delete_snapshots_before(10)
    assert psm.snapshot_offsets == [10]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["00000000000000000010.snapshot"]
    marked = psm.remove_and_mark_snapshot_for_deletion(10)
    assert marked.name == "00000000000000000010.snapshot.deleted" and marked.exists()
    assert psm.latest_snapshot_offset() is None


def test_truncate_and_reload_skips_corrupt_and_expired(tmp_path):
    old = ProducerStateEntry(1, 0, -1, NOW - 86_400_000, None, [BatchMetadata(0, 0, 0, 0)])
    open_txn = ProducerStateEntry(2, 0, -1, NOW - 86_400_000, 3, [BatchMetadata(0, 3, 0, 0)])
    fresh = ProducerStateEntry(3, 0, -1, NOW, None, [BatchMetadata(0, 4, 0, NOW)])
    write_snapshot(producer_snapshot_file(tmp_path, 5), [old, open_txn, fresh])
    producer_snapshot_file(tmp_path, 8).write_bytes(b"\x00\x01garbage")
    write_snapshot(producer_snapshot_file(tmp_path, 20), [fresh])  # beyond the log end
    psm = ProducerStateManager(tmp_path)
    psm.truncate_and_reload(0, 10, current_time_ms=NOW)
    assert psm.snapshot_offsets == [5]  # 20 removed as out of range, 8 as corrupt
    assert not producer_snapshot_file(tmp_path, 8).exists()
    assert psm.map_end_offset == 5
    assert sorted(psm.active_producers) == [2, 3]  # 1 expired; 2 has an open transaction
    assert psm.first_unstable_offset() == 3
    psm.truncate_and_reload(5, 10, current_time_ms=NOW)  # snapshot at the log start goes
    assert psm.snapshot_offsets == [] and psm.map_end_offset == 5 and not psm.active_producers


def test_remove_stray_snapshots(tmp_path):
    for offset in (0, 3, 5, 7, 12, 15):
        write_snapshot(producer_snapshot_file(tmp_path, offset), [])
    psm = ProducerStateManager(tmp_path)
    psm.remove_stray_snapshots([0, 5, 10])
    assert psm.snapshot_offsets == [0, 5, 15]
    psm.remove_stray_snapshots([0, 5, 20])
    assert psm.snapshot_offsets == [0, 5]
    assert sorted(offset_from_file_name(p.name) for p in tmp_path.iterdir()) == [0, 5]


# -- the txn-0 fixture --------------------------------------------------------------------------

def replay_fixture(out_dir):
    """Replay txn-0 as Kafka wrote it: batch by batch (LogSegment.updateProducerState), a
    snapshot at each roll and at the end, aborted txns in the receiving segment's index."""
    psm = ProducerStateManager(out_dir)
    index = None
    for base, _, batch in fixture_batches():
        if index is None or index.start_offset != base:
            if base:
                psm.update_map_end_offset(max(psm.map_end_offset, base))
                psm.take_snapshot()
            index = TransactionIndex(transaction_index_file(out_dir, base))
        psm.apply_batch(batch, index)
        psm.on_high_watermark_updated(batch.next_offset)
    psm.take_snapshot()
    return psm


@needs_fixture
def test_fixture_replay_writes_kafkas_txnindex_and_snapshots(tmp_path):
    psm = replay_fixture(tmp_path)
    ours = sorted(p.name for p in tmp_path.iterdir())
    kafkas = sorted(p.name for p in TXN_FIXTURE.iterdir() if p.suffix in (".snapshot", ".txnindex"))
    assert ours == kafkas
    for name in ours:
        assert (tmp_path / name).read_bytes() == (TXN_FIXTURE / name).read_bytes(), name
    assert TransactionIndex(tmp_path / "00000000000000000184.txnindex").all_aborted_txns() == [
        AbortedTxn(2000, 189, 262, 184)]
    assert psm.first_unstable_offset() is None and psm.map_end_offset == 396


@needs_fixture
def test_fixture_snapshots_read(tmp_path):
    entries = {offset_from_file_name(p.name): read_snapshot(p) for p in TXN_FIXTURE.glob("*.snapshot")}
    assert [e.snapshot_fields() for e in entries[90]] == [
        (1000, 0, 89, 89, 4, 1700000001383, -1, -1)]
    by_pid = {e.producer_id: e for e in entries[278]}
    assert sorted(by_pid) == [1000, 2000, 3000]
    # pid 2000's last marker is the ABORT at 262
    assert by_pid[2000].coordinator_epoch == 7 and by_pid[2000].current_txn_first_offset is None
    assert by_pid[2000].last_data_offset == 258 and by_pid[2000].last_timestamp == 1700000003873
    assert by_pid[1000].producer_epoch == 1 and by_pid[1000].first_seq == 0
    assert by_pid[3000].last_data_offset == 266


@needs_fixture
def test_fixture_reload_from_snapshot_then_replay(tmp_path):
    for path in TXN_FIXTURE.glob("*.snapshot"):
        shutil.copy(path, tmp_path)
    psm = ProducerStateManager(tmp_path)
    psm.truncate_and_reload(0, 278, current_time_ms=NOW)
    assert psm.map_end_offset == 278 and psm.snapshot_offsets == [90, 184, 278]
    assert psm.snapshot_entries() == read_snapshot(TXN_FIXTURE / "00000000000000000278.snapshot")
    for _, _, batch in fixture_batches():
        if batch.base_offset >= 278:
            psm.apply_batch(batch)
    psm.on_high_watermark_updated(396)
    assert encode_snapshot(psm.snapshot_entries()) == (
        TXN_FIXTURE / "00000000000000000396.snapshot").read_bytes()
    # grouped per segment, as UnifiedLog.loadProducersFromRecords replays, the state is the same
    grouped = ProducerStateManager(tmp_path / "grouped")
    segments = {}
    for base, _, batch in fixture_batches():
        segments.setdefault(base, []).append(batch)
    for batches in segments.values():
        grouped.apply_append(batches)
    assert ([e.snapshot_fields() for e in grouped.snapshot_entries()]
            == [e.snapshot_fields() for e in psm.snapshot_entries()])


@needs_fixture
def test_fixture_read_committed_matches_kafka_python_consumer():
    with open(FIXTURES / "txn-0.expected.jsonl") as f:
        rows = [json.loads(line) for line in f]
    expected = [r["offset"] for r in rows
                if not r["isControl"] and not (r["producerId"] == 2000 and 189 <= r["offset"] < 262)]
    indexes = [TransactionIndex(p, writable=False) for p in sorted(TXN_FIXTURE.glob("*.log"))
               for p in [p.with_suffix(".txnindex")]]
    batches = fixture_batches()
    for fetch_offset in (0, 150, 189, 200, 263):
        segment = max(i for i, idx in enumerate(indexes) if idx.start_offset <= fetch_offset)
        aborted = collect_aborted_txns(indexes[segment:], fetch_offset, 396)
        assert aborted == ([AbortedTxn(2000, 189, 262, 184)] if fetch_offset <= 262 else [])
        filt = AbortedTxnFilter(aborted)
        ours = [r.offset for _, _, b in batches if filt.is_visible(b)
                for r in b.records() if r.offset >= fetch_offset]
        assert ours == [o for o in expected if o >= fetch_offset]
        # kafka-python's read_committed fetch path over the same bytes
        raw = b"".join(data for _, data, b in batches if b.last_offset >= fetch_offset)
        aborted_wire = [type("T", (), {"producer_id": t.producer_id, "first_offset": t.first_offset})
                        for t in aborted]
        records = Fetcher.PartitionRecords(
            fetch_offset, TopicPartition("txn", 0), MemoryRecords(raw),
            isolation_level=IsolationLevel.READ_COMMITTED, aborted_transactions=aborted_wire)
        assert [r.offset for r in records.take()] == ours


@needs_fixture
def test_kfs_dump_of_a_kafka_snapshot_gives_kafka_dump_log_lines():
    """``kfs dump`` run on the producer snapshot Kafka wrote prints kafka-dump-log's lines
    (DumpLogSegments.dumpProducerIdSnapshot: one line per ProducerStateEntry, its last batch)."""
    path = TXN_FIXTURE / "00000000000000000184.snapshot"
    res = subprocess.run(kfs_command("dump", str(path)), cwd=REPO, env=kfs_env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    assert res.stdout.splitlines() == [
        f"Dumping {path}",
        "producerId: 2000 producerEpoch: 0 coordinatorEpoch: 7 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1700000002262 firstSequence: 34 lastSequence: 37 "
        "lastOffset: 152 offsetDelta: 3 timestamp: 1700000002262",
        "producerId: 1000 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: "
        "OptionalLong.empty lastTimestamp: 1700000002720 firstSequence: 136 lastSequence: 144 "
        "lastOffset: 183 offsetDelta: 8 timestamp: 1700000002720",
    ]
