"""The bronze layout DMS writes, as pure functions over object keys.

Keys are relative to the bronze root (the endpoint's bucket folder):
``<schema>/<table>/[<date folders>/]<file>``. Full-load files are ``LOAD`` + 8 hexadecimal digits;
CDC files are named by timestamp (``20141029-1134010000.csv``). Both may end in ``.gz``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum

MULTI_TABLE = "*"  # the schema of a transaction-ordered file that holds rows of several tables
CDCLAKE_KEYS = "_cdclake/"  # bronze keys of cdclake's own (``dms.progress``), never DMS files


class FileKind(Enum):
    FULL_LOAD = "full-load"
    CDC = "cdc"


# A parallel load (a table-mapping rule "parallel-load") names each segment's files LOAD_<segment>_<counter>,
# as Qlik Replicate, which DMS descends from, documents ("Amazon S3 target overview"): LOAD_1_00000001.
_LOAD_NAME = re.compile(r"^LOAD(?:_(\d+)_)?([0-9A-Fa-f]{8})\.(csv|parquet)(\.gz)?$")
_CDC_NAME = re.compile(r"^(\d{8})-(\d+)\.(csv|parquet)(\.gz)?$")
# DatePartitionSequence with DatePartitionDelimiter: SLASH gives one folder per part; UNDERSCORE,
# DASH and NONE give one folder such as 2024_03_01, 2024-03-01-12 or 2024030112.
_DATE_FOLDER = re.compile(r"^\d{2,4}(?:[_-]?\d{2,4}){0,3}$")


@dataclass(frozen=True, order=True)
class BronzeFile:
    """One DMS file. Instances sort in apply order within a table: full load first, then CDC."""

    sort_key: tuple[str, int, str, str]
    key: str  # relative to the bronze root
    schema: str
    table: str
    kind: FileKind
    file_format: str  # csv | parquet
    compressed: bool
    size: int = 0
    # what tells this content from the same name written again with the same size: the
    # modification time locally, the ETag on S3 (None: unknown); not part of the file's identity
    version: str | None = field(default=None, compare=False)

    @property
    def position(self) -> str:
        """A fixed-width text that sorts like ``sort_key`` across batches (LOAD files first).

        Only CDC files' positions are stored (in silver's order keys; a full load's rows order
        first with an empty one), so a parallel load's wider LOAD ordinal changes nothing stored."""
        kind, ordinal, stamp, _ = self.sort_key
        return f"{kind}{ordinal:08x}{stamp:<24}"

    @property
    def is_multi_table(self) -> bool:
        """A transaction-ordered CDC file (PreserveTransactions): rows of several tables."""
        return self.schema == MULTI_TABLE

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1]

    @property
    def source(self) -> str:
        return f"{self.schema}.{self.table}"


class UnrecognisedKey(ValueError):
    """A key that is not a DMS data file (reported to the user, never silently dropped)."""


def parse_key(key: str, size: int = 0, transaction_path: str | None = None) -> BronzeFile:
    """Classify a bronze key; raise ``UnrecognisedKey`` with the reason if it is not a DMS file.

    ``transaction_path`` is the endpoint's CdcPath when PreserveTransactions is on: CDC files
    there hold rows of several tables in transaction order (``schema`` is then ``*``).
    """
    parts = [p for p in key.strip("/").split("/") if p]
    prefix = [p for p in (transaction_path or "").strip("/").split("/") if p]
    if prefix and parts[: len(prefix)] == prefix and len(parts) > len(prefix):
        schema, table, folders, name = MULTI_TABLE, "/".join(prefix), parts[len(prefix) : -1], parts[-1]
        if not _CDC_NAME.match(name):
            raise UnrecognisedKey(f"{key}: not a DMS CDC (timestamp) file name in the transaction folder")
    elif len(parts) < 3:
        raise UnrecognisedKey(f"{key}: expected <schema>/<table>/<file>")
    else:
        schema, table, *folders, name = parts
    if any(not _DATE_FOLDER.match(folder) for folder in folders):
        raise UnrecognisedKey(f"{key}: folders between the table and the file must be date partitions")
    if match := _LOAD_NAME.match(name):
        segment = int(match.group(1) or 0)
        # Segments in order, each segment's files by their counter (a plain load is segment 0).
        ordinal = (segment << 32) | int(match.group(2), 16)
        kind, fmt, gz = FileKind.FULL_LOAD, match.group(3), match.group(4)
        # Full-load files sort by their hexadecimal counter; the name breaks ties across folders.
        sort_key = ("0", ordinal, "", "/".join(parts))
    elif match := _CDC_NAME.match(name):
        kind, fmt, gz = FileKind.CDC, match.group(3), match.group(4)
        # CDC names are write timestamps of one width: text order is write order.
        stamp = f"{match.group(1)}-{match.group(2)}"
        sort_key = ("1", 0, stamp, "/".join(parts))
    else:
        raise UnrecognisedKey(f"{key}: not a DMS full-load (LOADxxxxxxxx) or CDC (timestamp) file name")
    return BronzeFile(
        sort_key=sort_key,
        key="/".join(parts),
        schema=schema,
        table=table,
        kind=kind,
        file_format=fmt,
        compressed=gz is not None,
        size=size,
    )


@dataclass(frozen=True)
class BronzeListing:
    files: tuple[BronzeFile, ...]
    unrecognised: tuple[str, ...]  # reasons, one per key that is not a DMS data file

    def for_table(self, schema: str, table: str, kind: FileKind) -> list[BronzeFile]:
        return sorted(f for f in self.files if f.schema == schema and f.table == table and f.kind == kind)

    def may_hold(self, schema: str, table: str) -> bool:
        """Whether any file here may hold rows of the table: its own, or a multi-table
        (transaction) file, which holds rows of any table."""
        return any(f.is_multi_table or (f.schema == schema and f.table == table) for f in self.files)

    def sources(self) -> set[tuple[str, str]]:
        return {(f.schema, f.table) for f in self.files if not f.is_multi_table}


def classify(keys_and_sizes: Iterable[tuple[str, int]], transaction_path: str | None = None) -> BronzeListing:
    """Split a raw listing into DMS files (sorted) and unrecognised keys."""
    files: list[BronzeFile] = []
    unrecognised: list[str] = []
    for key, size in keys_and_sizes:
        if key.startswith(CDCLAKE_KEYS):
            continue  # cdclake's own (a capture's progress record: ``dms.progress``), not a DMS file
        try:
            files.append(parse_key(key, size, transaction_path))
        except UnrecognisedKey as exc:
            unrecognised.append(str(exc))
    return BronzeListing(files=tuple(sorted(files)), unrecognised=tuple(unrecognised))


# Characters Hadoop reads as a glob in a path handed to Spark; escaped so a folder named
# "orders [old]" is read as itself (DataFrameReader globs every path that holds one of them).
_GLOB_CHARACTERS = frozenset("{}[]*?\\")


def spark_path(path: str) -> str:
    """``path`` as Spark's reader takes it literally: glob characters escaped, nothing else quoted.

    Spaces and non-ASCII characters need no quoting (Hadoop encodes them itself); percent-encoding
    here would make Spark look for a file literally named ``%20``.
    """
    return "".join(f"\\{ch}" if ch in _GLOB_CHARACTERS else ch for ch in path)
