"""``cdclake init`` on a real MariaDB: init -> DMS CSV files of the rows and of a few changes
(written with the project's DMS writer, as DMS's S3 target would: header row, timestamp column,
change sequence) -> ``run`` -> silver equals the database, with no hand edit of the configuration.

The oracle is MariaDB itself (tests/mariadb_dms.py): values read back with SQL, compared with silver.
"""

from __future__ import annotations

from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from cdclake.engine.run import run
from cdclake.shells.cli import main
from mariadb_dms import DmsTask, silver_rows, source_rows

SCHEMA = [
    """CREATE TABLE order_lines (
        order_id BIGINT UNSIGNED NOT NULL, line SMALLINT NOT NULL,
        t TINYINT, tu TINYINT UNSIGNED, su SMALLINT UNSIGNED, m MEDIUMINT, mu MEDIUMINT UNSIGNED,
        i INT, iu INT UNSIGNED, b BIGINT, flag BOOL, bit1 BIT(1), bits BIT(12),
        price DECIMAL(12,2), wide DECIMAL(40,10), f FLOAT, d DOUBLE,
        code CHAR(3), note VARCHAR(80), body TEXT,
        due DATE, local_at DATETIME(6), stamped TIMESTAMP(6) NULL DEFAULT NULL, at_time TIME(6), y YEAR,
        raw VARBINARY(16), blob_col BLOB, doc JSON, state ENUM('new','paid','shipped'), tags SET('a','b','c'),
        total DECIMAL(14,2) AS (price * line) VIRTUAL,
        PRIMARY KEY (order_id, line))""",
    "CREATE TABLE events (at DATETIME, what VARCHAR(40))",  # no key at all
    "CREATE TABLE codes (code VARCHAR(12) NOT NULL, label VARCHAR(40), UNIQUE KEY uk_code (code))",
    "CREATE TABLE tmp_import (id INT PRIMARY KEY)",
]
INSERT_LINE = """INSERT INTO order_lines (order_id, line, t, tu, su, m, mu, i, iu, b, flag, bit1, bits, price, wide,
    f, d, code, note, body, due, local_at, stamped, at_time, y, raw, blob_col, doc, state, tags)
    VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
            %s, %s, %s, %s)"""
LINES = [
    (18446744073709551615, 1, -128, 255, 65535, -8388608, 16777215, -2147483648, 4294967295, -9223372036854775808,
     True, b"\x01", b"\x0a\xbc", Decimal("-9999999999.99"), Decimal("123456789012345678901234567890.0123456789"),
     1.5, -2.2250738585072014e-308, "abc", 'comma, "quote"', "two\nlines", date(2024, 2, 29),
     datetime(2024, 2, 29, 23, 59, 59, 123456), datetime(2038, 1, 19, 3, 14, 7, 999999),
     timedelta(hours=12, minutes=34, seconds=56, microseconds=7), 2155, b"\x00\xff\x10", b"blob\x00bytes",
     '{"a": [1, 2], "b": "\\u00e9"}', "paid", "a,c"),
    (1, -32768, 0, 0, 0, 0, 0, 0, 0, 0, False, b"\x00", b"\x00\x00", Decimal("0.01"), Decimal("-0.0000000001"),
     -0.0, 1e300, "", "", "", date(1970, 1, 1), datetime(1000, 1, 1), datetime(1970, 1, 1, 0, 0, 1),
     timedelta(hours=-838, minutes=-59, seconds=-59), 1901, b"", b"", "[]", "new", ""),
    (2, 1) + (None,) * 28,
]  # fmt: skip

# --------------------------------------------------------------------------- the test


def test_init_dms_files_run_silver_equals_mariadb(mariadb_server: Any, make_engine: Any, tmp_path: Path) -> None:
    # GIVEN a MariaDB database with the types people use, a composite key, a keyless table and a
    # table keyed only by a unique index
    database = mariadb_server.create_database()
    conn = mariadb_server.connect(database)
    with conn.cursor() as cursor:
        for statement in SCHEMA:
            cursor.execute(statement)
        cursor.executemany(INSERT_LINE, LINES)
        cursor.execute("INSERT INTO events VALUES ('2024-01-01 10:00:00', 'created'), (NULL, NULL)")
        cursor.execute("INSERT INTO codes VALUES ('A-1', 'first'), ('B-2', NULL)")

    # WHEN init writes the configuration (all of the URL's database but tmp_*)
    config_path = tmp_path / "cdclake.yaml"
    url = mariadb_server.url(database)
    argv = ["-q", "--config", str(config_path), "init", "--source", url, "--exclude", "*.tmp_*"]
    assert main(argv) == 0
    text = config_path.read_text()
    engine = make_engine(text)  # the test's own silver database and bronze folder; nothing else changes
    config = engine.config
    assert [t.source for t in config.tables] == [f"{database}.codes", f"{database}.events", f"{database}.order_lines"]
    assert config.table("order_lines").primary_key == ("order_id", "line")
    assert config.table("codes").primary_key == ("code",)  # the unique index over a NOT NULL column
    assert config.table("events").append_only

    # AND DMS writes the full load, then the changes (images read back from the database)
    bronze = Path(config.bronze.path)
    dms = DmsTask(conn, database, bronze)
    for table in ("order_lines", "events", "codes"):
        dms.full_load(table)
    with conn.cursor() as cursor:
        deleted = dms.rows("order_lines", "line = -32768")
        cursor.execute("DELETE FROM order_lines WHERE line = -32768")
        cursor.execute("UPDATE order_lines SET note = 'changed', price = 1.23, tags = 'b' WHERE order_id = 2")
        cursor.execute("INSERT INTO order_lines (order_id, line, price, stamped) VALUES (3, 7, 2.5, NOW(6))")
        dms.cdc(
            "order_lines",
            [
                ("D", deleted[0]),
                ("U", dms.rows("order_lines", "order_id = 2")[0]),
                *[("I", row) for row in dms.rows("order_lines", "order_id = 3")],
            ],
        )
        cursor.execute("INSERT INTO events VALUES ('2024-01-02 11:00:00.5', 'more, \"quoted\"')")
        dms.cdc("events", [("I", row) for row in dms.rows("events", "what LIKE 'more%%'")])
        cursor.execute("UPDATE codes SET label = 'second' WHERE code = 'B-2'")
        dms.cdc("codes", [("U", dms.rows("codes", "code = 'B-2'")[0])])

    # AND cdclake runs on the configuration exactly as init wrote it
    report = run(engine)

    # THEN every silver table equals its MariaDB table, value by value
    assert not report.quarantined
    for table in config.tables:
        expected, actual = (
            source_rows(conn, table),
            silver_rows(engine.spark, f"silver.{config.database}.{table.target}", table),
        )
        assert actual == expected, f"{table.source}: silver only {actual - expected}, source only {expected - actual}"
    assert sum(source_rows(conn, config.table("order_lines")).values()) == 3
    conn.close()
