"""The cleaner's key -> offset map (Kafka's ``SkimpyOffsetMap``), bounded by
``log.cleaner.dedupe.buffer.size``.

Each slot is 24 bytes: the MD5 of a key and the latest offset seen for it; a pass fills the map up
to ``log.cleaner.io.buffer.load.factor`` of its slots and ends early when the dirty section has
more keys (the next pass goes on from there). The map and its MD5 are compiled
(``storage.records._c.compaction``, with the record loops of the cleaner that use the map:
``map_run``, ``map_section``, ``RecordFilter``): one hash per record is the cleaner's hot loop.
"""

from storage.records._c.compaction import RecordFilter, SkimpyOffsetMap, map_run, map_section, md5_digest

__all__ = ["SkimpyOffsetMap", "RecordFilter", "map_run", "map_section", "md5_digest",
           "BYTES_PER_ENTRY"]

BYTES_PER_ENTRY = 24  # MD5 (16) + offset (8)
