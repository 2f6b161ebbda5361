"""Kafka's file names in a log directory (storage.log_files), modelled on Kafka's
LogFileUtilsTest and the name checks of LogLoaderTest: 20-digit offsets, each kind's suffix,
the extra suffixes of a delete, a clean and a swap, and what counts as a partition's file."""

from pathlib import Path

import pytest

from storage.log_files import (
    SegmentFileName, filename_prefix, is_partition_file, log_file, offset_file,
    offset_from_file_name, offset_index_file, parse_segment_file_name, producer_snapshot_file,
    time_index_file, transaction_index_file)

D = Path("/data/t-0")


def test_filename_prefix_is_the_offset_in_20_digits():
    """LogFileUtils.filenamePrefixFromOffset: zero-padded to 20 digits (Long.MAX_VALUE has 19)."""
    assert filename_prefix(0) == "00000000000000000000"
    assert filename_prefix(123) == "00000000000000000123"
    assert filename_prefix(2**63 - 1) == "09223372036854775807"


def test_each_kind_of_file_is_named_from_its_offset():
    """logFile, offsetIndexFile, timeIndexFile, transactionIndexFile, producerSnapshotFile,
    with an extra suffix where Kafka takes one."""
    assert log_file(D, 5) == D / "00000000000000000005.log"
    assert log_file(str(D), 5, ".deleted") == D / "00000000000000000005.log.deleted"
    assert offset_index_file(D, 5) == D / "00000000000000000005.index"
    assert offset_index_file(D, 5, ".swap") == D / "00000000000000000005.index.swap"
    assert time_index_file(D, 5) == D / "00000000000000000005.timeindex"
    assert time_index_file(D, 5, ".cleaned") == D / "00000000000000000005.timeindex.cleaned"
    assert transaction_index_file(D, 5) == D / "00000000000000000005.txnindex"
    assert transaction_index_file(D, 5, ".swap") == D / "00000000000000000005.txnindex.swap"
    assert producer_snapshot_file(D, 5) == D / "00000000000000000005.snapshot"
    assert offset_file(D, 7, ".log.cleaned") == D / "00000000000000000007.log.cleaned"


def test_offset_from_file_name_reads_the_digits_before_the_first_dot():
    """LogFileUtils.offsetFromFileName; a name without leading ASCII digits is refused (a
    Unicode digit such as Arabic-Indic is a digit to isdigit, not an offset)."""
    assert offset_from_file_name("00000000000000000042.log") == 42
    assert offset_from_file_name("00000000000000000042.log.swap") == 42
    assert offset_from_file_name("00000000000000000042.snapshot") == 42
    for name in ("leader-epoch-checkpoint", ".log", "4x2.log", "\u0664\u0662.log"):
        with pytest.raises(ValueError, match="no offset at the start of file name"):
            offset_from_file_name(name)


def test_parse_segment_file_name():
    """A segment's file with its kind and extra suffix; anything else is no segment file."""
    assert parse_segment_file_name("00000000000000000042.log") == SegmentFileName(42, ".log", "")
    assert parse_segment_file_name("00000000000000000042.timeindex.deleted") == \
        SegmentFileName(42, ".timeindex", ".deleted")
    assert parse_segment_file_name("00000000000000000042.txnindex.cleaned") == \
        SegmentFileName(42, ".txnindex", ".cleaned")
    assert parse_segment_file_name("00000000000000000042.index.swap") == \
        SegmentFileName(42, ".index", ".swap")
    for name in ("42.log", "00000000000000000042.snapshot", "00000000000000000042.log.tmp",
                 "000000000000000000042.log", "00000000000000000042.logx"):
        assert parse_segment_file_name(name) is None


def test_is_partition_file():
    """What a broker or kfs writes in a partition directory: segment files with any extra
    suffix, producer snapshots (also being deleted), partition.metadata, the leader epoch
    checkpoint and their .tmp copies; nothing else."""
    for name in ("00000000000000000000.log", "00000000000000000000.index.swap",
                 "00000000000000000000.snapshot", "00000000000000000000.snapshot.deleted",
                 "partition.metadata", "partition.metadata.tmp", "leader-epoch-checkpoint",
                 "leader-epoch-checkpoint.tmp"):
        assert is_partition_file(name) is True, name
    for name in ("notes.txt", "00000000000000000000.snapshot.swap", "partition.metadata.bak",
                 "partitionXmetadata", "0.snapshot", "x00000000000000000000.log"):
        assert is_partition_file(name) is False, name
