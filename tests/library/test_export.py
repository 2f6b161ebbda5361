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


def killed_while_writing(args, env, look):
    """``kfs export ARGS`` in a child paused while a Parquet file is part written (after its
    first file), killed there with SIGKILL; what ``look()`` saw during the pause."""
    run = subprocess.Popen([sys.executable, "-c", PAUSING_EXPORT, *args], env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        event = run.stdout.readline()  # the event: part of a file is written
        seen = look()
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
        run.stdin.close()
        run.stdout.close()
    assert event == "written\n" and run.returncode == -signal.SIGKILL
    return seen


@needs_fixtures
def test_a_killed_export_leaves_whole_files_and_its_rerun_repeats_nothing(tmp_path):
    out = tmp_path / "out"
    args = [str(KAFKA_WRITTEN), str(out), "--topic", "plain", "--topic", "codecs",
            "--rows-per-file", "1000"]
    partial = killed_while_writing(args, kfs_env(),
                                   lambda: [(p, p.stat().st_size)
                                            for p in out.rglob(".*.parquet.tmp")])
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


# -- partitioned by date ----------------------------------------------------------------------

DAY = 86_400_000
NOV_28 = 1_795_824_000_000  # 2026-11-28T00:00:00Z, epoch ms


def dated_log(directory, records):
    """A partition ``days-0`` in ``directory`` holding ``records``: (timestamp ms, key, value,
    headers) each, appended in order."""
    manager = LogManager(directory)
    try:
        log = manager.get("days-0") if (directory / "days-0").exists() else \
            manager.create("days-0")
        ts, keys, values, headers = zip(*records)
        log.append(list(values), keys=list(keys), headers=list(headers), timestamps=list(ts))
    finally:
        manager.close()


# offsets 0-3 on the 28th (the last at its last ms), 4-6 on the 29th (the first at its first
# ms), 7 late: the 28th again (a timestamp need not grow with offsets), 8-9 on the 30th
DAYS = [(NOV_28 + 3_600_000, b"k0", b"v0", None), (NOV_28 + 7_200_000, None, b"v1", None),
        (NOV_28 + 7_300_000, b"k2", None, [("h", b"x"), ("n", None)]),
        (NOV_28 + DAY - 1, b"k3", b"\xff not utf-8", None),
        (NOV_28 + DAY, b"k4", b"v4", None), (NOV_28 + DAY + 5, b"k5", b"v5", [("h", b"y")]),
        (NOV_28 + DAY + 9, b"k6", b"v6", None), (NOV_28 + 60_000, b"late", b"v7", None),
        (NOV_28 + 2 * DAY, b"k8", b"v8", None), (NOV_28 + 2 * DAY + 1, b"k9", None, None)]


def day_of(ms):
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).date().isoformat()


def check_follow(files, first=0):
    """``files`` (ExportedFile, in the order written) follow one another from ``first``, each
    inside one date directory, its rows that date's."""
    spans = [(f.start, f.end) for f in files]
    assert spans[0][0] == first and all(a[1] == b[0] for a, b in zip(spans, spans[1:])), spans
    for f in files:
        assert f.path.parent.name == f"date={f.date}"
        stamps = pq.read_table(f.path, columns=["timestamp"]).column("timestamp").to_pylist()
        assert {t.date().isoformat() for t in stamps} == {f.date}


def test_partitioned_by_date_each_day_is_a_directory_of_its_records(tmp_path):
    dated_log(tmp_path / "data", DAYS)
    out = tmp_path / "out"
    files = export(tmp_path / "data", out, partition_by_date=True)
    assert [(f.date, f.start, f.end) for f in files] == [
        ("2026-11-28", 0, 4), ("2026-11-29", 4, 7), ("2026-11-28", 7, 8), ("2026-11-30", 8, 10)]
    check_follow(files)
    partition = out / "topic=days" / "partition=0"
    assert sorted(p.name for p in partition.iterdir()) == [
        "date=2026-11-28", "date=2026-11-29", "date=2026-11-30"]
    dataset = ds.dataset(out, format="parquet", partitioning="hive")
    for day in ["2026-11-28", "2026-11-29", "2026-11-30"]:
        got = dataset.to_table(filter=ds.field("date") == day).sort_by("offset")
        want = [(o, r) for o, r in enumerate(DAYS) if day_of(r[0]) == day]
        assert got.column("offset").to_pylist() == [o for o, _ in want]
        assert got.column("key").to_pylist() == [r[1] for _, r in want]
        assert got.column("value").to_pylist() == [r[2] for _, r in want]
        assert [None if h is None else [(x["key"], x["value"]) for x in h]
                for h in got.column("headers").to_pylist()] == [r[3] for _, r in want]
    if importlib.util.find_spec("duckdb"):
        import duckdb

        got = duckdb.sql(f"SELECT date, count(*) FROM read_parquet('{out}/**/*.parquet', "
                         "hive_partitioning=true) GROUP BY date ORDER BY date").fetchall()
        assert [(str(d), n) for d, n in got] == [("2026-11-28", 5), ("2026-11-29", 3),
                                                 ("2026-11-30", 2)]
    assert exported_end(partition) == 10


