"""``kfs transactions BACKING_DIR list|find-hanging|abort``: the open transactions of a
backing directory, found and ended offline with ``kafka-transactions.sh``'s verbs.

A transaction is open from its producer's first transactional batch to its COMMIT/ABORT
marker. kfs has no transaction coordinator, so nothing else ends one: a running writable mount
aborts those open longer than ``transaction.timeout.ms``; these commands are for a directory
nobody mounts, or for a look beside a mount.

* ``list``: every open transaction (Kafka's ``describe-producers`` fields of its producer).
* ``find-hanging``: those whose producer has written nothing for more than
  ``--max-transaction-timeout`` minutes (Kafka's default 15, ``transaction.max.timeout.ms``),
  as ``kafka-transactions.sh find-hanging`` judges them.
* ``abort``: write an ABORT marker (``--topic --partition --start-offset``, or the producer's
  ``--producer-id --producer-epoch --coordinator-epoch``), through the mount's
  ``append-batches`` when a writable mount holds the directory.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path

from storage.clock import SYSTEM_CLOCK
from storage.directory import open_log_directory
from storage.errors import LogDirLockedError
from storage.producer_state import OpenTransaction
from storage.records.control import ControlRecordType, build_control_batch
from storage.topic_partition import parse_partition_dir_name

from kfs.args import CliError, existing_directory, positive_int
from kfs.mount_table import find_mount

COLUMNS = ("Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
           "StartOffset", "LastTimestamp")
MAX_TRANSACTION_TIMEOUT_MIN = 15  # kafka-transactions.sh find-hanging's default


class TransactionsError(Exception):
    """A request that cannot be carried out (message for the user)."""


def open_transactions(backing_dir: Path, topic: str | None = None,
                      partition: int | None = None
                      ) -> Iterator[tuple[str, int, OpenTransaction]]:
    """(topic, partition, transaction) of every open transaction, read-only, in partition
    order; only ``topic`` (and ``partition``) when given."""
    mgr = open_log_directory(backing_dir)
    try:
        for name in mgr.partition_names():
            t, p = parse_partition_dir_name(name)
            if (topic is None or t == topic) and (partition is None or p == partition):
                for txn in mgr.get(name).open_transactions():
                    yield t, p, txn
    finally:
        mgr.close()


def row(topic: str, partition: int, txn: OpenTransaction) -> list[str]:
    return [topic, str(partition), str(txn.producer_id), str(txn.producer_epoch),
            str(txn.coordinator_epoch), str(txn.first_offset), str(txn.last_timestamp)]


def hanging(found, max_timeout_min: int, now_ms: int | None = None) -> list[list[str]]:
    """Rows of the transactions whose producer's last timestamp is more than
    ``max_timeout_min`` minutes before ``now_ms``, with their Duration(min)."""
    now_ms = SYSTEM_CLOCK.milliseconds() if now_ms is None else now_ms
    out = []
    for topic, partition, txn in found:
        idle_min = (now_ms - txn.last_timestamp) // 60_000
        if idle_min > max_timeout_min:
            out.append(row(topic, partition, txn) + [str(idle_min)])
    return out


def table(header, rows) -> str:
    """Columns padded to their widest cell, as Kafka's tools print tables."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()
                     for r in [header, *rows])


def abort(backing_dir: Path, topic: str, partition: int, start_offset: int | None = None,
          producer: tuple[int, int, int] | None = None) -> int:
    """Write an ABORT marker to ``<topic>-<partition>`` for the transaction starting at
    ``start_offset`` (its producer's epochs from the log) or for ``producer`` (id, epoch,
    coordinator epoch). Returns the producer id. Raises TransactionsError when no such
    transaction is open, and the log's errors (e.g. InvalidProducerEpochError)."""
    if not (Path(backing_dir) / f"{topic}-{partition}").is_dir():
        raise TransactionsError(f"no partition {topic}-{partition} in {backing_dir}")
    if producer is None:
        txn = next((t for _, _, t in open_transactions(backing_dir, topic, partition)
                    if t.first_offset == start_offset), None)
        if txn is None:
            raise TransactionsError(f"no open transaction starts at offset {start_offset} "
                                    f"of {topic}-{partition}")
        producer = (txn.producer_id, txn.producer_epoch, max(txn.coordinator_epoch, 0))
    marker = build_control_batch(0, producer[0], producer[1], ControlRecordType.ABORT,
                                 producer[2], timestamp_ms=SYSTEM_CLOCK.milliseconds())
    _append(backing_dir, f"{topic}-{partition}", marker)
    return producer[0]


