"""A scan that reads only the stored rows of a batch's keys: a filter Iceberg prunes data files by.

A small batch looks up the stored rows of its few keys (silver's, its tombstones', history's
versions of them). Spark would join the table with the keys (a job per side and a shuffle or a
broadcast); a ``WHERE key IN (...)`` filter instead reaches Iceberg's scan planning, which skips
every data file whose column bounds exclude the keys, and the rows read are matched by their
whole key after.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cdclake.identifiers import quote, sql_string

if TYPE_CHECKING:
    import pyarrow as pa


def sql_literal(value: Any, type_name: str) -> str | None:
    """``value`` (a key's value as Arrow gives it) as a Spark SQL literal of ``type_name``, or None
    for a value no literal states exactly (a float, bytes)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return sql_string(value)
    if isinstance(value, decimal.Decimal):
        return f"CAST({sql_string(str(value))} AS {type_name.upper()})"
    if isinstance(value, dt.datetime) and value.tzinfo is None:
        return f"TIMESTAMP_NTZ {sql_string(value.strftime('%Y-%m-%d %H:%M:%S.%f'))}"
    if isinstance(value, dt.datetime):  # the session's time zone is UTC (``runtime.session``)
        return f"TIMESTAMP {sql_string(value.astimezone(dt.UTC).strftime('%Y-%m-%d %H:%M:%S.%f'))}"
    if isinstance(value, dt.date):
        return f"DATE {sql_string(value.isoformat())}"
    return None


def key_filter(latest: pa.Table, key: Sequence[str], types: dict[str, str]) -> str | None:
    """SQL text: a row's key is among ``latest``'s, column by column (every key a batch holds
    passes; a stored row of another key may, and is matched by its whole key after), or None when
    a value has no exact literal."""
    parts = []
    for k in key:
        literals = {sql_literal(v, types[k]) for v in latest.column(k).to_pylist()}
        if None in literals:
            return None
        parts.append(f"{quote(k)} IN ({', '.join(sorted(str(x) for x in literals))})")
    return " AND ".join(parts)


def keys_of(rows: pa.Table, key: Sequence[str]) -> list[tuple[Any, ...]]:
    """Each row's key, as a tuple of its key columns' values (in ``key``'s order)."""
    return list(zip(*[rows.column(k).to_pylist() for k in key], strict=True))
