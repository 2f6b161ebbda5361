"""Unit tests of kfs.mount.append: lines and keys out of write() chunks (no FUSE, no disk)."""

import json
import random

import pytest

from helpers.records import EXAMPLE_2_7, EXAMPLE_2_8
from kfs.mount.append import (AbandonedLineError, BatchFramer, InvalidJsonLineError,
                              JsonLinePrefix, LineFramer, PartialBatchError, json_records,
                              parse_separator)


def lines_of(fed) -> list[bytes]:
    """The lines of what ``LineFramer.feed`` returns (bytes-like: whole lines, each ending in
    a newline)."""
    fed = bytes(fed)
    assert fed == b"" or fed.endswith(b"\n")
    return fed.split(b"\n")[:-1]


def frame(chunks):
    framer = LineFramer()
    lines = []
    for chunk in chunks:
        lines.extend(lines_of(framer.feed(chunk)))
    tail = framer.finish()
    return lines, tail


def test_one_line_per_newline_without_the_newline():
    assert frame([b"hello\n"]) == ([b"hello"], None)
    assert frame([b"a\nb\nc\n"]) == ([b"a", b"b", b"c"], None)


def test_empty_lines_are_empty_records():
    assert frame([b"\n\nx\n"]) == ([b"", b"", b"x"], None)


def test_carriage_return_is_kept():
    assert frame([b"a\r\n"]) == ([b"a\r"], None)


def test_trailing_partial_line_comes_from_finish():
    assert frame([b"x\ny"]) == ([b"x"], b"y")
    assert frame([b"no newline at all"]) == ([], b"no newline at all")


def test_finish_empties_the_framer():
    framer = LineFramer()
    framer.feed(b"abc")
    assert framer.finish() == b"abc"
    assert framer.finish() is None
    assert framer.pending_len == 0


def test_line_spanning_chunks_split_anywhere():
    data = b"first line\nsecond\n\nthird one is longer than the rest\nlast"
    expected = data.split(b"\n")
    for cut_a in range(len(data) + 1):
        for cut_b in range(cut_a, len(data) + 1, 5):
            lines, tail = frame([data[:cut_a], data[cut_a:cut_b], data[cut_b:]])
            assert lines == expected[:-1], (cut_a, cut_b)
            assert tail == expected[-1]


def test_line_spanning_many_chunks():
    lines, tail = frame([b"x"] * 10000 + [b"\n", b"y"])
    assert lines == [b"x" * 10000]
    assert tail == b"y"


def test_random_chunkings_match_split():
    rng = random.Random(7)
    data = b"".join(rng.choice([b"\n", b"ab", b"c", b"\xff\x00", b"\n\n"]) for _ in range(3000))
    expected = data.split(b"\n")
    for _ in range(50):
        chunks, pos = [], 0
        while pos < len(data):
            step = rng.randint(0, 40)
            chunks.append(data[pos:pos + step])
            pos += step
        lines, tail = frame(chunks)
        assert lines == expected[:-1]
        assert tail == (expected[-1] or None)


def test_pending_len_counts_the_partial_line():
    framer = LineFramer()
    framer.feed(b"abc")
    framer.feed(b"de")
    assert framer.pending_len == 5
    framer.feed(b"f\ngh")
    assert framer.pending_len == 2


def test_abandon_drops_the_partial_line_and_the_chunks_lines():
    framer = LineFramer()
    assert lines_of(framer.feed(b"par")) == []
    assert lines_of(framer.feed(b"tial\nnext\n")) == [b"partial", b"next"]
    framer.abandon(b"tial\nnext\n")  # storing them failed; the chunk ended a line
    assert not framer.abandoned
    assert lines_of(framer.feed(b"fresh\n")) == [b"fresh"]
    assert framer.finish() is None


def test_abandon_mid_line_refuses_the_rest_of_that_line():
    framer = LineFramer()
    framer.feed(b"head-of-a-long-line")
    framer.abandon(b"-more")  # the write that made it too long failed
    assert framer.abandoned
    with pytest.raises(AbandonedLineError):
        framer.feed(b"still the same line")
    assert framer.abandoned
    with pytest.raises(AbandonedLineError):  # ends the line, and is refused too
        framer.feed(b"end of it\nand a good one\n")
    assert not framer.abandoned
    assert lines_of(framer.feed(b"accepted again\n")) == [b"accepted again"]
    assert framer.finish() is None


def test_nothing_of_an_abandoned_line_comes_out_of_finish():
    framer = LineFramer()
    framer.feed(b"a partial line")
    framer.abandon(b" that failed")
    assert framer.pending_len == 0
    assert framer.finish() is None  # close: the abandoned line is gone, not stored in pieces
    # Another descriptor of the same open file may still continue that line.
    assert framer.abandoned
    with pytest.raises(AbandonedLineError):
        framer.feed(b"\n")
    assert lines_of(framer.feed(b"x\n")) == [b"x"]


