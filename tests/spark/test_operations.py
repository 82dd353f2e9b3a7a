"""Operations: a corpus of bad inputs (each ends in quarantine with its reason, good rows are applied,
a replay after the fix converges), and maintenance (fewer files, same rows, ledger kept)."""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdclake.context import CommitPath, Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import replay, run
from cdclake.engine.select import ReplaySelection
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, QUARANTINE_TABLE
from cdclake.lake.ledger import read_ledger
from cdclake.lake.ledger_record import LoadedFile
from cdclake.lake.tables import iceberg_table
from cdclake.ops.maintenance import MaintenanceSettings, maintain
from faults import MaintenanceRacingCommitter

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {timestamp_column: ts}
tables:
  s.people: {primary_key: [id], columns: {id: int, name: string, born: date}}
"""
TS = "2024-01-02 00:00:01.000000"


def _good_rows(first: int, count: int) -> list[list[str | None]]:
    return [["I", TS, str(i), f"name {i}", "1990-01-01"] for i in range(first, first + count)]


def _people(engine: Engine) -> dict[int, str]:
    return {r["id"]: r["name"] for r in engine.spark.table(f"silver.{engine.config.database}.people").collect()}


def _rows_in_quarantine(engine: Engine) -> list[tuple]:
    table = engine.spark.table(f"silver.{engine.config.database}.{QUARANTINE_ROWS_TABLE}")
    return sorted((r["file_key"], r["row_number"], r["reason"]) for r in table.collect())


def _files_in_quarantine(engine: Engine) -> list[tuple]:
    name = f"silver.{engine.config.database}.{QUARANTINE_TABLE}"
    if not engine.spark.catalog.tableExists(name):
        return []
    return sorted((r["file_key"], r["reason"]) for r in engine.spark.table(name).collect())


BAD_KEY = "s/people/20240102-0000020000.csv"
# name -> (raw bytes of the bad file, the reason expected in quarantine_rows for its row 3)
ROW_CASES = {
    "truncated CSV": (b"I,2024-01-02 00:00:02.000000,1003,na", "wrong number of fields"),
    "wrong column count": (b"I,2024-01-02 00:00:02.000000,1003,name,1990-01-01,extra\n", "wrong number of fields"),
    "bad date": (
        b"I,2024-01-02 00:00:02.000000,1003,name,1990-13-45\n",
        "value '1990-13-45' of column born is not a valid date",
    ),
    "unknown Op": (b"X,2024-01-02 00:00:02.000000,1003,name,1990-01-01\n", "unknown Op 'X'"),
    "non-UTF-8 bytes": (b"I,2024-01-02 00:00:02.000000,1003,na\xffme,1990-01-01\n", "bytes that are not valid UTF-8"),
}


@pytest.mark.parametrize("case", sorted(ROW_CASES))
def test_bad_rows_go_to_quarantine_and_a_replay_after_the_fix_converges(
    make_engine: EngineFactory, tmp_path: Path, case: str
) -> None:
    # GIVEN a good file and a file whose third row is bad
    engine = make_engine(CONFIG)
    bronze = tmp_path / "bronze"
    write_csv(bronze / "s/people/20240102-0000010000.csv", _good_rows(1, 300))
    bad_bytes, reason = ROW_CASES[case]
    good_prefix = "".join(f"I,{TS},{i},name {i},1990-01-01\n" for i in (1001, 1002)).encode()
    (bronze / BAD_KEY).write_bytes(good_prefix + bad_bytes)
    # WHEN the pipeline runs
    report = run(engine).checked()
    # THEN the bad row is quarantined with its reason and every good row is applied
    assert _rows_in_quarantine(engine) == [(BAD_KEY, 3, reason)]
    assert sorted(_people(engine)) == [*range(1, 301), 1001, 1002]
    assert [t.rows_quarantined for t in report.tables if t.kind == "cdc"] == [1]
    # AND after the file is fixed, a replay of it converges
    (bronze / BAD_KEY).write_bytes(good_prefix + f"I,{TS},1003,name 1003,1990-01-01\n".encode())
    replay(engine, ReplaySelection(keys=frozenset([BAD_KEY]))).checked()
    assert sorted(_people(engine)) == [*range(1, 301), 1001, 1002, 1003]


def _corrupt_gzip(path: Path) -> None:
    path.with_suffix(".csv.gz").write_bytes(b"\x1f\x8b\x08\x00garbage, not a deflate stream" * 3)
    path.unlink()


def _corrupt_parquet(path: Path) -> None:
    path.with_suffix(".parquet").write_bytes(b"PAR1 this is not a parquet file PAR1")
    path.unlink()


def _empty(path: Path) -> None:
    path.write_bytes(b"")


FILE_CASES = {
    "corrupt gzip": (_corrupt_gzip, ".csv.gz", "unreadable file: "),
    "corrupt Parquet": (_corrupt_parquet, ".parquet", "unreadable file: "),
    "empty file": (_empty, ".csv", "empty file"),
}


@pytest.mark.parametrize("case", sorted(FILE_CASES))
def test_unreadable_files_are_held_in_quarantine_and_replayed_after_the_fix(
    spark: SparkSession, make_engine: EngineFactory, tmp_path: Path, case: str
) -> None:
    # GIVEN a good file and an unreadable one in the same batch
    engine = make_engine(CONFIG)
    bronze = tmp_path / "bronze"
    write_csv(bronze / "s/people/20240102-0000010000.csv", _good_rows(1, 5))
    spoil, suffix, reason = FILE_CASES[case]
    bad = write_csv(bronze / "s/people/20240102-0000020000.csv", _good_rows(100, 3))
    spoil(bad)
    bad_key = "s/people/20240102-0000020000" + suffix
    # WHEN the pipeline runs, twice
    first = run(engine).checked()
    second = run(engine).checked()
    # THEN the file is quarantined with its reason, the good file is applied, and the next run
    # does not retry the held file
    [(key, why)] = _files_in_quarantine(engine)
    assert key == bad_key and why.startswith(reason)
    assert sorted(_people(engine)) == [1, 2, 3, 4, 5]
    assert [t.quarantined_files for t in first.tables if t.kind == "cdc"] == [[bad_key]]
    assert [t for t in second.tables if t.kind == "cdc"] == []
    # AND once fixed, replaying the quarantine applies it and empties the quarantine
    target = bronze / bad_key
    if suffix == ".parquet":
        out = tmp_path / "fixed"
        frame = spark.createDataFrame([("I", TS, 100, "name 100", "1990-01-01")], "Op string, ts string, id int, "
                                      "name string, born string")  # fmt: skip
        frame.coalesce(1).write.parquet(str(out))
        shutil.copy(next(out.glob("part-*.parquet")), target)
        expected = [1, 2, 3, 4, 5, 100]
    else:
        text = "".join(f"I,{TS},{i},name {i},1990-01-01\n" for i in (100, 101, 102)).encode()
        target.write_bytes(gzip.compress(text) if suffix.endswith(".gz") else text)
        expected = [1, 2, 3, 4, 5, 100, 101, 102]
    replay(engine, ReplaySelection(quarantined=True)).checked()
    assert sorted(_people(engine)) == expected
    assert _files_in_quarantine(engine) == []


def test_a_file_for_an_unconfigured_table_is_reported_not_dropped(make_engine: EngineFactory, tmp_path: Path) -> None:
    engine = make_engine(CONFIG)
    bronze = tmp_path / "bronze"
    write_csv(bronze / "s/people/20240102-0000010000.csv", _good_rows(1, 2))
    stray = write_csv(bronze / "s/pets/20240102-0000010000.csv", [["I", TS, "1", "rex"]])
    report = run(engine).checked()
    assert report.unconfigured == ["s.pets"]
    assert stray.exists()
    assert sorted(_people(engine)) == [1, 2]


def test_a_10_mb_row_is_applied_whole(make_engine: EngineFactory, tmp_path: Path) -> None:
    engine = make_engine(CONFIG)
    big = "x" * (10 * 1024 * 1024)
    write_csv(tmp_path / "bronze/s/people/20240102-0000010000.csv", [["I", TS, "1", big, "1990-01-01"]])
    run(engine).checked()
    assert {k: len(v) for k, v in _people(engine).items()} == {1: len(big)}


def test_a_file_with_too_many_bad_rows_is_held_and_the_files_after_it_go_on(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a CDC file with one bad row in ten (above the ratio of 1%) between two good files
    engine = make_engine(CONFIG)
    bronze = tmp_path / "bronze/s/people"
    write_csv(bronze / "20240102-0000000001.csv", [["I", TS, "1", "first", "1990-01-01"]])
    bad = "s/people/20240102-0000010000.csv"
    write_csv(tmp_path / "bronze" / bad, [["U", TS, "1", "a", "never"], *_good_rows(2, 9)])
    write_csv(bronze / "20240102-0000020000.csv", [["I", TS, "20", "after", "1990-01-01"]])
    # WHEN the table is run (batches of one file)
    report = run(replace(engine, config=replace(engine.config, max_files_per_batch=1)))
    # THEN the run does not fail: the bad file is held with its counts, rows and remedies, the others applied
    assert report.failures == []
    assert report.exit_code == 1  # something was set aside
    [held] = [t for t in report.tables if t.quarantined_files]
    assert held.quarantined_files == [bad]
    assert held.note.startswith(
        "quarantined: 1 of 10 rows cannot be applied (data row 1: value 'never' of column born is not a valid date), "
        "above quarantine.max_bad_row_ratio 0.01"
    )
    assert "`cdclake replay --quarantined`" in held.note
    assert sorted(_people(engine)) == [1, 20]
    assert _people(engine)[1] == "first"
    silver = engine.silver_table(engine.config.tables[0])
    assert read_ledger(engine.spark, silver, whole=True).applied == {"s/people/20240102-0000000001.csv",
                                                          "s/people/20240102-0000020000.csv"}  # fmt: skip
    # AND once the file is fixed, a replay applies it, in order with what came after
    write_csv(tmp_path / "bronze" / bad, [["U", TS, "1", "a", "1990-01-01"], *_good_rows(2, 9)])
    replay(engine, ReplaySelection(quarantined=True)).checked()
    assert sorted(_people(engine)) == [1, *range(2, 11), 20]
    assert _people(engine)[1] == "a"


def test_maintenance_compacts_and_keeps_rows_ledger_and_recent_tombstones(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a table after many small CDC batches (merge-on-read: many data and delete files)
    engine = make_engine(CONFIG)
    bronze = tmp_path / "bronze" / "s" / "people"
    write_csv(bronze / "LOAD00000001.csv", [[TS, str(i), f"n{i}", "1990-01-01"] for i in range(1, 41)])
    run(engine).checked()
    for batch in range(1, 13):
        ts = f"2024-01-02 00:{batch:02d}:00.000000"
        rows = [["U", ts, str(i), f"v{batch}", "1990-01-01"] for i in range(batch, 41, 3)]
        rows.append(["D", ts, str(batch), "", "1990-01-01"])
        write_csv(bronze / f"20240102-00{batch:02d}000000.csv", rows)
        run(engine).checked()
    silver = engine.silver_table(engine.config.tables[0])
    before_rows = sorted(tuple(r) for r in engine.spark.table(silver.identifier).collect())
    # WHEN maintenance runs as if a month had passed, keeping the last snapshot and a day of tombstones
    settings = MaintenanceSettings(snapshot_retention_hours=1, retain_last_snapshots=1, tombstone_retention_days=1)
    [report] = maintain(engine, settings, now=datetime.now(UTC) + timedelta(days=30)).tables
    # THEN far fewer files, no delete files, the same rows, the ledger still knows every file
    assert report.data_files_after < report.data_files_before / 3
    assert (report.delete_files_before > 0, report.delete_files_after) == (True, 0)
    assert report.snapshots_expired >= 12
    assert report.tombstones_removed == 12
    assert sorted(tuple(r) for r in engine.spark.table(silver.identifier).collect()) == before_rows
    assert len(read_ledger(engine.spark, silver).applied) == 13
    # AND the archive keeps the load's LOAD file size and version (a LOAD file DMS writes again is told by them)
    load = (bronze / "LOAD00000001.csv").stat()
    key = "s/people/LOAD00000001.csv"
    assert read_ledger(engine.spark, silver).loaded == {key: LoadedFile(key, load.st_size, str(load.st_mtime_ns))}
    again = run(engine).checked()
    assert [t for t in again.tables if t.files_applied] == []
    # AND the table keeps its default key-clustered layout: files ordered by the key
    assert str(iceberg_table(engine.spark, silver.identifier).sortOrder().fields().get(0).sourceId()) == str(
        iceberg_table(engine.spark, silver.identifier).schema().findField("id").fieldId()
    )


@pytest.mark.parametrize("commit_path", ["publish", "row-delta"])
def test_a_batch_overtaken_by_maintenance_retries_and_converges(
    make_engine: EngineFactory, tmp_path: Path, commit_path: CommitPath
) -> None:
    # GIVEN a table with merge-on-read deletes, and a batch classified (and on the branch path
    # staged) when maintenance compacts the table
    engine = make_engine(CONFIG).tuned(backoff_seconds=0.01, way=commit_path)
    bronze = tmp_path / "bronze" / "s" / "people"
    write_csv(bronze / "LOAD00000001.csv", [[TS, str(i), f"n{i}", "1990-01-01"] for i in range(1, 21)])
    write_csv(bronze / "20240102-0001000000.csv", [["U", "2024-01-02 00:01:00.000000", "1", "u1", "1990-01-01"]])
    run(engine).checked()
    later = "2024-01-02 00:02:00.000000"
    write_csv(
        bronze / "20240102-0002000000.csv", [["U", later, "2", "u2", "1990-01-01"], ["D", later, "3", "", "1990-01-01"]]
    )
    # Tombstones kept: pruning the 2024 ones today would put this 2024 file beyond the tombstone
    # horizon and hold it in quarantine (tests/spark/test_tombstone_horizon.py), not the race here.
    settings = MaintenanceSettings(snapshot_retention_hours=1, retain_last_snapshots=5, tombstone_retention_days=36500)
    racing = MaintenanceRacingCommitter(rival=lambda: maintain(engine, settings))
    # WHEN the batch is applied while maintenance runs
    report = run(replace(engine, committer=racing)).checked()
    # THEN the batch's first commit lost to the compaction, its retry applied it once, nothing is lost
    assert racing.attempts == 2
    assert [t.files_applied for t in report.tables] == [1]
    rows = {
        r["id"]: r["name"]
        for r in engine.spark.table(engine.silver_table(engine.config.tables[0]).identifier).collect()
    }
    assert rows == {**{i: f"n{i}" for i in range(4, 21)}, 1: "u1", 2: "u2"}
