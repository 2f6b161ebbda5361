"""The compiled stream renderer (``ColumnBuilder.render``, which ``kfs dump --json`` uses too)
against Python's json module and the record path: ``values`` lines as kafka-console-consumer
prints them, ``records.jsonl`` as ``json.dumps`` of kcat ``-J``'s fields."""

import json
from array import array

import pytest
from crc32c import crc32c
from hypothesis import given, strategies as st

from helpers.records import PROPERTY, json_bytes
from storage.errors import CorruptRecordError
from storage.records import build_batch, iter_batches
from storage.records.columns import ColumnBuilder
from storage.records.compression import CompressionType, decompress
from storage.records.control import ControlRecordType, build_control_batch
from storage.records.record import TimestampType
from storage.records._c.columns import isal_crc32c

TEXTS = st.one_of(
    st.none(),
    st.binary(max_size=40),  # mostly not UTF-8: base64
    # ASCII with what JSON escapes anywhere in it (the renderer looks 8 bytes at a time)
    st.text(st.sampled_from('ab"\\\x00\x1f\x7f\n'), max_size=70).map(str.encode),
    st.text(max_size=30).map(lambda t: t.encode("utf-8", "surrogatepass")),  # lone surrogates
    st.sampled_from([b"", b'"\\\n\r\t\x08\x0c\x00\x1f\x7f', "h\u00e9\u2028\U0001f600".encode()]),
)
HEADERS = st.lists(st.tuples(st.text(max_size=8), TEXTS), max_size=3)


def expected_line(prefix: dict, record) -> str:
    obj = dict(prefix, offset=record.offset)
    if record.timestamp_type in (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME):
        obj["tstype"] = "create" if record.timestamp_type == TimestampType.CREATE_TIME \
            else "logappend"
        obj["ts"] = record.timestamp
    obj["headers"] = [item for k, v in record.headers for item in (k, json_bytes(v))]
    obj["key"] = json_bytes(record.key)
    obj["payload"] = json_bytes(record.value)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n"


def rendered(data: bytes, jsonl: bool, prefix: bytes = b"", values_text: bool = False,
             start: int = 0, end: int = 1 << 62):
    builder = ColumnBuilder(not values_text, values_text=values_text)
    for batch in iter_batches(data):
        batch.add_to(builder, start, end)
    text, ends, offsets = builder.render(jsonl, prefix)
    return bytes(text), array("q", bytes(ends)), array("q", bytes(offsets))


@PROPERTY
@given(rows=st.lists(st.tuples(TEXTS, TEXTS, HEADERS), min_size=1, max_size=20),
       log_append=st.booleans(), base_offset=st.integers(0, 2**62 - 2**31),
       timestamp=st.integers(-1, 2**63 - 1))  # (Kafka refuses other negative times)
def test_jsonl_is_json_dumps_of_the_kcat_fields(rows, log_append, base_offset, timestamp):
    values, keys, headers = zip(*rows)
    data = build_batch(base_offset, list(values), list(keys), timestamp, list(headers),
                       timestamp_type=TimestampType.LOG_APPEND_TIME if log_append
                       else TimestampType.CREATE_TIME,
                       log_append_time=timestamp if log_append else None)
    prefix = {"topic": "t.x", "partition": 3}
    text, ends, offsets = rendered(data, True, json.dumps(prefix, separators=(",", ":"))[:-1].encode() + b",")
    records = list(next(iter_batches(data)).records())
    lines = [expected_line(prefix, r).encode("utf-8", "surrogatepass") for r in records]
    assert text == b"".join(lines)
    assert list(ends) == [sum(map(len, lines[:i + 1])) for i in range(len(lines))]
    assert list(offsets) == [r.offset for r in records]
    for line in text.splitlines():
        json.loads(line)  # each line is JSON on its own


@PROPERTY
@given(values=st.lists(TEXTS, min_size=1, max_size=30), values_text=st.booleans(),
       window=st.tuples(st.integers(0, 35), st.integers(0, 35)))
def test_values_are_each_value_and_a_newline_null_printing_null(values, values_text, window):
    """Both ways of rendering values (from the columns, or as the records are decoded) give
    the lines of the records in [start, end) and where each ends."""
    start, end = 100 + min(window), 100 + max(window)
    data = build_batch(100, values, None, 1763811234567)
    text, ends, offsets = rendered(data, False, values_text=values_text, start=start, end=end)
    kept = [(100 + i, v) for i, v in enumerate(values) if start <= 100 + i < end]
    lines = [(b"null" if v is None else v) + b"\n" for _, v in kept]
    assert text == b"".join(lines)
    assert list(ends) == [sum(map(len, lines[:i + 1])) for i in range(len(lines))]
    assert list(offsets) == [o for o, _ in kept]


def test_values_text_builders_take_legacy_records_and_start_afresh():
    builder = ColumnBuilder(values_text=True)
    builder.add_record(5, 0, 0, b"k", b"old")
    builder.add_record(6, 0, 0, None, None)
    text, ends, offsets = builder.render(False)
    assert (bytes(text), list(array("q", bytes(ends))), list(array("q", bytes(offsets)))) \
        == (b"old\nnull\n", [4, 9], [5, 6])
    assert bytes(builder.render(False)[0]) == b""


