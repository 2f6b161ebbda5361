"""``kfs export``: the Kafka-written fixtures as Parquet files partitioned by topic/partition,
read back with ``pyarrow.dataset`` and DuckDB; incremental after appends; and exactly once
across a real ``kfs export`` process killed by SIGKILL mid-way."""

import importlib.util
import os
import shutil
import signal
import subprocess
import sys

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from helpers.kfs import kfs_command, kfs_env
from helpers.paths import KAFKA_WRITTEN
from kfs.tools.export import exported_end, export
from storage import LogManager

from test_read import as_tuples, expected

needs_fixtures = pytest.mark.needs_fixture("kafka-written")


def kfs_export(*args):
    return subprocess.Popen(kfs_command("export", *map(str, args)), stderr=subprocess.PIPE,
                            text=True, env=kfs_env())


def exported(dest):
    """Every visible row of ``dest``, in (topic, partition, offset) order."""
    table = ds.dataset(dest, format="parquet", partitioning="hive").to_table()
    return table.sort_by([("topic", "ascending"), ("partition", "ascending"),
                          ("offset", "ascending")])


def visible_files(dest):
    return sorted(p for p in dest.rglob("*.parquet"))


def check_whole(dest):
    """Each visible file is whole: readable, its offsets inside the [start, end) of its name,
    and the files of a partition follow one another."""
    by_partition = {}
    for path in visible_files(dest):
        topic, partition, start, end = path.stem.split("+")
        offsets = pq.read_table(path, columns=["offset"]).column("offset").to_pylist()
        assert offsets and int(start) <= offsets[0] and offsets[-1] < int(end)
        by_partition.setdefault((topic, partition), []).append((int(start), int(end)))
    for spans in by_partition.values():
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans


@needs_fixtures
def test_export_holds_every_record_as_kafka_wrote_it(tmp_path):
    files = export(KAFKA_WRITTEN, tmp_path / "out", rows_per_file=700)
    table = exported(tmp_path / "out")
    want = [row for topic in sorted(["plain", "codecs", "compacted", "txn", "legacy"])
            for row in expected(topic)]
    assert as_tuples(table.select(["key", "value", "topic", "partition", "offset",
                                   "timestamp", "timestampType", "headers"])) == want
    assert sum(f.rows for f in files) == len(want) and len(files) > 10
    check_whole(tmp_path / "out")
    if importlib.util.find_spec("duckdb"):  # (a CI run has it: the test extra)
        import duckdb

        got = duckdb.sql(f"SELECT topic, count(*) FROM read_parquet('{tmp_path}/out/**/*.parquet',"
                         " hive_partitioning=true) GROUP BY topic ORDER BY topic").fetchall()
        assert got == [(t, len(expected(t))) for t in ["codecs", "compacted", "legacy", "plain",
                                                       "txn"]]
    plain = tmp_path / "out" / "topic=plain" / "partition=0"
    assert exported_end(plain) == 5000 and not [n for n in os.listdir(plain) if n.startswith(".")]


@needs_fixtures
def test_a_second_export_writes_only_the_records_appended_since(tmp_path):
    shutil.copytree(KAFKA_WRITTEN / "plain-0", tmp_path / "data" / "plain-0")
    first = export(tmp_path / "data", tmp_path / "out", topics="plain")
    assert [(f.start, f.end, f.rows) for f in first] == [(0, 5000, 5000)]
    assert export(tmp_path / "data", tmp_path / "out", topics="plain") == []
    manager = LogManager(tmp_path / "data")
    try:
        manager.get("plain-0").append([b"new-1", b"\xff\xfe not utf-8", None],
                                      keys=[b"k", None, b"k3"])
    finally:
        manager.close()
    second = export(tmp_path / "data", tmp_path / "out", topics="plain")
    assert [(f.start, f.end, f.rows) for f in second] == [(5000, 5003, 3)]
    table = exported(tmp_path / "out")
    assert table.column("offset").to_pylist() == list(range(5003))
    assert table.column("value").to_pylist()[-3:] == [b"new-1", b"\xff\xfe not utf-8", None]
    assert table.column("key").to_pylist()[-3:] == [b"k", None, b"k3"]
    check_whole(tmp_path / "out")


