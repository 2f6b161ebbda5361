"""The tests' S3 API server (``s3_server``: S3Proxy 4.1.0's filesystem backend) as pyarrow.fs
sees it, the ground the object-store tests stand on: files written under its base directory
are objects (sub-directories key prefixes) listed with their sizes and read by byte ranges;
what pyarrow writes, with the AWS SDK's trailing checksums, lands as the same bytes; a wrong
secret, a wrong key and an unknown bucket are refused with the errors pyarrow raises for
them; ``env()`` points pyarrow's standard chain at the server in a subprocess."""

import json
import os
import subprocess
import sys

import pytest

SEGMENT = "00000000000000000000"


def lay_out(s3_server, files: dict[str, bytes]) -> str:
    """A fresh bucket holding ``files`` (key -> bytes), written as files under base_dir."""
    bucket = s3_server.new_bucket()
    for key, data in files.items():
        path = s3_server.base_dir / bucket / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return bucket


@pytest.fixture
def segment(s3_server):
    """A bucket with one partition's segment files under the prefix ``a/b``: (bucket, the
    .log's bytes, the .index's bytes)."""
    log, index = os.urandom(300_000), os.urandom(80)
    bucket = lay_out(s3_server, {f"a/b/{SEGMENT}.log": log, f"a/b/{SEGMENT}.index": index,
                                 "a/top.txt": b"x"})
    return bucket, log, index


def test_files_under_base_dir_are_objects_listed_with_their_sizes(s3_server, segment):
    from pyarrow import fs as pafs

    bucket, log, index = segment
    s3 = s3_server.filesystem()
    infos = s3.get_file_info(pafs.FileSelector(f"{bucket}/a", recursive=True))
    files = {i.path: i.size for i in infos if i.type == pafs.FileType.File}
    dirs = {i.path for i in infos if i.type == pafs.FileType.Directory}
    assert files == {f"{bucket}/a/b/{SEGMENT}.log": len(log),
                     f"{bucket}/a/b/{SEGMENT}.index": len(index), f"{bucket}/a/top.txt": 1}
    assert dirs == {f"{bucket}/a/b"}  # a key prefix, listed as a directory (2.6.0: a file)
    # the bucket itself is listed at the root, a sub-directory of base_dir
    root = {i.path for i in s3.get_file_info(pafs.FileSelector("", recursive=False))}
    assert bucket in root
    info = s3.get_file_info(f"{bucket}/a/b/{SEGMENT}.log")
    assert (info.type, info.size) == (pafs.FileType.File, len(log))


def test_ranged_reads_return_the_bytes_at_their_offsets(s3_server, segment):
    bucket, log, _ = segment
    s3 = s3_server.filesystem()
    with s3.open_input_file(f"{bucket}/a/b/{SEGMENT}.log") as f:
        assert f.size() == len(log)
        for offset, n in [(0, 61), (12345, 1), (100_000, 65536), (len(log) - 7, 7)]:
            assert f.read_at(n, offset) == log[offset:offset + n]
        assert f.read_at(100, len(log) - 10) == log[-10:]  # a range past the end: what is there
    with s3.open_input_stream(f"{bucket}/a/b/{SEGMENT}.log") as f:
        assert f.read() == log


def test_a_file_written_meanwhile_is_seen(s3_server, segment):
    """The backend reads the directory on each request: no index of its own goes stale."""
    bucket, _, _ = segment
    later = os.urandom(1000)
    (s3_server.base_dir / bucket / "a" / "b" / "00000000000000000042.log").write_bytes(later)
    with s3_server.filesystem().open_input_file(f"{bucket}/a/b/00000000000000000042.log") as f:
        assert f.read_at(10, 990) == later[990:]


