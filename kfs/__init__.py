"""kfs: Kafka topic partitions, stored in Apache Kafka's own on-disk format, served as files.

As a Python library, :func:`kfs.read` gives a topic's records as a ``pyarrow.RecordBatchReader``
(for DuckDB, pandas, Polars, ``pyarrow.dataset``) and :func:`kfs.read_table` as a table; see
``kfs.library``. ``kfs.mount`` is the pyfuse3 file system and its serving process, ``kfs.tools``
the offline tools (dump, verify, compact, export, ...), ``kfs.spark`` the PySpark data source,
``kfs.cli`` the command.
"""

__version__ = "0.1.0"

# the library's names, loaded on first use: the mount and the tools start without pyarrow
_LIBRARY = ("read", "read_table", "SCHEMA", "COLUMNS", "DataLossError",
            "UnknownTopicOrPartitionError")


def __getattr__(name):
    if name in _LIBRARY:
        from . import library

        return getattr(library, name)
    raise AttributeError(f"module 'kfs' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LIBRARY))
