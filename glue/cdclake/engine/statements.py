"""The SQL text of the MERGE statements that apply changes and tombstones (pure string building)."""

from __future__ import annotations

from cdclake.columns import OP, SILVER_ORDER, UNCHANGED_PREFIX
from cdclake.identifiers import quote
from cdclake.lake.batch import WrittenColumns


def merge_statement(target: str, source_view: str, written: WrittenColumns) -> str:
    """One MERGE that applies de-duplicated changes (one row per key, with ``_cdc_order``).

    A change older than the stored row's order is ignored. Deletes remove a matched row and
    ignore a missing one; inserts and updates both upsert. ``written.absent`` names silver columns the
    batch does not carry (dropped at the source): they become NULL on insert and update.
    ``written.unchanged`` names columns with a ``_cdc_unchanged_`` flag: flagged values keep the stored one.
    """
    key, columns, absent, unchanged = written.key, written.columns, written.absent, written.unchanged
    on = " AND ".join(f"t.{quote(k)} = s.{quote(k)}" for k in key)
    newer = f"(t.{SILVER_ORDER} IS NULL OR s.{SILVER_ORDER} >= t.{SILVER_ORDER})"
    non_key = [c for c in columns if c not in key]

    def value(c: str) -> str:
        if c in unchanged:
            return f"CASE WHEN s.{quote(UNCHANGED_PREFIX + c)} THEN t.{quote(c)} ELSE s.{quote(c)} END"
        return f"s.{quote(c)}"

    sets = [f"t.{quote(c)} = {value(c)}" for c in (*non_key, SILVER_ORDER)]
    sets += [f"t.{quote(c)} = NULL" for c in absent]
    insert_cols = ", ".join(quote(c) for c in (*columns, SILVER_ORDER))
    insert_vals = ", ".join(f"s.{quote(c)}" for c in (*columns, SILVER_ORDER))
    return "\n".join(
        [
            f"MERGE INTO {target} AS t",
            f"USING {source_view} AS s",
            f"ON {on}",
            f"WHEN MATCHED AND s.{OP} = 'D' AND {newer} THEN DELETE",
            f"WHEN MATCHED AND {newer} THEN UPDATE SET {', '.join(sets)}",
            f"WHEN NOT MATCHED AND s.{OP} <> 'D' THEN INSERT ({insert_cols}) VALUES ({insert_vals})",
        ]
    )
