"""``kfs dump --offsets-decoder`` / ``--transaction-log-decoder`` run as a command on the
internal-topics fixtures: every record line is the deep-iteration line followed by exactly the
``key:`` / ``payload:`` strings kafka-dump-log printed (``*.dump-log.jsonl``); with ``--json``
every record carries the decoded key and value of ``*.expected.jsonl``; records the schemas do
not cover are printed as Kafka's tool prints them, with a warning on stderr."""

import json
import struct
import subprocess

import pytest
from helpers.kfs import kfs_command, kfs_env
from helpers.paths import INTERNAL_TOPICS, REPO

from storage.records import build_batch

needs_fixtures = pytest.mark.needs_fixture("internal-topics")
DECODERS = {"__consumer_offsets-7": "--offsets-decoder",
            "__transaction_state-3": "--transaction-log-decoder"}


def kfs_dump(*args):
    return subprocess.run(kfs_command("dump", *map(str, args)), cwd=REPO, env=kfs_env(),
                          capture_output=True, text=True, timeout=120)


def logs(name):
    return sorted(str(p) for p in (INTERNAL_TOPICS / name).glob("*.log"))


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def with_key_payload(line, entry):
    text = f"{line} key: {entry['key']}"
    return text if entry["payload"] is None else f"{text} payload: {entry['payload']}"


@needs_fixtures
@pytest.mark.parametrize("name", list(DECODERS))
def test_every_line_is_kafka_dump_logs(name):
    files = logs(name)
    plain = kfs_dump("--deep-iteration", *files)
    decoded = kfs_dump(DECODERS[name], *files)  # implies --print-data-log and deep iteration
    assert plain.returncode == decoded.returncode == 0
    assert decoded.stderr == ""
    strings = {e["offset"]: e for e in jsonl(INTERNAL_TOPICS / f"{name}.dump-log.jsonl")}
    expected = []
    for line in plain.stdout.splitlines():
        if line.startswith("| offset: "):
            line = with_key_payload(line, strings.pop(int(line.split()[2])))
        expected.append(line)
    assert strings == {}  # every record was printed
    assert decoded.stdout.splitlines() == expected


@needs_fixtures
@pytest.mark.parametrize("name", list(DECODERS))
def test_skip_record_metadata(name):
    res = kfs_dump(DECODERS[name], "--skip-record-metadata", *logs(name))
    records = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    strings = jsonl(INTERNAL_TOPICS / f"{name}.dump-log.jsonl")
    assert records == [with_key_payload("|", e) for e in strings]


@needs_fixtures
@pytest.mark.parametrize("name", list(DECODERS))
def test_json_records_carry_the_decoded_key_and_value(name):
    res = kfs_dump("--json", DECODERS[name], *logs(name))
    assert res.returncode == 0 and res.stderr == ""
    got = [json.loads(line) for line in res.stdout.splitlines()]
    expected = jsonl(INTERNAL_TOPICS / f"{name}.expected.jsonl")
    assert len(got) == len(expected)
    topic, partition = name.rsplit("-", 1)
    for g, e in zip(got, expected):
        assert (g["topic"], g["partition"], g["offset"], g["ts"]) == (topic, int(partition), e["offset"],
                                                                      e["timestamp"])
        assert (g["key"], g["value"]) == (e["key"], e["value"])
        assert "payload" not in g and "warnings" not in g
        assert list(g)[:8] == ["topic", "partition", "offset", "tstype", "ts", "headers", "key", "value"]


@needs_fixtures
def test_offsets_decoder_wins_as_in_kafka():
    files = logs("__transaction_state-3")[:1]
    both = kfs_dump("--offsets-decoder", "--transaction-log-decoder", *files)
    assert both.stdout == kfs_dump("--offsets-decoder", *files).stdout


def s16(text):
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def test_undecodable_records_print_as_kafka_and_warn(tmp_path):
    part = tmp_path / "__consumer_offsets-0"
    part.mkdir()
    good_key = struct.pack(">h", 1) + s16("g") + s16("t") + struct.pack(">i", 0)
    keys = [struct.pack(">h", 99) + b"x", good_key, good_key[:5], good_key]
    values = [b"\x00\x00", struct.pack(">h", 7) + b"\x00" * 20, b"\x00\x03", None]
    log = part / "00000000000000000000.log"
    log.write_bytes(build_batch(0, values, keys, 1700000000000))
    res = kfs_dump("--offsets-decoder", "--skip-record-metadata", log)
    assert res.returncode == 0
    lines = [line for line in res.stdout.splitlines() if line.startswith("| ")]
    assert lines[0] == "| key: Unknown record type 99 at offset 0, skipping."
    assert lines[1].startswith("| key: Error at offset 1, skipping. value version 7 (OffsetCommitValue)")
    assert lines[2].startswith("| key: Error at offset 2, skipping. key of type 1 (OffsetCommitKey): truncated")
    assert lines[3] == '| key: {"type":"1","data":{"group":"g","topic":"t","partition":0}} payload: <DELETE>'
    warnings = res.stderr.splitlines()
    assert [w.split(": warning: ")[0] for w in warnings] == [
        f"kfs dump: {log}: offset {o}" for o in (0, 1, 2)]
    rows = [json.loads(line) for line in kfs_dump("--json", "--offsets-decoder", log).stdout.splitlines()]
    assert rows[0]["key"] == {"type": 99, "name": None, "raw": "AGN4"}
    assert rows[0]["value"] == {"version": 0, "raw": "AAA="} and rows[0]["warnings"]
    assert rows[1]["key"]["data"] == {"group": "g", "topic": "t", "partition": 0}
    assert rows[1]["value"]["version"] == 7 and "raw" in rows[1]["value"]
    assert rows[3]["value"] is None and "warnings" not in rows[3]
