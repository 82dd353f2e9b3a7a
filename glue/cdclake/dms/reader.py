"""Read DMS files into one Spark DataFrame of raw changes (the I/O edge of the engine).

Output columns: the file's own columns (CSV values as strings, Parquet as written) plus
``_cdc_file`` (the file's position in apply order), ``_cdc_row`` (the row's 0-based index among
its file's records: the header not counted, a record Spark cannot parse counted like any other),
``_cdc_block`` (where the row's split of its file starts, 0 for a file read whole) and
``_cdc_corrupt`` (the raw text of CSV records Spark could not split into the expected number of
fields, else NULL).

``_cdc_row`` is a function of the file and the row alone: the same whichever files are read
together and however a file is cut into splits, so a change read again (history's catch-up)
has the same place as when it was first read. Parquet gives it (``_metadata.row_index``); for CSV
it comes from Spark's row ids (``monotonically_increasing_id``: the partition in the upper bits,
the rows before in the partition in the lower 33) with every file, or split of a file, alone in
its partition (``one_piece_per_partition``), plus, for a split, the records of the splits before
it, counted by the pass that decides whether the file may be split (``split_files``).

CSV files are read whole (one task each, values may hold newlines) unless they are big and no
record spans lines: then Spark splits them (``split_files``).
"""

from __future__ import annotations

import csv
import io
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
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
    lacks_change_sequence,
    layout_for,
    parse_header,
    undeclared_header_columns,
)
from cdclake.dms.store import BronzeStore, head_text
from cdclake.errors import BadInputError, ConfigError

log = logging.getLogger("cdclake")

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

# Spark maps an unquoted empty field to NULL by itself but would also map a quoted empty string
# ("") to NULL if the null marker were "". With an empty marker, give Spark one that never occurs.
_NO_NULL_MARKER = "\u0000cdclake-no-null-marker\u0000"
# Enough of a headerless CDC file to hold its first record, in which the Op column is looked for.
_FIRST_RECORD_BYTES = 1 << 14
# The tables (by bronze root) whose lack of the change sequence this process has said: once, not every batch
# of a follow loop's rounds (the task's mapping rule is fixed by a redeploy, not by the next round).
_SAID_LACKING: set[tuple[str, str]] = set()


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
    lacking: list[str] = []  # CDC files whose header has no change-sequence column (said once, below)
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
        if header is not None and file.kind is FileKind.CDC and lacks_change_sequence(settings, header):
            lacking.append(file.key)
        groups[layout].append((ordinal, file))
    if lacking and (store.root, table.source) not in _SAID_LACKING:
        _SAID_LACKING.add((store.root, table.source))
        log.warning(
            "change sequence missing table=%s files=%d first=%s: the configured change_sequence_column %s is not "
            "in their header row (the DMS task has no AR_H_CHANGE_SEQ mapping rule, docs/deploy.md); their changes "
            "are applied, those of one commit time in file and row order",
            table.source, len(lacking), lacking[0], settings.change_sequence_column,
        )  # fmt: skip
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
        one_piece_per_partition(spark)
        split = split_files(spark, settings, layout, [(f, paths[f.key]) for _, f in members])
        whole = [paths[f.key] for _, f in members if f.key not in split]
        parts = [_csv(spark, settings, layout, whole, multi_line=True)] if whole else []
        if split:
            parts.append(_csv(spark, settings, layout, [paths[key] for key in split], multi_line=False))
        frame = reduce(lambda a, b: a.unionByName(b), [part.withColumn(FILE_INDEX, file_index) for part in parts])
        ordinals = {f.key: o for o, f in members}
        before = {(ordinals[key], start): rows for key, records in split.items() for start, rows in records.before()}
        frame = frame.withColumn(ROW_POSITION, _row_in_file(before))
    if SOURCE_TABLE_COLUMN in frame.columns:
        # A transaction-ordered file: keep this table's rows (row ids stay in file order).
        mine = (F.col(SOURCE_SCHEMA_COLUMN) == table.source_schema) & (F.col(SOURCE_TABLE_COLUMN) == table.source_table)
        frame = frame.where(mine).drop(SOURCE_SCHEMA_COLUMN, SOURCE_TABLE_COLUMN)
    return frame


