"""kfs: Kafka topic partitions, stored in Apache Kafka's own on-disk format, served as files.

``kfs.fs`` is the pyfuse3 file system, ``kfs.cli`` the ``kfs`` command, ``kfs.inodes`` and
``kfs.append`` the pure pieces (inode numbering, line/key framing) they share.
"""

__version__ = "0.1.0"
