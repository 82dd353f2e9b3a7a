"""``maintain`` covers every table cdclake writes.

Silver, its tombstones and history, the ledger archive, the journals and a gold mart: snapshots expire by the
same rules, old unreferenced files (a crash's Parquet and temporary metadata) are removed by the same age, no
row is lost, the ledger stays complete, and the mart's next refresh is still incremental and right.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pyspark.sql import SparkSession

from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.store import LocalBronze
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from cdclake.gold.refresh import PATH_INCREMENTAL, last_refresh, mart_table
from cdclake.gold.run import refresh_marts
from cdclake.lake.history import history_of, reflecting_snapshot_id
from cdclake.lake.journals import QUARANTINE_ROWS_TABLE, tombstones_of
from cdclake.lake.ledger import LEDGER_ARCHIVE_TABLE, archive_ledger, expiring_snapshots, read_ledger
from cdclake.lake.tables import SilverTable, iceberg_table
from cdclake.ops.maintenance import MaintenanceSettings, maintain

CONFIG = """
silver: {{database: {db}}}
bronze: {{timestamp_column: ts}}
quarantine: {{max_bad_row_ratio: 0.5}}
# The incremental path whatever the tables' size: the test checks it survives maintenance.
gold: {{full_refresh_share: 1000, full_refresh_below_mb: 0}}
tables:
  s.people: {{primary_key: [id], columns: {{id: int, name: string, born: date}}, history: true}}
marts:
  - name: people_per_birthday
    sql: SELECT born, count(*) AS people FROM {db}.people GROUP BY born
    keys: [born]
