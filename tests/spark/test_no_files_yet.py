"""A configured table nothing has arrived for: `run` says it loaded nothing and why, and `status`
says "no files yet" for it, never "up to date" with 0 rows."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from cdclake.context import Engine
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from cdclake.ops.status import NO_FILES, table_statuses
from cdclake.shells.commands.run import print_report
from cdclake.shells.status_view import table_state
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
    # THEN it says, per table, that nothing was loaded and why, and which tables have no files yet
    notes = {t.table: t.note for t in report.tables}
    assert notes["s.declared"].startswith("nothing loaded: bronze has no LOAD file under s/declared/")
    assert report.no_files == ["s.declared"]
    assert code == 0 and "no files yet for s.declared:" in printed
    # AND status: the loaded table is up to date, the other "no files yet" with the reason
    statuses = {s.source: s for s in table_statuses(engine)}
    assert statuses["s.arrived"].behind == "up to date" and statuses["s.arrived"].rows == 1
    assert statuses["s.declared"].exists and statuses["s.declared"].rows == 0
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
