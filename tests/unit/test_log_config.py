"""Log configs (storage.config), modelled on Kafka's LogConfigTest (testKafkaConfigToProps,
testFromPropsInvalid, testInvalidCompactionLagConfig, testMinCleanableDirtyRatioBounds ...)
and KafkaConfigTest's synonym precedence (log.roll.ms before log.roll.hours): every default is
Kafka's, every key takes its minimum and refuses one less, broker synonyms resolve in Kafka's
order with their units, and a value Kafka refuses is named once."""

import errno
import logging

import pytest

from storage import config as config_module
from storage.config import (
    LogConfig,
    LogManagerConfig,
    broker_overrides,
    kafka_refusals,
    load_broker_config,
    load_log_config,
    load_manager_config,
    read_properties,
    topic_overrides,
)
from storage.errors import InvalidConfigError
from storage.records import CompressionType, TimestampType

HOUR_MS, MINUTE_MS = 3_600_000, 60_000
LONG_MAX = 2**63 - 1

KAFKA_DEFAULTS = {
    "segment_bytes": 1_073_741_824, "segment_ms": 604_800_000, "segment_jitter_ms": 0,
    "segment_index_bytes": 10_485_760, "index_interval_bytes": 4096,
    "max_message_bytes": 1_048_588, "compression_type": "producer",
    "compression_gzip_level": -1, "compression_lz4_level": 9, "compression_zstd_level": 3,
    "message_timestamp_type": "CreateTime", "batch_size": 16_384, "cleanup_policy": "delete",
    "retention_ms": 604_800_000, "retention_bytes": -1, "file_delete_delay_ms": 60_000,
    "flush_messages": LONG_MAX, "flush_ms": LONG_MAX, "delete_retention_ms": 86_400_000,
    "min_compaction_lag_ms": 0, "max_compaction_lag_ms": LONG_MAX,
    "min_cleanable_dirty_ratio": 0.5, "message_timestamp_before_max_ms": LONG_MAX,
    "message_timestamp_after_max_ms": 3_600_000,
}

# topic key -> (field, the smallest value kfs takes)
MINIMUMS = {
    "segment.bytes": ("segment_bytes", 14),
    "segment.ms": ("segment_ms", 1),
    "segment.jitter.ms": ("segment_jitter_ms", 0),
    "segment.index.bytes": ("segment_index_bytes", 4),
    "index.interval.bytes": ("index_interval_bytes", 0),
    "max.message.bytes": ("max_message_bytes", 0),
    "compression.gzip.level": ("compression_gzip_level", -1),
    "compression.lz4.level": ("compression_lz4_level", 1),
    "compression.zstd.level": ("compression_zstd_level", -131072),
    "batch.size": ("batch_size", 1),
    "retention.ms": ("retention_ms", -1),
    "retention.bytes": ("retention_bytes", -1),
    "file.delete.delay.ms": ("file_delete_delay_ms", 0),
    "flush.messages": ("flush_messages", 1),
    "flush.ms": ("flush_ms", 0),
    "delete.retention.ms": ("delete_retention_ms", 0),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", 0),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", 1),
    "message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", 0),
    "message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", 0),
}

# broker key -> (field, unit in ms or 1)
BROKER_KEYS = {
    "log.segment.bytes": ("segment_bytes", 1),
    "log.roll.ms": ("segment_ms", 1),
    "log.roll.hours": ("segment_ms", HOUR_MS),
    "log.roll.jitter.ms": ("segment_jitter_ms", 1),
    "log.roll.jitter.hours": ("segment_jitter_ms", HOUR_MS),
    "log.index.size.max.bytes": ("segment_index_bytes", 1),
    "log.index.interval.bytes": ("index_interval_bytes", 1),
    "message.max.bytes": ("max_message_bytes", 1),
    "compression.gzip.level": ("compression_gzip_level", 1),
    "compression.lz4.level": ("compression_lz4_level", 1),
    "compression.zstd.level": ("compression_zstd_level", 1),
    "batch.size": ("batch_size", 1),
    "log.retention.ms": ("retention_ms", 1),
    "log.retention.minutes": ("retention_ms", MINUTE_MS),
    "log.retention.hours": ("retention_ms", HOUR_MS),
    "log.retention.bytes": ("retention_bytes", 1),
    "log.segment.delete.delay.ms": ("file_delete_delay_ms", 1),
    "log.flush.interval.messages": ("flush_messages", 1),
    "log.flush.interval.ms": ("flush_ms", 1),
    "log.flush.scheduler.interval.ms": ("flush_ms", 1),
    "log.cleaner.delete.retention.ms": ("delete_retention_ms", 1),
    "log.cleaner.min.compaction.lag.ms": ("min_compaction_lag_ms", 1),
    "log.cleaner.max.compaction.lag.ms": ("max_compaction_lag_ms", 1),
    "log.message.timestamp.before.max.ms": ("message_timestamp_before_max_ms", 1),
    "log.message.timestamp.after.max.ms": ("message_timestamp_after_max_ms", 1),
}


