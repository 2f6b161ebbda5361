"""The one door to a log directory (``storage.directory.open_log_directory``): every layout
(a local directory, a copy by URI, LocalTieredStorage's root, a broker's directory with its
remote tier) opened by where it is, each giving the same records as the same segments on
disk; what may not be written refused before anything is read; a remote tier that is not
there said at open; and the front ends open logs through it alone."""

import re
import shutil
from pathlib import Path

import pytest

from helpers.paths import KAFKA_WRITTEN, REPO
from helpers.tiered import bases_of, tier, write_remote_log_metadata
from storage.directory import (
    ReadOnlyStoreError,
    StoreOptions,
    check_writable,
    open_log_directory,
    read_file,
    remote_history,
)
from storage.location import Location
from storage.log_manager import LogManager
from storage.protocols import LogDirectory, PartitionLog
from storage.remote.object_store import ObjectStoreError
from storage.remote.remote_log import RemoteLogDirectory
from storage.remote.tiered import TieredLogDirectory, UnifiedLogDirectory

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def values(log):
    return [(r.offset, r.key, r.value) for batch in log.reader.record_lists(0) for r in batch]


def read_all(directory, name):
    try:
        return values(directory.get(name))
    finally:
        directory.close()


@needs_fixtures
def test_each_layout_is_chosen_by_where_it_is_and_reads_as_on_disk(tmp_path):
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, local = tier(tmp_path, "plain-0", bases[:2], bases[2:])
    on_disk = read_all(LogManager(KAFKA_WRITTEN, read_only=True), "plain-0")
    layouts = [
        (KAFKA_WRITTEN, None, LogManager),
        (KAFKA_WRITTEN.as_uri(), None, RemoteLogDirectory),
        (root.as_uri(), None, TieredLogDirectory),
        (local, root.as_uri(), UnifiedLogDirectory),
        (local, root, UnifiedLogDirectory),  # (a remote tier on a local disk, by its path)
    ]
    for location, remote, kind in layouts:
        directory = open_log_directory(location, remote=remote)
        assert isinstance(directory, kind), (location, remote)
        assert isinstance(directory, LogDirectory)
        assert isinstance(directory.get("plain-0"), PartitionLog)
        got = read_all(directory, "plain-0")
        if kind is TieredLogDirectory:  # (the remote tier alone: its two segments)
            assert got == on_disk[:len(got)] and 0 < len(got) < len(on_disk)
        else:
            assert got == on_disk, (location, remote)


@needs_fixtures
def test_partitions_keeps_only_those_it_accepts():
    for location in (KAFKA_WRITTEN, KAFKA_WRITTEN.as_uri()):
        directory = open_log_directory(location, partitions=lambda t, p: t == "plain")
        try:
            assert directory.partition_names() == ["plain-0"]
        finally:
            directory.close()


def test_an_object_store_or_remote_tier_is_never_opened_for_writing(tmp_path):
    for location, remote in (("s3://bucket/logs", None), (tmp_path.as_uri(), None),
                             (tmp_path, "s3://bucket/rsm")):
        with pytest.raises(ReadOnlyStoreError, match="read-only"):
            open_log_directory(location, read_only=False, remote=remote)
    assert list(tmp_path.iterdir()) == []  # (nothing made, no lock taken)
    with pytest.raises(ReadOnlyStoreError, match=r"s3://\*\*\*@bucket/x: an object store"):
        check_writable("s3://KEY:SECRET@bucket/x")
    assert check_writable(tmp_path).path == tmp_path


def test_a_remote_tier_that_is_not_there_is_said_when_opened(tmp_path):
    (tmp_path / "t-0").mkdir()
    with pytest.raises(ObjectStoreError, match="no such bucket or directory"):
        open_log_directory(tmp_path, remote=(tmp_path / "nosuch").as_uri())


def test_options_are_parsed_once_with_spark_s_names():
    opts = StoreOptions.from_options({"Endpoint": "http://127.0.0.1:9", "region": "",
                                      "path": "x"})
    assert opts == StoreOptions(endpoint="http://127.0.0.1:9", region=None)


def test_a_location_is_told_apart_once_and_said_without_secrets():
    uri = Location.parse("s3://KEY:SECRET@bucket/t-0/00000000000000000000.log?scheme=http")
    assert uri.is_remote and "SECRET" not in uri.display and "SECRET" not in str(uri)
    assert uri.name == "00000000000000000000.log"
    assert uri.parent_name == "t-0"
    assert uri.sibling("00000000000000000000.index").text == \
        "s3://KEY:SECRET@bucket/t-0/00000000000000000000.index?scheme=http"
    local = Location.parse("data/t-0/00000000000000000000.log")
    assert not local.is_remote and local.display == "data/t-0/00000000000000000000.log"
    assert local.parent_name == "t-0" and local.path == Path("data/t-0/00000000000000000000.log")
    with pytest.raises(ValueError, match="not a local path"):
        uri.path