# ``kfs export`` in a process of its own that says when it has written part of a file (its
# 2nd row group: the 2nd file's, before that file is closed) and waits there, to be killed at
# that point
PAUSING_EXPORT = """
import sys
import pyarrow.parquet as pq
from kfs.cli import main

write_table, writes = pq.ParquetWriter.write_table, [0]

def pausing(self, table, *args, **kwargs):
    write_table(self, table, *args, **kwargs)
    writes[0] += 1
    if writes[0] == 2:
        print("written", flush=True)
        sys.stdin.readline()

pq.ParquetWriter.write_table = pausing
sys.exit(main(["export", *sys.argv[1:]]))
"""


@needs_fixtures
def test_a_killed_export_leaves_whole_files_and_its_rerun_repeats_nothing(tmp_path):
    out = tmp_path / "out"
    args = [str(KAFKA_WRITTEN), str(out), "--topic", "plain", "--topic", "codecs",
            "--rows-per-file", "1000"]
    run = subprocess.Popen([sys.executable, "-c", PAUSING_EXPORT, *args], env=kfs_env(),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        event = run.stdout.readline()  # the event: part of a file is written
        partial = [(p, p.stat().st_size) for p in out.rglob(".*.parquet.tmp")]
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
        run.stdin.close()
        run.stdout.close()
    assert event == "written\n" and run.returncode == -signal.SIGKILL
    assert len(partial) == 1 and partial[0][1] > 0, partial
    check_whole(out)
    before = exported(out).num_rows
    assert 1000 <= before < 7000  # killed mid-way, with files committed before
    rerun = kfs_export(*args[:2], *args[2:])
    _, err = rerun.communicate()
    assert rerun.returncode == 0, err
    assert f"{7000 - before} records in" in err.splitlines()[-1]
    assert as_tuples(exported(out)) == expected("codecs") + expected("plain")
    check_whole(out)
    assert not list(out.rglob(".*.tmp"))


@needs_fixtures
def test_export_refuses_a_destination_inside_the_log_directory(tmp_path):
    shutil.copytree(KAFKA_WRITTEN / "txn-0", tmp_path / "txn-0")
    run = kfs_export(tmp_path, tmp_path / "out")
    _, err = run.communicate()
    assert run.returncode == 1 and "inside the log directory" in err
    assert sorted(os.listdir(tmp_path)) == ["txn-0"]


@needs_fixtures
def test_the_commands_options_choose_the_records(tmp_path, capsys):
    from kfs.cli import main

    out = tmp_path / "out"
    assert main(["export", str(KAFKA_WRITTEN), str(out), "--topic", "txn", "--partition", "0",
                 "--start", "100", "--isolation-level", "read_committed"]) == 0
    manager = LogManager(KAFKA_WRITTEN, read_only=True)
    try:
        from storage.isolation import IsolationLevel

        committed = [r.offset for records in manager.get("txn-0").reader.record_lists(
            100, isolation=IsolationLevel.READ_COMMITTED) for r in records]
    finally:
        manager.close()
    assert exported(out).column("offset").to_pylist() == committed
    err = capsys.readouterr().err
    assert f"{len(committed)} records in 1 new files" in err
    assert main(["export", str(KAFKA_WRITTEN), str(out), "--topic", "txn", "--start",
                 "2020-01-01"]) == 1
    assert "give the time's zone" in capsys.readouterr().err
    assert main(["export", str(KAFKA_WRITTEN), str(out), "-o", "subscribe=nope"]) == 1
    assert "topic nope not found" in capsys.readouterr().err
