"""The ``kfs`` PySpark data source: read and write kfs partitions as Spark's Kafka source
and sink do, with ``format("kfs")`` and the backing directory as ``path``::

    import kfs.spark
    kfs.spark.register(spark)
    df = spark.read.format("kfs").option("path", "/data/kfs").option("subscribe", "orders").load()

Needs ``pyspark`` and ``pyarrow`` (the ``spark`` extra); never imports FUSE.
"""

from __future__ import annotations

import contextlib

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def register(spark, filter_pushdown: bool | None = None) -> None:
    """Register the ``kfs`` format with ``spark`` (a SparkSession).

    ``filter_pushdown`` None follows the session's ``spark.sql.python.filterPushdown.enabled``
    now: when on, the batch reader takes filters on ``partition``/``offset``/``timestamp``
    (Spark refuses such a reader when the flag is off, so set the flag before registering).
    ``format("kfs")`` works without it (``pyspark_kfs``); this replaces that source for the
    session without Spark's warning that it did."""
    from .source import KfsDataSource, KfsPushdownDataSource

    if filter_pushdown is None:
        filter_pushdown = spark.conf.get(PUSHDOWN_CONF, "false").strip().lower() == "true"
    with _replacing_quietly(spark):
        spark.dataSource.register(KfsPushdownDataSource if filter_pushdown else KfsDataSource)


# Logs "The data source kfs replaced a statically registered data source." (WARN) when a session
# registers kfs where Spark's static lookup found pyspark_kfs: the intended case, said nowhere.
_MANAGER_LOGGER = "org.apache.spark.sql.execution.datasources.DataSourceManager"


@contextlib.contextmanager
def _replacing_quietly(spark):
    """Spark's data source manager logs errors only while the block runs (through the JVM's
    log4j; a Spark Connect session has no JVM here, and is left as it is)."""
    try:
        jvm = spark.sparkContext._jvm
        log4j = jvm.org.apache.logging.log4j
        context = log4j.LogManager.getContext(False)
        config = context.getConfiguration()
        own = config.getLoggerConfig(_MANAGER_LOGGER)
        before = own.getLevel() if own.getName() == _MANAGER_LOGGER else None
        log4j.core.config.Configurator.setLevel(_MANAGER_LOGGER, log4j.Level.ERROR)
    except Exception:  # noqa: BLE001 - no JVM or another logging backend: register as it is
        yield
        return
    try:
        yield
    finally:
        if before is not None:
            log4j.core.config.Configurator.setLevel(_MANAGER_LOGGER, before)
        else:  # (the logger follows the root's level again, e.g. a later setLogLevel)
            config.removeLogger(_MANAGER_LOGGER)
            context.updateLoggers()


__all__ = ["PUSHDOWN_CONF", "register"]