def csv_options(settings: BronzeSettings, header: bool, multi_line: bool) -> dict[str, str]:
    """How Spark parses a DMS CSV file (its reader's options; ``from_csv`` takes the same for a record)."""
    return {
        "header": str(header).lower(),
        "sep": settings.csv_delimiter,
        "quote": '"',
        "escape": '"',
        "multiLine": str(multi_line).lower(),
        # DMS ends rows with "\n" (CsvRowDelimiter). Naming it also stops the parser from guessing
        # the row end and from turning a quoted "\r" or "\r\n" inside a value into "\n".
        "lineSep": "\n",
        "nullValue": settings.csv_null_value or _NO_NULL_MARKER,
        "emptyValue": "",
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": CORRUPT_RECORD,
        "encoding": "UTF-8",
    }


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
    frame = spark.read.schema(schema).options(**csv_options(settings, layout.has_header, multi_line)).csv(file_paths)
    block = F.col("_metadata.file_block_start") if not multi_line else F.lit(0).cast("long")
    return frame.withColumn(FILE_BLOCK, block)


# The lower bits of a Spark row id (``monotonically_increasing_id``) count the rows before it in
# its partition; the upper ones are the partition's index.
_ROWS_IN_PARTITION = (1 << 33) - 1


def one_piece_per_partition(spark: SparkSession) -> None:
    """Check that Spark reads each file (or split of a file) in a partition of its own, which
    makes the lower bits of a row id the row's place in its piece (``_row_in_file``).

    Spark packs files into a partition while their sizes, each plus ``openCostInBytes``, fit
    ``maxPartitionBytes``: an open cost above it closes a partition after every piece, and makes
    every split ``maxPartitionBytes`` long whatever else is read (the session cdclake builds sets
    it: ``runtime.session.spark_conf``). ``maxPartitionNum`` would pack pieces together again.
    ConfigError otherwise: a change's place would depend on which files were read together.
    """
    conf = spark._jsparkSession.sessionState().conf()
    open_cost, partition_bytes = int(conf.filesOpenCostInBytes()), int(conf.filesMaxPartitionBytes())
    if open_cost <= partition_bytes or conf.filesMaxPartitionNum().isDefined():
        raise ConfigError(
            f"Spark's spark.sql.files.openCostInBytes ({open_cost}) must be above spark.sql.files.maxPartitionBytes "
            f"({partition_bytes}) and spark.sql.files.maxPartitionNum unset, so that each bronze file (or split of "
            "one) is read in a partition of its own and a change's place in its file does not depend on the files "
            "read with it: leave them as cdclake's session sets them."
        )


def _row_in_file(before: Mapping[tuple[int, int], int]) -> Column:
    """The row's index in its file: its place in its piece (the lower bits of its row id, each
    piece alone in its partition) plus ``before``, the records of the splits before its split
    ((file ordinal, split start) -> records; a whole file: nothing before)."""
    from pyspark.sql import functions as F

    place = F.monotonically_increasing_id().bitwiseAND(F.lit(_ROWS_IN_PARTITION))
    earlier = {key: rows for key, rows in before.items() if rows}
    if not earlier:
        return place
    offsets = F.create_map(*[x for (o, start), rows in earlier.items() for x in (F.lit(f"{o}:{start}"), F.lit(rows))])
    piece = F.concat_ws(":", F.col(FILE_INDEX), F.col(FILE_BLOCK))
    return place + F.coalesce(F.element_at(offsets, piece), F.lit(0).cast("long"))


@dataclass(frozen=True)
class SplitRecords:
    """How many records each split of a file holds (split start -> records), the header not counted."""

    records: dict[int, int]

    def before(self) -> list[tuple[int, int]]:
        """(split start, records of the splits before it) for each split, in file order."""
        starts, total = [], 0
        for start in sorted(self.records):
            starts.append((start, total))
            total += self.records[start]
        return starts


