"""PostgreSQL tables as cdclake sees them: columns, Spark types, primary keys, and value text.

Type mapping (PostgreSQL -> Spark SQL type in the table configuration -> text written to bronze).
The Spark types are ``init``'s (``cdclake.sources.catalog.dms_types``: what DMS writes), so a
configuration from ``init`` or from capture reads capture's files the same way:

========================  =====================  ===============================================
PostgreSQL                Spark                  bronze text
========================  =====================  ===============================================
boolean                   boolean                ``true`` / ``false``
smallint, int, bigint     smallint, int, bigint  as PostgreSQL prints it
oid                       bigint                 as printed
real, double precision    float, double          as printed (``NaN``, ``Infinity`` included)
numeric(p,s), p <= 38     decimal(p,s)           as printed
numeric (no precision)    string                 as printed: exact (25 digits, ``NaN``), where
                                                 DMS's default NUMERIC(28,6) would round
money                     decimal(38,4)          the amount: ``-1234.56`` (no ``$``, no ``,``)
date                      date                   ``yyyy-MM-dd``; ``infinity`` -> ``9999-12-31``,
                                                 ``-infinity`` -> ``0001-01-01``
timestamp                 timestamp_ntz          ``yyyy-MM-dd HH:mm:ss.ffffff``; ``infinity`` ->
                                                 ``9999-12-31 23:59:59.999999``, ``-infinity`` ->
                                                 ``0001-01-01 00:00:00.000000``
timestamptz               timestamp              the instant in UTC, as timestamp (same clamp)
bytea                     string                 lowercase hexadecimal, no ``\\x`` prefix
everything else           string                 as printed (json, jsonb, uuid, inet, cidr,
                                                 arrays, ranges, interval, time, enums, char(n)
                                                 with its padding, ...)
========================  =====================  ===============================================

"As printed" is the type's output function with the session settings of ``SESSION_SETTINGS``, which
is what both ``COPY ... TO STDOUT`` (the full load) and ``pgoutput`` (CDC) produce.

Infinity: Spark's dates and timestamps end at years 1 and 9999, and DMS documents nothing for
PostgreSQL's ``infinity``; capture clamps ``±infinity`` to those ends (the values psycopg2 and
Python's ``date.max`` / ``datetime.min`` use too), so the row loads. A stored ``9999-12-31`` and
``infinity`` are then the same in silver. A value the mapping still cannot read (a date after
9999 or before year 1, ``NaN`` in a numeric(p,s)) is written as printed, and the engine holds the
row in quarantine naming file, row, column and value.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cdclake.identifiers import IDENTIFIER

# Output settings for every session that reads values (capture and verify).
SESSION_SETTINGS = {
    "TimeZone": "UTC",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "bytea_output": "hex",
    "extra_float_digits": "1",
    "lc_monetary": "C",  # money as -$1,234.56 whatever the server's locale (money_text reads that)
}


@dataclass(frozen=True)
class SourceColumn:
    name: str
    pg_type: str  # the base type's name (domains resolved), e.g. int4, numeric, _text for text[]
    type_modifier: int  # atttypmod: -1 when none
    spark_type: str
    not_null: bool = False

    @property
    def source_type(self) -> str:
        """The type as the checksums' SQL reads it (``verify.checksum_sql``)."""
        return self.pg_type


@dataclass(frozen=True)
class SourceTable:
    schema: str
    name: str
    columns: tuple[SourceColumn, ...]
    primary_key: tuple[str, ...]
    replica_identity: str  # d default, f full, n nothing, i index

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def column(self, name: str) -> SourceColumn:
        return next(c for c in self.columns if c.name == name)


def spark_type(pg_type: str, type_modifier: int) -> str:
    """The Spark SQL type for a PostgreSQL base type (see the module table): ``init``'s, for CSV."""
    from cdclake.sources.catalog.dms_types import postgres_dms_type
    from cdclake.sources.catalog.dms_types import spark_type as dms_spark_type

    return dms_spark_type(postgres_dms_type(pg_type, type_modifier))


_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.(\d{1,6}))?([+-]\d\d(?::?\d\d(?::?\d\d)?)?)?$")


