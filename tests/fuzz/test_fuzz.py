"""Short fuzz runs of the record codec: each atheris target of tests/fuzz for a bounded time,
seeded with the batches and segments Kafka wrote (the fixtures). Malformed bytes must raise
CorruptRecordError or InvalidRecordError and the codec's decoders must agree (tests/fuzz/
common.py); the long, natively instrumented runs are scripts/fuzz.sh.

Here the compiled codec is the ordinary build, so only the Python code guides the fuzzer.
"""

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.kfs import kfs_env

FUZZ = Path(__file__).resolve().parent  # the targets beside this module
SECONDS = 18  # per target, besides about 3 s of start-up and seed loading
RSS_LIMIT_MB = 2048  # libFuzzer's default: what one input may make the target use


def rss_limit_mb() -> int:
    """libFuzzer's ``-rss_limit_mb`` for a target started from this process: Linux keeps a
    process's peak RSS across fork and exec (getrusage's ru_maxrss), so the target starts with
    this test process's peak, a whole suite's memory; the limit is the default above it."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + RSS_LIMIT_MB


@pytest.fixture(scope="module")
def seeds(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("seeds")
    subprocess.run([sys.executable, str(FUZZ / "seeds.py"), str(out)], check=True,
                   env=kfs_env(), capture_output=True, timeout=120)
    return out


@pytest.mark.needs_fixture("kafka-written")
@pytest.mark.needs_modules("atheris")
@pytest.mark.parametrize("target, flags", [("batch", []), ("segment", ["-max_len=16384"])])
def test_fuzz_target(target, flags, seeds, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    command = [sys.executable, str(FUZZ / f"fuzz_{target}.py"), f"-max_total_time={SECONDS}",
               "-timeout=15", f"-rss_limit_mb={rss_limit_mb()}",
               f"-artifact_prefix={tmp_path}/", *flags,
               str(corpus), str(seeds / target)]
    proc = subprocess.run(command, env=kfs_env(), capture_output=True, text=True,
                          timeout=SECONDS + 40)
    found = [f"{p.name}: {p.read_bytes().hex()}" for p in tmp_path.glob("*-*") if p.is_file()]
    assert proc.returncode == 0, (
        f"fuzz_{target} failed on an input ({' '.join(found)}):\n{proc.stderr[-6000:]}")
    assert "Done " in proc.stderr
