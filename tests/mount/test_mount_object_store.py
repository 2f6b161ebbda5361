"""``kfs mount --read-only URI MOUNTPOINT``: a log directory in an object store (here through
pyarrow's local file system by ``file://`` URI) is the same tree for cat, grep and getfattr as
the directory mounted from disk; a writable mount of a URI is refused."""

import os
import shutil
import subprocess

import pytest

from helpers.mounts import Mounter
from helpers.needs import require_fuse
from helpers.paths import KAFKA_WRITTEN
from helpers.kfs import kfs_command, kfs_env
from helpers.tiered import bases_of, tier

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def tree(root, name):
    """What a user reads of one partition: every record file, the streams, two attributes."""
    partition = root / name
    offsets = sorted(int(n) for n in os.listdir(partition / "by-offset"))
    files = {o: (partition / "by-offset" / str(o)).read_bytes() for o in offsets[::7]}
    streams = {s: (partition / s).read_bytes() for s in ("values", "records.jsonl")}
    attrs = {a: os.getxattr(partition, a) for a in ("user.kafka.logEndOffset",
                                                    "user.kafka.logStartOffset")}
    return offsets, files, streams, attrs


@needs_fixtures
@pytest.mark.fuse
def test_a_uri_mounts_as_the_directory_does(tmp_path):
    require_fuse()
    mounter = Mounter(tmp_path)
    try:
        remote = mounter(KAFKA_WRITTEN.as_uri(), "--read-only")
        local = mounter(KAFKA_WRITTEN, "--read-only")
        assert remote.mounted, remote.log_text()
        assert sorted(os.listdir(remote.path)) == sorted(os.listdir(local.path))
        for name in ("plain-0", "codecs-0", "txn-0", "legacy-0"):
            assert tree(remote.path, name) == tree(local.path, name), name
        grep = subprocess.run(["grep", "-c", "", str(remote.path / "plain-0" / "records.jsonl")],
                              capture_output=True, timeout=120)
        assert grep.returncode == 0 and int(grep.stdout) == 5000
    finally:
        mounter.close_all()


@pytest.mark.fuse
def test_a_writable_mount_of_a_uri_is_refused(tmp_path):
    (tmp_path / "mnt").mkdir()
    done = subprocess.run(kfs_command("mount", "file:///nowhere", str(tmp_path / "mnt")),
                          env=kfs_env(), capture_output=True, timeout=60)
    assert done.returncode != 0
    assert b"--read-only" in done.stderr and len(done.stderr.splitlines()) == 1


@needs_fixtures
@pytest.mark.fuse
def test_a_bucket_mounts_as_the_directory_does(tmp_path, s3_server, monkeypatch):
    """``kfs mount --read-only s3://bucket/logs``, credentials and endpoint from the
    environment, against a real S3 server."""
    require_fuse()
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    bucket = s3_server.new_bucket()
    for name in ("plain-0", "txn-0"):
        shutil.copytree(KAFKA_WRITTEN / name, s3_server.base_dir / bucket / "logs" / name)
    mounter = Mounter(tmp_path)
    try:
        remote = mounter(f"s3://{bucket}/logs", "--read-only")
        local = mounter(KAFKA_WRITTEN, "--read-only")
        assert sorted(os.listdir(remote.path)) == ["plain-0", "txn-0"]
        for name in ("plain-0", "txn-0"):
            assert tree(remote.path, name) == tree(local.path, name), name
        assert s3_server.secret_key not in remote.log_text()
    finally:
        mounter.close_all()


@needs_fixtures
@pytest.mark.fuse
def test_a_bucket_is_held_to_the_local_rules(tmp_path, s3_server, monkeypatch):
    """Issue 37 item 18: ``kfs mount --read-only s3://bucket/docs`` of a prefix that is no log
    directory warns, on stderr and in its log, as a mount of such a local directory does; a
    bucket's ``__cluster_metadata-0`` (KRaft's metadata log) is not served as a partition, as
    on disk (where its image is served as ``/__cluster_metadata``, from local files only)."""
    require_fuse()
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    bucket = s3_server.new_bucket()
    docs = s3_server.base_dir / bucket / "docs"
    (docs / "notes").mkdir(parents=True)
    (docs / "readme.txt").write_text("not Kafka's\n")
    logs = s3_server.base_dir / bucket / "logs"
    for name in ("plain-0", "__cluster_metadata-0"):
        shutil.copytree(KAFKA_WRITTEN / "plain-0", logs / name)
    shutil.copytree(logs, tmp_path / "logs")
    shutil.copytree(docs, tmp_path / "docs")
    mounter = Mounter(tmp_path)
    try:
        for where in (f"s3://{bucket}/docs", tmp_path / "docs"):
            m = mounter(where, "--read-only")
            assert os.listdir(m.path) == []
            (line,) = m.stderr.decode().splitlines()
            assert line.startswith(f"kfs: warning: {where} is not a Kafka log directory"), line
            assert any(" WARNING " in logged and f"{where} is not a Kafka log directory"
                       in logged for logged in m.log_text().splitlines()), m.log_text()
        for where in (f"s3://{bucket}/logs", tmp_path / "logs"):
            m = mounter(where, "--read-only")
            image = [] if isinstance(where, str) else ["__cluster_metadata"]
            assert sorted(os.listdir(m.path)) == [*image, "plain-0"] and m.stderr == b"", m.stderr
    finally:
        mounter.close_all()


