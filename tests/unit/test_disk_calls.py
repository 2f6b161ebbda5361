"""The engine's calls that change bytes on disk (storage.disk_calls), and the plan that fails
them: which call a plan fails (the Nth over every call, or the Nth of one name), once or from
then on, what the failure says, and the spec ``KFS_FAULTS`` arms a process with (SQLite's
I/O-error tests, LevelDB's ``FaultInjectionEnv``; Kafka's ``Utils.flushDir`` and
``Utils.writeFully`` for the two helpers)."""

import errno
import logging
import os

import pytest

from storage import disk_calls
from storage.disk_calls import Faults


@pytest.fixture
def armed():
    """Arm a plan for the test; always disarmed after it."""
    def arm(*args, **kwargs):
        plan = Faults(*args, **kwargs)
        disk_calls.inject(plan)
        return plan
    yield arm
    disk_calls.remove()


@pytest.fixture
def fd(tmp_path):
    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT)
    yield fd
    os.close(fd)


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


# -- the helpers ------------------------------------------------------------------------------

def test_write_all_continues_a_short_write(fd, monkeypatch):
    """Utils.writeFully: a write that took only part of the bytes is followed by one for the
    rest, until every byte is written, in order."""
    sizes = []

    def short_write(fd, data):
        sizes.append(len(data))
        return os.write(fd, bytes(data[:3]))

    monkeypatch.setattr(disk_calls, "write", short_write)
    disk_calls.write_all(fd, b"abcdefgh")
    assert os.pread(fd, 100, 0) == b"abcdefgh"
    assert sizes == [8, 5, 2]
    disk_calls.write_all(fd, b"")
    assert sizes == [8, 5, 2]  # nothing to write: no call


def test_fsync_directory_syncs_the_directory_and_closes_it(tmp_path, armed):
    """Utils.flushDir: the directory's own descriptor is synced (``dir_fsync``), and closed
    whether the sync worked or not."""
    plan = armed()
    before = open_fds()
    disk_calls.fsync_directory(tmp_path)
    assert plan.calls == ["dir_fsync"]
    assert open_fds() == before
    plan = armed(1)
    with pytest.raises(OSError) as err:
        disk_calls.fsync_directory(tmp_path)
    assert err.value.errno == errno.EIO and plan.failed == [(1, "dir_fsync")]
    assert open_fds() == before


def test_fsync_directory_refuses_a_file(tmp_path):
    """It opens ``O_DIRECTORY``: a path that is no directory is an error, not a file synced
    in its place."""
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(NotADirectoryError):
        disk_calls.fsync_directory(tmp_path / "f")


# -- arming and disarming -----------------------------------------------------------------------

def test_inject_routes_every_call_through_the_plan_until_removed(fd, armed):
    plan = armed()
    assert disk_calls.active() is plan
    for name in disk_calls.CALLS:
        wrapped = getattr(disk_calls, name)
        assert wrapped is not disk_calls._ORIGINAL[name] and wrapped.__name__ == name
    disk_calls.write(fd, b"ab")
    disk_calls.pwrite(fd, b"c", 2)
    disk_calls.fsync(fd)
    disk_calls.ftruncate(fd, 1)
    assert plan.calls == ["write", "pwrite", "fsync", "ftruncate"] and plan.failed == []
    assert os.pread(fd, 10, 0) == b"a"  # each call did what its os namesake does
    disk_calls.remove()
    assert disk_calls.active() is None
    for name in disk_calls.CALLS:
        assert getattr(disk_calls, name) is disk_calls._ORIGINAL[name]
    disk_calls.write(fd, b"x")
    assert plan.calls == ["write", "pwrite", "fsync", "ftruncate"]  # no longer counted


def test_a_wrapper_left_behind_after_removal_counts_nothing(fd, armed):
    """A wrapper a caller took before :func:`remove` (``from disk_calls import write``) goes
    straight to the os call once the plan is gone."""
    plan = armed(1, persist=True)
    write = disk_calls.write
    disk_calls.remove()
    assert write(fd, b"ok") == 2
    assert plan.calls == [] and plan.failed == []


# -- which call a plan fails --------------------------------------------------------------------

def test_the_nth_call_fails_once_counted_over_every_call(fd, armed, caplog):
    plan = armed(3)
    disk_calls.write(fd, b"1")
    disk_calls.fsync(fd)
    with caplog.at_level(logging.WARNING, logger="storage.disk_calls"):
        with pytest.raises(OSError) as err:
            disk_calls.write(fd, b"2")
    assert err.value.errno == errno.EIO
    assert err.value.strerror == f"{os.strerror(errno.EIO)} (injected: write call 3)"
    assert caplog.messages == ["injected fault: write (call 3) fails with EIO"]
    disk_calls.write(fd, b"3")  # once: the 4th goes through
    disk_calls.fsync(fd)
    assert plan.calls == ["write", "fsync", "write", "write", "fsync"]
    assert plan.failed == [(3, "write")]
    assert os.pread(fd, 10, 0) == b"13"


def test_the_first_call_can_fail(fd, armed):
    plan = armed(1)
    with pytest.raises(OSError):
        disk_calls.pwrite(fd, b"x", 0)
    disk_calls.pwrite(fd, b"y", 0)
    assert plan.failed == [(1, "pwrite")] and os.pread(fd, 10, 0) == b"y"


