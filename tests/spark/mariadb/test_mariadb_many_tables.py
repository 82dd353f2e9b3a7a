"""At database size: ``cdclake init`` on a MariaDB database of 50 tables, then the pipeline
with no hand edit; every silver table equals its MariaDB table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mariadb_dms import init_and_load, silver_rows, source_rows

SHAPES = [
    # (key clause, extra columns): a primary key, a composite one, a unique index only, none at all
    ("PRIMARY KEY (id)", "amount DECIMAL(10,2), at DATETIME"),
    ("PRIMARY KEY (id, part)", "part TINYINT UNSIGNED NOT NULL, flag BIT(1)"),
    ("UNIQUE KEY uk (code)", "code CHAR(8) NOT NULL, seen TIMESTAMP NULL"),
    ("", "note VARCHAR(20)"),
    ("PRIMARY KEY (id)", "big BIGINT UNSIGNED, f DOUBLE, d DATE"),
]

ROWS = [
    ["INSERT INTO {table} VALUES (1, 12.5, '2024-01-01 10:00:00'), (2, NULL, NULL)"],
    ["INSERT INTO {table} VALUES (1, 0, 0), (1, 255, 1)"],
    ["INSERT INTO {table} VALUES (1, 'A', NULL), (1, 'B', '2024-01-01 00:00:00')"],
    ["INSERT INTO {table} VALUES (1, 'same'), (1, 'same')"],  # no key: duplicates are rows too
    ["INSERT INTO {table} VALUES (1, 18446744073709551615, 0.1, '2024-02-29'), (2, NULL, NULL, NULL)"],
]


def test_fifty_tables_init_and_run_without_a_hand_edit(mariadb_server: Any, make_engine: Any, tmp_path: Path) -> None:
    # GIVEN 50 tables of five shapes, two rows each
    database = mariadb_server.create_database()
    conn = mariadb_server.connect(database)
    with conn.cursor() as cursor:
        for n in range(50):
            key, extra = SHAPES[n % len(SHAPES)]
            cursor.execute(f"CREATE TABLE t{n:02d} (id INT NOT NULL, {extra}{', ' + key if key else ''})")
            for statement in ROWS[n % len(SHAPES)]:
                cursor.execute(statement.format(table=f"t{n:02d}"))
    # WHEN init writes the configuration and DMS's full-load files are applied with it
    config_path = tmp_path / "cdclake.yaml"
    engine, report = init_and_load(mariadb_server.url(database), conn, database, config_path, make_engine)
    # THEN 50 tables are configured, keyed as their shape says, and each silver table equals MariaDB
    tables = engine.config.tables
    assert len(tables) == 50 and not report.quarantined
    assert sum(t.append_only for t in tables) == 10
    assert {t.primary_key for t in tables} == {("id",), ("id", "part"), ("code",), ()}
    for table in tables:
        identifier = f"silver.{engine.config.database}.{table.target}"
        assert silver_rows(engine.spark, identifier, table) == source_rows(conn, table), table.source
    conn.close()
