"""Retention (§9 of the reference): retention.ms on the largest record timestamp, retention.bytes,
the log start offset, the ``.deleted`` rename and its delayed delete, and the checkpoint."""

import os
import subprocess
import sys
import time

import pytest

from helpers.paths import REPO
from storage import LogConfig, LogManager
from storage.checkpoint import read_offsets
from storage.log_files import LOG_START_OFFSET_CHECKPOINT
from storage.log import Log
from storage.records import build_batch

DAY_MS = 86_400_000


def follower_log(path, timestamps, **config):
    """A log with one 1-record batch per timestamp, 1 KiB values, three batches per segment."""
    path.mkdir(exist_ok=True)
    cfg = dict(segment_bytes=3 * 1100, file_delete_delay_ms=0)
    cfg.update(config)
    log = Log(path, "t", 0, LogConfig(**cfg))
    for offset, ts in enumerate(timestamps):
        log.append_batches(build_batch(offset, [b"%04d" % offset + b"v" * 1020], None, ts))
    return log


def test_retention_ms_deletes_segments_whose_largest_timestamp_expired(tmp_path):
    now = 1_700_000_000_000
    # segments: [0,1,2] old, [3,4,5] one record young (largest timestamp keeps it), [6,7] young
    stamps = [now - 3 * DAY_MS] * 3 + [now - 3 * DAY_MS, now - 3 * DAY_MS, now] + [now, now]
    log = follower_log(tmp_path / "t-0", stamps, retention_ms=DAY_MS)
    assert len(log.segments) == 3
    assert log.delete_old_segments(now) == 1
    assert log.log_start_offset == 3
    assert log.reader.read(2) is None and log.reader.read(3).value.startswith(b"0003")
    assert not (tmp_path / "t-0" / "00000000000000000000.log").exists()
    assert not list((tmp_path / "t-0").glob("*.deleted"))  # file.delete.delay.ms=0
    assert log.delete_old_segments(now) == 0  # the walk stops at the first segment kept
    log.close()


def test_retention_deletes_no_segment_after_one_it_keeps(tmp_path):
    now = 1_700_000_000_000
    stamps = [now] * 3 + [now - 3 * DAY_MS] * 3 + [now]
    log = follower_log(tmp_path / "t-0", stamps, retention_ms=DAY_MS)
    assert log.delete_old_segments(now) == 0
    assert log.log_start_offset == 0
    log.close()


def test_when_every_segment_expires_the_log_rolls_and_keeps_an_empty_active_segment(tmp_path):
    now = 1_700_000_000_000
    log = follower_log(tmp_path / "t-0", [now - 3 * DAY_MS] * 7, retention_ms=DAY_MS)
    assert log.delete_old_segments(now) == 3
    assert log.log_start_offset == log.log_end_offset == 7
    assert len(log.segments) == 1 and log.segments.active.size == 0
    assert log.reader.read(6) is None
    assert log.append([b"after"]) == 7 and log.reader.read(7).value == b"after"
    log.close()


def test_retention_bytes_keeps_the_log_at_or_above_the_limit(tmp_path):
    limit = 4 * 1100
    log = follower_log(tmp_path / "t-0", [1_700_000_000_000] * 8, retention_bytes=limit,
                       retention_ms=-1)
    sizes = [s.size for s in log.segments.all()]
    assert len(sizes) == 3 and sum(sizes) - sizes[0] >= limit  # the first segment can go
    assert log.delete_old_segments() == 1
    assert log.segments.size_in_bytes == sum(sizes[1:]) >= limit  # at or above the limit
    assert log.segments.size_in_bytes - sizes[1] < limit  # dropping the next would go under it
    assert log.delete_old_segments() == 0
    assert [s.size for s in log.segments.all()] == sizes[1:]
    assert log.log_start_offset == 3
    assert log.reader.read(2) is None and log.reader.read(3).value.startswith(b"0003")
    log.close()


def test_unlimited_retention_and_compact_policy_delete_nothing(tmp_path):
    old = [1_000] * 7
    for name, config in (("a-0", dict(retention_ms=-1)),
                         ("b-0", dict(retention_ms=1, cleanup_policy="compact"))):
        log = follower_log(tmp_path / name, old, **config)
        assert log.delete_old_segments() == 0
        log.close()


