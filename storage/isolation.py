"""Kafka's consumer ``isolation.level`` (``org.apache.kafka.common.IsolationLevel``): what a
reader sees of transactions. ``read_uncommitted`` (the default) reads every data record up to
the log end offset; ``read_committed`` leaves out aborted transactions and stops at the last
stable offset (``Log.visible_end``)."""

from __future__ import annotations

import enum


class IsolationLevel(enum.Enum):
    READ_UNCOMMITTED = "read_uncommitted"
    READ_COMMITTED = "read_committed"

    @classmethod
    def parse(cls, name: str) -> IsolationLevel:
        """The level named as Kafka's config names it; ValueError for any other name."""
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"isolation.level must be one of {cls.names()}, not {name!r}") from None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(level.value for level in cls)

    @property
    def read_committed(self) -> bool:
        return self is IsolationLevel.READ_COMMITTED
