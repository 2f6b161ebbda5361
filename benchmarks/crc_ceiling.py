"""The ceiling of any pass that checks .log files (``kfs verify``, recovery): read the files in
large blocks into one reused buffer and compute CRC-32C over every byte, nothing else.

    python benchmarks/crc_ceiling.py FILE...   # prints the number of bytes read

bench.py runs it in process and as this command (beside ``kfs verify`` as a command);
bench_recovery.py runs it in process.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable

from crc32c import crc32c

BLOCK = 1 << 20  # 1 MiB: as fast as larger blocks here (stays in cache), cheap to allocate


def read_crc(paths: Iterable[str]) -> int:
    """Read every file in BLOCK-byte blocks into one buffer, CRC-32C each file; bytes read."""
    buf = bytearray(BLOCK)
    view = memoryview(buf)
    total = 0
    for path in paths:
        crc = 0
        with open(path, "rb", buffering=0) as f:
            while k := f.readinto(buf):
                crc = crc32c(view[:k], crc)
                total += k
    return total


if __name__ == "__main__":
    print(read_crc(sys.argv[1:]))
