"""``cdclake init`` on an in-memory catalog: selection, the written file, --force, --add-new and
--check (every kind of drift), and the one-sentence errors of the command line."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from cdclake.config import load_config, parse_config
from cdclake.errors import CdclakeError
from cdclake.ops.drift import drift
from cdclake.ops.init import InitSettings, init
from cdclake.schema import type_change_advice
from cdclake.shells.cli import main
from cdclake.sources.catalog.connect import SourceAddress, address_from_secret, parse_source_url
from cdclake.sources.catalog.model import CatalogColumn, CatalogTable, SourceCatalogError
from cdclake.sources.catalog.plan import (
    BronzeDefaults,
    add_tables,
    configuration_text,
    select_tables,
    written_by_init,
)
from cdclake.sources.catalog.readers import mysql_tables

URL = "postgresql://reader:secret@db.example:5432/shop"


def col(name: str, spark: str, source: str = "") -> CatalogColumn:
    return CatalogColumn(name, source or spark, spark)


ORDERS = CatalogTable(
    "sales",
    "orders",
    (col("id", "bigint", "int8"), col("line", "int", "int4"), col("amount", "decimal(12,2)", "numeric(12,2)")),
    ("id", "line"),
    "primary key",
)
CUSTOMERS = CatalogTable("sales", "customers", (col("id", "int"), col("name", "string")), ("id",), "primary key")
AUDIT = CatalogTable("sales", "audit_log", (col("at", "timestamp"), col("what", "string")))
TMP = CatalogTable("sales", "tmp_import", (col("x", "int"),), ("x",), "primary key")
OTHER = CatalogTable("hr", "people", (col("id", "int"),), ("id",), "primary key")
CATALOG = [AUDIT, CUSTOMERS, ORDERS, TMP, OTHER]


def run(tmp_path: Path, catalog: list[CatalogTable] = CATALOG, **overrides: object) -> tuple[int, str]:
    printed: list[str] = []
    settings = InitSettings(
        source_url=URL, config_path=tmp_path / "cdclake.yaml", include=("sales.*",), exclude=("*.tmp_*",)
    )
    settings = replace(settings, **overrides)  # type: ignore[arg-type]
    code = init(settings, read=lambda _address: list(catalog), out=printed.append)
    return code, "\n".join(printed)


# --------------------------------------------------------------------------- writing


def test_init_writes_a_configuration_that_loads_with_keys_types_and_append_only(tmp_path: Path) -> None:
    # GIVEN a catalog with keyed tables, a keyless one, an excluded one and another schema
    # WHEN init runs with --include 'sales.*' --exclude '*.tmp_*'
    code, printed = run(tmp_path)
    # THEN the file loads, with exactly the selected tables
    config = load_config(tmp_path / "cdclake.yaml")
    assert code == 0 and "3 table(s)" in printed and "1 append-only" in printed
    assert [t.source for t in config.tables] == ["sales.audit_log", "sales.customers", "sales.orders"]
    orders = config.table("sales.orders")
    # AND columns keep the catalog's order and types, the composite key its order
    assert list(orders.columns.items()) == [("id", "bigint"), ("line", "int"), ("amount", "decimal(12,2)")]
    assert orders.primary_key == ("id", "line")
    # AND a keyless table is append-only
    assert config.table("sales.audit_log").append_only and not config.table("sales.audit_log").primary_key
    # AND bronze mirrors the stack's DMS endpoint (AddColumnName, TimestampColumnName, change sequence)
    assert config.bronze.format == "csv" and config.bronze.csv_header
    assert (config.bronze.timestamp_column, config.bronze.change_sequence_column) == (
        "dms_commit_ts",
        "AR_H_CHANGE_SEQ",
    )
    assert config.database == "shop"


def test_keyless_table_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    run(tmp_path)
    assert any("sales.audit_log has no primary key" in r.getMessage() for r in caplog.records)


def test_init_rewrites_its_own_untouched_file_but_not_a_hand_edited_one(tmp_path: Path) -> None:
    # GIVEN a file init wrote
    run(tmp_path)
    path = tmp_path / "cdclake.yaml"
    # WHEN init runs again on an untouched file THEN it rewrites it
    assert run(tmp_path)[0] == 0
    # WHEN the file is edited by hand
    path.write_text(path.read_text().replace("    primary_key: [id]\n", "    primary_key: [id]\n    history: true\n"))
    assert written_by_init(path.read_text()) == ("postgres", False)
    # THEN init refuses to overwrite it, naming --force and --add-new
    with pytest.raises(CdclakeError, match=r"edited by hand.*--force.*--add-new"):
        run(tmp_path)
    # AND with --force it does
    assert run(tmp_path, force=True)[0] == 0
    assert "history: true" not in path.read_text()


def test_init_does_not_overwrite_a_file_it_did_not_write(tmp_path: Path) -> None:
    (tmp_path / "cdclake.yaml").write_text("tables:\n  a.b:\n    primary_key: [id]\n    columns: {id: int}\n")
    with pytest.raises(CdclakeError, match="--force"):
        run(tmp_path)


def test_add_new_adds_only_new_tables_and_keeps_hand_edits(tmp_path: Path) -> None:
    # GIVEN a configuration with one table, edited by hand (a comment and a cleaning rule)
    path = tmp_path / "cdclake.yaml"
    run(tmp_path, include=("sales.customers",))
    edited = path.read_text().replace("tables:\n", "tables:  # mine\n") + "    clean: {drop: [name]}\n"
    path.write_text(edited)
    # WHEN init --add-new runs over all of sales
    code, printed = run(tmp_path, add_new=True)
    # THEN the two new tables are added and the hand edits are kept byte for byte
    text = path.read_text()
    assert code == 0 and "added 2 new table(s)" in printed
    assert text.startswith(edited)
    config = load_config(path)
    assert [t.source for t in config.tables] == ["sales.customers", "sales.audit_log", "sales.orders"]
    assert config.table("sales.customers").clean.drop == ("name",)
    # AND running it again adds nothing
    assert "added 0 new table(s)" in run(tmp_path, add_new=True)[1]
    assert path.read_text() == text


def test_add_new_to_an_untouched_file_keeps_it_untouched(tmp_path: Path) -> None:
    run(tmp_path, include=("sales.orders",))
    run(tmp_path, add_new=True)
    text = (tmp_path / "cdclake.yaml").read_text()
    assert written_by_init(text) == ("postgres", True)
    assert len(parse_config(text).tables) == 3


def test_add_tables_before_a_following_section() -> None:
    # GIVEN a hand-written file whose tables section is followed by another section
    text = "tables:\n    a.b:\n        primary_key: [id]\n        columns: {id: int}\ncdc:\n  max_files_per_batch: 5\n"
    # WHEN a table is added THEN it lands inside tables, at the file's own indentation
    new = add_tables(text, [CUSTOMERS])
    config = parse_config(new)
    assert [t.source for t in config.tables] == ["a.b", "sales.customers"]
    assert config.max_files_per_batch == 5


def test_no_matching_table_is_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(CdclakeError, match=r"No table .* matches nope"):
        run(tmp_path, include=("nope.*",))


def test_tables_the_configuration_cannot_name_are_left_out_with_the_reason() -> None:
    odd = CatalogTable("sales", "order:lines", (col("id", "int"),), ("id",), "primary key")
    reserved = CatalogTable("sales", "r", (col("_cdc_x", "int"),))
    selection = select_tables([odd, reserved, ORDERS], (), ())
    assert selection.tables == [ORDERS]
    assert selection.skipped[0] == (
        "sales.order:lines: 'order:lines': the character ':' (position 6) is not allowed in a name"
    )
    assert "_cdc_" in selection.skipped[1]


def test_names_dms_writes_are_configured_and_read_back() -> None:
    # GIVEN a table with a hyphen in its name and a space and a hyphen in its column names
    lines = CatalogTable(
        "sales", "order-lines", (col("line-id", "int"), col("unit price", "decimal(10,2)")), ("line-id",), "primary key"
    )
    # WHEN init selects it and writes the configuration
    selection = select_tables([lines], (), ())
    text = configuration_text("postgresql", selection.tables, BronzeDefaults(), "shop")
    # THEN the configuration reads back with the names as they are
    table = parse_config(text, "init.yaml").tables[0]
    assert (table.source, table.primary_key, list(table.columns)) == (
        "sales.order-lines",
        ("line-id",),
        ["line-id", "unit price"],
    )


# --------------------------------------------------------------------------- --check


def test_check_reports_every_kind_of_drift_and_exits_1(tmp_path: Path) -> None:
    # GIVEN a configuration written from the catalog
    run(tmp_path)
    assert run(tmp_path, check=True) == (0, "no drift: the configuration matches the source catalog")
    # WHEN the source changes: a new table, a dropped one, a column added, dropped, retyped, a new key
    changed = [
        replace(
            ORDERS,
            columns=(col("id", "bigint"), col("amount", "decimal(14,2)"), col("note", "string")),
            key=("id",),
        ),
        AUDIT,
        CatalogTable("sales", "refunds", (col("id", "int"),), ("id",), "primary key"),
    ]
    code, printed = run(tmp_path, catalog=changed, check=True)
    # THEN each is printed, added/dropped columns as handled by the engine, and the exit code is 1
    assert code == 1
    lines = printed.splitlines()
    assert "sales.refunds: new table (1 columns, key [id]): cdclake init --add-new (action needed)" in lines
    assert "sales.customers: dropped table (not at the source any more; silver keeps its rows) (action needed)" in lines
    assert any(
        line.startswith("sales.orders: added column note string") and line.endswith("(handled by the engine)")
        for line in lines
    )
    assert "sales.orders: dropped column line: kept in silver, NULL from then on (handled by the engine)" in lines
    assert any(
        "retyped column amount decimal(12,2) -> decimal(14,2): declare it and silver widens in place" in line
        for line in lines
    )
    assert "sales.orders: changed key [id, line] -> [id] (primary key) (action needed)" in lines
    assert lines[-1] == "6 difference(s), 4 needing a change to the configuration"


def test_check_incompatible_type_and_key_lost() -> None:
    config = parse_config("tables:\n  s.t:\n    primary_key: [id]\n    columns: {id: int, d: date}\n")
    found = drift(config, [CatalogTable("s", "t", (col("id", "int"), col("d", "string")))])
    assert [(d.kind, d.handled) for d in found] == [("retyped column", False), ("changed key", False)]
    assert "incompatible" in found[0].detail and found[1].detail == "[id] -> no key"
    # the advice `run` and `status` give for the batches it will hold: reload that one table
    assert found[0].detail.endswith(f"held in quarantine; {type_change_advice('s.t')}")


def test_check_ignores_configured_tables_outside_the_patterns_when_they_still_exist() -> None:
    config = parse_config("tables:\n  hr.people:\n    primary_key: [id]\n    columns: {id: int}\n")
    assert drift(config, [ORDERS], [ORDERS, OTHER])[0].kind == "new table"
    assert [d.kind for d in drift(config, [ORDERS], [ORDERS, OTHER])] == ["new table"]


# --------------------------------------------------------------------------- MySQL catalog rows


def test_mysql_rows_keys_and_unique_fallback() -> None:
    # GIVEN rows as information_schema returns them (PyMySQL may give bytes for some columns)
    columns = [
        ("shop", "t", "id", "int", "int(10) unsigned", 10, 0, "NO"),
        ("shop", "t", "code", "varchar", b"varchar(8)", None, None, "NO"),
        ("shop", "u", "code", "varchar", "varchar(8)", None, None, "NO"),
        ("shop", "u", "nick", "varchar", "varchar(8)", None, None, "YES"),
        ("shop", "v", "name", "varchar", "varchar(80)", None, None, "NO"),
    ]
    keys = [
        ("shop", "t", "PRIMARY", "id", None),
        ("shop", "t", "uk_code", "code", None),
        ("shop", "u", "uk_nick", "nick", None),  # nullable: not a row identity
        ("shop", "u", "uk_code", "code", None),
        ("shop", "v", "uk_name", "name", 10),  # a prefix index: not unique over the whole value
    ]
    tables = {t.name: t for t in mysql_tables(columns, keys)}
    assert (tables["t"].key, tables["t"].key_source, tables["t"].types()["id"]) == (("id",), "primary key", "bigint")
    assert (tables["u"].key, tables["u"].key_source) == (("code",), "unique index")
    assert tables["v"].key == ()


# --------------------------------------------------------------------------- addresses and errors


def test_source_urls() -> None:
    pg = parse_source_url("postgresql://reader:p%40ss@db:6543/shop?sslmode=require")
    assert (pg.engine, pg.host, pg.port, pg.database, pg.user, pg.password) == (
        "postgres",
        "db",
        6543,
        "shop",
        "reader",
        "p@ss",
    )
    assert dict(pg.options) == {"sslmode": "require"}
    assert "p@ss" not in repr(pg) and "p@ss" not in pg.describe()
    assert parse_source_url("mariadb://root@127.0.0.1/shop").port == 3306
    jdbc = parse_source_url("jdbc:sqlserver://mssql.internal:1433;databaseName=erp")
    assert (jdbc.engine, jdbc.host, jdbc.port, jdbc.database) == ("sqlserver", "mssql.internal", 1433, "erp")


@pytest.mark.parametrize("url", ["", "oracle://x/y", "postgresql:///nohost", "postgresql://h:99999999/db"])
def test_bad_source_url_is_one_sentence(url: str) -> None:
    with pytest.raises(SourceCatalogError) as caught:
        parse_source_url(url)
    assert "\n" not in str(caught.value)


def test_address_from_secret_and_glue_connection() -> None:
    secret = {"username": "dms", "password": "pw", "engine": "postgres", "host": "old", "port": 5432, "dbname": "a"}
    # the JDBC URL's host wins (the job's network reaches it); the stack's database name overrides
    address = address_from_secret(secret, database="shop", jdbc_url="jdbc:postgresql://new.internal:5433/app")
    assert address == SourceAddress("postgres", "new.internal", 5433, "shop", "dms", "pw")
    assert address_from_secret({"username": "u", "password": "p", "host": "h"}, engine="mysql").port == 3306
    with pytest.raises(SourceCatalogError, match="engine"):
        address_from_secret({"host": "h"})


def test_cli_unreachable_database_exits_2_with_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # GIVEN a port nothing listens on
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # WHEN init is pointed at it THEN it exits 2 with one sentence on stderr and writes nothing
    code = main(["-q", "--config", str(tmp_path / "c.yaml"), "init", "--source", f"mysql://root@127.0.0.1:{port}/x"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("cdclake: Cannot connect to mysql at 127.0.0.1") and err.count("\n") == 1
    assert not (tmp_path / "c.yaml").exists()


def test_cli_bad_url_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--config", str(tmp_path / "c.yaml"), "init", "--source", "ftp://x"])
    assert code == 2 and "must look like postgresql://" in capsys.readouterr().err


def test_check_does_not_count_the_dms_bookkeeping_columns_as_dropped() -> None:
    # GIVEN a hand-written configuration that declares the timestamp and change-sequence columns' types
    config = parse_config(
        "bronze: {timestamp_column: ts, change_sequence_column: seq}\n"
        "tables:\n  s.t:\n    primary_key: [id]\n    columns: {ts: timestamp, id: int, seq: string}\n"
    )
    # THEN they are not source columns that went missing
    assert drift(config, [CatalogTable("s", "t", (col("id", "int"),), ("id",), "primary key")]) == []


@pytest.mark.parametrize("scheme", ["postgresql", "mysql", "sqlserver"])
def test_each_driver_turns_a_refused_connection_into_one_sentence(scheme: str) -> None:
    # GIVEN a loopback port nothing listens on, and each engine's real driver
    import socket

    from cdclake.sources.catalog.connect import read_catalog

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    address = parse_source_url(f"{scheme}://u:pw@127.0.0.1:{port}/db")
    # WHEN the catalog is read THEN the error names the engine and address, once, without the password
    with pytest.raises(SourceCatalogError) as caught:
        read_catalog(address, timeout=2)
    message = str(caught.value)
    # (python-tds retries a refused connection until its login timeout: "Cannot reach ...: no answer within 2 s")
    engine = "PostgreSQL" if address.engine == "postgres" else address.engine  # PostgreSQL's sentences name the fix
    assert re.match(rf"Cannot (connect to|reach) {engine} at 127\.0\.0\.1:{port} \(database db\): \w", message)
    assert "\n" not in message and "pw" not in message
