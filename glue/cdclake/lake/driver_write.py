"""A small batch's files written by the driver: its rows collected once, no Spark job to write them.

A whole database's batch holds a few changes of each of many tables. Every Spark job a table's
batch runs costs the driver a fixed fraction of a second of planning and scheduling, whatever its
size, and Spark writes a table's new images, its position deletes and its tombstones as three
jobs. A batch small enough for the driver (``BatchSizes.driver_write_bytes``) is instead collected once
as Arrow (the same one job that would have materialised it) and its Parquet files are written here
with pyarrow, through the table's own ``FileIO`` (a local path or S3 alike), as Iceberg's writer
makes them: the schema's field ids, INT64 microsecond timestamps, the table's codec. The commits
(``lake.row_delta``, ``append_files``) then add them to the table.
"""

from __future__ import annotations

import functools
import io
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from cdclake.columns import OP, SILVER_ORDER, STORED_FILE, STORED_POS
from cdclake.lake.batch import KeyedBatch, TableMetadata
from cdclake.lake.iceberg import Snapshot
from cdclake.lake.row_delta import DELETE_FILE_COLUMNS, WrittenFile, WrittenFiles, row_delta_input, sort_order_columns
from cdclake.lake.tables import iceberg_fields, iceberg_table
from cdclake.types import DRIVER_WRITE_TYPES

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType

# Spark types whose Arrow form converts both ways without loss (what ``collect_rows`` accepts).
_ARROW_TYPES = DRIVER_WRITE_TYPES
# Iceberg's codec names (``write.parquet.compression-codec``) as pyarrow spells them.
_CODECS = {"uncompressed": "none", "zstd": "zstd", "snappy": "snappy", "gzip": "gzip", "brotli": "brotli"}
_FIELD_ID = b"PARQUET:field_id"


def collectable(frame: DataFrame) -> bool:
    """Whether every column of ``frame`` has a type ``collect_rows`` carries exactly."""
    return all(f.dataType.simpleString().split("(")[0] in _ARROW_TYPES for f in frame.schema)


def collect_rows(frame: DataFrame) -> pa.Table:
    """``frame``'s rows in the driver as one Arrow table: one Spark job, observations included.

    PySpark 3.5 (AWS Glue 5.1) has no public ``toArrow`` yet (it arrives in 4.0); its
    ``toPandas`` uses this same call, which keeps each column's Arrow type (no pandas round trip).
    """
    import pyarrow as pa

    to_arrow = getattr(frame, "toArrow", None)
    if to_arrow is not None:
        return to_arrow()
    batches = frame._collect_as_arrow()
    if batches:
        return pa.Table.from_batches(batches)
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(frame.schema).empty_table()


@functools.lru_cache(maxsize=256)
def arrow_type(data_type: DataType) -> pa.DataType:
    """The Arrow type Spark gives ``data_type`` (timestamps in UTC microseconds); remembered, as
    PySpark checks the pyarrow version on every call."""
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(data_type)


def arrow_shape(
    rows: pa.Table,
    columns: Sequence[tuple[str, int, DataType]],
    renamed: Mapping[str, str] | None = None,
    nulls: Collection[str] = (),
    required: bool = False,
) -> pa.Table:
    """``rows`` as a file of ``columns`` (name, Iceberg field id, Spark type) holds them: each
    column is ``rows``' column of that name (or of the name ``renamed`` gives it) cast to its
    type, or NULL (in ``nulls``, or not in ``rows``), with the field id in the field's metadata.
    ``required``: the fields are not nullable (a position delete file's)."""
    import pyarrow as pa

    fields, arrays = [], []
    for name, field_id, data_type in columns:
        target = arrow_type(data_type)
        source = (renamed or {}).get(name, name)
        if name not in nulls and source in rows.column_names:
            arrays.append(rows.column(source).cast(target))
        else:
            arrays.append(pa.nulls(rows.num_rows, target))
        fields.append(pa.field(name, target, nullable=not required, metadata={_FIELD_ID: str(field_id).encode()}))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def write_parquet(table: Any, rows: pa.Table, kind: str) -> WrittenFile:
    """Write ``rows`` as one Parquet file in the Iceberg Java ``table``'s data location through its
    ``FileIO``, with the table's codec; the file, its footer kept."""
    import pyarrow.parquet as pq

    codec = str(table.properties().getOrDefault("write.parquet.compression-codec", "zstd")).lower()
    buffer = io.BytesIO()
    pq.write_table(
        rows, buffer, compression=_CODECS.get(codec, "zstd"), coerce_timestamps="us", allow_truncated_timestamps=False
    )
    data = buffer.getvalue()
    path = str(table.locationProvider().newDataLocation(f"cdclake-{kind}-{uuid.uuid4().hex}.parquet"))
    stream = table.io().newOutputFile(path).create()
    try:
        stream.write(bytearray(data))
    finally:
        stream.close()
    return WrittenFile(path, len(data), footer_of(data))


