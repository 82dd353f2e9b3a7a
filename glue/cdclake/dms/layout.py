"""Which columns a DMS file holds, and in what order: pure functions over settings and headers."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass

from cdclake.config import BronzeSettings, TableConfig
from cdclake.dms.files import BronzeFile, FileKind
from cdclake.errors import BadInputError

DMS_OP_COLUMN = "Op"
# In transaction-ordered files (PreserveTransactions) each row names its table after the timestamp.
SOURCE_SCHEMA_COLUMN, SOURCE_TABLE_COLUMN = "_cdc_source_schema", "_cdc_source_table"


@dataclass(frozen=True)
class FileLayout:
    """The columns of one group of files that Spark can read in a single scan."""

    file_format: str
    columns: tuple[str, ...] | None  # None: the file describes itself (Parquet)
    has_header: bool


def headerless_columns(
    settings: BronzeSettings, table: TableConfig, kind: FileKind, multi_table: bool = False
) -> tuple[str, ...]:
    """Column order of a headerless DMS CSV file.

    DMS writes ``Op`` first (CDC files, and full-load files with IncludeOpForFullLoad), then the
    TimestampColumnName column, then the table's columns; columns added by transformation rules
    (such as ``AR_H_CHANGE_SEQ``) come last, so the change-sequence column is appended when the
    configuration does not list it.
    """
    columns: list[str] = []
    if kind is FileKind.CDC or settings.include_op_for_full_load:
        columns.append(DMS_OP_COLUMN)
    if settings.timestamp_column and settings.timestamp_column not in table.columns:
        columns.append(settings.timestamp_column)
    if multi_table:
        columns += [SOURCE_SCHEMA_COLUMN, SOURCE_TABLE_COLUMN]
    columns.extend(table.columns)
    seq = settings.change_sequence_column
    if seq and seq not in table.columns:
        columns.append(seq)
    return tuple(columns)


def parse_header(head: bytes, delimiter: str, key: str) -> tuple[str, ...]:
    """Column names from the first record of a CSV file (quoted names allowed)."""
    newline = head.find(b"\n")
    # Only the first record matters; the head may end inside a multi-byte character further on.
    # (A header with a quoted newline in a name is read from the whole head instead.)
    first = head if newline < 0 or head.count(b'"', 0, newline) % 2 else head[: newline + 1]
    try:
        text = first.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"{exc.reason} at byte {exc.start}"
        raise BadInputError(f"{key} does not start with a UTF-8 header row ({reason}).") from None
    reader = csv.reader(io.StringIO(text), delimiter=delimiter, quotechar='"', doublequote=True)
    try:
        header = next(reader)
    except StopIteration:
        raise BadInputError(f"{key} is empty: a CSV file with AddColumnName needs a header row.") from None
    if not header or any(not name for name in header):
        raise BadInputError(f"{key} has an empty column name in its header row.")
    return tuple(header)


def undeclared_header_columns(
    settings: BronzeSettings, table: TableConfig, header: tuple[str, ...]
) -> tuple[list[str], list[str]]:
    """A header that contradicts the table's declared ``columns``: (the header's columns that are
    not declared, the declared columns the header lacks); ([], ...) when it does not contradict.

    Only a table that declares ``columns`` is checked (without them, headers are followed: a new
    column is added, a missing one is NULL from then on). Op, the timestamp and change-sequence
    columns and ``clean.cast`` columns count as declared; names compare case-insensitively, as
    Spark resolves them.
    """
    if not table.columns:
        return [], []
    bookkeeping = (DMS_OP_COLUMN, settings.timestamp_column, settings.change_sequence_column)
    declared = {name.lower() for name in (*table.columns, *table.clean.cast, *bookkeeping) if name}
    in_header = {name.lower() for name in header}
    undeclared = [name for name in header if name.lower() not in declared]
    return undeclared, [name for name in table.columns if name.lower() not in in_header]


def lacks_change_sequence(settings: BronzeSettings, header: tuple[str, ...]) -> bool:
    """Whether a header row lacks the configured change-sequence column: the DMS task has no
    ``AR_H_CHANGE_SEQ`` mapping rule (docs/deploy.md). Its changes are still applied, those of one
    commit time in file and row order (DMS's write order), with no change sequence to tell them apart."""
    seq = settings.change_sequence_column
    return seq is not None and seq.lower() not in {name.lower() for name in header}


def layout_for(
    settings: BronzeSettings, table: TableConfig, file: BronzeFile, header: tuple[str, ...] | None
) -> FileLayout:
    """The layout of ``file``; ``header`` is the parsed header row for CSV files that have one."""
    if file.is_multi_table:
        if file.file_format != "csv" or not table.columns:
            raise BadInputError(
                f"{file.key}: transaction-ordered files are read as headerless CSV with the table's declared columns."
            )
        return FileLayout("csv", headerless_columns(settings, table, file.kind, True), has_header=False)
    if file.file_format == "parquet":
        return FileLayout("parquet", None, has_header=False)
    if settings.csv_header:
        if header is None:
            raise ValueError("a CSV file with a header needs its header parsed first")
        return FileLayout("csv", header, has_header=True)
    return FileLayout("csv", headerless_columns(settings, table, file.kind), has_header=False)