# ``±infinity`` clamped to the ends of Spark's range (module docstring).
_INFINITE_TIMESTAMP = {"infinity": "9999-12-31 23:59:59.999999", "-infinity": "0001-01-01 00:00:00.000000"}
_INFINITE_DATE = {"infinity": "9999-12-31", "-infinity": "0001-01-01"}


def _timestamp_text(value: str, with_zone: bool) -> str:
    if value in _INFINITE_TIMESTAMP:
        return _INFINITE_TIMESTAMP[value]
    match = _TIMESTAMP.match(value)
    if not match:
        return value  # BC or after-9999 values: left for the engine to reject by name
    whole, fraction, zone = match.groups()
    fraction = (fraction or "").ljust(6, "0")
    if not with_zone or zone in (None, "+00"):
        return f"{whole}.{fraction}"
    stamp = datetime.fromisoformat(f"{whole}.{fraction}{zone}")
    return stamp.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")


def value_text(pg_type: str) -> Callable[[str], str]:
    """A function from PostgreSQL's printed value to the text Spark's cast reads (module table)."""
    if pg_type == "bool":
        return lambda v: {"t": "true", "f": "false"}.get(v, v)
    if pg_type == "timestamptz":
        return lambda v: _timestamp_text(v, with_zone=True)
    if pg_type == "timestamp":
        return lambda v: _timestamp_text(v, with_zone=False)
    if pg_type == "date":
        return lambda v: _INFINITE_DATE.get(v, v)
    if pg_type == "bytea":
        return lambda v: v[2:] if v.startswith("\\x") else v
    if pg_type == "money":
        return money_text
    return lambda v: v


_MONEY = re.compile(r"^(-?)\$?([\d,]+(?:\.\d+)?)$")


def money_text(value: str) -> str:
    """``money`` as printed with ``lc_monetary=C`` (``-$1,234.56``) -> the amount (``-1234.56``).
    Anything else is left as it is, for the engine to reject by name."""
    match = _MONEY.match(value)
    return f"{match.group(1)}{match.group(2).replace(',', '')}" if match else value


# --------------------------------------------------------------------------- catalog queries

_TABLES_SQL = """
SELECT n.nspname, c.relname, c.relreplident,
       a.attname, a.attnotnull,
       COALESCE(bt.typname, t.typname) AS base_type,
       CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END AS typmod,
       t.typtype, COALESCE(bt.typcategory, t.typcategory) AS category,
       COALESCE(pk.position, 0) AS pk_position
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
JOIN pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
LEFT JOIN LATERAL (
    SELECT k.position FROM pg_index i, unnest(i.indkey) WITH ORDINALITY AS k(attnum, position)
    WHERE i.indrelid = c.oid AND i.indisprimary AND k.attnum = a.attnum
) pk ON true
WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
  AND n.nspname = ANY(%(schemas)s)
ORDER BY n.nspname, c.relname, a.attnum
"""


def read_tables(cursor: Any, schemas: Sequence[str], only: Sequence[str] = ()) -> list[SourceTable]:
    """Ordinary and partitioned tables of ``schemas`` (or just ``only``: ``schema.table`` names).

    ``cursor`` is a DB-API cursor on the source database. Columns are in ``attnum`` order (the
    order the full load and the table configuration use); the primary key in index order.
    """
    wanted_schemas = sorted({*schemas, *(name.split(".", 1)[0] for name in only)})
    cursor.execute(_TABLES_SQL, {"schemas": wanted_schemas})
    rows = cursor.fetchall()
    grouped: dict[tuple[str, str], list[tuple[Any, ...]]] = {}
    for row in rows:
        grouped.setdefault((row[0], row[1]), []).append(row)
    tables = []
    for (schema, name), columns in grouped.items():
        if only and f"{schema}.{name}" not in only:
            continue
        if not only and schema not in schemas:
            continue
        source_columns = []
        for _s, _n, _ident, column, not_null, base_type, typmod, _typtype, category, _pk in columns:
            pg_type = "array" if category == "A" else str(base_type)
            source_columns.append(
                SourceColumn(column, pg_type, int(typmod), spark_type(pg_type, int(typmod)), bool(not_null))
            )
        key = tuple(c[3] for c in sorted((c for c in columns if c[9]), key=lambda c: int(c[9])))
        tables.append(SourceTable(schema, name, tuple(source_columns), key, str(columns[0][2])))
    missing = sorted(set(only) - {t.qualified for t in tables})
    if missing:
        from cdclake.errors import ConfigError

        raise ConfigError(
            f"The source database has no table {', '.join(missing)}: check the name (in the configuration, or "
            "the one given with --table)."
        )
    return tables


