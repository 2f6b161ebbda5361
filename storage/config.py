"""Kafka's log config names, units and defaults in one place (Kafka's ``LogConfig``).

Settings come from two files in the backing directory, both in Java ``.properties`` syntax:

* ``server.properties`` — broker-level keys (``log.segment.bytes``, ``compression.type``, ...),
  with Kafka's synonyms resolved in Kafka's order (``log.roll.ms`` before ``log.roll.hours``);
* ``<topic>.topic.properties`` — per-topic overrides with the topic-level keys
  (``segment.bytes``, ``compression.type``, ...), as ``kafka-configs --entity-type topics`` sets them.

Kafka ignores plain files at the top of a log directory, so a broker can adopt the directory as is.
"""

from __future__ import annotations

import dataclasses
import errno
import logging
from pathlib import Path


from storage.errors import InvalidConfigError
from storage.log_files import SERVER_PROPERTIES  # noqa: F401 - named here as ever
from storage.records import CompressionType, TimestampType
from storage.records.compression import check_level

TOPIC_PROPERTIES_SUFFIX = ".topic.properties"

log = logging.getLogger(__name__)

_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000


@dataclasses.dataclass(frozen=True)
class LogConfig:
    """The settings of one partition log. Sizes are bytes, durations milliseconds."""

    segment_bytes: int = 1_073_741_824  # segment.bytes
    segment_ms: int = 604_800_000  # segment.ms (7 days)
    segment_jitter_ms: int = 0  # segment.jitter.ms
    segment_index_bytes: int = 10_485_760  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    max_message_bytes: int = 1_048_588  # max.message.bytes (largest record batch)
    compression_type: str = "producer"  # compression.type
    compression_gzip_level: int = -1  # compression.gzip.level
    compression_lz4_level: int = 9  # compression.lz4.level
    compression_zstd_level: int = 3  # compression.zstd.level
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    batch_size: int = 16_384  # the producer's batch.size: how kfs groups appended records
    cleanup_policy: str = "delete"  # cleanup.policy: delete (retention), compact (the cleaner)
    retention_ms: int = 604_800_000  # retention.ms (7 days); -1 = unlimited
    retention_bytes: int = -1  # retention.bytes per partition; -1 = unlimited
    file_delete_delay_ms: int = 60_000  # file.delete.delay.ms
    flush_messages: int = 2**63 - 1  # flush.messages: fsync after this many unflushed records
    flush_ms: int = 2**63 - 1  # flush.ms: fsync when data has been unflushed this long
    delete_retention_ms: int = 86_400_000  # delete.retention.ms: how long tombstones stay
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms: younger records are not cleaned
    max_compaction_lag_ms: int = 2**63 - 1  # max.compaction.lag.ms: older dirty ones must be
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio
    # how far a CreateTime record's timestamp may be before / after now (Kafka 4's defaults)
    message_timestamp_before_max_ms: int = 2**63 - 1  # message.timestamp.before.max.ms
    message_timestamp_after_max_ms: int = 3_600_000  # message.timestamp.after.max.ms (1 h)

    def __post_init__(self) -> None:
        # Kafka checks the codec levels when the config is read, not at the first append.
        check_level(CompressionType.GZIP, self.compression_gzip_level)
        check_level(CompressionType.LZ4, self.compression_lz4_level)
        check_level(CompressionType.ZSTD, self.compression_zstd_level)

    @property
    def codec(self) -> CompressionType:
        """The codec kfs's own appends write. ``producer`` keeps the producer's codec; kfs is
        the producer and writes uncompressed batches, as the console producer does by default."""
        if self.compression_type == "producer":
            return CompressionType.NONE
        return CompressionType.for_name(self.compression_type)

    @property
    def compression_level(self) -> int | None:
        """The level for :attr:`codec` (None for codecs without one)."""
        return {
            CompressionType.GZIP: self.compression_gzip_level,
            CompressionType.LZ4: self.compression_lz4_level,
            CompressionType.ZSTD: self.compression_zstd_level,
        }.get(self.codec)

    @property
    def deletes(self) -> bool:
        """Whether retention applies (``delete`` in ``cleanup.policy``)."""
        return "delete" in self.cleanup_policy.split(",")

    @property
    def compact(self) -> bool:
        """Whether the cleaner compacts this log (``compact`` in ``cleanup.policy``)."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def timestamp_type(self) -> TimestampType:
        return (
            TimestampType.LOG_APPEND_TIME
            if self.message_timestamp_type == "LogAppendTime"
            else TimestampType.CREATE_TIME
        )


# topic key -> (field, broker keys in Kafka's order of precedence with a unit multiplier, minimum)
_INT_KEYS = {
    "segment.bytes": ("segment_bytes", (("log.segment.bytes", 1),), 14),
    "segment.ms": ("segment_ms", (("log.roll.ms", 1), ("log.roll.hours", _HOUR_MS)), 1),
    "segment.jitter.ms": (
        "segment_jitter_ms",
        (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", _HOUR_MS)),
        0,
    ),
    "segment.index.bytes": ("segment_index_bytes", (("log.index.size.max.bytes", 1),), 4),
    "index.interval.bytes": ("index_interval_bytes", (("log.index.interval.bytes", 1),), 0),
    "max.message.bytes": ("max_message_bytes", (("message.max.bytes", 1),), 0),
    "compression.gzip.level": ("compression_gzip_level", (("compression.gzip.level", 1),), -1),
    "compression.lz4.level": ("compression_lz4_level", (("compression.lz4.level", 1),), 1),
    "compression.zstd.level": ("compression_zstd_level", (("compression.zstd.level", 1),), -131072),
    "batch.size": ("batch_size", (("batch.size", 1),), 1),
    "retention.ms": (
        "retention_ms",
        (("log.retention.ms", 1), ("log.retention.minutes", _MINUTE_MS),
         ("log.retention.hours", _HOUR_MS)),
        -1,
    ),
    "retention.bytes": ("retention_bytes", (("log.retention.bytes", 1),), -1),
    "file.delete.delay.ms": ("file_delete_delay_ms", (("log.segment.delete.delay.ms", 1),), 0),
    "flush.messages": ("flush_messages", (("log.flush.interval.messages", 1),), 1),
    "flush.ms": (
        "flush_ms",
        (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
        0,
    ),
    "delete.retention.ms": (
        "delete_retention_ms", (("log.cleaner.delete.retention.ms", 1),), 0),
    "min.compaction.lag.ms": (
        "min_compaction_lag_ms", (("log.cleaner.min.compaction.lag.ms", 1),), 0),
    "max.compaction.lag.ms": (
        "max_compaction_lag_ms", (("log.cleaner.max.compaction.lag.ms", 1),), 1),
    "message.timestamp.before.max.ms": (
        "message_timestamp_before_max_ms", (("log.message.timestamp.before.max.ms", 1),), 0),
    "message.timestamp.after.max.ms": (
        "message_timestamp_after_max_ms", (("log.message.timestamp.after.max.ms", 1),), 0),
}
# topic key -> (field, broker key, minimum, maximum)
_FLOAT_KEYS = {
    "min.cleanable.dirty.ratio": (
        "min_cleanable_dirty_ratio", "log.cleaner.min.cleanable.ratio", 0.0, 1.0),
}
_STR_KEYS = {
    "compression.type": (
        "compression_type",
        ("compression.type",),
        ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"),
    ),
    "cleanup.policy": (
        "cleanup_policy",
        ("log.cleanup.policy",),
        ("delete", "compact", "compact,delete", "delete,compact"),
    ),
    "message.timestamp.type": (
        "message_timestamp_type",
        ("log.message.timestamp.type",),
        ("CreateTime", "LogAppendTime"),
    ),
}


# Where Kafka 4.1.1 refuses values kfs takes: topic key -> (broker key, Kafka's minimum). kfs
# keeps them (tests and demos roll small segments) with a warning; kfs adopt refuses a topic
# with one, as the broker would refuse its kafka-topics.sh --create --config line.
KAFKA_MINIMUMS = {"segment.bytes": ("log.segment.bytes", 1_048_576)}
# kfs's own topic keys, which Kafka does not know (not for kafka-topics.sh --config)
KFS_ONLY_KEYS = frozenset({"batch.size"})
_warned: set[str] = set()  # each warning once per process (a mount opens many partitions)

# Kafka topic configs (TopicConfig) that kfs reads without acting on them yet.
_NOT_APPLIED_YET = frozenset({
    "preallocate",
    "min.insync.replicas", "unclean.leader.election.enable", "message.downconversion.enable",
    "message.format.version", "message.timestamp.difference.max.ms",
    "follower.replication.throttled.replicas", "leader.replication.throttled.replicas",
    "local.retention.ms", "local.retention.bytes", "remote.storage.enable",
})


def _parse_int(key: str, text: str, minimum: int, multiplier: int = 1) -> int:
    try:
        value = int(text.strip()) * multiplier
    except ValueError:
        raise InvalidConfigError(f"{key}={text!r}: not an integer") from None
    if value < minimum:
        raise InvalidConfigError(f"{key}={value}: must be at least {minimum}")
    return value


def _parse_float(key: str, text: str, minimum: float, maximum: float) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        raise InvalidConfigError(f"{key}={text!r}: not a number") from None
    if not minimum <= value <= maximum:
        raise InvalidConfigError(f"{key}={value}: must be in [{minimum}, {maximum}]")
    return value


def _parse_bool(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise InvalidConfigError(f"{key}={text!r}: must be true or false")
    return value == "true"


def _parse_choice(key: str, text: str, choices: tuple[str, ...]) -> str:
    value = text.strip()
    if value not in choices:
        raise InvalidConfigError(f"{key}={value!r}: must be one of {', '.join(choices)}")
    return value


def broker_overrides(props: dict[str, str]) -> dict[str, object]:
    """LogConfig field values from broker keys (``server.properties``), first synonym winning."""
    out: dict[str, object] = {}
    for field, synonyms, minimum in _INT_KEYS.values():
        for key, multiplier in synonyms:
            if key in props:
                out[field] = _parse_int(key, props[key], minimum, multiplier)
                break
    for field, synonyms, choices in _STR_KEYS.values():
        for key in synonyms:
            if key in props:
                out[field] = _parse_choice(key, props[key], choices)
                break
    for field, key, low, high in _FLOAT_KEYS.values():
        if key in props:
            out[field] = _parse_float(key, props[key], low, high)
    return out


def topic_overrides(props: dict[str, str]) -> dict[str, object]:
    """LogConfig field values from topic-level keys; unknown keys raise InvalidConfigError."""
    out: dict[str, object] = {}
    for key, text in props.items():
        if key in _INT_KEYS:
            field, _, minimum = _INT_KEYS[key]
            out[field] = _parse_int(key, text, minimum)
        elif key in _STR_KEYS:
            field, _, choices = _STR_KEYS[key]
            out[field] = _parse_choice(key, text, choices)
        elif key in _FLOAT_KEYS:
            field, _, low, high = _FLOAT_KEYS[key]
            out[field] = _parse_float(key, text, low, high)
        elif key in _NOT_APPLIED_YET:
            log.warning("topic config %s=%s is Kafka's but kfs does not apply it yet", key, text)
        else:
            raise InvalidConfigError(f"unknown topic config {key!r}")
    return out


def kafka_refusals(props: dict[str, str], broker: bool = False) -> list[str]:
    """Settings of ``props`` (topic keys; with ``broker``, server.properties keys) that kfs
    takes but Kafka 4.1.1 refuses, each as ``key=value is below Kafka 4.1.1's minimum of N``."""
    out = []
    for topic_key, (broker_key, minimum) in KAFKA_MINIMUMS.items():
        key = broker_key if broker else topic_key
        try:
            value = int(props[key].strip())
        except (KeyError, ValueError):
            continue
        if value < minimum:
            out.append(f"{key}={value} is below Kafka 4.1.1's minimum of {minimum}")
    return out


