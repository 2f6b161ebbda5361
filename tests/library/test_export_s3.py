"""``kfs export`` into an object store (S3Proxy, the ``s3_server`` fixture): the local layout
under ``s3://bucket/prefix``, reached with the credentials and endpoint the rest of kfs takes
(the AWS_* chain, ``--endpoint``); a second run uploads only the records appended since; a run
killed mid-way leaves only whole objects and its rerun repeats nothing; a missing bucket and a
refused secret are clear errors that never show the secret."""

import re
import shutil
import subprocess

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from helpers.kfs import kfs_command, kfs_env
from helpers.paths import KAFKA_WRITTEN
from kfs.tools.export import export
from storage import LogManager

from test_export import killed_while_writing
from test_read import as_tuples, expected

needs_fixtures = pytest.mark.needs_fixture("kafka-written")
NAME = re.compile(r"[a-z]+\+0\+\d{20}\+\d{20}\.parquet")


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The server, its credentials and endpoint in this process's environment."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


def objects(s3, bucket, prefix="out"):
    """Every object under ``prefix`` (its key below it) and its size, from the server's disk."""
    top = s3.base_dir / bucket / prefix
    return {str(p.relative_to(top)): p.stat().st_size for p in top.rglob("*") if p.is_file()}


def exported(s3, bucket, prefix="out"):
    """Every row under ``prefix`` read back through S3 by ``pyarrow.dataset``."""
    table = ds.dataset(f"{bucket}/{prefix}", filesystem=s3.filesystem(), format="parquet",
                       partitioning="hive").to_table()
    return table.sort_by([("topic", "ascending"), ("offset", "ascending")])


def check_whole(s3, bucket, prefix="out"):
    """Only the export's objects, each whole (a readable Parquet file of the offsets its name
    says), following one another in each partition."""
    spans = {}
    for key in sorted(objects(s3, bucket, prefix)):
        topic_dir, partition_dir, name = key.split("/")
        assert NAME.fullmatch(name), key
        offsets = pq.read_table(s3.base_dir / bucket / prefix / key,
                                columns=["offset"]).column("offset").to_pylist()
        _, _, start, end = name.removesuffix(".parquet").split("+")
        assert offsets and int(start) <= offsets[0] and offsets[-1] < int(end)
        spans.setdefault(topic_dir, []).append((int(start), int(end)))
    for found in spans.values():
        assert found[0][0] == 0 and all(a[1] == b[0] for a, b in zip(found, found[1:]))


def run_export(s3, *args):
    """``kfs export`` in a process of its own, the endpoint as ``--endpoint`` (the keys from
    the environment, never the command line)."""
    env = {**kfs_env(), **s3.env()}
    del env["AWS_ENDPOINT_URL"]
    return subprocess.run(kfs_command("export", *map(str, args), "--endpoint", s3.endpoint),
                          env=env, capture_output=True, text=True, timeout=300)


@needs_fixtures
def test_an_export_to_s3_and_a_second_one_of_the_records_appended_since(s3, tmp_path):
    for name in ["plain-0", "codecs-0", "compacted-0"]:
        shutil.copytree(KAFKA_WRITTEN / name, tmp_path / "data" / name)
    bucket = s3.new_bucket()
    first = run_export(s3, tmp_path / "data", f"s3://{bucket}/out", "--rows-per-file", "2000")
    assert first.returncode == 0, first.stderr
    assert f"-> s3://{bucket}/out/topic=plain/partition=0/plain+0+" in first.stderr
    check_whole(s3, bucket)
    want = expected("codecs") + expected("compacted") + expected("plain")
    assert as_tuples(exported(s3, bucket)) == want
    assert len(objects(s3, bucket)) > 3

    manager = LogManager(tmp_path / "data")
    try:
        manager.get("plain-0").append([b"new-1", b"\xff\xfe not utf-8", None],
                                      keys=[b"k", None, b"k3"],
                                      headers=[[("h", b"1"), ("n", None)], None, None])
    finally:
        manager.close()
    before = objects(s3, bucket)
    second = export(tmp_path / "data", f"s3://{bucket}/out")  # the AWS_* chain's endpoint
    assert [(f.topic, f.start, f.end, f.rows) for f in second] == [("plain", 5000, 5003, 3)]
    assert second[0].path == f"s3://{bucket}/out/topic=plain/partition=0/" \
                             f"plain+0+{5000:020d}+{5003:020d}.parquet"
    after = objects(s3, bucket)
    assert {k: v for k, v in after.items() if k in before} == before  # none rewritten
    assert len(after) == len(before) + 1
    table = exported(s3, bucket)
    plain = table.filter(ds.field("topic") == "plain")
    assert plain.column("offset").to_pylist() == list(range(5003))
    assert plain.column("value").to_pylist()[-3:] == [b"new-1", b"\xff\xfe not utf-8", None]
    assert plain.column("key").to_pylist()[-3:] == [b"k", None, b"k3"]
    assert plain.column("headers").to_pylist()[-3:] == [
        [{"key": "h", "value": b"1"}, {"key": "n", "value": None}], None, None]
    assert export(tmp_path / "data", f"s3://{bucket}/out") == []
    check_whole(s3, bucket)


