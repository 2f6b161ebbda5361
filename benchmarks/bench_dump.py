"""``kfs dump --deep-iteration --print-data-log`` against Kafka's own ``kafka-dump-log`` (Kafka
4.1.1's jars in ``.cache/kafka/lib``) on the same segments, written by a real broker.

    .venv/bin/python benchmarks/bench_dump.py [--size 1G] [--rounds 3] [--dir DIR] [--keep]

The segments: a Kafka 4.1.1 broker (``tests/helpers/kafka.py``, on loopback) takes records
through confluent_kafka until its partition's ``.log`` files hold ``--size`` bytes (1 GiB by
default; ``200M`` for a quick run), from one producer per codec (none, gzip, snappy, lz4, zstd),
each writing a fifth: keyed records, values of 60-700 bytes of JSON-like text (about half of
them of one of a few hundred words, so codecs find something), a header on every third. The
broker is stopped cleanly and its ``.log`` files are dumped by both tools. ``--dir`` keeps (and
on a later run reuses) the data there; without it everything is in a temp dir, removed at the
end unless ``--keep``.

Both tools run as a user runs them: ``kafka-dump-log.sh``'s command line (``kafka-run-class.sh``'s
JVM settings: 256 MiB heap, G1, full JIT) and ``python -m kfs dump``, each writing its output to
/dev/null. The first round also checks that both print the same bytes (a SHA-256 of each
output, read through a pipe; untimed). Then ``--rounds`` interleaved rounds (the order flipped
every round), medians printed: seconds, MB/s of ``.log`` read, and the ratio kfs/kafka of the
throughputs (target >= 2x). Page caches are warm for both (the files were just written and the
check round read them).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers import kafka as kafka_broker  # noqa: E402  (tests/helpers/kafka.py)

TOPIC = "dump-bench"
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# kafka-run-class.sh's defaults (KAFKA_HEAP_OPTS for a tool, KAFKA_JVM_PERFORMANCE_OPTS)
TOOL_JVM = ["-Xmx256M", "-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35", "-XX:+ExplicitGCInvokesConcurrent",
            "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true"]
OPTIONS = ("--deep-iteration", "--print-data-log")
DONE = ".bench-dump-complete"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


# -- the data -------------------------------------------------------------------------------


WORDS = [f"{w}{i}" for i in range(60) for w in (
    "order", "user", "amount", "status", "paid", "shipped", "item", "sku", "region", "eu-west")]


def value_for(rng: random.Random, i: int) -> bytes:
    if i % 2:
        body = " ".join(rng.choices(WORDS, k=rng.randrange(5, 80)))
    else:
        body = rng.randbytes(rng.randrange(20, 400)).hex()
    return (f'{{"id":{i},"ts":{1_700_000_000_000 + i},"note":"{body}"}}').encode()


def log_bytes(partition: Path) -> int:
    return sum(p.stat().st_size for p in partition.glob("*.log"))


def build(data: Path, size: int) -> Path:
    """A broker's partition of about ``size`` bytes of ``.log`` (see the module docstring)."""
    from confluent_kafka import Producer

    partition = data / "logs" / f"{TOPIC}-0"
    if (data / DONE).exists():
        log(f"reusing {partition} ({log_bytes(partition) / 1e6:.0f} MB of .log)")
        return partition
    shutil.rmtree(data, ignore_errors=True)
    broker = kafka_broker.KafkaBroker(data / "logs", data / "broker")
    try:
        broker.start()
        broker.create_topic(TOPIC, 1, {"segment.bytes": str(128 << 20)})
        rng = random.Random(2024)
        started, i = time.monotonic(), 0
        for n, codec in enumerate(CODECS):
            p = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0,
                          "compression.type": codec, "linger.ms": 20,
                          "batch.size": 256 << 10, "queue.buffering.max.kbytes": 256 << 10})
            target = size * (n + 1) // len(CODECS)
            while log_bytes(partition) < target:
                for _ in range(20_000):
                    i += 1
                    headers = [("trace", b"%016x" % i)] if i % 3 == 0 else None
                    while True:
                        try:
                            p.produce(TOPIC, key=b"user-%d" % (i % 5000),
                                      value=value_for(rng, i), headers=headers)
                            break
                        except BufferError:
                            p.poll(0.05)
                p.flush(120)
            log(f"  {codec}: {log_bytes(partition) / 1e6:.0f} MB of .log, {i:,} records, "
                f"{time.monotonic() - started:.0f} s")
    finally:
        broker.stop()
        broker.kill()
    (data / DONE).write_text(f"{i}\n")
    return partition


