"""kfs: Kafka topic partitions, stored in Apache Kafka's own on-disk format, served as files.

``kfs.mount`` is the pyfuse3 file system and its serving process, ``kfs.tools`` the offline
tools (dump, verify, compact, ...), ``kfs.spark`` the PySpark data source, ``kfs.cli`` the command.
"""

__version__ = "0.1.0"
