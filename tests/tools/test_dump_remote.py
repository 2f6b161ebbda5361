"""``kfs dump`` of segment files named by URI (an object store through pyarrow.fs; here its
local file system by ``file://`` URI) prints what it prints for the same files by path: every
kind of file, the deep iteration and the index checks; LocalTieredStorage's remote segment
file names (``<base offset>-<segment id>.<kind>``) are dumped as Kafka's are; a missing object
is one clear error."""

import shutil
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


@needs_fixtures
def test_a_uri_with_its_credentials_and_query_string_dumps_and_never_shows_them(s3_server):
    """``s3://KEY:SECRET@bucket/…/x.log?endpoint_override=…&scheme=http``, as pyarrow takes
    it (no environment at all): the file is read as by its path, the endpoint options given
    as ``--endpoint`` work the same, and neither the secret nor the key is ever printed."""
    import shutil

    bucket = s3_server.new_bucket()
    shutil.copytree(KAFKA_WRITTEN / "plain-0", s3_server.base_dir / bucket / "plain-0")
    log = "plain-0/00000000000000000000.log"
    query = f"endpoint_override=127.0.0.1:{s3_server.port}&scheme=http&region={s3_server.region}"
    secret = f"{s3_server.access_key}:{s3_server.secret_key}"
    want = kfs_dump("--deep-iteration", "--json", KAFKA_WRITTEN / log)
    env = {k: v for k, v in kfs_env().items() if not k.startswith("AWS_")}
    for args in ([f"s3://{secret}@{bucket}/{log}?{query}"],
                 [f"--endpoint={s3_server.endpoint}", f"--region={s3_server.region}",
                  f"s3://{secret}@{bucket}/{log}"]):
        got = subprocess.run(kfs_command("dump", "--deep-iteration", "--json", *args), cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=120)
        assert got.returncode == 0, got.stderr
        assert got.stdout == want.stdout
        missing = subprocess.run(kfs_command("dump", args[-1].replace(".log", ".nope.log"),
                                             *args[:-1]),
                                 cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
        assert missing.returncode != 0 and "no such object" in missing.stderr
        for said in (got.stderr, missing.stdout, missing.stderr):
            assert s3_server.secret_key not in said and s3_server.access_key not in said


@needs_fixtures
def test_refused_credentials_are_one_line_naming_the_object_once(s3_server):
    """Issue 37 item 21: ``kfs dump`` with a wrong secret prints the object's URI once and the
    words every front end uses (``REFUSED_CREDENTIALS``), with or without ``--json``."""
    from storage.remote.object_store import REFUSED_CREDENTIALS

    bucket = s3_server.new_bucket()
    shutil.copytree(KAFKA_WRITTEN / "plain-0", s3_server.base_dir / bucket / "plain-0")
    uri = f"s3://{bucket}/plain-0/00000000000000000000.log"
    env = {k: v for k, v in kfs_env().items() if not k.startswith("AWS_")}
    env.update(s3_server.env(), AWS_SECRET_ACCESS_KEY="not-the-secret-1234")
    for options in ((), ("--json",)):
        done = subprocess.run(kfs_command("dump", *options, uri), cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 1
        assert done.stderr == f"kfs dump: {uri}: {REFUSED_CREDENTIALS}\n"


@needs_fixtures
def test_json_of_a_remote_tier_segment_names_its_topic_and_partition(tmp_path):
    """Issue 37 item 21: LocalTieredStorage's ``<topic>-<N>-<topic id>/`` names the topic and
    partition of its segments: ``--json`` gives them, as for the broker's own segment."""
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, _ = tier(tmp_path, "plain-0", bases[1:2], [])
    (partition,) = (root / "kafka-tiered-storage").iterdir()
    for kind in (".log", ".index"):
        (remote,) = partition.glob(f"*{kind}")
        want = kfs_dump("--json", KAFKA_WRITTEN / "plain-0" / f"{bases[1]:020d}{kind}")
        for where in (remote, remote.as_uri()):
            got = kfs_dump("--json", where)
            assert got.returncode == 0, got.stderr
            assert got.stdout == want.stdout and '"topic":"plain","partition":0' in got.stdout


@needs_fixtures
def test_an_unreachable_store_is_one_line_naming_the_object_once(s3_server):
    """Issue 37 item 21: pyarrow's error names the bucket and key again ("When getting
    information for key '…' in bucket '…'"); the line names the object once."""
    bucket = s3_server.new_bucket()
    shutil.copytree(KAFKA_WRITTEN / "plain-0", s3_server.base_dir / bucket / "plain-0")
    uri = f"s3://{bucket}/plain-0/00000000000000000000.log"
    env = {k: v for k, v in kfs_env().items() if not k.startswith("AWS_")}
    env.update(s3_server.env(), AWS_ENDPOINT_URL="http://127.0.0.1:9")  # (nothing listens)
    done = subprocess.run(kfs_command("dump", uri), cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"kfs dump: {uri}: AWS Error NETWORK_CONNECTION")
    assert done.stderr.count("00000000000000000000.log") == 1 and bucket not in \
        done.stderr.removeprefix(f"kfs dump: {uri}")
