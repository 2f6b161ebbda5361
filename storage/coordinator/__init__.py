"""Kafka's coordinator topics, ``__consumer_offsets`` and ``__transaction_state``: their
records decoded through Kafka's message schemas (kept as data in ``messages/``), and the state
they add up to.

* :mod:`storage.coordinator.schema`: the message-schema format and a reader for it;
* :mod:`storage.coordinator.records`: which schema a record of each topic uses;
"""