def test_a_persistent_fault_fails_every_later_call(fd, armed):
    """A dead disk: the Nth call and every one after it fail, the ones before do not."""
    plan = armed(2, errno.EIO, True)
    disk_calls.write(fd, b"1")
    for call in (lambda: disk_calls.write(fd, b"2"), lambda: disk_calls.fsync(fd),
                 lambda: disk_calls.ftruncate(fd, 0)):
        with pytest.raises(OSError) as err:
            call()
        assert err.value.errno == errno.EIO
    assert plan.failed == [(2, "write"), (3, "fsync"), (4, "ftruncate")]
    assert os.pread(fd, 10, 0) == b"1"


def test_a_fault_of_one_call_counts_that_call_only(fd, armed):
    """``fsync:2``: the second fsync fails, whatever came between; its number in the message
    is over every call."""
    plan = armed(2, call="fsync")
    disk_calls.fsync(fd)
    disk_calls.write(fd, b"a")
    disk_calls.write(fd, b"b")  # the 2nd call, and the 3rd: not fsyncs
    with pytest.raises(OSError) as err:
        disk_calls.fsync(fd)
    assert "(injected: fsync call 4)" in err.value.strerror
    disk_calls.write(fd, b"c")
    disk_calls.fsync(fd)  # once
    assert plan.failed == [(4, "fsync")]
    assert plan.calls == ["fsync", "write", "write", "fsync", "write", "fsync"]


def test_a_persistent_fault_of_one_call_spares_the_others(fd, armed):
    plan = armed(1, errno.EIO, True, "fdatasync")
    disk_calls.write(fd, b"a")
    for _ in range(2):
        with pytest.raises(OSError):
            disk_calls.fdatasync(fd)
        disk_calls.fsync(fd)
    assert plan.failed == [(2, "fdatasync"), (4, "fdatasync")]


def test_a_plan_without_n_only_counts(fd, armed):
    plan = armed(None, errno.EIO, True, "write")
    for _ in range(3):
        disk_calls.write(fd, b"x")
    assert plan.calls == ["write"] * 3 and plan.failed == []


@pytest.mark.parametrize("call", ["truncate", "ftruncate"])
def test_a_full_disk_spares_truncates_a_dead_one_does_not(tmp_path, fd, armed, call):
    """Making a file shorter needs no space (the kernel never says ENOSPC to it): a workload
    can take bytes back when the disk is full, not when it is dead."""
    os.write(fd, b"abcdef")
    cut = {"truncate": lambda n: disk_calls.truncate(tmp_path / "f", n),
           "ftruncate": lambda n: disk_calls.ftruncate(fd, n)}[call]
    plan = armed(1, errno.ENOSPC, True)
    cut(4)
    assert plan.failed == [] and os.fstat(fd).st_size == 4
    with pytest.raises(OSError) as err:
        disk_calls.write(fd, b"x")
    assert err.value.errno == errno.ENOSPC
    plan = armed(1, errno.EIO, True)
    with pytest.raises(OSError) as err:
        cut(2)
    assert err.value.errno == errno.EIO and os.fstat(fd).st_size == 4
    assert plan.failed == [(1, call)]


# -- KFS_FAULTS ---------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, plan", [
    ("7:EIO", Faults(7, errno.EIO, False, None)),
    ("3:ENOSPC:persist", Faults(3, errno.ENOSPC, True, None)),
    ("fsync:1:EIO", Faults(1, errno.EIO, False, "fsync")),
    ("posix_fallocate:12:ENOSPC:persist", Faults(12, errno.ENOSPC, True, "posix_fallocate")),
    ("0:EIO", Faults(0, errno.EIO, False, None)),
])
def test_a_spec_is_parsed(spec, plan):
    got = disk_calls.parse(spec)
    assert (got.nth, got.error, got.persist, got.call) == \
        (plan.nth, plan.error, plan.persist, plan.call)
    assert got.calls == [] and got.failed == []


@pytest.mark.parametrize("spec", [
    "", "x", "7", "EIO", "7:EIO:persist:again", "7:EIO:forever", "7:EBADF", "7:eio", "-1:EIO",
    "x:EIO", "1.5:EIO", "fsync:EIO", "fsync:1", "fsync", "open:1:EIO", "fsync:fsync:1:EIO",
    "1:EIO:", ":1:EIO",
])
def test_a_malformed_spec_is_refused(spec):
    with pytest.raises(ValueError) as err:
        disk_calls.parse(spec)
    assert str(err.value) == (f"KFS_FAULTS={spec!r}: expected [CALL:]N:EIO or "
                              "[CALL:]N:ENOSPC, optionally :persist")


def test_a_parsed_spec_fails_the_call_it_names(fd, armed):
    plan = disk_calls.parse("write:2:ENOSPC")
    disk_calls.inject(plan)
    try:
        disk_calls.fsync(fd)
        disk_calls.write(fd, b"a")
        with pytest.raises(OSError) as err:
            disk_calls.write(fd, b"b")
        assert err.value.errno == errno.ENOSPC
    finally:
        disk_calls.remove()
    assert plan.failed == [(3, "write")]