def test_every_default_is_kafkas():
    config = LogConfig()
    assert {field: getattr(config, field) for field in KAFKA_DEFAULTS} == KAFKA_DEFAULTS


def test_the_manager_defaults_are_kafkas():
    assert LogManagerConfig() == LogManagerConfig(
        retention_check_interval_ms=300_000, flush_offset_checkpoint_interval_ms=60_000,
        flush_start_offset_checkpoint_interval_ms=60_000, transaction_timeout_ms=60_000,
        transaction_abort_timed_out_transaction_cleanup_interval_ms=10_000,
        log_cleaner_enable=True, log_cleaner_backoff_ms=15_000,
        log_cleaner_dedupe_buffer_size=134_217_728, log_cleaner_io_buffer_size=524_288,
        log_cleaner_io_buffer_load_factor=0.9,
        log_cleaner_io_max_bytes_per_second=1.7976931348623157e308)


@pytest.mark.parametrize("key", sorted(MINIMUMS))
def test_a_topic_key_takes_its_minimum_and_refuses_one_less(key):
    field, minimum = MINIMUMS[key]
    assert topic_overrides({key: f" {minimum} "}) == {field: minimum}
    with pytest.raises(InvalidConfigError) as info:
        topic_overrides({key: str(minimum - 1)})
    assert str(info.value) == f"{key}={minimum - 1}: must be at least {minimum}"


@pytest.mark.parametrize("key", sorted(BROKER_KEYS))
def test_a_broker_key_sets_its_field_in_its_unit(key):
    field, unit = BROKER_KEYS[key]
    assert broker_overrides({key: "30"}) == {field: 30 * unit}


def test_a_bad_broker_choice_or_ratio_names_its_broker_key():
    with pytest.raises(InvalidConfigError, match="^log.cleanup.policy='none': must be one of "):
        broker_overrides({"log.cleanup.policy": "none"})
    with pytest.raises(InvalidConfigError, match=r"^log.cleaner.min.cleanable.ratio=2.0: "):
        broker_overrides({"log.cleaner.min.cleanable.ratio": "2"})


def test_a_broker_key_below_its_minimum_is_refused_in_ms():
    with pytest.raises(InvalidConfigError, match=r"^log\.roll\.hours=0: must be at least 1$"):
        broker_overrides({"log.roll.hours": "0"})


@pytest.mark.parametrize("first, second, field, expected", [
    ("log.roll.ms", "log.roll.hours", "segment_ms", 5),
    ("log.roll.jitter.ms", "log.roll.jitter.hours", "segment_jitter_ms", 5),
    ("log.retention.ms", "log.retention.minutes", "retention_ms", 5),
    ("log.retention.minutes", "log.retention.hours", "retention_ms", 5 * MINUTE_MS),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms", "flush_ms", 5),
])
def test_the_first_broker_synonym_wins(first, second, field, expected):
    assert broker_overrides({second: "7", first: "5"}) == {field: expected}


def test_broker_choices_and_ratio():
    assert broker_overrides({"compression.type": "zstd", "log.cleanup.policy": "compact",
                             "log.message.timestamp.type": "LogAppendTime",
                             "log.cleaner.min.cleanable.ratio": "0.25"}) == {
        "compression_type": "zstd", "cleanup_policy": "compact",
        "message_timestamp_type": "LogAppendTime", "min_cleanable_dirty_ratio": 0.25}


