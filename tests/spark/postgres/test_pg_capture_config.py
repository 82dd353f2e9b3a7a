"""The local PostgreSQL path as one tool: ``init`` -> ``capture`` -> ``run`` -> ``verify`` through the
command line, on two schemas with the same table names and names DMS writes (spaces, hyphens, mixed
case), with no hand edit of the configuration. The oracle is the source database (``verify``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import yaml

import pg_every_type
from cdclake.config import load_config
from cdclake.shells.cli import main
from cdclake.sources.postgres import snapshot
from cdclake.verify.report import format_comparisons
from cdclake.verify.result import TableComparison

SourceDatabase = Any  # conftest.SourceDatabase
Verify = Callable[[SourceDatabase], list[TableComparison]]

# Tables of this name in both schemas, 5 rows each: with erp."Order Lines", hr."MixedCase" and a
# table with a column of every type in each schema (pg_every_type), 40 tables, as the database
# whose trial this scenario follows.
SAME_NAMES = tuple(f"t{i:02d}" for i in range(1, 19))
TABLES = 2 * len(SAME_NAMES) + 4

SCHEMA = "\n".join(
    [
        "CREATE SCHEMA erp; CREATE SCHEMA hr;",
        pg_every_type.MOOD,
        pg_every_type.create("erp.edge"),
        pg_every_type.create("hr.edge"),
        *(
            f"CREATE TABLE {schema}.{name} (id int PRIMARY KEY, v text);"
            f"INSERT INTO {schema}.{name} SELECT g, '{schema} ' || g FROM generate_series(1, 5) g;"
            for schema in ("erp", "hr")
            for name in SAME_NAMES
        ),
        'CREATE TABLE erp."Order Lines" ("Order Id" int, "line-no" int, "Unit Price" numeric(10,2), '
        '"Note" text, PRIMARY KEY ("Order Id", "line-no"));',
        """INSERT INTO erp."Order Lines" VALUES (1, 1, 9.99, 'first'), (1, 2, 0.01, NULL);""",
        'CREATE TABLE hr."MixedCase" ("Id" int PRIMARY KEY, "Label" text);',
        """INSERT INTO hr."MixedCase" VALUES (1, 'one');""",
        "CREATE TABLE erp.tmp_import (id int PRIMARY KEY);",  # left out by --exclude
        "CREATE TABLE public.other (id int PRIMARY KEY);",  # left out by --include
    ]
)


def _url(db: SourceDatabase) -> str:
    return f"postgresql://postgres@127.0.0.1:{db.server.port}/{db.name}"


def _cli(*args: str) -> int:
    return main(["-q", *args])


def test_init_on_two_schemas_with_the_same_table_names_writes_distinct_targets(
    source_db: SourceDatabase, capsys: pytest.CaptureFixture[str]
) -> None:
    # GIVEN two schemas with the same table names
    source_db.execute(SCHEMA)
    config = ["--config", str(source_db.config_path)]
    # WHEN init configures both schemas
    assert _cli(*config, "init", "--source", _url(source_db), "--include", "erp.*", "--include", "hr.*",
                "--exclude", "*.tmp_*") == 0  # fmt: skip
    # THEN every table has its own silver table, and init says which names it made up
    written = load_config(source_db.config_path)
    targets = {t.source: t.target for t in written.tables}
    assert targets["erp.t01"] == "erp_t01" and targets["hr.t01"] == "hr_t01"
    assert targets["erp.Order Lines"] == "Order Lines" and targets["hr.MixedCase"] == "MixedCase"
    assert len(set(targets.values())) == len(targets) == TABLES
    assert "hr.t01 goes to silver table hr_t01" in capsys.readouterr().out
    # AND --check remembers the globs init was given: no drift without repeating them
    assert _cli(*config, "init", "--source", _url(source_db), "--check") == 0
    # WHEN two new same-named tables and one named like an existing table appear, and --add-new adds them
    source_db.execute(
        "CREATE TABLE erp.later (id int PRIMARY KEY)",
        "CREATE TABLE hr.later (id int PRIMARY KEY)",
        'CREATE TABLE hr."Order Lines" (id int PRIMARY KEY)',
    )
    assert _cli(*config, "init", "--source", _url(source_db), "--check") == 1
    assert _cli(*config, "init", "--source", _url(source_db), "--add-new") == 0
    # THEN the file still loads (every command reads it), with distinct targets for the new tables
    targets = {t.source: t.target for t in load_config(source_db.config_path).tables}
    assert (targets["erp.later"], targets["hr.later"]) == ("erp_later", "hr_later")
    assert targets["hr.Order Lines"] == "hr_Order Lines" and targets["erp.Order Lines"] == "Order Lines"
    assert _cli(*config, "init", "--source", _url(source_db), "--check") == 0


def test_capture_follows_the_configuration_from_any_directory_and_takes_tables_added_later(
    source_db: SourceDatabase,
    apply_and_verify: Verify,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN a configuration init wrote for two schemas with the same table names and awkward names
    source_db.execute(SCHEMA)
    project, elsewhere = source_db.workdir, source_db.workdir / "elsewhere"
    elsewhere.mkdir()
    source = ["--source", _url(source_db), "--slot", source_db.settings().slot]
    monkeypatch.chdir(project)
    assert _cli("--config", "cdclake.yaml", "init", *source[:2], "--include", "erp.*", "--include", "hr.*",
                "--exclude", "*.tmp_*") == 0  # fmt: skip
    capsys.readouterr()

    # WHEN capture runs from the configuration's directory: slot + full load of every configured table
    assert _cli("--config", "cdclake.yaml", "capture", *source) == 0
    rows = 2 * len(SAME_NAMES) * 5 + 3 + 2 * pg_every_type.ROWS
    assert f"full load files={TABLES} rows={rows}" in capsys.readouterr().out
    assert (project / "bronze" / "erp" / "Order Lines").is_dir() and (project / "bronze" / "hr" / "MixedCase").is_dir()
    source_db.execute(
        *(f"UPDATE {s}.{n} SET v = 'changed' WHERE id = 2" for s in ("erp", "hr") for n in SAME_NAMES),
        *pg_every_type.changes("erp.edge"),
        *pg_every_type.changes("hr.edge"),
        """UPDATE erp."Order Lines" SET "Unit Price" = 10.5, "Note" = 'two' WHERE "line-no" = 1""",
        """INSERT INTO hr."MixedCase" VALUES (2, 'two')""",
        "DELETE FROM hr.t03 WHERE id = 5",
    )
    # AND again from another directory, naming the same file: same bronze, same state, no second full load
    monkeypatch.chdir(elsewhere)
    config = ["--config", "../cdclake.yaml"]
    assert _cli(*config, "capture", *source) == 0
    # (a change in each table; hr.t03's delete, and three more in each every-type table)
    assert f"full load files=0 rows=0; cdc files={TABLES} changes={TABLES + 7}" in capsys.readouterr().out
    assert list(elsewhere.iterdir()) == []
    # AND a capture with a state directory that does not own the slot stops instead of dropping it
    source_db.execute("UPDATE erp.t02 SET v = 'while refused' WHERE id = 1")
    assert _cli(*config, "capture", *source, "--state-dir", "other-state") == 2
    refusal = capsys.readouterr().err
    assert f"belongs to the capture of the state directory {project / '.cdclake' / 'capture'}" in refusal, refusal
    # AND a table that is not configured is named, with exit 2
    assert _cli(*config, "capture", *source, "--table", "erp.nope") == 2
    assert "erp.nope" in capsys.readouterr().err
    results = apply_and_verify(source_db)
    assert len(results) == TABLES and [r.table for r in results if not r.equal] == ["erp.t02"]  # not captured yet

    # WHEN tables appear at the source, init --add-new configures them and capture runs again
    source_db.execute(
        "CREATE TABLE erp.later (id int PRIMARY KEY, v text)",
        'CREATE TABLE hr."later-on" (k text PRIMARY KEY)',
        "CREATE TABLE hr.later_log (n int)",  # keyless: append-only, so a row taken twice shows
        "INSERT INTO erp.later SELECT g, 'before ' || g FROM generate_series(1, 3) g",
        """INSERT INTO hr."later-on" VALUES ('a')""",
        "INSERT INTO hr.later_log VALUES (1)",
    )
    assert _cli(*config, "init", *source[:2], "--add-new") == 0
    capsys.readouterr()
    # (a row committed after the tables are published and before their snapshot is taken: it is in
    # the LOAD file and in the slot's changes, and must be written once)
    real_connect = snapshot.connect

    def connect_after_a_commit(dsn: str, replication: bool = False) -> Any:
        if replication:
            source_db.execute("INSERT INTO hr.later_log VALUES (2)")
        return real_connect(dsn, replication)

    monkeypatch.setattr(snapshot, "connect", connect_after_a_commit)
    assert _cli(*config, "capture", *source) == 0
    assert "full load files=3 rows=6" in capsys.readouterr().out
    source_db.execute(
        "UPDATE erp.later SET v = 'after' WHERE id = 1",
        "INSERT INTO erp.later VALUES (4, 'after')",
        """DELETE FROM hr."later-on" WHERE k = 'a'""",
        "INSERT INTO hr.later_log VALUES (3)",
        "UPDATE erp.t01 SET v = 'last' WHERE id = 1",
    )
    assert _cli(*config, "capture", *source) == 0
    # THEN silver equals the source: every table, the update made while capture refused included
    results = apply_and_verify(source_db)
    assert len(results) == TABLES + 3 and all(r.equal for r in results), format_comparisons(results)
    rows = {r.table: r.source_rows for r in results}
    assert (rows["erp.later"], rows["hr.later-on"], rows["hr.later_log"], rows["hr.t03"]) == (4, 0, 3, 4)


def test_a_table_taken_out_of_the_configuration_is_no_longer_captured_and_comes_back_whole(
    source_db: SourceDatabase,
    apply_and_verify: Verify,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # GIVEN two captured and applied tables
    source_db.execute(
        "CREATE TABLE kept (id int PRIMARY KEY, v text)",
        "CREATE TABLE dropped (id int PRIMARY KEY, v text)",
        "INSERT INTO kept VALUES (1, 'a')",
        "INSERT INTO dropped VALUES (1, 'a'), (2, 'b')",
    )
    monkeypatch.chdir(source_db.workdir)
    source = ["--source", _url(source_db), "--slot", source_db.settings().slot]
    config = ["--config", "cdclake.yaml"]
    assert _cli(*config, "init", *source[:2]) == 0
    assert _cli(*config, "capture", *source) == 0
    assert all(r.equal for r in apply_and_verify(source_db))
    # WHEN one is taken out of the configuration, both change, and capture runs
    settings = yaml.safe_load(source_db.config_path.read_text("utf-8"))
    del settings["tables"]["public.dropped"]
    source_db.config_path.write_text(yaml.safe_dump(settings, sort_keys=False), "utf-8")
    source_db.execute("UPDATE kept SET v = 'changed' WHERE id = 1", "UPDATE dropped SET v = 'unseen' WHERE id = 1")
    capsys.readouterr()
    assert _cli(*config, "capture", *source) == 0
    # THEN it says so, and writes the kept table's change only
    assert "table public.dropped is no longer in cdclake.yaml: no longer captured" in capsys.readouterr().err
    dropped_folder = source_db.bronze / "public" / "dropped"
    assert sorted(p.name for p in dropped_folder.iterdir()) == ["LOAD00000001.csv"]
    assert [r.table for r in apply_and_verify(source_db)] == ["public.kept"]
    # WHEN it is put back (init --add-new), changes again, and capture runs
    assert _cli(*config, "init", *source[:2], "--add-new") == 0
    source_db.execute("UPDATE dropped SET v = 'back' WHERE id = 2")
    capsys.readouterr()
    assert _cli(*config, "capture", *source) == 0
    # THEN it is loaded afresh, and silver equals the source: the change made while it was out included
    assert "full load files=1 rows=2" in capsys.readouterr().out
    results = apply_and_verify(source_db)
    assert len(results) == 2 and all(r.equal for r in results), format_comparisons(results)
