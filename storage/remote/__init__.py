"""Kafka's segments where they live beyond the local disk: a log directory in an object store
(``object_store``, ``remote_log``), read through the engine's one read seam
(``storage.segment_source``)."""