_TOASTABLE_SQL = """
SELECT n.nspname, c.relname, a.attname, bt.typname,
       CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, bt.typtype, coalesce(st.typlen, 0)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_type bt ON bt.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END
LEFT JOIN pg_range r ON r.rngtypid = bt.oid
LEFT JOIN pg_type st ON st.oid = r.rngsubtype
WHERE c.relkind IN ('r', 'p') AND c.relreplident <> 'f' AND a.attstorage <> 'p'
  AND n.nspname = ANY(%(schemas)s)
ORDER BY n.nspname, c.relname, a.attnum
"""

# PostgreSQL moves values out of line (TOAST) only from rows over TOAST_TUPLE_THRESHOLD, about 2 kB,
# biggest values first: a column whose values are at most a few hundred bytes is not warned about.
TOAST_TUPLE_THRESHOLD = 2032


def can_be_toasted(pg_type: str, type_modifier: int, kind: str = "b", range_element_length: int = 0) -> bool:
    """Whether a column of this type (not of fixed length: those never leave the row) can hold a
    value large enough to be stored out of line: ``numeric(p,s)`` holds at most ~500 bytes, inet and
    cidr ~20, a range of fixed-size elements ~40, ``varchar(n)`` / ``char(n)`` 4n; text, bytea,
    json/jsonb, xml, arrays, unconstrained ``numeric`` and ``varchar`` and every other varlena are
    unbounded. ``kind``: ``typtype`` (``r`` a range, whose elements are ``range_element_length``
    bytes each, negative for a varlena)."""
    if pg_type == "numeric":
        return type_modifier == -1
    if pg_type in ("varchar", "bpchar"):
        return type_modifier == -1 or 4 * (type_modifier - 4) + 4 >= TOAST_TUPLE_THRESHOLD
    if pg_type in ("inet", "cidr"):
        return False
    if kind == "r":
        return range_element_length < 0
    return True


