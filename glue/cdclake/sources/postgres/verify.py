"""``cdclake verify``: compare every silver table with its PostgreSQL source table, row by row.

Both sides are reduced to one canonical text per value, chosen by the column's configured Spark
type, and each row to a SHA-256 hash over all source columns. The source side reads typed values
through psycopg2 (``Decimal``, aware ``datetime``, ``bytes``, ...) and the silver side through
Spark, so the comparison does not reuse capture's text conversion: a conversion bug shows up as
a difference. Keyed tables are compared key by key; append-only tables (no primary key) as
multisets of rows.

Only the columns the source table has now are compared: a column dropped at the source stays in
silver (NULL from then on) and is not compared. A column added with ``ADD COLUMN ... DEFAULT x``
is special: PostgreSQL shows ``x`` for the rows that existed before (it stores the value once,
in the catalog, and logs no change for those rows), while silver has NULL there until a row is
written again. Keys whose only differences are such NULLs where the source shows the column's
default (the value stored at ADD COLUMN, or the current default when it is a constant) are
reported apart, as ``default not in silver``, and still make the table differ: silver really
differs from the source until those rows are written again.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from cdclake.config import TableConfig
from cdclake.identifiers import quote_pg
from cdclake.sources.postgres.catalog import SourceTable, read_tables

if TYPE_CHECKING:
    from cdclake.context import Engine

_DECIMAL_SCALE_PREFIX = "decimal("
_TEXT_TYPES = {"text", "varchar", "bpchar", "name"}  # psycopg2 returns these as printed
_NULL = "\x00NULL"


@dataclass
class TableComparison:
    table: str
    source_rows: int = 0
    silver_rows: int = 0
    missing: list[str] = field(default_factory=list)  # keys at the source, not in silver
    unexpected: list[str] = field(default_factory=list)  # keys in silver, not at the source
    different: list[str] = field(default_factory=list)  # keys whose content differs
    # keys that differ only by NULL in silver where the source shows an ADD COLUMN ... DEFAULT value
    # (rows older than that column and not written since)
    unlogged_defaults: list[str] = field(default_factory=list)
    problem: str = ""  # a reason the table could not be compared

    @property
    def equal(self) -> bool:
        return not (self.missing or self.unexpected or self.different or self.unlogged_defaults or self.problem)


def canonical(value: Any, spark_type: str) -> str:
    """One value (from psycopg2 or from Spark) as comparable text for its Spark type."""
    if value is None:
        return _NULL
    if spark_type == "boolean":
        return "true" if value else "false"
    if spark_type.startswith(_DECIMAL_SCALE_PREFIX):
        scale = int(spark_type.rstrip(")").split(",")[1])
        return str(Decimal(value).quantize(Decimal(1).scaleb(-scale)))  # same scale on both sides
    if spark_type == "float":
        return repr(struct.unpack("f", struct.pack("f", float(value)))[0])
    if spark_type == "double":
        return repr(float(value))
    if spark_type in ("timestamp", "timestamp_ntz"):
        if isinstance(value, datetime):
            if value.tzinfo is not None:
                value = value.astimezone(UTC).replace(tzinfo=None)
            return str(value.strftime("%Y-%m-%d %H:%M:%S.%f"))
        return str(value)  # silver: already formatted by Spark in UTC
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, memoryview | bytes | bytearray):
        return bytes(value).hex()
    return str(value)


def row_hash(values: Sequence[str]) -> str:
    return hashlib.sha256("\x1f".join(values).encode("utf-8")).hexdigest()


def _value_expression(table: SourceTable, name: str) -> str:
    """A column the way verify reads it: typed where the Spark type is typed, else as printed."""
    column = table.column(name)
    needs_text = column.spark_type == "string" and column.pg_type not in (*_TEXT_TYPES, "bytea")
    return f"{quote_pg(name)}::text" if needs_text else quote_pg(name)


def _source_select(table: SourceTable, columns: Sequence[str]) -> str:
    parts = [_value_expression(table, name) for name in columns]
    return f"SELECT {', '.join(parts)} FROM {quote_pg(table.schema)}.{quote_pg(table.name)}"


_CONSTANT = re.compile(r"^(?:'(?:[^']|'')*'|-?[\d.]+(?:e[-+]?\d+)?|true|false)(?:::[\w .\"\[\](),]+)*$")


def _added_defaults(conn: Any, table: SourceTable, columns: Sequence[str]) -> dict[str, list[Any]]:
    """Column -> the values PostgreSQL may show for rows older than an ``ADD COLUMN ... DEFAULT``,
    read the way ``_source_select`` reads the column: the value stored when the column was added
    (``pg_attribute.attmissingval``, until a table rewrite materialises it) and the current
    default when it is a constant (other defaults are never evaluated: they may have effects)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), "
            "CASE WHEN a.atthasmissing THEN a.attmissingval::text END, pg_get_expr(d.adbin, d.adrelid) "
            "FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
            "AND (a.atthasmissing OR d.adbin IS NOT NULL)",
            (f"{quote_pg(table.schema)}.{quote_pg(table.name)}",),
        )
        found = [row for row in cur.fetchall() if row[0] in columns]
        defaults: dict[str, list[Any]] = {}
        for name, type_name, missing, default in found:
            expressions = [f"(%s::{type_name}[])[1]"] if missing is not None else []
            if default is not None and _CONSTANT.match(default.strip()):
                expressions.append(f"({default})::{type_name}")
            for expression in expressions:
                cur.execute(
                    f"SELECT {_value_expression(table, name)} FROM (SELECT {expression} AS {quote_pg(name)}) s",
                    (missing,) if expression.startswith("(%s") else None,
                )
                defaults.setdefault(name, []).append(cur.fetchone()[0])
    return defaults


