"""Where a log directory or a segment is (storage.location.Location): a local path or an object
store's URI told apart once, named in messages without credentials, and its name, parent and
siblings taken without losing a URI's query string."""

import os
from pathlib import Path

import pytest

from storage.location import Location

SECRET_URI = "s3://AKIAKEY:s3cr3t@bucket/data/orders-0/00000000000000000000.log?scheme=http"


def test_a_uri_is_remote_and_a_path_is_local_whatever_it_is_given_as():
    assert Location.parse("s3://bucket/data") == Location("s3://bucket/data", True)
    assert Location.parse("data/orders-0") == Location("data/orders-0", False)
    assert Location.parse(Path("/var/kfs")) == Location("/var/kfs", False)
    given = Location("gs://b/p", True)
    assert Location.parse(given) is given  # (not parsed again)
    assert Location.parse("file:///tmp/x").is_remote  # a file:// URI goes through the store


def test_only_a_local_location_has_a_path():
    assert Location.parse("data/orders-0").path == Path("data/orders-0")
    with pytest.raises(ValueError, match=r"^s3://\*\*\*@bucket/data/orders-0/"
                                         r"00000000000000000000\.log\?… is an object store's URI, "
                                         r"not a local path$"):
        Location.parse(SECRET_URI).path


def test_messages_never_show_a_uri_s_credentials_or_query():
    remote = Location.parse(SECRET_URI)
    assert remote.display == str(remote) == (
        "s3://***@bucket/data/orders-0/00000000000000000000.log?…")
    assert "s3cr3t" not in repr(remote.display) and "AKIAKEY" not in str(remote)
    assert remote.text == SECRET_URI  # kept whole for the store itself
    assert str(Location.parse("a/b?c")) == "a/b?c"  # a path is shown as given, "?" and all


def test_name_and_parent_name_leave_out_the_query_and_trailing_slashes():
    remote = Location.parse(SECRET_URI)
    assert (remote.name, remote.parent_name) == ("00000000000000000000.log", "orders-0")
    directory = Location.parse("s3://bucket/data/orders-0/?endpoint_override=h:9000")
    assert (directory.name, directory.parent_name) == ("orders-0", "data")
    local = Location.parse("orders-0/00000000000000000000.log")
    assert local.name == "00000000000000000000.log" and local.parent_name == "orders-0"
    here = Location.parse("orders-0/")  # a relative local path: its parent made absolute first
    assert here.name == "orders-0"
    assert here.parent_name == os.path.basename(os.getcwd())
    assert Location.parse("a?b/c").name == "c"  # a local "?" is part of the name


def test_a_sibling_keeps_the_directory_and_a_uri_s_query():
    remote = Location.parse(SECRET_URI)
    assert remote.sibling("00000000000000000000.index") == Location(
        "s3://AKIAKEY:s3cr3t@bucket/data/orders-0/00000000000000000000.index?scheme=http", True)
    plain = Location.parse("s3://bucket/orders-0/00000000000000000000.log")
    assert plain.sibling("x.timeindex").text == "s3://bucket/orders-0/x.timeindex"  # no "?"
    local = Location.parse("data/orders-0/00000000000000000000.log")
    assert local.sibling("leader-epoch-checkpoint") == Location(
        "data/orders-0/leader-epoch-checkpoint", False)


def test_a_directory_s_sibling_is_beside_it_and_a_local_question_mark_is_no_query():
    directory = Location.parse("s3://bucket/data/orders-0/?scheme=http")
    assert directory.sibling("orders-1").text == "s3://bucket/data/orders-1?scheme=http"
    assert Location.parse("odd?dir/a.log").sibling("b.log") == Location("odd?dir/b.log", False)
