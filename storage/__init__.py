"""kfs's log engine: Kafka topic partitions in Apache Kafka's own on-disk format.

The few names most users need; the modules are named after the Kafka classes they mirror.
"""

from storage.config import LogConfig
from storage.log import Log
from storage.log_manager import LogManager
from storage.records import CompressionType, Record, TimestampType

__all__ = ["CompressionType", "Log", "LogConfig", "LogManager", "Record", "TimestampType"]
