"""The compiled twins of the record codec, each behind the one Python module that owns its
concept (aiokafka's ``record/_crecords`` layout): ``records`` (decode and encode v2 records,
seal batches) behind ``storage.records.batch``, ``columns`` (records into Arrow columns, and
their text) behind ``storage.records.columns``, ``scan`` (segment scans) behind
``storage.segment`` (and its read ahead of a scan's next block behind
``storage.segment_source``), ``compaction`` (the cleaner's offset map and record loops) behind
``storage.offset_map``. ``frame.pxd`` names the batch header's fields once and frames batches
for every walker; ``varint.pxd`` and ``buffers`` are shared pieces. Nothing else imports them.
"""
