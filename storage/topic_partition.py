"""Topic and partition directory names (Kafka's ``Topic`` and ``LocalLog`` naming rules)."""

from __future__ import annotations

import re

from storage.errors import InvalidTopicError

MAX_NAME_LENGTH = 249
_LEGAL_CHARS = re.compile(r"[a-zA-Z0-9._-]+")
_PARTITION = re.compile(r"0|[1-9][0-9]{0,9}")
_SPECIAL_SUFFIXES = ("-delete", "-future", "-stray")
_INT32_MAX = 2**31 - 1


def validate_topic(topic: str) -> None:
    """Raise InvalidTopicError unless ``topic`` is a legal Kafka topic name
    (``Topic.validate``): 1..249 chars of ``[a-zA-Z0-9._-]``, not ``.`` or ``..``."""
    if not topic:
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if topic in (".", ".."):
        raise InvalidTopicError("Topic name cannot be \".\" or \"..\"")
    if len(topic) > MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {MAX_NAME_LENGTH} characters,"
            f" topic name: {topic}"
        )
    if not _LEGAL_CHARS.fullmatch(topic):
        raise InvalidTopicError(
            f"Topic name \"{topic}\" is illegal, it contains a character other than ASCII"
            " alphanumerics, '.', '_' and '-'"
        )


def has_collision(topic: str, other: str) -> bool:
    """Whether two topic names collide: equal once ``.`` is read as ``_`` (Kafka's
    ``Topic.hasCollision``: their metric names would be the same, so Kafka refuses to create
    the second)."""
    return topic.replace(".", "_") == other.replace(".", "_")


def parse_partition_dir_name(name: str) -> tuple[str, int]:
    """(topic, partition) of a live partition directory name ``<topic>-<N>``, split at the
    last ``-`` as ``LocalLog.parseTopicPartitionName`` does. The partition must be a canonical
    non-negative int32. Directories being deleted, moved or stray (``-delete``, ``-future``,
    ``-stray``) are not live partitions. Raises InvalidTopicError."""
    if name.endswith(_SPECIAL_SUFFIXES):
        raise InvalidTopicError(f"{name!r} is not a live partition directory")
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not _PARTITION.fullmatch(partition) or int(partition) > _INT32_MAX:
        raise InvalidTopicError(
            f"{name!r} is not a partition directory name: expected <topic>-<partition>,"
            " e.g. orders-0"
        )
    validate_topic(topic)
    return topic, int(partition)
