"""Following a directory that another process (a running broker) writes: whether it may have
changed since the last look, at the cost of one ``stat``.

A directory's mtime moves when an entry is created, deleted or renamed in it (not when a file
in it grows). File times come from a coarse clock (a few milliseconds), so two changes within
one tick can leave the same mtime: a directory whose mtime is within ``RACY_NS`` of now is
listed again at every look, as git treats a racily clean index. "Now" is the engine's clock
(``storage.clock``), which must read the time the kernel stamps mtimes with: a clock held in
the past only lists more often, one held in the future can miss a change.
"""

from __future__ import annotations

import os
from pathlib import Path

from storage.clock import SYSTEM_CLOCK, Clock

RACY_NS = 1_000_000_000
# How long a segment or log taken out of view stays open: a reader that took it just before
# (a stream chunk, a listing) finishes with the bytes it had.
RETIRED_S = 60.0


class DirectoryWatch:
    """``names()`` gives the entries of ``path`` when it may have changed since the last call
    that returned them, else None; ``again()`` makes the next call list it whatever its mtime.
    ``clock`` gives now for the racy-mtime window. Raises FileNotFoundError when the directory
    is gone."""

    def __init__(self, path: Path, clock: Clock = SYSTEM_CLOCK) -> None:
        self.path = path
        self._clock = clock
        self._stamp: tuple[int, int] | None = None

    def names(self) -> list[str] | None:
        st = os.stat(self.path)
        stamp = (st.st_ino, st.st_mtime_ns)
        now_ns = self._clock.milliseconds() * 1_000_000
        if stamp == self._stamp and now_ns - st.st_mtime_ns > RACY_NS:
            return None
        self._stamp = stamp
        return os.listdir(self.path)

    def again(self) -> None:
        self._stamp = None
