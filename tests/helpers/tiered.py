"""Kafka-written partitions laid out as a tiered topic is: some segments under a
LocalTieredStorage root (``kafka-tiered-storage/<topic>-<N>-<topic id>/<base>-<segment id>.<kind>``),
the others in a broker-like local log directory."""

from __future__ import annotations

import base64
import shutil
import uuid

from storage.log_files import LOG_SUFFIX, offset_from_file_name
from storage.remote.tiered import TIERED_ROOT

from .paths import KAFKA_WRITTEN

KINDS = (".log", ".index", ".timeindex", ".txnindex", ".snapshot")


def kafka_id() -> str:
    """A Kafka Uuid as it prints it: base64url of 16 bytes, no padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def bases_of(directory):
    return sorted(offset_from_file_name(p.name) for p in directory.glob("*" + LOG_SUFFIX))


def tier(tmp_path, name: str, remote_bases, local_bases):
    """``name``'s segments at ``remote_bases`` under a LocalTieredStorage root, those at
    ``local_bases`` in a broker-like local log directory; (the root, the local directory)."""
    src = KAFKA_WRITTEN / name
    root = tmp_path / "rsm"
    remote = root / TIERED_ROOT / f"{name}-{kafka_id()}"
    remote.mkdir(parents=True)
    for base in remote_bases:
        segment_id = kafka_id()
        for kind in KINDS:
            if (src / f"{base:020d}{kind}").exists():
                shutil.copy(src / f"{base:020d}{kind}", remote / f"{base:020d}-{segment_id}{kind}")
    local = tmp_path / "local" / name
    local.mkdir(parents=True)
    for base in local_bases:
        for kind in KINDS:
            if (src / f"{base:020d}{kind}").exists():
                shutil.copy(src / f"{base:020d}{kind}", local / f"{base:020d}{kind}")
    return root, local.parent


def write_remote_log_metadata(root, local_dir, name: str) -> None:
    """A ``__remote_log_metadata-0`` partition in the broker log directory ``local_dir`` that
    says every segment of ``name`` under the LocalTieredStorage ``root`` copied (``endOffset``
    the next segment's base - 1, as Kafka's RemoteLogManager writes it)."""
    from storage import LogManager
    from storage.records import build_batch

    from .remote_metadata import segment_record, update_record

    (directory,) = (root / TIERED_ROOT).iterdir()
    topic, partition = name.rsplit("-", 1)
    topic_id = _id_bytes(directory.name[-22:])
    bases = bases_of(KAFKA_WRITTEN / name)
    values = []
    for log in sorted(directory.glob("*.log")):
        base, segment = int(log.name[:20]), _id_bytes(log.name[21:43])
        end = bases[bases.index(base) + 1] - 1
        values += [segment_record(topic_id, segment, base, end, topic=topic,
                                  partition=int(partition), size=log.stat().st_size,
                                  txn_empty=not log.with_suffix(".txnindex").exists()),
                   update_record(topic_id, segment, topic=topic, partition=int(partition))]
    manager = LogManager(local_dir, partitions=lambda t, _: t == "__remote_log_metadata")
    try:
        manager.create("__remote_log_metadata-0").append_as_leader(build_batch(0, values, None))
    finally:
        manager.close()


def _id_bytes(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