def test_deleted_files_wait_for_file_delete_delay_ms(tmp_path):
    now = 1_700_000_000_000
    log = follower_log(tmp_path / "t-0", [now - 3 * DAY_MS] * 3 + [now] * 3,
                       retention_ms=DAY_MS, file_delete_delay_ms=60_000)
    assert log.delete_old_segments(now) == 1
    renamed = sorted(p.name for p in (tmp_path / "t-0").glob("*.deleted"))
    assert renamed == ["00000000000000000000.index.deleted", "00000000000000000000.log.deleted",
                       "00000000000000000000.timeindex.deleted"]
    log.delete_due_files(now=int(time.time() * 1000))  # not yet due
    assert len(list((tmp_path / "t-0").glob("*.deleted"))) == 3
    log.delete_due_files(now=int(time.time() * 1000) + 60_001)
    assert not list((tmp_path / "t-0").glob("*.deleted"))
    log.close()


def expiring_backing(tmp_path, retention_key):
    """A backing dir whose t-0 has one expired segment (3 records 3 days old) then 3 new
    records, with retention set by the broker key ``retention_key`` to one day."""
    now = int(time.time() * 1000)
    value = DAY_MS // 3_600_000 if retention_key.endswith("hours") else DAY_MS
    (tmp_path / "server.properties").write_text(
        f"{retention_key}={value}\nlog.segment.bytes=3300\nlog.segment.delete.delay.ms=0\n")
    mgr = LogManager(tmp_path)
    log = mgr.create("t-0")
    for offset, ts in enumerate([now - 3 * DAY_MS] * 3 + [now] * 3):
        log.append_batches(build_batch(offset, [b"v" * 1024], None, ts))
    return mgr


def test_log_start_offset_is_checkpointed_and_survives_reopen(tmp_path):
    mgr = expiring_backing(tmp_path, "log.retention.ms")
    checkpoint = tmp_path / LOG_START_OFFSET_CHECKPOINT
    assert not checkpoint.exists()
    assert mgr.cleanup_logs() == {"t-0": 1}
    # written by the retention run, in Kafka's form: no entry for a log whose start offset is
    # its first segment's base offset (the segments themselves say it)
    assert checkpoint.read_text() == "0\n0\n"
    mgr.close()
    assert checkpoint.read_text() == "0\n0\n"
    mgr = LogManager(tmp_path)
    log = mgr.get("t-0")
    assert log.log_start_offset == 3 and log.segments.first_base_offset == 3
    assert log.reader.read(2) is None and [r.offset for r in log.reader.records_from(0, 10)] == [3, 4, 5]
    mgr.close()


def test_checkpointed_log_start_offset_above_the_first_segment_hides_lower_offsets(tmp_path):
    mgr = LogManager(tmp_path)
    log = mgr.create("t-0")
    log.append([b"a", b"b", b"c", b"d"])
    mgr.close()
    (tmp_path / LOG_START_OFFSET_CHECKPOINT).write_text("0\n1\nt 0 2\n")
    mgr = LogManager(tmp_path)
    log = mgr.get("t-0")
    assert log.log_start_offset == 2
    assert log.reader.read(1) is None and log.reader.read(2).value == b"c"
    assert [r.offset for r in log.reader.records_from(0, 10)] == [2, 3]
    mgr.close()
    assert read_offsets(tmp_path / LOG_START_OFFSET_CHECKPOINT) == {"t-0": 2}


