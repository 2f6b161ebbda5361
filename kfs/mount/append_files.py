"""The append files (``append``, ``append-keyed``, ``append-batches``, ``append.jsonl``): an
open file's framer (``kfs.mount.append``: lines, or producer batches), its writes stored in the
order they came, all or nothing each, and what a refused write leaves said in the mount's log.

A failed write abandons the line it ends in (see ``LineFramer``): nothing of a line that touched
a failed write is ever stored, and later writes continuing that line fail with the same errno,
so no record is ever a piece of a line. ``flush`` (every ``close()``) stores the trailing
partial line."""

from __future__ import annotations

import errno
import logging

import trio

from storage import errors as serr
from storage.protocols import PartitionLog

from . import inodes
from .append import (
    AbandonedLineError,
    BatchFramer,
    JsonLinePrefix,
    LineFramer,
    PartialBatchError,
    json_records,
)
from .errors import InvalidBatchesError, errno_for, fail
from .inodes import Kind
from .last_error import stamped

log = logging.getLogger(__name__)

# append.jsonl: bytes a line may have beyond 6 per record byte (field names, ignored fields).
JSON_LINE_SLACK = 64 << 10

# What append_as_leader raises for a producer's bad input (not for the disk).
_PRODUCER_INPUT_ERRORS = (
    serr.CorruptRecordError, serr.InvalidRecordError, serr.OutOfOrderSequenceError,
    serr.InvalidProducerEpochError, serr.InvalidTxnStateError, ValueError,
)


class _FifoLock:
    """A ``trio.Lock`` (waiters served in arrival order) whose ``async with`` takes a free lock
    at once: trio's own passes through the scheduler twice even then, about 5% of an append's
    time in the mount."""

    __slots__ = ("_lock",)

    def __init__(self) -> None:
        self._lock = trio.Lock()

    async def __aenter__(self) -> None:
        try:
            self._lock.acquire_nowait()
        except trio.WouldBlock:
            await self._lock.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self._lock.release()


class AppendHandle:
    """One open ``append``/``append-keyed``/``append-batches``/``append.jsonl`` file: its own
    framer (lines, or record batches), writes serialized in order."""

    __slots__ = ("log", "kind", "keyed", "framer", "prefix", "lock", "max_line",
                 "abandon_errno", "lines_seen", "stored_line", "stored_offset")

    def __init__(self, plog: PartitionLog, kind: Kind, max_line: int) -> None:
        self.log = plog
        self.kind = kind
        self.keyed = kind is Kind.APPEND_KEYED
        self.framer = BatchFramer(max_line) if kind is Kind.APPEND_BATCHES else LineFramer()
        # append.jsonl: its partial line is refused at the write that makes it impossible
        self.prefix = JsonLinePrefix() if kind is Kind.APPEND_JSONL else None
        self.lock = _FifoLock()  # requests are stored in the order they arrived
        self.max_line = max_line
        self.abandon_errno = errno.EIO  # what refused continuations of an abandoned line get
        # Lines counted from the open (what a refusal names, not a line of one write): newlines
        # written so far, and the last line stored with the offset of its record (0, -1: none).
        self.lines_seen = 0
        self.stored_line = 0
        self.stored_offset = -1

    def stored(self, first_offset: int, lines: int) -> None:
        """The ``lines`` lines after ``lines_seen`` were stored from ``first_offset`` on."""
        self.stored_line = self.lines_seen + lines
        self.stored_offset = first_offset + lines - 1

    def refusal(self, lines: int, code: int, detail: str = "") -> str:
        """What a refused write of ``lines`` lines (after ``lines_seen``; 0: a partial line)
        left, for the mount's log: the lines it held counted from the open, the last line and
        offset this open file stored, and where to resume."""
        file = next(n for n, k in inodes.PARTITION_ENTRIES if k is self.kind).decode()
        if self.kind is Kind.APPEND_BATCHES:  # (batches, not lines: no place to resume from)
            return (f"{self.log.name}/{file}: write refused ({errno.errorcode.get(code, code)})"
                    f"{detail}, nothing of it stored")
        first = self.lines_seen + 1
        held = f"line {first}" if lines <= 1 else f"lines {first}-{first + lines - 1}"
        if self.stored_offset < 0:
            stored = "nothing stored from this open file yet"
        else:
            stored = (f"stored from this open file: up to line {self.stored_line}, the last "
                      f"stored offset {self.stored_offset}")
        return (f"{self.log.name}/{file}: write refused "
                f"({errno.errorcode.get(code, code)}){detail}, nothing of it stored ({held}, counted "
                f"from the open; each write() is all or nothing); {stored}; to resume, append "
                f"again from line {self.stored_line + 1}")


