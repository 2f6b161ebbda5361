"""``kfs dump`` of a ``.log`` object Aiven's RemoteStorageManager wrote (``tests/fixtures/
aiven-tiered``): decoded through its ``.rsm-manifest`` beside it, chunk by chunk, it prints what
a dump of the segment the broker uploaded prints; an encrypted one needs the key ring of
``--remote-config``, and without it is one line saying so."""

import json
import subprocess

import pytest
import zstandard

from helpers.aiven import segment_objects
from helpers.kfs import kfs_command, kfs_env
from helpers.paths import AIVEN_TIERED

needs_fixtures = pytest.mark.needs_fixture("aiven-tiered")


def dump(*args):
    done = subprocess.run(kfs_command("dump", "--deep-iteration", *map(str, args)),
                          env=kfs_env(), capture_output=True, text=True, timeout=300)
    return done.returncode, done.stdout.splitlines()[1:], done.stderr  # (not "Dumping <path>")


@needs_fixtures
def test_a_zstd_chunked_log_object_dumps_as_the_segment_uploaded(tmp_path):
    log_object = segment_objects(AIVEN_TIERED / "B", "lz4")[0].with_suffix(".log")
    # (the segment itself: the chunks are whole zstd frames back to back)
    with open(log_object, "rb") as f:
        segment = zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True).read()
    plain = tmp_path / "00000000000000000000.log"
    plain.write_bytes(segment)
    status, lines, err = dump(log_object)
    assert (status, err) == (0, "")
    assert lines == dump(plain)[1] and len(lines) > 1000


@needs_fixtures
def test_an_encrypted_log_object_dumps_with_the_key_ring_of_the_broker_properties():
    run = AIVEN_TIERED / "C"
    log_object = segment_objects(run, "txn", 1)[0].with_suffix(".log")
    status, lines, err = dump(log_object)
    assert status == 1 and len(err.splitlines()) == 1
    assert "encrypted and no key ring is configured" in err
    status, lines, err = dump("--remote-config", run / "broker.properties", log_object)
    assert (status, err) == (0, "")
    assert lines[0] == "Log starting offset: 0" and "isTransactional: true" in lines[1]
    assert sum(line.startswith("| offset: ") for line in lines) == 1156  # (0..1155, markers)


@needs_fixtures
def test_the_manifest_and_indexes_objects_dump_without_key_material():
    run = AIVEN_TIERED / "C"
    manifest = segment_objects(run, "txn", 0)[0]
    wrapped = json.loads(manifest.read_bytes())["encryption"]["dataKey"].partition(":")[2]
    status, lines, err = dump(manifest)
    assert (status, err) == (0, "")
    assert lines[0].startswith("chunkIndex: originalChunkSize: 262144 ") and "chunks: 4" in lines[0]
    assert "index: transaction position: 4334 size: 1898" in lines
    assert lines[-1] == "compression: false encryption: key pair key1"
    assert wrapped[:12] not in "\n".join(lines)
    status, lines, err = dump("--remote-config", run / "broker.properties",
                              manifest.with_suffix(".indexes"))
    assert (status, err) == (0, "")
    cached = next((run / "logdir" / "remote-log-index-cache").glob(
        "0_" + manifest.name.split("-", 1)[1].replace(".rsm-manifest", ".index")))
    offsets = lines[lines.index(f"index: offset ({cached.stat().st_size} bytes)") + 1:
                    lines.index("index: timestamp (2472 bytes)")]
    assert len(offsets) == cached.stat().st_size // 8 and offsets[0].startswith("offset: ")
    assert "epoch: 0 startOffset: 0" in lines
