"""``kfs dump --cluster-metadata-decoder`` / ``--share-group-state-decoder`` equal Kafka 4.1.1's
``kafka-dump-log`` line for line on KRaft's metadata log, its snapshots and the share
coordinator's ``__share_group_state``, all written by a real broker.

One broker (``tests/helpers/kafka.py``, combined broker and controller) per module, with
snapshots every few KiB of metadata (``metadata.log.max.record.bytes.between.snapshots``), an
authorizer (for ACL records) and share groups on (``share.version=1``), takes what makes every
common metadata record: topics created with configs, a topic deleted, partitions added,
dynamic broker and topic configs, a client quota with fractional rates (float64 fields), a SCRAM
credential (bytes fields), ACLs created and one deleted, an idempotent producer (producer id
blocks) and a share group that consumes and acknowledges (``__share_group_state`` records). It
is then stopped cleanly and both tools dump each ``.log`` and ``.checkpoint`` of
``__cluster_metadata-0`` (and ``__share_group_state-0``'s logs) with each option: stdout must be
equal line for line, stderr too, and kfs's ``--json`` records must carry what Kafka prints.

Segments written here cover what no broker writes: record types, versions and frames Kafka
4.1.1 does not know, and bytes after a record.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
from pathlib import Path

import pytest
from helpers.kafka import KAFKA_LIB, KafkaBroker, flushed, kafka_missing, run_tool
from helpers.needs import unavailable
from helpers.paths import FIXTURES_ROOT
from helpers.remote_metadata import uvarint
from helpers.waits import wait_until
from test_kafka_dump_log import assert_same, kafka_dump_log, kfs_dump, lines, producer

from storage.coordinator.cluster_metadata import metadata_schemas, record_type_name
from storage.records import build_batch

pytestmark = pytest.mark.kafka

METADATA = "__cluster_metadata-0"
SHARE_STATE = "__share_group_state-0"
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _make_acls(broker: KafkaBroker) -> None:
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    def binding(principal: str, operation) -> AclBinding:
        return AclBinding(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL, principal,
                          "*", operation, AclPermissionType.ALLOW)

    admin = broker.admin()
    for future in admin.create_acls([binding("User:alice", AclOperation.READ),
                                     binding("User:bob", AclOperation.WRITE)]).values():
        future.result(60)
    gone = AclBindingFilter(ResourceType.TOPIC, "guarded", ResourcePatternType.LITERAL,
                            "User:bob", "*", AclOperation.WRITE, AclPermissionType.ALLOW)
    for future in admin.delete_acls([gone]).values():
        future.result(60)


def _configs_and_credentials(broker: KafkaBroker) -> None:
    from confluent_kafka.admin import (
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = broker.admin()
    for future in admin.incremental_alter_configs([
            ConfigResource("TOPIC", "orders", incremental_configs=[
                ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)]),
    ]).values():
        future.result(60)
    upsert = UserScramCredentialUpsertion("alice", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                                          b"alice-secret", b"salt-of-alice")
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(60)
    # a client quota whose rates are doubles (ClientQuotaRecord's float64), one of them >= 10**7
    run_tool("kafka.admin.ConfigCommand", "--bootstrap-server", broker.bootstrap, "--alter",
             "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=20000000,"
                             "request_percentage=12.25",
             "--entity-type", "clients", "--entity-name", "dump-client")
    run_tool("kafka.admin.ConfigCommand", "--bootstrap-server", broker.bootstrap, "--alter",
             "--add-config", "log.cleaner.threads=1", "--entity-type", "brokers",
             "--entity-default")


def metadata_changes(broker: KafkaBroker) -> None:
    """What makes the common metadata records: topics created with configs (``doomed`` then
    deleted), partitions added, configs and credentials, ACLs, an idempotent producer."""
    broker.create_topic("orders", 3, {"cleanup.policy": "compact", "min.insync.replicas": "1"})
    broker.create_topic("doomed", 2, {"retention.ms": "60000"})
    broker.create_topic("guarded", 1)
    from confluent_kafka.admin import NewPartitions

    admin = broker.admin()
    for future in admin.create_partitions([NewPartitions("orders", 5)]).values():
        future.result(60)
    for future in admin.delete_topics(["doomed"]).values():
        future.result(60)
    _configs_and_credentials(broker)
    _make_acls(broker)
    idem = producer(broker, enable_idempotence=True)
    idem.produce("orders", key=b"k", value=b"v")
    flushed(idem)


def _share_group(broker: KafkaBroker) -> None:
    """A share group consuming 20 records (its state lands in __share_group_state)."""
    run_tool("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", broker.bootstrap,
             "upgrade", "--feature", "share.version=1")
    broker.create_topic("shared", 1)
    p = producer(broker)
    for i in range(20):
        p.produce("shared", key=b"s%d" % i, value=b"shared record %d" % i)
    flushed(p)
    run_tool("org.apache.kafka.tools.consumer.ConsoleShareConsumer", "--bootstrap-server",
             broker.bootstrap, "--topic", "shared", "--group", "dump-share-group",
             "--max-messages", "20", "--timeout-ms", "60000")


def _metadata_end(log_dir: Path) -> int:
    """The offset after the last record of the metadata log now (kfs's own reading)."""
    out = kfs_dump(sorted((log_dir / METADATA).glob("*.log")), "--json")
    return max(json.loads(line)["lastOffset"] for line in lines(out.stdout) if line) + 1


def _checkpoints(log_dir: Path) -> list[Path]:
    return sorted((log_dir / METADATA).glob("*.checkpoint"))


def metadata_broker_logs(root: Path, share_group: bool = True) -> Path:
    """The log directory (under ``root``) of a broker that took every kind of metadata change
    (:func:`metadata_changes`, and with ``share_group`` a share group's), wrote a snapshot
    after them, and was then stopped cleanly."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    broker = KafkaBroker(root / "logs", root / "broker", overrides={
        "metadata.log.max.record.bytes.between.snapshots": "4096",
        "authorizer.class.name": AUTHORIZER, "super.users": "User:ANONYMOUS",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "1",
    })
    try:
        broker.start()
        metadata_changes(broker)
        if share_group:
            _share_group(broker)
        end = _metadata_end(root / "logs")
        wait_until(lambda: any(int(p.name[:20]) >= end for p in _checkpoints(root / "logs")),
                   f"a metadata snapshot past offset {end}")
    finally:
        broker.tear_down()
    assert (root / "logs" / ".kafka_cleanshutdown").exists(), broker.log_tail()
    return root / "logs"


@pytest.fixture(scope="module")
def broker_logs(tmp_path_factory) -> Path:
    return metadata_broker_logs(tmp_path_factory.mktemp("cluster-metadata"))


def _files(log_dir: Path, partition: str, suffix: str) -> list[Path]:
    files = sorted((log_dir / partition).glob(f"*{suffix}"))
    assert files, f"{partition} has no {suffix} file"
    return files


def test_the_broker_wrote_every_kind_of_metadata_record(broker_logs):
    """What the comparisons below cover, checked on kafka-dump-log's own output."""
    log = "\n".join(lines(kafka_dump_log(_files(broker_logs, METADATA, ".log"),
                                         "--cluster-metadata-decoder").stdout))
    for record_type in ("TOPIC_RECORD", "PARTITION_RECORD", "REMOVE_TOPIC_RECORD", "CONFIG_RECORD",
                        "CLIENT_QUOTA_RECORD", "USER_SCRAM_CREDENTIAL_RECORD",
                        "ACCESS_CONTROL_ENTRY_RECORD", "REMOVE_ACCESS_CONTROL_ENTRY_RECORD",
                        "PRODUCER_IDS_RECORD", "FEATURE_LEVEL_RECORD", "REGISTER_BROKER_RECORD"):
        assert f'"type":"{record_type}"' in log, record_type
    assert '"value":2.0E7' in log  # a double Java prints in E notation
    snapshot = "\n".join(lines(kafka_dump_log(_checkpoints(broker_logs)[-1:],
                                              "--cluster-metadata-decoder").stdout))
    assert "Snapshot end offset: " in snapshot and " SnapshotHeader {" in snapshot
    assert " SnapshotFooter {" in snapshot and '"type":"TOPIC_RECORD"' in snapshot


@pytest.mark.parametrize("options", [
    ("--cluster-metadata-decoder",),
    ("--cluster-metadata-decoder", "--skip-record-metadata"),
    ("--cluster-metadata-decoder", "--max-bytes", "3000"),
    # Kafka's order of the decoders: cluster metadata before remote metadata and share state
    ("--remote-log-metadata-decoder", "--cluster-metadata-decoder"),
    ("--share-group-state-decoder", "--cluster-metadata-decoder"),
], ids=" ".join)
def test_metadata_log(broker_logs, options):
    assert_same(_files(broker_logs, METADATA, ".log"), *options)


@pytest.mark.parametrize("options", [
    (), ("--deep-iteration",), ("--print-data-log",), ("--cluster-metadata-decoder",),
    ("--cluster-metadata-decoder", "--skip-record-metadata"),
], ids=" ".join)
def test_snapshots(broker_logs, options):
    """Every ``.checkpoint`` the broker kept, and a ``.log`` among them."""
    files = _checkpoints(broker_logs)
    assert files
    assert_same([*files, _files(broker_logs, METADATA, ".log")[0]], *options)


def _payloads(output: bytes) -> dict[int, str]:
    """offset -> what follows `` payload: `` on each record line."""
    found = {}
    for line in lines(output):
        if line.startswith("| offset: ") and " payload: " in line:
            found[int(line.split()[2])] = line.split(" payload: ", 1)[1]
    return found


def test_json_carries_what_kafka_prints(broker_logs):
    files = [*_files(broker_logs, METADATA, ".log"), *_checkpoints(broker_logs)]
    for path in files:
        expected = _payloads(kafka_dump_log([path], "--cluster-metadata-decoder").stdout)
        kfs = kfs_dump([path], "--cluster-metadata-decoder", "--json")
        assert kfs.returncode == 0 and kfs.stderr == b"", kfs.stderr
        records = [json.loads(line) for line in lines(kfs.stdout) if line]
        decoded = {r["offset"]: r["value"] for r in records if not r["isControl"]}
        assert decoded.keys() == expected.keys()
        for offset, value in decoded.items():
            assert {k: value[k] for k in ("type", "version", "data")} == json.loads(expected[offset])
            assert value["name"] and isinstance(value["apiKey"], int)


def test_share_group_state_decoder(broker_logs):
    files = _files(broker_logs, SHARE_STATE, ".log")
    out = "\n".join(assert_same(files, "--share-group-state-decoder"))
    assert 'key: {"type":"0","data":{"groupId":"dump-share-group"' in out  # a ShareSnapshot
    assert_same(files, "--share-group-state-decoder", "--skip-record-metadata")


# -- segments written here: what Kafka 4.1.1 does not know -------------------------------------


def _metadata_value(api_key: int, version: int, message: bytes, frame: int = 1) -> bytes:
    return uvarint(frame) + uvarint(api_key) + uvarint(version) + message


def _compact_string(text: str) -> bytes:
    return uvarint(len(text.encode()) + 1) + text.encode()


TOPIC = _compact_string("t") + bytes(range(16)) + b"\0"  # TopicRecord v0: name, id, no tags


def test_records_the_schemas_do_not_cover(tmp_path):
    """An unknown type, an unknown frame version, frame version 0, bytes after a record, a
    truncated record and a null value print as Kafka prints them (``Error at <offset>,
    skipping. <Kafka's message>``), each with a warning on stderr that names the type and
    version and holds the bytes. A version past the schema's is refused (Kafka's reader would
    read it as the fields' version ranges say): kfs says so on its line instead."""
    values = [
        _metadata_value(2, 0, TOPIC),  # a good TopicRecord
        _metadata_value(99, 0, b"\0"),  # no such type
        _metadata_value(2, 0, TOPIC, frame=0),
        _metadata_value(2, 0, TOPIC, frame=2),
        _metadata_value(2, 0, TOPIC + b"\xff\xfe"),  # garbage after the message
        _metadata_value(2, 0, TOPIC[:9]),  # truncated
        None,
        _metadata_value(2, 7, TOPIC),  # a version TopicRecord does not have
    ]
    part = tmp_path / METADATA
    part.mkdir()
    data = build_batch(0, values, [None] * len(values), 1_700_000_000_000, partition_leader_epoch=1)
    (part / "00000000000000000000.log").write_bytes(data)
    files = [part / "00000000000000000000.log"]
    kafka = kafka_dump_log(files, "--cluster-metadata-decoder")
    kfs = kfs_dump(files, "--cluster-metadata-decoder")
    assert kafka.returncode == kfs.returncode == 0
    expected, got = lines(kafka.stdout), lines(kfs.stdout)
    assert len(got) == len(expected)
    version_line = next(i for i, line in enumerate(expected) if line.startswith("| offset: 7 "))
    assert got[:version_line] + got[version_line + 1:] == expected[:version_line] + expected[version_line + 1:]
    assert "Error at 7, skipping. " not in expected[version_line]  # Kafka reads it, half-understood
    assert got[version_line].endswith(" payload: Error at 7, skipping. Failed to deserialize record "
                                      "with type 2")
    warnings = lines(kfs.stderr)
    for offset in range(1, 8):
        assert any(f": offset {offset}: warning: " in w for w in warnings), (offset, warnings)
    assert any("unknown metadata record type 99 (version 0" in w and
               _metadata_value(99, 0, b"\0").hex() in w for w in warnings), warnings
    assert any("TopicRecord (type 2) version 7: " in w for w in warnings), warnings
    json_run = kfs_dump(files, "--cluster-metadata-decoder", "--json")
    records = [json.loads(line) for line in lines(json_run.stdout) if line]
    assert [("warnings" in r) for r in records] == [False] + [True] * 7
    assert records[0]["value"]["data"] == json.loads(_payloads(kafka.stdout)[0])["data"]


@pytest.mark.needs_fixture("cluster-metadata/__cluster_metadata-0")
@pytest.mark.parametrize("options", [("--cluster-metadata-decoder",),
                                     ("--cluster-metadata-decoder", "--skip-record-metadata")],
                         ids=" ".join)
def test_another_brokers_metadata_log(options):
    """The metadata log of a 4.1.1 broker with tiered storage (tests/fixtures/cluster-metadata)."""
    assert_same(sorted((FIXTURES_ROOT / "cluster-metadata" / METADATA).glob("*.log")), *options)


def test_a_bad_snapshot_name(tmp_path):
    """A ``.checkpoint`` whose name is not a snapshot id: one clear error (Kafka's tool stops
    with a NoSuchElementException)."""
    bad = tmp_path / "snapshot.checkpoint"
    bad.write_bytes(b"")
    kfs = kfs_dump([bad], "--cluster-metadata-decoder")
    assert kfs.returncode == 1
    assert lines(kfs.stderr)[0].startswith(f"kfs dump: {bad}: not a KRaft snapshot's name")


def test_kraft_control_batches_are_not_decoded_as_records(tmp_path):
    """A control batch in the metadata log keeps its control text (no payload) with the
    decoder on, as Kafka's."""
    part = tmp_path / METADATA
    part.mkdir()
    leader_change = struct.pack(">hi", 0, 1) + uvarint(2) + struct.pack(">i", 1) + b"\0" \
        + uvarint(2) + struct.pack(">i", 1) + b"\0" + b"\0"
    data = build_batch(0, [leader_change], [struct.pack(">hh", 0, 2)], 1_700_000_000_000,
                       is_control=True, partition_leader_epoch=1)
    data += build_batch(1, [_metadata_value(2, 0, TOPIC)], [None], 1_700_000_000_001,
                        partition_leader_epoch=1)
    (part / "00000000000000000000.log").write_bytes(data)
    assert_same([part / "00000000000000000000.log"], "--cluster-metadata-decoder")


# -- the schemas against Kafka's own record types ---------------------------------------------


def _kafka_metadata_record_types() -> dict[int, tuple[str, str, int, int]]:
    """apiKey -> (constant, schema name, lowest, highest version) of Kafka 4.1.1's generated
    ``MetadataRecordType`` enum, read from its bytecode (``javap``): each constant is built
    with (constant name, ordinal, schema name, id, lowest version, highest version)."""
    jar = next(KAFKA_LIB.glob("kafka-metadata-*.jar"))
    out = subprocess.run(["javap", "-c", "-p", "-cp", str(jar),
                          "org.apache.kafka.common.metadata.MetadataRecordType"],
                         capture_output=True, text=True, check=True).stdout
    init = out.split("static {};", 1)[1]
    operands: list[str | int] = []
    types = {}
    for line in init.splitlines():
        if "// String " in line:
            operands.append(line.split("// String ", 1)[1].strip())
        elif m := re.search(r"\b(?:iconst_(\d)|[bs]ipush\s+(-?\d+))\s*$", line):
            operands.append(int(m.group(1) if m.group(1) is not None else m.group(2)))
        elif 'Method "<init>"' in line:
            constant, _, name, api_key, low, high = operands[-6:]
            types[api_key] = (constant, name, low, high)
            operands = []
    return types


def test_the_schemas_are_kafkas_record_types():
    """Every metadata record type of Kafka 4.1.1 has its schema here, with the same apiKey,
    name, versions and MetadataRecordType constant name; and nothing more."""
    missing = kafka_missing()
    if missing:
        unavailable(missing)
    kafka = _kafka_metadata_record_types()
    ours = {key: (record_type_name(m.name), m.name, m.valid_versions.low, m.valid_versions.high)
            for key, m in metadata_schemas().items()}
    assert len(kafka) >= 20
    assert ours == kafka
