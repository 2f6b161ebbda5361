"""Lines (and keys) out of ``write()`` chunks: the framing behind ``append`` and ``append-keyed``.

Pure bytes in, bytes out; no FUSE and no storage here.  The rules mirror
``kafka-console-producer``'s line reader: every newline-terminated line is one record, the newline
is not part of the value, an empty line is an empty value, and a final line without a newline is
still a record (stored when the file is closed).  Only ``\\n`` ends a line; a ``\\r`` before it
stays in the value (records are bytes, not text).

Keys (``append-keyed``) follow the console producer's ``parse.key=true``: the line is split at the
*first* occurrence of ``key.separator`` (default TAB); the key may be empty, the value may contain
further separators, and a line without the separator is refused (the console producer throws
"No key separator found"; ``Log.append_lines`` raises InvalidRecordError, the mount answers
EINVAL and stores nothing of that write).
"""

from __future__ import annotations

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

    def feed(self, chunk: bytes) -> bytes:
        """The complete lines ``chunk`` finishes, as one bytes object ending in ``\\n`` (empty
        when none), ready for ``Log.append_lines``. AbandonedLineError (chunk dropped) while an
        abandoned line is being refused."""
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
        if self._parts:
            self._parts.append(chunk[:last])
            lines = b"".join(self._parts)
        else:
            lines = chunk if last == len(chunk) else chunk[:last]
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
    big-endian batchLength counting the rest. A batch may span any number of chunks.

    ``feed`` returns the batches a chunk completes (as one bytes object, possibly empty);
    ``finish`` raises PartialBatchError when a partial batch is left. After a failed store
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
        end = 0
        while len(self._buf) - end >= 12:
            size = 12 + int.from_bytes(self._buf[end + 8:end + 12], "big", signed=True)
            if size < 12 + 14 or size > self.max_batch + 12:
                self.abandon()
                raise ValueError(f"a record batch of {size} bytes: not a batch, or larger than "
                                 f"max.message.bytes={self.max_batch}")
            if len(self._buf) - end < size:
                break
            end += size
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