def _append(backing_dir: Path, name: str, data: bytes) -> None:
    """Append through the writable mount serving ``backing_dir``, else under its lock."""
    try:
        mgr = open_log_directory(backing_dir, read_only=False)
    except LogDirLockedError:
        mount = find_mount(str(backing_dir))
        if mount is None:
            raise
        with open(mount / name / "append-batches", "ab", buffering=0) as f:
            f.write(data)
        return
    try:
        mgr.get(name).append_as_leader(data)
    finally:
        mgr.close()


# --------------------------------------------------------------------------- the command


def add_parser(sub) -> None:
    txns = sub.add_parser(
        "transactions",
        help="list, find hanging and abort open transactions, as kafka-transactions.sh does",
        description=(
            "The open transactions of BACKING_DIR (a producer's transactional batches with no "
            "COMMIT/ABORT marker yet), with kafka-transactions.sh's verbs. A running writable "
            "mount aborts transactions open longer than transaction.timeout.ms by itself; "
            "abort writes through such a mount, else under the directory's lock."),
    )
    txns.add_argument("backing_dir", metavar="BACKING_DIR", type=existing_directory)
    verbs = txns.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, help_text in (("list", "every open transaction"),
                            ("find-hanging", "open transactions whose producer has been "
                                             "silent longer than --max-transaction-timeout")):
        p = verbs.add_parser(verb, help=help_text)
        p.add_argument("--topic", help="only this topic")
        p.add_argument("--partition", type=int, help="only this partition (with --topic)")
        if verb == "find-hanging":
            p.add_argument("--max-transaction-timeout", type=positive_int, metavar="MINUTES",
                           default=15, help="Kafka's transaction.max.timeout.ms in minutes "
                                            "(default 15)")
    p = verbs.add_parser("abort", help="write an ABORT marker for one open transaction")
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--start-offset", type=int, help="the transaction's first offset")
    p.add_argument("--producer-id", type=int)
    p.add_argument("--producer-epoch", type=int)
    p.add_argument("--coordinator-epoch", type=int)
    txns.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from storage.errors import KafkaStorageError

    backing = Path(args.backing_dir)
    if not backing.is_dir():
        raise CliError(f"backing directory {backing} does not exist")
    if args.verb != "abort" and args.partition is not None and args.topic is None:
        raise CliError("--partition needs --topic")
    try:
        if args.verb == "list":
            found = open_transactions(backing, args.topic, args.partition)
            print(table(COLUMNS, [row(*f) for f in found]))
        elif args.verb == "find-hanging":
            found = open_transactions(backing, args.topic, args.partition)
            print(table((*COLUMNS, "Duration(min)"),
                           hanging(found, args.max_transaction_timeout)))
        else:
            print(f"aborted the transaction of producer {_abort(backing, args)} in "
                  f"{args.topic}-{args.partition}")
    except (TransactionsError, KafkaStorageError, OSError) as exc:
        raise CliError(str(exc)) from None
    return 0


def _abort(backing: Path, args: argparse.Namespace) -> int:
    by_producer = (args.producer_id, args.producer_epoch, args.coordinator_epoch)
    if args.start_offset is not None and not any(v is not None for v in by_producer):
        return abort(backing, args.topic, args.partition, start_offset=args.start_offset)
    if args.start_offset is None and all(v is not None for v in by_producer):
        return abort(backing, args.topic, args.partition, producer=by_producer)
    raise CliError("abort takes --start-offset, or --producer-id, --producer-epoch and "
                   "--coordinator-epoch")
