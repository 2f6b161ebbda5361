"""Kafka 4.1.1's loader accepts what a disk fault left (issue 37 item 3, for a sample): a few
fault trials of ``tests/helpers/faults.py`` (each with its checks: nothing acknowledged lost,
nothing refused stored, the next open recovered, ``kfs verify`` clean), their partitions handed
to a real broker with ``kfs adopt``; it loads each after a clean shutdown with no recovery,
truncation or warning, and its consumer reads exactly what kfs serves."""

from __future__ import annotations

import dataclasses
import errno
import re
import shutil
import subprocess

import pytest

from helpers.faults import WORKLOADS, run_trial
from helpers.kafka import consume_all, records_of
from helpers.kfs import kfs_command, kfs_env
from helpers.paths import REPO
from storage import LogManager, disk_calls

_RECOVERY = dataclasses.replace(WORKLOADS["recovery"], config={})  # (Kafka's segment.bytes)


def _nth(calls: list[str], name: str, k: int = 1) -> int:
    """The number (from 1) of the ``k``th call named ``name``."""
    return [i for i, c in enumerate(calls, 1) if c == name][k - 1]


# topic: (workload, its plan from the counted calls)
SAMPLE = {
    "fault-fsync": (WORKLOADS["append lines, flush.messages=1"],  # an append's fsync fails
                    lambda calls: disk_calls.Faults(_nth(calls, "fsync", 3), errno.EIO)),
    "fault-full": (WORKLOADS["producer batches, idempotent, flush.messages=1"],
                   lambda calls: disk_calls.Faults(len(calls) // 3, errno.ENOSPC, persist=True)),
    "fault-marker": (WORKLOADS["producer batches, transactional"],  # the COMMIT marker's write
                     lambda calls: disk_calls.Faults(_nth(calls, "pwritev", 2), errno.EIO)),
    "fault-recovery": (_RECOVERY,  # the recovery's quarantine (its directory fsync)
                       lambda calls: disk_calls.Faults(_nth(calls, "dir_fsync", 1), errno.EIO)),
}


@pytest.mark.kafka
def test_kafka_loads_what_the_faults_left_and_serves_what_kfs_serves(tmp_path, kafka_broker):
    backing = tmp_path / "backing"
    backing.mkdir()
    for topic, (workload, plan_of) in SAMPLE.items():
        root = tmp_path / topic
        calls = run_trial(root, workload, None, topic=topic).calls
        plan = plan_of(calls)
        trial = run_trial(root, workload, plan, topic=topic)
        assert plan.failed and trial.refused and trial.problems == [], (topic, trial)
        shutil.move(root / f"{topic}-0", backing / f"{topic}-0")
        if workload.config:
            shutil.move(root / f"{topic}.topic.properties", backing)
    broker = kafka_broker()
    for topic, (workload, _) in SAMPLE.items():
        broker.create_topic(topic, 1, workload.config)
    broker.stop()
    adopted = subprocess.run(kfs_command("adopt", "--allow-open-transactions", str(backing),
                                         str(broker.log_dir)), cwd=REPO, env=kfs_env(),
                             stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert adopted.returncode == 0, adopted.stdout + adopted.stderr
    before = len(broker.server_log.read_text(errors="replace").splitlines())
    broker.start()
    mgr = LogManager(backing, read_only=True)
    try:
        for topic in SAMPLE:
            expected = records_of(mgr.get(f"{topic}-0"), "read_uncommitted")
            assert expected and consume_all(broker, topic, 0, "read_uncommitted") == expected
    finally:
        mgr.close()
    since = broker.server_log.read_text(errors="replace").splitlines()[before:]
    assert any("Skipping recovery of" in l and "clean shutdown file was found" in l
               for l in since)
    bad = re.compile(r"(?i)truncat|stray|corrupt|invalid|rebuilding index|recovering|"
                     r"inconsistent|error|warn")
    for topic in SAMPLE:
        name = re.compile(rf"(?<![\w.-]){topic}-0(?![\w.-])")
        lines = [l for l in since if name.search(l)]
        assert any("Completed load of Log(" in l for l in lines), (topic, lines)
        assert [l for l in lines if bad.search(l)] == [], topic