def test_a_second_export_by_date_resumes_after_the_largest_end_of_every_date(tmp_path):
    dated_log(tmp_path / "data", DAYS)
    out = tmp_path / "out"
    export(tmp_path / "data", out, partition_by_date=True)
    # the largest end is in the 30th's directory; the 28th's last file ends at 8: a resume
    # from the last date directory's (or the first's) files would repeat records
    dated_log(tmp_path / "data", [(NOV_28 + 2 * DAY + 7, b"k10", b"v10", None),
                                  (NOV_28 + 3 * DAY, b"k11", b"v11", None),
                                  (NOV_28 + 5, b"k12", b"late again", None)])
    second = export(tmp_path / "data", out, partition_by_date=True)
    assert [(f.date, f.start, f.end, f.rows) for f in second] == [
        ("2026-11-30", 10, 11, 1), ("2026-12-01", 11, 12, 1), ("2026-11-28", 12, 13, 1)]
    check_follow(second, first=10)
    assert export(tmp_path / "data", out, partition_by_date=True) == []
    table = exported(out)
    assert table.column("offset").to_pylist() == list(range(13))
    assert ds.dataset(out, format="parquet", partitioning="hive").count_rows(
        filter=ds.field("date") == "2026-11-28") == 6
    with pytest.raises(ValueError, match="holds files partitioned by date"):
        export(tmp_path / "data", out)


# -- the columns written ----------------------------------------------------------------------

@needs_fixtures
def test_the_columns_chosen_are_written_with_the_offset_always(tmp_path):
    shutil.copytree(KAFKA_WRITTEN / "codecs-0", tmp_path / "data" / "codecs-0")
    files = export(tmp_path / "data", tmp_path / "out", columns=["value", "headers"])
    assert pq.read_schema(files[0].path).names == ["value", "headers", "offset"]
    table = exported(tmp_path / "out")  # topic and partition: the Hive directories'
    want = expected("codecs")
    assert as_tuples_of(table, ["value", "topic", "partition", "offset", "headers"]) == \
        [(r[1], r[2], r[3], r[4], r[7]) for r in want]


@needs_fixtures
def test_columns_by_date_take_the_date_from_a_timestamp_not_written(tmp_path, capsys):
    from kfs.cli import main

    dated_log(tmp_path / "data", DAYS)
    out = tmp_path / "out"
    assert main(["export", str(tmp_path / "data"), str(out), "--partition-by-date",
                 "--columns", "key, value"]) == 0
    files = sorted(out.rglob("*.parquet"))
    assert len(files) == 4 and all(pq.read_schema(f).names == ["key", "value", "offset"]
                                   for f in files)
    dataset = ds.dataset(out, format="parquet", partitioning="hive")
    assert sorted(dataset.to_table(filter=ds.field("date") == "2026-11-29")
                  .column("offset").to_pylist()) == [4, 5, 6]
    assert "10 records in 4 new files" in capsys.readouterr().err


def test_an_unknown_column_is_named_with_the_valid_ones(tmp_path, capsys):
    from kfs.cli import main

    dated_log(tmp_path / "data", DAYS[:1])
    assert main(["export", str(tmp_path / "data"), str(tmp_path / "out"),
                 "--columns", "key,vlaue"]) == 1
    err = capsys.readouterr().err
    assert "unknown column 'vlaue'" in err and \
        "key, value, topic, partition, offset, timestamp, timestampType, headers" in err
    assert not (tmp_path / "out").exists()
    with pytest.raises(ValueError, match="no column"):
        export(tmp_path / "data", tmp_path / "out", columns=[])


def as_tuples_of(table, names):
    rows = table.select(names).to_pylist()
    return [tuple(([(h["key"], h["value"]) for h in r[n]] or None) if n == "headers" and r[n]
                  is not None else r[n] for n in names) for r in rows]


def test_a_file_uri_is_a_local_directory_and_other_stores_are_refused(tmp_path):
    dated_log(tmp_path / "data", DAYS)
    files = export(tmp_path / "data", (tmp_path / "out dir").as_uri())
    assert [f.path.parent for f in files] == [tmp_path / "out dir" / "topic=days" / "partition=0"]
    assert (tmp_path / "out dir" / ".kfs-export.lock").exists()  # the local directory's lock
    with pytest.raises(ValueError, match="writes to a local directory or to s3://"):
        export(tmp_path / "data", "hdfs://namenode/out")
