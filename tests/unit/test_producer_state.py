"""Producer state's boundaries (storage.producer_state), modelled on Kafka's
ProducerStateManagerTest (testBasicIdMapping, testProducerSequenceWrapAround,
testProducerSequenceInvalidWrapAround, testControlRecordBumpsProducerEpoch,
testTruncateAndReloadRemovesOutOfRangeSnapshots, testTruncateFullyAndStartAt,
testDeleteSnapshotsBefore, testLoadFromCorruptSnapshotFile, testRemoveExpiredPidsOnReload, ...):
sequences at their wrap, epochs and coordinator epochs at equality, the high watermark at a
marker's offset, each snapshot kept or deleted at the log start and end, the messages and log
lines Kafka's exceptions carry, and the Java HashMap order a snapshot's entries follow."""

import logging

import pytest

from storage.clock import FixedClock
from storage.errors import (
    CorruptSnapshotError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from storage.log_files import producer_snapshot_file
from storage.producer_state import (
    AppendOrigin,
    BatchMetadata,
    OpenTransaction,
    ProducerStateEntry,
    ProducerStateManager,
    _java_long_hash,
    _JavaHashMapOrder,
    decode_snapshot,
    encode_snapshot,
    list_snapshot_files,
    read_snapshot,
    write_snapshot,
)
from storage.records import RecordBatch, build_batch
from storage.records.control import ControlRecordType, build_control_batch

NOW = 1_700_000_000_000
INT32_MAX = 2**31 - 1
CLIENT, COORDINATOR, REPLICATION = AppendOrigin.CLIENT, AppendOrigin.COORDINATOR, AppendOrigin.REPLICATION
ABORT, COMMIT = ControlRecordType.ABORT, ControlRecordType.COMMIT


def data(offset, pid=1, epoch=0, seq=0, count=1, txn=False, ts=NOW):
    return RecordBatch(build_batch(offset, [b"v"] * count, timestamps=ts, producer_id=pid,
                                   producer_epoch=epoch, base_sequence=seq, is_transactional=txn))


def marker(offset, pid=1, epoch=0, kind=COMMIT, coordinator_epoch=0, ts=NOW):
    return RecordBatch(build_control_batch(offset, pid, epoch, kind, coordinator_epoch,
                                           timestamp_ms=ts))


def manager(log_dir, **kwargs):
    return ProducerStateManager(log_dir, clock=FixedClock(NOW), **kwargs)


def append(psm, batch, origin=CLIENT):
    """One append of one batch, as appendClientEntry / appendEndTxnMarker do."""
    info = psm.prepare_update(batch.producer_id, origin)
    completed = info.append(batch)
    psm.update(info)
    psm.update_map_end_offset(batch.last_offset + 1)
    if completed is not None:
        psm.complete_txn(completed)
    return completed


def snapshot_at(psm_dir, offset, entries=()):
    write_snapshot(producer_snapshot_file(psm_dir, offset), list(entries))


# -- sequences and epochs -----------------------------------------------------------------------

def test_a_new_epoch_starts_at_sequence_zero(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, epoch=0, seq=0))
    append(psm, data(1, epoch=0, seq=1))
    append(psm, data(2, epoch=1, seq=0))
    assert psm.last_entry(1).producer_epoch == 1 and psm.last_entry(1).last_seq == 0


def test_a_new_epoch_at_another_sequence_is_out_of_order_with_kafkas_message(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, epoch=0, seq=0))
    with pytest.raises(OutOfOrderSequenceError) as info:
        append(psm, data(7, epoch=1, seq=3))
    assert str(info.value) == (
        "Invalid sequence number for new epoch of producer 1 at offset 7: 1 (request epoch), "
        "3 (seq. number), 0 (current producer epoch)")


def test_a_gap_in_sequence_is_out_of_order_with_kafkas_message(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, seq=0, count=2))
    with pytest.raises(OutOfOrderSequenceError) as info:
        append(psm, data(2, seq=5))
    assert str(info.value) == (
        "Out of order sequence number for producer 1 at offset 2: 5 (incoming seq. number), "
        "1 (current end sequence number)")


