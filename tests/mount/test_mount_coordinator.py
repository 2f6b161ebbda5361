"""Kafka's coordinator topics through a real mount: records decoded in by-offset files and
stream files (raw bytes in ``user.kafka.value``), and the derived views
``/consumer-groups/<group>/...`` and ``/transactions/<id>``, checked against Kafka's own
decoding of the fixtures (``*.expected.jsonl``) and followed as records are appended."""

import base64
import json
import shutil
import struct
import subprocess

import pytest

from helpers.paths import INTERNAL_TOPICS
from helpers.shell import sh
from storage.records import build_batch

pytestmark = [pytest.mark.fuse, pytest.mark.needs_fixture("internal-topics")]

OFFSETS, TXNS = "__consumer_offsets-7", "__transaction_state-3"
STATES = {0: "Empty", 1: "Ongoing", 2: "PrepareCommit", 3: "PrepareAbort", 4: "CompleteCommit",
          5: "CompleteAbort", 6: "Dead", 7: "PrepareEpochFence"}


def expected(name):
    return [json.loads(line) for line in (INTERNAL_TOPICS / f"{name}.expected.jsonl").open()]


def committed_offsets():
    """{(group, topic, partition): offset}: Kafka's decoding folded as a compacted topic."""
    out = {}
    for r in expected(OFFSETS):
        if r["key"]["type"] in (0, 1):
            k = r["key"]["data"]
            key = (k["group"], k["topic"], k["partition"])
            if r["value"] is None:
                out.pop(key, None)
            else:
                out[key] = r["value"]["data"]["offset"]
    return out


def transaction_states():
    out = {}
    for r in expected(TXNS):
        tid = r["key"]["data"]["transactionalId"]
        if r["value"] is None:
            out.pop(tid, None)
        else:
            out[tid] = r["value"]["data"]
    return out


