"""Kafka's tiered storage as Aiven's RemoteStorageManager wrote it (Kafka 4.1.1 with the plugin,
``tests/fixtures/aiven-tiered``: run A plain, B zstd chunks, C AES-GCM chunks with a key ring),
read through the one door configured by the broker's own properties: every topic at both
isolation levels equals what a real KafkaConsumer read; a narrow read fetches only the chunks
it needs; without ``__remote_log_metadata`` the listing is read, said so."""

import pytest

from helpers.aiven import RUNS, TOPICS, copy_run, expected, topic_records
from helpers.paths import AIVEN_TIERED
from storage.directory import StoreOptions, open_log_directory
from storage.errors import InvalidConfigError
from storage.isolation import IsolationLevel
from storage.remote.store_pool import PROCESS_POOL
from storage.remote.aiven import (
    AivenLogDirectory,
    AivenSegmentSource,
    custom_metadata_fields,
    decode_chunk_sizes,
)
from storage.remote.object_store import ObjectStore
from storage.remote.rsm_config import load_remote_config

needs_fixtures = pytest.mark.needs_fixture("aiven-tiered")
ISOLATIONS = {IsolationLevel.READ_UNCOMMITTED: "read_uncommitted",
              IsolationLevel.READ_COMMITTED: "read_committed"}


def open_run(run_dir, **kwargs):
    options = StoreOptions(remote_config=str(run_dir / "broker.properties"))
    return open_log_directory(run_dir / "logdir", options=options, **kwargs)


@needs_fixtures
@pytest.mark.parametrize("run", RUNS)
@pytest.mark.parametrize("isolation", list(ISOLATIONS))
def test_every_topic_reads_as_the_consumer_read_it(run, isolation):
    directory = open_run(AIVEN_TIERED / run)
    try:
        assert directory.notices == []
        for topic in TOPICS:
            want = expected(run, topic, ISOLATIONS[isolation])
            assert topic_records(directory, topic, isolation) == want, (run, topic)
    finally:
        directory.close()


@needs_fixtures
def test_the_remote_tier_is_below_the_local_active_segment():
    directory = open_run(AIVEN_TIERED / "B")
    try:
        log = directory.get("plain-0")
        remote = [s for s in log.segments.all() if s in log.remote.segments.all()]
        assert [s.base_offset for s in remote] == [0, 1430]
        assert log.local.log_start_offset == 2881 and log.log_start_offset == 0
        assert remote[0].source.name.endswith(
            "tiered-storage/plain-" + remote[0].source.name.split("plain-")[1])
    finally:
        directory.close()


@needs_fixtures
@pytest.mark.parametrize("run", ["B", "C"])
def test_a_narrow_read_fetches_only_its_chunks(run, monkeypatch):
    fetched = []
    original = AivenSegmentSource._fetch

    def counted(self, start, end):  # (every request for a .log's bytes)
        fetched.append(end - start)
        return original(self, start, end)

    monkeypatch.setattr(AivenSegmentSource, "_fetch", counted)
    PROCESS_POOL.close()
    directory = open_run(AIVEN_TIERED / run)
    try:
        log = directory.get("plain-0")
        records = log.reader.records_from(700, 5)  # (the middle of the first remote segment)
        assert [r.offset for r in records] == list(range(700, 705))
        segment = log.segments.all()[0]
        log_object = segment.source.manifest().chunk_index
        # (the chunk of offset 700's batch, and the next one when the batch spans both)
        assert 0 < sum(fetched) <= 2 * max(log_object.transformed) < log_object.transformed_size
    finally:
        directory.close()


@needs_fixtures
def test_without_metadata_the_listing_is_read_and_said(tmp_path):
    run = copy_run(tmp_path, "C")
    config = load_remote_config(run / "broker.properties")
    remote = AivenLogDirectory(ObjectStore.from_uri((run / "remote").as_uri()),
                               config.key_prefix, key_ring=config.key_ring())
    try:
        assert remote.partition_names() == ["lz4-0", "plain-0", "txn-0", "txn-1"]
        assert "listing" in remote.notices[0]
        log = remote.get("plain-0")
        assert [s.base_offset for s in log.segments.all()] == [0, 1430]
        assert log.log_end_offset == 2881
        want = [r for r in expected("C", "plain", "read_uncommitted") if r["offset"] < 2881]
        assert topic_records(remote, "plain", IsolationLevel.READ_UNCOMMITTED) == want
    finally:
        remote.close()