@needs_fixtures
def test_by_date_and_chosen_columns_in_s3(s3, tmp_path):
    from test_export import DAYS, dated_log

    dated_log(tmp_path / "data", DAYS)
    bucket = s3.new_bucket()
    files = export(tmp_path / "data", f"s3://{bucket}/out", partition_by_date=True,
                   columns=["value"])
    assert [f.date for f in files] == ["2026-11-28", "2026-11-29", "2026-11-28", "2026-11-30"]
    dataset = ds.dataset(f"{bucket}/out", filesystem=s3.filesystem(), format="parquet",
                         partitioning="hive")
    assert dataset.schema.names[:2] == ["value", "offset"]
    got = dataset.to_table(filter=ds.field("date") == "2026-11-28").sort_by("offset")
    assert got.column("offset").to_pylist() == [0, 1, 2, 3, 7]
    assert got.column("value").to_pylist() == [r[2] for r in DAYS[:4]] + [DAYS[7][2]]
    dated_log(tmp_path / "data", [(DAYS[-1][0], b"k", b"later", None)])
    again = export(tmp_path / "data", f"s3://{bucket}/out", partition_by_date=True,
                   columns=["value"])
    assert [(f.date, f.start, f.end) for f in again] == [("2026-11-30", 10, 11)]


@needs_fixtures
def test_a_killed_export_to_s3_leaves_whole_objects_and_its_rerun_repeats_nothing(s3, tmp_path):
    bucket = s3.new_bucket()
    args = [str(KAFKA_WRITTEN), f"s3://{bucket}/out", "--topic", "plain", "--topic", "codecs",
            "--rows-per-file", "1000"]
    # (paused while part of the 2nd file is written, to its scratch file)
    during = killed_while_writing(args, {**kfs_env(), **s3.env()},
                                  lambda: objects(s3, bucket))
    assert len(during) == 1, during  # the 1st file, whole; nothing of the 2nd
    check_whole(s3, bucket)
    assert objects(s3, bucket) == during
    before = exported(s3, bucket).num_rows
    rerun = subprocess.run(kfs_command("export", *args), env={**kfs_env(), **s3.env()},
                           capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr
    assert f" {7000 - before} records in" in rerun.stderr.splitlines()[-1]
    assert as_tuples(exported(s3, bucket)) == expected("codecs") + expected("plain")
    check_whole(s3, bucket)


@needs_fixtures
def test_a_missing_bucket_or_a_refused_secret_is_a_clear_error(s3, tmp_path):
    shutil.copytree(KAFKA_WRITTEN / "txn-0", tmp_path / "data" / "txn-0")
    missing = run_export(s3, tmp_path / "data", "s3://no-such-bucket/out")
    assert missing.returncode == 1
    assert "s3://no-such-bucket/out: no such bucket" in missing.stderr
    bucket = s3.new_bucket()
    env = {**kfs_env(), **s3.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret-9f2c"}
    refused = subprocess.run(kfs_command("export", str(tmp_path / "data"), f"s3://{bucket}/out"),
                             env=env, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "refused the credentials" in refused.stderr
    assert "not-the-secret-9f2c" not in refused.stderr and s3.secret_key not in refused.stderr
    assert objects(s3, bucket, "") == {}
    inside = run_export(s3, f"s3://{bucket}/logs", f"s3://{bucket}/logs/out")
    assert inside.returncode == 1 and "inside the log directory" in inside.stderr
