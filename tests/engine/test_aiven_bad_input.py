"""Aiven's tiered storage damaged or misconfigured (a fixture run copied and damaged): each bad
input is one clear line naming the object (and chunk, and key pair id; never key material),
and every other segment, chunk and the local log still read."""

import json

import pytest

from helpers.aiven import copy_run, expected, segment_objects, topic_records
from storage.directory import StoreOptions, open_log_directory
from storage.isolation import IsolationLevel
from storage.remote.store_pool import PROCESS_POOL
from storage.remote.key_ring import KeyRingError, RemoteSegmentError

needs_fixtures = pytest.mark.needs_fixture("aiven-tiered")
FIRST_SEGMENT_END = 1430  # plain-0's first remote segment holds offsets 0..1429 in every run


@pytest.fixture(autouse=True)
def fresh_chunks():
    PROCESS_POOL.close()  # (decoded chunks of the undamaged fixture are not the copy's)
    yield
    PROCESS_POOL.close()


def open_run(run_dir):
    options = StoreOptions(remote_config=str(run_dir / "broker.properties"))
    return open_log_directory(run_dir / "logdir", options=options)


def first_records(directory, offset, n=3):
    return [r.offset for r in directory.get("plain-0").reader.records_from(offset, n)]


def refused(run_dir, error, offset=0):
    """The one line reading ``offset`` of plain-0 gives; the second segment and the local log
    still read as the consumer read them."""
    directory = open_run(run_dir)
    try:
        with pytest.raises(error) as raised:
            first_records(directory, offset)
        assert first_records(directory, FIRST_SEGMENT_END) == [1430, 1431, 1432]
        assert first_records(directory, 3000) == [3000, 3001, 3002]
        return str(raised.value)
    finally:
        directory.close()


def edit_manifest(path, change):
    doc = json.loads(path.read_bytes())
    change(doc)
    path.write_text(json.dumps(doc))


@needs_fixtures
def test_a_missing_manifest(tmp_path):
    run = copy_run(tmp_path, "B")
    manifest = segment_objects(run, "plain")[0]
    manifest.unlink()
    message = refused(run, RemoteSegmentError)
    assert f"{manifest.name}: no manifest" in message and "\n" not in message


@needs_fixtures
def test_a_garbled_manifest(tmp_path):
    run = copy_run(tmp_path, "A")
    manifest = segment_objects(run, "plain")[0]
    manifest.write_bytes(manifest.read_bytes()[:100])
    message = refused(run, RemoteSegmentError)
    assert f"{manifest.name}: not a manifest of Aiven's tiered storage" in message
    assert "\n" not in message


@needs_fixtures
def test_a_chunk_index_that_does_not_match_the_object(tmp_path):
    run = copy_run(tmp_path, "C")
    manifest = segment_objects(run, "plain")[0]
    edit_manifest(manifest, lambda d: d["chunkIndex"].update(
        finalTransformedChunkSize=d["chunkIndex"]["finalTransformedChunkSize"] + 1))
    message = refused(run, RemoteSegmentError)
    log_object = manifest.name.replace(".rsm-manifest", ".log")
    assert f"{log_object}: 1035617 bytes, but its chunk index says 4 chunks of 1035618" in message


@needs_fixtures
def test_a_truncated_chunk(tmp_path):
    run = copy_run(tmp_path, "A")
    manifest = segment_objects(run, "plain")[0]
    log_object = manifest.with_suffix(".log")
    data = log_object.read_bytes()
    log_object.write_bytes(data[:-100])  # (the index says so too: only the chunk is short)
    edit_manifest(manifest, lambda d: d["chunkIndex"].update(
        finalTransformedChunkSize=d["chunkIndex"]["finalTransformedChunkSize"] - 100))
    directory = open_run(run)
    try:
        assert first_records(directory, 0) == [0, 1, 2]  # (chunk 0 is whole)
        with pytest.raises(RemoteSegmentError) as raised:
            first_records(directory, 1420)
        assert f"{log_object.name} chunk 3 of 4: " in str(raised.value)
        assert "truncated" in str(raised.value)
        assert first_records(directory, FIRST_SEGMENT_END) == [1430, 1431, 1432]
    finally:
        directory.close()


@needs_fixtures
def test_a_gcm_tag_that_fails_names_the_object_and_chunk(tmp_path):
    run = copy_run(tmp_path, "C")
    log_object = segment_objects(run, "plain")[0].with_suffix(".log")
    data = bytearray(log_object.read_bytes())
    data[2 * 262172 + 500] ^= 0x01  # a byte of chunk 2's ciphertext
    log_object.write_bytes(bytes(data))
    directory = open_run(run)
    try:
        assert first_records(directory, 0) == [0, 1, 2]  # (chunks 0 and 1 still read)
        with pytest.raises(RemoteSegmentError) as raised:
            directory.get("plain-0").reader.records_from(0, 1430)
        assert f"{log_object.name} chunk 2 of 4: the AES-GCM tag does not match" in \
            str(raised.value)
        assert first_records(directory, FIRST_SEGMENT_END) == [1430, 1431, 1432]
    finally:
        directory.close()


