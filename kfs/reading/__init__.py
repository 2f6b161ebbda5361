"""Reading a topic as Spark's Kafka source does, without Spark: its options (``options``), the
offset ranges they resolve to through the indexes (``offsets``) and the records of a range as
Arrow batches in its schema (``columns``). Shared by the Spark source (``kfs.spark``), the Python
library (``kfs.read``) and ``kfs export``; nothing here imports pyspark."""
