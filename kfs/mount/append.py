"""Lines (and keys) out of ``write()`` chunks: the framing behind ``append``, ``append-keyed``
and ``append.jsonl`` (and the batch framing of ``append-batches``).

Pure bytes in, bytes out; no FUSE and no log here (only the codec's batch framing).  The rules mirror
``kafka-console-producer``'s line reader: every newline-terminated line is one record, the newline
is not part of the value, an empty line is an empty value, and a final line without a newline is
still a record (stored when the file is closed).  Only ``\\n`` ends a line; a ``\\r`` before it
stays in the value (records are bytes, not text).

Keys (``append-keyed``) follow the console producer's ``parse.key=true``: the line is split at the
*first* occurrence of ``key.separator`` (default TAB); the key may be empty, the value may contain
further separators, and a line without the separator is refused (the console producer throws
"No key separator found"; ``Log.append_lines`` raises InvalidRecordError, the mount answers
EINVAL and stores nothing of that write).

JSON lines (``append.jsonl``) are framed the same way; each line is one object in the shape of a
``records.jsonl`` line (:func:`json_records`), so what one partition's ``records.jsonl`` prints
(filtered by ``jq -c``, say) appends the same keys, values, headers and timestamps to another.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from typing import Any, NamedTuple

from storage.errors import CorruptRecordError
from storage.records.framing import (
    CURRENT_MAGIC,
    HEADER_SIZE_UP_TO_MAGIC,
    LENGTH_OFFSET,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    RECORD_BATCH_OVERHEAD,
    next_batch_size,
)

DEFAULT_KEY_SEPARATOR = b"\t"


class AbandonedLineError(Exception):
    """A write carrying bytes of a line that an earlier failed write abandoned."""


class LineFramer:
    """Splits one open file's stream of ``write()`` chunks into lines.

    A line may span any number of chunks, split anywhere.  ``feed`` returns the lines completed
    by a chunk; ``finish`` returns the trailing partial line at close.

    Failure rule (no record is ever a piece of a line): when storing what a chunk produced
    fails, the caller calls ``abandon(chunk)``.  The partial line held before the chunk, the
    chunk's own lines and, unless the chunk ended with a newline, the rest of the line it was in
    are dropped: every later ``feed`` raises AbandonedLineError (its chunk dropped too) until a
    chunk that ends with a newline has been refused.  ``finish`` does not end that state: the
    kernel flushes on every close() of any descriptor sharing the open file (a writer that
    forked and exited), and the next writer may still be continuing the abandoned line.  A
    retry of the failed write is refused as well, which is safe: it cannot be told apart from
    a continuation.

    Cost is one ``rfind`` per chunk (no per-line Python work: the codec splits the lines); a long
    partial line is kept as a list of pieces and joined once, so a line spanning many chunks
    stays linear.
    """

    __slots__ = ("_parts", "_pending_len", "_abandoned")

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._pending_len = 0
        self._abandoned = False

    @property
    def pending_len(self) -> int:
        """Bytes of the partial line held so far (0 right after a newline)."""
        return self._pending_len

    @property
    def abandoned(self) -> bool:
        """True while the rest of an abandoned line is being refused."""
        return self._abandoned

    def feed(self, chunk: bytes) -> bytes | memoryview:
        """The complete lines ``chunk`` finishes, as one bytes-like object ending in ``\\n``
        (empty when none; a view of ``chunk`` when no partial line was held: no copy), ready
        for ``Log.append_lines``. AbandonedLineError (chunk dropped) while an abandoned line is
        being refused."""
        if type(chunk) is not bytes:  # memoryview/bytearray; bytes(b) of bytes would be free anyway
            chunk = bytes(chunk)
        if self._abandoned:
            self._abandoned = not chunk.endswith(b"\n")
            raise AbandonedLineError("this write continues a line abandoned by a failed write")
        last = chunk.rfind(b"\n") + 1
        if not last:
            if chunk:
                self._parts.append(chunk)
                self._pending_len += len(chunk)
            return b""
        lines = chunk if last == len(chunk) else memoryview(chunk)[:last]
        if self._parts:
            self._parts.append(lines)
            lines = b"".join(self._parts)
        tail = chunk[last:]
        self._parts = [tail] if tail else []
        self._pending_len = len(tail)
        return lines

    def abandon(self, chunk: bytes) -> None:
        """The lines of the last ``feed(chunk)`` could not be stored: drop the partial line and,
        unless ``chunk`` ended with a newline, refuse the rest of its line."""
        self._parts = []
        self._pending_len = 0
        self._abandoned = not bytes(chunk).endswith(b"\n")

    def finish(self) -> bytes | None:
        """The trailing partial line (without newline), or None when there is none (or when
        the line was abandoned); the framer holds no partial line afterwards."""
        if not self._parts:
            return None
        line = b"".join(self._parts)
        self._parts = []
        self._pending_len = 0
        return line


def parse_separator(text: str) -> bytes:
    """The ``--key-separator`` option as bytes: taken literally, except that the escapes
    ``\\t`` and ``\\\\`` stand for TAB and backslash (a shell cannot easily type a TAB).
    ValueError if empty or containing a newline (lines end at newlines)."""
    out = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text) and text[i + 1] in "t\\":
            out.append("\t" if text[i + 1] == "t" else "\\")
            i += 2
        else:
            out.append(text[i])
            i += 1
    sep = "".join(out).encode("utf-8", "surrogateescape")
    if not sep:
        raise ValueError("the key separator must not be empty")
    if b"\n" in sep:
        raise ValueError("the key separator must not contain a newline")
    return sep


class PartialBatchError(ValueError):
    """Bytes of an unfinished record batch left when ``append-batches`` is closed (EINVAL)."""


class BatchFramer:
    """Splits one open ``append-batches`` file's ``write()`` chunks into whole record batches,
    framed as on disk and in a produce request: 8 bytes of base offset, then a 4-byte
    big-endian batchLength counting the rest (``storage.records.framing.next_batch_size``,
    Kafka's ``ByteBufferLogInputStream``). A batch may span any number of chunks.

    ``feed`` returns the batches a chunk completes (as one bytes object, possibly empty), and
    raises ValueError (the framer abandoned) at the chunk that shows a header cannot be a
    producer's batch: a size below the smallest entry or over ``max_batch`` (its 12 bytes),
    a magic other than 2 or a size below the v2 header's (its 17); ``finish`` raises
    PartialBatchError when a partial batch is left. After a failed store
    (``abandon``) the stream cannot be resynchronised: every later ``feed`` raises
    AbandonedLineError."""

    __slots__ = ("_buf", "_abandoned", "max_batch")

    def __init__(self, max_batch: int) -> None:
        self._buf = bytearray()
        self._abandoned = False
        self.max_batch = max_batch  # a declared size past this can only be garbage or too large

    @property
    def pending_len(self) -> int:
        return len(self._buf)

    def feed(self, chunk: bytes) -> bytes:
        if self._abandoned:
            raise AbandonedLineError("this write continues batches abandoned by a failed write")
        self._buf += chunk
        buf, end = self._buf, 0
        try:  # a size that cannot be right is refused as soon as its 12 bytes are here
            while (size := next_batch_size(buf, end, self.max_batch)) is not None:
                _check_magic(buf, end, size)  # (its 17 bytes are here)
                if size > len(buf) - end:
                    break
                end += size
        except CorruptRecordError as exc:  # garbage, or a batch over max.message.bytes
            self.abandon()
            raise ValueError(str(exc)) from None
        done = bytes(self._buf[:end])
        del self._buf[:end]
        return done

    def abandon(self, chunk: bytes = b"") -> None:
        self._buf.clear()
        self._abandoned = True

    def finish(self) -> None:
        if self._buf:
            left = len(self._buf)
            self._buf.clear()
            raise PartialBatchError(f"{left} bytes of a partial record batch at close")


def _check_magic(buf, at: int, size: int) -> None:
    """CorruptRecordError unless the entry at ``buf[at:]`` (its first 17 bytes there) can be a
    producer's batch: magic 2 (a broker takes nothing else in a produce request since Kafka 4),
    at least the v2 header's size. Checked at the write that brings the magic, not at close."""
    magic = buf[at + MAGIC_OFFSET]
    if magic != CURRENT_MAGIC:
        raise CorruptRecordError(f"magic {magic} at byte {at + MAGIC_OFFSET}: not a v2 record "
                                 "batch (producers write magic 2)")
    if size < RECORD_BATCH_OVERHEAD:
        raise CorruptRecordError(f"batchLength {size - LOG_OVERHEAD} at byte "
                                 f"{at + LENGTH_OFFSET} is shorter than a v2 batch header "
                                 f"({RECORD_BATCH_OVERHEAD - LOG_OVERHEAD})")


assert HEADER_SIZE_UP_TO_MAGIC == MAGIC_OFFSET + 1  # next_batch_size waits for the magic


class InvalidJsonLineError(ValueError):
    """A line written to ``append.jsonl`` that is not a record object in ``records.jsonl``'s
    shape (the mount answers EINVAL and logs this error's text)."""


class JsonRecords(NamedTuple):
    """The records of ``append.jsonl`` lines, as columns for ``Log.append``: ``headers`` is
    None when no record has any, ``timestamps`` None when no record gives ``ts``."""

    values: list[bytes | None]
    keys: list[bytes | None]
    headers: list[list[tuple[str, bytes | None]]] | None
    timestamps: list[int | None] | None


def json_records(lines: bytes, first_line: int = 1) -> JsonRecords:
    """The records of ``\\n``-terminated JSON lines, each an object in the shape of a
    ``records.jsonl`` line (kcat ``-J``'s fields, as ``kfs dump --json`` encodes them):

    * ``payload`` (required) and ``key`` (absent: null): a string is its UTF-8 bytes,
      ``{"base64": "..."}`` raw bytes, ``null`` null (a null payload is a tombstone);
    * ``headers`` (absent or null: none): the flat ``[key, value, ...]`` list, keys strings,
      values as ``payload``;
    * ``ts`` (absent or null: the time of the append): epoch milliseconds, an integer from 0
      (the record's CreateTime);
    * anything else (``topic``, ``partition``, ``offset``, ``tstype``, ``kfs dump``'s batch
      fields) is ignored: where a record goes and its offset are the partition's business.

    Raises InvalidJsonLineError naming the line (``lines``' first line is number
    ``first_line``: the mount counts from the open of the file, not from the write) and what
    is wrong with it."""
    values: list[bytes | None] = []
    keys: list[bytes | None] = []
    headers: list[list[tuple[str, bytes | None]]] = []
    timestamps: list[int | None] = []
    given_headers = given_ts = False
    for number, line in enumerate(lines.split(b"\n")[:-1], first_line):
        if not line.strip():
            raise InvalidJsonLineError(f"line {number}: an empty line, not a JSON object")
        try:
            obj = json.loads(line)
        except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
            raise InvalidJsonLineError(f"line {number}: not JSON ({exc})") from None
        if not isinstance(obj, dict):
            raise InvalidJsonLineError(f"line {number}: a JSON {_json_type(obj)}, not an object")
        if "payload" not in obj:
            raise InvalidJsonLineError(f'line {number}: no "payload" (the value; '
                                       '"payload": null for a tombstone)')
        values.append(_field_bytes(obj["payload"], number, "payload"))
        keys.append(_field_bytes(obj.get("key"), number, "key"))
        pairs = _headers(obj.get("headers"), number)
        given_headers = given_headers or bool(pairs)
        headers.append(pairs)
        ts = obj.get("ts")
        if ts is not None:
            if type(ts) is not int or not 0 <= ts < 1 << 63:
                raise InvalidJsonLineError(f'line {number}: "ts" is {json.dumps(ts)[:40]}, not '
                                           "epoch milliseconds (an integer from 0)")
            given_ts = True
        timestamps.append(ts)
    return JsonRecords(values, keys, headers if given_headers else None,
                       timestamps if given_ts else None)


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            type(None): "null"}.get(type(value), "number")


