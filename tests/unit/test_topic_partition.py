"""Topic and partition directory names, by Kafka's rules (``Topic.validate``,
``LocalLog.parseTopicPartitionName``), each refusal with its own message."""

from __future__ import annotations

import pytest

from storage.errors import InvalidTopicError
from storage.topic_partition import MAX_NAME_LENGTH, parse_partition_dir_name, validate_topic


@pytest.mark.parametrize("topic", ["a", "orders", "my.topic_v2-x", "x" * MAX_NAME_LENGTH, "...",
                                   ".a", "__consumer_offsets"])
def test_legal_topic_names(topic):
    validate_topic(topic)


@pytest.mark.parametrize("topic, says", [
    ("", "Topic name is illegal, it can't be empty"),
    (".", 'Topic name cannot be "." or ".."'),
    ("..", 'Topic name cannot be "." or ".."'),
    ("x" * (MAX_NAME_LENGTH + 1), f"Topic name is illegal, it can't be longer than 249 "
                                  f"characters, topic name: {'x' * 250}"),
    ("a b", "Topic name \"a b\" is illegal, it contains a character other than ASCII "
            "alphanumerics, '.', '_' and '-'"),
    ("é", "Topic name \"é\" is illegal, it contains a character other than ASCII "
          "alphanumerics, '.', '_' and '-'"),
])
def test_illegal_topic_names_say_why(topic, says):
    with pytest.raises(InvalidTopicError) as e:
        validate_topic(topic)
    assert str(e.value) == says


@pytest.mark.parametrize("name, expected", [
    ("orders-0", ("orders", 0)),
    ("my-topic-12", ("my-topic", 12)),  # split at the last '-'
    ("t-2147483647", ("t", 2**31 - 1)),
    ("-x-3", ("-x", 3)),
])
def test_partition_directory_names(name, expected):
    assert parse_partition_dir_name(name) == expected


@pytest.mark.parametrize("name", ["orders", "orders-", "-0", "orders-01", "orders-+1",
                                  "orders-2147483648", "orders-x"])
def test_names_that_are_not_partition_directories(name):
    with pytest.raises(InvalidTopicError) as e:
        parse_partition_dir_name(name)
    assert str(e.value) == (f"{name!r} is not a partition directory name: expected "
                            f"<topic>-<partition>, e.g. orders-0")


@pytest.mark.parametrize("suffix", ["-delete", "-future", "-stray"])
def test_directories_being_deleted_moved_or_stray_are_not_live(suffix):
    name = "orders-0.0123456789abcdef0123456789abcdef" + suffix
    with pytest.raises(InvalidTopicError) as e:
        parse_partition_dir_name(name)
    assert str(e.value) == f"{name!r} is not a live partition directory"


def test_a_partition_directory_of_an_illegal_topic():
    with pytest.raises(InvalidTopicError, match="contains a character other than ASCII"):
        parse_partition_dir_name("a b-0")
