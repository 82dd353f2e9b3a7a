"""Apply a classified batch as files Spark writes and ONE Iceberg ``RowDelta``: no scan of the table.

The classification (``engine.prepare``) already read, at the batch's base snapshot, where every
touched key's stored row lives: its data file and position (Iceberg's ``_file`` and ``_pos``
metadata columns). The commit therefore needs no second look at the table, no MERGE join and no
branch:

1. *Position deletes*: ``(file_path, pos)`` of each stored row the batch replaces, sorted, written
   by Spark as Parquet under Iceberg's reserved field ids, both columns required (what Iceberg's
   own writer produces).
2. *Data files*: the new images (inserts and updates) in the table's current schema, written by
   Spark as Parquet with the schema's field ids, in the table's sort order.
3. *One RowDelta* adds both, with metrics read from the files' footers (``ParquetUtil``, what
   ``add_files`` uses; a footer the writer kept is parsed as it is, not read back), carrying the
   ledger properties, validated against the base snapshot:
   a concurrent commit that added data or delete files, or removed a data file this batch deletes
   from, makes it fail (the engine retries the batch); nothing is half-applied.

A crash before the RowDelta leaves files no snapshot references (orphan-file removal deletes
them); the ledger does not list the batch, so the next run applies it again.

``why_not_row_delta`` names what keeps a table on the MERGE or branch-staged path instead: format v3
(deletion vectors, not position delete files), a partition spec (delete files must carry their
data file's partition), copy-on-write (the user chose rewritten files), column types outside the
plain Parquet mapping, or updates that keep stored values (CsvNoSupValue columns, columns a batch
does not carry), which would need the stored rows read.
"""

from __future__ import annotations

import logging
import math
import threading
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cdclake.columns import OP, SILVER_ORDER, STORED_FILE, STORED_POS
from cdclake.lake.batch import KeyedBatch, Rows, TableMetadata, WrittenColumns
from cdclake.lake.iceberg import IcebergTable, Snapshot
from cdclake.lake.tables import iceberg_table
from cdclake.types import ROW_DELTA_PLAIN_ICEBERG_TYPES

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, Observation, SparkSession

log = logging.getLogger("cdclake")

# Iceberg's reserved field ids of a position delete file's columns (MetadataColumns.DELETE_FILE_*).
_DELETE_PATH_ID, _DELETE_POS_ID = 2147483546, 2147483545
DELETE_FILE_COLUMNS = (_DELETE_PATH_ID, _DELETE_POS_ID)  # file_path, pos
# Iceberg types whose Parquet form Spark writes exactly as Iceberg's writer does (timestamps as
# INT64 microseconds: the write sets Spark's outputTimestampType).
# Iceberg's JSON names of them (``iceberg_fields``): timestamps with and without a zone, not nanoseconds.
_PLAIN_TYPES = ROW_DELTA_PLAIN_ICEBERG_TYPES
_FIELD_ID = "parquet.field.id"
_ROWS_PER_WRITER = 500_000
# Beside a position delete: a number standing for its data file, so each data file's deletes are
# written to a delete file of their own.
_DATA_FILE = "_cdc_data_file"


@dataclass(frozen=True)
class WrittenFile:
    """A Parquet file a batch wrote: where, how many bytes, and its footer when the writer kept it
    (the Thrift ``FileMetaData``): its metrics are then parsed from it instead of read back."""

    path: str
    size: int
    footer: bytes | None = None


def why_not_row_delta(metadata: TableMetadata, written: WrittenColumns) -> str | None:
    """Why a batch writing ``written`` cannot be applied to the table (as ``metadata`` found it) through
    written files and a RowDelta; None when it can."""
    blocker = row_delta_blocker(metadata)
    if blocker is not None:
        return blocker
    sent = {*written.columns, *written.absent, SILVER_ORDER}
    kept = [
        f.name
        for f in metadata.fields
        if f.name not in written.key and (f.name in written.unchanged or f.name not in sent)
    ]
    if kept:
        return f"updates keep the stored values of {', '.join(kept)}"
    return None


