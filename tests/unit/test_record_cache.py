"""``storage.record_cache.RecordCache``: least recently used out first, past its entry count
or its byte estimate, the newest entry kept however large."""

from __future__ import annotations

from types import SimpleNamespace

from storage.record_cache import RECORD_COST, RecordCache, record_cost, records_cost


def cache(max_entries=10, max_bytes=100):
    return RecordCache(max_entries, max_bytes, len)  # a value's cost: its length


def keys(c):
    return [k for k in "abcdefghij" if c.get(k) is not None]


def test_at_the_entry_bound_nothing_goes_one_past_it_the_oldest_does():
    c = cache(max_entries=3)
    for k in "abc":
        c.put(k, b"x")
    assert keys(c) == ["a", "b", "c"]
    c.get("a")  # now the most recently used
    c.put("d", b"x")
    assert keys(c) == ["a", "c", "d"]


def test_at_the_byte_bound_nothing_goes_one_past_it_the_oldest_does():
    c = cache(max_bytes=10)
    c.put("a", b"x" * 4)
    c.put("b", b"x" * 6)  # 10 bytes: at the bound
    assert keys(c) == ["a", "b"]
    c.put("c", b"x")  # 11: the oldest goes
    assert keys(c) == ["b", "c"]
    c.put("d", b"x" * 50)  # larger than the bound alone: the newest stays, alone
    assert keys(c) == ["d"]


def test_a_replaced_or_dropped_entry_no_longer_counts():
    c = cache(max_bytes=10)
    c.put("a", b"x" * 8)
    c.put("a", b"x" * 2)  # replaces 8 bytes by 2
    c.put("b", b"x" * 8)  # 10 in all
    assert keys(c) == ["a", "b"]
    c.drop(lambda k: k == "b")
    c.put("c", b"x" * 8)  # 10 again
    assert keys(c) == ["a", "c"]
    c.clear()
    c.put("d", b"x" * 10)
    c.put("e", b"")
    assert keys(c) == ["d", "e"]


def test_record_cost_counts_key_and_value():
    record = SimpleNamespace(key=b"kk", value=b"vvv")
    assert record_cost(record) == RECORD_COST + 5
    assert record_cost(SimpleNamespace(key=None, value=None)) == RECORD_COST
    assert records_cost([record, record]) == 2 * (RECORD_COST + 5)
