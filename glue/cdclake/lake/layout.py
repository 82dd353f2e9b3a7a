"""Key-clustered silver layouts, so that looking up a batch's keys reads few files.

- ``sorted``: ``WRITE ORDERED BY`` the key. New files hold narrow key ranges; a key-range filter
  (``publish.key_bounds``) prunes files by their min/max statistics, and Parquet row groups
  within them. Existing files are re-clustered by ``cluster_existing`` (a sort compaction).
- ``bucket``: ``bucket(N, first key column)`` partitioning. Spark's runtime filter prunes whole
  buckets from the broadcast keys; N files at least per write.
- ``none``: Iceberg's default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from cdclake.identifiers import quote

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

Layout = Literal["none", "sorted", "bucket"]
LAYOUTS: tuple[Layout, ...] = ("none", "sorted", "bucket")
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
    """Give the table the layout for its future writes (see ``cluster_existing`` for old files).

    Idempotent: a table that already has the bucket partition field keeps it."""
    for statement in layout_statements(table_identifier, key, layout, buckets):
        try:
            spark.sql(statement)
        except Exception as failure:
            if (layout == "bucket" and "already" in str(failure).lower()) or "duplicate" in str(failure).lower():
                continue
            raise


def cluster_existing(spark: SparkSession, catalog: str, table_name: str, layout: Layout) -> None:
    """Rewrite the existing files into the layout (maintenance): ``table_name`` is ``db.table``."""
    if layout == "none":
        return
    strategy = "strategy => 'sort', " if layout == "sorted" else ""
    options = "map('rewrite-all', 'true')"
    spark.sql(
        f"CALL {quote(catalog)}.system.rewrite_data_files(table => '{table_name}', {strategy}options => {options})"
    )
