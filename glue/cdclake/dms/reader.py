"""Read DMS files into one Spark DataFrame of raw changes (the I/O edge of the engine).

Output columns: the file's own columns (CSV values as strings, Parquet as written) plus
``_cdc_file`` (the file's position in apply order), ``_cdc_row`` (increasing with the row's
position inside its file) and ``_cdc_corrupt`` (the raw text of CSV records Spark could not split
into the expected number of fields, else NULL).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from cdclake.columns import CORRUPT_RECORD, FILE_INDEX, ROW_POSITION
from cdclake.config import BronzeSettings, TableConfig
from cdclake.dms.files import BronzeFile
from cdclake.dms.layout import SOURCE_SCHEMA_COLUMN, SOURCE_TABLE_COLUMN, FileLayout, layout_for, parse_header
from cdclake.dms.store import BronzeStore, head_text

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Spark maps an unquoted empty field to NULL by itself but would also map a quoted empty string
# ("") to NULL if the null marker were "". With an empty marker, give Spark one that never occurs.
_NO_NULL_MARKER = "\u0000cdclake-no-null-marker\u0000"


def plan_scans(
    store: BronzeStore, settings: BronzeSettings, table: TableConfig, files: Sequence[BronzeFile]
) -> dict[FileLayout, list[tuple[int, BronzeFile]]]:
    """Group ``files`` (already in apply order) into scans of one layout, keeping each file's ordinal.

    Files whose header differs (a column added at the source) land in different scans, so
    Spark never reads one file with another file's column order.
    """
    groups: dict[FileLayout, list[tuple[int, BronzeFile]]] = defaultdict(list)
    for ordinal, file in enumerate(files):
        header = None
        if file.file_format == "csv" and settings.csv_header:
            header = parse_header(head_text(store, file), settings.csv_delimiter, file.key)
        groups[layout_for(settings, table, file, header)].append((ordinal, file))
    return groups


def _with_unique_names(members: list[tuple[int, BronzeFile]]) -> list[list[tuple[int, BronzeFile]]]:
    """Split a scan so no file name occurs twice in one part (possible only across date folders);
    the name -> ordinal map of a scan must be exact."""
    parts: list[list[tuple[int, BronzeFile]]] = []
    for member in members:
        for part in parts:
            if all(other.name != member[1].name for _, other in part):
                part.append(member)
                break
        else:
            parts.append([member])
    return parts


def _scan(
    spark: SparkSession,
    settings: BronzeSettings,
    table: TableConfig,
    layout: FileLayout,
    members: list[tuple[int, BronzeFile]],
    paths: dict[str, str],
) -> DataFrame:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    file_paths = [paths[f.key] for _, f in members]
    if layout.file_format == "parquet":
        frame = spark.read.option("mergeSchema", "true").parquet(*file_paths)
        frame = frame.withColumn(ROW_POSITION, F.col("_metadata.row_index")).withColumn(
            CORRUPT_RECORD, F.lit(None).cast("string")
        )
    else:
        assert layout.columns is not None
        schema = StructType(
            [StructField(c, StringType(), True) for c in layout.columns]
            + [StructField(CORRUPT_RECORD, StringType(), True)]
        )
        frame = (
            spark.read.schema(schema)
            .option("header", str(layout.has_header).lower())
            .option("sep", settings.csv_delimiter)
            .option("quote", '"')
            .option("escape", '"')
            .option("multiLine", "true")  # RFC-4180 values may hold newlines; keeps a file whole
            # DMS ends rows with "\n" (CsvRowDelimiter). Naming it also stops the parser from guessing
            # the row end and from turning a quoted "\r" or "\r\n" inside a value into "\n".
            .option("lineSep", "\n")
            .option("nullValue", settings.csv_null_value or _NO_NULL_MARKER)
            .option("emptyValue", "")
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_RECORD)
            .option("encoding", "UTF-8")
            .csv(file_paths)
        )
        # With multiLine a file is never split, so within one file the id grows with row position.
        frame = frame.withColumn(ROW_POSITION, F.monotonically_increasing_id())
    ordinal_by_name = F.create_map(*[x for o, f in members for x in (F.lit(f.name), F.lit(o))])
    frame = frame.withColumn(FILE_INDEX, ordinal_by_name[F.col("_metadata.file_name")])
    if SOURCE_TABLE_COLUMN in frame.columns:
        # A transaction-ordered file: keep this table's rows (row ids stay in file order).
        mine = (F.col(SOURCE_SCHEMA_COLUMN) == table.source_schema) & (F.col(SOURCE_TABLE_COLUMN) == table.source_table)
        frame = frame.where(mine).drop(SOURCE_SCHEMA_COLUMN, SOURCE_TABLE_COLUMN)
    return frame


def read_files(
    spark: SparkSession,
    store: BronzeStore,
    settings: BronzeSettings,
    table: TableConfig,
    files: Sequence[BronzeFile],
) -> DataFrame:
    """All ``files`` of one table as one DataFrame (see the module docstring for the columns)."""
    scans = plan_scans(store, settings, table, files)
    paths = store.spark_paths(files)
    frames = [
        _scan(spark, settings, table, layout, unique, paths)
        for layout, members in scans.items()
        for unique in _with_unique_names(members)
    ]
    return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
