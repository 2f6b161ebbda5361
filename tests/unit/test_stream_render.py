"""The compiled stream renderer (``ColumnBuilder.render``, which ``kfs dump --json`` uses too)
against Python's json module and the record path: ``values`` lines as kafka-console-consumer
prints them, ``records.jsonl`` as ``json.dumps`` of kcat ``-J``'s fields."""

import json
from array import array

from hypothesis import given, strategies as st

from helpers.records import PROPERTY, json_bytes
from storage.records import build_batch, iter_batches
from storage.records.columns import ColumnBuilder
from storage.records.record import TimestampType

TEXTS = st.one_of(
    st.none(),
    st.binary(max_size=40),  # mostly not UTF-8: base64
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
       log_append=st.booleans())
def test_jsonl_is_json_dumps_of_the_kcat_fields(rows, log_append):
    values, keys, headers = zip(*rows)
    data = build_batch(7, list(values), list(keys), 1763811234567, list(headers),
                       timestamp_type=TimestampType.LOG_APPEND_TIME if log_append
                       else TimestampType.CREATE_TIME,
                       log_append_time=1763811299999 if log_append else None)
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