@needs_fixtures
def test_a_file_reads_the_same_by_path_and_by_uri():
    index = KAFKA_WRITTEN / "plain-0" / "00000000000000000000.index"
    assert read_file(index.as_uri()) == read_file(index) == index.read_bytes()


# -- the front ends open logs through the door alone -------------------------------------------

# What assembles storage: only storage.directory may call these in kfs/ (a front end that
# did would miss layouts and options the others have); docstrings that name them (in ``) aside.
_ASSEMBLY = re.compile(r"(?<![`.\w])(is_uri\(|LogManager\(|ObjectStore\.(from_uri|shared)\(|"
                       r"RemoteLogDirectory\(|TieredLogDirectory\(|UnifiedLogDirectory\(|"
                       r"open_object_store_directory\(|object_at\()")
# Every front end that opens a log directory, and how many times.
FRONT_ENDS = {
    "kfs/mount/daemon.py": 1,
    "kfs/reading/offsets.py": 2,
    "kfs/spark/writer.py": 3,
    "kfs/tools/adopt.py": 1,
    "kfs/tools/compact.py": 1,
    "kfs/tools/retention.py": 1,
    "kfs/tools/transactions.py": 2,
    "kfs/tools/verify.py": 2,
}


def test_every_front_end_opens_logs_through_the_door():
    sources = {str(p.relative_to(REPO)): p.read_text() for p in (REPO / "kfs").rglob("*.py")}
    assembling = {name: _ASSEMBLY.findall(text) for name, text in sources.items()}
    assert {name: found for name, found in assembling.items() if found} == {}
    calls = {name: len(re.findall(r"\bopen_log_directory\(", text))
             for name, text in sources.items()}
    assert {name: n for name, n in calls.items() if n} == FRONT_ENDS


def test_the_door_is_the_one_place_that_tells_a_uri_from_a_path():
    storage = {str(p.relative_to(REPO)) for p in (REPO / "storage").rglob("*.py")
               if re.search(r"\bis_uri\(", p.read_text())}
    assert storage <= {"storage/location.py", "storage/remote/uri.py"}


@needs_fixtures
def test_a_copied_directory_is_read_through_a_store_of_the_process(tmp_path):
    shutil.copytree(KAFKA_WRITTEN / "plain-0", tmp_path / "plain-0")
    first = open_log_directory(tmp_path.as_uri())
    second = open_log_directory(tmp_path.as_uri())
    try:
        assert first.store is second.store  # (connections and index objects kept)
    finally:
        first.close()
        second.close()


@needs_fixtures
def test_an_object_store_directory_is_held_to_the_local_rules(tmp_path):
    """What a local read-only directory says and hides, a URI's says and hides too: a prefix
    that is no log directory warns (the mount prints it), and KRaft's metadata log is not
    served as a partition."""
    (tmp_path / "docs" / "notes").mkdir(parents=True)
    (tmp_path / "docs" / "readme.txt").write_text("not Kafka's\n")
    logs = tmp_path / "logs"
    shutil.copytree(KAFKA_WRITTEN / "plain-0", logs / "plain-0")
    shutil.copytree(KAFKA_WRITTEN / "plain-0", logs / "__cluster_metadata-0")
    for location in (tmp_path / "docs", (tmp_path / "docs").as_uri()):
        directory = open_log_directory(location)
        try:
            assert directory.partition_names() == []
            (notice,) = directory.notices
            assert "not a Kafka log directory" in notice and "docs" in notice
        finally:
            directory.close()
    for location in (logs, logs.as_uri()):
        directory = open_log_directory(location)
        try:
            assert directory.partition_names() == ["plain-0"] and directory.notices == []
        finally:
            directory.close()


@needs_fixtures
def test_a_tiered_topic_read_without_its_remote_tier_says_where_its_history_is(tmp_path):
    bases = bases_of(KAFKA_WRITTEN / "plain-0")
    root, local = tier(tmp_path, "plain-0", bases[:2], bases[2:])
    write_remote_log_metadata(root, local, "plain-0")
    assert remote_history(local) == {"plain-0": (bases[0], bases[2] - 1)}
    assert remote_history(KAFKA_WRITTEN) == {} and remote_history(local.as_uri()) == {}
    directory = open_log_directory(local)
    try:
        (notice,) = directory.notices
        assert "plain-0" in notice and "remote.path" in notice and "--remote-path" in notice
    finally:
        directory.close()
    directory = open_log_directory(local, remote=root)
    try:
        assert directory.notices == []
    finally:
        directory.close()
