"""The engine's clock, as Kafka's ``org.apache.kafka.common.utils.Time``: one object injected
from the ``LogManager`` into every log, segment, producer state and the cleaner, so that a whole
run can be held at one instant (``kfs compact --now-ms``; Kafka's ``MockTime`` in its tests).
Times are epoch milliseconds."""

from __future__ import annotations

import time


class Clock:
    """What the engine asks of time: ``milliseconds()`` (``Time.milliseconds``)."""

    def milliseconds(self) -> int:
        raise NotImplementedError


class SystemClock(Clock):
    """The wall clock (``Time.SYSTEM``, ``System.currentTimeMillis``)."""

    def milliseconds(self) -> int:
        return time.time_ns() // 1_000_000


class FixedClock(Clock):
    """A clock that always reads ``ms`` (epoch ms): a run at one instant."""

    def __init__(self, ms: int) -> None:
        self.ms = ms

    def milliseconds(self) -> int:
        return self.ms

    def __repr__(self) -> str:
        return f"FixedClock({self.ms})"


SYSTEM_CLOCK = SystemClock()


def now_ms() -> int:
    """The wall clock in epoch milliseconds, for code outside the engine's injected clock (a
    batch built without timestamps, a view's durations)."""
    return SYSTEM_CLOCK.milliseconds()