def test_sequence_wraps_from_int32_max_to_zero(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(735, epoch=15, seq=INT32_MAX), REPLICATION)
    append(psm, data(1235, epoch=15, seq=0))
    entry = psm.last_entry(1)
    assert (entry.first_seq, entry.last_seq) == (INT32_MAX, 0)


def test_sequence_after_int32_max_other_than_zero_is_out_of_order(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(735, epoch=15, seq=INT32_MAX), REPLICATION)
    with pytest.raises(OutOfOrderSequenceError):
        append(psm, data(1235, epoch=15, seq=1))


def test_a_marker_bumping_the_epoch_in_the_same_append_resets_the_sequence(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, epoch=0, seq=0, count=3, txn=True))
    info = psm.prepare_update(1, CLIENT)
    info.append(marker(3, epoch=1, kind=ABORT))
    info.append(data(4, epoch=1, seq=0))
    with pytest.raises(OutOfOrderSequenceError):
        bumped = psm.prepare_update(1, CLIENT)
        bumped.append(marker(3, epoch=1, kind=ABORT))
        bumped.append(data(4, epoch=1, seq=5))
    psm.update(info)
    assert psm.last_entry(1).producer_epoch == 1 and psm.last_entry(1).last_seq == 0


def test_an_older_epoch_is_refused_from_a_client_with_kafkas_message(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, epoch=2))
    with pytest.raises(InvalidProducerEpochError) as info:
        append(psm, data(5, epoch=1, seq=1))
    assert str(info.value) == (
        "Epoch of producer 1 at offset 5 is 1, which is smaller than the last seen epoch 2")
    with pytest.raises(InvalidProducerEpochError, match="at offset 6 is 1"):
        append(psm, marker(6, epoch=1))


def test_an_older_epoch_is_logged_not_refused_on_replication(tmp_path, caplog):
    psm = manager(tmp_path)
    append(psm, data(0, epoch=2))
    with caplog.at_level(logging.WARNING, logger="storage.producer_state"):
        psm.apply_batch(data(5, epoch=1, seq=9))  # replication is the default origin
    assert caplog.messages == [
        "Epoch of producer 1 at offset 5 is 1, which is smaller than the last seen epoch 2"]
    assert psm.last_entry(1).producer_epoch == 1


def test_apply_batch_and_apply_append_check_the_origin_they_are_given(tmp_path):
    psm = manager(tmp_path)
    psm.apply_batch(data(0, seq=0), origin=CLIENT)
    with pytest.raises(OutOfOrderSequenceError):
        psm.apply_batch(data(1, seq=3), origin=CLIENT)
    with pytest.raises(OutOfOrderSequenceError):
        psm.apply_append([data(1, seq=3)], origin=CLIENT)
    psm.apply_append([data(1, epoch=0, seq=3)])  # replication accepts the gap
    assert psm.last_entry(1).last_seq == 3


def test_a_batch_without_producer_id_changes_only_the_map_end(tmp_path):
    psm = manager(tmp_path)
    assert psm.apply_batch(RecordBatch(build_batch(0, [b"v"]))) is None
    assert psm.map_end_offset == 1 and psm.is_empty()


def test_an_append_goes_on_past_a_batch_without_producer_id(tmp_path):
    psm = manager(tmp_path)
    psm.apply_append([RecordBatch(build_batch(0, [b"v"])), data(1, pid=7)])
    assert list(psm.active_producers) == [7] and psm.map_end_offset == 2


def test_append_takes_the_first_offset_it_is_given(tmp_path):
    psm = manager(tmp_path)
    info = psm.prepare_update(1, CLIENT)
    info.append(data(10, count=3, txn=True), first_offset=8)
    psm.update(info)
    assert psm.first_undecided_offset() == 8
    assert psm.last_entry(1).batch_metadata[-1] == BatchMetadata(2, 12, 4, NOW)


def test_a_non_transactional_write_in_a_transaction_says_where(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, txn=True))
    with pytest.raises(InvalidTxnStateError) as info:
        append(psm, data(1, seq=1))
    assert str(info.value) == "Expected transactional write from producer 1 at offset 1"


