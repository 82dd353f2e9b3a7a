"""Read DMS files into one Spark DataFrame of raw changes (the I/O edge of the engine).

Output columns: the file's own columns (CSV values as strings, Parquet as written) plus
``_cdc_file`` (the file's position in apply order), ``_cdc_block`` and ``_cdc_row`` (together
increasing with the row's position inside its file: the start of the file's split, 0 for a file
read whole, and an id growing within the split) and ``_cdc_corrupt`` (the raw text of CSV records
Spark could not split into the expected number of fields, else NULL).

CSV files are read whole (one task each, values may hold newlines) unless they are big and no
record spans lines: then Spark splits them (``splittable_files``).
"""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from cdclake.columns import CORRUPT_RECORD, FILE_BLOCK, FILE_INDEX, ROW_POSITION
from cdclake.config import BronzeSettings, TableConfig
from cdclake.dms.files import BronzeFile, FileKind
from cdclake.dms.layout import (
    DMS_OP_COLUMN,
    SOURCE_SCHEMA_COLUMN,
    SOURCE_TABLE_COLUMN,
    FileLayout,
    layout_for,
    parse_header,
    undeclared_header_columns,
)
from cdclake.dms.store import BronzeStore, head_text
from cdclake.errors import BadInputError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Spark maps an unquoted empty field to NULL by itself but would also map a quoted empty string
# ("") to NULL if the null marker were "". With an empty marker, give Spark one that never occurs.
_NO_NULL_MARKER = "\u0000cdclake-no-null-marker\u0000"
# Enough of a headerless CDC file to hold its first record, in which the Op column is looked for.
_FIRST_RECORD_BYTES = 1 << 14


class HeldFileError(BadInputError):
    """A readable file that must not be applied as it is: held in quarantine with this reason
    (``key``: the file) while the rest of its batch goes on."""

    def __init__(self, key: str, reason: str) -> None:
        self.key = key
        super().__init__(reason)


class UndeclaredHeaderError(HeldFileError):
    """A CSV header with columns the table's declared ``columns`` do not have (``quantity`` where
    ``qty`` is declared): applied, it would add a new column and leave the declared one NULL."""

    def __init__(self, file: BronzeFile, table: TableConfig, undeclared: Sequence[str], missing: Sequence[str]) -> None:
        key = file.key
        then = "cdclake replay --quarantined" if file.kind is FileKind.CDC else "cdclake run"
        lacking = f"declared but not in the header: {', '.join(missing)}" if missing else "every declared one is there"
        super().__init__(
            key,
            f"{key}: header column(s) {', '.join(undeclared)} are not among the declared columns of {table.source} "
            f"({lacking}), so the file is not applied (they would become new columns, leaving declared ones NULL): "
            f"declare them under the table's columns or correct the file, then run `{then}`.",
        )


class MissingOpError(HeldFileError):
    """A CDC file without DMS's Op column: its changes cannot be told apart, so it is not applied."""

    def __init__(self, key: str) -> None:
        super().__init__(
            key,
            f"{key} has no Op column (DMS's CdcInsertsOnly or CdcInsertsAndUpdates with IncludeOpForFullLoad=false), "
            "so its inserts, updates and deletes cannot be told apart: set IncludeOpForFullLoad=true on the S3 "
            "target endpoint and bronze.include_op_for_full_load: true.",
        )


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
        layout = layout_for(settings, table, file, header)
        if file.kind is FileKind.CDC and layout.columns is not None:
            if layout.has_header and DMS_OP_COLUMN not in layout.columns:
                raise MissingOpError(file.key)
            if not layout.has_header and _first_record_lacks_op(store, settings, file, len(layout.columns)):
                raise MissingOpError(file.key)
        if header is not None and (undeclared := undeclared_header_columns(settings, table, header))[0]:
            raise UndeclaredHeaderError(file, table, *undeclared)
        groups[layout].append((ordinal, file))
    return groups


