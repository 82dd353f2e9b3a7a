"""DDL at the source, mid-workload: capture follows it, the engine applies or quarantines it, and
``verify`` compares silver with what the source has now.

The oracle is the source database itself (``cdclake.verify.postgres.dialect``).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from cdclake.config import load_config
from cdclake.context import Engine
from cdclake.engine.run import replay
from cdclake.engine.select import ReplaySelection
from cdclake.lake.journals import QUARANTINE_TABLE
from cdclake.schema import type_change_advice
from cdclake.shells.commands.run import print_report
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison

SourceDatabase = Any  # conftest.SourceDatabase (a conftest cannot be imported by name)
Verify = Callable[[SourceDatabase], list[TableComparison]]


def _engine_of(apply_and_verify: Verify, db: SourceDatabase) -> Engine:
    cells = apply_and_verify.__closure__ or ()  # type: ignore[attr-defined]
    engines = next(c.cell_contents for c in cells if isinstance(c.cell_contents, dict))
    return engines[db.name]  # type: ignore[no-any-return]


def _by_table(results: list[TableComparison]) -> dict[str, TableComparison]:
    return {r.table: r for r in results}


def _headers(folder: Path) -> list[list[str]]:
    """The header row of each CDC file of a table folder, in file order."""
    headers = []
    for path in sorted(p for p in folder.glob("*.csv") if not p.name.startswith("LOAD")):
        with path.open(newline="", encoding="utf-8") as handle:
            headers.append(next(csv.reader(handle)))
    return headers


def test_added_widened_and_dropped_columns_reach_silver_and_verify(
    source_db: SourceDatabase, apply_and_verify: Verify
) -> None:
    # GIVEN a captured and applied table
    source_db.execute(
        "CREATE TABLE items (id int PRIMARY KEY, qty int, size text, note text)",
        "INSERT INTO items SELECT g, g * 10, 'S' || g, 'n' || g FROM generate_series(1, 8) g",
    )
    source_db.capture()
    assert all(r.equal for r in apply_and_verify(source_db))
    load = (source_db.bronze / "public" / "items" / "LOAD00000001.csv").read_text().splitlines()
    assert load[0] == "dms_commit_ts,id,qty,size,note,AR_H_CHANGE_SEQ"  # full load files have the header too

    # WHEN columns are added (nullable, then with a default), qty is widened and size dropped, with
    # inserts, updates and deletes before and after each change
    source_db.execute(
        "INSERT INTO items VALUES (9, 90, 'S9', 'before')",
        "UPDATE items SET note = 'touched' WHERE id = 1",
        "DELETE FROM items WHERE id = 2",
        "ALTER TABLE items ADD COLUMN color text",
        "INSERT INTO items VALUES (10, 100, 'S10', 'n10', 'red')",
        "UPDATE items SET color = 'blue' WHERE id = 3",
        "DELETE FROM items WHERE id = 4",
        "ALTER TABLE items ADD COLUMN score int DEFAULT 5",  # old rows show 5 at the source, unlogged
        "INSERT INTO items VALUES (11, 110, 'S11', 'n11', 'green', 7)",
        "UPDATE items SET score = 8 WHERE id = 3",
        "DELETE FROM items WHERE id = 9",
        "ALTER TABLE items ALTER COLUMN qty TYPE bigint",
        f"INSERT INTO items VALUES (12, {2**40}, 'S12', 'big', NULL, 1)",
        f"UPDATE items SET qty = {2**50} WHERE id = 1",
        "DELETE FROM items WHERE id = 10",
    )
    source_db.transaction(  # a DROP between two changes of one transaction: one file, both layouts
        "UPDATE items SET note = 'same txn' WHERE id = 5",
        "ALTER TABLE items DROP COLUMN size",
        "INSERT INTO items VALUES (13, 130, 'after drop', 'black', 2)",
    )
    source_db.execute(
        "UPDATE items SET note = 'after drop' WHERE id = 11",
        "DELETE FROM items WHERE id = 6",
        "INSERT INTO items VALUES (14, 140, 'last', NULL, DEFAULT)",
    )
    report = source_db.capture()
    results = apply_and_verify(source_db)

    # THEN capture wrote one header per file, a new file at each change of columns
    headers = _headers(source_db.bronze / "public" / "items")
    base, seq = ["Op", "dms_commit_ts", "id", "qty"], "AR_H_CHANGE_SEQ"
    assert headers == [
        [*base, "size", "note", seq],
        [*base, "size", "note", "color", seq],
        [*base, "size", "note", "color", "score", seq],
        [*base, "size", "note", "color", "score", seq],  # qty is bigint from here: a new file
        [*base, "size", "note", "color", "score", seq],  # the DROP transaction: the union of both
        [*base, "note", "color", "score", seq],
    ]
    assert report.cdc_files == 6
    # AND declared the new types in the table configuration before writing them
    assert load_config(source_db.config_path).table("public.items").columns == {
        "id": "int", "qty": "bigint", "size": "string", "note": "string", "color": "string", "score": "int",
    }  # fmt: skip
    # AND the engine added color and score, widened qty and kept size
    engine = _engine_of(apply_and_verify, source_db)
    silver = engine.spark.table(f"silver.{engine.config.database}.items")
    types = dict(silver.dtypes)
    assert (types["qty"], types["color"], types["score"], types["size"]) == ("bigint", "string", "int", "string")
    rows = {r["id"]: r for r in silver.collect()}
    assert rows[12]["qty"] == 2**40 and rows[1]["qty"] == 2**50
    assert rows[7]["size"] == "S7" and rows[7]["color"] is None  # untouched since the full load
    assert [rows[i]["size"] for i in (13, 11, 14)] == [None, None, None]  # written after the drop
    assert rows[5]["size"] == "S5"  # written before the drop, in the same transaction
    (schema_changes,) = [t.schema_changes for t in source_db.last_run.tables if t.table == "public.items"]
    assert set(schema_changes) == {
        "added column color string", "added column score int", "widened column qty from int to bigint",
    }  # fmt: skip
    # AND verify compares the source's columns (size is gone there): equal except the rows older than
    # ADD COLUMN score DEFAULT 5 and not written since, where the source shows 5 and silver NULL
    items = _by_table(results)["public.items"]
    assert not (items.missing or items.unexpected or items.different or items.problem), format_comparisons(results)
    assert items.unlogged_defaults == ["id=7", "id=8"]
    assert "default not in silver" in format_comparisons(results)

    # WHEN those rows are written again at the source
    source_db.execute("UPDATE items SET score = score WHERE id IN (7, 8)")
    source_db.capture()
    # THEN silver equals the source
    results = apply_and_verify(source_db)
    assert all(r.equal for r in results), format_comparisons(results)


def test_incompatible_type_change_quarantines_only_its_table(
    source_db: SourceDatabase, apply_and_verify: Verify
) -> None:
    # GIVEN three captured and applied tables
    source_db.execute(
        "CREATE TABLE texty (id int PRIMARY KEY, v int)",
        "CREATE TABLE dated (id int PRIMARY KEY, v int)",
        "CREATE TABLE other (id int PRIMARY KEY, w text)",
        "INSERT INTO texty SELECT g, g FROM generate_series(1, 3) g",
        "INSERT INTO dated SELECT g, g FROM generate_series(1, 3) g",
        "INSERT INTO other SELECT g, 'w' || g FROM generate_series(1, 3) g",
    )
    source_db.capture()
    assert all(r.equal for r in apply_and_verify(source_db))
    # WHEN texty.v becomes text and dated.v a date mid-workload, and other keeps changing after that
    source_db.execute(
        "UPDATE texty SET v = 10 WHERE id = 1",
        "INSERT INTO other VALUES (4, 'before')",
        "ALTER TABLE texty ALTER COLUMN v TYPE text",
        "INSERT INTO texty VALUES (4, 'four')",
        "ALTER TABLE dated ALTER COLUMN v TYPE date USING DATE '2024-01-01' + v",
        "UPDATE dated SET v = '2024-02-29' WHERE id = 2",
        "UPDATE other SET w = 'after' WHERE id = 1",
        "DELETE FROM other WHERE id = 2",
        "INSERT INTO other VALUES (5, 'after')",
    )
    source_db.capture()
    results = _by_table(apply_and_verify(source_db))
    # THEN the batches of texty and dated are quarantined with the reason; `cdclake run` exits 1
    report = source_db.last_run
    quarantined = {t.table: t.note for t in report.quarantined}
    assert quarantined == {
        "public.texty": "quarantined: column v changed type from int to string",
        "public.dated": "quarantined: column v changed type from int to date",
    }
    assert print_report(report) == 1
    engine = _engine_of(apply_and_verify, source_db)
    journal = engine.spark.table(f"silver.{engine.config.database}.{QUARANTINE_TABLE}").collect()
    # (texty's batch holds its file from before the change too: the whole batch waits)
    assert sorted((r["silver_table"], r["file_key"].rsplit("/", 1)[0]) for r in journal) == [
        ("dated", "public/dated"),
        ("texty", "public/texty"),
        ("texty", "public/texty"),
    ]
    assert {r["silver_table"]: r["reason"] for r in journal}["texty"] == "column v changed type from int to string"
    # AND the other table's changes, made after the type changes, were applied: it equals the source
    assert results["public.other"].equal, format_comparisons(list(results.values()))
    assert not results["public.texty"].equal and not results["public.dated"].equal

    # WHEN other changes again
    source_db.execute("UPDATE other SET w = 'later' WHERE id = 3")
    source_db.capture()
    results = _by_table(apply_and_verify(source_db))
    # THEN it keeps flowing while the quarantined files stay held: the run does not retry them
    # (a replay does), and the quarantine still lists them
    assert results["public.other"].equal, format_comparisons(list(results.values()))
    assert {t.table for t in source_db.last_run.tables if t.kind == "cdc"} == {"public.other"}
    assert len(engine.spark.table(f"silver.{engine.config.database}.{QUARANTINE_TABLE}").collect()) == 3

    # WHEN the advice every command gives is followed, word for word: the new types declared in the
    # configuration (capture did that already), the two tables loaded again by capture, then run and
    # a replay of the quarantine
    advice = type_change_advice("public.texty")
    assert "cdclake capture --reload public.texty" in advice and "replay --quarantined" in advice
    declared = yaml.safe_load(source_db.config_path.read_text("utf-8"))["tables"]
    assert (declared["public.texty"]["columns"]["v"], declared["public.dated"]["columns"]["v"]) == ("string", "date")
    source_db.execute("UPDATE texty SET v = 'after reload' WHERE id = 2")
    source_db.capture(reload=("public.texty", "public.dated"))
    apply_and_verify(source_db)
    engine = _engine_of(apply_and_verify, source_db)
    held = [t for t in engine.config.tables if t.source in ("public.texty", "public.dated")]
    assert replay(engine, ReplaySelection(quarantined=True), held).exit_code == 0
    # THEN silver has the new types, the quarantine is empty, and every table equals the source
    results = _by_table(apply_and_verify(source_db))
    assert all(r.equal for r in results.values()), format_comparisons(list(results.values()))
    silver = f"silver.{engine.config.database}"
    types = [
        {f.name: f.dataType.simpleString() for f in engine.spark.table(f"{silver}.{t}").schema}
        for t in ("texty", "dated")
    ]
    assert (types[0]["v"], types[1]["v"]) == ("string", "date")
    assert engine.spark.table(f"{silver}.{QUARANTINE_TABLE}").count() == 0
