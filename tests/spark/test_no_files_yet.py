"""A configured table nothing has arrived for: `run` says it loaded nothing and why, and `status`
says "no files yet" for it, never "up to date" with 0 rows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import full_load, run
from cdclake.errors import ConfigError
from cdclake.lake.tables import table_names
from cdclake.ops.status import table_statuses
from cdclake.ops.table_status import NO_FILES
from cdclake.shells.commands.run import print_report
from cdclake.shells.status_view import compact_tables, table_state
from configs import keyed_tables

EngineFactory = Callable[..., Engine]

CONFIG = keyed_tables("s.arrived", "s.declared")


def test_tables_without_files_load_nothing_say_why_and_are_not_up_to_date(
    make_engine: EngineFactory, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN LOAD files for s.arrived only; s.declared (columns declared) has none
    write_csv(tmp_path / "bronze" / "s" / "arrived" / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "a"]])
    engine = make_engine(CONFIG)
    # WHEN run applies bronze
    report = run(engine)
    code = print_report(report)
    printed = capsys.readouterr().out
    # THEN it says which tables have no files yet and that nothing was loaded for them; it created no
    # silver table for them (an empty one would claim an empty source, and a mistyped name's would stay)
    assert [t.table for t in report.tables] == ["s.arrived"]
    assert report.no_files == ["s.declared"]
    assert code == 0 and "no files yet for s.declared:" in printed
    assert "no silver table created until one arrives" in printed
    assert table_names(engine.spark, engine.catalog, engine.config.database) >= {"arrived"}
    assert "declared" not in table_names(engine.spark, engine.catalog, engine.config.database)
    # AND status: the loaded table is up to date, the other "no files yet" with the reason
    statuses = {s.source: s for s in table_statuses(engine)}
    assert statuses["s.arrived"].behind == "up to date" and statuses["s.arrived"].rows == 1
    assert not statuses["s.declared"].exists and statuses["s.declared"].rows is None
    assert table_state(statuses["s.declared"]) == NO_FILES
    assert statuses["s.declared"].behind.startswith(f"{NO_FILES}: bronze has no LOAD or CDC file under s/declared/")
    # AND a second run, with still nothing for them, says so again instead of "nothing to apply" alone
    print_report(run(engine))
    assert "no files yet for s.declared:" in capsys.readouterr().out
    # AND once a CDC file arrives and is applied, the table is no longer "no files yet"
    change = ["I", "2024-01-02 00:00:00.000000", "2", "b"]
    write_csv(tmp_path / "bronze" / "s" / "declared" / "20240102-0000000000.csv", [change])
    run(engine).checked()
    declared = next(s for s in table_statuses(engine) if s.source == "s.declared")
    assert (declared.rows, declared.behind, table_state(declared)) == (1, "up to date", "up to date")


def test_a_mistyped_table_is_refused_and_a_stray_silver_table_is_shown(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN bronze with files of s.products and s.orders, and a configuration that misspells one (s.prodcuts)
    bronze = tmp_path / "bronze" / "s"
    write_csv(bronze / "products" / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "tea"]])
    write_csv(bronze / "orders" / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "10", "first"]])
    engine = make_engine(keyed_tables("s.prodcuts", "s.orders"))
    # WHEN run applies bronze
    # THEN it refuses in one sentence naming the configured table and the files it probably means,
    # and applies nothing: no silver table exists
    with pytest.raises(ConfigError) as refused:
        run(engine)
    assert str(refused.value) == (
        "No file in bronze for the configured table(s) s.prodcuts (bronze has files of s.products, which no table "
        "configures): a mistyped name? Fix it in the configuration; nothing was applied."
    )
    assert table_names(engine.spark, engine.catalog, engine.config.database) == frozenset()
    # GIVEN a silver table the mistyped name got all the same (an explicit full load creates it empty)
    full_load(engine, [engine.config.table("s.prodcuts")])
    # WHEN the name is fixed and run applies bronze
    fixed = make_engine(keyed_tables("s.products", "s.orders"))
    fixed = replace(fixed, config=replace(fixed.config, database=engine.config.database))
    run(fixed).checked()
    # THEN status lists the stray table too, marked "not configured", with what to do about it
    statuses = {s.source: s for s in table_statuses(fixed)}
    assert list(statuses) == ["s.products", "s.orders", "prodcuts"]
    assert statuses["s.products"].behind == "up to date" and statuses["s.products"].rows == 1
    stray = statuses["prodcuts"]
    assert (stray.exists, stray.rows, stray.not_configured, table_state(stray)) == (
        True,
        0,
        "not configured",
        "not configured",
    )
    assert stray.behind.startswith("not configured: no configured table writes this silver table")
    assert compact_tables(list(statuses.values())).splitlines()[-1].startswith("prodcuts: not configured: ")
