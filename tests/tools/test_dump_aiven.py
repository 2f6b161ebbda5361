"""``kfs dump`` of a ``.log`` object Aiven's RemoteStorageManager wrote (``tests/fixtures/
aiven-tiered``): decoded through its ``.rsm-manifest`` beside it, chunk by chunk, it prints what
a dump of the segment the broker uploaded prints; an encrypted one needs the key ring of
``--remote-config``, and without it is one line saying so."""

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
