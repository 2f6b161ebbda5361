"""The backing directory's ``.lock`` (storage.file_lock), as Kafka's FileLock and its
LogManager's "directory is in use" check: one writer per directory, a timeout on the injected
clock (Kafka's MockTime), a POSIX-lock holder (a running broker) named, and a read-only probe."""

import fcntl
import os
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from storage import file_lock
from storage.clock import Clock
from storage.errors import LogDirLockedError
from storage.file_lock import FileLock, _POLL_S, _posix_holder, _process_name, held_elsewhere


class StepClock(Clock):
    """A mock clock: each sleep is recorded and advances monotonic time by one 0.25 s tick at
    once (no wall time; exact in binary, so a deadline is met exactly)."""

    def __init__(self):
        self.now = 1000.0
        self.sleeps = []

    def milliseconds(self):
        return int(self.now * 1000)

    def monotonic(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += 0.25


def test_a_second_lock_in_the_same_process_is_refused_until_released(tmp_path):
    """Kafka's FileLock.tryLock is exclusive; an OFD lock also conflicts within one process,
    so a second LogManager on the same directory is refused; release is idempotent."""
    first = FileLock(tmp_path)
    with pytest.raises(LogDirLockedError) as refused:
        FileLock(tmp_path)
    assert str(tmp_path / ".lock") in str(refused.value) and "--read-only" in str(refused.value)
    clock = StepClock()
    with pytest.raises(LogDirLockedError):
        FileLock(tmp_path, clock=clock)  # no timeout by default: refused without waiting
    assert clock.sleeps == []
    first.release()
    first.release()
    os.fstat(1)  # the second release closed nothing (stdout stays open)
    FileLock(tmp_path).release()


def test_the_lock_file_is_created_rw_r__r__(tmp_path):
    """.lock is created 0644 (less the umask), as the JVM creates Kafka's."""
    old = os.umask(0o022)
    try:
        FileLock(tmp_path).release()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / ".lock").stat().st_mode) == 0o644


@pytest.mark.parametrize("start,length", [(0, 1), (1, 0)])
def test_the_lock_covers_the_whole_file(tmp_path, start, length):
    """Kafka's FileChannel.tryLock locks the whole file: a POSIX lock on any part of .lock (its
    first byte only, or everything after it) conflicts with kfs's, and the probe sees it. The
    POSIX lock is another process's (closing any fd of the file drops this process's own)."""
    script = ("import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
              f"fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, {length}, {start}); "
              "print('locked', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / ".lock")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"locked\n"
        assert held_elsewhere(tmp_path) is True
        with pytest.raises(LogDirLockedError) as refused:
            FileLock(tmp_path)
        assert f"process {holder.pid} " in str(refused.value)
    finally:
        holder.stdin.close()
        holder.wait()
        holder.stdout.close()
    assert held_elsewhere(tmp_path) is False


def test_a_broker_running_as_pid_1_is_named(tmp_path, monkeypatch):
    """A broker in a container is often PID 1: a POSIX holder is any positive pid (an OFD
    holder reports -1)."""
    def getlk(fd, cmd, arg):
        return struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 1)
    monkeypatch.setattr(file_lock.fcntl, "fcntl", getlk)
    assert _posix_holder(0) == 1


def test_waiting_for_the_lock_polls_the_clock_until_the_timeout(tmp_path):
    """With a timeout the lock is retried every poll interval of the injected clock and refused
    once the clock reaches the deadline (no wall-clock sleep)."""
    holder = FileLock(tmp_path)
    clock = StepClock()
    with pytest.raises(LogDirLockedError):
        FileLock(tmp_path, timeout_s=1.0, clock=clock)
    assert clock.sleeps == [_POLL_S] * 4  # refused when the clock reaches the deadline
    assert clock.now == 1001.0
    holder.release()
    clock = StepClock()
    FileLock(tmp_path, timeout_s=1.0, clock=clock).release()
    assert clock.sleeps == []  # a free lock is taken at once


def test_a_lock_released_while_waiting_is_taken(tmp_path):
    """A waiter takes the lock as soon as the holder releases it within the timeout."""
    holder = FileLock(tmp_path)

    class ReleasingClock(StepClock):
        def sleep(self, seconds):
            super().sleep(seconds)
            if len(self.sleeps) == 2:
                holder.release()

    clock = ReleasingClock()
    FileLock(tmp_path, timeout_s=10.0, clock=clock).release()
    assert clock.sleeps == [_POLL_S, _POLL_S]


def test_held_elsewhere_asks_without_taking_or_creating_the_lock(tmp_path):
    """`kfs retention` plans beside a writer: the probe sees a held lock, a released one, and
    no lock file at all (which it must not create)."""
    assert held_elsewhere(tmp_path) is False
    assert not (tmp_path / ".lock").exists()
    lock = FileLock(tmp_path)
    assert held_elsewhere(tmp_path) is True
    lock.release()
    assert held_elsewhere(tmp_path) is False
    FileLock(tmp_path).release()  # the probe left nothing held


def test_a_posix_lock_holder_is_refused_at_once_and_named(tmp_path):
    """A Kafka broker holds .lock with FileChannel.tryLock (a POSIX lock): kfs names the
    process and does not wait for it, whatever the timeout."""
    fd = os.open(tmp_path / ".lock", os.O_RDWR | os.O_CREAT)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        clock = StepClock()
        with pytest.raises(LogDirLockedError) as refused:
            FileLock(tmp_path, timeout_s=60.0, clock=clock)
        assert clock.sleeps == []
        assert f"process {os.getpid()} ({_process_name(os.getpid())})" in str(refused.value)
        assert "with a POSIX lock" in str(refused.value)
    finally:
        os.close(fd)


def test_a_kfs_writer_is_not_mistaken_for_a_posix_holder(tmp_path):
    """An OFD holder (another kfs writer) is waited for, not refused at once as a broker."""
    holder = FileLock(tmp_path)
    clock = StepClock()
    with pytest.raises(LogDirLockedError) as refused:
        FileLock(tmp_path, timeout_s=0.25, clock=clock)
    assert "POSIX" not in str(refused.value) and clock.sleeps == [_POLL_S]
    holder.release()


def test_process_name_is_a_java_main_class_or_the_command(tmp_path, monkeypatch):
    """The holder is named as `ps`/`jps` would: a JVM by its main class (kafka.Kafka), skipping
    options, class paths and files; anything else by its command; a gone one as gone. The
    command lines are /proc/PID/cmdline files of a stand-in /proc."""
    commands = {
        11: ["/usr/lib/jvm/bin/java", "-Xmx1g", "-cp", "/opt/kafka/libs/*:x.jar",
             "kafka.Kafka", "config/server.properties"],
        12: ["java", "-server", "-Dkafka.logs.dir=/var/log", "-cp", "a.jar:b.jar"],
        16: ["java", "-Dkafka.logs.dir=logs", "-cp", "libs/kafka.jar", "kafka.Kafka"],
        17: ["java", "kafka.Kafka", "server.properties"],
        13: ["/usr/bin/python3", "-m", "kfs.mount"],
        14: [],
    }
    for pid, argv in commands.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
    monkeypatch.setattr(file_lock, "Path",
                        lambda p: Path(p.replace("/proc", str(tmp_path), 1)))
    assert [_process_name(pid) for pid in (11, 12, 13, 14, 15, 16, 17)] == [
        "kafka.Kafka", "java", "python3", "?", "gone", "kafka.Kafka", "kafka.Kafka"]