def _source_rows(conn: Any, table: SourceTable, columns: Sequence[str]) -> Iterable[tuple[Any, ...]]:
    conn.autocommit = False  # a named (server-side) cursor streams rows inside a transaction
    with conn.cursor(name="cdclake_verify") as cur:
        cur.itersize = 5000
        cur.execute(_source_select(table, columns))
        yield from cur
    conn.commit()
    conn.autocommit = True


def _silver_rows(engine: Engine, config: TableConfig, columns: Sequence[str], types: dict[str, str]) -> Any:
    from pyspark.sql import functions as F

    frame = engine.spark.table(engine.silver_table(config).identifier)
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        return missing
    selected = [
        F.date_format(F.col(c), "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(c)
        if types[c] in ("timestamp", "timestamp_ntz")
        else F.col(c)
        for c in columns
    ]
    return frame.select(*selected).toLocalIterator()


def compare_table(engine: Engine, conn: Any, config: TableConfig, source: SourceTable) -> TableComparison:
    """Compare one silver table with its source table (the table's configured columns)."""
    from cdclake.lake.tables import table_exists

    result = TableComparison(table=config.source)
    # The source's columns as they are now (a column dropped at the source is not compared).
    columns = [c.name for c in source.columns]
    types = {c: config.columns.get(c) or source.column(c).spark_type for c in columns}
    if not table_exists(engine.spark, engine.silver_table(config)):
        result.problem = "no silver table"
        return result
    key = list(config.primary_key)
    key_index = [columns.index(k) for k in key]
    defaults = {columns.index(c): canonical(v, types[c]) for c, v in _added_defaults(conn, source, columns).items()}
    without_defaults: dict[str, str] = {}  # key -> row hash with added-column defaults read as NULL

    def digest(rows: Iterable[Sequence[Any]], source_side: bool) -> tuple[int, dict[str, str] | Counter[str]]:
        count = 0
        keyed: dict[str, str] = {}
        unkeyed: Counter[str] = Counter()
        for row in rows:
            count += 1
            values = [canonical(v, types[c]) for v, c in zip(row, columns, strict=True)]
            if key:
                ident = ", ".join(f"{k}={values[i]}" for k, i in zip(key, key_index, strict=True))
                keyed[ident] = row_hash(values)
                if source_side and any(values[i] in d for i, d in defaults.items()):
                    nulled = [_NULL if v in defaults.get(i, ()) else v for i, v in enumerate(values)]
                    without_defaults[ident] = row_hash(nulled)
            else:
                unkeyed[row_hash(values)] += 1
        return count, (keyed if key else unkeyed)

    silver = _silver_rows(engine, config, columns, types)
    if isinstance(silver, list):
        result.problem = f"silver lacks column(s) {', '.join(silver)}"
        return result
    result.silver_rows, silver_digest = digest(silver, source_side=False)
    result.source_rows, source_digest = digest(_source_rows(conn, source, columns), source_side=True)
    if key:
        assert isinstance(source_digest, dict) and isinstance(silver_digest, dict)
        result.missing = sorted(set(source_digest) - set(silver_digest))
        result.unexpected = sorted(set(silver_digest) - set(source_digest))
        differing = sorted(
            k for k in source_digest.keys() & silver_digest.keys() if source_digest[k] != silver_digest[k]
        )
        result.unlogged_defaults = [k for k in differing if without_defaults.get(k) == silver_digest[k]]
        result.different = [k for k in differing if without_defaults.get(k) != silver_digest[k]]
    else:
        assert isinstance(source_digest, Counter) and isinstance(silver_digest, Counter)
        result.missing = [f"row hash {h[:12]} x{n}" for h, n in sorted((source_digest - silver_digest).items())]
        result.unexpected = [f"row hash {h[:12]} x{n}" for h, n in sorted((silver_digest - source_digest).items())]
    return result


def verify(engine: Engine, conn: Any, tables: Sequence[TableConfig] | None = None) -> list[TableComparison]:
    """Compare each configured table (or ``tables``) with the source database behind ``conn``."""
    selected = list(tables or engine.config.tables)
    with conn.cursor() as cur:
        sources = {t.qualified: t for t in read_tables(cur, (), [t.source for t in selected])}
    return [compare_table(engine, conn, t, sources[t.source]) for t in selected]


def format_comparisons(results: Sequence[TableComparison], show: int = 20) -> str:
    """One line per table, then up to ``show`` differing keys of each kind."""
    lines = []
    for r in results:
        if r.problem:
            lines.append(f"DIFFERS {r.table}: {r.problem}")
            continue
        verdict = "OK     " if r.equal else "DIFFERS"
        lines.append(f"{verdict} {r.table}: source rows={r.source_rows} silver rows={r.silver_rows}")
        for label, keys in (("missing from silver", r.missing), ("not at the source", r.unexpected),
                            ("content differs", r.different),
                            ("default not in silver (row older than an ADD COLUMN ... DEFAULT, not written since)",
                             r.unlogged_defaults)):  # fmt: skip
            for k in keys[:show]:
                lines.append(f"  {label}: {k}")
            if len(keys) > show:
                lines.append(f"  ... and {len(keys) - show} more {label}")
    return "\n".join(lines) + "\n"
