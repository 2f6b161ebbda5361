"""``benchmarks/bare_fs.py`` is the ceiling the mount's figures are held against: it must make
the cache and request-size choices the mount makes, or a ratio compares two shapes."""

import importlib.util

from helpers.paths import REPO
from kfs.mount import node_attributes


def load_bare_fs():
    spec = importlib.util.spec_from_file_location("bare_fs", REPO / "benchmarks" / "bare_fs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bare_fs_answers_with_the_mounts_timeouts_and_block_size():
    bare = load_bare_fs()
    fs = bare.BareFs(n_files=1, size=100, dir_timeout=node_attributes.DIR_TIMEOUT, stream_bytes=100)
    record = fs._attr_of(bare.FIRST_FILE)
    assert (record.entry_timeout, record.attr_timeout) == (node_attributes.RECORD_TIMEOUT,) * 2
    stream = fs._attr_of(bare.STREAM)
    assert stream.attr_timeout == 0
    assert stream.st_blksize == node_attributes.STREAM_BLKSIZE  # cat's and grep's read size
