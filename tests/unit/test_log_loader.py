"""Loading a partition directory (storage.log_loader), modelled on Kafka's LogLoaderTest
(testLogRecoveryIsCalledUponBrokerCrash, testCorruptLog, testLogEndLessThanStartAfterReopen,
testProducerSnapshotsRecoveryAfterUncleanShutdown, and its tests of leftover .deleted, .cleaned
and .swap files): what a load deletes, keeps or promotes at its exact bounds, what recovery
cuts and says it cut, the recovery point and log end it reports, and the damage it stops at."""

import json
import logging

import pytest

from storage.clock import FixedClock
from storage.config import LogConfig
from storage.damage import LogDamage
from storage.leader_epoch_cache import LeaderEpochFileCache
from storage.log_files import (
    log_file,
    offset_index_file,
    time_index_file,
    transaction_index_file,
)
from storage.log_loader import IntactDataAfterDamageError, load, rebuild_producer_state
from storage.open_files import FilePool
from storage.producer_state import AppendOrigin, ProducerStateManager
from storage.quarantine import MANIFEST, Quarantine
from storage.records import build_batch
from storage.records.control import ControlRecordType, build_control_batch

NOW = 1_700_000_000_000


def batch(offset, count=2, pid=-1, txn=False, epoch=0):
    return build_batch(offset, [b"v%d" % (offset + i) for i in range(count)], None, 1000,
                       producer_id=pid, producer_epoch=0 if pid >= 0 else -1,
                       base_sequence=0 if pid >= 0 else -1, is_transactional=txn,
                       partition_leader_epoch=epoch)


def write(directory, base, parts):
    """A segment at ``base`` of the given batch bytes, with empty (trimmed) indexes."""
    directory.mkdir(exist_ok=True)
    log_file(directory, base).write_bytes(b"".join(parts))
    offset_index_file(directory, base).write_bytes(b"")
    time_index_file(directory, base).write_bytes(b"")


def corrupt(data):
    data = bytearray(data)
    data[-1] ^= 1
    return bytes(data)


def bad_magic(data):
    """A batch whose header cannot be read (magic 9): its offsets are unknown."""
    data = bytearray(data)
    data[16] = 9
    return bytes(data)


@pytest.fixture
def loaded_logs():
    opened = []
    yield opened
    for loaded in opened:
        for segment in loaded.segments:
            segment.close()


@pytest.fixture
def loader(tmp_path, loaded_logs):
    def run(directory, writable=True, clean=False, recovery_point=0, log_start_offset=0,
            **kwargs):
        kwargs.setdefault("producer_state",
                          ProducerStateManager(directory, writable=writable, clock=FixedClock(NOW)))
        kwargs.setdefault("epochs", LeaderEpochFileCache(directory, writable))
        loaded = load(directory, LogConfig(), writable, had_clean_shutdown=clean,
                      recovery_point=recovery_point, log_start_offset=log_start_offset,
                      clock=FixedClock(NOW), **kwargs)
        loaded_logs.append(loaded)
        return loaded
    return run


def recovered(directory):
    """Load ``directory`` once after a crash (indexes built) and close it, as a writer would."""
    loaded = load(directory, LogConfig(), True, had_clean_shutdown=False, recovery_point=0,
                  log_start_offset=0, epochs=LeaderEpochFileCache(directory, True),
                  producer_state=ProducerStateManager(directory))
    for segment in loaded.segments:
        segment.close()


def messages(caplog, level=logging.INFO):
    return [r.getMessage() for r in caplog.records
            if r.name == "storage.log_loader" and r.levelno >= level]


# -- empty directories and the log start ------------------------------------------------------

def test_a_read_only_load_of_an_empty_directory_finds_nothing(tmp_path, loader):
    part = tmp_path / "t-0"
    part.mkdir()
    loaded = loader(part, writable=False, log_start_offset=5)
    assert (loaded.segments, loaded.log_start_offset, loaded.recovery_point,
            loaded.log_end_offset) == ([], 5, 5, 5)
    assert list(part.iterdir()) == []