def test_update_refuses_producer_id_minus_one(tmp_path):
    psm = manager(tmp_path)
    with pytest.raises(ValueError, match="^Invalid producer id -1 passed to update$"):
        psm.update(psm.prepare_update(-1, REPLICATION))


# -- coordinator epochs -------------------------------------------------------------------------

def test_a_marker_of_the_same_coordinator_epoch_is_accepted(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, txn=True))
    append(psm, marker(1, coordinator_epoch=5), COORDINATOR)
    append(psm, data(2, seq=1, txn=True))
    assert append(psm, marker(3, coordinator_epoch=5), COORDINATOR) is not None
    assert psm.last_entry(1).coordinator_epoch == 5


def test_a_marker_of_an_older_coordinator_epoch_is_fenced_with_kafkas_message(tmp_path):
    psm = manager(tmp_path)
    append(psm, marker(1, coordinator_epoch=5), COORDINATOR)
    with pytest.raises(TransactionCoordinatorFencedError) as info:
        append(psm, marker(2, coordinator_epoch=4), COORDINATOR)
    assert str(info.value) == (
        "Invalid coordinator epoch for producerId 1 at offset 2: 4 (zombie), 5 (current)")


def test_a_marker_of_an_older_coordinator_epoch_is_logged_on_replication(tmp_path, caplog):
    psm = manager(tmp_path)
    append(psm, marker(1, coordinator_epoch=5), COORDINATOR)
    with caplog.at_level(logging.INFO, logger="storage.producer_state"):
        append(psm, marker(2, coordinator_epoch=4), REPLICATION)
    assert caplog.messages == [
        "Invalid coordinator epoch for producerId 1 at offset 2: 4 (zombie), 5 (current)"]
    assert psm.last_entry(1).coordinator_epoch == 4


# -- entries ------------------------------------------------------------------------------------

def test_copy_keeps_every_field_and_the_batches_unless_told(tmp_path):
    entry = ProducerStateEntry(9, 3, 4, NOW, 17, [BatchMetadata(1, 18, 1, NOW)])
    copied = entry.copy()
    assert copied == entry and copied.producer_id == 9 and copied.last_timestamp == NOW
    copied.batch_metadata.append(BatchMetadata(2, 19, 0, NOW))
    assert len(entry.batch_metadata) == 1  # its own deque
    bare = entry.copy(with_batches=False)
    assert bare.is_empty and bare.snapshot_fields()[:2] == (9, 3)
    assert bare.snapshot_fields()[5:] == (NOW, 4, 17)


def test_entries_differing_in_a_field_or_in_their_batches_are_unequal():
    assert ProducerStateEntry(1) != ProducerStateEntry(2)
    assert ProducerStateEntry(1, 0, -1, NOW, None, [BatchMetadata(0, 0, 0, NOW)]) != \
        ProducerStateEntry(1, 0, -1, NOW, None, [BatchMetadata(1, 1, 1, NOW), BatchMetadata(0, 0, 0, NOW)])


def test_an_entry_shows_its_batches():
    entry = ProducerStateEntry(9, 3, 4, NOW, 17, [BatchMetadata(1, 18, 1, NOW)])
    assert repr(entry).endswith(
        f"last_timestamp={NOW}, batch_metadata=[BatchMetadata(last_seq=1, last_offset=18, "
        f"offset_delta=1, timestamp={NOW})])")


def test_an_append_with_nothing_in_it_keeps_the_last_timestamp(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, ts=NOW - 5))
    psm.update(psm.prepare_update(1, CLIENT))
    assert psm.last_entry(1).last_timestamp == NOW - 5


def test_is_empty_until_no_producer_and_no_unreplicated_transaction_is_left(tmp_path):
    psm = manager(tmp_path, producer_id_expiration_ms=1000)
    assert psm.is_empty()
    append(psm, data(0, txn=True))
    append(psm, marker(1, kind=ABORT), COORDINATOR)
    assert not psm.is_empty()
    psm.remove_expired_producers(NOW + 1000)
    assert not psm.active_producers and not psm.is_empty()  # the abort is not replicated yet
    psm.on_high_watermark_updated(2)
    assert psm.is_empty()