# -- the runs -------------------------------------------------------------------------------


def kafka_command(files: list[Path]) -> list[str]:
    lib = kafka_broker.KAFKA_LIB
    return ["java", *TOOL_JVM, f"-Dlog4j2.configurationFile={kafka_broker.LOG4J_CONFIG}",
            "-Dkafka.logs.dir=/tmp", "-cp", f"{lib}/*", "kafka.tools.DumpLogSegments",
            *OPTIONS, "--files", ",".join(map(str, files))]


def kfs_command(files: list[Path]) -> list[str]:
    return [str(REPO / ".venv" / "bin" / "python"), "-m", "kfs", "dump", *OPTIONS,
            *map(str, files)]


ENV = {**os.environ, "PYTHONPATH": str(REPO), "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8"}


def timed(cmd: list[str]) -> float:
    with open(os.devnull, "wb") as null:
        started = time.perf_counter()
        subprocess.run(cmd, stdout=null, stderr=subprocess.DEVNULL, env=ENV, cwd=REPO, check=True)
        return time.perf_counter() - started


def digest(cmd: list[str]) -> tuple[str, int]:
    """SHA-256 and size of what ``cmd`` prints."""
    h, n = hashlib.sha256(), 0
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV,
                          cwd=REPO) as proc:
        while chunk := proc.stdout.read(1 << 20):
            h.update(chunk)
            n += len(chunk)
    if proc.returncode:
        raise RuntimeError(f"{cmd[0]} ... exited {proc.returncode}")
    return h.hexdigest(), n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1G", help=".log bytes to build (1G, 200M, ...)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds")
    ap.add_argument("--dir", type=Path, help="keep (and reuse) the data here")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir")
    args = ap.parse_args()
    if why := kafka_broker.kafka_missing():
        log(f"cannot run Kafka: {why}")
        return 2
    size = parse_size(args.size)
    data = args.dir or Path(tempfile.mkdtemp(prefix="bench-dump-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        log(f"data in {data}")
        partition = build(data, size)
        files = sorted(partition.glob("*.log"))
        total = sum(f.stat().st_size for f in files)
        log(f"{len(files)} segments, {total / 1e6:.0f} MB of .log; checking both print the same")
        kfs_sum, kafka_sum = digest(kfs_command(files)), digest(kafka_command(files))
        if kfs_sum != kafka_sum:
            log(f"OUTPUTS DIFFER: kfs {kfs_sum}, kafka-dump-log {kafka_sum}")
            return 1
        log(f"same output: {kfs_sum[1] / 1e6:.0f} MB of text, sha256 {kfs_sum[0][:16]}...")
        times: dict[str, list[float]] = {"kfs": [], "kafka": []}
        for r in range(args.rounds):
            order = ("kfs", "kafka") if r % 2 == 0 else ("kafka", "kfs")
            for who in order:
                cmd = kfs_command(files) if who == "kfs" else kafka_command(files)
                times[who].append(timed(cmd))
            log(f"  round {r + 1}: kfs {times['kfs'][-1]:.2f} s, kafka-dump-log "
                f"{times['kafka'][-1]:.2f} s")
        kfs_s, kafka_s = statistics.median(times["kfs"]), statistics.median(times["kafka"])
        print(f"kfs dump vs kafka-dump-log {' '.join(OPTIONS)}: {len(files)} segments, "
              f"{total / 1e6:.0f} MB of .log, {kfs_sum[1] / 1e6:.0f} MB printed; "
              f"medians of {args.rounds} interleaved rounds")
        print(f"  {'':16} {'seconds':>9} {'MB/s':>8}   (min-max s)")
        for who, label, t in (("kfs", "kfs dump", kfs_s), ("kafka", "kafka-dump-log", kafka_s)):
            print(f"  {label:16} {t:9.2f} {total / 1e6 / t:8.1f}   "
                  f"({min(times[who]):.2f}-{max(times[who]):.2f})")
        print(f"  ratio kfs/kafka (throughput): {kafka_s / kfs_s:.2f}x   (target >= 2x)")
        return 0
    finally:
        if args.dir is None and not args.keep:
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
