"""The ``kfs`` PySpark data source: read and write kfs partitions as Spark's Kafka source
and sink do, with ``format("kfs")`` and the backing directory as ``path``::

    import kfs.spark
    kfs.spark.register(spark)
    df = spark.read.format("kfs").option("path", "/data/kfs").option("subscribe", "orders").load()

Needs ``pyspark`` and ``pyarrow`` (the ``spark`` extra); never imports FUSE.
"""

from __future__ import annotations

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark, filter_pushdown: bool | None = None) -> None:
    """Register the ``kfs`` format with ``spark`` (a SparkSession).

    ``filter_pushdown`` None follows the session's ``spark.sql.python.filterPushdown.enabled``
    now: when on, the batch reader takes filters on ``partition``/``offset``/``timestamp``
    (Spark refuses such a reader when the flag is off, so set the flag before registering)."""
    from .source import KfsDataSource, KfsPushdownDataSource

    if filter_pushdown is None:
        filter_pushdown = spark.conf.get(PUSHDOWN_CONF, "false").strip().lower() == "true"
    spark.dataSource.register(KfsPushdownDataSource if filter_pushdown else KfsDataSource)


__all__ = ["PUSHDOWN_CONF", "register"]