def _warn_kafka_refuses(path: Path, refusals: list[str], consequence: str) -> None:
    for refusal in refusals:
        text = f"{path}: {refusal}: kfs uses it, but {consequence}"
        if text not in _warned:
            _warned.add(text)
            log.warning("%s", text)


def read_properties(path: Path) -> dict[str, str]:
    """A Java ``.properties`` file as a dict; an absent file is empty. So is one whose name
    cannot exist: ``<topic>.topic.properties`` of a legal topic of 239 to 249 characters is
    over 255 bytes (ENAMETOOLONG), so such a topic has no overrides."""
    import javaproperties  # slow to import (its XML support): only when a file is read

    try:
        with open(path, encoding="latin-1") as f:
            return javaproperties.load(f)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            return {}
        raise


@dataclasses.dataclass(frozen=True)
class LogManagerConfig:
    """Broker-level schedules of the backing directory (``server.properties``), in ms."""

    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    flush_offset_checkpoint_interval_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    flush_start_offset_checkpoint_interval_ms: int = 60_000  # log.flush.start.offset.checkpoint.interval.ms
    # A transaction open longer than this is aborted and its producer fenced. Kafka's producer
    # setting (and default) transaction.timeout.ms, which its coordinator enforces; kfs has no
    # InitProducerId to carry a producer's own, so one value holds for the backing directory.
    transaction_timeout_ms: int = 60_000  # transaction.timeout.ms
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # The log cleaner (Kafka's CleanerConfig; one cleaner thread, so no log.cleaner.threads)
    log_cleaner_enable: bool = True  # log.cleaner.enable
    log_cleaner_backoff_ms: int = 15_000  # log.cleaner.backoff.ms: sleep when nothing to clean
    log_cleaner_dedupe_buffer_size: int = 134_217_728  # log.cleaner.dedupe.buffer.size: the map
    log_cleaner_io_buffer_size: int = 524_288  # log.cleaner.io.buffer.size: read + write buffers
    log_cleaner_io_buffer_load_factor: float = 0.9  # log.cleaner.io.buffer.load.factor
    log_cleaner_io_max_bytes_per_second: float = 1.7976931348623157e308  # Double.MAX_VALUE


