"""The backing directory: its partition logs, broker config and clean-shutdown marker
(Kafka's ``LogManager`` for one log directory)."""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import threading
import uuid
from pathlib import Path

from storage.config import load_broker_config, load_log_config
from storage.errors import (
    InvalidTopicError,
    PartitionExistsError,
    ReadOnlyLogError,
    UnknownTopicOrPartitionError,
)
from storage.log import Log
from storage.topic_partition import parse_partition_dir_name

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
PARTITION_METADATA_FILE = "partition.metadata"
# Directories LogManager does not load as data logs: KRaft's metadata log.
_NOT_DATA_LOGS = frozenset({"__cluster_metadata-0"})


class LogManager:
    """Every partition log of ``backing_dir``.

    A writable manager creates ``backing_dir`` if missing and consumes Kafka's clean-shutdown
    marker: when it is absent (a crash), active segments are revalidated. ``read_only=True``
    never changes a byte. Raises FileNotFoundError / NotADirectoryError for a bad directory and
    InvalidConfigError for bad settings.
    """

    def __init__(self, backing_dir: str | os.PathLike, read_only: bool = False):
        self.dir = Path(backing_dir)
        self.read_only = read_only
        if not read_only:
            self.dir.mkdir(parents=True, exist_ok=True)
        if not self.dir.exists():
            raise FileNotFoundError(f"backing directory {self.dir} does not exist")
        if not self.dir.is_dir():
            raise NotADirectoryError(f"backing directory {self.dir} is not a directory")
        self._broker_config = load_broker_config(self.dir)
        clean = self._consume_clean_shutdown_marker()
        self._lock = threading.Lock()
        self._logs: dict[str, Log] = {}
        try:
            for child in sorted(self.dir.iterdir()):
                if child.name in _NOT_DATA_LOGS or not child.is_dir():
                    continue
                try:
                    topic, partition = parse_partition_dir_name(child.name)
                except InvalidTopicError:
                    continue
                self._logs[child.name] = self._open_log(child, topic, partition, recover=not clean)
        except BaseException:
            for log_ in self._logs.values():
                log_.close()
            raise

    def _consume_clean_shutdown_marker(self) -> bool:
        """Kafka deletes the marker at startup: a crash before the next clean close leaves
        none, and the next start recovers."""
        marker = self.dir / CLEAN_SHUTDOWN_FILE
        clean = marker.exists()
        if clean and not self.read_only:
            marker.unlink()
        return clean

    def _open_log(self, path: Path, topic: str, partition: int, recover: bool) -> Log:
        config = load_log_config(self.dir, topic, self._broker_config)
        return Log(path, topic, partition, config, writable=not self.read_only, recover=recover)

    def partition_names(self) -> list[str]:
        """Sorted ``<topic>-<N>`` names of the partitions (in memory: no disk)."""
        return sorted(self._logs)

    def get(self, name: str) -> Log:
        """The log of partition ``name`` (in memory: no disk); raises
        UnknownTopicOrPartitionError."""
        try:
            return self._logs[name]
        except KeyError:
            raise UnknownTopicOrPartitionError(f"no partition {name!r} in {self.dir}") from None

    def create(self, name: str) -> Log:
        """Create partition ``name`` (``<topic>-<N>``): its directory, ``partition.metadata``
        (the topic id shared by the topic's partitions) and an empty active segment at offset 0.
        Raises ReadOnlyLogError, InvalidTopicError, PartitionExistsError, InvalidConfigError
        (the topic's settings), OSError (nothing is left behind)."""
        if self.read_only:
            raise ReadOnlyLogError(f"{self.dir} is mounted read-only")
        topic, partition = parse_partition_dir_name(name)
        config = load_log_config(self.dir, topic, self._broker_config)
        with self._lock:
            path = self.dir / name
            if name in self._logs or path.exists():
                raise PartitionExistsError(f"partition {name} already exists")
            path.mkdir()
            try:
                _write_atomically(path / PARTITION_METADATA_FILE,
                                  f"version: 0\ntopic_id: {self._topic_id(topic)}")
                log_ = Log(path, topic, partition, config, writable=True)
            except BaseException:
                shutil.rmtree(path, ignore_errors=True)  # no half-made partition
                raise
            self._logs[name] = log_
            return log_

    def _topic_id(self, topic: str) -> str:
        """The topic id of an existing partition of ``topic``, else a new random one, as
        base64url without padding (Kafka's ``Uuid.toString``)."""
        for log_ in self._logs.values():
            if log_.topic == topic:
                try:
                    text = (log_.dir / PARTITION_METADATA_FILE).read_text()
                    return text.split("topic_id:")[1].split()[0]
                except (OSError, IndexError):
                    continue
        return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")

    def close(self) -> None:
        """Flush and close every log and, when writable, leave Kafka's clean-shutdown marker
        (written last: it tells the next start that recovery can be skipped)."""
        with self._lock:
            for log_ in self._logs.values():
                log_.close()
            self._logs.clear()
            if not self.read_only:
                _write_atomically(self.dir / CLEAN_SHUTDOWN_FILE,
                                  json.dumps({"version": 0, "brokerEpoch": 0}, separators=(",", ":")))


def _write_atomically(path: Path, text: str) -> None:
    """Write ``<path>.tmp``, fsync, rename over ``path``, fsync the directory, as Kafka writes
    its checkpoints."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
