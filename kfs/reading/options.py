"""The source's options, parsed and checked once, with the names and meanings of Spark's Kafka
source (``KafkaSourceProvider``): which partitions (``subscribe``, ``subscribePattern``,
``assign``), where to start and stop (``startingOffsets``, ``endingOffsets``, by timestamp), how
to split (``minPartitions``, ``maxRecordsPerPartition``) and ``failOnDataLoss``.

Offsets in the JSON forms are per partition, ``{"topic": {"0": 23, "1": -2}}``: -2 is the earliest
offset, -1 the latest. Timestamps are epoch milliseconds. Bad options raise ValueError with the
option named, before anything is read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from storage.directory import StoreOptions
from storage.isolation import IsolationLevel

EARLIEST = -2  # Kafka's ListOffsetsRequest.EARLIEST_TIMESTAMP, as Spark's JSON offsets use it
LATEST = -1  # ListOffsetsRequest.LATEST_TIMESTAMP

_STRATEGIES = ("error", "latest")
# Every option the source reads, as Spark's Kafka source spells them (keys are case-insensitive)
KNOWN_OPTIONS = (
    "path", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
    "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "minPartitions",
    "maxRecordsPerPartition", "maxOffsetsPerTrigger", "maxBytesPerPartition", "failOnDataLoss",
    "includeHeaders", "isolation.level", "kafka.isolation.level", "remote.path",
    *StoreOptions.NAMES,
)


@dataclass(frozen=True)
class Bound:
    """One end of the range to read: ``kind`` is "earliest", "latest", "offsets" (``per_partition``
    maps (topic, partition) to an offset, -2/-1 allowed), "timestamp" (``timestamp`` for every
    partition) or "timestamps" (``per_partition`` maps to a timestamp)."""

    kind: str
    per_partition: dict[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options of one query (read or stream)."""

    path: str
    subscribe: tuple[str, ...] | None
    subscribe_pattern: str | None
    assign: tuple[tuple[str, int], ...] | None
    starting: Bound
    ending: Bound
    by_timestamp_strategy: str
    min_partitions: int | None
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    fail_on_data_loss: bool
    include_headers: bool
    isolation_level: IsolationLevel
    remote_path: str | None = None  # the RemoteStorageManager's root URI of a tiered topic
    store: StoreOptions = StoreOptions()  # how to reach an object store (endpoint, region)
    # a live cluster's client settings (the ``kafka.``-prefixed options, prefix taken off:
    # ``bootstrap.servers``, security...) as (name, value) pairs, none for a directory;
    # secrets among them: no repr
    client_settings: tuple[tuple[str, str], ...] = field(default=(), repr=False)

    @property
    def kafka(self) -> dict[str, str]:
        """The cluster's client settings (librdkafka's names), {} for a directory."""
        return dict(self.client_settings)

    @property
    def cluster(self) -> bool:
        """Whether the query reads a live cluster (``kafka.bootstrap.servers``)."""
        return bool(self.kafka.get("bootstrap.servers"))

    @property
    def where(self) -> str:
        """What is read, for a message: the path, or the cluster's bootstrap servers."""
        return self.path or f"the cluster at {self.kafka.get('bootstrap.servers')}"

    def matches(self, topic: str, partition: int) -> bool:
        """Whether the partition is one the query reads (subscription or assignment)."""
        if self.assign is not None:
            return (topic, partition) in self.assign
        if self.subscribe is not None:
            return topic in self.subscribe
        return re.fullmatch(self.subscribe_pattern, topic) is not None


