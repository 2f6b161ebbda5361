"""The writer tests/mount/test_mount_crash.py (and benchmarks/crash_trials.py) runs while it
kills the serving process: a child process appending numbered lines to a mount's ``append``
file, reporting on its stdout.

    python -m helpers.append_writer APPEND FIRST SEED       (PYTHONPATH: the checkout and tests/)

It prints ``ready`` once the file is open, then ``<first> <last>`` once the ``write()`` that
carried lines ``first..last`` (or, for a trailing partial line, the ``close()``) returned: the
lines are acknowledged, in the page cache, which outlives the killed serving process.
"""

from __future__ import annotations

import hashlib
import os
import random
import sys


def line_for(n: int) -> bytes:
    """Line ``n`` of the writer (no newline; some empty): its content is known from its number."""
    digest = hashlib.blake2b(b"%d" % n, digest_size=6).hexdigest().encode()
    return b"" if n % 23 == 7 else b"line %d " % n + digest * (n % 11)


def writer_main(append: str, first: int, seed: int) -> None:
    """Append lines ``first, first+1, ...`` to ``append`` and print ``<first> <last>`` once the
    write() that carried them (or, for a trailing partial line, the close()) returned. Most
    writes go through one open file; some open, write lines ending in a partial one, close."""
    rng = random.Random(seed)
    fd = os.open(append, os.O_WRONLY | os.O_APPEND)
    print("ready", flush=True)
    n = first
    while True:
        count = rng.choice([1, 1, 2, 5, 30, 200])
        lines = [line_for(i) for i in range(n, n + count)]
        if rng.random() < 0.2 and lines[-1]:  # (an empty partial line would be no line)
            data = b"".join(line + b"\n" for line in lines[:-1]) + lines[-1]
            partial = os.open(append, os.O_WRONLY | os.O_APPEND)
            assert os.write(partial, data) == len(data)
            os.close(partial)
        else:
            data = b"".join(line + b"\n" for line in lines)
            assert os.write(fd, data) == len(data)
        print(f"{n} {n + count - 1}", flush=True)
        n += count


def acknowledged(stdout: str) -> int:
    """The last acknowledged line number (-1 when none)."""
    last = -1
    for line in stdout.split("\n")[:-1]:
        if line != "ready":
            last = int(line.split()[1])
    return last


if __name__ == "__main__":
    writer_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
