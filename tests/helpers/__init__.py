"""What the tests share besides fixtures (those are in tests/conftest.py, with the hooks and
markers). Test modules import from here, never from one another:

* ``paths``: the checkout and the fixture sets (``REPO``, ``TESTS``, ``KAFKA_WRITTEN``, ...);
* ``needs``: what a test needs beyond the checkout (``require_modules``, ``require_fuse``,
  ``unavailable``: a skip, or a failure under CI=true);
* ``kfs``: the ``kfs`` command as the tests run it (``kfs_command``, ``kfs_env``, ``kfs_verify``);
* ``shell``: ``sh``, the one way the tests run a shell command;
* ``waits``: waits on conditions and on a child's output lines, each bounded by a deadline;
* ``mounts``: mounts through the real CLI (``Mounter``, ``Mount``) and the mount table;
* ``kafka``: a real KRaft broker and Kafka's own tools (also the benchmarks' peer);
* ``remote_metadata``: ``__remote_log_metadata`` record values built byte by byte (Kafka's serde);
* ``s3``: a real S3 API server (S3Proxy's filesystem backend) and pyarrow.fs clients of it;
* ``spark_cluster``: a Spark standalone cluster on loopback and a session submitted to it;
* ``records``: hypothesis strategies of batch columns and kafka-python as the oracle;
* ``kafka_written``: the records and index entries of the Kafka-written fixtures;
* ``damage``: copies of Kafka-written partitions, and the damage the tests do to them;
* ``compaction``: where the cleaner of a backing directory has got to;
* ``log_writer``, ``append_writer``: the writers the crash tests kill (run as child processes).

This directory is on ``sys.path`` as ``tests/`` is (conftest.py lives there); a child process
that imports from here needs ``TESTS`` on its ``PYTHONPATH`` (``kfs.kfs_env(tests=True)``).
"""
