"""Which segments retention deletes (the planning half of Kafka's
``UnifiedLog.deleteOldSegments``): pure rules over a log's segments, its config and the log
start offset; ``Log.delete_old_segments`` applies the plan. Sizes are bytes; times epoch ms.
"""

from __future__ import annotations

from collections.abc import Callable

from storage.config import LogConfig
from storage.segment import LogSegment

# predicate(segment, the segment after it or None)
Rule = Callable[[LogSegment, "LogSegment | None"], bool]


def retention_plan(segments: list[LogSegment], config: LogConfig, log_start_offset: int,
                   now: int) -> list[tuple[LogSegment, str]]:
    """What retention deletes of ``segments`` (oldest first) at ``now``, each with the rule that
    deletes it: ``below the log start offset`` (a segment the next one's base offset is at or
    below ``log_start_offset`` of), then with ``delete`` in ``cleanup.policy`` the oldest
    while the log exceeds ``retention.bytes`` (``retention.bytes=N``), then those whose largest
    timestamp is more than ``retention.ms`` before ``now`` (``retention.ms=N``). Each rule
    stops at the first segment it keeps; an empty active segment is never deleted."""
    remaining, plan = list(segments), []

    def take(rule: Rule, why: str) -> None:
        nonlocal remaining
        doomed = _deletable(rule, remaining)
        plan.extend((segment, why) for segment in doomed)
        remaining = remaining[len(doomed):]

    take(lambda _segment, following: following is not None and
         following.base_offset <= log_start_offset, "below the log start offset")
    if config.deletes:
        take(_size_breach(sum(s.size for s in remaining), config.retention_bytes),
             f"retention.bytes={config.retention_bytes}")
        take(lambda segment, _next: 0 <= config.retention_ms < now - segment.largest_timestamp,
             f"retention.ms={config.retention_ms}")
    return plan


def describe_retention_plan(log_, plan: list[tuple[LogSegment, str]]) -> str:
    """One line saying what ``plan`` (``Log.retention_plan``, oldest first) deletes of
    ``log_`` (a ``storage.log.Log``): segments, offsets, bytes and the rules, as ``kfs
    retention`` prints it and the mount logs it before its first retention pass."""
    doomed = [segment for segment, _ in plan]
    segments = log_.segments.all()
    end = segments[len(doomed)].base_offset if len(doomed) < len(segments) else log_.log_end_offset
    rules = ", ".join(dict.fromkeys(why for _, why in plan))
    size = sum(s.size for s in doomed)
    return (f"{log_.name}: {len(doomed)} of {len(segments)} segment(s), offsets "
            f"{log_.log_start_offset}-{end - 1} ({size} of {log_.segments.size_in_bytes} "
            f"bytes): {rules}")


def _size_breach(size: int, retention_bytes: int) -> Rule:
    """The retention.bytes rule over segments of ``size`` bytes in all: drop oldest segments
    while what remains stays at or above the limit
    (``UnifiedLog.deleteRetentionSizeBreachedSegments``)."""
    excess = size - retention_bytes
    if retention_bytes < 0 or excess < 0:
        return lambda _segment, _next: False

    def breached(segment: LogSegment, _next) -> bool:
        nonlocal excess
        if excess - segment.size < 0:
            return False
        excess -= segment.size
        return True
    return breached


def _deletable(rule: Rule, segments: list[LogSegment]) -> list[LogSegment]:
    """The oldest of ``segments`` satisfying ``rule``, stopping at the first that does not; an
    empty last segment is never returned. Nothing at or above the high watermark goes: with one
    replica it is the log end offset, past every segment."""
    out = []
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        if following is None and segment.size == 0 or not rule(segment, following):
            break
        out.append(segment)
    return out