def row_delta_blocker(metadata: TableMetadata) -> str | None:
    """What in the table itself (as ``metadata`` found it) keeps any batch from written files and a
    RowDelta, whatever its columns (``why_not_row_delta`` adds those); None: nothing."""
    blocker = _written_files_blocker(metadata)
    if blocker is None and metadata.merge_mode != "merge-on-read":
        return "a copy-on-write table"
    return blocker


def _written_files_blocker(metadata: TableMetadata) -> str | None:
    """Why files written outside Spark's Iceberg writer cannot be the table's: a format other than
    v2, a partition spec, a column of a type they do not carry; None: nothing."""
    if metadata.format_version != 2:
        return f"format v{metadata.format_version}"
    if metadata.partitioned:
        return "a partitioned table"
    for field in metadata.fields:
        if field.primitive not in _PLAIN_TYPES:
            return f"column {field.name} of type {_type_name(field.type)}"
    return None


def _type_name(iceberg_type: Any) -> str:
    """An Iceberg type's name as Iceberg writes it (``list<string>``), from its JSON form."""
    if isinstance(iceberg_type, str):
        return iceberg_type
    kind = iceberg_type.get("type")
    if kind == "list":
        return f"list<{_type_name(iceberg_type['element'])}>"
    if kind == "map":
        return f"map<{_type_name(iceberg_type['key'])}, {_type_name(iceberg_type['value'])}>"
    fields = ", ".join(f"{f['id']}: {f['name']}: {_type_name(f['type'])}" for f in iceberg_type.get("fields", []))
    return f"struct<{fields}>"


# What Spark's Parquet writer must do for the files to be Iceberg's: field ids, INT64 microsecond
# timestamps, dates and timestamps before 1582-10-15 stored as they are (proleptic Gregorian, as
# Iceberg's own writer stores them; Spark's default refuses them, LEGACY would shift them). Set on
# the session at the first write and never unset (the tables of a run write concurrently; no other
# write of cdclake's depends on Spark's defaults for them). ``runtime.session`` sets the same
# rebase mode from the start; this covers a session built elsewhere.
ICEBERG_PARQUET_CONF = {
    "spark.sql.parquet.fieldId.write.enabled": "true",
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
}
_CONF_LOCK = threading.Lock()


def _ensure_iceberg_parquet(spark: SparkSession) -> None:
    with _CONF_LOCK:
        for name, value in ICEBERG_PARQUET_CONF.items():
            if spark.conf.get(name, None) != value:
                spark.conf.set(name, value)


def _written(spark: SparkSession, location: str) -> list[WrittenFile]:
    """The Parquet files Spark wrote under ``location`` (in partition folders too), their footers
    left on storage; the marker file removed."""
    jvm: Any = spark.sparkContext._jvm
    directory = jvm.org.apache.hadoop.fs.Path(location)
    fs = directory.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    found = []
    listing = fs.listFiles(directory, True)
    while listing.hasNext():
        status = listing.next()
        path = status.getPath()
        name = str(path.getName())
        if name.endswith(".parquet"):
            folder = str(path.getParent().getName())  # "<column>=<value>" when written per value
            relative = f"{folder}/{name}" if "=" in folder else name
            found.append(WrittenFile(f"{location.rstrip('/')}/{relative}", int(status.getLen())))
        elif name == "_SUCCESS":
            fs.delete(path, False)
    return found


