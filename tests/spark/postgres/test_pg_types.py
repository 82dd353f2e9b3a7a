"""``init`` and ``capture`` agree on types: every value capture writes for a type loads into the type
init declares, without a bad row, and silver equals the database (``verify``: the database is the
oracle). One column per PostgreSQL type that has no plain Spark counterpart, with edge values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from cdclake.config import load_config
from cdclake.shells.cli import main
from cdclake.verify import compare as verify  # the engine-neutral comparison, whose silver reader is broken below
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison
from pg_every_type import MOOD, changes, create

SourceDatabase = Any  # conftest.SourceDatabase
Verify = Callable[[SourceDatabase], list[TableComparison]]


def test_every_type_init_maps_loads_what_capture_writes(source_db: SourceDatabase, apply_and_verify: Verify) -> None:
    # GIVEN a table with one column of each type that has no plain Spark counterpart, with edge values
    source_db.execute(MOOD, create("public.edge"))
    url = f"postgresql://postgres@127.0.0.1:{source_db.server.port}/{source_db.name}"
    # WHEN init writes the configuration, capture takes the full load and run applies it
    assert main(["-q", "--config", str(source_db.config_path), "init", "--source", url]) == 0
    declared = load_config(source_db.config_path).table("public.edge").columns
    assert (declared["amount"], declared["big"], declared["day"], declared["placed_at"]) == (
        "decimal(38,4)",  # DMS: MONEY -> NUMERIC(38,4)
        "string",  # unconstrained numeric: exact as text (DMS MapUnboundedNumericAsString)
        "date",
        "timestamp",
    )
    source_db.capture()
    results = apply_and_verify(source_db)
    # THEN no row is bad and silver equals the database
    assert source_db.last_run is not None and not source_db.last_run.quarantined
    assert [r.equal for r in results] == [True], format_comparisons(results)
    assert results[0].source_rows == 3

    # WHEN the same kinds of values arrive as CDC updates and an insert
    source_db.execute(*changes("public.edge"))
    source_db.capture()
    results = apply_and_verify(source_db)
    # THEN again no bad row, and silver equals the database
    assert source_db.last_run is not None and not source_db.last_run.quarantined
    assert [r.equal for r in results] == [True], format_comparisons(results)
    assert results[0].source_rows == 4


def test_verify_compares_exactly_names_the_differing_columns_and_never_crashes(
    source_db: SourceDatabase, apply_and_verify: Verify, monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN captured tables with network addresses (inet prints no /32, its ::text does)
    source_db.execute(
        "CREATE TABLE hosts (id int PRIMARY KEY, ip inet, net cidr, price numeric(10,2), note text)",
        "INSERT INTO hosts VALUES (1, '10.0.0.1', '10.0.0.0/8', 1.5, 'a'), (2, '2001:db8::1', '2001:db8::/32', 2, 'b'),"
        " (3, '::ffff:1.2.3.4', '::/0', NULL, NULL)",
        "CREATE TABLE gone (id int PRIMARY KEY)",
        "INSERT INTO gone VALUES (1)",
    )
    source_db.capture()
    # WHEN numeric columns are added with a default (PostgreSQL logs nothing for the rows before),
    # a row changes at the source after the last capture, and a configured table is dropped
    source_db.execute(
        "ALTER TABLE hosts ADD COLUMN score numeric DEFAULT 5",
        "ALTER TABLE hosts ADD COLUMN rate numeric(6,2) DEFAULT 5",
        "INSERT INTO hosts VALUES (4, '10.0.0.4', '10.0.0.0/24', 4, 'd', 7, 7)",
    )
    source_db.capture()
    source_db.execute("UPDATE hosts SET price = 9, note = 'changed' WHERE id = 2", "DROP TABLE gone")
    results = apply_and_verify(source_db)
    # THEN each table gets its verdict, no traceback: the network addresses are equal, the defaults
    # are named as such, the changed row with the columns that differ, the dropped table is skipped;
    # one summary line ends it
    report = format_comparisons(results)
    by_table = {r.table: r for r in results}
    hosts, gone = by_table["public.hosts"], by_table["public.gone"]
    assert hosts.unlogged_defaults == ["id=1", "id=3"] and hosts.different == ["id=2"], report
    assert hosts.differing_columns == {"id=2": ["price", "note", "score", "rate"]}, report
    assert not (hosts.missing or hosts.unexpected or hosts.problem), report
    assert gone.problem == "no such table at the source", report
    assert "content differs: id=2 (columns: price, note, score, rate)" in report
    assert report.splitlines()[-1] == "verify: 0 table(s) equal, 1 differing, 1 skipped"

    # WHEN reading one table fails outright
    def broken(*args: Any) -> Any:
        raise RuntimeError("silver unreadable")

    monkeypatch.setattr(verify, "_silver_rows", broken)
    results = apply_and_verify(source_db)
    # THEN that table is skipped with the reason, no traceback stops verify
    assert [r.problem for r in results] == [
        "no such table at the source",
        "could not be compared: RuntimeError: silver unreadable",
    ], format_comparisons(results)
