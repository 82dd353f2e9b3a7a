"""Readers the tests run beside the writes they check: a poller of a table's ``main``, and the
same table read by another engine (pyiceberg, from its metadata file: no Spark, no catalog)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql import SparkSession

from cdclake.lake.tables import iceberg_table


class MainPoller(threading.Thread):
    """Watches main's head (Iceberg metadata only, no Spark job) while batches apply; ``seen`` holds
    every snapshot a reader could have read."""

    def __init__(self, spark: SparkSession, identifier: str) -> None:
        super().__init__(daemon=True)
        self.table = iceberg_table(spark, identifier)
        self.seen: set[int] = set()
        self.done = threading.Event()

    def __enter__(self) -> MainPoller:
        """Start watching (the ``with`` block's writes)."""
        self.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.join()

    def run(self) -> None:
        while not self.done.wait(0.02):
            self.table.refresh()
            self.seen.add(int(self.table.currentSnapshot().snapshotId()))


def _local(location: str) -> Path:
    return Path(location.removeprefix("file:"))


def newest_metadata_file(spark: SparkSession, identifier: str) -> Path:
    """The newest ``v<N>.metadata.json`` in the table's metadata folder (a Hadoop catalog's), found by
    listing the folder, not by asking Iceberg's Java API which one is current."""
    folder = _local(str(iceberg_table(spark, identifier).location())) / "metadata"
    return max(folder.glob("v*.metadata.json"), key=lambda p: int(p.name[1:].split(".")[0]))


def warehouse_of(spark: SparkSession, identifier: str) -> Path:
    """The local warehouse ``identifier`` (``silver.<db>.<table>``) lives in, from its own location: the
    session's ``spark.sql.catalog.silver.warehouse`` names the warehouse it was last asked for, not the one
    its catalog was made with when another test's job built the session first."""
    return newest_metadata_file(spark, identifier).parents[3]


def pyiceberg_read(spark: SparkSession, identifier: str) -> pa.Table:
    """``identifier``'s current rows as pyiceberg reads them from its newest metadata file."""
    from pyiceberg.table import StaticTable

    return StaticTable.from_metadata(str(newest_metadata_file(spark, identifier))).scan().to_arrow()


def spark_read(spark: SparkSession, identifier: str) -> pa.Table:
    """``identifier``'s current rows as Spark reads them, as Arrow (no Python date objects: a year
    10000 value stays a value)."""
    batches = spark.table(identifier)._collect_as_arrow()
    if batches:
        return pa.Table.from_batches(batches)
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(spark.table(identifier).schema).empty_table()


def _plain(column: Any) -> Any:
    """A column with dates as days and timestamps as microseconds since 1970 (proleptic
    Gregorian: the numbers Iceberg stores), time zones dropped, everything else as it is."""
    if pa.types.is_date32(column.type):
        return column.cast(pa.int32())
    if pa.types.is_timestamp(column.type):
        return column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
    return column


def comparable_rows(table: pa.Table) -> list[tuple[Any, ...]]:
    """``table``'s rows as sorted tuples of plain values (``_plain``), columns in the table's order."""
    plain = [_plain(table.column(i)).to_pylist() for i in range(table.num_columns)]
    return sorted(zip(*plain, strict=True), key=repr) if plain else []


def comparable_types(table: pa.Table) -> list[tuple[str, str]]:
    """(name, Arrow type) of ``table``'s columns, with the size variants Spark and pyiceberg pick
    differently told apart no further (large_string is string, timestamps drop their zone name)."""
    names = {"large_string": "string", "large_binary": "binary", "string_view": "string"}
    out = []
    for field in table.schema:
        text = str(field.type)
        if pa.types.is_timestamp(field.type):
            text = f"timestamp[{field.type.unit}]{' tz' if field.type.tz else ''}"
        out.append((field.name, names.get(text, text)))
    return out


def delete_file_schemas(spark: SparkSession, identifier: str) -> dict[str, pa.Schema]:
    """The Arrow schema of every position delete file the table ever had (``all_delete_files``),
    read from each file's Parquet footer by pyarrow: field ids and nullability as written."""
    rows = spark.sql(f"SELECT file_path FROM {identifier}.all_delete_files WHERE content = 1").collect()
    return {r[0]: pq.read_metadata(_local(r[0])).schema.to_arrow_schema() for r in rows}
