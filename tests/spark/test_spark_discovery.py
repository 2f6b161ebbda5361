"""``format("kfs")`` with no ``kfs.spark.register`` call: Spark's static discovery of Python data
sources finds the top-level ``pyspark_kfs`` package. The session runs in a child process that
never imports kfs itself: Spark looks static sources up once per JVM, and the shared ``spark``
fixture registers kfs, so only a fresh JVM shows discovery alone at work."""

import json
import subprocess
import sys

import pytest

from helpers.kfs import kfs_env
from storage import LogManager
from storage.records import build_batch

T0 = 1_700_000_000_000  # epoch ms

# Prints one JSON line of what it saw. Filter pushdown is on in the session: the static source
# has no pushFilters, so Spark keeps applying the filter itself (it shows in the optimized
# plan); register() then swaps in the pushdown source for this session.
CHILD = r"""
import contextlib, io, json, sys
from pyspark.sql import SparkSession

backing = sys.argv[1]
spark = (SparkSession.builder.master("local[2]").appName("kfs-discovery")
         .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.python.filterPushdown.enabled", "true").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")

def load(topic):
    return spark.read.format("kfs").option("path", backing).option("subscribe", topic).load()

def spark_filters_offset(df):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        df.explain(mode="extended")
    optimized = text.getvalue().split("== Optimized Logical Plan ==")[1].split("==")[0]
    return ">= 5)" in optimized

out = {"read": sorted((r.offset, r.value.decode()) for r in load("orders").collect())}
(load("orders").select("value").write.format("kfs").option("path", backing)
 .option("topic", "copy").mode("append").save())
out["copied"] = sorted(r.value.decode() for r in load("copy").collect())
filtered = load("orders").where("offset >= 5")
out["filtered"] = sorted(r.offset for r in filtered.collect())
out["static_spark_filters"] = spark_filters_offset(filtered)
out["driver_imported_kfs"] = sorted(m for m in sys.modules if m.split(".")[0] in
                                    ("kfs", "storage", "pyspark_kfs"))

import kfs.spark
kfs.spark.register(spark)
filtered = load("orders").where("offset >= 5")
out["registered_filtered"] = sorted(r.offset for r in filtered.collect())
out["registered_spark_filters"] = spark_filters_offset(filtered)
spark.stop()
print(json.dumps(out))
"""


@pytest.mark.needs_modules("pyspark")
def test_format_kfs_without_register(tmp_path):
    backing = tmp_path / "backing"
    mgr = LogManager(backing)
    mgr.create("orders-0").append_as_leader(
        build_batch(0, [b"v%d" % i for i in range(10)], None, [T0 + i for i in range(10)]))
    mgr.close()
    env = kfs_env()  # the checkout on the workers' sys.path, as an installed kfs would be
    env["PYSPARK_PYTHON"] = sys.executable
    proc = subprocess.run([sys.executable, "-c", CHILD, str(backing)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    values = [f"v{i}" for i in range(10)]
    assert out["read"] == [[i, v] for i, v in enumerate(values)]
    assert out["copied"] == values
    assert out["filtered"] == out["registered_filtered"] == list(range(5, 10))
    assert out["driver_imported_kfs"] == []  # "kfs" came from discovery alone
    assert out["static_spark_filters"] and not out["registered_spark_filters"]


# A session at Spark's default log level (WARN), as a user's: register() replaces the source
# Spark's static lookup found, which Spark logs as a WARN unless register() keeps it quiet; the
# manager's logger then follows the session's level again.
QUIET_CHILD = r"""
import json, sys
from pyspark.sql import SparkSession

spark = (SparkSession.builder.master("local[1]").appName("kfs-register")
         .config("spark.ui.enabled", "false").getOrCreate())
import kfs.spark
kfs.spark.register(spark)
rows = spark.read.format("kfs").option("path", sys.argv[1]).option("subscribe", "orders").load()
read = sorted(r.value.decode() for r in rows.collect())
log4j = spark.sparkContext._jvm.org.apache.logging.log4j
name = "org.apache.spark.sql.execution.datasources.DataSourceManager"
own = log4j.LogManager.getContext(False).getConfiguration().getLoggerConfig(name).getName()
spark.stop()
print(json.dumps({"read": read, "own_logger_config": own == name}))
"""


@pytest.mark.needs_modules("pyspark")
def test_register_does_not_warn_that_it_replaced_the_static_source(tmp_path):
    """Issue 25, item 13: kfs.spark.register(spark) logged 'WARN DataSourceManager: The data
    source kfs replaced a statically registered data source.' in every session."""
    backing = tmp_path / "backing"
    mgr = LogManager(backing)
    mgr.create("orders-0").append_as_leader(build_batch(0, [b"a", b"b"], None, [T0, T0 + 1]))
    mgr.close()
    env = kfs_env()
    env["PYSPARK_PYTHON"] = sys.executable
    proc = subprocess.run([sys.executable, "-c", QUIET_CHILD, str(backing)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"read": ["a", "b"],
                                                                "own_logger_config": False}
    assert "statically registered" not in proc.stderr, proc.stderr[-4000:]
