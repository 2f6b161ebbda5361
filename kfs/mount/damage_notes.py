"""What the mount does about a damaged partition (``Log.damage``, or a batch a read found
corrupt): every other partition and every readable record is served as usual, reads past the
damage get EIO, listings give what can be read and then EIO, the partition directory's
``user.kfs.damage`` attribute and the mount's log say what is wrong, and a writable mount
refuses appends to a partition whose end could not be read (EIO) until ``kfs verify --repair``.
"""

from __future__ import annotations

import logging
from typing import Any

from storage.damage import LogDamage
from storage.isolation import IsolationLevel
from storage.errors import CorruptRecordError, InvalidRecordError

log = logging.getLogger(__name__)

DAMAGE_XATTR = b"user.kfs.damage"
KFS_XATTR_PREFIX = b"user.kfs."
_READ_ERRORS = (CorruptRecordError, InvalidRecordError)


class DamageNotes:
    """The damage reads have found, per partition id: each new one is logged; the first is
    what the partition's ``user.kfs.damage`` tells."""

    def __init__(self) -> None:
        self._found: dict[int, dict[str, None]] = {}  # pid -> texts, in the order found

    def note(self, pid: int, name: str, damage: LogDamage | Exception) -> None:
        found = self._found.setdefault(pid, {})
        text = str(damage)
        if text not in found:
            found[text] = None
            log.error("%s: damaged: %s (reads of it give EIO; `kfs verify --repair` mends it)",
                      name, text)

    def xattr(self, pid: int, plog: Any, writable: bool) -> bytes | None:
        """The ``user.kfs.damage`` value of partition ``pid``: what is wrong, or None."""
        if plog.damage is not None:
            text = str(plog.damage)
            if writable:
                text += "; appends are refused until `kfs verify --repair`"
        elif plog.salvaged:  # what recovery at open cut (kept in the quarantine), a salvage
            text = "; ".join(plog.salvaged)
        elif self._found.get(pid):
            texts = list(self._found[pid])
            text = texts[0] + (f" (and {len(texts) - 1} more found)" if len(texts) > 1 else "")
        else:
            return None
        return text.encode("utf-8", "replace")


def readable_run(plog: Any, want: int, limit: int, isolation: IsolationLevel,
                 found: list[LogDamage]) -> list[Any]:
    """Up to ``limit`` records from offset ``want`` as ``LogReader.records_from`` gives them; when
    a batch among them cannot be read, the records around it instead, its damage appended to
    ``found``. Runs in a worker thread."""
    try:
        return plog.reader.records_from(want, limit, isolation)
    except _READ_ERRORS:
        pass
    run: list[Any] = []
    for item in plog.reader.readable_record_lists(want, isolation):
        if isinstance(item, LogDamage):
            found.append(item)
            continue
        run.extend(item)
        if len(run) >= limit:
            break
    return run
