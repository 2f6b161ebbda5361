"""The pool of segment descriptors (storage.open_files): files opened when first used, idle
ones closed least recently used first past the limit, one in use never closed, and a reopen
that refuses a file replaced meanwhile. Kafka keeps every FileRecords channel open and has no
such pool; the reopen check stands where Kafka's open channel would keep the old inode."""

import fcntl
import os
import stat
from pathlib import Path

import pytest

from storage.open_files import DEFAULT_LIMIT, FilePool, PooledFile


def held(tmp_path) -> set[str]:
    """The names of the files under ``tmp_path`` this process holds open."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if target.parent == tmp_path:
            found.add(target.name)
    return found


def files(tmp_path, pool, *names):
    out = []
    for name in names:
        (tmp_path / name).write_bytes(name.encode())
        out.append(PooledFile(tmp_path / name, os.O_RDONLY, pool))
    return out


def use(file):
    with file as fd:
        return os.pread(fd, 16, 0)


def test_idle_descriptors_close_least_recently_used_first(tmp_path):
    """Past the limit the descriptor used longest ago is closed; one used again is kept."""
    pool = FilePool(2)
    a, b, c = files(tmp_path, pool, "a", "b", "c")
    assert [use(a), use(b)] == [b"a", b"b"]
    assert held(tmp_path) == {"a", "b"} and pool.open_count == 2
    use(a)
    assert use(c) == b"c"
    assert held(tmp_path) == {"a", "c"} and pool.open_count == 2
    assert use(b) == b"b"  # reopened on use
    assert held(tmp_path) == {"b", "c"}


def test_a_descriptor_in_use_is_never_closed(tmp_path):
    """A file inside ``with`` keeps its descriptor past the limit; the pool shrinks back to
    the limit when the last use ends."""
    pool = FilePool(1)
    a, b = files(tmp_path, pool, "a", "b")
    with a as fd_a:
        with b:
            assert held(tmp_path) == {"a", "b"} and pool.open_count == 2
        assert held(tmp_path) == {"a"}  # b idle past the limit: closed; a in use: kept
        assert os.pread(fd_a, 1, 0) == b"a"
    assert held(tmp_path) == {"a"} and pool.open_count == 1


def test_nested_uses_of_one_file_each_count(tmp_path):
    """A file used twice at once (a reader inside another's read) stays in use until the
    outer use ends: the inner one ending does not make it idle."""
    pool = FilePool(1)
    a, b = files(tmp_path, pool, "a", "b")
    with a as fd_a:
        with a:
            pass
        use(b)  # past the limit: only b, idle, may be closed
        assert os.pread(fd_a, 1, 0) == b"a"
        assert held(tmp_path) == {"a"}


def test_a_pool_at_its_limit_closes_nothing(tmp_path):
    """Exactly ``limit`` idle descriptors stay open."""
    pool = FilePool(3)
    for file in files(tmp_path, pool, "a", "b", "c"):
        use(file)
    assert held(tmp_path) == {"a", "b", "c"}


def test_the_limit_comes_from_kfs_open_files(monkeypatch):
    """KFS_OPEN_FILES sets the default limit; without it DEFAULT_LIMIT (512)."""
    monkeypatch.delenv("KFS_OPEN_FILES", raising=False)
    assert FilePool().limit == DEFAULT_LIMIT == 512
    monkeypatch.setenv("KFS_OPEN_FILES", "7")
    assert FilePool().limit == 7 and FilePool(3).limit == 3


def test_a_file_alone_keeps_one_descriptor(tmp_path):
    """Without a pool a file gets its own of one descriptor: open while idle, not shared."""
    a, b = files(tmp_path, None, "a", "b")
    use(a)
    use(b)
    assert held(tmp_path) == {"a", "b"}


def test_first_open_creates_the_file_0644_with_close_on_exec(tmp_path):
    """A new segment file is created 0644 (less the umask) on its first open, and its
    descriptor is not inherited by a child process."""
    old = os.umask(0o022)
    try:
        file = PooledFile(tmp_path / "new.log", os.O_RDWR | os.O_CREAT, FilePool(2))
        file.open_now()
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "new.log").stat().st_mode) == 0o644
    with file as fd:
        assert fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC
    assert held(tmp_path) == {"new.log"}  # opened now, kept open
    file.close()


def test_open_now_surfaces_a_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        PooledFile(tmp_path / "missing", os.O_RDONLY, FilePool(2)).open_now()


def test_a_reopen_never_creates_a_file_deleted_meanwhile(tmp_path):
    """The first open may create (O_CREAT); a reopen after another process deleted the file
    raises FileNotFoundError and creates nothing."""
    pool = FilePool(1)
    a = PooledFile(tmp_path / "a", os.O_RDWR | os.O_CREAT, pool)
    (b,) = files(tmp_path, pool, "b")
    use(a)
    use(b)  # a closed as idle
    (tmp_path / "a").unlink()
    with pytest.raises(FileNotFoundError):
        use(a)
    assert not (tmp_path / "a").exists()


def test_a_reopen_refuses_a_file_replaced_under_the_same_name(tmp_path):
    """A cleaner's swap puts new bytes under the old name: serving them would be wrong, so the
    reopen raises FileNotFoundError and keeps no descriptor; an unchanged file reopens."""
    pool = FilePool(1)
    a, b = files(tmp_path, pool, "a", "b")
    use(a)
    use(b)
    assert use(a) == b"a"  # reopened: the same file
    use(b)
    (tmp_path / "a.new").write_bytes(b"other")
    os.replace(tmp_path / "a.new", tmp_path / "a")
    with pytest.raises(FileNotFoundError, match="a was replaced by another file"):
        use(a)
    assert held(tmp_path) == {"b"}


def test_is_same_file(tmp_path):
    """Whether a path names the file read: the same inode, not the same name."""
    pool = FilePool(2)
    a, b = files(tmp_path, pool, "a", "b")
    use(a)
    assert a.is_same_file(tmp_path / "a")
    os.link(tmp_path / "a", tmp_path / "a-link")
    assert a.is_same_file(tmp_path / "a-link")
    assert not a.is_same_file(tmp_path / "b")
    assert not a.is_same_file(tmp_path / "missing")


def test_a_closed_file_is_closed_for_good(tmp_path):
    """close() drops the descriptor and the pool's count; a later use raises ValueError."""
    pool = FilePool(2)
    a, b = files(tmp_path, pool, "a", "b")
    use(a)
    use(b)
    a.close()
    assert held(tmp_path) == {"b"} and pool.open_count == 1
    with pytest.raises(ValueError, match="closed"):
        use(a)
    a.close()
    b.close()
    assert held(tmp_path) == set() and pool.open_count == 0