@needs_fixtures
def test_a_data_key_of_a_key_pair_not_in_the_ring_names_the_id_only(tmp_path):
    run = copy_run(tmp_path, "C")
    manifest = segment_objects(run, "plain")[0]
    wrapped = json.loads(manifest.read_bytes())["encryption"]["dataKey"].partition(":")[2]
    edit_manifest(manifest, lambda d: d["encryption"].update(dataKey="key2:" + wrapped))
    message = refused(run, KeyRingError)
    assert "key pair 'key2', which is not in the key ring (encryption.key.pairs: key1)" in \
        message
    assert wrapped[:16] not in message and "\n" not in message


@needs_fixtures
@pytest.mark.parametrize("damage", ["missing", "not a key", "a public key"])
def test_a_private_key_file_that_is_unreadable_or_not_a_key(tmp_path, damage):
    run = copy_run(tmp_path, "C")
    pem = run / "keys" / "private.pem"
    secret = pem.read_text().splitlines()[1]
    if damage == "missing":
        pem.unlink()
    elif damage == "not a key":
        pem.write_text("-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n")
    else:
        pem.write_bytes((run / "keys" / "public.pem").read_bytes())
    directory = open_run(run)
    try:
        with pytest.raises(KeyRingError) as raised:
            first_records(directory, 0)
        message = str(raised.value)
        assert "key pair 'key1': " in message and str(pem) in message
        assert ("cannot be read" if damage == "missing" else "is not an RSA private key") in \
            message
        assert secret not in message and "\n" not in message
        # (the local log needs no key)
        assert first_records(directory, 3000) == [3000, 3001, 3002]
    finally:
        directory.close()


@needs_fixtures
def test_undamaged_topics_of_a_damaged_run_still_read_as_the_consumer_read_them(tmp_path):
    run = copy_run(tmp_path, "C")
    segment_objects(run, "plain")[0].unlink()
    directory = open_run(run)
    try:
        for topic in ("lz4", "txn"):
            assert topic_records(directory, topic, IsolationLevel.READ_COMMITTED) == \
                expected("C", topic, "read_committed")
    finally:
        directory.close()


@needs_fixtures
def test_a_root_in_another_layout_than_the_configured_one_is_named(tmp_path):
    from storage.remote.object_store import ObjectStore
    from storage.remote.tiered import TIERED_ROOT, UnsupportedRemoteLayoutError

    run = copy_run(tmp_path, "A")
    (run / "remote" / "tiered-storage").rename(run / "remote" / TIERED_ROOT)  # (not Aiven's)
    directory = open_run(run)
    try:
        with pytest.raises(RemoteSegmentError) as raised:
            first_records(directory, 0)
        message = str(raised.value)
        assert "no manifest" in message and \
            f"holds {TIERED_ROOT}/: LocalTieredStorage's layout, not Aiven's" in message
        assert first_records(directory, 3000) == [3000, 3001, 3002]  # (the local log)
    finally:
        directory.close()
    from storage.remote.aiven import AivenLogDirectory

    with pytest.raises(UnsupportedRemoteLayoutError, match="LocalTieredStorage's layout"):
        AivenLogDirectory(ObjectStore.from_uri((run / "remote").as_uri()), "tiered-storage/")


@needs_fixtures
def test_a_garbled_manifest_in_listing_mode_fails_its_segment_alone(tmp_path):
    """With no ``__remote_log_metadata`` at hand (the plugin's root read alone, its listing),
    a garbled manifest no longer fails the partition's open: the segment's reads fail with the
    manifest's one line, the next segment still reads, and no offset of the bad segment is
    stepped over (a read across it fails too)."""
    run = copy_run(tmp_path, "A")
    manifest = segment_objects(run, "plain")[0]
    manifest.write_bytes(manifest.read_bytes()[:100])
    options = StoreOptions(remote_config=str(run / "broker.properties"))
    directory = open_log_directory((run / "remote").as_uri(), options=options)
    try:
        assert "listing" in directory.notices[0]
        log = directory.get("plain-0")
        assert [s.base_offset for s in log.segments.all()] == [0, FIRST_SEGMENT_END]
        for offset in (0, 700, FIRST_SEGMENT_END - 1):
            with pytest.raises(RemoteSegmentError) as raised:
                first_records(directory, offset)
            assert f"{manifest.name}: not a manifest of Aiven's tiered storage" in \
                str(raised.value) and "\n" not in str(raised.value)
        assert first_records(directory, FIRST_SEGMENT_END) == [1430, 1431, 1432]
    finally:
        directory.close()
