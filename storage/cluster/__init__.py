"""A live Kafka cluster as a place for a topic's records: what the cluster says of its
partitions (leaders, log start offsets, high watermarks, last stable offsets) and which remote
segments are live (``__remote_log_metadata``, read as a consumer), and the records after the
remote tier, fetched through the brokers. Every protocol call goes through librdkafka
(``confluent-kafka``): kfs speaks no Kafka protocol of its own."""
