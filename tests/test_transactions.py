"""Transactions and producer state: control records, the ``.txnindex``, producer state and its
``.snapshot`` files, read_committed visibility. Bytes are checked against the examples of the
format reference, kafka-python's reader and the Kafka-written txn-0 fixture."""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch

from storage.errors import CorruptIndexError, InvalidRecordError, ReadOnlyLogError
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

FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "kafka-written"
TXN_FIXTURE = FIXTURES / "txn-0"
needs_fixture = pytest.mark.skipif(not TXN_FIXTURE.is_dir(), reason=f"no fixture at {TXN_FIXTURE}")


def fixture_batches():
    """(segment base offset, batch bytes, RecordBatch) of every batch of txn-0, in order."""
    out = []
    for path in sorted(TXN_FIXTURE.glob("*.log")):
        data = path.read_bytes()
        for batch in iter_batches(data):
            out.append((int(path.name[:20]), data[batch.position:batch.position + batch.size_in_bytes],
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


def test_marker_value_round_trip_and_leniency():
    assert encode_end_txn_marker_value(7) == bytes.fromhex("000000000007")
    assert decode_end_txn_marker_value(bytes.fromhex("000000000007")) == (0, 7)
    assert decode_end_txn_marker_value(bytes.fromhex("0001ffffffff") + b"more") == (1, -1)
    for bad in (None, b"\x00" * 5, bytes.fromhex("ffff00000007")):
        with pytest.raises(InvalidRecordError):
            decode_end_txn_marker_value(bad)
    with pytest.raises(ValueError):
        encode_end_txn_marker_value(2**31)


def test_control_batch_matches_reference_example():
    # format reference §2.8: COMMIT, offset 5, pid 1000, epoch 0, coordinatorEpoch 0
    expected = bytes.fromhex(
        "0000000000000005 00000042 00000000 02 a1ac499f 0030 00000000 0000018bcfe56800"
        "0000018bcfe56800 00000000000003e8 0000 ffffffff 00000001 20 00 00 00 08 00000001 0c"
        "000000000000 00".replace(" ", ""))
    built = build_control_batch(5, 1000, 0, ControlRecordType.COMMIT, 0, 1700000000000,
                                partition_leader_epoch=0)
    assert built == expected
    assert len(built) == 78


@needs_fixture
def test_control_batches_rebuilt_byte_identical_from_fixture():
    controls = [(raw, b) for _, raw, b in fixture_batches() if b.is_control_batch]
    assert len(controls) == 4
    for raw, batch in controls:
        marker = end_transaction_marker(batch)
        rebuilt = build_control_batch(
            batch.base_offset, batch.producer_id, batch.producer_epoch, marker.control_type,
            marker.coordinator_epoch, batch.max_timestamp,
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
    with pytest.raises(ValueError):
        build_control_batch(0, 1, 0, ControlRecordType.LEADER_CHANGE)


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
    return TransactionIndex(tmp_path / f"{base:020d}.txnindex")


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
    assert not (tmp_path / f"{0:020d}.txnindex").exists()
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
    path = tmp_path / f"{0:020d}.txnindex"
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
    path = tmp_path / f"{0:020d}.txnindex"
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