class AppendFiles:
    """Opens and writes the append files; ``key_separator`` splits ``append-keyed`` lines.
    Each partition's last refused write is kept for its ``user.kfs.last_error``
    (``kfs.mount.last_error``): a shell ignores the error of a ``close()``, where a last line
    without newline, or a partial batch, is refused."""

    def __init__(self, key_separator: bytes) -> None:
        self._sep = key_separator
        self._last_errors: dict[str, bytes] = {}  # partition name -> user.kfs.last_error

    def last_error(self, partition: str) -> bytes | None:
        """The ``user.kfs.last_error`` of ``partition``: its last refused write, or None."""
        return self._last_errors.get(partition)

    def open(self, plog: PartitionLog, kind: Kind) -> AppendHandle:
        """An append file of ``plog`` opened for writing. EIO when its end could not be read
        (appends wait for a repair)."""
        if plog.damage is not None:
            raise fail(errno.EIO)
        max_bytes = plog.config.max_message_bytes  # loaded with the log: no I/O
        # A line longer than this can never fit in a batch: refuse it before buffering more.
        max_line = max_bytes + (len(self._sep) if kind is Kind.APPEND_KEYED else 0)
        if kind is Kind.APPEND_JSONL:  # JSON writes a byte in up to 6 (\u00XX)
            max_line = 6 * max_bytes + JSON_LINE_SLACK
        return AppendHandle(plog, kind, max_line)

    async def write(self, handle: AppendHandle, buf: bytes) -> int:
        """Append the complete lines of ``buf`` as records in one ``Log.append`` (all or
        nothing; O_APPEND semantics: a write goes at the end whatever its offset). EFBIG for a
        line over max.message.bytes, EINVAL for a keyed line without separator or an
        ``append.jsonl`` line that is not a record object (the reason logged), ENOSPC/EIO."""
        async with handle.lock:
            framer = handle.framer
            try:
                lines = framer.feed(buf)
            except AbandonedLineError:
                if handle.kind is not Kind.APPEND_BATCHES:
                    handle.lines_seen += bytes(buf).count(b"\n")
                raise fail(handle.abandon_errno) from None
            except ValueError as exc:  # append-batches: a header that cannot be a batch's
                handle.abandon_errno = errno.EINVAL
                self._refused(handle, errno.EINVAL, f": {exc}")
                raise fail(errno.EINVAL) from None
            count = 0  # lines stored (the append counts them: no second pass over the bytes)
            try:
                if handle.kind is not Kind.APPEND_BATCHES and framer.pending_len > handle.max_line:
                    # Refuse early: this line can never fit a batch, and must not fill memory.
                    raise serr.RecordTooLargeError(f"line longer than {handle.max_line} bytes")
                if handle.prefix is not None:  # (before the write's lines: all or nothing)
                    handle.prefix.feed(buf, handle.lines_seen + bytes(buf).count(b"\n") + 1)
                if lines:
                    offsets = await self._store_soon(handle, lines)
                    count = len(offsets)
                    if count:
                        handle.stored(offsets.start, count)
            except Exception as exc:
                framer.abandon(buf)
                if handle.prefix is not None:
                    handle.prefix = JsonLinePrefix()  # (the rest of the line is refused anyway)
                handle.abandon_errno = errno_for(exc)
                if handle.kind is not Kind.APPEND_BATCHES:
                    count = bytes(lines).count(b"\n")
                self._refused(handle, handle.abandon_errno, self._detail(handle, exc), count,
                              exc)
                raise fail(handle.abandon_errno) from None
            finally:
                handle.lines_seen += count
        return len(buf)

    def _detail(self, handle: AppendHandle, exc: Exception) -> str:
        """What the refusal line says of why, where the errno alone would not."""
        if isinstance(exc, serr.KeySeparatorMissingError):  # (counted in the write)
            return f": line {handle.lines_seen + exc.line} has no key separator {self._sep!r}"
        if handle.kind is Kind.APPEND_BATCHES:
            return f": {exc}"
        return ""

    def _refused(self, handle: AppendHandle, code: int, detail: str = "", lines: int = 0,
                 exc: Exception | None = None) -> None:
        """Log a refused write of ``handle`` (``lines`` lines after ``lines_seen``) and keep it
        as its partition's ``user.kfs.last_error``, where a shell user finds it (``kfs
        last-error``)."""
        text = handle.refusal(lines, code, detail)
        log.warning("%s", text)
        reason = str(exc) if exc is not None else ""
        if reason and reason not in text:
            text += f" (why: {reason})"
        self._last_errors[handle.log.name] = stamped(text)

    async def _store_soon(self, handle: AppendHandle, lines) -> range:
        """Lines are appended on the trio thread when that only means writing into the page
        cache (a worker-thread hop costs more than the append of a 128 KiB write); when the
        append would wait (the log's lock, a roll, a flush) and for ``append-batches``, in a
        worker thread. Returns the offsets of the lines stored (empty for ``append-batches``,
        whose records are not lines)."""
        if handle.kind is not Kind.APPEND_BATCHES and handle.kind is not Kind.APPEND_JSONL:
            try:
                return handle.log.append_lines(lines, self._sep if handle.keyed else None,
                                               nowait=True)
            except BlockingIOError as exc:
                log.debug("%s: appending in a worker thread: %s", handle.log.name, exc)
        return await trio.to_thread.run_sync(self._store, handle, lines)

    def _store(self, handle: AppendHandle, lines) -> range:
        """Runs in a worker thread: key splitting (append-keyed) and the append itself;
        ``append-batches`` appends whole producer batches as a broker does (offsets assigned,
        transactions tracked: ``Log.append_as_leader``); ``append.jsonl`` parses its lines
        (InvalidJsonLineError, naming the line counted from the open: none stored) and appends
        their keys, values, headers and timestamps (``Log.append``)."""
        if handle.kind is Kind.APPEND_JSONL:
            records = json_records(bytes(lines), handle.lines_seen + 1)
            first = handle.log.append(*records)
            return range(first, first + len(records.values))
        if handle.kind is Kind.APPEND_BATCHES:
            try:
                handle.log.append_as_leader(lines)
            except _PRODUCER_INPUT_ERRORS as exc:
                raise InvalidBatchesError(str(exc)) from exc
            return range(0)
        return handle.log.append_lines(lines, self._sep if handle.keyed else None)

    async def flush(self, handle: AppendHandle) -> None:
        """Every close(): store the trailing partial line, if any (its error reaches close)."""
        async with handle.lock:
            if handle.kind is Kind.APPEND_BATCHES:
                try:
                    handle.framer.finish()
                except PartialBatchError as exc:
                    self._refused(handle, errno.EINVAL, f": {exc}")
                    raise InvalidBatchesError(str(exc)) from None
                return
            tail = handle.framer.finish()
            if handle.prefix is not None:
                handle.prefix = JsonLinePrefix()  # (the next write starts a line)
            if tail is not None:  # on failure the tail is dropped: never stored in pieces
                try:
                    handle.stored((await self._store_soon(handle, tail + b"\n")).start, 1)
                except Exception as exc:
                    code = errno_for(exc)
                    self._refused(handle, code, self._detail(handle, exc), 1, exc)
                    raise fail(code) from None
                finally:
                    handle.lines_seen += 1

    @staticmethod
    async def fsync(handle: AppendHandle) -> None:
        """fsync(2) on an append file: every segment written since the last flush reaches the
        disk (``Log.flush``)."""
        await trio.to_thread.run_sync(handle.log.flush)

    @staticmethod
    def release(handle: AppendHandle) -> None:
        if handle.framer.pending_len:
            # flush (run by every close) stores the tail, so this should not happen.
            log.warning("dropping %d bytes of an unstored partial line on release",
                        handle.framer.pending_len)