def test_a_producer_expires_at_exactly_the_expiration_unless_its_transaction_is_open(tmp_path):
    psm = manager(tmp_path, producer_id_expiration_ms=1000)
    append(psm, data(0, pid=1, ts=NOW))
    append(psm, data(1, pid=2, ts=NOW + 1))
    append(psm, data(2, pid=3, ts=NOW, txn=True))
    psm.remove_expired_producers(NOW + 1000)
    assert sorted(psm.active_producers) == [2, 3]


# -- transactions -------------------------------------------------------------------------------

def test_a_completed_transaction_is_unstable_until_the_high_watermark_passes_its_marker(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, txn=True))
    append(psm, marker(6, kind=ABORT), COORDINATOR)
    psm.on_high_watermark_updated(6)
    assert psm.first_unstable_offset() == 0
    psm.on_high_watermark_updated(7)
    assert psm.first_unstable_offset() is None


def test_first_undecided_offset_is_none_without_an_open_transaction(tmp_path):
    assert manager(tmp_path).first_undecided_offset() is None


def test_open_transactions_carry_the_clock_and_the_producers_state(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(4, pid=3, epoch=2, txn=True, ts=NOW - 9))
    assert psm.open_transactions() == [OpenTransaction(3, 2, -1, 4, NOW, NOW - 9)]


def test_a_transaction_loaded_from_a_snapshot_is_open_from_the_load(tmp_path):
    snapshot_at(tmp_path, 5, [ProducerStateEntry(3, 2, 7, NOW - 9, 4, [BatchMetadata(0, 4, 0, NOW - 9)])])
    psm = manager(tmp_path)
    psm.truncate_and_reload(0, 5)
    assert psm.open_transactions() == [OpenTransaction(3, 2, 7, 4, NOW, NOW - 9)]
    assert psm.first_undecided_offset() == 4


# -- snapshots ----------------------------------------------------------------------------------

def test_a_snapshot_is_taken_at_map_end_offset_one(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0))
    assert psm.take_snapshot() == producer_snapshot_file(tmp_path, 1)


def test_a_state_in_memory_lists_no_snapshots(tmp_path):
    psm = manager(None)
    append(psm, data(0))
    assert psm.log_dir is None and psm.snapshot_offsets == []
    assert psm.last_entry(1).last_seq == 0


def test_oldest_and_latest_snapshot_and_the_file_at_an_offset(tmp_path):
    for offset in (3, 5, 9):
        snapshot_at(tmp_path, offset)
    psm = manager(tmp_path)
    assert (psm.oldest_snapshot_offset(), psm.latest_snapshot_offset()) == (3, 9)
    assert psm.snapshot_file_for_offset(5) == producer_snapshot_file(tmp_path, 5)
    assert psm.snapshot_file_for_offset(4) is None
    assert manager(tmp_path / "none").oldest_snapshot_offset() is None


def test_snapshot_files_with_other_names_are_skipped(tmp_path):
    for offset in range(20):
        snapshot_at(tmp_path, offset)
    (tmp_path / "garbage.snapshot").write_bytes(b"")
    (tmp_path / "00000000000000000099.snapshot.deleted").write_bytes(b"")
    assert [o for o, _ in list_snapshot_files(tmp_path)] == list(range(20))


def test_an_entry_whose_last_offset_is_zero_keeps_its_batch():
    entry = ProducerStateEntry(1, 0, -1, NOW, None, [BatchMetadata(0, 0, 0, NOW)])
    (decoded,) = decode_snapshot(encode_snapshot([entry]))
    assert decoded == entry and decoded.last_data_offset == 0


def test_a_field_out_of_range_names_itself():
    with pytest.raises(ValueError, match="^producer state field out of range: "):
        encode_snapshot([ProducerStateEntry(2**63)])


def test_truncate_and_reload_at_the_map_end_keeps_the_state(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, count=5))
    psm.truncate_and_reload(2, 5)  # nothing to reload: the log start only moves up
    assert psm.last_entry(1).last_seq == 4 and psm.map_end_offset == 5
    psm.truncate_and_reload(7, 5)
    assert psm.map_end_offset == 7