def _field_bytes(value: Any, number: int, name: str) -> bytes | None:
    """A key, payload or header value of records.jsonl as bytes (see :func:`json_records`)."""
    if value is None:
        return None
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidJsonLineError(f'line {number}: "{name}" holds a lone surrogate '
                                       '(write bytes that are not UTF-8 as {"base64": ...})'
                                       ) from None
    if isinstance(value, dict) and value.keys() == {"base64"} and \
            isinstance(value["base64"], str):
        try:
            return base64.b64decode(value["base64"], validate=True)
        except (ValueError, binascii.Error) as exc:
            raise InvalidJsonLineError(f'line {number}: "{name}" is not base64 ({exc})') from None
    raise InvalidJsonLineError(f'line {number}: "{name}" is a JSON {_json_type(value)}; '
                               'a string, {"base64": "..."} or null was expected')


def _headers(value: Any, number: int) -> list[tuple[str, bytes | None]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) % 2:
        raise InvalidJsonLineError(f'line {number}: "headers" is not a flat [key, value, ...] '
                                   "list of even length")
    pairs = []
    for i in range(0, len(value), 2):
        key = value[i]
        if not isinstance(key, str):
            raise InvalidJsonLineError(f'line {number}: header key {i // 2 + 1} is a JSON '
                                       f"{_json_type(key)}, not a string")
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidJsonLineError(f"line {number}: header key {i // 2 + 1} holds a lone "
                                       "surrogate") from None
        pairs.append((key, _field_bytes(value[i + 1], number, f"header {key}")))
    return pairs


