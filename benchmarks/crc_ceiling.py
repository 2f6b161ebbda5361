"""The ceilings of any pass that checks .log files (``kfs verify``, recovery): read the files in
large blocks into one reused buffer and compute CRC-32C over the bytes, nothing else.

Two ceilings, both with the ``crc32c`` package kfs uses:

- ``read_crc``: CRC-32C over every byte in 1 MiB blocks, the fewest calls there can be;
- ``read_crc_batches``: CRC-32C over each batch's CRC range (bytes [21, size) of the batch, as the
  format defines it), the batch ends found before the clock starts. This is the CRC work a
  check of the format must do: ``crc32c`` runs about half as fast on a 16 KiB range as on 1 MiB
  (its fast path needs longer buffers), so it is the tighter ceiling for small batches.

    python benchmarks/crc_ceiling.py FILE...   # read_crc; prints the number of bytes read

bench.py runs read_crc in process and as this command (beside ``kfs verify`` as a command),
read_crc_batches in process; bench_recovery.py runs both in process.
"""

from __future__ import annotations

import os
import struct
import sys
from collections.abc import Iterable

from crc32c import crc32c

BLOCK = 1 << 20  # 1 MiB: as fast as larger blocks here (stays in cache), cheap to allocate
_LENGTH = struct.Struct(">i")  # batchLength, at byte 8 of a batch


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


def batch_plan(path: str) -> list[tuple[int, list[int]]]:
    """Blocks of whole batches of the .log at ``path`` (untimed setup for read_crc_batches):
    (block length, batch sizes in it), each block at most BLOCK bytes unless one batch is larger."""
    with open(path, "rb") as f:
        data = f.read()
    plan: list[tuple[int, list[int]]] = []
    sizes: list[int] = []
    pos = length = 0
    while pos + 12 <= len(data):
        size = 12 + _LENGTH.unpack_from(data, pos + 8)[0]
        if length and length + size > BLOCK:
            plan.append((length, sizes))
            sizes, length = [], 0
        sizes.append(size)
        length += size
        pos += size
    if sizes:
        plan.append((length, sizes))
    return plan


def read_crc_batches(plans: dict[str, list[tuple[int, list[int]]]]) -> int:
    """Read each file a block of whole batches at a time and CRC-32C each batch's CRC range
    (``plans`` from batch_plan); bytes read."""
    buf = bytearray(BLOCK)
    total = 0
    for path, plan in plans.items():
        fd = os.open(path, os.O_RDONLY)
        try:
            position = 0
            for length, sizes in plan:
                if length > len(buf):
                    buf = bytearray(length)
                view = memoryview(buf)[:os.preadv(fd, [memoryview(buf)[:length]], position)]
                start = 0
                for size in sizes:
                    crc32c(view[start + 21:start + size])
                    start += size
                position += length
                total += len(view)
        finally:
            os.close(fd)
    return total


if __name__ == "__main__":
    print(read_crc(sys.argv[1:]))