def test_truncate_and_reload_deletes_snapshots_out_of_the_log(tmp_path):
    psm = manager(tmp_path)
    for offset in range(5):
        append(psm, data(offset, seq=offset))
        psm.take_snapshot()
    psm.truncate_and_reload(1, 3)
    assert (psm.oldest_snapshot_offset(), psm.latest_snapshot_offset()) == (2, 3)
    assert psm.map_end_offset == 3 and psm.last_entry(1).last_seq == 2


def test_a_read_only_manager_deletes_no_snapshot_file(tmp_path):
    for offset in (1, 2, 3):
        snapshot_at(tmp_path, offset)
    psm = manager(tmp_path, writable=False)
    psm.truncate_and_reload(1, 2)
    assert psm.snapshot_offsets == [2]
    assert [o for o, _ in list_snapshot_files(tmp_path)] == [1, 2, 3]


def test_a_snapshot_file_already_gone_is_forgotten_quietly(tmp_path):
    for offset in (1, 2):
        snapshot_at(tmp_path, offset)
    psm = manager(tmp_path)
    producer_snapshot_file(tmp_path, 1).unlink()
    psm.delete_snapshots_before(2)
    assert psm.snapshot_offsets == [2]


def test_a_corrupt_snapshot_is_logged_deleted_and_the_older_one_loaded(tmp_path, caplog):
    snapshot_at(tmp_path, 3, [ProducerStateEntry(1, 0, -1, NOW, None, [BatchMetadata(2, 2, 0, NOW)])])
    corrupt = producer_snapshot_file(tmp_path, 6)
    corrupt.write_bytes(b"\x00\x01garbage")
    with pytest.raises(CorruptSnapshotError) as error:
        read_snapshot(corrupt)
    psm = manager(tmp_path)
    with caplog.at_level(logging.WARNING, logger="storage.producer_state"):
        psm.truncate_and_reload(0, 10)
    assert caplog.messages == [f"Failed to load producer snapshot from '{corrupt}': {error.value}"]
    assert psm.map_end_offset == 3 and psm.last_entry(1).last_seq == 2 and not corrupt.exists()


def test_a_snapshot_deleted_by_another_writer_is_skipped_for_the_older_one(tmp_path):
    snapshot_at(tmp_path, 3, [ProducerStateEntry(1, 0, -1, NOW, None, [BatchMetadata(2, 2, 0, NOW)])])
    snapshot_at(tmp_path, 6, [])
    psm = manager(tmp_path)
    producer_snapshot_file(tmp_path, 6).unlink()
    psm.truncate_and_reload(0, 10)
    assert psm.map_end_offset == 3 and psm.snapshot_offsets == [3]
    assert psm.last_entry(1).last_seq == 2


def test_truncate_fully_and_start_at_drops_state_and_snapshots(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, count=2, txn=True))
    psm.take_snapshot()
    append(psm, data(2, seq=2, txn=True))
    psm.take_snapshot()
    assert psm.snapshot_offsets == [2, 3]
    psm.truncate_fully_and_start_at(0)
    assert psm.snapshot_offsets == [] and list_snapshot_files(tmp_path) == []
    assert psm.is_empty() and psm.first_unstable_offset() is None and psm.map_end_offset == 0
    append(psm, data(0, pid=2))
    assert psm.take_snapshot() == producer_snapshot_file(tmp_path, 1)


def test_truncate_fully_and_start_at_an_offset_snapshots_only_past_it(tmp_path):
    psm = manager(tmp_path)
    psm.truncate_fully_and_start_at(150)
    assert psm.map_end_offset == 150
    assert psm.take_snapshot() == producer_snapshot_file(tmp_path, 150)


def test_truncate_fully_and_reload_snapshots_lists_the_directory_again(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0))
    psm.take_snapshot()
    psm.truncate_fully_and_reload_snapshots()
    assert psm.snapshot_offsets == [] and psm.map_end_offset == 0 and psm.is_empty()
    snapshot_at(tmp_path, 4)
    psm.truncate_fully_and_reload_snapshots()
    assert psm.snapshot_offsets == [4]


