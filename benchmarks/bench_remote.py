"""Reading a partition from an object store (S3Proxy, a real S3 API server on loopback) against
reading the same files from the local disk, through the engine's reader (``read_columns``, what
Spark's tasks run), with the object store's request counts and bytes fetched.

    .venv/bin/python benchmarks/bench_remote.py [--megabytes 512] [--rounds 3]

Measured, medians of ``--rounds`` interleaved rounds (the machines are noisy; the ratios are
what hold):
  1. a full read: MB/s from the bucket and from disk, the ratio (target >= 0.5x), the ranged
     requests and bytes fetched;
  2. a 1% time range (``find_offset_by_timestamp`` at both ends, then ``read_columns``): bytes
     fetched from the object store as a share of the partition's bytes (target <= 3%);
  3. the peak RSS of a process doing the full read from the bucket (target <= 400 MB).

The data: ``--megabytes`` of 100-byte values, 1 ms apart, in 64 MiB segments, written with the
engine; the bucket is S3Proxy's filesystem backend over a copy of the directory. Everything
lives in a temp dir, removed at the end; the server is stopped on every exit.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from helpers.s3 import S3Server, s3proxy_missing  # noqa: E402  (tests/helpers/s3.py)

TOPIC = "remote-bench"
T0 = 1_700_000_000_000
VALUE = 100
SEGMENT_BYTES = 64 << 20


def write_log(backing: Path, megabytes: int) -> int:
    """About ``megabytes`` MB of records in ``TOPIC``-0 (through storage's API); the count."""
    from storage import LogManager
    from storage.records import build_batch

    (backing / f"{TOPIC}.topic.properties").write_text(f"segment.bytes={SEGMENT_BYTES}\n")
    mgr = LogManager(backing)
    log = mgr.create(f"{TOPIC}-0")
    n, per_batch = 0, 1000
    while log.segments.size_in_bytes < megabytes << 20:
        values = [b"%099d" % (n + i) for i in range(per_batch)]
        log.append_as_leader(build_batch(0, values, None, [T0 + n + i for i in range(per_batch)]))
        n += per_batch
    mgr.close()
    return n


def read_all(log, start: int = 0, end: int | None = None) -> int:
    return sum(t.num_rows for t in log.reader.read_columns(start, end))


class Counting:
    """Counts the object store's requests for bytes (ranged reads of .log objects, index
    objects fetched whole) and the bytes they fetched."""

    def __init__(self) -> None:
        from storage.remote.object_store import ObjectStore, RangedObject

        self.requests = self.bytes = 0
        fetch, read = RangedObject._fetch, ObjectStore.read_object

        def counted(obj, position, nbytes):
            self.requests += 1
            self.bytes += nbytes
            return fetch(obj, position, nbytes)

        def whole(store, path, limit=None):  # (an index object the cache did not hold)
            data = read(store, path, limit)
            self.requests += 1
            self.bytes += len(data or b"")
            return data
        RangedObject._fetch, ObjectStore.read_object = counted, whole


def open_remote(uri: str):
    from storage.remote.object_store import ObjectStore
    from storage.remote.remote_log import RemoteLogDirectory

    return RemoteLogDirectory(ObjectStore.from_uri(uri))


def peak_rss_mb(uri: str, env: dict[str, str]) -> tuple[float, int]:
    """(peak RSS in MB, rows) of a fresh process reading the whole partition from ``uri``."""
    code = (f"import resource, sys; sys.path.insert(0, {str(REPO)!r}); "
            "from benchmarks.bench_remote import open_remote, read_all; "
            f"d = open_remote({uri!r}); rows = read_all(d.get('{TOPIC}-0')); d.close(); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, rows)")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env}, check=True,
                         capture_output=True, text=True, timeout=3600).stdout.split()
    return int(out[0]) / 1024, int(out[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--megabytes", type=int, default=512)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    if (missing := s3proxy_missing()) is not None:
        print(f"bench_remote: {missing}", file=sys.stderr)
        return 2
    from storage import LogManager

    tmp = Path(tempfile.mkdtemp(prefix="kfs-bench-remote-"))
    server = S3Server(tmp / "s3", tmp / "server")
    try:
        local_dir = tmp / "local"
        local_dir.mkdir()
        print(f"writing {args.megabytes} MB ...", file=sys.stderr, flush=True)
        rows = write_log(local_dir, args.megabytes)
        server.start()
        os.environ.update(server.env())
        bucket = server.new_bucket()
        shutil.copytree(local_dir / f"{TOPIC}-0", server.base_dir / bucket / "logs" / f"{TOPIC}-0")
        uri = f"s3://{bucket}/logs"
        size = sum(f.stat().st_size for f in (local_dir / f"{TOPIC}-0").glob("*.log"))
        counting = Counting()
        local_s, remote_s, requests, fetched = [], [], [], []
        for round_ in range(args.rounds):
            for side in (("local", "remote") if round_ % 2 == 0 else ("remote", "local")):
                manager = (LogManager(local_dir, read_only=True) if side == "local"
                           else open_remote(uri))
                counting.requests = counting.bytes = 0
                started = time.perf_counter()
                got = read_all(manager.get(f"{TOPIC}-0"))
                seconds = time.perf_counter() - started
                manager.close()
                assert got == rows, (side, got, rows)
                if side == "local":
                    local_s.append(seconds)
                else:
                    remote_s.append(seconds)
                    requests.append(counting.requests)
                    fetched.append(counting.bytes)
        mb = size / 1e6
        local_mbs, remote_mbs = mb / statistics.median(local_s), mb / statistics.median(remote_s)
        print(f"\n== full read of {rows:,} records, {mb:,.0f} MB of .log (medians of "
              f"{args.rounds} interleaved rounds)")
        print(f"local disk        {local_mbs:8.0f} MB/s")
        print(f"S3Proxy (s3://)   {remote_mbs:8.0f} MB/s   {remote_mbs / local_mbs:.2f}x local "
              f"(target >= 0.5x); {statistics.median(requests):.0f} ranged requests, "
              f"{statistics.median(fetched) / 1e6:,.0f} MB fetched")

        counting.requests = counting.bytes = 0  # (the planning's requests count too)
        remote = open_remote(uri)
        log = remote.get(f"{TOPIC}-0")
        first = T0 + rows // 2
        start = log.reader.find_offset_by_timestamp(first).offset
        end = log.reader.find_offset_by_timestamp(first + rows // 100).offset
        got = read_all(log, start, end)
        remote.close()
        share = counting.bytes / size
        print(f"\n== a 1% time range ({got:,} records)")
        print(f"fetched {counting.bytes / 1e6:,.1f} MB in {counting.requests} ranged requests = "
              f"{share:.2%} of the partition's bytes (target <= 3%)")

        rss, got = peak_rss_mb(uri, server.env())
        assert got == rows
        print(f"\n== peak RSS of a process reading it all from the bucket: {rss:,.0f} MB "
              f"(target <= 400 MB)")
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