def kfs_retention(backing, *args):
    repo = str(REPO)
    return subprocess.run([sys.executable, "-m", "kfs", "retention", str(backing), *args],
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": repo}, timeout=120)


def test_cli_retention_plans_first_and_deletes_with_yes(tmp_path):
    expiring_backing(tmp_path, "log.retention.hours").close()
    files = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    plan = kfs_retention(tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert plan.stdout.splitlines()[0] == "retention would delete (nothing has changed yet):"
    assert plan.stdout.splitlines()[1].startswith("  t-0: 1 of 2 segment(s), offsets 0-2 (")
    assert "retention.ms=" in plan.stdout and "run with --yes to delete" in plan.stdout
    assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == files  # nothing deleted
    run = kfs_retention(tmp_path, "--yes")
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[-1] == "t-0: deleted 1 segment(s); log start offset 0 -> 3"
    assert kfs_retention(tmp_path).stdout == "retention deletes nothing now\n"


def test_cli_retention_plans_beside_the_writer_that_holds_the_lock(tmp_path):
    """The plan changes nothing, so it is printed while a writer (a mount, a broker) holds
    the .lock; deleting (--yes) is refused then, and nothing changes either way."""
    expiring_backing(tmp_path, "log.retention.hours").close()
    files = sorted(p.name for p in (tmp_path / "t-0").iterdir())
    writer = LogManager(tmp_path)  # holds .lock, as a running mount does
    try:
        plan = kfs_retention(tmp_path)
        assert plan.returncode == 0, plan.stderr
        assert plan.stdout.splitlines()[0] == "retention would delete (nothing has changed yet):"
        assert plan.stdout.splitlines()[1].startswith("  t-0: 1 of 2 segment(s), offsets 0-2 (")
        assert plan.stdout.splitlines()[-1].startswith(
            f"nothing changed: {tmp_path} is in use by another writer"), plan.stdout
        refused = kfs_retention(tmp_path, "--yes")
        assert refused.returncode != 0 and "in use by another writer" in refused.stderr
        assert sorted(p.name for p in (tmp_path / "t-0").iterdir()) == files
    finally:
        writer.close()
    assert kfs_retention(tmp_path, "--yes").stdout.splitlines()[-1] == \
        "t-0: deleted 1 segment(s); log start offset 0 -> 3"


def test_retention_plan_is_what_retention_deletes(tmp_path):
    log = follower_log(tmp_path / "t-0", [1000 * i for i in range(12)], retention_ms=DAY_MS,
                       retention_bytes=5 * 1100)
    plan = log.retention_plan(now=DAY_MS + 9000)  # 4 segments of 3 records, 1 s apart
    assert [(s.base_offset, why) for s, why in plan] == [
        (0, "retention.bytes=5500"), (3, "retention.bytes=5500"), (6, "retention.ms=86400000")]
    doomed = [s.base_offset for s, _ in plan]
    assert log.delete_old_segments(now=DAY_MS + 9000) == len(doomed)
    assert log.log_start_offset == log.segments.all()[0].base_offset > doomed[-1]
    log.close()


@pytest.mark.parametrize("retention", ["retention.ms=-2", "retention.bytes=x"])
def test_bad_retention_settings_are_refused(tmp_path, retention):
    from storage.errors import InvalidConfigError

    (tmp_path / "t.topic.properties").write_text(retention + "\n")
    mgr = LogManager(tmp_path)
    with pytest.raises(InvalidConfigError):
        mgr.create("t-0")
    assert not (tmp_path / "t-0").exists()
    mgr.close()


@pytest.mark.fuse
@pytest.mark.needs_fixture("kafka-written/plain-0")
def test_a_writable_mount_warns_before_retention_deletes_most_of_a_partition(tmp_path):
    """Kafka-written data from 2023 against the 7-day default: the mount says, on stderr and in
    its log, that its first retention pass will delete most of the partition."""
    import shutil

    from helpers.kfs import kfs_command, kfs_env
    from helpers.needs import require_fuse
    from helpers.paths import KAFKA_WRITTEN

    require_fuse()
    backing, mnt = tmp_path / "data", tmp_path / "mnt"
    shutil.copytree(KAFKA_WRITTEN / "plain-0", backing / "plain-0")
    mnt.mkdir()
    run = subprocess.run(kfs_command("mount", f"--log-file={tmp_path / 'kfs.log'}", str(backing),
                                     str(mnt)), capture_output=True, text=True, cwd=REPO,
                         env=kfs_env(), timeout=150)
    try:
        assert run.returncode == 0, run.stderr
        assert "retention will delete most of plain-0: 21 of 21 segment(s), offsets 0-4999" in run.stderr
        assert "retention.ms=604800000" in run.stderr
        assert "retention will delete most of plain-0" in (tmp_path / "kfs.log").read_text()
    finally:
        subprocess.run(kfs_command("umount", str(mnt)), cwd=REPO, env=kfs_env(), timeout=150)
