"""``cdclake query`` with no JVM for the simplest statements on a local warehouse.

A cold command pays 8-14 s to start Spark. ``SELECT * | col, ... FROM [silver.]<db>.<table> [LIMIT n]``
on a table held in one data file with no delete file is read here by pyiceberg and printed through
``shells.query.rendered`` (the Spark path's own rendering), so the text is the same byte for byte:

- one data file, no delete file: the rows come in the file's order, the order Spark reads them in (with
  several files the two readers may order them differently, and a LIMIT may then pick other rows);
- only the types whose values Python renders as Spark's ``collect`` and string casts do: int, long,
  decimal, double, boolean, string, binary, date and timestamp (with or without zone; the session's zone
  is UTC), years 1000 to 9999;
- column names exactly as the table's schema spells them (Spark resolves others case-insensitively).

Anything else returns None: the caller runs the statement on Spark.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import date, datetime
from pathlib import Path
from typing import Any

from cdclake.config import DEFAULT_CATALOG
from cdclake.lake.local_tables import LocalTable, LocalWarehouse
from cdclake.shells.query import QueryOutput, rendered, row_limit
from cdclake.types import COLUMN_TYPES

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_SIMPLE = re.compile(
    rf"\s*select\s+(?P<columns>\*|{_NAME}(?:\s*,\s*{_NAME})*)\s+from\s+(?:(?P<catalog>{_NAME})\.)?"
    rf"(?P<database>{_NAME})\.(?P<table>{_NAME})(?:\s+limit\s+(?P<limit>[0-9]+))?\s*;?\s*",
    re.IGNORECASE,
)
_KEYWORDS = frozenset({"select", "from", "limit", "where", "distinct", "all", "as"})
# The Iceberg types whose values this path renders as Spark does: all but a float (Spark prints a float32's
# shortest text, Python a float64's) and a decimal (matched by its spelling, below).
_PLAIN = frozenset(t.iceberg for t in COLUMN_TYPES if t.iceberg != "float" and t.family != "decimal")
_DECIMAL = re.compile(r"decimal\(\s*\d+\s*,\s*\d+\s*\)")


class _NeedsSpark(Exception):
    """A value this path does not render as Spark does (a year outside 1000-9999, a zone other than UTC)."""


def query_without_jvm(warehouse: Path, sql: str, style: str, limit: int | None) -> QueryOutput | None:
    """``shells.query.run_query`` of ``sql`` read by pyiceberg from the local ``warehouse``, or None:
    the statement or the table is outside what this path renders exactly (the module's docstring)."""
    match = _SIMPLE.fullmatch(sql)
    if match is None or (match["catalog"] is not None and match["catalog"] != DEFAULT_CATALOG):
        return None
    table = LocalWarehouse(warehouse).table(match["database"], match["table"])
    if table is None or not _single_file(table.current_summary()):
        return None
    fields = {f["name"]: f for f in _current_fields(table.metadata)}
    wanted = list(fields) if match["columns"] == "*" else [c.strip() for c in match["columns"].split(",")]
    if any(c not in fields or c.lower() in _KEYWORDS for c in wanted):
        return None
    kinds = [fields[c]["type"] for c in wanted]
    if not all(isinstance(k, str) and (k in _PLAIN or _DECIMAL.fullmatch(k)) for k in kinds):
        return None
    cap = row_limit(style, limit)
    # as Spark's ``frame.limit(cap + 1)`` over the statement's own LIMIT: the fewer of the two
    bounds = [int(match["limit"])] if match["limit"] is not None else []
    take = min([*bounds, cap + 1]) if cap is not None else min(bounds, default=None)
    try:
        rows = [[_spark_value(v, k) for v, k in zip(row, kinds, strict=True)] for row in _read(table, wanted, take)]
    except Exception:  # a value out of reach (pyarrow refuses a year Python cannot hold), an unreadable
        return None  # file: Spark reads it, or says what is wrong in its own words
    return rendered(wanted, rows, style, limit, cap)


def _single_file(summary: dict[str, str] | None) -> bool:
    """Whether the current snapshot is one data file and no delete file (no snapshot: no rows, also fine)."""
    if summary is None:
        return True
    return summary.get("total-data-files") in ("0", "1") and summary.get("total-delete-files") == "0"


def _current_fields(metadata: dict[str, Any]) -> list[dict[str, Any]]:
    schemas = metadata.get("schemas") or [metadata.get("schema")]
    wanted = metadata.get("current-schema-id")
    schema = next((s for s in schemas if s.get("schema-id") == wanted), schemas[-1])
    return list(schema["fields"])


def _read(table: LocalTable, columns: Sequence[str], take: int | None) -> list[list[Any]]:
    from pyiceberg.table import StaticTable

    from cdclake.lake.counts import FILE_IO

    if table.current_snapshot_id is None or take == 0:
        return []
    unique = tuple(dict.fromkeys(columns))  # a column named twice is read once
    scan = StaticTable.from_metadata(table.metadata_location, FILE_IO).scan(selected_fields=unique, limit=take)
    arrow = scan.to_arrow()
    values = {c: arrow.column(c).to_pylist() for c in unique}
    return [list(row) for row in zip(*(values[c] for c in columns), strict=True)]


def _spark_value(value: Any, kind: str) -> Any:
    """``value`` as Spark's ``collect`` gives it after ``printable_frame``: dates and timestamps as
    Spark casts them to text (``yyyy-MM-dd``, ``yyyy-MM-dd HH:mm:ss[.f]``: trailing zeros of the
    fraction dropped), everything else as Python holds it."""
    if value is None:
        return None
    if kind == "date" and isinstance(value, date):
        if not 1000 <= value.year <= 9999:
            raise _NeedsSpark(kind)
        return value.isoformat()
    if kind in ("timestamp", "timestamptz") and isinstance(value, datetime):
        if not 1000 <= value.year <= 9999 or (value.utcoffset() or 0):
            raise _NeedsSpark(kind)
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        fraction = f"{value.microsecond:06d}".rstrip("0")
        return f"{text}.{fraction}" if fraction else text
    return value