def toastable_columns(cursor: Any, schemas: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """``schema.table`` -> its columns that can hold out-of-line (TOASTed) values (``can_be_toasted``),
    for tables of ``schemas`` without REPLICA IDENTITY FULL. An update that leaves such a value
    unchanged does not log it (pgoutput sends "unchanged"), so capture cannot write the row and holds the table."""
    cursor.execute(_TOASTABLE_SQL, {"schemas": list(schemas)})
    found: dict[str, tuple[str, ...]] = {}
    for schema, table, column, pg_type, type_modifier, kind, element_length in cursor.fetchall():
        if can_be_toasted(str(pg_type), int(type_modifier), str(kind), int(element_length)):
            found[f"{schema}.{table}"] = (*found.get(f"{schema}.{table}", ()), str(column))
    return found


def full_identity_warning(table: str, columns: Sequence[str]) -> str:
    """The warning for a table ``toastable_columns`` names, with the fix."""
    return (
        f"{table}: column(s) {', '.join(columns)} can hold large (TOASTed) values that PostgreSQL does not log "
        "when an update leaves them unchanged, unless the table has REPLICA IDENTITY FULL; capture then holds "
        f"the table. Run ALTER TABLE {table} REPLICA IDENTITY FULL before the first capture"
    )


def configuration_yaml(
    tables: Sequence[SourceTable],
    bronze_path: str,
    database: str,
    timestamp_column: str,
    change_sequence_column: str,
) -> str:
    """A cdclake table configuration for the captured tables (bronze settings as capture writes).

    Tables without a primary key become ``append_only: true``: capture publishes only their
    inserts, and silver keeps every inserted row with ``cdc_operation``. Files have a header row,
    so ``columns`` only declares types; capture keeps it current (``declare_columns``).
    """
    import yaml

    def quoted(value: str) -> str:
        return yaml.safe_dump(value, default_style='"').strip()

    lines = [
        "# Written by `cdclake capture` from the PostgreSQL catalog.",
        "bronze:",
        f"  path: {quoted(bronze_path)}",
        "  format: csv",
        "  csv_header: true  # capture writes a header row: each file names its columns",
        '  csv_null_value: ""',
        f"  timestamp_column: {timestamp_column}",
        f"  change_sequence_column: {change_sequence_column}",
        "silver:",
        f"  database: {database}",
        "tables:",
    ]
    for table in tables:
        plain = IDENTIFIER.match(table.schema) and IDENTIFIER.match(table.name)
        lines.append(f"  {table.qualified if plain else _yaml_name(table.qualified)}:")
        if table.primary_key:
            lines.append(f"    primary_key: [{', '.join(_yaml_name(k) for k in table.primary_key)}]")
        else:
            lines.append("    append_only: true  # no primary key at the source: inserts only")
        lines.append("    columns:")
        lines.extend(f'      {_yaml_name(c.name)}: "{c.spark_type}"' for c in table.columns)
    return "\n".join(lines) + "\n"


_TYPE_SQL = """
SELECT COALESCE(bt.typname, t.typname), CASE WHEN t.typtype = 'd' THEN t.typtypmod END,
       COALESCE(bt.typcategory, t.typcategory)
FROM pg_type t LEFT JOIN pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
WHERE t.oid = %s
"""


def column_of_type(cursor: Any, name: str, type_oid: int, type_modifier: int) -> SourceColumn:
    """A column as a pgoutput Relation message describes it (type OID and modifier), resolved the way
    ``read_tables`` resolves catalog columns: domains to their base type, arrays to ``array``."""
    cursor.execute(_TYPE_SQL, (type_oid,))
    row = cursor.fetchone()
    if row is None:  # a type dropped since: its values are still text
        return SourceColumn(name, f"oid {type_oid}", type_modifier, "string")
    base, domain_modifier, category = row
    pg_type = "array" if category == "A" else str(base)
    modifier = int(domain_modifier) if domain_modifier is not None else type_modifier
    return SourceColumn(name, pg_type, modifier, spark_type(pg_type, modifier))


def _yaml_name(value: str) -> str:
    """A schema, table or column name as YAML reads it back: quoted unless it is an identifier."""
    import yaml

    return value if IDENTIFIER.match(value) else yaml.safe_dump(value, default_style='"', width=1 << 20).strip()


def declare_columns(text: str, table: str, types: dict[str, str]) -> str | None:
    """The configuration ``text`` with ``types`` (column -> Spark type) declared under ``table``'s
    ``columns``: existing entries get the new type, new ones are appended. Only those spans of the
    text change (comments and everything else are kept). ``None`` when the table or its
    ``columns`` mapping is not there to edit.
    """
    import yaml
    from yaml.nodes import MappingNode, ScalarNode

    def child(node: Any, key: str) -> Any:
        if isinstance(node, MappingNode):
            for k, v in node.value:
                if isinstance(k, ScalarNode) and k.value == key:
                    return v
        return None

    columns = child(child(child(yaml.compose(text), "tables"), table), "columns")
    if not isinstance(columns, MappingNode):
        return None
    edits: list[tuple[int, int, str]] = []  # (start, end, replacement), spans of the original text
    declared = {k.value: v for k, v in columns.value}
    for name, type_name in types.items():
        node = declared.get(name)
        if node is not None and str(node.value).replace(" ", "").lower() != type_name:
            edits.append((node.start_mark.index, node.end_mark.index, f'"{type_name}"'))
    added = [(name, type_name) for name, type_name in types.items() if name not in declared]
    if added and columns.flow_style:
        closing = text.rindex("}", 0, columns.end_mark.index)
        entries = ", ".join(f'{_yaml_name(name)}: "{type_name}"' for name, type_name in added)
        edits.append((closing, closing, (", " if columns.value else "") + entries))
    elif added:
        if not columns.value:
            return None
        last_key, last_value = columns.value[-1]
        line_end = text.find("\n", last_value.end_mark.index)
        line_end = len(text) if line_end < 0 else line_end
        indent = " " * last_key.start_mark.column
        edits.append((line_end, line_end, "".join(f'\n{indent}{_yaml_name(n)}: "{t}"' for n, t in added)))
    for start, end, replacement in sorted(edits, reverse=True):
        text = text[:start] + replacement + text[end:]
    return text
