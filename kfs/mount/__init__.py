"""The mount: a pyfuse3 file system over a log directory (``operations.KafkaFs``, a thin
dispatcher), each concept in its own module: the partitions and following another writer
(``partitions``), record files (``record_files``), listings (``listings``), append files
(``append_files``, framing in ``append``), streams, node attributes and timeouts
(``node_attributes``), extended attributes (``attrs``), the errno map (``errors``), inode
numbering and path names (``inodes``), damage notes, coordinator views, background jobs
(``scheduler``) and the serving process (``daemon``, started by ``command``'s ``kfs mount``)."""
