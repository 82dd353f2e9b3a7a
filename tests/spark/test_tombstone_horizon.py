"""A CDC file older than the tombstone horizon is held in quarantine, never applied blindly.

Maintenance records the cut it pruned tombstones at; ``cdclake.dms.horizon.beyond_horizon`` decides which files
of a batch are written before it. ``engine.prepare.prepare_batch`` calls it (the plan's only author) and holds
those files with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from cdclake.context import Engine
from cdclake.dms.store import list_bronze
from cdclake.dms.writer import write_csv
from cdclake.engine.prepare import prepare_batch
from cdclake.engine.run import replay, run
from cdclake.engine.select import ReplaySelection
from cdclake.engine.turn import read_state
from cdclake.lake.journals import QUARANTINE_TABLE, tombstones_of, tombstones_pruned_before
from cdclake.ops.maintenance import MaintenanceSettings, maintain

pytestmark = pytest.mark.spark

EngineFactory = Callable[..., Engine]
CONFIG = """
bronze: {timestamp_column: ts}
tables:
  s.people: {primary_key: [id], columns: {id: int, name: string, born: date}}
"""
NOW = datetime(2024, 3, 1, tzinfo=UTC)  # maintenance runs as of this time, with 15 days of tombstones


def people(engine: Engine) -> dict[int, str]:
    return {r["id"]: r["name"] for r in engine.spark.table(f"silver.{engine.config.database}.people").collect()}


def deleted_then_pruned(make_engine: EngineFactory, tmp_path: Path) -> Engine:
    """Rows 1-3 loaded on 1 January, row 1 deleted on 2 January, its tombstone pruned by maintenance on 1 March."""
    engine = make_engine(CONFIG)
    bronze = tmp_path / "bronze" / "s" / "people"
    write_csv(
        bronze / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", str(i), f"n{i}", "1990-01-01"] for i in (1, 2, 3)]
    )
    run(engine)
    write_csv(bronze / "20240102-000000000.csv", [["D", "2024-01-02 00:00:00.000000", "1", "", "1990-01-01"]])
    run(engine)
    [report] = maintain(engine, MaintenanceSettings(tombstone_retention_days=15), now=NOW).tables
    assert report.tombstones_removed == 1
    return engine


def arrives_late(tmp_path: Path) -> str:
    """A file DMS wrote on 1 January (row 1 updated to 'late', before its delete) written to bronze
    now; its key."""
    late = "s/people/20240101-120000000.csv"
    write_csv(tmp_path / "bronze" / late, [["U", "2024-01-01 12:00:00.000000", "1", "late", "1990-01-01"]])
    return late


def test_maintenance_records_the_cut_it_pruned_tombstones_at(make_engine: EngineFactory, tmp_path: Path) -> None:
    engine = deleted_then_pruned(make_engine, tmp_path)
    silver = engine.silver_table(engine.config.tables[0])
    assert tombstones_pruned_before(engine.spark, tombstones_of(silver)) == NOW - timedelta(days=15)
    # a later run that prunes nothing keeps the cut
    maintain(engine, MaintenanceSettings(tombstone_retention_days=15), now=NOW + timedelta(days=1))
    assert tombstones_pruned_before(engine.spark, tombstones_of(silver)) == NOW - timedelta(days=15)


def test_a_file_older_than_the_tombstone_horizon_is_held_and_applied_only_by_a_replay(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN row 1 deleted on 2 January and its tombstone pruned
    engine = deleted_then_pruned(make_engine, tmp_path)
    # WHEN a file DMS wrote on 1 January (an update of row 1, before its delete) arrives late (a re-driven dead letter)
    late = arrives_late(tmp_path)
    run(engine)
    # THEN row 1 stays deleted, and the file is in quarantine with the reason
    assert people(engine) == {2: "n2", 3: "n3"}
    quarantine = engine.spark.table(f"silver.{engine.config.database}.{QUARANTINE_TABLE}").collect()
    assert [(r["file_key"], "tombstone horizon" in r["reason"]) for r in quarantine] == [(late, True)]
    # AND a replay after review applies it (the reviewer decided the row belongs in silver)
    replay(engine, ReplaySelection(quarantined=True))
    assert people(engine) == {1: "late", 2: "n2", 3: "n3"}


def test_prepare_alone_plans_the_hold_of_a_file_older_than_the_horizon(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN row 1 deleted on 2 January, its tombstone pruned, and a late file of 1 January in bronze
    engine = deleted_then_pruned(make_engine, tmp_path)
    late = arrives_late(tmp_path)
    [file] = [f for f in list_bronze(engine.store).files if f.key == late]
    table = engine.config.tables[0]
    # WHEN the batch is planned, THEN the plan (its only author: prepare) holds the file with the
    # horizon's reason and applies nothing; nobody adds to it after prepare returns
    at = read_state(engine, table).snapshot_id
    plan = prepare_batch(engine, table, [file], ledger_snapshot=at)
    assert plan.changes is None
    assert [([f.key for f in h.files], "tombstone horizon" in h.reason) for h in plan.holds] == [([late], True)]
    # AND planned as a replay, the file is applied
    replayed = prepare_batch(engine, table, [file], replay=True, ledger_snapshot=at)
    assert replayed.holds == []
    assert replayed.changes is not None and [f.key for f in replayed.changes.files] == [late]
