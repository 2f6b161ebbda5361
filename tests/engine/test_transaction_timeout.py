"""Transactions that always end and idempotent retries, at the log: Kafka's coordinator abort
of a transaction past ``transaction.timeout.ms`` (ABORT marker, epoch bumped, the zombie
fenced) and a leader's answer to a producer's retried batch (``findDuplicateBatch``)."""

import pytest

from storage import LogConfig, LogManager
from storage.errors import InvalidProducerEpochError, OutOfOrderSequenceError
from storage.log import Log
from storage.records import build_batch, iter_batches
from storage.records.control import ControlRecordType, end_transaction_marker

PID = 4242


def produce(log, seq, count=2, epoch=0, txn=False, pid=PID):
    return log.append_as_leader(build_batch(
        0, [b"s%d" % i for i in range(seq, seq + count)], producer_id=pid,
        producer_epoch=epoch, base_sequence=seq, is_transactional=txn))


def batches(log):
    return [b for s in log.segments.all() for b in iter_batches(s.read_at(0, s.size))]


def test_a_retried_batch_is_acknowledged_with_its_offsets_and_stored_once(tmp_path):
    (tmp_path / "t-0").mkdir()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig())
    sent = [produce(log, seq) for seq in range(0, 12, 2)]  # six batches: the last five kept
    assert sent[0] == (0, 1) and sent[-1] == (10, 11)
    for seq, offsets in zip(range(2, 12, 2), sent[1:]):
        assert produce(log, seq) == offsets  # a retry of any of the last five
    assert log.log_end_offset == 12 and len(batches(log)) == 6
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 0)  # older than the five retained: not a known retry
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 14)  # a gap: sequence 12 never came
    with pytest.raises(OutOfOrderSequenceError):
        produce(log, 10, count=1)  # overlaps a batch without matching its range
    assert log.log_end_offset == 12 and len(batches(log)) == 6
    assert produce(log, 12) == (12, 13)
    log.close()


def test_a_timed_out_transaction_is_aborted_and_its_producer_fenced(tmp_path):
    (tmp_path / "t-0").mkdir()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig())
    produce(log, 0, txn=True)
    produce(log, 2, txn=True)
    (txn,) = log.open_transactions()
    assert (txn.producer_id, txn.producer_epoch, txn.first_offset) == (PID, 0, 0)
    assert log.abort_timed_out_transactions(60_000, now=txn.start_ms + 60_000) == []
    assert log.last_stable_offset == 0
    assert log.abort_timed_out_transactions(60_000, now=txn.start_ms + 60_001) == [txn]
    assert log.open_transactions() == [] and log.last_stable_offset == log.log_end_offset == 5
    marker = batches(log)[-1]
    assert marker.is_control_batch and marker.producer_epoch == 1
    assert end_transaction_marker(marker).control_type == ControlRecordType.ABORT
    assert [(a.producer_id, a.first_offset, a.last_offset)
            for a in log.segments.active.txn_index.all_aborted_txns()] == [(PID, 0, 4)]
    with pytest.raises(InvalidProducerEpochError):
        produce(log, 4, txn=True)  # the zombie goes on with epoch 0
    assert log.log_end_offset == 5 and log.open_transactions() == []
    log.close()


def test_a_transaction_found_open_at_load_times_out_from_the_load(tmp_path):
    (tmp_path / "t-0").mkdir()
    log = Log(tmp_path / "t-0", "t", 0, LogConfig())
    produce(log, 0, txn=True)
    began = log.open_transactions()[0].start_ms
    log.close()
    mgr = LogManager(tmp_path)
    reopened = mgr.get("t-0")
    (txn,) = reopened.open_transactions()
    assert txn.start_ms >= began
    assert mgr.abort_timed_out_transactions(now=txn.start_ms) == {}
    aborted = mgr.abort_timed_out_transactions(
        now=txn.start_ms + mgr.config.transaction_timeout_ms + 1)
    assert [t.producer_id for t in aborted["t-0"]] == [PID]
    mgr.close()
