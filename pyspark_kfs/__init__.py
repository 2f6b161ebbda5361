"""Makes ``format("kfs")`` work in any PySpark (4.x) session with kfs installed, no
``kfs.spark.register`` call needed.

Spark finds Python data sources statically: once per JVM, on the first data source lookup, a
Python worker imports every top-level module named ``pyspark_*`` on its ``sys.path``
(``pkgutil.iter_modules``) and registers each ``DefaultSource`` (a ``DataSource`` subclass)
under its ``name()``. This package exists only to be found that way.

``DefaultSource`` is the source without filter pushdown: Spark refuses a reader with
``pushFilters`` unless ``spark.sql.python.filterPushdown.enabled`` is on, and a static source
cannot see the session's conf. ``kfs.spark.register(spark)`` still works, and takes precedence
over this one for its session (with pushdown when the session enables it).
"""

from kfs.spark.source import KfsDataSource as DefaultSource

__all__ = ["DefaultSource"]