def test_an_empty_directory_gets_one_writable_segment_at_the_log_start(tmp_path, loader):
    part = tmp_path / "t-0"
    part.mkdir()
    files = FilePool(4)
    loaded = loader(part, log_start_offset=7, files=files)
    (segment,) = loaded.segments
    assert (segment.base_offset, segment.writable, segment.created_ms) == (7, True, NOW)
    assert segment._file._pool is files
    assert (loaded.log_start_offset, loaded.log_end_offset) == (7, 7)


def test_segments_are_opened_with_the_loads_clock_and_pool(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    files = FilePool(4)
    (segment,) = loader(part, clean=True, files=files).segments
    assert segment.created_ms == NOW and segment._file._pool is files


def test_a_log_ending_below_the_log_start_starts_afresh_there(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0), batch(2)])
    files = FilePool(4)
    with caplog.at_level(logging.WARNING, logger="storage.log_loader"):
        loaded = loader(part, clean=True, log_start_offset=10, files=files)
    assert messages(caplog, logging.WARNING) == [
        f"{part}: log end offset 4 is below the log start offset 10; deleting every segment"]
    (segment,) = loaded.segments
    assert (segment.base_offset, segment.writable, segment.created_ms) == (10, True, NOW)
    assert segment._file._pool is files
    assert (loaded.log_start_offset, loaded.log_end_offset) == (10, 10)
    assert not log_file(part, 0).exists() and log_file(part, 10).exists()


# -- the recovery point and the log end ---------------------------------------------------------

def test_a_clean_load_keeps_the_recovery_point_within_the_log(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0), batch(2)])
    assert loader(part, clean=True, recovery_point=2).recovery_point == 2
    assert loader(part, clean=True, recovery_point=9).recovery_point == 4
    assert loader(part, clean=True, recovery_point=0, log_start_offset=1).recovery_point == 1


def test_an_unclean_load_puts_the_recovery_point_at_the_log_end(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0), batch(2)])
    loaded = loader(part, clean=False, recovery_point=2)
    assert loaded.recovery_point == loaded.log_end_offset == 4


def test_recovery_learns_the_leader_epochs_of_the_batches(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0, epoch=3), batch(2, epoch=5)])
    epochs = LeaderEpochFileCache(part, True)
    loader(part, epochs=epochs)
    assert epochs.latest_epoch == 5


# -- damage a load stops at ---------------------------------------------------------------------

def test_a_clean_shutdown_with_a_corrupt_end_loads_up_to_it(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    first, bad = batch(0), bad_magic(batch(2))
    write(part, 0, [first, bad])
    state = ProducerStateManager(part, clock=FixedClock(NOW))
    with caplog.at_level(logging.ERROR, logger="storage.log_loader"):
        loaded = loader(part, clean=True, producer_state=state)
    damage = loaded.damage
    assert (damage.file, damage.position, damage.offset) == (log_file(part, 0).name, len(first), 2)
    assert loaded.log_end_offset == 2 and loaded.segments[0].size == len(first)
    assert log_file(part, 0).stat().st_size == len(first) + len(bad)  # left for a repair
    assert state.writable is False
    assert messages(caplog, logging.ERROR) == [
        f"{part} is damaged: {damage}; it is read up to the damage, and appends are refused "
        "until `kfs verify --repair`"]


def test_a_read_only_load_of_a_damaged_log_says_so_without_the_repair(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0), bad_magic(batch(2))])
    with caplog.at_level(logging.ERROR, logger="storage.log_loader"):
        loaded = loader(part, writable=False)
    assert messages(caplog, logging.ERROR) == [
        f"{part} is damaged: {loaded.damage}; it is read up to the damage"]


# -- recovery after a crash ---------------------------------------------------------------------

