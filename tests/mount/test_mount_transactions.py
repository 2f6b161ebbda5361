"""Transactions through a real mount always end: the mount aborts one open longer than
``transaction.timeout.ms`` (checking every
``transaction.abort.timed.out.transaction.cleanup.interval.ms``) and refuses its fenced
producer's later batches with EINVAL; a producer's retried batch is stored once."""

import errno
import subprocess

import pytest

from helpers.shell import sh
from helpers.waits import Lines
from storage.records import build_batch

pytestmark = pytest.mark.fuse

PID = 77


def txn_batch(values, seq, epoch=0):
    return build_batch(0, values, producer_id=PID, producer_epoch=epoch, base_sequence=seq,
                       is_transactional=True)


def write(path, data):
    with open(path, "ab", buffering=0) as f:
        f.write(data)


def cat(path) -> str:
    return subprocess.run(["cat", str(path)], capture_output=True, check=True,
                          timeout=60).stdout.decode()


def test_a_transaction_left_open_is_aborted_and_its_producer_fenced(tmp_path, mount):
    backing = tmp_path / "data"
    (backing / "orders-0").mkdir(parents=True)
    (backing / "server.properties").write_text(
        "transaction.timeout.ms=500\n"
        "transaction.abort.timed.out.transaction.cleanup.interval.ms=100\n")
    m = mount(backing, "--isolation-level", "read_committed")
    part = m.path / "orders-0"
    write(part / "append-batches", txn_batch([b"never committed"], 0))
    sh("echo after >> append", part)
    # read_committed shows nothing past the open transaction until the mount aborts it
    assert cat(part / "values") == ""
    tail = subprocess.Popen(["tail", "-f", "-n", "+1", str(part / "values")],
                            stdout=subprocess.PIPE)
    try:  # the abort comes on the mount's own schedule: waited for on tail's pipe
        assert Lines(tail.stdout, "tail -f", tail).readline() == b"after\n"
    finally:
        tail.kill()
        tail.wait(timeout=30)
    with pytest.raises(OSError) as info:
        write(part / "append-batches", txn_batch([b"zombie"], 1))  # the old epoch: fenced
    assert info.value.errno == errno.EINVAL
    assert cat(part / "values") == "after\n"
    assert "aborted the transaction of producer 77" in m.log_text()


def test_a_retried_batch_is_stored_once(tmp_path, mount):
    part = mount().path
    subprocess.run(["mkdir", "orders-0"], cwd=part, check=True, timeout=60)
    part = part / "orders-0"
    batch = build_batch(0, [b"a", b"b"], producer_id=PID, producer_epoch=0, base_sequence=0)
    write(part / "append-batches", batch)
    write(part / "append-batches", batch)  # the producer did not hear back, and retried
    assert cat(part / "values") == "a\nb\n"
    with pytest.raises(OSError) as info:  # sequence 5 after 1: out of order
        write(part / "append-batches", build_batch(0, [b"c"], producer_id=PID,
                                                   producer_epoch=0, base_sequence=5))
    assert info.value.errno == errno.EINVAL
    assert cat(part / "values") == "a\nb\n"
