"""Kafka's segments where they live beyond the local disk: a log directory in an object store
(``object_store``, ``remote_log``), read through the engine's one read seam
(``storage.segment_source``)."""

# LocalTieredStorage's directory under its storage root (Kafka's LocalTieredStorage); here,
# where nothing loads pyarrow, so that a command can tell a tiered root without it.
TIERED_ROOT = "kafka-tiered-storage"