# ---- the partial line of append.jsonl: refused at write() as soon as it cannot become valid

_WS = frozenset(b" \t\r\n")
_STRING_RUN = re.compile(rb'[^"\\\x00-\x1f]*')
_ESCAPE = re.compile(rb'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
_PARTIAL_ESCAPE = re.compile(rb'\\(?:u[0-9a-fA-F]{0,3})?')
_WORD = re.compile(rb"[-+.0-9A-Za-z]*")
_NUMBER = re.compile(rb"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_NUMBER_PREFIX = re.compile(
    rb"-?(?:(?:0|[1-9][0-9]*)(?:\.|\.[0-9]+(?:[eE][+-]?[0-9]*)?|[eE][+-]?[0-9]*)?)?")
# Python's json (what json_records parses with) also takes NaN and the infinities
_LITERALS = (b"true", b"false", b"null", b"NaN", b"Infinity", b"-Infinity")
# what may come next: the line's object, a key or "}", a key, ":", a value, a value or "]",
# "," or the container's end, nothing (the object is closed)
_START, _KEY_OR_END, _KEY, _COLON, _VALUE, _VALUE_OR_END, _AFTER, _END = range(8)


class JsonLinePrefix:
    """Whether the partial line of ``append.jsonl`` written so far can still become one JSON
    object (only its syntax: what the object holds is checked when the line is whole).

    ``feed(chunk)`` takes each ``write()`` chunk as it comes (a newline in it starts a new
    line: only the bytes after the chunk's last newline are checked, complete lines being
    parsed by :func:`json_records`) and raises InvalidJsonLineError at the first byte no
    continuation can make valid, so a shell's ``printf '{bad' >> append.jsonl`` fails at its
    ``write()``, which the shell reports, not at ``close()``, which it ignores. Never refuses a
    prefix that can still be completed; a chunk is scanned once (an unfinished token, at most
    an escape, a number or a literal, is carried to the next chunk)."""

    __slots__ = ("_state", "_closers", "_in_string", "_key", "_carry", "_at")

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._state = _START
        self._closers: list[int] = []  # the closing bytes of the open containers
        self._in_string = False
        self._key = False  # the open string is a key
        self._carry = b""  # an unfinished token's bytes
        self._at = 0  # bytes of the line before the carry (where an error is)

    def feed(self, chunk: bytes, line: int) -> None:
        """Check ``chunk``; ``line`` is the number (from the open) of the line its last byte
        is in, for the error."""
        if type(chunk) is not bytes:
            chunk = bytes(chunk)
        last = chunk.rfind(b"\n") + 1
        if last:
            self._reset()
            chunk = chunk[last:]
        data = self._carry + chunk
        self._carry = b""
        bad = self._scan(data)
        if bad is not None:
            at = self._at + bad
            self._reset()
            raise InvalidJsonLineError(
                f"line {line}: not JSON ({data[bad:bad + 10]!r} at byte {at + 1} of the line "
                "cannot continue a JSON object; a line is refused at the write that makes it "
                "impossible)")
        self._at += len(data) - len(self._carry)

    def _scan(self, data: bytes) -> int | None:
        """Advance over ``data``; the index of the first bad byte, or None."""
        i, n = 0, len(data)
        while i < n:
            if self._in_string:
                i = _STRING_RUN.match(data, i).end()
                if i == n:
                    return None
                c = data[i]
                if c == 0x22:  # the closing quote
                    self._in_string = False
                    self._state = _COLON if self._key else _AFTER
                    i += 1
                elif c == 0x5C:  # backslash: an escape, maybe cut by the chunk's end
                    m = _ESCAPE.match(data, i)
                    if m:
                        i = m.end()
                        continue
                    if _PARTIAL_ESCAPE.match(data, i).end() == n:
                        self._carry = data[i:]
                        return None
                    return i
                else:  # a control character: JSON strings escape them
                    return i
                continue
            c = data[i]
            if c in _WS:
                i += 1
                continue
            state = self._state
            if state == _END:
                return i
            if c == 0x22:  # '"'
                if state == _COLON or state == _AFTER or state == _START:
                    return i
                self._in_string = True
                self._key = state == _KEY_OR_END or state == _KEY
                i += 1
                continue
            if state == _KEY_OR_END or state == _KEY:  # only a key (or "}") may come
                if not (c == 0x7D and state == _KEY_OR_END):
                    return i
                self._close()
            elif state == _COLON:
                if c != 0x3A:
                    return i
                self._state = _VALUE
            elif state == _AFTER:
                if not self._closers:
                    return i
                if c == 0x2C:  # ','
                    self._state = _KEY if self._closers[-1] == 0x7D else _VALUE
                elif c == self._closers[-1]:
                    self._close()
                else:
                    return i
            elif c == 0x7B or (c == 0x5B and state != _START):  # '{', '['
                self._closers.append(0x7D if c == 0x7B else 0x5D)
                self._state = _KEY_OR_END if c == 0x7B else _VALUE_OR_END
            elif state == _START:  # a line is one object
                return i
            elif c == 0x5D and state == _VALUE_OR_END:  # ']'
                self._close()
            else:  # a number or a literal
                end = _WORD.match(data, i).end()
                word = data[i:end]
                if end == n:  # it may go on in the next chunk
                    if _NUMBER_PREFIX.fullmatch(word) or any(lit.startswith(word)
                                                             for lit in _LITERALS):
                        self._carry = word
                        return None
                    return i
                if not (word in _LITERALS or _NUMBER.fullmatch(word)):
                    return i
                self._state = _AFTER
                i = end
                continue
            i += 1
        return None

    def _close(self) -> None:
        self._closers.pop()
        self._state = _AFTER if self._closers else _END
