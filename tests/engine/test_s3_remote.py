"""A log directory in a real S3 API server (S3Proxy, the ``s3_server`` fixture), read by
``s3://`` URI with credentials and endpoint from the standard environment: what the same
directory gives from disk; and bad input, each a clear error with nothing half-read: a wrong
secret, an unknown bucket, an object deleted after planning, a corrupt object (named, with the
other partitions still read), the server stopped mid-read (bounded retries, never a hang)."""


import pytest

from helpers.paths import KAFKA_WRITTEN
from helpers.s3 import copy_into_bucket
from helpers.tiered import bases_of
from storage import LogManager
from storage.errors import CorruptRecordError
from storage.isolation import IsolationLevel
from storage.remote.object_store import REFUSED_CREDENTIALS, ObjectStore, ObjectStoreError
from storage.remote.remote_log import RemoteLogDirectory

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


@pytest.fixture
def s3(s3_server, monkeypatch):
    """The server, its credentials and endpoint in this process's environment (the chain
    pyarrow reads)."""
    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    return s3_server


def rows(log, isolation=IsolationLevel.READ_UNCOMMITTED):
    return [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers))
            for batch in log.reader.record_lists(0, isolation=isolation) for r in batch]


@needs_fixtures
@pytest.mark.parametrize("isolation", list(IsolationLevel))
def test_a_directory_in_a_bucket_reads_as_on_disk(s3, isolation):
    uri, _ = copy_into_bucket(s3, KAFKA_WRITTEN)
    remote = RemoteLogDirectory(ObjectStore.from_uri(uri))
    local = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        assert remote.partition_names() == sorted(local.partition_names())
        for name in remote.partition_names():
            r, lg = remote.get(name), local.get(name)
            assert (r.log_start_offset, r.log_end_offset, r.last_stable_offset) == \
                (lg.log_start_offset, lg.log_end_offset, lg.last_stable_offset)
            assert rows(r, isolation) == rows(lg, isolation), name
            assert [t.to_pylist() for t in r.reader.read_columns(0, None, isolation)] == \
                [t.to_pylist() for t in lg.reader.read_columns(0, None, isolation)]
    finally:
        remote.close()
        local.close()


@needs_fixtures
def test_endpoint_and_region_may_be_given_over_the_environment(s3, monkeypatch):
    uri, _ = copy_into_bucket(s3, KAFKA_WRITTEN, names=["plain-0"])
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens there
    store = ObjectStore.from_uri(uri, endpoint=s3.endpoint, region=s3.region)
    remote = RemoteLogDirectory(store)
    try:
        assert len(rows(remote.get("plain-0"))) == 5000
    finally:
        remote.close()


def test_a_wrong_secret_is_refused_without_printing_it(s3, monkeypatch):
    uri, _ = copy_into_bucket(s3, KAFKA_WRITTEN, names=[])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-8a7f")
    with pytest.raises(ObjectStoreError) as refused:
        RemoteLogDirectory(ObjectStore.from_uri(uri))
    message = str(refused.value)
    assert message == f"{uri}: {REFUSED_CREDENTIALS}"
    assert "not-the-secret-8a7f" not in message


def test_an_unknown_bucket_is_an_error(s3):
    with pytest.raises(ObjectStoreError, match="no-such-bucket-kfs"):
        RemoteLogDirectory(ObjectStore.from_uri("s3://no-such-bucket-kfs/logs"))


@needs_fixtures
def test_a_segment_deleted_after_planning_is_an_error_naming_it(s3):
    uri, target = copy_into_bucket(s3, KAFKA_WRITTEN, names=["plain-0"])
    remote = RemoteLogDirectory(ObjectStore.from_uri(uri))
    try:
        log = remote.get("plain-0")  # listed: the plan
        base = bases_of(target / "plain-0")[1]
        (target / "plain-0" / f"{base:020d}.log").unlink()
        with pytest.raises(ObjectStoreError, match=f"{base:020d}.log"):
            rows(log)
    finally:
        remote.close()


@needs_fixtures
def test_a_corrupt_object_names_it_and_the_others_still_read(s3):
    uri, target = copy_into_bucket(s3, KAFKA_WRITTEN, names=["plain-0", "codecs-0"])
    base = bases_of(target / "plain-0")[2]
    path = target / "plain-0" / f"{base:020d}.log"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    remote = RemoteLogDirectory(ObjectStore.from_uri(uri))
    local = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        with pytest.raises(CorruptRecordError, match=f"{base:020d}.log"):
            list(remote.get("plain-0").reader.read_columns(0))
        assert rows(remote.get("codecs-0")) == rows(local.get("codecs-0"))
    finally:
        remote.close()
        local.close()


@needs_fixtures
def test_a_server_stopped_mid_read_is_an_error_not_a_hang(tmp_path, monkeypatch):
    from helpers.s3 import S3Server, s3proxy_missing
    from helpers.needs import unavailable

    if (missing := s3proxy_missing()) is not None:
        unavailable(missing)
    server = S3Server(tmp_path / "base", tmp_path / "server").start()
    try:
        for key, value in server.env().items():
            monkeypatch.setenv(key, value)
        uri, _ = copy_into_bucket(server, KAFKA_WRITTEN, names=["plain-0"])
        remote = RemoteLogDirectory(ObjectStore.from_uri(uri))
        log = remote.get("plain-0")
        assert log.reader.read(0).offset == 0
        server.stop()
        with pytest.raises(ObjectStoreError, match="plain-0"):
            rows(log)
        remote.close()
    finally:
        server.stop()


def test_refused_credentials_are_said_alike_whichever_call_met_them(s3, monkeypatch):
    """Issue 37, item 21: a wrong secret read as a listing's SIGNATURE_DOES_NOT_MATCH, a
    HEAD's bodiless ACCESS_DENIED or a GET's (tests/engine/test_s3_server.py): each is the
    same line, the store's URI and what it means, and names no secret."""
    uri, _ = copy_into_bucket(s3, KAFKA_WRITTEN, names=["plain-0"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret-8a7f")
    store = ObjectStore.from_uri(uri)
    said = set()
    for call in (store.list, store.root_info, lambda: store.list("plain-0"),
                 lambda: store.read_small_object(store.path("plain-0", "partition.metadata"))):
        with pytest.raises(ObjectStoreError) as refused:
            call()
        said.add(str(refused.value))
    assert said == {f"{uri}: {REFUSED_CREDENTIALS}"}