@pytest.mark.parametrize("key, choices", [
    ("compression.type", ["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"]),
    ("cleanup.policy", ["delete", "compact", "compact,delete", "delete,compact"]),
    ("message.timestamp.type", ["CreateTime", "LogAppendTime"]),
])
def test_a_choice_takes_each_of_kafkas_values_and_names_them_when_refused(key, choices):
    for choice in choices:
        assert list(topic_overrides({key: f" {choice}"}).values()) == [choice]
    with pytest.raises(InvalidConfigError) as info:
        topic_overrides({key: "other"})
    assert str(info.value) == f"{key}='other': must be one of {', '.join(choices)}"


def test_the_dirty_ratio_takes_its_bounds_and_nothing_past_them():
    for value in (0.0, 1.0):
        assert topic_overrides({"min.cleanable.dirty.ratio": str(value)}) == {
            "min_cleanable_dirty_ratio": value}
    for value in ("-0.01", "1.01"):
        with pytest.raises(InvalidConfigError) as info:
            topic_overrides({"min.cleanable.dirty.ratio": value})
        assert str(info.value) == (f"min.cleanable.dirty.ratio={float(value)}: must be in "
                                   "[0.0, 1.0]")
    with pytest.raises(InvalidConfigError) as info:
        topic_overrides({"min.cleanable.dirty.ratio": "half"})
    assert str(info.value) == "min.cleanable.dirty.ratio='half': not a number"


def test_a_value_that_is_no_integer_is_named():
    with pytest.raises(InvalidConfigError) as info:
        topic_overrides({"segment.bytes": "1g"})
    assert str(info.value) == "segment.bytes='1g': not an integer"


def test_an_unknown_topic_key_is_refused_and_a_known_unapplied_one_warned(caplog):
    with pytest.raises(InvalidConfigError) as info:
        topic_overrides({"segment.byte": "1"})
    assert str(info.value) == "unknown topic config 'segment.byte'"
    with caplog.at_level(logging.WARNING, logger="storage.config"):
        assert topic_overrides({"preallocate": "true"}) == {}
    assert caplog.messages == ["topic config preallocate=true is Kafka's but kfs does not apply it yet"]


def test_the_codec_and_its_level():
    assert LogConfig().codec == CompressionType.NONE and LogConfig().compression_level is None
    assert LogConfig(compression_type="gzip", compression_gzip_level=4).compression_level == 4
    assert LogConfig(compression_type="lz4", compression_lz4_level=5).compression_level == 5
    assert LogConfig(compression_type="zstd", compression_zstd_level=7).compression_level == 7
    assert LogConfig(compression_type="zstd").codec == CompressionType.ZSTD


def test_a_codec_level_out_of_range_is_refused_when_the_config_is_made():
    for field in ("compression_gzip_level", "compression_lz4_level", "compression_zstd_level"):
        with pytest.raises(Exception):
            LogConfig(**{field: 99})


def test_the_cleanup_policy_and_timestamp_type():
    assert LogConfig().deletes and not LogConfig().compact
    both = LogConfig(cleanup_policy="compact,delete")
    assert both.deletes and both.compact
    assert not LogConfig(cleanup_policy="compact").deletes
    assert LogConfig().timestamp_type == TimestampType.CREATE_TIME
    assert LogConfig(message_timestamp_type="LogAppendTime").timestamp_type == \
        TimestampType.LOG_APPEND_TIME


def test_kafka_refuses_a_segment_below_one_mebibyte():
    assert kafka_refusals({"segment.bytes": "1048575"}) == [
        "segment.bytes=1048575 is below Kafka 4.1.1's minimum of 1048576"]
    assert kafka_refusals({"segment.bytes": "1048576"}) == []
    assert kafka_refusals({"log.segment.bytes": " 100"}, broker=True) == [
        "log.segment.bytes=100 is below Kafka 4.1.1's minimum of 1048576"]
    assert kafka_refusals({"log.segment.bytes": "100"}) == []
    assert kafka_refusals({"segment.bytes": "x"}) == []