@pytest.fixture
def backing(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    for name in (OFFSETS, TXNS):
        shutil.copytree(INTERNAL_TOPICS / name, data / name)
        for path in (data / name).iterdir():
            path.chmod(0o644)
    return data


def test_records_read_decoded_with_raw_bytes_kept(backing, mount):
    mnt = mount(backing, "--read-only").path
    want = expected(OFFSETS)
    lines = sh(f"cat {OFFSETS}/values", mnt).out.splitlines()
    assert [json.loads(line) for line in lines] == [
        {"key": r["key"], "value": r["value"]} for r in want]
    jsonl = [json.loads(line) for line in sh(f"cat {TXNS}/records.jsonl", mnt).out.splitlines()]
    assert [(j["offset"], j["ts"], j["key"], j["payload"]) for j in jsonl] == [
        (r["offset"], r["timestamp"], r["key"], r["value"]) for r in expected(TXNS)]
    first = want[0]
    assert json.loads(sh(f"cat {OFFSETS}/by-offset/{first['offset']}", mnt).out) == \
        {"key": first["key"], "value": first["value"]}
    raw = sh(f"getfattr --only-values -n user.kafka.value {OFFSETS}/by-offset/0 | xxd -p", mnt).out
    value = bytes.fromhex(raw.replace("\n", ""))
    assert struct.unpack(">h", value[:2])[0] == first["value"]["version"]
    assert struct.unpack(">q", value[2:10])[0] == first["value"]["data"]["offset"]


def test_groups_and_transactions_views(backing, mount):
    mnt = mount(backing, "--read-only").path
    offsets = committed_offsets()
    groups = set(sh("ls consumer-groups", mnt).out.split())
    assert {g for g, _, _ in offsets} <= groups
    for (group, topic, partition), offset in offsets.items():
        assert sh(f"cat consumer-groups/{group}/{topic}-{partition}", mnt).out == f"{offset}\n"
    group = sorted(offsets)[0][0]
    table = sh(f"cat consumer-groups/{group}/describe", mnt).out.splitlines()
    assert table[0].split()[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET",
                                    "LOG-END-OFFSET", "LAG"]
    rows = {(r.split()[1], int(r.split()[2])): r.split()[3] for r in table[1:]}
    assert {tp: int(o) for tp, o in rows.items() if o != "-"} == {
        (t, p): o for (g, t, p), o in offsets.items() if g == group}
    assert "user.kafka.state=" in sh(f"getfattr -d consumer-groups/{group}", mnt).out
    states = transaction_states()
    assert set(sh("ls transactions", mnt).out.split()) == set(states)
    for tid, state in states.items():
        shown = json.loads(sh(f"cat transactions/{tid}", mnt).out)
        assert (shown["producerId"], shown["producerEpoch"], shown["transactionState"],
                shown["transactionTimeoutMs"]) == (state["producerId"], state["producerEpoch"],
                                                   STATES[state["transactionStatus"]],
                                                   state["transactionTimeoutMs"])
    for missing in ("consumer-groups/no-such-group", "transactions/nobody",
                    f"consumer-groups/{group}/nope-0"):
        assert subprocess.run(["cat", str(mnt / missing)], capture_output=True,
                              timeout=120).returncode != 0


def offset_commit(group: str, topic: str, partition: int, offset: int | None) -> bytes:
    """An OffsetCommit record as the group coordinator writes it: key type 1, value v1
    (offset, metadata, commit and expire timestamps), or a tombstone."""
    def string(s):
        return struct.pack(">h", len(s)) + s.encode()
    key = struct.pack(">h", 1) + string(group) + string(topic) + struct.pack(">i", partition)
    value = None if offset is None else (
        struct.pack(">hq", 1, offset) + string("") + struct.pack(">qq", 1700000000000, -1))
    return build_batch(0, [value], [key])


def test_views_follow_appends_and_show_lag(backing, mount):
    mnt = mount(backing).path
    sh("mkdir orders-0 && seq 1 25 >> orders-0/append", mnt)
    assert not (mnt / "consumer-groups" / "fresh-group").exists()
    with open(mnt / OFFSETS / "append-batches", "ab", buffering=0) as f:
        f.write(offset_commit("fresh-group", "orders", 0, 20))
    assert sh("cat consumer-groups/fresh-group/orders-0", mnt).out == "20\n"
    assert sh("getfattr --only-values -n user.kafka.lag consumer-groups/fresh-group/orders-0",
              mnt).out == "5"
    with open(mnt / OFFSETS / "append-batches", "ab", buffering=0) as f:
        f.write(offset_commit("fresh-group", "orders", 0, 25))
    assert sh("cat consumer-groups/fresh-group/orders-0", mnt).out == "25\n"
    with open(mnt / OFFSETS / "append-batches", "ab", buffering=0) as f:
        f.write(offset_commit("fresh-group", "orders", 0, None))  # offset expiry: a tombstone
    assert "fresh-group" not in sh("ls consumer-groups", mnt).out.split()


def test_an_unknown_record_type_reads_raw_with_a_warning(backing, mount):
    m = mount(backing)
    key = struct.pack(">h", 99) + b"future"
    with open(m.path / OFFSETS / "append-batches", "ab", buffering=0) as f:
        f.write(build_batch(0, [b"\x00\x01payload"], [key]))
    last = sh(f"ls {OFFSETS}/by-offset | sort -n | tail -1", m.path).out.strip()
    shown = json.loads(sh(f"cat {OFFSETS}/by-offset/{last}", m.path).out)
    assert shown["key"]["type"] == 99 and "data" not in shown["key"]
    assert base64.b64decode(shown["key"]["raw"]) == key
    assert json.loads(sh(f"tail -n 1 {OFFSETS}/values", m.path).out) == shown
    assert f"offset {last} shown raw: unknown record type 99" in m.log_text()
    assert set(sh("ls consumer-groups", m.path).out.split()) >= {g for g, _, _ in committed_offsets()}
