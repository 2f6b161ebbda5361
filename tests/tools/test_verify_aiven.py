"""``kfs verify --remote-config FILE LOGDIR``: an audit of what Aiven's RemoteStorageManager
uploaded (``tests/fixtures/aiven-tiered``), each remote segment read through its manifest:
the runs as written have no problem; a chunk whose GCM tag fails, a chunk index that does not
match its object and a missing manifest are each a problem of their segment naming the object,
and every other segment is still checked."""

import json

import pytest

from helpers.aiven import copy_run, segment_objects
from helpers.kfs import kfs_verify
from helpers.paths import AIVEN_TIERED

needs_fixtures = pytest.mark.needs_fixture("aiven-tiered")


@needs_fixtures
@pytest.mark.parametrize("run", ["A", "B", "C"])
def test_what_the_plugin_uploaded_has_no_problem(run):
    done = kfs_verify("--remote-config", AIVEN_TIERED / run / "broker.properties",
                      AIVEN_TIERED / run / "logdir", "plain-0", "txn-0", "txn-1", "lz4-0")
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert "4 partitions, 9 segments" in done.stdout and "no problems" in done.stdout


@needs_fixtures
def test_damaged_objects_are_problems_of_their_segments(tmp_path):
    run = copy_run(tmp_path, "C")
    plain = segment_objects(run, "plain")
    log_object = plain[0].with_suffix(".log")
    data = bytearray(log_object.read_bytes())
    data[3 * 262172 + 100] ^= 0xFF  # (chunk 3's ciphertext)
    log_object.write_bytes(bytes(data))
    doc = json.loads(plain[1].read_bytes())
    doc["chunkIndex"]["transformedChunkSize"] += 1
    plain[1].write_text(json.dumps(doc))
    segment_objects(run, "txn", 1)[0].unlink()
    done = kfs_verify("--remote-config", run / "broker.properties", run / "logdir",
                      "plain-0", "txn-0", "txn-1")
    assert done.returncode == 1, done.stdout + done.stderr
    problems = [line for line in done.stdout.splitlines() if "cannot be read" in line]
    assert len(problems) == 3, done.stdout
    assert f"{log_object.name}: cannot be read: chunk 3 of 4: the AES-GCM tag does not " \
        "match" in problems[0]
    assert "but its chunk index says 4 chunks" in problems[1]
    assert "no manifest" in problems[2]
    assert "3 partitions, 7 segments" in done.stdout


@needs_fixtures
@pytest.mark.parametrize("under", ["remote", "remote/tiered-storage"])
def test_remote_path_names_the_root_or_the_uri_under_the_key_prefix(under):
    run = AIVEN_TIERED / "B"
    done = kfs_verify("--remote-config", run / "broker.properties", "--remote-path", run / under,
                      run / "logdir", "plain-0", "txn-1")
    assert (done.returncode, done.stderr) == (0, ""), done.stdout
    assert "2 partitions, 5 segments" in done.stdout  # (3 remote, 2 local)