def test_a_log_start_increment_forgets_completed_transactions_below_it(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, txn=True))
    append(psm, marker(1, kind=ABORT), COORDINATOR)
    psm.on_log_start_offset_incremented(1)
    assert psm.first_unstable_offset() == 0 and psm.map_end_offset == 2
    psm.on_log_start_offset_incremented(2)
    assert psm.first_unstable_offset() is None
    psm.on_log_start_offset_incremented(5)
    assert psm.map_end_offset == 5
    assert psm.take_snapshot() is None  # the state holds nothing past the new start


def test_a_log_start_increment_keeps_the_last_snapshot_as_the_mark(tmp_path):
    psm = manager(tmp_path)
    append(psm, data(0, count=4))
    psm.take_snapshot()
    psm.on_log_start_offset_incremented(2)
    assert psm.take_snapshot() is None  # 4 is already snapshotted
    append(psm, data(4, seq=4))
    assert psm.take_snapshot() == producer_snapshot_file(tmp_path, 5)


def test_a_load_deletes_snapshots_at_the_log_start_and_past_the_log_end(tmp_path):
    for offset in (3, 4, 20, 21):
        snapshot_at(tmp_path, offset)
    psm = manager(tmp_path)
    psm.remove_snapshots_a_load_deletes([3, 4, 20, 21], log_start_offset=3, log_end_offset=20)
    assert psm.snapshot_offsets == [4, 20]
    assert [o for o, _ in list_snapshot_files(tmp_path)] == [4, 20]


def test_marking_a_snapshot_for_deletion(tmp_path, caplog):
    snapshot_at(tmp_path, 3)
    snapshot_at(tmp_path, 4)
    psm = manager(tmp_path)
    assert psm.remove_and_mark_snapshot_for_deletion(9) is None
    producer_snapshot_file(tmp_path, 4).unlink()
    with caplog.at_level(logging.INFO, logger="storage.producer_state"):
        assert psm.remove_and_mark_snapshot_for_deletion(4) is None
    assert caplog.messages == [
        f"Producer snapshot {producer_snapshot_file(tmp_path, 4)} was already deleted"]
    assert psm.snapshot_offsets == [3]


# -- Java HashMap order -------------------------------------------------------------------------

def test_java_long_hash_folds_the_high_word_and_spreads_the_high_half():
    assert _java_long_hash(1000) == 1000
    assert _java_long_hash(70_000) == 70_001  # 0x11170 ^ 0x1
    assert _java_long_hash(2**32 + 5) == 4  # (int)(v ^ v >>> 32)
    assert _java_long_hash(-1) == 0


def _order(keys):
    order, present = _JavaHashMapOrder(), {}
    for key in keys:
        present[key] = None
        order.on_insert(key, present)
    return order, order.order(present)


def test_a_bucket_of_eight_keeps_the_table_and_a_ninth_doubles_it():
    order, keys = _order([16 * i for i in range(8)] + [1])
    assert order.capacity == 16 and keys == [16 * i for i in range(8)] + [1]
    order, keys = _order([16 * i for i in range(9)])
    assert order.capacity == 32
    assert keys == [0, 32, 64, 96, 128, 16, 48, 80, 112]


def test_a_full_bucket_in_a_table_of_64_becomes_a_tree_and_keeps_the_table():
    colliding = [64 * i for i in range(9)]
    order, _ = _order(colliding + list(range(1, 17)))
    assert order.capacity == 64
    order.on_insert(576, dict.fromkeys(colliding + list(range(1, 17)) + [576]))
    assert order.capacity == 64


def test_the_table_doubles_past_three_quarters():
    order, _ = _order(range(12))
    assert order.capacity == 16
    order, _ = _order(range(13))
    assert order.capacity == 32


def test_keys_are_ordered_by_bucket_then_insertion():
    assert _order([3, 2])[1] == [2, 3]
    assert _order([17, 1])[1] == [17, 1]


def test_snapshot_entries_follow_the_table_the_producers_grew():
    psm = ProducerStateManager(None, clock=FixedClock(NOW))
    for pid in [48, 16] + list(range(1, 12)):
        psm.apply_batch(data(0, pid=pid))
    assert [e.producer_id for e in psm.snapshot_entries()] == list(range(1, 12)) + [48, 16]
