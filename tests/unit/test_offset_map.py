"""The cleaner's key -> offset map (Kafka's SkimpyOffsetMap) and the compiled MD5 it hashes keys
with, held to hashlib's."""

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.offset_map import SkimpyOffsetMap, md5_digest


@given(st.binary(max_size=300))
@settings(max_examples=400, deadline=None)
def test_md5_is_hashlibs(data):
    assert md5_digest(data) == hashlib.md5(data).digest()


@pytest.mark.parametrize("size", [0, 55, 56, 63, 64, 65, 119, 120, 128, 1 << 20])
def test_md5_at_block_edges(size):
    data = bytes(range(256)) * (size // 256 + 1)
    assert md5_digest(data[:size]) == hashlib.md5(data[:size]).digest()


def test_put_get_and_overwrite():
    m = SkimpyOffsetMap(24 * 100)
    assert m.slots == 100 and m.size == 0 and m.latest_offset == -1
    for i in range(90):
        m.put(b"key-%d" % i, i)
    m.put(b"key-3", 500)
    assert m.size == 90  # an overwrite adds no entry
    assert m.get(b"key-3") == 500 and m.get(b"key-89") == 89 and m.get(b"absent") == -1
    assert m.latest_offset == 500
    assert m.utilization == pytest.approx(0.9)


def test_full_map_refuses_puts_and_finds_absent_ones():
    m = SkimpyOffsetMap(24 * 8)
    for i in range(8):
        m.put(b"%d" % i, i)
    with pytest.raises(ValueError, match="full offset map"):
        m.put(b"new", 9)
    with pytest.raises(ValueError):  # as Kafka: a full map takes no put at all
        m.put(b"3", 33)
    assert m.get(b"3") == 3 and m.get(b"new") == -1


def test_clear_forgets_everything():
    m = SkimpyOffsetMap(24 * 10)
    m.put(b"a", 1)
    m.update_latest_offset(77)
    assert m.latest_offset == 77
    m.clear()
    assert m.size == 0 and m.get(b"a") == -1 and m.latest_offset == -1


def test_too_small_a_map_is_refused():
    with pytest.raises(ValueError):
        SkimpyOffsetMap(23)
