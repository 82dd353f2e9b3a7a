"""What ``cdclake init`` knows of a source table, whatever the engine."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cdclake.errors import CdclakeError

DatabaseEngine = Literal["postgres", "mysql", "sqlserver"]
ENGINES: tuple[DatabaseEngine, ...] = ("postgres", "mysql", "sqlserver")

# Where a table's key came from: its primary key, a unique index DMS would use instead, or none.
KeySource = Literal["primary key", "unique index", "none"]


class SourceCatalogError(CdclakeError):
    """The source database cannot be reached or read (the message says which and why)."""


@dataclass(frozen=True)
class CatalogColumn:
    name: str
    source_type: str  # the engine's own type text, e.g. "int unsigned", "numeric(12,2)", "nvarchar(40)"
    spark_type: str  # the Spark SQL type DMS's CSV/Parquet value of this column is read as


@dataclass(frozen=True)
class CatalogTable:
    schema: str
    name: str
    columns: tuple[CatalogColumn, ...]  # in the order DMS writes them (the catalog's ordinal order)
    key: tuple[str, ...] = ()  # in key order
    key_source: KeySource = "none"
    warnings: tuple[str, ...] = ()  # source settings capture needs and the table lacks (init --check prints them)

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.name}"

    def column(self, name: str) -> CatalogColumn:
        return next(c for c in self.columns if c.name == name)

    def types(self) -> dict[str, str]:
        return {c.name: c.spark_type for c in self.columns}