def test_topic_keys_override_broker_keys_over_kafkas_defaults(tmp_path):
    (tmp_path / "server.properties").write_text("log.roll.hours=1\nlog.retention.bytes=5\n")
    (tmp_path / "t.topic.properties").write_text("retention.bytes=9\n")
    broker = load_broker_config(tmp_path)
    config = load_log_config(tmp_path, "t", broker)
    assert (config.segment_ms, config.retention_bytes, config.segment_bytes) == (
        HOUR_MS, 9, 1_073_741_824)
    assert load_log_config(tmp_path, "other", broker).retention_bytes == 5


def test_a_refused_value_is_warned_once_per_process(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(config_module, "_warned", set())
    (tmp_path / "server.properties").write_text("log.segment.bytes=1000\n")
    (tmp_path / "t.topic.properties").write_text("segment.bytes=2000\n")
    with caplog.at_level(logging.WARNING, logger="storage.config"):
        for _ in range(2):
            load_broker_config(tmp_path)
            load_log_config(tmp_path, "t", {})
    assert caplog.messages == [
        f"{tmp_path / 'server.properties'}: log.segment.bytes=1000 is below Kafka 4.1.1's "
        "minimum of 1048576: kfs uses it, but a Kafka broker refuses to start with it",
        f"{tmp_path / 't.topic.properties'}: segment.bytes=2000 is below Kafka 4.1.1's minimum "
        "of 1048576: kfs uses it, but a Kafka broker refuses it (kfs adopt refuses the topic)"]


def test_manager_keys_take_one_and_refuse_zero(tmp_path):
    (tmp_path / "server.properties").write_text(
        "log.retention.check.interval.ms=1\ntransaction.timeout.ms=2\n"
        "log.cleaner.io.buffer.load.factor=0.5\nlog.cleaner.enable=FALSE\n"
        "log.cleaner.dedupe.buffer.size=3\nlog.cleaner.io.max.bytes.per.second=0\n")
    config = load_manager_config(tmp_path)
    assert (config.retention_check_interval_ms, config.transaction_timeout_ms,
            config.log_cleaner_io_buffer_load_factor, config.log_cleaner_enable,
            config.log_cleaner_dedupe_buffer_size,
            config.log_cleaner_io_max_bytes_per_second) == (1, 2, 0.5, False, 3, 0.0)
    (tmp_path / "server.properties").write_text("log.cleaner.backoff.ms=0\n")
    with pytest.raises(InvalidConfigError, match="^log.cleaner.backoff.ms=0: must be at least 1$"):
        load_manager_config(tmp_path)
    (tmp_path / "server.properties").write_text("log.cleaner.io.buffer.load.factor=1.5\n")
    with pytest.raises(InvalidConfigError,
                       match=r"^log.cleaner.io.buffer.load.factor=1.5: must be in \[0.0, 1.0\]$"):
        load_manager_config(tmp_path)


def test_the_cleaner_switch_is_true_or_false_only(tmp_path):
    (tmp_path / "server.properties").write_text("log.cleaner.enable= True\n")
    assert load_manager_config(tmp_path).log_cleaner_enable is True
    (tmp_path / "server.properties").write_text("log.cleaner.enable=yes\n")
    with pytest.raises(InvalidConfigError) as info:
        load_manager_config(tmp_path)
    assert str(info.value) == "log.cleaner.enable='yes': must be true or false"


def test_properties_are_read_as_latin_1_as_java_reads_them(tmp_path):
    (tmp_path / "a.properties").write_bytes(b"name=caf\xe9\n")
    assert read_properties(tmp_path / "a.properties") == {"name": "caf\xe9"}


def test_properties_absent_or_unnameable_are_empty(tmp_path):
    assert read_properties(tmp_path / "none.properties") == {}
    assert read_properties(tmp_path / ("t" * 250 + ".topic.properties")) == {}
    (tmp_path / "a.properties").write_text("a=1\nb = x\\\n  y\n")
    assert read_properties(tmp_path / "a.properties") == {"a": "1", "b": "xy"}
    with pytest.raises(OSError) as info:
        read_properties(tmp_path)  # a directory
    assert info.value.errno != errno.ENAMETOOLONG
