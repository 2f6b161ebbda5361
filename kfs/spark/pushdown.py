"""Filter pushdown: Spark's pushed filters on ``partition``, ``offset`` and ``timestamp``
turned into bounds the planner resolves through the indexes.

``partition`` and ``offset`` comparisons are exact (the planner reads precisely those offsets,
Spark need not re-check them). A lower bound on ``timestamp`` becomes a starting offset through
the time index (the first offset whose timestamp reaches it: no earlier record can match), but
Kafka timestamps need not increase, so timestamp filters are also handed back for Spark to
evaluate on the rows read.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, field

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)

_INT64_MAX = 2**63 - 1


@dataclass
class Pushed:
    """What the pushed filters allow: ``partitions`` (None = any), offsets in
    ``[min_offset, max_offset)``, and records at or after the first with timestamp >=
    ``min_timestamp`` (epoch ms; None = no bound)."""

    partitions: set[int] | None = None
    min_offset: int = 0
    max_offset: int = _INT64_MAX
    min_timestamp: int | None = None
    kept: list[Filter] = field(default_factory=list)

    def allows_partition(self, partition: int) -> bool:
        return self.partitions is None or partition in self.partitions


def push(filters: list[Filter]) -> tuple[Pushed, list[Filter]]:
    """Split ``filters`` (ANDed) into what the planner applies and what Spark must still
    evaluate (returned by reference, as ``DataSourceReader.pushFilters`` requires)."""
    pushed, remaining = Pushed(), []
    for f in filters:
        column = f.attribute[0].lower() if len(f.attribute) == 1 else None
        if column == "partition" and _push_partition(pushed, f):
            continue
        if column == "offset" and _push_offset(pushed, f):
            continue
        if column == "timestamp":
            _push_timestamp(pushed, f)
        remaining.append(f)
    return pushed, remaining


def _push_partition(pushed: Pushed, f: Filter) -> bool:
    if isinstance(f, In):
        allowed = {v for v in f.value if isinstance(v, int)}
    elif isinstance(f, EqualTo) and isinstance(f.value, int):
        allowed = {f.value}
    else:
        low, high = _int_bounds(f)
        if low is None and high is None:
            return False
        allowed = set(range(max(low or 0, 0), min(high if high is not None else 2**31, 2**31)))
    pushed.partitions = allowed if pushed.partitions is None else pushed.partitions & allowed
    return True


def _push_offset(pushed: Pushed, f: Filter) -> bool:
    if isinstance(f, EqualTo) and isinstance(f.value, int):
        low, high = f.value, f.value + 1
    else:
        low, high = _int_bounds(f)
        if low is None and high is None:
            return False
    if low is not None:
        pushed.min_offset = max(pushed.min_offset, low)
    if high is not None:
        pushed.max_offset = min(pushed.max_offset, high)
    return True


def _int_bounds(f: Filter) -> tuple[int | None, int | None]:
    """[low, high) of an integer comparison, or (None, None) for anything else."""
    v = f.value if hasattr(f, "value") else None
    if not isinstance(v, int) or isinstance(v, bool):
        return None, None
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return None, v
    if isinstance(f, LessThanOrEqual):
        return None, v + 1
    return None, None


def _push_timestamp(pushed: Pushed, f: Filter) -> None:
    if not isinstance(f, (GreaterThan, GreaterThanOrEqual, EqualTo)):
        return
    if not isinstance(f.value, dt.datetime):
        return
    micros = _epoch_micros(f.value)
    # ts_ms >= t_us / 1000, or > for GreaterThan: the smallest whole millisecond that passes
    low = micros // 1000 + 1 if isinstance(f, GreaterThan) else math.ceil(micros / 1000)
    pushed.min_timestamp = max(pushed.min_timestamp or 0, low)


def _epoch_micros(value: dt.datetime) -> int:
    """Microseconds since the epoch; a naive datetime is local time, as PySpark converts
    Spark timestamps."""
    if value.tzinfo is None:
        value = value.astimezone()
    delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
