"""The surfaces the front ends see, named (as aiokafka's ``record/_protocols.py`` names what its
pure-Python and compiled record classes both give): a partition's log as a reader sees it, and
a log directory as ``storage.directory.open_log_directory`` hands it out.

The classes behind them: ``storage.log.Log`` (a local partition, writable or following another
writer), ``storage.remote.remote_log.RemoteLog`` (a partition in an object store),
``storage.remote.tiered.UnifiedLog`` (a tiered topic's partition: its remote tier below its
local log); and ``storage.log_manager.LogManager``, ``RemoteLogDirectory``,
``TieredLogDirectory``, ``UnifiedLogDirectory``. Appending is a local ``Log``'s alone: a writer
holds a ``LogManager`` and its ``Log``s, not these.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .config import LogConfig
    from .damage import LogDamage
    from .log_reader import LogReader
    from .log_segments import LogSegments


@runtime_checkable
class PartitionLog(Protocol):
    """One topic-partition, read: its offsets (Kafka's log start offset, log end offset, last
    stable offset), its segments (``LogSegments``: lookup by offset and time) and every read
    through ``reader`` (``LogReader``: records, columns, blocks for streams, at an
    ``IsolationLevel``)."""

    topic: str
    partition: int
    config: LogConfig
    dir: Path  # where its files are (a path in the store, for a remote log)
    segments: LogSegments
    reader: LogReader
    # What is known to be damaged (its end could not be read: reads stop there), and what
    # recovery cut at open; a remote log is never recovered (None, nothing).
    damage: LogDamage | None
    salvaged: list[str] | tuple[str, ...]

    @property
    def name(self) -> str:
        """``<topic>-<partition>``, the partition directory's name."""

    @property
    def log_start_offset(self) -> int:
        """The first offset a consumer may fetch."""

    @property
    def log_end_offset(self) -> int:
        """The offset the next record appended gets."""

    @property
    def last_stable_offset(self) -> int:
        """The read_committed limit: the first offset of a transaction still open, else the
        log end offset."""

    def close(self) -> None:
        """Release its files (or objects)."""


@runtime_checkable
class LogDirectory(Protocol):
    """Every partition of a log directory, opened on first use (Kafka's ``LogManager`` as a
    reader sees it). ``notices``: what opening found that a user must hear of, one line each."""

    notices: list[str]

    def partition_names(self) -> list[str]:
        """The ``<topic>-<N>`` names of its partitions, sorted."""

    def get(self, name: str) -> PartitionLog:
        """The partition ``name``. Raises UnknownTopicOrPartitionError when there is none."""

    def catch_up(self, name: str) -> PartitionLog:
        """The partition ``name`` as it is now, for a reader following another writer (a
        broker, a mount): new segments and appends taken in, deleted ones retired."""

    def catch_up_partitions(self) -> bool:
        """Take in partitions created or deleted since the last look; whether any were."""

    def close(self) -> None:
        """Close every log it opened (a writable directory also writes its checkpoints and
        Kafka's clean-shutdown marker)."""
