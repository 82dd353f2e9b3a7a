"""Iceberg tables at the edge: create, replace, append, merge, evolve; every commit can carry properties.

Nothing here knows what a batch is: the ledger (``lake.ledger``) and the journals (``lake.journals``)
say what the properties and the side tables mean.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from cdclake.errors import java_classes
from cdclake.identifiers import quote, sql_string
from cdclake.lake.iceberg import IcebergTable, Snapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

T = TypeVar("T")

# Format v2 with merge-on-read row-level operations: a CDC batch writes delete files instead of
# rewriting data files, which keeps MERGE cost proportional to the changes. Maintenance compacts.
TABLE_PROPERTIES = {
    "format-version": "2",
    "write.delete.mode": "merge-on-read",
    "write.update.mode": "merge-on-read",
    "write.merge.mode": "merge-on-read",
    "write.parquet.compression-codec": "zstd",
    "write.target-file-size-bytes": str(128 * 1024 * 1024),
    "write.distribution-mode": "hash",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "100",
}


@dataclass(frozen=True)
class SilverTable:
    catalog: str
    database: str
    name: str

    @property
    def identifier(self) -> str:
        return f"{quote(self.catalog)}.{quote(self.database)}.{quote(self.name)}"

    def metadata(self, table: str) -> str:
        return f"{self.identifier}.{quote(table)}"


def commit_with_properties(spark: SparkSession, properties: dict[str, str], action: Callable[[], T]) -> T:
    """Run ``action`` so that every Iceberg commit it makes carries ``properties`` in its summary.

    Iceberg keeps the properties in a thread-local of the JVM thread that runs the write; py4j's
    pinned threads run the Python callback's Spark calls on that same JVM thread.
    """
    from pyspark.java_gateway import ensure_callback_server_started

    gateway: Any = spark.sparkContext._gateway
    jvm: Any = spark.sparkContext._jvm
    ensure_callback_server_started(gateway)  # type: ignore[no-untyped-call]
    results: list[T] = []
    failures: list[BaseException] = []

    class _Callable:
        def call(self) -> None:
            # Keep the Python exception: raised through py4j it would come back as a bare Java error.
            try:
                results.append(action())
            except BaseException as exc:
                failures.append(exc)

        class Java:
            implements = ("java.util.concurrent.Callable",)

    java_props = jvm.java.util.HashMap()
    for key, value in properties.items():
        java_props.put(key, value)
    runtime_exception = jvm.java.lang.Class.forName("java.lang.RuntimeException")
    jvm.org.apache.iceberg.spark.CommitMetadata.withCommitProperties(java_props, _Callable(), runtime_exception)
    if failures:
        raise failures[0]
    return results[0]


# What Iceberg raises when another writer committed first, by class: the commit's base is stale
# (CommitFailedException: the Hadoop catalog's stale metadata, Glue's concurrent update, a REST
# catalog's failed requirement), or its validation found the other writer's files or missed the
# files it deletes from (ValidationException). Spark may wrap either, so the cause chain counts.
_CONFLICT_CLASSES = frozenset(
    {"org.apache.iceberg.exceptions.CommitFailedException", "org.apache.iceberg.exceptions.ValidationException"}
)


class TableMovedError(RuntimeError):
    """Another writer committed to a table after the snapshot a batch was planned from (its ledger
    read): the batch must be planned again from the table as it is now."""


def is_commit_conflict(failure: BaseException) -> bool:
    """Whether ``failure`` means another writer committed to the table first (safe to retry):
    a ``TableMovedError``, an Iceberg commit conflict among the Java exceptions it carries, or
    either carried by an exception it was raised from (``raise ... from``; an error raised while
    handling another is its own).
    Decided by class, never by message text."""
    seen: set[int] = set()
    current: BaseException | None = failure
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, TableMovedError) or _CONFLICT_CLASSES.intersection(java_classes(current)):
            return True
        current = current.__cause__
    return False


def table_exists(spark: SparkSession, table: SilverTable) -> bool:
    return bool(spark.catalog.tableExists(table.identifier))


def table_names(spark: SparkSession, catalog: str, database: str) -> frozenset[str]:
    """The names of the tables in ``catalog``.``database`` (none when it does not exist), asked of
    the catalog itself: no SQL statement, whose first one costs a cold command seconds."""
    plugin = spark._jsparkSession.sessionState().catalogManager().catalog(catalog)
    namespace = spark.sparkContext._gateway.new_array(spark.sparkContext._jvm.java.lang.String, 1)  # type: ignore[union-attr]
    namespace[0] = database
    if not plugin.namespaceExists(namespace):
        return frozenset()
    return frozenset(str(identifier.name()) for identifier in plugin.listTables(namespace))


# Tables of one run are worked on concurrently: two of them may create the same namespace or
# side table at once, and the loser of such a race would fail; creations take turns instead.
_CREATING = threading.Lock()


def ensure_database(spark: SparkSession, catalog: str, database: str) -> None:
    with _CREATING:
        spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {quote(catalog)}.{quote(database)}")


def _iceberg_writer(rows: DataFrame, table: SilverTable) -> Any:
    writer = rows.writeTo(table.identifier).using("iceberg")
    for key, value in TABLE_PROPERTIES.items():
        writer = writer.tableProperty(key, value)
    return writer


def create_or_replace(spark: SparkSession, table: SilverTable, rows: DataFrame, properties: dict[str, str]) -> Snapshot:
    """Create or atomically replace ``table`` with ``rows``, one commit carrying ``properties``;
    return the snapshot it made (``committed_by_spark``)."""
    return committed_by_spark(spark, table, properties, _iceberg_writer(rows, table).createOrReplace)


def committed_by_spark(
    spark: SparkSession, table: SilverTable, properties: dict[str, str], write: Callable[[], object]
) -> Snapshot:
    """Run the Spark write ``write``, which makes one commit to ``table`` (creating it or not),
    carrying ``properties`` (``commit_with_properties``), and return the snapshot it made.

    Spark hands no snapshot back, so the table's last sequence number is read just before the
    write (0: no table yet) and the snapshot is the one committed since that carries
    ``properties`` (``IcebergTable.made_since``: the current one, unless another writer committed
    around it; never one committed before the write began). The tables written so are format v2
    (``TABLE_PROPERTIES``, a replace included), whose sequence numbers grow with every commit."""
    before = IcebergTable.latest(spark, table.identifier).last_sequence_number if table_exists(spark, table) else 0
    commit_with_properties(spark, properties, write)
    return IcebergTable.latest(spark, table.identifier).made_since(before, properties)


def ensure_table(spark: SparkSession, table: SilverTable, empty: DataFrame) -> None:
    """Create ``table`` with ``empty``'s schema (every column nullable) unless it exists (no ledger
    entry): a catalog operation, no Spark job."""
    if table_exists(spark, table):
        return
    columns = ", ".join(f"{quote(f.name)} {f.dataType.simpleString()}" for f in empty.schema.fields)
    properties = ", ".join(f"{sql_string(k)} = {sql_string(v)}" for k, v in TABLE_PROPERTIES.items())
    with _CREATING:
        if not table_exists(spark, table):
            spark.sql(f"CREATE TABLE {table.identifier} ({columns}) USING iceberg TBLPROPERTIES ({properties})")


def silver_columns(spark: SparkSession, table: SilverTable) -> list[tuple[str, str]]:
    """(name, Spark SQL type) of each column of ``table``, in order."""
    return [(f.name, f.dataType.simpleString()) for f in spark.table(table.identifier).schema.fields]


def evolve_schema(
    spark: SparkSession, table: SilverTable, add: Sequence[tuple[str, str]], widen: Sequence[tuple[str, str, str]]
) -> None:
    """Add columns (name, type) and widen them (name, from, to): metadata-only Iceberg changes."""
    for column, type_name in add:
        spark.sql(f"ALTER TABLE {table.identifier} ADD COLUMN {quote(column)} {type_name}")
    for column, _old, new in widen:
        spark.sql(f"ALTER TABLE {table.identifier} ALTER COLUMN {quote(column)} TYPE {new}")


def merge_frame(spark: SparkSession, rows: DataFrame, statement: Callable[[str], str]) -> None:
    """Run the MERGE ``statement(view)`` with ``rows`` registered as ``view`` (a name of its own)."""
    view = f"cdclake_source_{uuid.uuid4().hex}"
    rows.createOrReplaceTempView(view)
    try:
        spark.sql(statement(view))
    finally:
        spark.catalog.dropTempView(view)


def iceberg_table(spark: SparkSession, table_identifier: str) -> Any:
    """The Iceberg Java ``Table`` behind ``table_identifier`` (the catalog's cached instance), for the
    Iceberg operations ``lake`` builds itself (a RowDelta, a branch): ``IcebergTable.load``'s handle, the
    one loader; outside ``lake`` tables are read through ``IcebergTable``'s typed methods."""
    return IcebergTable.load(spark, table_identifier).java


@dataclass(frozen=True)
class IcebergField:
    """A top-level column of an Iceberg schema: its field id, name and type (Iceberg's JSON form:
    a primitive's name such as ``long`` or ``decimal(12, 2)``, or an object for nested types)."""

    id: int
    name: str
    type: Any

    @property
    def primitive(self) -> str | None:
        """The primitive type's name without parameters (``decimal``), None for nested types."""
        return self.type.split("(")[0].split("[")[0] if isinstance(self.type, str) else None


def iceberg_fields(spark: SparkSession, table: Any) -> list[IcebergField]:
    """The top-level columns of an Iceberg Java ``Table``'s schema, in order, read as one JSON text
    (walking the Java objects costs several calls into the JVM per column)."""
    jvm: Any = spark.sparkContext._jvm
    schema = json.loads(str(jvm.org.apache.iceberg.SchemaParser.toJson(table.schema())))
    return [IcebergField(int(f["id"]), str(f["name"]), f["type"]) for f in schema["fields"]]


def table_property(spark: SparkSession, table: SilverTable, name: str) -> str | None:
    """A property of ``table`` from its metadata; None when it is not set or the table does not exist."""
    if not table_exists(spark, table):
        return None
    value = iceberg_table(spark, table.identifier).properties().get(name)
    return None if value is None else str(value)


def current_snapshot_id(spark: SparkSession, table_identifier: str) -> int | None:
    """The id of the table's current snapshot (None: the table has none yet)."""
    table = iceberg_table(spark, table_identifier)
    table.refresh()
    current = table.currentSnapshot()
    return None if current is None else int(current.snapshotId())


def _current_total(spark: SparkSession, table_identifier: str, name: str) -> int:
    """A ``total-…`` figure of the current snapshot's summary (0 for a table without one)."""
    table = iceberg_table(spark, table_identifier)
    table.refresh()
    current = table.currentSnapshot()
    return 0 if current is None else int(current.summary().getOrDefault(name, "0"))


def parallel_scan(spark: SparkSession, identifier: str) -> DataFrame:
    """Read ``identifier`` in about two splits per core: Iceberg packs small files into 128 MB
    splits, so a freshly loaded table of a few hundred MB would be scanned by one or two tasks."""
    size = _current_total(spark, identifier, "total-files-size")
    split = max(size // (2 * spark.sparkContext.defaultParallelism), 1 << 20)
    return spark.read.option("split-size", str(split)).table(identifier)


@dataclass(frozen=True)
class AddedData:
    """What a snapshot's commit added, from Iceberg's metadata alone (no Spark job): its rows, and
    the smallest and largest value of one column over its new data files (None when a file has no
    bound for it: metrics mode ``none`` or ``counts``, or a column beyond the inferred defaults)."""

    rows: int
    smallest: Any
    largest: Any


def added_data(spark: SparkSession, table_identifier: str, snapshot_id: int, column: str | None) -> AddedData:
    """The rows snapshot ``snapshot_id`` of ``table_identifier`` added (its summary's
    ``added-records``) and ``column``'s range over the data files it added (Iceberg's column
    bounds: exact for integers, dates and timestamps in the default metrics mode)."""
    jvm: Any = spark.sparkContext._jvm
    table = iceberg_table(spark, table_identifier)
    table.refresh()
    snapshot = table.snapshot(snapshot_id)
    rows = int(snapshot.summary().getOrDefault("added-records", "0"))
    if column is None or rows == 0:
        return AddedData(rows, None, None)
    field = table.schema().findField(column)
    smallest: Any = None
    largest: Any = None
    files = snapshot.addedDataFiles(table.io()).iterator()
    while files.hasNext():
        data_file = files.next()
        lower, upper = data_file.lowerBounds(), data_file.upperBounds()
        low = None if lower is None else lower.get(field.fieldId())
        high = None if upper is None else upper.get(field.fieldId())
        if low is None or high is None:
            return AddedData(rows, None, None)
        low = jvm.org.apache.iceberg.types.Conversions.fromByteBuffer(field.type(), low)
        high = jvm.org.apache.iceberg.types.Conversions.fromByteBuffer(field.type(), high)
        smallest = low if smallest is None else min(smallest, low)
        largest = high if largest is None else max(largest, high)
    return AddedData(rows, smallest, largest)