@needs_fixtures
@pytest.mark.fuse
def test_refused_credentials_are_one_line_naming_the_bucket_once(tmp_path, s3_server):
    """Issue 37 item 21: ``kfs mount --read-only s3://…`` with a wrong secret fails with the
    line every front end prints (the URI once, ``REFUSED_CREDENTIALS``)."""
    from storage.remote.object_store import REFUSED_CREDENTIALS

    bucket = s3_server.new_bucket()
    shutil.copytree(KAFKA_WRITTEN / "plain-0", s3_server.base_dir / bucket / "logs" / "plain-0")
    (tmp_path / "mnt").mkdir()
    env = {**kfs_env(), **s3_server.env(), "AWS_SECRET_ACCESS_KEY": "not-the-secret-1234"}
    uri = f"s3://{bucket}/logs"
    done = subprocess.run(kfs_command("mount", "--read-only", uri, str(tmp_path / "mnt")),
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and not os.path.ismount(tmp_path / "mnt")
    assert done.stderr == (f"kfs: error: cannot open backing directory {uri}: "
                           f"{REFUSED_CREDENTIALS}\n")


@needs_fixtures
@pytest.mark.fuse
def test_a_tiered_topic_mounts_whole_with_its_remote_tier(tmp_path, s3_server, monkeypatch):
    """``kfs mount --read-only --remote-path s3://… --endpoint URL LOGDIR MNT`` (layout 3, as
    Spark's ``remote.path``): each partition serves its remote segments below the local log,
    then the local log, the same tree as the whole partition mounted from disk; the endpoint
    and region given as options, not by the environment."""
    require_fuse()
    env = s3_server.env()
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.setenv(key, env[key])
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_REGION", raising=False)
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, local = tier(tmp_path, "plain-0", bases[:2], bases[2:])
    bucket = s3_server.new_bucket()
    shutil.copytree(root, s3_server.base_dir / bucket / "rsm")
    mounter = Mounter(tmp_path)
    secret = f"{s3_server.access_key}:{s3_server.secret_key}"
    try:
        tiered = mounter(local, "--read-only", f"--remote-path=s3://{secret}@{bucket}/rsm",
                         f"--endpoint={s3_server.endpoint}", f"--region={s3_server.region}")
        whole = mounter(KAFKA_WRITTEN, "--read-only")
        assert os.listdir(tiered.path) == ["plain-0"]
        assert tree(tiered.path, "plain-0") == tree(whole.path, "plain-0")
        ps = subprocess.run(["ps", "-ww", "-eo", "args"], capture_output=True, text=True,
                            check=True).stdout
        assert f"--remote-path=s3://***@{bucket}/rsm" in ps
        assert s3_server.secret_key not in ps + tiered.log_text()
    finally:
        mounter.close_all()


@pytest.mark.fuse
def test_a_writable_mount_with_a_remote_tier_is_refused(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "mnt").mkdir()
    done = subprocess.run(kfs_command("mount", "--remote-path=file:///rsm", str(tmp_path / "data"),
                                      str(tmp_path / "mnt")),
                          env=kfs_env(), capture_output=True, timeout=60)
    assert done.returncode != 0
    assert b"--read-only" in done.stderr and len(done.stderr.splitlines()) == 1
    assert list((tmp_path / "data").iterdir()) == []


@needs_fixtures
@pytest.mark.fuse
def test_credentials_in_a_uri_are_never_in_the_serving_process_arguments(tmp_path, s3_server,
                                                                         monkeypatch):
    """Issue 37 item 4: ``kfs mount --read-only 's3://KEY:SECRET@bucket/x' MNT`` left the whole
    URI in the background serving process's argv for the mount's lifetime, which any user reads
    (``ps -eo args``). The location reaches that process through an inherited pipe: ``ps``
    shows it redacted, the mount serves the bucket, the log names no secret."""
    require_fuse()
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):  # (the URI's alone)
        monkeypatch.delenv(key)
    bucket = s3_server.new_bucket()
    shutil.copytree(KAFKA_WRITTEN / "plain-0", s3_server.base_dir / bucket / "logs" / "plain-0")
    mounter = Mounter(tmp_path)
    try:
        m = mounter(f"s3://{s3_server.access_key}:{s3_server.secret_key}@{bucket}/logs",
                    "--read-only")
        assert os.listdir(m.path) == ["plain-0"]
        ps = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True,
                            check=True).stdout
        server = [line for line in ps.splitlines() if line.split()[0] == str(m.pid)]
        assert server and f"s3://***@{bucket}/logs" in server[0], server
        assert s3_server.secret_key not in ps
        assert s3_server.secret_key not in m.log_text()
    finally:
        mounter.close_all()
