"""Catalog queries per engine (the I/O edge) and the pure step that turns their rows into tables.

Each ``read_*`` takes an open DB-API connection and returns every ordinary table outside the
system schemas; selection by pattern happens later (``plan.select_tables``). The ``*_tables``
functions take the query results as plain rows, so recorded result sets test them.

Keys: the primary key, in key order. Without one, a unique index whose columns are all NOT NULL
(not a prefix or filtered index) stands in where DMS identifies rows by it: MySQL and SQL Server
("LOB columns ... only in tables that include a primary key or unique index", and DMS's apply
looks rows up by either). Not for PostgreSQL: the guide's limitations say "A captured table must
have a primary key. If a table doesn't have a primary key, AWS DMS ignores DELETE and UPDATE".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from cdclake.config import BronzeFormat
from cdclake.sources.catalog.dms_types import (
    mysql_dms_type,
    postgres_dms_type,
    spark_type,
    sqlserver_dms_type,
)
from cdclake.sources.catalog.model import CatalogColumn, CatalogTable, KeySource


@dataclass(frozen=True)
class ColumnRow:
    schema: str
    table: str
    column: CatalogColumn
    not_null: bool


@dataclass(frozen=True)
class IndexColumnRow:
    """One column of a primary key or unique index, in key order within its index."""

    schema: str
    table: str
    index: str
    primary: bool
    column: str
    usable: bool = True  # False for a prefix (MySQL SUB_PART) or filtered (SQL Server) index


def build_tables(
    columns: Iterable[ColumnRow], indexes: Iterable[IndexColumnRow], unique_fallback: bool
) -> list[CatalogTable]:
    """Tables in (schema, name) order, columns in the order given, keys as the module says."""
    grouped: dict[tuple[str, str], list[ColumnRow]] = {}
    for row in columns:
        grouped.setdefault((row.schema, row.table), []).append(row)
    by_index: dict[tuple[str, str], dict[str, list[IndexColumnRow]]] = {}
    for index_row in indexes:
        by_index.setdefault((index_row.schema, index_row.table), {}).setdefault(index_row.index, []).append(index_row)
    tables = []
    for (schema, name), rows in sorted(grouped.items()):
        not_null = {r.column.name for r in rows if r.not_null}
        key: tuple[str, ...] = ()
        source: KeySource = "none"
        candidates = by_index.get((schema, name), {})
        primary = [parts for parts in candidates.values() if parts[0].primary]
        if primary:
            key, source = tuple(p.column for p in primary[0]), "primary key"
        elif unique_fallback:
            usable = [
                (len(parts), index, tuple(p.column for p in parts))
                for index, parts in candidates.items()
                if all(p.usable and p.column in not_null for p in parts)
            ]
            if usable:
                key, source = min(usable)[2], "unique index"
        tables.append(CatalogTable(schema, name, tuple(r.column for r in rows), key, source))
    return tables


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes | bytearray) else str(value)


# --------------------------------------------------------------------------- PostgreSQL

_PG_SCHEMAS_SQL = """
SELECT nspname FROM pg_namespace
WHERE nspname NOT IN ('information_schema', 'pg_catalog', 'pg_toast') AND nspname NOT LIKE 'pg\\_%'
ORDER BY nspname
"""


class _PyformatCursor:
    """A ``format``-style cursor (pg8000's) that takes the ``%(name)s`` queries of
    ``cdclake.sources.postgres.catalog``, so its catalog query is reused as it is."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def execute(self, sql: str, params: dict[str, Any] | Sequence[Any] = ()) -> None:
        import re

        if isinstance(params, dict):
            names = re.findall(r"%\((\w+)\)s", sql)
            sql = re.sub(r"%\((\w+)\)s", "%s", sql)
            params = [params[n] for n in names]
        self._cursor.execute(sql, tuple(params))

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [tuple(row) for row in self._cursor.fetchall()]

    def fetchone(self) -> tuple[Any, ...] | None:
        row = self._cursor.fetchone()
        return None if row is None else tuple(row)


def postgres_type_text(pg_type: str, type_modifier: int) -> str:
    """``numeric(12,2)``, ``varchar(40)``, ``timestamptz(3)``: the type as it was declared."""
    if type_modifier < 0:
        return pg_type
    if pg_type == "numeric" and type_modifier >= 4:
        return f"numeric({((type_modifier - 4) >> 16) & 0xFFFF},{(type_modifier - 4) & 0xFFFF})"
    if pg_type in ("varchar", "bpchar") and type_modifier >= 4:  # the length plus the 4-byte header
        return f"{pg_type}({type_modifier - 4})"
    return f"{pg_type}({type_modifier})"  # timestamp(p), time(p), bit(n): the modifier is the number itself


def read_postgres(conn: Any, bronze_format: BronzeFormat = "csv") -> list[CatalogTable]:
    """Every ordinary and partitioned table of the non-system schemas, read with the catalog query
    of ``cdclake capture`` (columns in ``attnum`` order, generated columns left out as pgoutput
    leaves them out, the primary key in index order), typed the way DMS maps PostgreSQL."""
    from cdclake.sources.postgres.catalog import full_identity_warning, read_tables, toastable_columns

    cursor = _PyformatCursor(conn.cursor())
    cursor.execute(_PG_SCHEMAS_SQL)
    schemas = [_text(row[0]) for row in cursor.fetchall()]
    if not schemas:
        return []
    toastable = toastable_columns(cursor, schemas)
    tables = []
    for table in read_tables(cursor, schemas):
        columns = tuple(
            CatalogColumn(
                c.name,
                postgres_type_text(c.pg_type, c.type_modifier),
                spark_type(postgres_dms_type(c.pg_type, c.type_modifier), bronze_format),
            )
            for c in table.columns
        )
        source: KeySource = "primary key" if table.primary_key else "none"
        # Keyless tables are captured inserts only: their updates never need the old values.
        unlogged = toastable.get(table.qualified, ()) if table.primary_key else ()
        warnings = (full_identity_warning(table.qualified, unlogged),) if unlogged else ()
        tables.append(CatalogTable(table.schema, table.name, columns, table.primary_key, source, warnings))
    return sorted(tables, key=lambda t: (t.schema, t.name))


# --------------------------------------------------------------------------- MySQL / MariaDB

MYSQL_SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys")

MYSQL_COLUMNS_SQL = """
SELECT c.TABLE_SCHEMA, c.TABLE_NAME, c.COLUMN_NAME, c.DATA_TYPE, c.COLUMN_TYPE,
       c.NUMERIC_PRECISION, c.NUMERIC_SCALE, c.IS_NULLABLE
FROM information_schema.COLUMNS c
JOIN information_schema.TABLES t ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME
WHERE t.TABLE_TYPE = 'BASE TABLE'
  AND c.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
ORDER BY c.TABLE_SCHEMA, c.TABLE_NAME, c.ORDINAL_POSITION
"""

MYSQL_KEYS_SQL = """
SELECT s.TABLE_SCHEMA, s.TABLE_NAME, s.INDEX_NAME, s.COLUMN_NAME, s.SUB_PART
FROM information_schema.STATISTICS s
WHERE s.NON_UNIQUE = 0
  AND s.TABLE_SCHEMA NOT IN ('mysql', 'information_schema', 'performance_schema', 'sys')
ORDER BY s.TABLE_SCHEMA, s.TABLE_NAME, s.INDEX_NAME, s.SEQ_IN_INDEX
"""


def mysql_tables(
    column_rows: Iterable[Sequence[Any]], key_rows: Iterable[Sequence[Any]], bronze_format: BronzeFormat = "csv"
) -> list[CatalogTable]:
    """Tables from the rows of ``MYSQL_COLUMNS_SQL`` and ``MYSQL_KEYS_SQL``."""
    columns = []
    for schema, table, name, data_type, column_type, precision, scale, nullable in column_rows:
        dms = mysql_dms_type(_text(data_type), _text(column_type), precision, scale)
        column = CatalogColumn(_text(name), _text(column_type), spark_type(dms, bronze_format))
        columns.append(ColumnRow(_text(schema), _text(table), column, _text(nullable) == "NO"))
    indexes = [
        IndexColumnRow(_text(s), _text(t), _text(index), _text(index) == "PRIMARY", _text(column), sub_part is None)
        for s, t, index, column, sub_part in key_rows
    ]
    return build_tables(columns, indexes, unique_fallback=True)


def read_mysql(conn: Any, bronze_format: BronzeFormat = "csv") -> list[CatalogTable]:
    """Every base table outside the system schemas (a MySQL schema is a database: DMS's folder)."""
    with conn.cursor() as cursor:
        cursor.execute(MYSQL_COLUMNS_SQL)
        column_rows = list(cursor.fetchall())
        cursor.execute(MYSQL_KEYS_SQL)
        key_rows = list(cursor.fetchall())
    return mysql_tables(column_rows, key_rows, bronze_format)


# --------------------------------------------------------------------------- SQL Server
# Written from Microsoft's catalog-view documentation (sys.tables, sys.schemas, sys.columns,
# sys.indexes, sys.index_columns; TYPE_NAME(system_type_id) resolves alias types to their base).
# Not run against a real server here: tests/unit/test_catalog_sqlserver.py feeds it recorded rows.

SQLSERVER_COLUMNS_SQL = """
SELECT s.name, t.name, c.name, TYPE_NAME(c.system_type_id), c.max_length, c.precision, c.scale, c.is_nullable
FROM sys.tables t
JOIN sys.schemas s ON s.schema_id = t.schema_id
JOIN sys.columns c ON c.object_id = t.object_id
WHERE t.is_ms_shipped = 0
ORDER BY s.name, t.name, c.column_id
"""

SQLSERVER_KEYS_SQL = """
SELECT s.name, t.name, i.name, i.is_primary_key, c.name, i.has_filter
FROM sys.indexes i
JOIN sys.tables t ON t.object_id = i.object_id
JOIN sys.schemas s ON s.schema_id = t.schema_id
JOIN sys.index_columns ic ON ic.object_id = i.object_id AND ic.index_id = i.index_id AND ic.is_included_column = 0
JOIN sys.columns c ON c.object_id = ic.object_id AND c.column_id = ic.column_id
WHERE (i.is_primary_key = 1 OR i.is_unique = 1) AND t.is_ms_shipped = 0
ORDER BY s.name, t.name, i.index_id, ic.key_ordinal
"""


def _sqlserver_type_text(type_name: str, max_length: int, precision: int, scale: int) -> str:
    if type_name in ("decimal", "numeric"):
        return f"{type_name}({precision},{scale})"
    if type_name in ("char", "varchar", "binary", "varbinary", "nchar", "nvarchar"):
        if max_length == -1:
            return f"{type_name}(max)"
        return f"{type_name}({max_length // 2 if type_name.startswith('n') else max_length})"
    return type_name


def sqlserver_tables(
    column_rows: Iterable[Sequence[Any]], key_rows: Iterable[Sequence[Any]], bronze_format: BronzeFormat = "csv"
) -> list[CatalogTable]:
    """Tables from the rows of ``SQLSERVER_COLUMNS_SQL`` and ``SQLSERVER_KEYS_SQL``."""
    columns = []
    for schema, table, name, type_name, max_length, precision, scale, nullable in column_rows:
        base = _text(type_name).lower()
        dms = sqlserver_dms_type(base, int(precision), int(scale))
        text = _sqlserver_type_text(base, int(max_length), int(precision), int(scale))
        column = CatalogColumn(_text(name), text, spark_type(dms, bronze_format))
        columns.append(ColumnRow(_text(schema), _text(table), column, not bool(nullable)))
    indexes = [
        IndexColumnRow(_text(s), _text(t), _text(index), bool(primary), _text(column), not bool(has_filter))
        for s, t, index, primary, column, has_filter in key_rows
    ]
    return build_tables(columns, indexes, unique_fallback=True)


def read_sqlserver(conn: Any, bronze_format: BronzeFormat = "csv") -> list[CatalogTable]:
    cursor = conn.cursor()
    cursor.execute(SQLSERVER_COLUMNS_SQL)
    column_rows = list(cursor.fetchall())
    cursor.execute(SQLSERVER_KEYS_SQL)
    key_rows = list(cursor.fetchall())
    return sqlserver_tables(column_rows, key_rows, bronze_format)