"""
# As if a month had passed: every snapshot is older than the retention, all but the last two expire.
SETTINGS = MaintenanceSettings(snapshot_retention_hours=1, retain_last_snapshots=2, tombstone_retention_days=36500)
LATER = datetime.now(UTC) + timedelta(days=30)
TEN_DAYS = 10 * 24 * 3600

State = dict[int, tuple[str, str]]  # the source as the test wrote it: id -> (name, born)


def _engine(spark: SparkSession, tmp_path: Path) -> Engine:
    db = f"m_{uuid.uuid4().hex[:10]}"
    config = parse_config(CONFIG.format(db=db), "maintain.yaml")
    bronze = tmp_path / "bronze"
    bronze.mkdir()
    return Engine(spark, replace(config, bronze=replace(config.bronze, path=str(bronze))), LocalBronze(bronze))


def _batch(engine: Engine, number: int, state: State, bad_row: bool = False) -> None:
    """One CDC file: updates, a delete, an insert (and an unknown Op, quarantined); then a run."""
    ts = f"2024-01-02 00:{number:02d}:00.000000"
    born = f"199{number}-01-01"
    # (one change per key: two of a key in one file at one commit time have no order between them)
    gone = 40 - number
    rows = [["U", ts, str(i), f"v{number}-{i}", born] for i in range(number, 41, 5) if i in state and i != gone]
    rows += [["D", ts, str(gone), "", "1990-01-01"], ["I", ts, str(100 + number), f"new{number}", born]]
    if bad_row:
        rows.append(["X", ts, "999", "bad", born])
    write_csv(Path(engine.config.bronze.path) / f"s/people/20240102-00{number:02d}000000.csv", rows)
    for op, _, ident, name, day in rows:
        if op == "D":
            state.pop(int(ident), None)
        elif op in ("U", "I"):
            state[int(ident)] = (name, day)
    assert [t.files_applied for t in run(engine).checked().tables] == [1]


def _rows(spark: SparkSession, table: SilverTable) -> list[tuple[object, ...]]:
    return sorted((tuple(r) for r in spark.table(table.identifier).collect()), key=repr)


def _snapshots(spark: SparkSession, table: SilverTable) -> list[int]:
    """Snapshot ids, oldest first."""
    found = spark.sql(f"SELECT snapshot_id FROM {table.metadata('snapshots')} ORDER BY committed_at")
    return [int(r["snapshot_id"]) for r in found.collect()]


def _plant_orphans(spark: SparkSession, table: SilverTable, age_seconds: int) -> list[Path]:
    """What a killed writer leaves: a Parquet data file no snapshot references and a temporary
    metadata file never committed, both written ``age_seconds`` ago."""
    location = Path(str(iceberg_table(spark, table.identifier).location()).removeprefix("file:"))
    parquet = next((location / "data").rglob("*.parquet"))
    metadata = max((location / "metadata").glob("v*.metadata.json"), key=lambda p: p.stat().st_mtime)
    planted = [
        location / "data" / f"00000-0-{uuid.uuid4()}-00001.parquet",
        location / "metadata" / f"{uuid.uuid4()}.metadata.json",
    ]
    shutil.copyfile(parquet, planted[0])
    shutil.copyfile(metadata, planted[1])
    then = time.time() - age_seconds
    for path in planted:
        os.utime(path, (then, then))
    return planted


def _per_birthday(state: State) -> list[tuple[object, ...]]:
    counts: dict[str, int] = {}
    for _, born in state.values():
        counts[born] = counts.get(born, 0) + 1
    return sorted(((datetime.fromisoformat(b).date(), n) for b, n in counts.items()), key=repr)


def test_maintain_expires_and_removes_orphans_in_every_table_and_loses_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    # GIVEN a table with history and a mart, loaded and changed by three CDC batches (each with a
    # bad row), the mart refreshed after each
    engine = _engine(spark, tmp_path)
    state: State = {i: (f"n{i}", "1990-01-01") for i in range(1, 41)}
    load = [["2024-01-01 00:00:00.000000", str(i), name, born] for i, (name, born) in state.items()]
    write_csv(Path(engine.config.bronze.path) / "s/people/LOAD00000001.csv", load)
    run(engine).checked()
    for number in (1, 2, 3):
        _batch(engine, number, state, bad_row=True)
        refresh_marts(engine)
    silver = engine.silver_table(engine.config.tables[0])
    # ... and a maintenance killed after it archived the ledger entries of the snapshots it was to expire
    archive_ledger(spark, silver, expiring_snapshots(spark, silver, LATER, SETTINGS.retain_last_snapshots))
    mart = mart_table(engine, engine.config.gold.marts[0])
    side = {"tombstones": tombstones_of(silver), "history": history_of(silver)}
    shared = {
        "ledger archive": SilverTable(engine.catalog, engine.config.database, LEDGER_ARCHIVE_TABLE),
        "journal": SilverTable(engine.catalog, engine.config.database, QUARANTINE_ROWS_TABLE),
        "mart": mart,
    }
    beside = {**side, **shared}
    snapshots = {role: _snapshots(spark, table) for role, table in beside.items()}
    # (the ledger archive gets more from this maintenance first: silver's and history's expiring entries)
    assert all(len(ids) > SETTINGS.retain_last_snapshots for r, ids in snapshots.items() if r != "ledger archive")
    rows = {role: _rows(spark, table) for role, table in {**beside, "silver": silver}.items()}
    ledger = read_ledger(spark, silver)
    reflected = last_refresh(spark, mart)
    assert reflected is not None
    silver_before = _snapshots(spark, silver)
    kept_for_mart = silver_before[silver_before.index(reflected.sources[f"{engine.config.database}.people"]) :]
    # ... and in each of its tables an old Parquet file and an old metadata file no snapshot
    # references, and in history a young one (younger than the orphan age: it may be a commit in flight)
    old = {role: _plant_orphans(spark, table, TEN_DAYS) for role, table in {**beside, "silver": silver}.items()}
    young = _plant_orphans(spark, side["history"], 3600)

    # WHEN maintenance runs
    done = maintain(engine, SETTINGS, now=LATER)

    # THEN every side and shared table keeps the last two snapshots (history: from its newest
    # commit that records the silver snapshot it reflects on, which its compaction's came after),
    # and silver every snapshot from the one the mart reflects on (its compaction's came after it)
    for role, table in beside.items():
        if role != "history":
            assert len(_snapshots(spark, table)) == SETTINGS.retain_last_snapshots, role
    history_kept, reflecting = _snapshots(spark, side["history"]), reflecting_snapshot_id(spark, side["history"])
    assert reflecting in history_kept
    from_reflecting = len(history_kept) - history_kept.index(reflecting)
    assert len(history_kept) == max(SETTINGS.retain_last_snapshots, from_reflecting)
    assert set(kept_for_mart) <= set(_snapshots(spark, silver)) and silver_before[0] not in _snapshots(spark, silver)
    # AND the old orphans are gone from every table, the young one stays
    assert [p for paths in old.values() for p in paths if p.exists()] == []
    assert all(p.exists() for p in young)
    # AND no row changed, the archive lost none and the ledger knows every file
    for role, rows_before in rows.items():
        after = _rows(spark, {**beside, "silver": silver}[role])
        assert set(rows_before) <= set(after) if role == "ledger archive" else after == rows_before, role
    assert read_ledger(spark, silver) == ledger
    # AND every retained snapshot of every table reads (no file a live snapshot references was removed)
    for table in [*beside.values(), silver]:
        for snapshot in _snapshots(spark, table):
            spark.sql(f"SELECT count(*) FROM {table.identifier} VERSION AS OF {snapshot}").collect()
    # AND the report lists the side tables under their silver table, then the shared ones
    [report] = done.tables
    assert [(u.role, u.orphan_files_removed) for u in report.side_tables] == [("tombstones", 2), ("history", 2)]
    assert [(u.role, u.orphan_files_removed) for u in done.shared] == [
        ("ledger archive", 2),
        ("journal", 2),
        ("mart", 2),
    ]
    assert all(u.snapshots_expired > 0 for u in [*report.side_tables, *done.shared])

    # WHEN the next CDC batch is applied and the mart refreshed
    _batch(engine, 4, state)
    refreshed = refresh_marts(engine)[0]
    # THEN silver is the source, history's current rows are silver's, the mart is the source's
    # count per birthday, refreshed incrementally from the snapshot it reflected before maintenance
    live = sorted((i, name, datetime.fromisoformat(born).date()) for i, (name, born) in state.items())
    assert sorted(tuple(r) for r in spark.table(silver.identifier).select("id", "name", "born").collect()) == live
    current = spark.table(side["history"].identifier).where("is_current").select("id", "name", "born")
    assert sorted(tuple(r) for r in current.collect()) == live
    assert refreshed.path == PATH_INCREMENTAL, refreshed.reason
    assert _rows(spark, mart) == _per_birthday(state)


def test_changed_only_skips_every_table_without_a_commit_since_its_last_maintenance(
    spark: SparkSession, tmp_path: Path
) -> None:
    # GIVEN a table with history, tombstones and a quarantine journal, maintained once
    engine = _engine(spark, tmp_path)
    state: State = {}
    write_csv(
        Path(engine.config.bronze.path) / "s/people/LOAD00000001.csv",
        [["2024-01-01 00:00:00.000000", str(i), f"n{i}", "1990-01-01"] for i in range(1, 41)],
    )
    run(engine).checked()
    state.update({i: (f"n{i}", "1990-01-01") for i in range(1, 41)})
    _batch(engine, 1, state, bad_row=True)
    changed_only = replace(SETTINGS, changed_only=True)
    first = maintain(engine, changed_only, now=LATER)
    assert [t.unchanged for t in first.tables] == [False]
    assert not any(s.unchanged for s in first.tables[0].side_tables)
    silver = SilverTable("silver", engine.config.database, "people")
    snapshot = iceberg_table(spark, silver.identifier).currentSnapshot().snapshotId()
    # WHEN maintenance runs again with nothing committed since
    second = maintain(engine, changed_only, now=LATER)
    # THEN silver (with its side tables) and every shared table are skipped, silver untouched
    assert [(t.table, t.unchanged, t.side_tables) for t in second.tables] == [("s.people", True, [])]
    assert second.shared and all(s.unchanged for s in second.shared), [s.summary() for s in second.shared]
    table = iceberg_table(spark, silver.identifier)
    table.refresh()
    assert table.currentSnapshot().snapshotId() == snapshot
    # WHEN a batch commits, THEN the next maintenance works on silver and its side tables again,
    # and the silver table's rows are the source's
    _batch(engine, 2, state)
    third = maintain(engine, changed_only, now=LATER)
    assert [t.unchanged for t in third.tables] == [False]
    assert {r["id"]: (r["name"], str(r["born"])) for r in spark.table(silver.identifier).collect()} == state
    # AND without changed_only (`cdclake maintain`) nothing is skipped
    assert not any(t.unchanged for t in maintain(engine, SETTINGS, now=LATER).tables)
