"""Spark's standalone cluster (a master and two one-core workers, ``spark_cluster``) over Kafka's
tiered storage as Aiven's RemoteStorageManager wrote it (run C of ``tests/fixtures/aiven-tiered``:
AES-GCM chunks, a key ring): every task opens its partition's remote tier itself, configured by
option ``remote.config``. (A module of its own: the ``spark`` and ``spark_cluster`` fixtures
cannot share one.)"""

import pytest

from helpers.aiven import TOPICS, expected
from helpers.aiven import spark_row_as_expected as as_expected
from helpers.paths import AIVEN_TIERED

needs_fixtures = pytest.mark.needs_fixture("aiven-tiered")


@needs_fixtures
def test_the_standalone_cluster_reads_the_encrypted_tier_on_both_workers(spark_cluster):
    """Run C on a standalone master and two one-core workers: each task opens its partition's
    remote tier itself, configured by the broker's properties (the file and the key ring at
    the same path on every node)."""
    run = AIVEN_TIERED / "C"
    df = (spark_cluster.session.read.format("kfs")
          .option("path", str(run / "logdir"))
          .option("remote.config", str(run / "broker.properties"))
          .option("subscribe", ",".join(TOPICS)).option("includeHeaders", "true")
          .option("isolation.level", "read_committed")
          .option("maxRecordsPerPartition", "400").load())
    assert df.rdd.getNumPartitions() >= 4
    rows, tasks = spark_cluster.tasks_by_executor(df.collect)
    for topic in TOPICS:
        got = sorted((as_expected(r) for r in rows if r.topic == topic),
                     key=lambda r: (r["partition"], r["offset"]))
        assert got == expected("C", topic, "read_committed"), topic
    assert len(tasks) == 2 and all(n > 0 for n in tasks.values()), tasks
