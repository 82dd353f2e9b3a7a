"""What a mart's refresh reads: the tables its SQL names, each pinned at one snapshot and read
through temporary views of this refresh alone (``VERSION AS OF``), so marts refresh concurrently
in one session and each reflects one cut of silver."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdclake.config import gold_database, readable_tables
from cdclake.lake.tables import SilverTable
from cdclake.mart_config import MartConfig
from cdclake.mart_sql import referenced_tables

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from cdclake.context import Engine


@dataclass(frozen=True)
class PinnedSource:
    name: str  # database.table, as the SQL names it
    table: SilverTable
    snapshot_id: int


def mart_sources(engine: Engine, mart: MartConfig) -> list[tuple[str, SilverTable]]:
    """The tables a mart's SQL reads: (``database.table`` as written, the table): silver tables,
    then other marts (``<gold database>.<mart>``), which are pinned and recorded the same way."""
    known = readable_tables(engine.config.database, engine.config.tables)
    found = [
        (name, SilverTable(engine.catalog, engine.config.database, known[name]))
        for name in referenced_tables(mart.sql, known, engine.catalog)
    ]
    gold_db = gold_database(engine.config)
    marts = {f"{gold_db}.{m.name}": m.name for m in engine.config.gold.marts if m.name != mart.name}
    found += [
        (name, SilverTable(engine.catalog, gold_db, marts[name]))
        for name in referenced_tables(mart.sql, marts, engine.catalog)
    ]
    return found


class PinnedViews:
    """The temporary views of one refresh: session-wide names, so each refresh gets its own
    (``cdclake_gold_<random>_<role>``) and marts refreshing at once in one session never see
    each other's pinned snapshots; all dropped when the refresh ends."""

    def __init__(self, spark: SparkSession) -> None:
        self.spark = spark
        self.prefix = f"cdclake_gold_{uuid.uuid4().hex[:12]}_"
        self.registered: list[str] = []

    def register(self, role: str, frame: DataFrame) -> str:
        name = self.prefix + role
        frame.createOrReplaceTempView(name)
        self.registered.append(name)
        return name


@contextmanager
def pinned_views(spark: SparkSession) -> Iterator[PinnedViews]:
    """Temporary views registered during one refresh, dropped afterwards."""
    views = PinnedViews(spark)
    try:
        yield views
    finally:
        for name in views.registered:
            spark.catalog.dropTempView(name)


def pinned_read(spark: SparkSession, table: SilverTable, snapshot_id: int) -> DataFrame:
    return spark.sql(f"SELECT * FROM {table.identifier} VERSION AS OF {int(snapshot_id)}")
