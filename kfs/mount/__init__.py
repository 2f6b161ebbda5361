"""The mount: a pyfuse3 file system over a backing directory (``operations.KafkaFs``), its
inode numbering and path names (``inodes``), attributes (``attrs``), streams, append framing,
damage notes, coordinator views, background jobs (``scheduler``) and the serving process
(``daemon``, started by ``command``'s ``kfs mount``)."""
