"""kfs's log engine: Kafka topic partitions in Apache Kafka's own on-disk format.

The few names most users need; the modules are named after the Kafka classes they mirror.
They load on first use (PEP 562), so a tool that needs one module (``kfs verify``, ``kfs
dump``) does not start by importing the whole engine.
"""

import importlib

_EXPORTS = {
    "CompressionType": "storage.records",
    "Log": "storage.log",
    "LogConfig": "storage.config",
    "LogManager": "storage.log_manager",
    "Record": "storage.records",
    "TimestampType": "storage.records",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'storage' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
