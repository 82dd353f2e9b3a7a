"""A stand-in for a DMS task reading MariaDB (files as DMS's S3 target with the stack's endpoint
settings writes them, through the project's DMS writer) and the oracle that reads MariaDB back.

The oracle reads values with SQL (``HEX()`` for bytes, ``CAST(... AS CHAR)`` for TIME and wide
decimals, ``+0`` for BIT(1)) and compares them with silver value by value, never with the files.
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


def silver_rows(spark: Any, identifier: str, table: TableConfig) -> Counter[tuple[str, ...]]:
    """The rows of the silver table ``identifier`` (catalog.database.table), source columns only."""
    columns = []
    for name, kind in table.columns.items():
        if kind.startswith("timestamp"):  # formatted by Spark in its session time zone (UTC)
            columns.append(f"date_format(`{name}`, 'yyyy-MM-dd HH:mm:ss.SSSSSS')")
        else:
            columns.append(f"`{name}`")
    frame = spark.sql(f"SELECT {', '.join(columns)} FROM {identifier}")
    return Counter(
        tuple(canonical(v, t) for v, t in zip(row, table.columns.values(), strict=True)) for row in frame.collect()
    )


def init_and_load(url: str, conn: Any, database: str, config_path: Path, make_engine: Any) -> tuple[Any, Any]:
    """``cdclake init`` of the MariaDB database at ``url`` into ``config_path``, then DMS's full-load files of each
    configured table applied by ``run``: the engine (``make_engine`` of the configuration) and the run's report."""
    from cdclake.engine.run import run
    from cdclake.shells.cli import main

    assert main(["-q", "--config", str(config_path), "init", "--source", url]) == 0
    engine = make_engine(config_path.read_text())
    dms = DmsTask(conn, database, Path(engine.config.bronze.path))
    for table in engine.config.tables:
        dms.full_load(table.source_table)
    return engine, run(engine)