def parse_options(options: Mapping[str, str], streaming: bool = False) -> SourceOptions:
    """Parse Spark's option map (case-insensitive keys) into :class:`SourceOptions`.

    Batch queries default to earliest..latest, streaming ones start at latest (as Spark's Kafka
    source). Raises ValueError for a missing ``path``, not exactly one of subscribe /
    subscribePattern / assign, malformed JSON or numbers, and the combinations Spark refuses
    (a batch query starting at latest or ending at earliest, ``endingOffsets`` on a stream)."""
    kafka = _client_settings(options)
    opts = {k.lower(): v for k, v in options.items()}
    _check_known(opts)
    path = opts.get("path") or ""
    if bool(path) == bool(kafka.get("bootstrap.servers")):
        raise ValueError('give option "path" (a log directory) or "kafka.bootstrap.servers" '
                         '(a live cluster), one of them' if not path else
                         'give option "path" or "kafka.bootstrap.servers", not both')
    subscribe, pattern, assign = _subscription(opts)
    starting = _bound(opts, "starting", default="latest" if streaming else "earliest")
    ending = _bound(opts, "ending", default="latest")
    if streaming and any(k in opts for k in
                         ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp")):
        raise ValueError("ending offset options are not supported by streaming queries")
    if not streaming:
        _check_batch_bounds(starting, ending)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").lower()
    if strategy not in _STRATEGIES:
        raise ValueError(f"startingOffsetsByTimestampStrategy must be one of {_STRATEGIES}")
    isolation = IsolationLevel.parse(  # ValueError for an unknown level
        opts.get("isolation.level", opts.get("kafka.isolation.level", "read_uncommitted")))
    return SourceOptions(
        path=path,
        subscribe=subscribe,
        subscribe_pattern=pattern,
        assign=assign,
        starting=starting,
        ending=ending,
        by_timestamp_strategy=strategy,
        min_partitions=_positive_int(opts, "minPartitions"),
        max_records_per_partition=_positive_int(opts, "maxRecordsPerPartition"),
        max_offsets_per_trigger=_positive_int(opts, "maxOffsetsPerTrigger"),
        fail_on_data_loss=_boolean(opts, "failOnDataLoss", True),
        include_headers=_boolean(opts, "includeHeaders", False),
        isolation_level=isolation,
        remote_path=opts.get("remote.path") or None,
        store=StoreOptions.from_options(opts),
        client_settings=tuple(sorted(kafka.items())),
    )


# kafka.* options Spark's Kafka source refuses (KafkaSourceProvider): kfs refuses them too
_REFUSED_CLIENT_SETTINGS = ("auto.offset.reset", "key.deserializer", "value.deserializer",
                            "enable.auto.commit", "interceptor.classes")


def _client_settings(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.``-prefixed options, prefix taken off (names keep their case: they are the
    client's), but ``kafka.isolation.level`` (the source's own). Raises ValueError for one
    Spark's Kafka source refuses."""
    settings = {k[len("kafka."):]: str(v) for k, v in options.items()
                if k.lower().startswith("kafka.") and k.lower() != "kafka.isolation.level"}
    refused = sorted(k for k in settings if k.lower() in _REFUSED_CLIENT_SETTINGS)
    if refused:
        raise ValueError(f"Kafka option(s) {', '.join('kafka.' + k for k in refused)} are not "
                         "supported: kfs plans and reads the offsets itself, as Spark's Kafka "
                         "source does")
    return settings


def _check_known(opts: dict[str, str]) -> None:
    """ValueError naming an option the source does not read (a mistyped one would otherwise
    be ignored), and the ones it knows."""
    known = {name.lower() for name in KNOWN_OPTIONS}
    unknown = sorted(k for k in opts if k not in known and not k.startswith("kafka."))
    if unknown:
        raise ValueError(f"unknown kfs option(s) {', '.join(unknown)}; the options are "
                         f"{', '.join(KNOWN_OPTIONS)}")


def _subscription(opts: dict[str, str]):
    given = [k for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise ValueError(
            "exactly one of the options assign, subscribe, subscribePattern must be specified")
    if "subscribe" in opts:
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise ValueError(f"no topics to subscribe to: subscribe={opts['subscribe']!r}")
        return topics, None, None
    if "subscribepattern" in opts:
        pattern = opts["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as e:
            raise ValueError(f"subscribePattern {pattern!r} is not a regular expression: {e}") from None
        return None, pattern, None
    parsed = _json(opts["assign"], "assign")
    if not isinstance(parsed, dict) or not all(
            isinstance(ps, list) and all(isinstance(p, int) for p in ps) for ps in parsed.values()):
        raise ValueError(f'assign must look like {{"topicA":[0,1]}}, not {opts["assign"]!r}')
    pairs = tuple(sorted((t, p) for t, ps in parsed.items() for p in ps))
    if not pairs:
        raise ValueError("assign names no partition")
    return None, None, pairs


def _bound(opts: dict[str, str], side: str, default: str) -> Bound:
    """Spark's precedence: ``<side>Timestamp``, then ``<side>OffsetsByTimestamp``, then
    ``<side>Offsets``."""
    if f"{side}timestamp" in opts:
        return Bound("timestamp", timestamp=_timestamp(opts[f"{side}timestamp"], f"{side}Timestamp"))
    if f"{side}offsetsbytimestamp" in opts:
        name = f"{side}OffsetsByTimestamp"
        per = _per_partition(opts[f"{side}offsetsbytimestamp"], name)
        for tp, ts in per.items():
            if ts < 0:
                raise ValueError(f"{name}: timestamp {ts} of {tp[0]}-{tp[1]} is negative")
        return Bound("timestamps", per_partition=per)
    text = opts.get(f"{side}offsets", default).strip()
    if text.lower() in ("earliest", "latest"):
        return Bound(text.lower())
    name = f"{side}Offsets"
    per = _per_partition(text, name)
    for tp, offset in per.items():
        if offset < EARLIEST:
            raise ValueError(f"{name}: offset {offset} of {tp[0]}-{tp[1]} is not -2, -1 or >= 0")
    return Bound("offsets", per_partition=per)


def _check_batch_bounds(starting: Bound, ending: Bound) -> None:
    if starting.kind == "latest" or (
            starting.kind == "offsets" and LATEST in starting.per_partition.values()):
        raise ValueError("startingOffsets: latest (-1) is not allowed for batch queries")
    if ending.kind == "earliest" or (
            ending.kind == "offsets" and EARLIEST in ending.per_partition.values()):
        raise ValueError("endingOffsets: earliest (-2) is not allowed for batch queries")


def _per_partition(text: str, name: str) -> dict[tuple[str, int], int]:
    parsed = _json(text, name)
    try:
        return {(topic, int(p)): int(v) for topic, parts in parsed.items() for p, v in parts.items()}
    except (AttributeError, TypeError, ValueError):
        raise ValueError(f'{name} must be "earliest", "latest" or like '
                         f'{{"topicA":{{"0":23,"1":-2}}}}, not {text!r}') from None


def _json(text: str, name: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{name} is not valid JSON ({e}): {text!r}") from None


def _timestamp(text: str, name: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{name} must be epoch milliseconds, not {text!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")
    return value


def _positive_int(opts: dict[str, str], name: str) -> int | None:
    text = opts.get(name.lower())
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ValueError(f"{name} must be a positive integer, not {text!r}")
    return value


def _boolean(opts: dict[str, str], name: str, default: bool) -> bool:
    text = opts.get(name.lower())
    if text is None:
        return default
    if text.strip().lower() not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, not {text!r}")
    return text.strip().lower() == "true"