def test_a_corrupt_batch_is_cut_and_the_later_segments_deleted_without_a_quarantine(
        tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    first, bad, after = batch(0), corrupt(batch(2)), batch(4)
    write(part, 0, [first, bad, after])
    write(part, 6, [batch(6)])
    write(part, 8, [batch(8)])
    with caplog.at_level(logging.WARNING, logger="storage.log_loader"):
        loaded = loader(part)
    assert [s.base_offset for s in loaded.segments] == [0]
    assert loaded.log_end_offset == 2
    assert not log_file(part, 6).exists() and not log_file(part, 8).exists()
    size = len(first) + len(bad) + len(after)
    assert loaded.cuts[0].startswith(
        f"recovery cut bytes {len(first)}-{size} of 00000000000000000000.log (offsets from 2, "
        "4 records by the headers): ")
    assert loaded.cuts[0].endswith("; the bytes cut are deleted (no quarantine)")
    assert "intact batches follow" not in loaded.cuts[0]  # looked for only to keep them
    assert loaded.cuts[1:] == [
        f"recovery took out 00000000000000000006.log ({len(batch(6))} bytes, offsets from 6): it "
        "follows data lost by 00000000000000000000.log; deleted (no quarantine)",
        f"recovery took out 00000000000000000008.log ({len(batch(8))} bytes, offsets from 8): it "
        "follows data lost by 00000000000000000000.log; deleted (no quarantine)"]
    warned = messages(caplog, logging.WARNING)
    assert f"t-0: {loaded.cuts[0]}" in warned
    assert (f"deleting {log_file(part, 6)}: it follows data lost by {log_file(part, 0)}"
            in warned)


def test_a_corrupt_batch_and_the_later_segments_go_into_a_quarantine(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    first, bad, after = batch(0), corrupt(batch(2, count=1)), batch(3)
    write(part, 0, [first, bad, after])
    write(part, 5, [batch(5)])
    quarantine = Quarantine(tmp_path / "q", keep_all=False, clock=FixedClock(NOW))
    with caplog.at_level(logging.WARNING, logger="storage.log_loader"):
        loaded = loader(part, quarantine=quarantine)
    size = len(first) + len(bad) + len(after)
    assert loaded.cuts == [
        f"recovery cut bytes {len(first)}-{size} of 00000000000000000000.log (offsets from 2, "
        f"3 records by the headers): {loaded.cuts[0].split('): ', 1)[1]}",
        f"recovery took out 00000000000000000005.log ({len(batch(5))} bytes, offsets from 5): it "
        f"follows data lost by 00000000000000000000.log; moved whole into the quarantine "
        f"{quarantine.directory}"]
    assert (f"; intact batches follow from byte {len(first) + len(bad)}; the bytes cut are kept "
            f"in the quarantine {quarantine.directory}") in loaded.cuts[0]
    for index_file in (offset_index_file, time_index_file, transaction_index_file):
        assert not index_file(part, 5).exists()
    assert (f"moved {log_file(part, 5)} to {quarantine.directory} instead of deleting it: it "
            f"follows data lost by {log_file(part, 0)}") in messages(caplog, logging.WARNING)
    entries = [json.loads(line) for line in
               (quarantine.directory / MANIFEST).read_text().splitlines()]
    assert [(e["firstOffset"], e["records"]) for e in entries][0] == (2, 3)
    assert entries[1]["reason"] == "follows data lost by 00000000000000000000.log"
    assert entries[1]["firstOffset"] == 5
    assert entries[0]["reason"].startswith("Record batch at offset 2 is corrupt")
    assert entries[0]["reason"] == loaded.cuts[0].split("): ", 1)[1].split(
        "; the bytes cut are kept")[0]


def test_a_torn_tail_is_named_a_torn_write(tmp_path, loader):
    part = tmp_path / "t-0"
    first, torn = batch(0), batch(2, count=1)[:-5]
    write(part, 0, [first, torn])
    loaded = loader(part)
    assert loaded.cuts == [
        f"recovery cut bytes {len(first)}-{len(first) + len(torn)} of 00000000000000000000.log "
        "(offsets from 2, 1 record by the headers): a batch that runs past the end of the file "
        "(a torn write, or a corrupt batch size); the bytes cut are deleted (no quarantine)"]


def test_a_salvaging_load_refuses_to_cut_what_intact_batches_follow(tmp_path, loader):
    part = tmp_path / "t-0"
    first = batch(0)
    write(part, 0, [first, batch(2)[:-5]])
    write(part, 4, [batch(4)])
    before = log_file(part, 0).read_bytes()
    with pytest.raises(IntactDataAfterDamageError) as info:
        loader(part, salvage=True)
    assert str(info.value) == (f"{log_file(part, 0)} at byte {len(first)}: a torn batch, with "
                               "intact batches after it")
    assert info.value.position == len(first) and log_file(part, 0).read_bytes() == before
    assert loader(part).log_end_offset == 2  # not salvaging, by default: cut as Kafka does


def test_only_segments_from_the_recovery_point_are_recovered(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0), corrupt(batch(2))])  # below the recovery point: not read
    write(part, 4, [batch(4)])
    write(part, 6, [batch(6)])
    loaded = loader(part, recovery_point=5)
    assert [s.base_offset for s in loaded.segments] == [0, 4, 6] and loaded.cuts == []


