"""Kafka's file names in a partition directory, in one place (Kafka's ``LogFileUtils``): a
segment's files are ``<base offset, 20 digits><suffix>``, producer snapshots
``<offset>.snapshot``; a file being deleted, cleaned or swapped in carries one more suffix
(``.deleted``, ``.cleaned``, ``.swap``)."""

from __future__ import annotations

import re

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SNAPSHOT_SUFFIX = ".snapshot"
DELETED_SUFFIX = ".deleted"  # renamed for a delayed delete (retention, a cleaner's swap)
CLEANED_SUFFIX = ".cleaned"  # a cleaner's output while it is written
SWAP_SUFFIX = ".swap"  # a cleaner's output about to replace the segments it cleaned

SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
# every file of a partition directory that holds records or state derived from them
PARTITION_FILE_SUFFIXES = (*SEGMENT_SUFFIXES, SNAPSHOT_SUFFIX)
# <base offset><segment suffix>[.cleaned|.swap|.deleted]: groups offset, suffix, extra suffix
SEGMENT_FILE = re.compile(r"(\d{20})(\.log|\.index|\.timeindex|\.txnindex)"
                          r"((?:\.cleaned|\.swap|\.deleted)?)")


def filename_prefix(offset: int) -> str:
    """The 20-digit, zero-padded file name prefix of a base offset (``LogFileUtils``)."""
    return f"{offset:020d}"