class WrittenFiles:
    """The files one batch writes, turned into Iceberg content files, as a ``with`` block: leaving
    it by an exception before ``commit`` has committed them removes every file written in it.

    ``with WrittenFiles(spark, table) as files:`` write (``write``, ``write_both``, ``track``),
    turn them into content files, then ``return files.commit(...)``."""

    def __init__(self, spark: SparkSession, table: Any) -> None:
        self.spark = spark
        self.table = table
        self.jvm: Any = spark.sparkContext._jvm
        self.paths: list[str] = []
        self.committed = False

    def __enter__(self) -> WrittenFiles:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: Any) -> None:
        if error is not None and not self.committed:
            self.remove()

    def write(self, frame: DataFrame, kind: str, file_per: str | None = None) -> list[WrittenFile]:
        """Write ``frame`` as Parquet files of their own (Iceberg's Parquet settings on); ``file_per``:
        a column whose every value gets files of its own (in a folder named after it; the column
        itself is not written)."""
        location = str(self.table.locationProvider().newDataLocation(f"cdclake-{kind}-{uuid.uuid4().hex}"))
        codec = str(self.table.properties().getOrDefault("write.parquet.compression-codec", "zstd"))
        writer = frame.write.option("compression", codec)
        if file_per is not None:
            writer = writer.partitionBy(file_per)
        writer.parquet(location)
        files = _written(self.spark, location)
        self.paths += [file.path for file in files]
        return files

    def write_both(self, deletes: DataFrame, images: DataFrame) -> tuple[list[Any], list[Any]]:
        """Write the position deletes and the new images as two Spark jobs at once, and turn them
        into content files: each is a job of one or a few tasks for a small batch, so one alone
        leaves cores idle."""
        _ensure_iceberg_parquet(self.spark)
        with ThreadPoolExecutor(2, thread_name_prefix="cdclake-write") as pool:
            written = [
                pool.submit(self.write, deletes, "deletes", _DATA_FILE),
                pool.submit(self.write, images, "data"),
            ]
            # Every write ends before this block does, so a failure never leaves one running.
            deletes_written, data_written = (future.result() for future in written)
        return self.content_files(deletes_written, deletes=True), self.content_files(data_written, deletes=False)

    def content_files(self, files: list[WrittenFile], deletes: bool) -> list[Any]:
        """Iceberg ``DataFile``/``DeleteFile`` entries for written files, metrics from their footers;
        files without rows are deleted instead."""
        iceberg = self.jvm.org.apache.iceberg
        io = self.table.io()
        metrics_config = iceberg.MetricsConfig
        config = metrics_config.forPositionDelete(self.table) if deletes else metrics_config.forTable(self.table)
        parquet = iceberg.FileFormat.PARQUET
        entries = []
        for file in files:
            metrics = self._metrics(file, config)
            if int(metrics.recordCount()) == 0:
                io.deleteFile(file.path)
                continue
            if deletes:
                builder = iceberg.FileMetadata.deleteFileBuilder(self.table.spec()).ofPositionDeletes()
            else:
                builder = iceberg.DataFiles.builder(self.table.spec()).withSortOrder(self.table.sortOrder())
            entries.append(
                builder.withPath(file.path)
                .withFormat(parquet)
                .withFileSizeInBytes(file.size)
                .withMetrics(metrics)
                .build()
            )
        return entries

    def _metrics(self, file: WrittenFile, config: Any) -> Any:
        """Iceberg ``Metrics`` of ``file``: from the footer it kept, else read from storage. Reading
        opens Parquet with default options, and those load Hadoop's XML configuration anew each
        time; parsing a kept footer costs one call."""
        iceberg = self.jvm.org.apache.iceberg
        if file.footer is None:
            return iceberg.parquet.ParquetUtil.fileMetrics(self.table.io().newInputFile(file.path), config)
        converter = self.jvm.org.apache.iceberg.shaded.org.apache.parquet.format.converter.ParquetMetadataConverter
        footer = converter().readParquetMetadata(
            self.jvm.java.io.ByteArrayInputStream(bytearray(file.footer)), converter.NO_FILTER
        )
        return iceberg.parquet.ParquetUtil.footerMetrics(footer, self.jvm.java.util.stream.Stream.empty(), config)

    def track(self, written: WrittenFile) -> WrittenFile:
        """Count a file written elsewhere (``lake.driver_write``) as this batch's: removed on failure."""
        self.paths.append(written.path)
        return written

    def commit(
        self,
        base_snapshot_id: int,
        properties: Mapping[str, str],
        data_files: Sequence[Any],
        delete_files: Sequence[Any] = (),
        deleted_from: Sequence[str] = (),
        before_commit: Callable[[], None] | None = None,
    ) -> Snapshot:
        """Call ``before_commit``, then commit the batch's content files (its data files, its delete
        files and the paths of the data files those delete from) as one RowDelta
        (``IcebergTable.commit_row_delta``). Returns the snapshot it made; from then on the files are
        the table's and the block keeps them whatever follows."""
        if before_commit is not None:
            before_commit()
        made = IcebergTable(self.table, self.jvm).commit_row_delta(
            base_snapshot_id, properties, data_files, delete_files, referenced=deleted_from
        )
        self.keep()
        return made

    def keep(self) -> None:
        """The files are the table's now (committed): leaving the block no longer removes them."""
        self.committed = True

    def remove(self) -> None:
        io = self.table.io()
        for path in self.paths:
            try:
                io.deleteFile(path)
            except Exception:  # already gone, or storage refused: orphan-file removal gets it later
                log.debug("could not remove %s", path)


