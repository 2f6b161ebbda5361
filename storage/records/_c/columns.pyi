"""The compiled twin of ``storage.records.columns`` (type stub of ``columns.pyx``): records
decoded straight into Arrow's column layouts, or rendered as the mount's text."""

from collections.abc import Callable, Sequence
from typing import Any

from storage.records._c.buffers import OwnedBuffer

_Buffer = bytes | bytearray | memoryview

class ColumnBuilder:
    """Columns ``offset``, ``timestamp`` (epoch ms), ``timestamp_type``, ``key``, ``value`` and
    with ``headers`` a ``list<struct<key, value>>``, in Arrow's layouts; with ``values_text``
    only the values' text (each value and ``\\n``; with ``key_separator`` each key, the
    separator, the value and ``\\n``), its uncompressed batches decoded without the GIL.
    ValueError for headers with values_text, or a key_separator without it."""

    data_bytes: int  # read-only: key and value bytes so far

    def __init__(self, headers: bool = False, values_text: bool = False,
                 key_separator: bytes | None = None) -> None: ...
    @property
    def num_rows(self) -> int:
        """Rows built so far."""
    def add_section(self, data: _Buffer, count: int, base_offset: int, base_timestamp: int,
                    append_time: int, start: int = 0, end: int = 0x7FFFFFFFFFFFFFFF) -> int:
        """Add the records of an uncompressed records section with offsets in [``start``,
        ``end``); returns the rows added. Raises CorruptRecordError."""
    def add_run(self, buf: Any, position: int, start: int, end: int,
                crc: Callable[[Any], int] | None,
                decompress: Callable[[int, memoryview], Any],
                skip: Callable[[int, int], bool] | None = None) -> tuple[int, bool]:
        """Add a run of whole v2 batches (control batches and ``skip(producer_id,
        base_offset)`` ones left out): ``(bytes consumed, a batch reached end)``. Raises
        CorruptRecordError, InvalidRecordError."""
    def add_record(self, offset: int, timestamp: int, timestamp_type: int, key: bytes | None,
                   value: bytes | None,
                   headers: Sequence[tuple[str, bytes | None]] = ()) -> None:
        """Add one decoded record (a legacy v0/v1 one)."""
    def finish(self) -> dict[str, Any]:
        """The columns as a dict of buffers (``rows``, ``offset``, ``timestamp``,
        ``timestamp_type``, ``key``, ``value``, ``headers``), then an empty builder."""
    def render(self, jsonl: bool, prefix: bytes = b"") -> tuple[OwnedBuffer, OwnedBuffer,
                                                               OwnedBuffer]:
        """The rows as text (values and ``\\n``, or kcat ``-J`` JSON lines after ``prefix``):
        ``(text, row ends, row offsets)``, then an empty builder."""

def isal_crc32c(data: _Buffer, crc: int = 0) -> int:
    """``crc32c.crc32c(data, crc)`` by Intel ISA-L (what values_text runs are checked with,
    without the GIL)."""
