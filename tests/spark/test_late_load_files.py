"""LOAD files that arrive after a table was loaded are never ignored: they complete the load, are a
DMS reload that replaces the table, or are refused with the command to run; `status` lists them."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from cdclake.context import Engine
from cdclake.dms.store import list_bronze
from cdclake.dms.writer import write_csv
from cdclake.engine.run import apply_pending, full_load, run
from cdclake.lake.tables import table_names
from cdclake.ops.status import table_statuses
from cdclake.shells.commands.run import print_report
from configs import keyed_tables

EngineFactory = Callable[..., Engine]

CONFIG = keyed_tables("s.empty_first", "s.two_parts", "s.reloaded", "s.mixed")


def _rows(engine: Engine, table: str) -> dict[int, str]:
    return {r["id"]: r["name"] for r in engine.spark.table(f"silver.{engine.config.database}.{table}").collect()}


def test_load_files_after_a_run_are_loaded_reloaded_or_refused(
    make_engine: EngineFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bronze = tmp_path / "bronze" / "s"
    day1, day2, day3 = "2024-01-01 00:00:00.000000", "2024-01-02 00:00:00.000000", "2024-01-03 00:00:00.000000"
    # GIVEN a first run: s.empty_first with no file yet (no silver table then); s.two_parts with the first LOAD file
    # of its load; s.reloaded and s.mixed loaded and then changed by CDC
    write_csv(bronze / "two_parts" / "LOAD00000001.csv", [[day1, "1", "x"]])
    write_csv(bronze / "reloaded" / "LOAD00000001.csv", [[day1, "1", "a"], [day1, "2", "b"]])
    write_csv(bronze / "reloaded" / "20240102-0000000000.csv", [["U", day2, "1", "a2"], ["I", day2, "3", "c"]])
    write_csv(bronze / "mixed" / "LOAD00000001.csv", [[day1, "1", "m"]])
    write_csv(bronze / "mixed" / "20240102-0000000000.csv", [["U", day2, "1", "m2"]])
    engine = make_engine(CONFIG)
    run(engine).checked()
    assert "empty_first" not in table_names(engine.spark, engine.catalog, engine.config.database)
    assert _rows(engine, "reloaded") == {1: "a2", 2: "b", 3: "c"}
    # WHEN LOAD files arrive: s.empty_first's load; s.two_parts's second file; a DMS reload of
    # s.reloaded (LOAD00000001 written again on day 3, then a CDC file after it, and one written
    # before the reload that arrives late); a lone LOAD00000002 beside s.mixed's loaded file
    write_csv(bronze / "empty_first" / "LOAD00000001.csv", [[day1, "1", "p"], [day1, "2", "q"]])
    write_csv(bronze / "two_parts" / "LOAD00000002.csv", [[day1, "2", "y"]])
    write_csv(bronze / "reloaded" / "LOAD00000001.csv", [[day3, "1", "a3"], [day3, "2", "b"], [day3, "4", "d"]])
    write_csv(bronze / "reloaded" / "20240102-1200000000.csv", [["U", "2024-01-02 12:00:00.000000", "1", "stale"]])
    write_csv(bronze / "reloaded" / "20240103-1200000000.csv", [["U", "2024-01-03 12:00:00.000000", "2", "b4"]])
    write_csv(bronze / "mixed" / "LOAD00000002.csv", [[day1, "2", "n"]])
    write_csv(bronze / "mixed" / "20240104-0000000000.csv", [["U", "2024-01-04 00:00:00.000000", "1", "m3"]])
    before = {s.source: s for s in table_statuses(engine)}
    report = run(engine)
    exit_code = print_report(report)
    printed = capsys.readouterr()
    after = {s.source: s for s in table_statuses(engine)}
    # THEN status listed the LOAD files no load holds, with what loads them
    assert {t: s.unloaded_load_files for t, s in before.items()} == {
        "s.empty_first": "",  # not loaded at all yet: its load is simply due
        "s.two_parts": "LOAD00000002.csv",
        "s.reloaded": "LOAD00000001.csv",
        "s.mixed": "LOAD00000002.csv",
    }
    assert before["s.empty_first"].behind == "not loaded: 1 full-load and 0 CDC files in bronze"
    assert before["s.mixed"].behind.startswith(
        "LOAD file(s) not loaded: LOAD00000002.csv (beside loaded ones, after CDC: `cdclake run` says what to do)"
    )
    # AND the run loaded the late load and the second part, each table replaced with all its files
    assert _rows(engine, "empty_first") == {1: "p", 2: "q"}
    assert _rows(engine, "two_parts") == {1: "x", 2: "y"}
    # AND the reload replaced s.reloaded (key 3 is gone), the CDC written before it is superseded
    # (recorded, not applied) and the CDC after it applied
    assert _rows(engine, "reloaded") == {1: "a3", 2: "b4", 4: "d"}
    reloaded = [t for t in report.tables if t.table == "s.reloaded"]
    assert [(t.kind, t.files_applied, t.files_skipped) for t in reloaded] == [("full-load", 1, 2), ("cdc", 1, 0)]
    assert reloaded[0].note == (
        "a reload: LOAD files written again since the full load replace the table: LOAD00000001.csv"
    )
    # AND s.mixed is refused with one sentence and the command to run, exit 2, nothing applied
    # (neither the LOAD file nor its CDC file)
    assert exit_code == 2
    assert printed.err.strip() == (
        "cdclake: s.mixed: Table s.mixed: bronze holds LOAD files its full load did not (LOAD00000002.csv) "
        "beside ones it loaded (LOAD00000001.csv), and CDC files were applied since, so they are either a late "
        "part of the old load or a reload beside stale files; nothing was applied: if the LOAD files in bronze "
        "are the table's whole content now, run `cdclake full-load --table s.mixed --reload`, else remove the "
        "stray ones."
    )
    assert _rows(engine, "mixed") == {1: "m2"}
    # AND afterwards status says the loaded tables are up to date, and still lists s.mixed's file
    assert {t: (s.unloaded_load_files, s.behind) for t, s in after.items() if t != "s.mixed"} == {
        "s.empty_first": ("", "up to date"),
        "s.two_parts": ("", "up to date"),
        "s.reloaded": ("", "up to date"),
    }
    assert after["s.mixed"].unloaded_load_files == "LOAD00000002.csv"
    # AND a second run changes nothing of the loaded tables (no load again)
    again = run(engine)
    assert [t.table for t in again.tables if t.files_applied] == []
    assert [f.table for f in again.failures] == ["s.mixed"]


def test_a_load_file_rewritten_in_place_with_the_same_size_reloads_the_table(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a table loaded from LOAD00000001.csv and changed by a CDC file
    load = tmp_path / "bronze" / "s" / "reloaded" / "LOAD00000001.csv"
    day1, day2 = "2024-01-01 00:00:00.000000", "2024-01-02 00:00:00.000000"
    write_csv(load, [[day1, "1", "a"], [day1, "2", "b"]])
    write_csv(load.parent / "20240102-0000000000.csv", [["U", day2, "1", "a2"]])
    engine = make_engine(CONFIG)
    run(engine).checked()
    assert _rows(engine, "reloaded") == {1: "a2", 2: "b"}
    # WHEN the LOAD file is written again in place, same name and same size, new content (the
    # "start from scratch" recovery: the source was loaded again), a second later
    size = load.stat().st_size
    day3 = "2024-01-03 00:00:00.000000"
    write_csv(load, [[day3, "1", "z"], [day3, "3", "c"]])
    stamp = load.stat().st_mtime_ns + 1_000_000_000
    os.utime(load, ns=(stamp, stamp))
    assert load.stat().st_size == size
    status = next(s for s in table_statuses(engine) if s.source == "s.reloaded")
    report = run(engine).checked()
    # THEN status saw it as not loaded, and the run reloaded the table from it: silver holds the
    # new content (the CDC file written before the reload is superseded, not applied over it)
    assert status.unloaded_load_files == "LOAD00000001.csv"
    (reload,) = [t for t in report.tables if t.table == "s.reloaded"]
    assert reload.note.startswith("a reload: LOAD files written again"), reload.note
    assert _rows(engine, "reloaded") == {1: "z", 3: "c"}
    assert next(s for s in table_statuses(engine) if s.source == "s.reloaded").behind == "up to date"


LANES = keyed_tables("s.reloaded", "s.other")


def test_the_cdc_lane_leaves_a_reload_to_the_full_load_lane_and_goes_on_with_the_others(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    bronze = tmp_path / "bronze" / "s"
    day1, day2, day3 = "2024-01-01 00:00:00.000000", "2024-01-02 00:00:00.000000", "2024-01-03 00:00:00.000000"
    # GIVEN two tables loaded and changed by CDC
    for table in ("reloaded", "other"):
        write_csv(bronze / table / "LOAD00000001.csv", [[day1, "1", "a"], [day1, "2", "b"]])
        write_csv(bronze / table / "20240102-0000000000.csv", [["U", day2, "1", "a2"], ["I", day2, "3", "c"]])
    engine = make_engine(LANES)
    run(engine).checked()
    # WHEN a DMS reload of s.reloaded arrives (its LOAD file written again, a CDC file from before the
    # reload and one after it) while s.other receives a CDC file, and the CDC lane runs
    write_csv(bronze / "reloaded" / "LOAD00000001.csv", [[day3, "1", "a3"], [day3, "2", "b"], [day3, "4", "d"]])
    write_csv(bronze / "reloaded" / "20240102-1200000000.csv", [["U", "2024-01-02 12:00:00.000000", "1", "stale"]])
    write_csv(bronze / "reloaded" / "20240103-1200000000.csv", [["U", "2024-01-03 12:00:00.000000", "2", "b4"]])
    write_csv(bronze / "other" / "20240103-0000000000.csv", [["U", day3, "2", "b5"]])
    report, states = apply_pending(engine, list_bronze(engine.store), loads=False)
    # THEN s.other's file is applied; s.reloaded is not loaded, its load is reported pending with
    # why, and its CDC waits (nothing of it applied, its state not handed on)
    assert report.failures == []
    assert _rows(engine, "other") == {1: "a2", 2: "b5", 3: "c"}
    assert report.loads_pending == {
        "s.reloaded": "a reload: LOAD files written again since the full load replace the table: LOAD00000001.csv"
    }
    assert _rows(engine, "reloaded") == {1: "a2", 2: "b", 3: "c"}
    assert "s.reloaded" not in states
    # WHEN the full-load lane loads the tables asked for, and the CDC lane runs again
    [reloaded] = [t for t in engine.config.tables if t.source == "s.reloaded"]
    full_load(engine, [reloaded]).checked()
    again, _ = apply_pending(engine, list_bronze(engine.store), loads=False)
    # THEN the reload replaced the table, the CDC written before it is superseded, the later applied once
    assert again.loads_pending == {}
    assert _rows(engine, "reloaded") == {1: "a3", 2: "b4", 4: "d"}
    assert [(t.table, t.kind, t.files_applied) for t in again.tables if t.files_applied] == [("s.reloaded", "cdc", 1)]