def _with_field_ids(columns: Sequence[tuple[Column, str]], ids: Mapping[str, int]) -> list[Column]:
    return [value.alias(name, metadata={_FIELD_ID: ids[name]}) for value, name in columns]


def sort_order_columns(table: Any) -> list[str]:
    """The source columns of the Iceberg Java ``table``'s sort order, in order (the order a
    written data file is sorted by)."""
    schema, order = table.schema(), table.sortOrder()
    return [str(schema.findColumnName(order.fields().get(i).sourceId())) for i in range(order.fields().size())]


def _writers(spark: SparkSession, rows: int) -> int:
    """How many tasks write ``rows`` rows: at most ``_ROWS_PER_WRITER`` each while cores are left."""
    return max(1, min(spark.sparkContext.defaultParallelism, math.ceil(rows / _ROWS_PER_WRITER)))


def _image_files(spark: SparkSession, table: Any, metadata: TableMetadata, images: int) -> int:
    """How many data files a batch's new images are written as: their estimated size (the base
    snapshot's bytes per record) over the table's target file size, and at most
    ``_ROWS_PER_WRITER`` rows per file while cores are left (a file is written by one task)."""
    records = metadata.total_records
    per_record = metadata.total_files_size / records if records else 100.0
    target = int(table.properties().getOrDefault("write.target-file-size-bytes", str(512 * 1024 * 1024)))
    by_size = math.ceil(images * per_record / target)
    return max(by_size, _writers(spark, images))


def apply_row_delta(
    spark: SparkSession, batch: KeyedBatch[DataFrame], before_commit: Callable[[], None] | None = None
) -> Snapshot:
    """Apply the batch's classified changes (a DataFrame; effects insert, update and delete only, one
    per key, with the place of the key's stored row read at the batch's base snapshot:
    ``_cdc_stored_file``, ``_cdc_stored_pos``) as one RowDelta on ``main`` carrying its properties;
    return the snapshot it made. ``why_not_row_delta`` must have found nothing in the way.

    The stored row of every changed key is deleted (an insert's key may hold a stored row the
    classification did not count as matched, one with a NULL ``_cdc_order``: MERGE would update
    it); inserts and updates write their new image; ``absent`` columns are NULL in it. The batch's
    ``image_count`` (inserts and updates) and ``replaced_count`` (stored rows replaced: updates and
    deletes), when known, size the data and delete files: few files for a small batch.
    ``before_commit`` is called between the writes and the commit (a failure there removes the
    written files).
    """
    from pyspark.sql import functions as F

    metadata, changes = row_delta_input(batch)
    absent = batch.absent
    table = iceberg_table(spark, batch.table.identifier)
    ids = {f.name: f.id for f in metadata.fields}
    types = dict(metadata.columns)
    present = {*batch.columns, SILVER_ORDER}
    images = changes.where(F.col(OP) != "D").select(
        *_with_field_ids(
            [((F.col(c) if c in present and c not in absent else F.lit(None)).cast(t), c) for c, t in types.items()],
            ids,
        )
    )
    sort_columns = sort_order_columns(table)
    if batch.image_count is not None:
        images = images.coalesce(_image_files(spark, table, metadata, batch.image_count))
    if sort_columns:
        images = images.sortWithinPartitions(*sort_columns)
    replaced, deleted = _position_deletes(spark, batch, changes)
    assert metadata.snapshot_id is not None
    with WrittenFiles(spark, table) as files:
        delete_files, data_files = files.write_both(replaced, images)
        # Data file paths hold no newline. No metrics at all: Spark found nothing to delete.
        deleted_from = list(filter(None, str(deleted.get.get("files") or "").split("\n")))
        return files.commit(
            metadata.snapshot_id, batch.properties, data_files, delete_files, deleted_from, before_commit
        )