def _first_record_lacks_op(store: BronzeStore, settings: BronzeSettings, file: BronzeFile, fields: int) -> bool:
    """Whether a headerless CDC file was written without the Op column: its first record has one
    field fewer than the layout and does not start with an operation. (A record with a bad Op but
    all its fields is a bad row of its own; a first record longer than the head is not judged.)"""
    head = head_text(store, file, _FIRST_RECORD_BYTES)
    end = head.find(b"\n")
    if end < 0 or head.count(b'"', 0, end) % 2:
        return False
    text = head[:end].decode("utf-8", errors="replace")
    record = next(csv.reader(io.StringIO(text), delimiter=settings.csv_delimiter, quotechar='"', doublequote=True), [])
    return len(record) == fields - 1 and record[0].strip().upper() not in ("I", "U", "D")


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

    ordinal_by_name = F.create_map(*[x for o, f in members for x in (F.lit(f.name), F.lit(o))])
    file_index = ordinal_by_name[F.col("_metadata.file_name")]
    if layout.file_format == "parquet":
        frame = spark.read.option("mergeSchema", "true").parquet(*[paths[f.key] for _, f in members])
        cdc = [f for _, f in members if f.kind is FileKind.CDC]
        if cdc and DMS_OP_COLUMN not in frame.columns:
            raise MissingOpError(cdc[0].key)
        frame = frame.withColumns(
            {
                FILE_INDEX: file_index,
                FILE_BLOCK: F.lit(0).cast("long"),
                ROW_POSITION: F.col("_metadata.row_index"),
                CORRUPT_RECORD: F.lit(None).cast("string"),
            }
        )
    else:
        split = splittable_files(spark, settings, [(f, paths[f.key]) for _, f in members])
        whole = [paths[f.key] for _, f in members if f.key not in split]
        parts = [_csv(spark, settings, layout, whole, multi_line=True)] if whole else []
        if split:
            parts.append(_csv(spark, settings, layout, [paths[key] for key in split], multi_line=False))
        frame = reduce(lambda a, b: a.unionByName(b), [part.withColumn(FILE_INDEX, file_index) for part in parts])
        # Within one split of a file (a whole file, when it is not split) the id grows with the
        # row's position; the split's start orders the splits of a file.
        frame = frame.withColumn(ROW_POSITION, F.monotonically_increasing_id())
    if SOURCE_TABLE_COLUMN in frame.columns:
        # A transaction-ordered file: keep this table's rows (row ids stay in file order).
        mine = (F.col(SOURCE_SCHEMA_COLUMN) == table.source_schema) & (F.col(SOURCE_TABLE_COLUMN) == table.source_table)
        frame = frame.where(mine).drop(SOURCE_SCHEMA_COLUMN, SOURCE_TABLE_COLUMN)
    return frame


def _csv(
    spark: SparkSession, settings: BronzeSettings, layout: FileLayout, file_paths: list[str], multi_line: bool
) -> DataFrame:
    """Read CSV files: ``multi_line`` keeps each file whole (values may hold newlines); without it
    Spark splits big files by ``spark.sql.files.maxPartitionBytes`` and reads the splits in parallel."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    assert layout.columns is not None
    schema = StructType(
        [StructField(c, StringType(), True) for c in layout.columns] + [StructField(CORRUPT_RECORD, StringType(), True)]
    )
    frame = (
        spark.read.schema(schema)
        .option("header", str(layout.has_header).lower())
        .option("sep", settings.csv_delimiter)
        .option("quote", '"')
        .option("escape", '"')
        .option("multiLine", str(multi_line).lower())
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
    block = F.col("_metadata.file_block_start") if not multi_line else F.lit(0).cast("long")
    return frame.withColumn(FILE_BLOCK, block)


def splittable_files(
    spark: SparkSession, settings: BronzeSettings, files: Sequence[tuple[BronzeFile, str]]
) -> set[str]:
    """The keys of the CSV ``files`` (with their Spark paths) to read in parallel splits.

    A file qualifies when it is at least ``settings.csv_split_bytes`` big, not gzip (which no
    reader can split) and no record spans lines. That last test is one parallel pass over the
    file's lines: with RFC-4180 quoting (quotes doubled inside values) a complete record holds an
    even number of quote characters, and the first line of a record whose quoted value holds a
    newline holds an odd number. A file with such a line (or a stray quote) is read whole.
    """
    limit = settings.csv_split_bytes
    candidates = [(f, p) for f, p in files if limit > 0 and f.size >= limit and not f.key.endswith(".gz")]
    return {file.key for file, path in candidates if not _has_spanning_record(spark, path)}


def _has_spanning_record(spark: SparkSession, path: str) -> bool:
    """Whether a line of the file holds an odd number of quote characters (one parallel pass,
    stopping at the first such line). Lines without a quote, most of a DMS file (DMS quotes only
    values that need it), are passed over by a byte search; the others are cut at their quotes."""
    from pyspark.sql import functions as F

    lines = spark.read.option("lineSep", "\n").text(path)
    quoted = lines.where(F.instr("value", '"') > 0)
    odd = quoted.where(F.size(F.split("value", '"')) % 2 == 0)  # n quotes cut a line into n + 1 pieces
    return bool(odd.limit(1).collect())


def csv_records(data: bytes, numbers: set[int], skip_header: bool = False) -> dict[int, str]:
    """The records ``numbers`` (1-based, a header not counted) of a DMS CSV file's bytes, as they
    are in the file: without the row delimiter, bytes that are not UTF-8 as ``\\xNN``.

    A record ends at a newline outside quotes: with RFC-4180 quoting (quotes doubled inside
    values) that is a newline after an even number of quote characters in the record.
    """
    found: dict[int, str] = {}
    number, start, position, quotes = (0 if skip_header else 1), 0, 0, 0
    last = max(numbers, default=0)
    while number <= last and start < len(data):
        end = data.find(b"\n", position)
        end = len(data) if end < 0 else end
        quotes += data.count(b'"', position, end)
        if quotes % 2 == 0 or end == len(data):
            if number in numbers:
                found[number] = data[start:end].decode("utf-8", errors="backslashreplace")
            number, start, quotes = number + 1, end + 1, 0
        position = end + 1
    return found


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