@pytest.mark.parametrize("size", [1000, 12 << 20])  # one part; a multipart upload of two
def test_what_pyarrow_writes_with_checksums_is_stored_as_is(s3_server, size):
    """pyarrow's AWS SDK uploads aws-chunked bodies with a trailing x-amz-checksum-crc64nvme
    (STREAMING-UNSIGNED-PAYLOAD-TRAILER) and reads with x-amz-checksum-mode: enabled; 4.1.0
    stores the bytes (no chunk framing) and serves them back. S3Proxy 2.6.0 refused the
    uploads (XAmzContentSHA256Mismatch) and failed the GETs."""
    data = os.urandom(size)
    bucket = s3_server.new_bucket()
    s3 = s3_server.filesystem()
    with s3.open_output_stream(f"{bucket}/w/{SEGMENT}.log") as out:
        for i in range(0, size, 1 << 20):
            out.write(data[i:i + (1 << 20)])
    assert (s3_server.base_dir / bucket / "w" / f"{SEGMENT}.log").read_bytes() == data
    assert s3.get_file_info(f"{bucket}/w/{SEGMENT}.log").size == size
    with s3.open_input_file(f"{bucket}/w/{SEGMENT}.log") as f:
        assert f.read() == data
        assert f.read_at(4096, size // 2) == data[size // 2:size // 2 + 4096]


def test_a_bucket_pyarrow_creates_is_a_directory(s3_server):
    s3 = s3_server.filesystem(allow_bucket_creation=True)
    name = "made-by-pyarrow"
    s3.create_dir(name)
    assert (s3_server.base_dir / name).is_dir()
    with s3.open_output_stream(f"{name}/k") as out:
        out.write(b"v")
    assert (s3_server.base_dir / name / "k").read_bytes() == b"v"


def test_a_wrong_secret_is_refused(s3_server, segment):
    """Access denied as pyarrow says it: an OSError (never FileNotFoundError) naming the AWS
    error, SIGNATURE_DOES_NOT_MATCH for a listing, ACCESS_DENIED for an object's HEAD (403
    with no body to say more)."""
    from pyarrow import fs as pafs

    bucket, _, _ = segment
    s3 = s3_server.filesystem(secret_key="not-" + s3_server.secret_key)
    with pytest.raises(OSError, match="SIGNATURE_DOES_NOT_MATCH during ListObjectsV2") as listing:
        s3.get_file_info(pafs.FileSelector(f"{bucket}/a", recursive=True))
    with pytest.raises(OSError, match="ACCESS_DENIED during HeadObject") as opening:
        s3.open_input_file(f"{bucket}/a/b/{SEGMENT}.log")
    with pytest.raises(OSError, match="ACCESS_DENIED during HeadObject"):
        s3.get_file_info(f"{bucket}/a/b/{SEGMENT}.log")
    for refused in (listing.value, opening.value):
        assert not isinstance(refused, FileNotFoundError)
        assert s3_server.secret_key not in str(refused)


def test_an_unknown_access_key_is_refused(s3_server, segment):
    from pyarrow import fs as pafs

    bucket, _, _ = segment
    s3 = s3_server.filesystem(access_key="nobody")
    with pytest.raises(OSError, match="INVALID_ACCESS_KEY_ID during ListObjectsV2"):
        s3.get_file_info(pafs.FileSelector(f"{bucket}/a", recursive=True))


def test_an_unknown_bucket_raises(s3_server):
    from pyarrow import fs as pafs

    s3 = s3_server.filesystem()
    with pytest.raises(OSError, match="NO_SUCH_BUCKET during ListObjectsV2") as listing:
        s3.get_file_info(pafs.FileSelector("no-such-bucket/a", recursive=True))
    assert not isinstance(listing.value, FileNotFoundError)
    # an object of it: not found, as any missing key (HEAD's 404 does not say which)
    with pytest.raises(FileNotFoundError):
        s3.open_input_file(f"no-such-bucket/a/{SEGMENT}.log")
    assert s3.get_file_info(f"no-such-bucket/a/{SEGMENT}.log").type == pafs.FileType.NotFound


def test_env_points_pyarrows_standard_chain_at_the_server(s3_server, segment):
    """A subprocess given only env(): ``FileSystem.from_uri("s3://...")`` takes the keys, the
    region and the endpoint (AWS_ENDPOINT_URL, scheme http included) from the environment."""
    bucket, log, _ = segment
    code = ("import json, sys; from pyarrow import fs\n"
            "s3, root = fs.FileSystem.from_uri(sys.argv[1])\n"
            "infos = s3.get_file_info(fs.FileSelector(root, recursive=True))\n"
            "print(json.dumps({'region': s3.region,"
            " 'files': {i.path: i.size for i in infos if i.type == fs.FileType.File}}))\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(s3_server.env())
    assert set(s3_server.env()) >= {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                    "AWS_ENDPOINT_URL", "AWS_REGION"}
    res = subprocess.run([sys.executable, "-c", code, f"s3://{bucket}/a/b"], env=env,
                         capture_output=True, timeout=120)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    seen = json.loads(res.stdout)
    assert seen["region"] == s3_server.region
    assert seen["files"][f"{bucket}/a/b/{SEGMENT}.log"] == len(log)