def footer_of(parquet: bytes) -> bytes:
    """The Thrift ``FileMetaData`` of a whole Parquet file's bytes: the ``length`` bytes before its
    last eight (``length`` as 4 bytes little-endian, then the magic ``PAR1``)."""
    if parquet[-4:] != b"PAR1":
        raise ValueError("not a Parquet file: no PAR1 magic at its end")
    length = int.from_bytes(parquet[-8:-4], "little")
    return parquet[-8 - length : -8]


def append_files(table: Any, data_files: Sequence[Any], properties: Mapping[str, str] | None = None) -> None:
    """Commit ``data_files`` to the Iceberg Java ``table`` as one append carrying ``properties`` in
    its snapshot summary."""
    append = table.newAppend()
    for file in data_files:
        append = append.appendFile(file)
    for name, value in (properties or {}).items():
        append = append.set(name, value)
    append.commit()


def _columns(spark: SparkSession, table: Any, identifier: str) -> list[tuple[str, int, DataType]]:
    """(name, field id, Spark type) of each column of the Iceberg Java ``table`` (``identifier``)."""
    ids = {f.name: f.id for f in iceberg_fields(spark, table)}
    return [(f.name, ids[f.name], f.dataType) for f in spark.table(identifier).schema.fields]


def sorted_ascending(rows: pa.Table, columns: Sequence[str]) -> pa.Table:
    """``rows`` in ascending order of ``columns``, NULLs first (Spark's ``sortWithinPartitions``)."""
    import pyarrow.compute as pc

    if not columns or rows.num_rows < 2:
        return rows
    import pyarrow as pa

    if int(pa.__version__.split(".")[0]) >= 25:  # NULL placement per key since pyarrow 25
        return rows.take(pc.sort_indices(rows, sort_keys=[(c, "ascending", "at_start") for c in columns]))
    return rows.take(pc.sort_indices(rows, sort_keys=[(c, "ascending") for c in columns], null_placement="at_start"))


def apply_collected_row_delta(
    spark: SparkSession, batch: KeyedBatch[pa.Table], before_commit: Callable[[], None] | None = None
) -> Snapshot:
    """``lake.row_delta.apply_row_delta`` for a batch whose changes were collected in the driver: the
    same new images (one data file, in the table's sort order), the same position deletes (one file
    per data file they delete from, sorted by position) and the same one RowDelta on ``main``
    carrying its properties and validated against its base snapshot, written without a Spark job.
    Returns the snapshot it made."""
    import pyarrow.compute as pc

    metadata, changes = row_delta_input(batch)
    assert metadata.schema is not None
    table = iceberg_table(spark, batch.table.identifier)
    ids = {f.name: f.id for f in metadata.fields}
    silver = [(f.name, ids[f.name], f.dataType) for f in metadata.schema.fields]
    present = {*batch.columns, SILVER_ORDER}
    absent = batch.absent
    images = arrow_shape(
        changes.filter(pc.not_equal(changes.column(OP), "D")),
        silver,
        nulls={name for name, _, _ in silver if name not in present or name in absent},
    )
    replaced = changes.filter(pc.is_valid(changes.column(STORED_FILE)))
    assert metadata.snapshot_id is not None
    return commit_collected(spark, table, metadata.snapshot_id, batch.properties, images, replaced, before_commit)