def test_abandon_of_a_chunk_with_a_new_partial_tail_refuses_its_continuation():
    framer = LineFramer()
    framer.feed(b"good\nbad-tail")
    framer.abandon(b"good\nbad-tail")
    with pytest.raises(AbandonedLineError):
        framer.feed(b"-continued\n")
    assert lines_of(framer.feed(b"ok\n")) == [b"ok"]


def test_framer_accepts_memoryview_and_bytearray():
    framer = LineFramer()
    assert lines_of(framer.feed(memoryview(b"a\nb"))) == [b"a"]
    assert lines_of(framer.feed(bytearray(b"c\n"))) == [b"bc"]


def test_128k_chunks_of_100_byte_lines_stay_whole_across_chunks():
    # The shape `cat` gives: 128 KiB writes, so every chunk ends inside a line.
    line = b"x" * 99 + b"\n"
    chunk = line * (131072 // 100) + b"y" * (131072 % 100)
    framer = LineFramer()
    assert lines_of(framer.feed(chunk)) == [b"x" * 99] * 1310
    lines = lines_of(framer.feed(chunk))
    assert len(lines) == 1310
    assert lines[0] == b"y" * (131072 % 100) + b"x" * 99  # the line that spanned two writes
    assert lines[1:] == [b"x" * 99] * 1309


@pytest.mark.parametrize(
    "text, expected",
    [("\t", b"\t"), ("\\t", b"\t"), (":", b":"), ("::", b"::"), ("\\\\", b"\\"),
     ("a\\tb", b"a\tb"), ("\\x", b"\\x"), ("é", "é".encode())],
)
def test_parse_separator(text, expected):
    assert parse_separator(text) == expected


@pytest.mark.parametrize("text", ["", "\n", "a\nb"])
def test_parse_separator_refuses_empty_and_newline(text):
    with pytest.raises(ValueError):
        parse_separator(text)


def test_json_records_take_records_jsonl_lines_as_written():
    line = (b'{"topic":"a","partition":3,"offset":9,"tstype":"logappend","ts":1763805600000,'
            b'"headers":["h","x","n",null,"b",{"base64":"/wo="}],"key":{"base64":"gA=="},'
            b'"payload":"caf\\u00e9\\n","extra":{"ignored":true}}\n')
    got = json_records(line + b'{"payload":null,"key":"k"}\n{"payload":""}\n')
    assert got.values == ["café\n".encode(), None, b""]
    assert got.keys == [b"\x80", b"k", None]
    assert got.headers == [[("h", b"x"), ("n", None), ("b", b"\xff\n")], [], []]
    assert got.timestamps == [1763805600000, None, None]
    plain = json_records(b'{"payload":"a"}\n{"payload":"b","headers":[],"ts":null}\n')
    assert plain.headers is None and plain.timestamps is None  # the engine's fast path


@pytest.mark.parametrize("line, reason", [
    (b"{", "not JSON"),
    (b'"text"', "a JSON string, not an object"),
    (b'{"key":"k"}', 'no "payload"'),
    (b'{"payload":true}', '"payload" is a JSON boolean'),
    (b'{"payload":{"base64":"AA==","x":1}}', '"payload" is a JSON object'),
    (b'{"payload":"a","key":["k"]}', '"key" is a JSON array'),
    (b'{"payload":"a","headers":{"h":"x"}}', '"headers" is not a flat'),
    (b'{"payload":"a","headers":["h"]}', '"headers" is not a flat'),
    (b'{"payload":"a","headers":[1,"x"]}', "header key 1 is a JSON number"),
    (b'{"payload":"a","headers":["\\udc80","x"]}', "header key 1 holds a lone surrogate"),
    (b'{"payload":"a","ts":1.0}', '"ts" is 1.0'),
    (b'{"payload":"a","ts":9223372036854775808}', '"ts" is 9223372036854775808'),
    (b'{"payload":"a","ts":false}', '"ts" is false'),
    (b"   ", "an empty line"),
    (b"\xff", "not JSON"),
])
def test_json_records_refuse_what_is_not_a_record_object(line, reason):
    with pytest.raises(InvalidJsonLineError, match="^line 2: ") as info:
        json_records(b'{"payload":"fine"}\n' + line + b"\n")
    assert reason in str(info.value)


# -- append-batches: whole batches out of write() chunks --------------------------------------


def test_batch_framer_returns_whole_batches_split_anywhere():
    data = EXAMPLE_2_7 + EXAMPLE_2_8 + EXAMPLE_2_7
    rng = random.Random(7)
    for _ in range(50):
        framer, out, at = BatchFramer(1 << 20), b"", 0
        while at < len(data):
            n = rng.randint(1, 40)
            out += framer.feed(data[at:at + n])
            at += n
            assert data.startswith(out) and framer.pending_len == min(at, len(data)) - len(out)
        assert out == data
        framer.finish()


def test_batch_framer_refuses_an_impossible_size_from_its_12_bytes():
    framer = BatchFramer(1 << 20)
    with pytest.raises(ValueError, match="minimum record overhead"):
        framer.feed(bytes(8) + (3).to_bytes(4, "big"))
    with pytest.raises(AbandonedLineError):
        framer.feed(EXAMPLE_2_7)
    framer = BatchFramer(len(EXAMPLE_2_7) - 12)  # max.message.bytes: 2.7's batchLength
    assert framer.feed(EXAMPLE_2_7[:12]) == b""
    assert framer.feed(EXAMPLE_2_7[12:]) == EXAMPLE_2_7
    with pytest.raises(ValueError, match="largest allowable message size"):
        framer.feed(EXAMPLE_2_8[:12])  # 8 bytes longer


def test_batch_framer_refuses_a_header_that_cannot_be_a_producers_batch_at_its_magic():
    """The magic (byte 16) of a producer's batch is 2, and its batchLength holds a v2 header:
    known from the write that brings byte 16, not at close."""
    framer = BatchFramer(1 << 20)
    assert framer.feed(EXAMPLE_2_7[:16]) == b""
    with pytest.raises(ValueError, match="magic 1 at byte 16: not a v2 record batch"):
        framer.feed(b"\x01")
    framer = BatchFramer(1 << 20)
    with pytest.raises(ValueError, match="batchLength 40 at byte 8 is shorter than a v2"):
        framer.feed(bytes(8) + (40).to_bytes(4, "big") + bytes(4) + b"\x02")
    framer = BatchFramer(1 << 20)  # a whole batch, then the next one's bad magic
    with pytest.raises(ValueError, match=f"magic 0 at byte {len(EXAMPLE_2_7) + 16}"):
        framer.feed(EXAMPLE_2_7 + EXAMPLE_2_7[:16] + b"\x00")


def test_batch_framer_finish_refuses_a_partial_batch():
    framer = BatchFramer(1 << 20)
    assert framer.feed(EXAMPLE_2_7 + EXAMPLE_2_8[:16]) == EXAMPLE_2_7
    assert framer.pending_len == 16
    with pytest.raises(PartialBatchError):
        framer.finish()


# -- append.jsonl: a partial line refused once it cannot become a JSON object -----------------


def _random_value(rng, depth=0):
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice([None, True, False, 0, -1, 12.5e-7, 1e300, -0.0, 'q"\\\u2028\x01x', "",
                           float("nan"), float("-inf"), 123456789])
    if roll < 0.65:
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", 'b"', "\u00e9", ""]): _random_value(rng, depth + 1)
            for _ in range(rng.randint(0, 3))}


