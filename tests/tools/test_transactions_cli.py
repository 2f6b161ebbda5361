"""``kfs transactions BACKING_DIR list|find-hanging|abort`` run as a command, offline and
beside a writable mount (the marker then goes through its append-batches)."""

import subprocess
import sys

import pytest

from storage import LogConfig, LogManager
from storage.log import Log
from storage.records import build_batch
from storage.clock import now_ms
from storage.records.control import ControlRecordType, end_transaction_marker

OLD = 1_000_000  # epoch ms: a producer silent for decades


def kfs(*args, check=True):
    return subprocess.run([sys.executable, "-m", "kfs", "transactions", *map(str, args)],
                          capture_output=True, text=True, timeout=120, check=check)


def rows(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()[1:]]


@pytest.fixture
def backing(tmp_path):
    """orders-0: a plain record, then open transactions of producer 9 (old) and 10 (now), in
    a directory of its own (a mount's mountpoint is never inside it)."""
    data = tmp_path / "data"
    (data / "orders-0").mkdir(parents=True)
    log = Log(data / "orders-0", "orders", 0, LogConfig())
    log.append([b"plain"])
    log.append_as_leader(build_batch(0, [b"x", b"y"], producer_id=9, producer_epoch=3,
                                     base_sequence=0, is_transactional=True, timestamps=OLD))
    log.append_as_leader(build_batch(0, [b"z"], producer_id=10, producer_epoch=0,
                                     base_sequence=0, is_transactional=True,
                                     timestamps=now_ms()))
    log.close()
    return data


def markers(backing):
    mgr = LogManager(backing, read_only=True)
    try:
        return [(b.producer_id, b.producer_epoch, end_transaction_marker(b).control_type)
                for s in mgr.get("orders-0").segments.all()
                for _, h in s.scan_batches(0) if h.is_control_batch
                for b in [s.read_batch(_, h)]]
    finally:
        mgr.close()


def test_list_find_hanging_and_abort_by_start_offset(backing):
    out = kfs(backing, "list").stdout
    assert out.split("\n")[0].split() == ["Topic", "Partition", "ProducerId", "ProducerEpoch",
                                          "CoordinatorEpoch", "StartOffset", "LastTimestamp"]
    assert rows(out) == [["orders", "0", "9", "3", "-1", "1", str(OLD)],
                         ["orders", "0", "10", "0", "-1", "3", rows(out)[1][-1]]]
    before = now_ms()
    hanging = rows(kfs(backing, "find-hanging").stdout)
    assert [r[2] for r in hanging] == ["9"]  # 10 wrote just now
    assert (before - OLD) // 60_000 <= int(hanging[0][-1]) <= (now_ms() - OLD) // 60_000
    assert "producer 9" in kfs(backing, "abort", "--topic", "orders", "--partition", 0,
                               "--start-offset", 1).stdout
    assert markers(backing) == [(9, 3, ControlRecordType.ABORT)]
    assert [r[2] for r in rows(kfs(backing, "list", "--topic", "orders").stdout)] == ["10"]
    again = kfs(backing, "abort", "--topic", "orders", "--partition", 0, "--start-offset", 1,
                check=False)
    assert again.returncode != 0 and "no open transaction starts at offset 1" in again.stderr


def test_abort_by_producer_through_a_mount(backing, mount):
    mount(backing)
    kfs(backing, "abort", "--topic", "orders", "--partition", 0, "--producer-id", 10,
        "--producer-epoch", 1, "--coordinator-epoch", 0)
    assert [r[2] for r in rows(kfs(backing, "list").stdout)] == ["9"]
    bad = kfs(backing, "abort", "--topic", "orders", "--partition", 0, "--producer-id", 9,
              check=False)
    assert bad.returncode != 0 and "--start-offset, or --producer-id" in bad.stderr