def split_files(
    spark: SparkSession, settings: BronzeSettings, layout: FileLayout, files: Sequence[tuple[BronzeFile, str]]
) -> dict[str, SplitRecords]:
    """The CSV ``files`` (with their Spark paths) to read in parallel splits, by key, with their
    records per split.

    A file qualifies when it is at least ``settings.csv_split_bytes`` big, not gzip (which no
    reader can split) and no record spans lines. That last test is one parallel pass over the
    file's lines: with RFC-4180 quoting (quotes doubled inside values) a complete record holds an
    even number of quote characters, and the first line of a record whose quoted value holds a
    newline holds an odd number. A file with such a line (or a stray quote) is read whole. The
    same pass counts each split's records: without a record spanning lines, a record is a line
    that is not empty, in the same splits as the CSV reader's (both cut the file every
    ``maxPartitionBytes`` and give a line to the split it starts in).
    """
    limit = settings.csv_split_bytes
    candidates = [(f, p) for f, p in files if limit > 0 and f.size >= limit and not f.key.endswith(".gz")]
    counted = {file.key: _split_records(spark, path, layout.has_header) for file, path in candidates}
    return {key: records for key, records in counted.items() if records is not None}


def _split_records(spark: SparkSession, path: str, header: bool) -> SplitRecords | None:
    """The records of each split of the file, or None when it must be read whole: a line holds an
    odd number of quote characters, or only white space (one parallel pass). Lines without a
    quote, most of a DMS file (DMS quotes only values that need it), are passed over by a byte
    search; the others are cut at their quotes.

    Both of Spark's CSV readers skip empty lines, and the header (the first line that is not
    empty, in the split at 0). A line of white space alone is a (bad) record to the whole-file
    reader and nothing to the line reader: such a file is read whole, so that its records keep
    their indexes."""
    from pyspark.sql import functions as F

    lines = spark.read.option("lineSep", "\n").text(path)
    odd = (F.instr("value", '"') > 0) & (F.size(F.split("value", '"')) % 2 == 0)  # n quotes: n + 1 pieces
    present = F.length("value") > 0
    blank = present & ~F.col("value").rlike("[^\\u0000-\\u0020]")  # nothing above U+0020 (Java's trim)
    splits = (
        lines.groupBy(F.col("_metadata.file_block_start").alias("start"))
        .agg(F.count_if(odd | blank).alias("whole"), F.count_if(present).alias("records"))
        .collect()
    )
    if any(r["whole"] for r in splits):
        return None
    records = {int(r["start"]): int(r["records"]) for r in splits}
    if header and records.get(0):
        records[0] -= 1
    return SplitRecords(records)


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
    frame = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    # A partition per file (``one_piece_per_partition``) would make a task per file: coalesced
    # (no shuffle; row ids are taken before) into about the tasks Spark's own packing makes.
    conf = spark._jsparkSession.sessionState().conf()
    parallelism = spark.sparkContext.defaultParallelism
    return frame.coalesce(packed_tasks([f.size for f in files], int(conf.filesMaxPartitionBytes()), parallelism))


# Spark's default ``spark.sql.files.openCostInBytes``: what its own packing counts for opening a file.
_SPARK_OPEN_COST = 4 << 20


def packed_tasks(sizes: Sequence[int], partition_bytes: int, parallelism: int) -> int:
    """About how many partitions Spark's own packing (``FilePartition``, its default open cost)
    makes of files of ``sizes``: pieces of at most ``partition_bytes``, or less to give every core
    one, each counted with the open cost. At least 1."""
    total = sum(size + _SPARK_OPEN_COST for size in sizes)
    split = max(1, min(partition_bytes, max(_SPARK_OPEN_COST, total // max(1, parallelism))))
    pieces = sum(max(1, -(-size // split)) for size in sizes)  # no more tasks than pieces
    return max(1, min(pieces, -(-total // split)))
