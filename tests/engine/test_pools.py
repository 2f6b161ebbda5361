"""Pools owned by what uses them: a ``LogManager`` bounds the ``.log`` descriptors of its own
logs (``storage.open_files``), so one directory's reader neither closes another's descriptors
nor is bounded by it; the process's ``StorePool`` (``storage.remote.store_pool``) keeps the
stores and metadata folds last used, within its bounds."""

import os
import shutil
from pathlib import Path

import pytest

from helpers.paths import KAFKA_WRITTEN
from storage import LogManager
from storage.remote.store_pool import StorePool

needs_fixtures = pytest.mark.needs_fixture("kafka-written")

LIMIT = 3  # KFS_OPEN_FILES: fewer than the fixture's segments


def open_logs(manager: LogManager) -> set[str]:
    """The ``.log`` files of ``manager``'s directory this process holds open."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # (closed meanwhile: the listing's own descriptor)
            continue
        if target.suffix == ".log" and target.parent.parent == manager.dir.resolve():
            found.add(str(target))
    return found


def read_everything(manager: LogManager) -> int:
    return sum(len(batch) for name in manager.partition_names()
               for batch in manager.get(name).reader.record_lists(0))


@needs_fixtures
def test_each_log_manager_bounds_the_descriptors_of_its_own_logs(tmp_path, monkeypatch):
    monkeypatch.setenv("KFS_OPEN_FILES", str(LIMIT))
    for name in "ab":  # (copies: no other reader of the fixture holds their files)
        shutil.copytree(KAFKA_WRITTEN, tmp_path / name)
    first = LogManager(tmp_path / "a", read_only=True)
    second = LogManager(tmp_path / "b", read_only=True)
    try:
        assert read_everything(first) > 0
        held = open_logs(first)
        assert 0 < len(held) <= LIMIT
        assert read_everything(second) > 0
        # the second directory's reads are bounded by its own pool and leave the first's open
        assert 0 < len(open_logs(second)) <= LIMIT
        assert open_logs(first) == held
        assert {id(first.get(n).files) for n in first.partition_names()} == {id(first.files)}
    finally:
        first.close()
    assert open_logs(first) == set()
    second.close()


def test_the_store_pool_keeps_the_stores_last_used(tmp_path):
    pool = StorePool(stores=2)
    a, b, c = ((tmp_path / n).as_uri() for n in "abc")
    try:
        kept_a, kept_b = pool.store(a), pool.store(b)
        assert pool.store(a) is kept_a and kept_a.pooled
        kept_a.close()  # (a reader done: the store stays for the next one)
        pool.store(c)  # b is the least recently used: let go
        assert pool.store(a) is kept_a
        assert pool.store(b) is not kept_b
    finally:
        pool.close()


def test_a_fold_is_read_again_only_when_its_files_changed_or_it_was_let_go():
    pool = StorePool(folds=1)
    reads = []

    def read():
        reads.append(None)
        return len(reads)

    assert [pool.fold("d", "v1", read), pool.fold("d", "v1", read)] == [1, 1]
    assert pool.fold("d", "v2", read) == 2  # (a file of it changed)
    assert pool.fold("e", "v1", read) == 3
    assert pool.fold("d", "v2", read) == 4  # (one fold kept: d was let go)