def commit_collected(
    spark: SparkSession,
    table: Any,
    base_snapshot_id: int,
    properties: Mapping[str, str],
    images: pa.Table,
    replaced: pa.Table,
    before_commit: Callable[[], None] | None = None,
) -> Snapshot:
    """Write ``images`` (rows shaped as the Iceberg Java ``table``'s data files, ``arrow_shape``) as
    one data file in the table's sort order, and position deletes of the stored rows ``replaced``
    names (``_cdc_stored_file``, ``_cdc_stored_pos``) as one delete file per data file they delete
    from, sorted by position, as Iceberg's own writer makes them (file-scoped deletes); commit both
    as one RowDelta carrying ``properties``, validated against ``base_snapshot_id``. Returns the
    snapshot it made."""
    import pyarrow.compute as pc
    from pyspark.sql.types import LongType, StringType

    images = sorted_ascending(images, sort_order_columns(table))
    path_id, pos_id = DELETE_FILE_COLUMNS
    deletes = sorted_ascending(
        arrow_shape(
            replaced,
            [("file_path", path_id, StringType()), ("pos", pos_id, LongType())],
            renamed={"file_path": STORED_FILE, "pos": STORED_POS},
            required=True,
        ),
        ["file_path", "pos"],
    )
    with WrittenFiles(spark, table) as files:
        written_deletes, written_images = [], []
        deleted_from = pc.unique(deletes.column("file_path")).to_pylist()
        for data_file in deleted_from:
            rows = deletes.filter(pc.equal(deletes.column("file_path"), data_file))
            written_deletes.append(files.track(write_parquet(table, rows, "deletes")))
        if images.num_rows:
            written_images.append(files.track(write_parquet(table, images, "data")))
        data_files = files.content_files(written_images, deletes=False)
        delete_files = files.content_files(written_deletes, deletes=True)
        return files.commit(base_snapshot_id, properties, data_files, delete_files, deleted_from, before_commit)


def append_collected_validated(
    spark: SparkSession, metadata: TableMetadata, rows: pa.Table, properties: Mapping[str, str]
) -> Snapshot:
    """``lake.row_delta.append_written`` for rows collected in the driver: one data file the driver
    writes (in the table's sort order; a column the rows lack is NULL) and one RowDelta carrying
    ``properties``, validated from the snapshot ``metadata`` was read at. Returns the snapshot it made."""
    assert metadata.schema is not None and metadata.snapshot_id is not None
    table = iceberg_table(spark, metadata.table.identifier)
    ids = {f.name: f.id for f in metadata.fields}
    shaped = arrow_shape(rows, [(f.name, ids[f.name], f.dataType) for f in metadata.schema.fields])
    images = sorted_ascending(shaped, sort_order_columns(table))
    with WrittenFiles(spark, table) as files:
        written = [files.track(write_parquet(table, images, "data"))] if images.num_rows else []
        return files.commit(metadata.snapshot_id, properties, files.content_files(written, deletes=False))


def append_collected(
    spark: SparkSession, table_identifier: str, rows: pa.Table, properties: Mapping[str, str] | None = None
) -> None:
    """Append ``rows`` (collected in the driver, columns named as the table's) to
    ``table_identifier`` as one data file and one commit carrying ``properties``, without a Spark
    job (no rows: no commit)."""
    if not rows.num_rows:
        return
    table = iceberg_table(spark, table_identifier)
    table.refresh()
    with WrittenFiles(spark, table) as files:
        shaped = arrow_shape(rows, _columns(spark, table, table_identifier))
        written = [files.track(write_parquet(table, shaped, "data"))]
        append_files(table, files.content_files(written, deletes=False), properties)
        files.keep()