def test_a_cut_in_the_last_segment_deletes_nothing_else(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    write(part, 2, [batch(2), corrupt(batch(4))])
    loaded = loader(part)
    assert [s.base_offset for s in loaded.segments] == [0, 2] and loaded.log_end_offset == 4
    assert len(loaded.cuts) == 1


def test_older_segments_keep_their_indexes_trimmed(tmp_path, loader):
    part = tmp_path / "t-0"
    parts = [batch(o) for o in range(0, 400, 2)]
    write(part, 0, parts)
    write(part, 400, [batch(400)])
    loaded = loader(part)
    first, last = loaded.segments
    assert 0 < first.offset_index.entries == first.offset_index.max_entries
    assert first.time_index.entries == first.time_index.max_entries
    assert last.offset_index.max_entries > last.offset_index.entries  # the active one grows


# -- index checks -------------------------------------------------------------------------------

def test_an_older_segments_zero_filled_index_is_rebuilt_after_a_crash(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    write(part, 0, [batch(o) for o in range(0, 400, 2)])
    write(part, 400, [batch(400)])
    recovered(part)
    index = offset_index_file(part, 0)
    entries = len(index.read_bytes()) // 8
    index.write_bytes(index.read_bytes() + bytes(8 * 4))
    with caplog.at_level(logging.WARNING, logger="storage.log_loader"):
        loaded = loader(part, recovery_point=400)
    assert messages(caplog, logging.WARNING) == [
        f"{index} has 4 zero-filled slots after its {entries} entries; rebuilding the indexes"]
    assert loaded.segments[0].offset_index.entries == entries
    assert len(index.read_bytes()) == 8 * entries


def test_empty_trimmed_indexes_are_no_damage(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    write(part, 2, [batch(2)])
    with caplog.at_level(logging.WARNING, logger="storage.log_loader"):
        loader(part, clean=True)
    assert messages(caplog, logging.WARNING) == []


def test_an_index_pointing_at_the_end_of_the_log_is_rebuilt(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    parts = [batch(o) for o in range(0, 400, 2)]
    write(part, 0, parts)
    write(part, 400, [batch(400)])
    recovered(part)
    index = offset_index_file(part, 0)
    size = sum(len(p) for p in parts)
    index.write_bytes(index.read_bytes()[:-8] + (398).to_bytes(4, "big") + size.to_bytes(4, "big"))
    with caplog.at_level(logging.WARNING, logger="storage.log_loader"):
        loader(part, clean=True)
    assert messages(caplog, logging.WARNING) == [
        f"{index} points past the end of {log_file(part, 0)}; rebuilding the indexes"]


def test_an_index_entry_before_the_end_of_its_batch_is_rebuilt(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    parts = [batch(o) for o in range(0, 400, 2)]
    write(part, 0, parts)
    write(part, 400, [batch(400)])
    recovered(part)
    index = offset_index_file(part, 0)
    last = index.read_bytes()[-8:]
    position = int.from_bytes(last[4:], "big")
    offset = int.from_bytes(last[:4], "big")
    index.write_bytes(index.read_bytes()[:-8] + (offset - 1).to_bytes(4, "big") + last[4:])
    with caplog.at_level(logging.WARNING, logger="storage.log_loader"):
        loader(part, clean=True)
    assert messages(caplog, logging.WARNING) == [
        f"{index}: the batch at byte {position} of {log_file(part, 0)} ends after offset "
        f"{offset - 1}; rebuilding the indexes"]


def test_a_time_index_entry_no_batch_holds_is_rebuilt(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0), batch(2)])
    write(part, 4, [batch(4)])
    recovered(part)
    index = time_index_file(part, 0)
    entry = index.read_bytes()[-12:]
    index.write_bytes(index.read_bytes()[:-12] + (999).to_bytes(8, "big") + entry[8:])
    with caplog.at_level(logging.WARNING, logger="storage.log_loader"):
        loader(part, clean=True)
    offset = int.from_bytes(entry[8:], "big")
    assert messages(caplog, logging.WARNING) == [
        f"{index}: no batch of {log_file(part, 0)} holds offset {offset} with max timestamp "
        "999; rebuilding the indexes"]


# -- leftovers of interrupted operations --------------------------------------------------------

def test_leftovers_are_deleted_and_each_deletion_logged(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    deleted = part / "00000000000000000000.log.deleted"
    deleted.write_bytes(b"x")
    cleaned = part / "00000000000000000002.log.cleaned"
    cleaned.write_bytes(b"x")
    orphan = offset_index_file(part, 8)
    orphan.write_bytes(b"")
    with caplog.at_level(logging.INFO, logger="storage.log_loader"):
        loader(part, clean=True)
    said = messages(caplog)
    assert f"deleting {deleted} left by an earlier deletion" in said
    assert f"deleting {cleaned} left by an interrupted cleaning" in said
    assert f"deleting {orphan}: its .log is gone" in said
    assert not deleted.exists() and not cleaned.exists() and not orphan.exists()


def test_swaps_at_or_after_the_first_cleaned_file_are_dropped(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    write(part, 2, [batch(2)])
    write(part, 4, [batch(4)])
    (part / "00000000000000000004.log.cleaned").write_bytes(b"")
    (part / "00000000000000000006.log.cleaned").write_bytes(b"")
    at_cleaned = part / "00000000000000000004.log.swap"
    at_cleaned.write_bytes(batch(4))
    below = part / "00000000000000000002.log.swap"
    below.write_bytes(batch(2))
    with caplog.at_level(logging.INFO, logger="storage.log_loader"):
        loader(part, clean=True)
    said = messages(caplog)
    assert f"deleting {at_cleaned}: its cleaning did not finish" in said
    assert f"promoting {below}" in said
    assert not at_cleaned.exists() and not below.exists()


def test_a_finished_swap_replaces_the_segments_from_its_first_base(tmp_path, loader, caplog):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    write(part, 2, [batch(2)])
    write(part, 4, [batch(4)])
    write(part, 6, [batch(6)])
    swap = part / "00000000000000000002.log.swap"
    swap.write_bytes(batch(2) + batch(4))  # the cleaning of 2 and 4 into one segment
    with caplog.at_level(logging.INFO, logger="storage.log_loader"):
        loaded = loader(part, clean=True)
    said = messages(caplog)
    assert f"deleting {log_file(part, 2)}: replaced by a finished cleaning" in said
    assert f"deleting {log_file(part, 4)}: replaced by a finished cleaning" in said
    assert f"promoting {swap}" in said
    assert [s.base_offset for s in loaded.segments] == [0, 2, 6]
    assert log_file(part, 2).read_bytes() == batch(2) + batch(4)


def test_a_quarantine_keeping_all_gets_the_leftover_logs_with_why(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    write(part, 2, [batch(2)])
    (part / "00000000000000000000.log.deleted").write_bytes(b"d")
    (part / "00000000000000000004.log.cleaned").write_bytes(b"c")
    (part / "00000000000000000004.log.swap").write_bytes(b"s")
    (part / "00000000000000000002.log.swap").write_bytes(batch(2))
    quarantine = Quarantine(tmp_path / "q", keep_all=True, clock=FixedClock(NOW))
    loader(part, clean=True, quarantine=quarantine)
    entries = [json.loads(line) for line in
               (quarantine.directory / MANIFEST).read_text().splitlines()]
    reasons = {e["source"].rsplit("/", 1)[-1]: e["reason"] for e in entries}
    assert reasons == {
        "00000000000000000000.log.deleted": "left by an earlier deletion",
        "00000000000000000004.log.cleaned": "left by an interrupted cleaning",
        "00000000000000000004.log.swap": "its cleaning did not finish",
        "00000000000000000002.log": "replaced by a finished cleaning",
    }


# -- the producer state -------------------------------------------------------------------------

def test_recovery_writes_the_aborted_transactions_of_recovered_segments_again(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    write(part, 2, [batch(2, pid=7, txn=True),
                    build_control_batch(4, 7, 0, ControlRecordType.ABORT, 0, timestamp_ms=NOW)])
    loaded = loader(part, recovery_point=2)
    assert loaded.log_end_offset == 5
    assert transaction_index_file(part, 2).exists()
    assert [t.first_offset for t in loaded.segments[1].txn_index.all_aborted_txns()] == [2]


def test_a_clean_load_replays_the_producers_from_the_newest_snapshot(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0, pid=7)])
    write(part, 2, [batch(2, pid=8)])
    write(part, 4, [batch(4, pid=9)])
    state = ProducerStateManager(part, clock=FixedClock(NOW))
    loader(part, clean=True, producer_state=state)
    assert sorted(state.active_producers) == [7, 8, 9]
    assert state.map_end_offset == 6


def test_a_control_batch_that_is_no_marker_stops_the_replay_there(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0, pid=7)])
    bad = build_batch(3, [b"not a marker"], [b"\x00\x00\x00\x05"], NOW, producer_id=7,
                      producer_epoch=0, base_sequence=1, is_transactional=True, is_control=True)
    write(part, 2, [batch(2, count=1, pid=8)])
    write(part, 3, [bad])
    state = ProducerStateManager(part, clock=FixedClock(NOW))
    loaded = loader(part, clean=True, producer_state=state)
    damage = loaded.damage
    assert isinstance(damage, LogDamage)
    assert (damage.file, damage.position, damage.offset) == (log_file(part, 3).name, None, 3)
    assert damage.reason == (
        "Invalid control record type for end transaction marker: KRAFT_VERSION (control batch "
        "at offset 3) (the producer state is replayed up to offset 3 only)")


def test_a_bad_control_batch_first_in_the_log_is_damage_in_the_first_segment(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [build_batch(0, [b"x"], [b"\x00\x00\x00\x05"], NOW, producer_id=7,
                                producer_epoch=0, base_sequence=0, is_transactional=True,
                                is_control=True)])
    damage = loader(part, clean=True).damage
    assert (damage.file, damage.offset) == (log_file(part, 0).name, 0)


def test_a_rebuild_at_the_map_end_still_reloads(tmp_path, loader):
    """A state holding what a failed append left (Log.truncate_to's rebuild) is reloaded even
    when it ends where the log does."""
    part = tmp_path / "t-0"
    write(part, 0, [batch(0, pid=7)])
    state = ProducerStateManager(part, clock=FixedClock(NOW))
    loaded = loader(part, clean=True, producer_state=state)
    stray = state.prepare_update(99, AppendOrigin.REPLICATION)
    stray.append_data_batch(0, 0, 0, NOW, 5, 5, False)
    state.update(stray)
    rebuild_producer_state(state, loaded.segments, 0, loaded.log_end_offset)
    assert sorted(state.active_producers) == [7]


def test_a_clean_load_adds_no_aborted_transaction_to_an_index_it_did_not_recover(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0, pid=7, txn=True),
                    build_control_batch(2, 7, 0, ControlRecordType.ABORT, 0, timestamp_ms=NOW)])
    write(part, 3, [batch(3)])
    recovered(part)
    before = transaction_index_file(part, 0).read_bytes()
    loader(part, clean=True)
    assert transaction_index_file(part, 0).read_bytes() == before and before


def test_one_stray_byte_is_cut_alone_and_the_batch_after_it_found(tmp_path, loader):
    part = tmp_path / "t-0"
    first = batch(0)
    write(part, 0, [first, b"\x07", batch(2), batch(4)])
    quarantine = Quarantine(tmp_path / "q", keep_all=False, clock=FixedClock(NOW))
    loaded = loader(part, quarantine=quarantine)
    assert f"; intact batches follow from byte {len(first) + 1};" in loaded.cuts[0]


def test_a_cut_whose_header_cannot_be_read_counts_no_records(tmp_path, loader):
    part = tmp_path / "t-0"
    first = batch(0)
    write(part, 0, [first, bad_magic(batch(2))])
    (cut,) = loader(part).cuts
    assert cut.startswith(f"recovery cut bytes {len(first)}-{len(first) + len(batch(2))} of "
                          "00000000000000000000.log (offsets from 2): ")


def test_a_cut_in_a_middle_segment_keeps_the_segments_before_it(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    write(part, 2, [batch(2), corrupt(batch(4))])
    write(part, 6, [batch(6)])
    loaded = loader(part)
    assert [s.base_offset for s in loaded.segments] == [0, 2] and loaded.log_end_offset == 4


def test_a_segment_recovered_for_its_index_after_a_clean_shutdown_keeps_the_later_ones(
        tmp_path, loader):
    """As Kafka's loadSegmentFiles recovers a segment whose index is missing: its torn tail
    is cut, and no later segment is deleted (only a crash's recovery deletes them)."""
    part = tmp_path / "t-0"
    write(part, 0, [batch(0), batch(2)[:-5]])
    write(part, 4, [batch(4)])
    offset_index_file(part, 0).unlink()
    loaded = loader(part, clean=True, recovery_point=6)
    assert [s.base_offset for s in loaded.segments] == [0, 4] and loaded.log_end_offset == 6
    assert log_file(part, 0).stat().st_size == len(batch(0))


def test_an_empty_swap_replaces_its_segment(tmp_path, loader):
    part = tmp_path / "t-0"
    write(part, 0, [batch(0)])
    write(part, 2, [batch(2)])
    write(part, 4, [batch(4)])
    (part / "00000000000000000002.log.swap").write_bytes(b"")  # cleaned to nothing
    loaded = loader(part, clean=True)
    assert [s.base_offset for s in loaded.segments] == [0, 2, 4]
    assert log_file(part, 2).read_bytes() == b""


def test_a_torn_batch_under_the_last_index_entry_is_recovered(tmp_path, loader):
    part = tmp_path / "t-0"
    parts = [batch(o) for o in range(0, 400, 2)]
    write(part, 0, parts)
    recovered(part)
    index = offset_index_file(part, 0)
    position = int.from_bytes(index.read_bytes()[-4:], "big")
    with open(log_file(part, 0), "r+b") as f:
        f.truncate(position + 10)
    loaded = loader(part, clean=True)
    assert log_file(part, 0).stat().st_size == position
    assert loaded.log_end_offset == loaded.segments[0].read_next_offset()


def test_a_log_read_whole_whose_index_misleads_names_the_index_failure(tmp_path, loader):
    """A read-only load trusts the indexes: when the last offset-index entry points inside a
    batch, the .log still reads whole from its start, and the damage names what failed."""
    part = tmp_path / "t-0"
    parts = [batch(o) for o in range(0, 400, 2)]
    write(part, 0, parts)
    recovered(part)
    index = offset_index_file(part, 0)
    entry = index.read_bytes()[-8:]
    position = int.from_bytes(entry[4:], "big")
    index.write_bytes(index.read_bytes()[:-8] + entry[:4] + (position + 20).to_bytes(4, "big"))
    loaded = loader(part, writable=False)
    damage = loaded.damage
    size = sum(len(p) for p in parts)
    assert damage is not None and damage.position == size and damage.offset == 400
    assert damage.reason.startswith("Found record size 0 smaller than minimum record overhead")
