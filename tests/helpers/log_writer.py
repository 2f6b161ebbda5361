"""The writer tests/engine/test_crash.py kills: a child process appending random batches to
every partition of a backing directory through the engine, reporting on its stdout.

    python -m helpers.log_writer BACKING SEED       (PYTHONPATH: the checkout and tests/)

It prints ``loading`` before it opens the directory (and recovers it), ``ready`` once open,
then ``<partition> <first> <last>`` after each append returned (its acknowledgement), every
line flushed at once. "Acknowledged" means ``Log.append`` returned: the batch is in the page
cache, which outlives the process.
"""

from __future__ import annotations

import hashlib
import random
import sys

from storage import LogManager

KEYED = "keyed-0"  # the partition whose records have keys


def value_for(name: str, offset: int) -> bytes:
    """The value the writer appends at ``offset`` of partition ``name`` (0 to ~300 bytes, some
    empty), so a reader can check every record without being told its content."""
    digest = hashlib.blake2b(f"{name}/{offset}".encode(), digest_size=8).hexdigest().encode()
    return b"" if offset % 17 == 5 else b"%d:" % offset + digest * (offset % 37)


def key_for(name: str, offset: int) -> bytes | None:
    return None if offset % 3 else b"k%d" % offset


def writer_main(backing: str, seed: int) -> None:
    """Appends random batches to every partition of ``backing`` and prints ``<partition>
    <first> <last>`` (flushed) after each append returned; forever, until killed."""
    rng = random.Random(seed)
    print("loading", flush=True)
    mgr = LogManager(backing)
    names = mgr.partition_names()
    print("ready", flush=True)
    for i in range(1, 10**9):
        name = rng.choice(names)
        log = mgr.get(name)
        n = rng.choice([1, 1, 2, 3, 7, 20, 60, 150])
        first = log.log_end_offset
        offsets = range(first, first + n)
        keys = [key_for(name, o) for o in offsets] if name == KEYED else None
        assert log.append([value_for(name, o) for o in offsets], keys) == first
        sys.stdout.write(f"{name} {first} {first + n - 1}\n")
        sys.stdout.flush()
        if i % 40 == 0:
            mgr.checkpoint_recovery_points()


def acknowledged(stdout: str) -> dict[str, int]:
    """The last acknowledged offset of each partition from the writer's complete lines."""
    last: dict[str, int] = {}
    for line in stdout.split("\n")[:-1]:  # a line cut by the kill is not an acknowledgement
        if line in ("loading", "ready"):
            continue
        name, first, end = line.split()
        assert name not in last or int(first) == last[name] + 1, "contiguous appends"
        last[name] = int(end)
    return last


if __name__ == "__main__":
    writer_main(sys.argv[1], int(sys.argv[2]))