_MANAGER_KEYS = {
    "log.retention.check.interval.ms": "retention_check_interval_ms",
    "log.flush.offset.checkpoint.interval.ms": "flush_offset_checkpoint_interval_ms",
    "log.flush.start.offset.checkpoint.interval.ms": "flush_start_offset_checkpoint_interval_ms",
    "transaction.timeout.ms": "transaction_timeout_ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms":
        "transaction_abort_timed_out_transaction_cleanup_interval_ms",
    "log.cleaner.backoff.ms": "log_cleaner_backoff_ms",
    "log.cleaner.dedupe.buffer.size": "log_cleaner_dedupe_buffer_size",
    "log.cleaner.io.buffer.size": "log_cleaner_io_buffer_size",
}
_MANAGER_FLOAT_KEYS = {
    "log.cleaner.io.buffer.load.factor": ("log_cleaner_io_buffer_load_factor", 0.0, 1.0),
    "log.cleaner.io.max.bytes.per.second": (
        "log_cleaner_io_max_bytes_per_second", 0.0, 1.7976931348623157e308),
}


def load_manager_config(backing_dir: Path) -> LogManagerConfig:
    """The LogManagerConfig of ``BACKING_DIR/server.properties``; raises InvalidConfigError."""
    props = read_properties(backing_dir / SERVER_PROPERTIES)
    values: dict[str, object] = {field: _parse_int(key, props[key], 1)
                                 for key, field in _MANAGER_KEYS.items() if key in props}
    for key, (field, low, high) in _MANAGER_FLOAT_KEYS.items():
        if key in props:
            values[field] = _parse_float(key, props[key], low, high)
    if "log.cleaner.enable" in props:
        values["log_cleaner_enable"] = _parse_bool("log.cleaner.enable",
                                                   props["log.cleaner.enable"])
    return LogManagerConfig(**values)


def load_broker_config(backing_dir: Path) -> dict[str, object]:
    """The broker-level overrides of ``BACKING_DIR/server.properties`` (a value a Kafka
    broker would refuse is logged as a warning)."""
    props = read_properties(backing_dir / SERVER_PROPERTIES)
    overrides = broker_overrides(props)
    _warn_kafka_refuses(backing_dir / SERVER_PROPERTIES, kafka_refusals(props, broker=True),
                        "a Kafka broker refuses to start with it")
    return overrides


def load_log_config(backing_dir: Path, topic: str, broker: dict[str, object]) -> LogConfig:
    """The effective LogConfig of ``topic``: Kafka defaults < broker keys < topic keys.

    Raises InvalidConfigError for a bad value or an unknown topic key; logs a warning for a
    value Kafka refuses (``kafka_refusals``)."""
    path = backing_dir / f"{topic}{TOPIC_PROPERTIES_SUFFIX}"
    topic_props = read_properties(path)
    config = LogConfig(**{**broker, **topic_overrides(topic_props)})
    _warn_kafka_refuses(path, kafka_refusals(topic_props),
                        "a Kafka broker refuses it (kfs adopt refuses the topic)")
    return config
