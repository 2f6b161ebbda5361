"""``kfs dump`` of segment files named by URI (an object store through pyarrow.fs; here its
local file system by ``file://`` URI) prints what it prints for the same files by path: every
kind of file, the deep iteration and the index checks; LocalTieredStorage's remote segment
file names (``<base offset>-<segment id>.<kind>``) are dumped as Kafka's are; a missing object
is one clear error."""

import subprocess
from pathlib import Path

import pytest

from helpers.kfs import kfs_command, kfs_env
from helpers.paths import KAFKA_WRITTEN, REPO
from helpers.tiered import bases_of, tier

needs_fixtures = pytest.mark.needs_fixture("kafka-written")
KINDS = (".log", ".index", ".timeindex", ".snapshot", ".txnindex")


def kfs_dump(*args):
    return subprocess.run(kfs_command("dump", *map(str, args)), cwd=REPO, env=kfs_env(),
                          capture_output=True, text=True, timeout=120)


def without_names(text: str) -> list[str]:
    """Lines, but the ones naming the file (``Dumping …``); a file named in a line by its
    ``file://`` URI as by its path."""
    return [line for line in text.replace("file://", "").splitlines()
            if not line.startswith("Dumping ")]


@needs_fixtures
@pytest.mark.parametrize("options", [(), ("--deep-iteration", "--print-data-log"),
                                     ("--index-sanity-check",), ("--json",)])
def test_dump_by_uri_prints_what_dump_by_path_does(options):
    files = sorted(p for kind in KINDS for p in (KAFKA_WRITTEN / "txn-0").glob(f"*{kind}"))
    by_path = kfs_dump(*options, *files)
    by_uri = kfs_dump(*options, *(p.as_uri() for p in files))
    assert by_path.returncode == by_uri.returncode == 0, by_uri.stderr
    assert without_names(by_uri.stdout) == without_names(by_path.stdout)
    assert by_uri.stderr.replace("file://", "") == by_path.stderr
    assert len(by_uri.stdout) > 1000
    if not options:
        assert f"Dumping {files[0].as_uri()}" in by_uri.stdout


@needs_fixtures
def test_a_remote_tier_segment_file_dumps_as_the_broker_segment(tmp_path):
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, _ = tier(tmp_path, "plain-0", bases[1:2], [])
    (partition,) = (root / "kafka-tiered-storage").iterdir()
    for kind in (".log", ".index", ".timeindex"):
        (remote,) = partition.glob(f"*{kind}")
        want = kfs_dump("--deep-iteration", KAFKA_WRITTEN / "plain-0" / f"{bases[1]:020d}{kind}")
        got = kfs_dump("--deep-iteration", remote.as_uri())
        assert got.returncode == 0, got.stderr
        assert without_names(got.stdout) == without_names(want.stdout)


def test_a_missing_object_is_one_error(tmp_path):
    missing = (tmp_path / "00000000000000000000.log").as_uri()
    done = kfs_dump(missing)
    assert done.returncode != 0
    assert "no such object" in done.stderr and "Traceback" not in done.stderr
