"""Kafka's coordinator topics, ``__consumer_offsets`` and ``__transaction_state``: their
records decoded through Kafka's message schemas (kept as data in ``messages/``), and the state
they add up to.

* :mod:`storage.coordinator.schema`: the message-schema format and a reader for it;
* :mod:`storage.coordinator.records`: which schema a record of each topic uses;
* :mod:`storage.coordinator.dumplog`: what kafka-dump-log prints for such records;
* :mod:`storage.coordinator.cluster_metadata`: KRaft's metadata log, ``__cluster_metadata``,
  decoded through Kafka's metadata record schemas;
* :mod:`storage.coordinator.groups` / :mod:`storage.coordinator.transactions`: the groups and
  transactional ids a partition of each topic holds, kept up to date record by record.
"""

from storage.coordinator.groups import CommittedOffset, GroupStates
from storage.coordinator.records import CoordinatorRecord, CoordinatorTopic, for_topic
from storage.coordinator.transactions import TransactionMetadata, TransactionStates

__all__ = ["CommittedOffset", "CoordinatorRecord", "CoordinatorTopic", "GroupStates",
           "TransactionMetadata", "TransactionStates", "for_topic"]