def test_json_prefix_takes_every_prefix_of_an_object_in_any_chunking():
    """Never a false refusal: every prefix of a line Python's json parses as an object (any
    spacing, escapes, numbers, NaN), fed in random chunks, is taken."""
    rng = random.Random(11)
    for _ in range(400):
        obj = {"payload": _random_value(rng), "k": _random_value(rng)}
        line = b" " + json.dumps(obj, ensure_ascii=rng.random() < 0.5,
                                 separators=rng.choice([None, (",", ":"), (" , ", " : ")])
                                 ).encode() + b" "
        for cut in range(len(line) + 1):
            prefix, at = JsonLinePrefix(), 0
            while at < cut:
                n = rng.randint(1, 7)
                prefix.feed(line[at:min(at + n, cut)], 1)
                at += n


@pytest.mark.parametrize("chunks, where", [
    ([b"{bad"], b"'bad' at byte 2 "),
    ([b'{"a": tr', b"ux"], b"'trux' at byte 7 "),
    ([b'{"a": 1.e'], b"'1.e' at byte 7 "),
    ([b'{"a": 01'], b"'01' at byte 7 "),
    ([b'{"a":"x\\', b"q"], b"'\\\\q' at byte 8 "),
    ([b"[1]"], b"'[1]' at byte 1 "),  # a line is one object
    ([b'{"a" 1'], b"'1' at byte 6 "),
    ([b'{"a":1,}'], b"'}' at byte 8 "),
    ([b"{} x"], b"'x' at byte 4 "),
    ([b'{"a":"\x01'], b"'\\x01' at byte 7 "),
    ([b'{"payload":"ok"}\n{"payload":"ok"}\n', b"  {,"], b"',' at byte 4 "),
])
def test_json_prefix_refuses_the_first_byte_no_continuation_makes_valid(chunks, where):
    prefix = JsonLinePrefix()
    with pytest.raises(InvalidJsonLineError) as info:
        for chunk in chunks:
            prefix.feed(chunk, 3)
    assert str(info.value).startswith("line 3: not JSON (b")
    assert where.decode() in str(info.value), str(info.value)
    prefix.feed(b"\n{", 4)  # a newline starts a new line


def test_json_prefix_checks_only_the_partial_line_after_a_chunks_last_newline():
    prefix = JsonLinePrefix()
    prefix.feed(b"{not checked here: json_records parses whole lines}\n{\"a\"", 2)
    with pytest.raises(InvalidJsonLineError):
        prefix.feed(b"}", 2)
