"""Large values: an update that leaves a TOASTed value unchanged on a table without REPLICA IDENTITY
FULL cannot be captured (PostgreSQL does not log the value). That table is held, with the fix; the
other tables go on being captured; ``init --check`` warns about such tables up front.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cdclake.context import Engine
from cdclake.ops.status import table_statuses
from cdclake.ops.table_status import HELD_BY_CAPTURE
from cdclake.shells.cli import main
from cdclake.shells.status_view import table_state
from cdclake.sources.postgres.state import capture_holds
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison

SourceDatabase = Any  # conftest.SourceDatabase
Verify = Callable[[SourceDatabase], list[TableComparison]]

BIG = "(SELECT string_agg(md5(g::text), '') FROM generate_series(1, 200) g)"  # 6400 characters


def _engine_of(apply_and_verify: Verify, db: SourceDatabase) -> Engine:
    """The engine ``apply_and_verify`` applied ``db``'s files with."""
    cells = apply_and_verify.__closure__ or ()  # type: ignore[attr-defined]
    engines = next(c.cell_contents for c in cells if isinstance(c.cell_contents, dict))
    return engines[db.name]  # type: ignore[no-any-return]


def test_an_unlogged_large_value_holds_its_table_and_capture_goes_on_for_the_others(
    source_db: SourceDatabase, apply_and_verify: Verify, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN a table whose large text is stored out of line (TOAST), with the default replica
    # identity, and an ordinary table, both captured and applied
    source_db.execute(
        "CREATE TABLE docs (id int PRIMARY KEY, body text, version int)",
        "ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL",  # out of line, uncompressed
        f"INSERT INTO docs VALUES (1, {BIG}, 1), (2, 'small', 1)",
        "CREATE TABLE other (id int PRIMARY KEY, v int)",
        "INSERT INTO other VALUES (1, 1)",
    )
    url = f"postgresql://postgres@127.0.0.1:{source_db.server.port}/{source_db.name}"
    config = ["-q", "--config", str(source_db.config_path)]
    # AND init --check warns up front that docs needs REPLICA IDENTITY FULL
    assert main([*config, "init", "--source", url]) == 0
    capsys.readouterr()
    assert main([*config, "init", "--source", url, "--check"]) == 0  # no drift: a warning, not a failure
    warning = capsys.readouterr().out
    assert "public.docs" in warning and "ALTER TABLE public.docs REPLICA IDENTITY FULL" in warning
    assert "public.other" not in warning  # no column that can be TOASTed
    source_db.capture()

    # WHEN an update leaves the large value unchanged (PostgreSQL logs it as "unchanged TOAST"),
    # and both tables change around it
    source_db.execute(
        "UPDATE other SET v = 2 WHERE id = 1",
        "UPDATE docs SET version = 2 WHERE id = 2",  # small value: logged, captured
        "UPDATE docs SET version = 2 WHERE id = 1",  # large value unchanged: not logged
        "UPDATE docs SET version = 3 WHERE id = 2",
        "INSERT INTO other VALUES (2, 2)",
    )
    report = source_db.capture()
    # THEN capture holds docs from that update on, with the reason and the fix, and captures other
    assert list(report.held) == ["public.docs"]
    assert "REPLICA IDENTITY FULL" in report.held["public.docs"] and "body" in report.held["public.docs"]
    assert report.held_changes == 2  # the unlogged update and the later change of docs
    results = {r.table: r for r in apply_and_verify(source_db)}
    assert results["public.other"].equal, format_comparisons(list(results.values()))
    # AND docs stays as it was before the held update (its earlier change applied), named as differing
    docs = results["public.docs"]
    assert docs.different == ["id=1", "id=2"] and docs.differing_columns["id=1"] == ["version"]
    # AND status, reading the capture state, says docs is held by capture with capture's reason
    # (silver has applied every file bronze holds of it: without the state it would be "up to date")
    holds = capture_holds(source_db.settings().state_dir, source_db.config_path)
    engine = _engine_of(apply_and_verify, source_db)
    statuses = {s.source: s for s in table_statuses(engine, capture_holds=holds)}
    assert statuses["public.docs"].behind == f"{HELD_BY_CAPTURE}: {report.held['public.docs']}"
    assert table_state(statuses["public.docs"]) == HELD_BY_CAPTURE
    assert statuses["public.other"].behind == "up to date"
    assert {s.source: s.behind for s in table_statuses(engine)}["public.docs"] == "up to date"

    # WHEN capture runs again (the command line), with more changes to both tables
    source_db.execute("UPDATE docs SET version = 4 WHERE id = 2", "UPDATE other SET v = 3 WHERE id = 2")
    settings = source_db.settings()
    code = main([
        "-q", "--config", str(source_db.config_path), "--bronze", str(source_db.bronze), "capture",
        "--source", source_db.dsn, "--state-dir", str(settings.state_dir), "--slot", settings.slot,
    ])  # fmt: skip
    # THEN the hold is reported again (exit code 1), docs stays held, other is captured
    assert code == 1
    assert "capture: table public.docs held:" in capsys.readouterr().err
    results = {r.table: r for r in apply_and_verify(source_db)}
    assert results["public.other"].equal and not results["public.docs"].equal

    # WHEN the fix is applied as the hold says: REPLICA IDENTITY FULL, then capture --reload docs
    assert "cdclake capture --reload public.docs" in report.held["public.docs"]
    # (a row inserted while docs was held reaches silver only through the reload)
    source_db.execute("INSERT INTO docs VALUES (3, 'during the hold', 1)")
    assert main(capture_cli(source_db)) == 1  # still held: the insert is not captured
    source_db.execute("ALTER TABLE docs REPLICA IDENTITY FULL", "UPDATE other SET v = 4 WHERE id = 1")
    reload = [*capture_cli(source_db), "--reload", "public.docs"]
    assert main(reload) == 0
    # AND a later update that leaves the large value unchanged is captured (logged whole now)
    source_db.execute("UPDATE docs SET version = 5 WHERE id = 1", "UPDATE docs SET version = 6 WHERE id = 2")
    assert main(capture_cli(source_db)) == 0
    # THEN run loads docs again from its new LOAD files and applies the changes after them: both equal
    results = {r.table: r for r in apply_and_verify(source_db)}
    assert all(r.equal for r in results.values()), format_comparisons(list(results.values()))
    # AND a reload of a table the configuration does not name exits 2 naming it
    assert main([*capture_cli(source_db), "--reload", "public.nope"]) == 2
    assert "public.nope" in capsys.readouterr().err


def capture_cli(source_db: SourceDatabase) -> list[str]:
    settings = source_db.settings()
    return [
        "-q", "--config", str(source_db.config_path), "--bronze", str(source_db.bronze), "capture",
        "--source", source_db.dsn, "--state-dir", str(settings.state_dir), "--slot", settings.slot,
    ]  # fmt: skip


def test_init_warns_only_about_columns_whose_values_can_be_large(
    source_db: SourceDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN keyed tables whose columns are bounded and small (numeric(12,2), varchar(100), inet,
    # a date range, a domain over numeric(10,2)) and one with columns that can hold large values
    source_db.execute(
        "CREATE DOMAIN price AS numeric(10,2)",
        "CREATE TABLE orders (id int PRIMARY KEY, total numeric(12,2), code varchar(100), ip inet, "
        "period daterange, net price, flag char(3))",
        "CREATE TABLE notes (id int PRIMARY KEY, body text, data jsonb, tags text[], ratio numeric, "
        "title varchar(600), short varchar(20), untyped varchar, span numrange, raw bytea)",
    )
    url = f"postgresql://postgres@127.0.0.1:{source_db.server.port}/{source_db.name}"
    config = ["-q", "--config", str(source_db.config_path)]
    assert main([*config, "init", "--source", url]) == 0
    capsys.readouterr()
    # WHEN init --check reads the catalog
    assert main([*config, "init", "--source", url, "--check"]) == 0
    warning = capsys.readouterr().out
    # THEN it warns about notes' unbounded columns only: not numeric(12,2) and the other small ones
    assert "public.orders" not in warning, warning
    assert "column(s) body, data, tags, ratio, title, untyped, span, raw can hold large (TOASTed) values" in warning
