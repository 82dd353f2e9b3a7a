"""Changes of one key at the same commit time, in one file, with no change sequence (a transaction
that updates then deletes a row, without DMS's AR_H_CHANGE_SEQ): silver applies them in file order,
and history keeps every one of them as a version of its own, in that order."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from cdclake.lake.history import history_of

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {timestamp_column: ts}
tables:
  s.items: {primary_key: [id], columns: {id: int, name: string}, history: true}
"""
T0, T1 = "2024-01-01 00:00:00.000000", "2024-01-02 00:00:00.000000"


def test_changes_of_one_key_at_one_instant_are_each_a_version_in_file_order(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a loaded table with history, then one file in which a transaction updates and deletes
    # id 1 and inserts and updates id 2, all at the same commit time and with no change sequence
    engine = make_engine(CONFIG)
    folder = tmp_path / "bronze" / "s" / "items"
    write_csv(folder / "LOAD00000001.csv", [[T0, "1", "a1"], [T0, "3", "a3"]])
    run(engine).checked()
    changes = [["U", T1, "1", "b1"], ["D", T1, "1", "b1"], ["I", T1, "2", "x2"], ["U", T1, "2", "y2"]]
    write_csv(folder / "20240102-0000000000.csv", changes)
    # WHEN the run applies it (twice: the second finds nothing new)
    run(engine).checked()
    run(engine).checked()
    # THEN silver holds the file's last change of each key
    silver = engine.silver_table(engine.config.tables[0])
    rows = engine.spark.table(silver.identifier).collect()
    assert sorted((r["id"], r["name"]) for r in rows) == [(2, "y2"), (3, "a3")]
    # AND history holds every change once, in file order, the current rows silver's
    history = engine.spark.table(history_of(silver).identifier).orderBy("id", "_cdc_order").collect()
    versions = [(r["id"], r["operation"], r["name"], r["is_current"]) for r in history]
    assert versions == [
        (1, "I", "a1", False),
        (1, "U", "b1", False),
        (1, "D", "b1", False),
        (2, "I", "x2", False),
        (2, "U", "y2", True),
        (3, "I", "a3", True),
    ]
