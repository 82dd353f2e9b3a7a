"""``cdclake init`` on a real MariaDB: init -> DMS CSV files of the rows and of a few changes
(written with the project's DMS writer, as DMS's S3 target would: header row, timestamp column,
change sequence) -> ``run`` -> silver equals the database, with no hand edit of the configuration.

The oracle is MariaDB itself: values are read back with SQL (``HEX()`` for bytes, ``CAST(... AS
CHAR)`` for TIME, ``+0`` for BIT(1)) and compared with silver value by value, never with the files.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from cdclake.config import TableConfig
from cdclake.dms.writer import cdc_file_name, change_sequence, load_file_name, write_csv
from cdclake.engine.run import run
from cdclake.shells.cli import main

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

LOAD_TS = "2026-11-25 08:00:00.000000"
CDC_TS = "2026-11-25 08:05:00.000000"


# --------------------------------------------------------------------------- the DMS stand-in


def dms_text(value: Any, column_type: str) -> str | None:
    """A value as DMS's CSV writes it (DMS_FORMAT.md; bytes as hexadecimal, BIT(1) as a digit)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        if column_type == "bit(1)":
            return "1" if int.from_bytes(value, "big") else "0"
        return bytes(value).hex().upper()
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, timedelta):
        sign, total = ("-", -value) if value < timedelta(0) else ("", value)
        hours, rest = divmod(total.days * 86400 + total.seconds, 3600)
        return f"{sign}{hours:02d}:{rest // 60:02d}:{rest % 60:02d}.{total.microseconds:06d}"
    if isinstance(value, set):
        return ",".join(sorted(value))
    return str(value)


class DmsTask:
    """Writes what a DMS full-load-and-CDC task with the stack's S3 endpoint would write."""

    def __init__(self, conn: Any, database: str, bronze: Path) -> None:
        self.conn, self.database, self.bronze = conn, database, bronze
        self.counter = 0

    def column_types(self, table: str) -> dict[str, str]:
        with self.conn.cursor() as cursor:
            cursor.execute(
                "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
                (self.database, table),
            )
            return {str(name): str(kind) for name, kind in cursor.fetchall()}

    def rows(self, table: str, where: str = "1=1", args: Sequence[Any] = ()) -> list[list[str | None]]:
        types = self.column_types(table)
        with self.conn.cursor() as cursor:
            cursor.execute(f"SELECT {', '.join(f'`{c}`' for c in types)} FROM `{table}` WHERE {where}", args)
            return [[dms_text(v, t) for v, t in zip(row, types.values(), strict=True)] for row in cursor.fetchall()]

    def seq(self, ts: str) -> str:
        self.counter += 1
        return change_sequence(ts, self.counter)

    def full_load(self, table: str) -> None:
        header = ["dms_commit_ts", *self.column_types(table), "AR_H_CHANGE_SEQ"]
        records = [[LOAD_TS, *row, self.seq(LOAD_TS)] for row in self.rows(table)]
        if records:  # DMS writes no folder for a table that is empty at full load
            write_csv(self.bronze / self.database / table / load_file_name(1), records, header)

    def cdc(self, table: str, changes: list[tuple[str, list[str | None]]]) -> None:
        header = ["Op", "dms_commit_ts", *self.column_types(table), "AR_H_CHANGE_SEQ"]
        records = [[op, CDC_TS, *row, self.seq(CDC_TS)] for op, row in changes]
        write_csv(self.bronze / self.database / table / cdc_file_name(CDC_TS), records, header)


# --------------------------------------------------------------------------- the oracle


def _source_expression(name: str, column_type: str) -> str:
    if column_type == "bit(1)":
        return f"`{name}` + 0"
    if column_type.startswith("bit("):  # HEX(bit) drops leading zero digits; the stored bytes keep them
        return f"HEX(CAST(`{name}` AS BINARY))"
    if column_type.startswith(("binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob")):
        return f"HEX(`{name}`)"
    if column_type.startswith(("decimal", "time")) and not column_type.startswith("timestamp"):
        return f"CAST(`{name}` AS CHAR)"  # MariaDB's own text: a decimal wider than Spark's, a TIME
    return f"`{name}`"


def canonical(value: Any, spark_type: str) -> str:
    if value is None:
        return "NULL"
    if spark_type == "boolean":
        return "true" if int(value) else "false"
    if spark_type.startswith("decimal("):
        scale = int(spark_type.rstrip(")").split(",")[1])
        return str(Decimal(value).quantize(Decimal(1).scaleb(-scale)))
    if spark_type == "double":
        return repr(float(value))
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def source_rows(conn: Any, table: TableConfig) -> Counter[tuple[str, ...]]:
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT COLUMN_NAME, COLUMN_TYPE FROM information_schema.COLUMNS "
            "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
            (table.source_schema, table.source_table),
        )
        kinds = dict(cursor.fetchall())
        select = ", ".join(_source_expression(c, kinds[c]) for c in table.columns)
        cursor.execute(f"SELECT {select} FROM `{table.source_schema}`.`{table.source_table}`")
        rows = cursor.fetchall()
    return Counter(
        tuple(canonical(_time_text(v, kinds[c]), t) for v, (c, t) in zip(row, table.columns.items(), strict=True))
        for row in rows
    )


def _time_text(value: Any, column_type: str) -> Any:
    """MariaDB's CAST(TIME AS CHAR) keeps only the declared fraction digits; DMS text has six."""
    if column_type.startswith("time(") and isinstance(value, str) and "." in value:
        whole, fraction = value.split(".")
        return f"{whole}.{fraction.ljust(6, '0')}"
    return value


def silver_rows(engine: Any, table: TableConfig) -> Counter[tuple[str, ...]]:
    columns = []
    for name, kind in table.columns.items():
        if kind.startswith("timestamp"):  # formatted by Spark in its session time zone (UTC)
            columns.append(f"date_format(`{name}`, 'yyyy-MM-dd HH:mm:ss.SSSSSS')")
        else:
            columns.append(f"`{name}`")
    frame = engine.spark.sql(f"SELECT {', '.join(columns)} FROM silver.{engine.config.database}.{table.target}")
    return Counter(
        tuple(canonical(v, t) for v, t in zip(row, table.columns.values(), strict=True)) for row in frame.collect()
    )


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
        expected, actual = source_rows(conn, table), silver_rows(engine, table)
        assert actual == expected, f"{table.source}: silver only {actual - expected}, source only {expected - actual}"
    assert sum(source_rows(conn, config.table("order_lines")).values()) == 3
    conn.close()
