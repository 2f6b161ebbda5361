"""The engine's clock, as Kafka's ``org.apache.kafka.common.utils.Time``: one object injected
from the ``LogManager`` into every log, segment, producer state and the cleaner, so that a whole
run can be held at one instant (``kfs compact --now-ms``; Kafka's ``MockTime`` in its tests).

It gives the wall clock in epoch milliseconds (``Time.milliseconds``), a monotonic time in
seconds for deadlines and durations (``Time.nanoseconds``), and sleep (``Time.sleep``): nothing
else in kfs reads time or sleeps."""

from __future__ import annotations

import time


class Clock:
    """What the engine asks of time: ``milliseconds()`` (``Time.milliseconds``), and the
    system's ``monotonic()`` seconds and ``sleep(seconds)`` unless a subclass says otherwise
    (elapsed time stays real when the wall clock is held)."""

    def milliseconds(self) -> int:
        raise NotImplementedError

    def monotonic(self) -> float:
        """Seconds from an arbitrary start that never go back (``time.monotonic``)."""
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


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