@needs_fixtures
def test_the_broker_properties_say_where_and_how(tmp_path):
    config = load_remote_config(AIVEN_TIERED / "C" / "broker.properties")
    assert config.layout == "aiven"
    assert config.location == str((AIVEN_TIERED / "C" / "remote").resolve())
    assert config.key_prefix == "tiered-storage/"
    assert config.private_key_files == {"key1": (AIVEN_TIERED / "C/keys/private.pem").resolve()}
    moved = load_remote_config(AIVEN_TIERED / "A" / "broker.properties", base=tmp_path)
    assert moved.location == str(tmp_path / "remote") and moved.key_ring() is None


def test_an_s3_backend_is_a_bucket_and_its_secret_is_never_shown(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text(
        "remote.log.storage.manager.class.name=io.aiven.kafka.tieredstorage.RemoteStorageManager\n"
        "rsm.config.storage.backend.class=io.aiven.kafka.tieredstorage.storage.s3.S3Storage\n"
        "rsm.config.s3.bucket.name=tiers\nrsm.config.s3.region=eu-west-1\n"
        "rsm.config.s3.endpoint.url=http://127.0.0.1:9000\n"
        "rsm.config.s3.path.style.access.enabled=true\n"
        "rsm.config.aws.secret.access.key=s3cr3t-never-shown\n"
        "rsm.config.key.prefix=p/\nrsm.config.encryption.key.pairs=key1\n")
    with pytest.raises(InvalidConfigError) as refused:
        load_remote_config(props)
    assert "encryption.key.pairs.key1.private.key.file" in str(refused.value)
    props.write_text(props.read_text() + "rsm.config.encryption.key.pairs.key1.private.key.file"
                     "=keys/k.pem\n")
    config = load_remote_config(props)
    assert (config.location, config.endpoint, config.region, config.key_prefix) == \
        ("s3://tiers", "http://127.0.0.1:9000", "eu-west-1", "p/")
    assert config.private_key_files == {"key1": tmp_path / "keys" / "k.pem"}
    assert "s3cr3t" not in repr(config) and "s3cr3t" not in repr(config.key_ring())


def test_virtual_hosted_buckets_at_an_endpoint_are_said_not_followed(tmp_path, caplog):
    props = tmp_path / "server.properties"
    lines = ["remote.log.storage.manager.class.name="
             "io.aiven.kafka.tieredstorage.RemoteStorageManager",
             "rsm.config.storage.backend.class=io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
             "rsm.config.s3.bucket.name=tiers", "rsm.config.s3.path.style.access.enabled=false"]
    props.write_text("\n".join(lines) + "\n")
    assert load_remote_config(props).location == "s3://tiers"  # AWS: virtual-hosted anyway
    assert not caplog.records
    props.write_text("\n".join(lines + ["rsm.config.s3.endpoint.url=http://127.0.0.1:9000"]))
    load_remote_config(props)
    assert "s3.path.style.access.enabled=false not followed" in caplog.records[0].getMessage()


def test_another_remote_storage_manager_is_refused_by_name(tmp_path):
    props = tmp_path / "server.properties"
    props.write_text("remote.log.storage.manager.class.name=com.example.OtherRsm\n")
    with pytest.raises(InvalidConfigError, match="com.example.OtherRsm"):
        load_remote_config(props)


def test_the_chunk_sizes_and_custom_metadata_decode_as_the_plugin_wrote_them():
    # (run B, plain's first segment, as the layout notes give it)
    data = bytes.fromhex("00000004" "00014d66" "02" "0135" "0000" "0179" "00013eac")
    assert decode_chunk_sizes(data) == (85659, 85350, 85727, 81580)
    assert decode_chunk_sizes(bytes.fromhex("00000001" "0000002a")) == (42,)
    assert decode_chunk_sizes(bytes.fromhex("00000000")) == ()
    # (run A, plain's first segment: the COPY_SEGMENT_FINISHED update's custom metadata)
    custom = bytes.fromhex(
        "030003f2cf7e0110107469657265642d73746f726167652f024b4b706c61696e2d466f377056477763524c"
        "7133714861456845386f57412f302f30303030303030303030303030303030303030302d334c4736427258"
        "59542d6d386a657278345443355541")
    assert custom_metadata_fields(custom) == {
        0: 1037305, 1: "tiered-storage/",
        2: "plain-Fo7pVGwcRLq3qHaEhE8oWA/0/00000000000000000000-3LG6BrXYT-m8jerx4TC5UA"}


@needs_fixtures
@pytest.mark.parametrize("run", RUNS)
def test_columns_read_ahead_through_the_chunks(run):
    directory = open_run(AIVEN_TIERED / run)
    try:
        for topic, isolation in (("plain", IsolationLevel.READ_UNCOMMITTED),
                                 ("txn", IsolationLevel.READ_COMMITTED)):
            got = []
            for name in directory.partition_names():
                if name.rpartition("-")[0] == topic:
                    log = directory.get(name)
                    got.extend((log.partition, row["offset"], row["key"], row["value"])
                               for t in log.reader.read_columns(0, None, isolation)
                               for row in t.to_pylist())
            want = [(r["partition"], r["offset"], r["key_b64"], r["value_b64"])
                    for r in expected(run, topic, ISOLATIONS[isolation])]
            assert [(p, o, b64(k), b64(v)) for p, o, k, v in got] == want, (run, topic)
    finally:
        directory.close()


def b64(value):
    import base64

    return None if value is None else base64.b64encode(value).decode("ascii")


def s3_properties(run_dir, target, s3, bucket):
    """``run_dir``'s broker properties with the S3 backend of the plugin: ``bucket`` of
    ``s3`` (credentials: the environment's chain, as the plugin's default)."""
    lines = [line for line in (run_dir / "broker.properties").read_text().splitlines()
             if not line.startswith(("rsm.config.storage.", "rsm.config.encryption.key.pairs."))]
    lines += ["rsm.config.storage.backend.class="
              "io.aiven.kafka.tieredstorage.storage.s3.S3Storage",
              f"rsm.config.s3.bucket.name={bucket}", f"rsm.config.s3.region={s3.region}",
              f"rsm.config.s3.endpoint.url={s3.endpoint}",
              "rsm.config.s3.path.style.access.enabled=true"]
    if (run_dir / "keys").exists():
        lines.append(f"rsm.config.encryption.key.pairs.key1.private.key.file="
                     f"{run_dir / 'keys' / 'private.pem'}")
    target.write_text("\n".join(lines) + "\n")
    return target


@needs_fixtures
@pytest.mark.parametrize("run", RUNS)
def test_a_bucket_with_the_key_prefix_reads_as_the_consumer_read_it(run, s3_server, tmp_path,
                                                                   monkeypatch):
    import shutil

    for key, value in s3_server.env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL")  # (the properties say where the bucket is)
    bucket = s3_server.new_bucket("aiven")
    shutil.copytree(AIVEN_TIERED / run / "remote", s3_server.base_dir / bucket,
                    dirs_exist_ok=True)
    props = s3_properties(AIVEN_TIERED / run, tmp_path / "server.properties", s3_server, bucket)
    assert_bucket_reads_as_consumed(run, props, f"s3://{bucket}")


def assert_bucket_reads_as_consumed(run, props, uri):
    """Run ``run``'s log directory with the remote tier ``props`` configure (the bucket at
    ``uri``) reads every topic at both isolation levels as the consumer read it."""
    directory = open_log_directory(AIVEN_TIERED / run / "logdir",
                                   options=StoreOptions(remote_config=str(props)))
    try:
        assert directory.get("plain-0").remote.store.uri == uri
        for isolation in ISOLATIONS:
            for topic in TOPICS:
                assert topic_records(directory, topic, isolation) == \
                    expected(run, topic, ISOLATIONS[isolation]), (run, topic, isolation)
    finally:
        directory.close()


@needs_fixtures
@pytest.mark.parametrize("run", RUNS)
def test_a_gcs_bucket_without_credentials_reads_as_the_consumer_read_it(run, gcs_server,
                                                                        tmp_path):
    bucket = gcs_server.new_bucket("aiven")
    gcs_server.upload(AIVEN_TIERED / run / "remote", bucket)
    props = gcs_properties(AIVEN_TIERED / run, tmp_path / "server.properties", gcs_server,
                           bucket, "rsm.config.gcs.credentials.default=false")
    assert_bucket_reads_as_consumed(run, props, f"gs://{bucket}?anonymous=true")


def test_a_gcs_backend_takes_credentials_from_the_standard_chain(tmp_path, caplog):
    server = type("Server", (), {"endpoint": "https://gcs.example:443"})
    run = tmp_path / "run"
    run.mkdir()
    (run / "broker.properties").write_text(
        "remote.log.storage.manager.class.name=io.aiven.kafka.tieredstorage.RemoteStorageManager\n")
    anonymous = load_remote_config(gcs_properties(
        run, tmp_path / "a.properties", server, "tiers",
        "rsm.config.gcs.credentials.default=false"))
    assert (anonymous.location, anonymous.endpoint) == \
        ("gs://tiers?anonymous=true", "https://gcs.example:443")
    assert load_remote_config(gcs_properties(run, tmp_path / "d.properties", server,
                                             "tiers")).location == "gs://tiers"
    assert not caplog.records
    named = load_remote_config(gcs_properties(
        run, tmp_path / "p.properties", server, "tiers",
        "rsm.config.gcs.credentials.default=false",
        "rsm.config.gcs.credentials.json={\"private_key\": \"s3cr3t-never-shown\"}"))
    assert named.location == "gs://tiers"  # the standard chain's credentials, not anonymous
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "rsm.config.gcs.credentials.json not read" in said and "s3cr3t" not in said
    assert "s3cr3t" not in repr(named)


def gcs_properties(run_dir, target, gcs, bucket, *extra):
    """``run_dir``'s broker properties with the plugin's GCS backend: ``bucket`` of ``gcs``
    (its endpoint as ``gcs.endpoint.url``), and ``extra`` lines."""
    lines = [line for line in (run_dir / "broker.properties").read_text().splitlines()
             if not line.startswith(("rsm.config.storage.", "rsm.config.encryption.key.pairs."))]
    lines += ["rsm.config.storage.backend.class="
              "io.aiven.kafka.tieredstorage.storage.gcs.GcsStorage",
              f"rsm.config.gcs.bucket.name={bucket}", f"rsm.config.gcs.endpoint.url={gcs.endpoint}",
              *extra]
    if (run_dir / "keys").exists():
        lines.append(f"rsm.config.encryption.key.pairs.key1.private.key.file="
                     f"{run_dir / 'keys' / 'private.pem'}")
    target.write_text("\n".join(lines) + "\n")
    return target


@needs_fixtures
def test_the_plugins_root_as_the_location_reads_the_remote_tier_alone():
    run = AIVEN_TIERED / "B"
    options = StoreOptions(remote_config=str(run / "broker.properties"))
    directory = open_log_directory((run / "remote").as_uri(), options=options)
    try:
        assert directory.partition_names() == ["lz4-0", "plain-0", "txn-0", "txn-1"]
        assert "listing" in directory.notices[0]
        want = [r for r in expected("B", "plain", "read_uncommitted") if r["offset"] < 2881]
        assert topic_records(directory, "plain", IsolationLevel.READ_UNCOMMITTED) == want
    finally:
        directory.close()


@needs_fixtures
@pytest.mark.parametrize("under", ["remote", "remote/tiered-storage"])
def test_remote_path_names_the_root_or_the_uri_under_the_key_prefix(under):
    run = AIVEN_TIERED / "C"
    options = StoreOptions(remote_config=str(run / "broker.properties"))
    directory = open_log_directory(run / "logdir", remote=(run / under).as_uri(),
                                   options=options)
    try:
        assert topic_records(directory, "txn", IsolationLevel.READ_COMMITTED) == \
            expected("C", "txn", "read_committed")
    finally:
        directory.close()


@needs_fixtures
@pytest.mark.parametrize("run", RUNS)
def test_each_index_is_what_the_brokers_remote_index_cache_fetched(run):
    """The broker's ``remote-log-index-cache/`` holds ``<start>_<segment id>.<kind>`` as
    Kafka's RemoteIndexCache fetched them from the plugin (``fetchIndex``): each index read
    from ``.indexes`` (decrypted in run C) is those bytes."""
    directory = open_run(AIVEN_TIERED / run)
    kinds = {"index": "offset", "timeindex": "timestamp", "txnindex": "transaction"}
    try:
        sources = [s.source for name in ("plain-0", "lz4-0", "txn-0", "txn-1")
                   for s in directory.get(name).remote.segments.all()]
        cached = sorted((AIVEN_TIERED / run / "logdir" / "remote-log-index-cache").iterdir())
        assert len(cached) == 3 * len(sources) == 15
        for path in cached:
            segment_id, _, kind = path.name.partition("_")[2].rpartition(".")
            (source,) = [s for s in sources if s.name.endswith(f"-{segment_id}.log")]
            assert source.index_bytes(kinds[kind]).data == path.read_bytes(), path.name
    finally:
        directory.close()


def test_a_remote_config_that_cannot_be_read_is_one_line(tmp_path):
    options = StoreOptions(remote_config=str(tmp_path / "server.properties"))
    with pytest.raises(InvalidConfigError, match=r"the remote config \(the broker's properties\) "
                                                 r".*server.properties cannot be read: No such"):
        open_log_directory(tmp_path, options=options)


@pytest.mark.parametrize("account, uri", [
    ("rsm.config.azure.account.name=acct\n", "abfs://tiers@acct.dfs.core.windows.net"),
    ("", "abfs://tiers")])
def test_an_azure_backend_is_its_container(tmp_path, account, uri):
    props = tmp_path / "server.properties"
    props.write_text(
        "remote.log.storage.manager.class.name=io.aiven.kafka.tieredstorage.RemoteStorageManager\n"
        "rsm.config.storage.backend.class="
        "io.aiven.kafka.tieredstorage.storage.azure.AzureBlobStorage\n"
        "rsm.config.azure.container.name=tiers\n" + account)
    assert load_remote_config(props).location == uri