def _position_deletes(
    spark: SparkSession, batch: KeyedBatch[DataFrame], changes: DataFrame
) -> tuple[DataFrame, Observation]:
    """The position deletes of the stored rows the batch replaces (one delete file per data file,
    sorted by position), and what observes the data files they delete from while they are written."""
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    deleted = Observation(f"cdclake_deleted_from_{uuid.uuid4().hex}")
    # The Iceberg spec has a delete file's columns required, and Spark's writer declares a nullable
    # column optional: coalesced with a literal, each is non-nullable. Rows lacking either are
    # filtered out first, so the literals are never written.
    replaced = (
        changes.where(F.col(STORED_FILE).isNotNull() & F.col(STORED_POS).isNotNull())
        .select(
            *_with_field_ids(
                [
                    (F.coalesce(F.col(STORED_FILE), F.lit("")), "file_path"),
                    (F.coalesce(F.col(STORED_POS).cast("bigint"), F.lit(0).cast("bigint")), "pos"),
                ],
                {"file_path": _DELETE_PATH_ID, "pos": _DELETE_POS_ID},
            )
        )
        .observe(deleted, F.concat_ws("\n", F.collect_set("file_path")).alias("files"))
    )
    if batch.replaced_count is not None:
        replaced = replaced.coalesce(_writers(spark, batch.replaced_count))
    # One delete file per data file, sorted by position, as Iceberg's own writer makes them: a
    # reader of a data file opens only its own deletes (file-scoped: both path bounds are the
    # data file). Each writing task cuts its sorted rows by data file (Spark's writer, partitioned
    # by a hash of the path), so no range shuffle and no sampling job are needed for that.
    sorted_by_file = replaced.withColumn(_DATA_FILE, F.xxhash64("file_path")).sortWithinPartitions(
        _DATA_FILE, "file_path", "pos"
    )
    return sorted_by_file, deleted


def append_blocker(metadata: TableMetadata) -> str | None:
    """Why rows cannot be appended to the table (as ``metadata`` found it) as files Spark writes and
    one RowDelta; None when they can (``append_written``)."""
    if not metadata.exists or metadata.snapshot_id is None:
        return "no table or no snapshot yet"
    return _written_files_blocker(metadata)


def append_written(
    spark: SparkSession, metadata: TableMetadata, rows: DataFrame, count: int, properties: Mapping[str, str]
) -> Snapshot:
    """Append ``rows`` (``count`` of them, columns named as the table's; a column the table has and
    the rows lack is NULL) as data files Spark writes and ONE RowDelta carrying ``properties``,
    validated from the snapshot ``metadata`` was read at: a commit on main since then that added
    data or delete files makes it fail as a conflict (a plain append never does). Returns the
    snapshot it made. ``append_blocker`` must have found nothing in the way."""
    from pyspark.sql import functions as F

    assert metadata.snapshot_id is not None
    table = iceberg_table(spark, metadata.table.identifier)
    ids = {f.name: f.id for f in metadata.fields}
    present = set(rows.columns)
    images = rows.select(
        *_with_field_ids([((F.col(c) if c in present else F.lit(None)).cast(t), c) for c, t in metadata.columns], ids)
    ).coalesce(_image_files(spark, table, metadata, count))
    if sort_columns := sort_order_columns(table):
        images = images.sortWithinPartitions(*sort_columns)
    with WrittenFiles(spark, table) as files:
        _ensure_iceberg_parquet(spark)
        return files.commit(metadata.snapshot_id, properties, files.content_files(files.write(images, "data"), False))


def row_delta_input(batch: KeyedBatch[Rows]) -> tuple[TableMetadata, Rows]:
    """The table's metadata a RowDelta of ``batch`` is written with and validated from, and its changes."""
    metadata = batch.metadata
    if metadata is None or metadata.snapshot_id is None:
        raise ValueError(f"{batch.table.identifier}: a RowDelta needs the snapshot the batch was classified at")
    return metadata, batch.changes
