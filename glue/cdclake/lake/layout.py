"""Key-clustered silver layouts, so that looking up a batch's keys reads few files.

- ``sorted``: ``WRITE ORDERED BY`` the key. New files hold narrow key ranges; a key-range filter
  (``publish.key_bounds``) prunes files by their min/max statistics, and Parquet row groups
  within them. Maintenance keeps existing files in that order (a sort compaction).
- ``bucket``: ``bucket(N, first key column)`` partitioning. Spark's runtime filter prunes whole
  buckets from the broadcast keys; N files at least per write.
- ``none``: Iceberg's default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cdclake.config import LAYOUTS, Layout
from cdclake.identifiers import quote
from cdclake.lake.tables import iceberg_table

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_BUCKETS = 16


def layout_statements(
    table_identifier: str, key: Sequence[str], layout: Layout, buckets: int = DEFAULT_BUCKETS
) -> list[str]:
    """The DDL that gives ``table_identifier`` the ``layout`` (metadata only: no data is rewritten)."""
    if layout == "none":
        return []
    if layout == "sorted":
        return [f"ALTER TABLE {table_identifier} WRITE ORDERED BY {', '.join(quote(k) for k in key)}"]
    if layout == "bucket":
        return [f"ALTER TABLE {table_identifier} ADD PARTITION FIELD bucket({buckets}, {quote(key[0])})"]
    raise ValueError(f"unknown layout {layout!r}; one of {', '.join(LAYOUTS)}")


def apply_layout(
    spark: SparkSession, table_identifier: str, key: Sequence[str], layout: Layout, buckets: int = DEFAULT_BUCKETS
) -> None:
    """Give the table the layout for its future writes; a table that has it already is left alone
    (no new metadata version), so callers may apply it on every load and maintenance run."""
    if layout == "none" or has_layout(iceberg_table(spark, table_identifier), key, layout):
        return
    for statement in layout_statements(table_identifier, key, layout, buckets):
        spark.sql(statement)


def has_layout(table: Any, key: Sequence[str], layout: Layout) -> bool:
    """Whether the Iceberg ``table`` (Java API) is already sorted by ``key`` / bucketed on its first column."""
    ids = [table.schema().findField(k).fieldId() for k in key]
    if layout == "sorted":
        fields = table.sortOrder().fields()
        return [fields.get(i).sourceId() for i in range(fields.size())] == ids
    specs = table.spec().fields()
    return any(
        specs.get(i).sourceId() == ids[0] and str(specs.get(i).transform()).startswith("bucket")
        for i in range(specs.size())
    )