def test_keyed_text_builders_write_key_separator_value_null_printing_null():
    builder = ColumnBuilder(values_text=True, key_separator=b" => ")
    builder.add_section(build_batch(3, [b"a", None, b"c\nd", b""],
                                    [b"k1", b"k2", None, b"\xff"])[61:], 4, 3, 0, -1)
    builder.add_record(7, 0, 0, None, b"old")
    text, ends, offsets = builder.render(False)
    lines = [b"k1 => a\n", b"k2 => null\n", b"null => c\nd\n", b"\xff => \n", b"null => old\n"]
    assert bytes(text) == b"".join(lines)
    assert list(array("q", bytes(ends))) == [sum(map(len, lines[:i + 1])) for i in range(5)]
    assert list(array("q", bytes(offsets))) == [3, 4, 5, 6, 7]
    with pytest.raises(ValueError):
        ColumnBuilder(key_separator=b"\t")  # only with values_text


@PROPERTY
@given(data=st.binary(max_size=70_000), cut=st.integers(0, 7), crc=st.integers(0, 2**32 - 1))
def test_isal_crc32c_is_the_crc32c_package(data, cut, crc):
    view = memoryview(data)[min(cut, len(data)):]  # every alignment
    assert isal_crc32c(view, crc) == crc32c(view, crc)


def python_crc(view) -> int:
    """crc32c by another function: add_run then takes every batch with the GIL (the old way)."""
    return crc32c(view)


def run_both(run: bytes, start: int, end: int, skip=None, separator=None):
    """add_run of a values_text builder the fast way (GIL released) and batch by batch:
    ``(consumed, done, text, ends, offsets)`` or the error, each way."""
    out = []
    for crc in (crc32c, python_crc):
        builder = ColumnBuilder(values_text=True, key_separator=separator)
        try:
            consumed, done = builder.add_run(run, 0, start, end, crc, decompress, skip)
        except CorruptRecordError as exc:
            out.append(("error", str(exc)))
            continue
        text, ends, offsets = builder.render(False)
        out.append((consumed, done, bytes(text), bytes(ends), bytes(offsets)))
    return out


def a_run() -> list[bytes]:
    """Plain, compressed, transactional and control batches, and one with a gap in offsets."""
    return [
        build_batch(0, [b"v%d" % i if i % 4 else None for i in range(20)], [b"k"] * 20),
        build_batch(20, [b"gz%d" % i for i in range(30)], codec=CompressionType.GZIP),
        build_batch(50, [b"t1", b"t2"], producer_id=7, producer_epoch=0, base_sequence=0,
                    is_transactional=True),
        build_control_batch(52, 7, 0, ControlRecordType.ABORT, timestamp_ms=1),
        build_batch(53, [b"a", b"b", b"c"], offset_deltas=[0, 2, 5], last_offset_delta=5),
        build_batch(59, [b"last"]),
    ]


@pytest.mark.parametrize("separator", [None, b"\t"])
@pytest.mark.parametrize("window", [(0, 1 << 62), (5, 1 << 62), (0, 25), (21, 56), (54, 59),
                                    (60, 1 << 62), (0, 50), (0, 1)])
@pytest.mark.parametrize("aborted", [False, True])
def test_text_runs_render_as_batch_by_batch(separator, window, aborted):
    """The GIL-free loop takes what it can and leaves the rest (compressed, transactional with
    a skip, control, partial) to the batch-by-batch loop: the same rows, consumed bytes and
    done flag as that loop alone, over every cut of the run."""
    run = b"".join(a_run())
    skip = (lambda producer, base: producer == 7) if aborted else None
    for cut in sorted({len(run), len(run) - 1, *range(0, len(run), 97)}):
        fast, slow = run_both(run[:cut], *window, skip, separator)
        assert fast == slow, cut


@pytest.mark.parametrize("damage", ["crc", "record", "count", "size", "magic"])
def test_text_runs_raise_as_batch_by_batch(damage):
    """Bad bytes in the GIL-free loop (under a CRC that matches, for records that do not
    parse): the same CorruptRecordError as the batch-by-batch loop."""
    first, second = a_run()[0], bytearray(build_batch(20, [b"x" * 30, b"y"]))
    if damage == "crc":
        second[-1] ^= 1
    elif damage == "record":  # a record's length claims more than the section has
        second[61] = 0x7E
    elif damage == "count":  # one record declared, two there: after a row was made
        second[57:61] = (1).to_bytes(4, "big")
    elif damage == "size":  # a batch length below the v2 header
        second[8:12] = (40).to_bytes(4, "big")
    else:
        second[16] = 3
    if damage in ("record", "count"):
        second[17:21] = crc32c(second[21:]).to_bytes(4, "big")
    fast, slow = run_both(first + bytes(second) + a_run()[-1], 0, 1 << 62)
    assert fast == slow and fast[0] == "error", fast
