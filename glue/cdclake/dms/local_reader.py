"""A small batch's CSV files read in the driver and handed to Spark with no Spark job.

``read_files`` (``dms.reader``) scans files with Spark: at least one job, a task per file. A batch
of a few small files is read here instead: each file's bytes are cut into records in Python and
handed to Spark as rows the driver holds (``runtime.local_relation``), where ``from_csv`` parses
each record with the options, and so the parser, that Spark's CSV reader uses for the file
(``dms.reader.csv_options``). The frame has the columns ``read_files`` gives, in its order, and
the same row places (``_cdc_row``: the record's index in its file, the header not counted), so
every expression after the read (typing, checks, cleaning, order) runs unchanged, and Spark's
optimizer evaluates them in the driver.

Cutting a file into records takes one rule Spark's whole-file reader follows for a well-formed
DMS file: a record is a line that is not empty. Files where that rule may not be Spark's are
left to Spark (``read_locally`` returns None): a line with an odd number of quote characters (a
value holding a newline, or a stray quote), a line of white space alone (a bad record to Spark,
which would report it from its own text), a carriage return, a NUL, a byte-order mark, bytes that
are not UTF-8, Parquet files, transaction-ordered files and a batch whose files differ in columns.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from cdclake.columns import CORRUPT_RECORD, FILE_BLOCK, FILE_INDEX, ROW_POSITION
from cdclake.config import BronzeSettings, TableConfig
from cdclake.dms.files import BronzeFile
from cdclake.dms.reader import csv_options, plan_scans
from cdclake.dms.store import BronzeStore
from cdclake.identifiers import quote
from cdclake.runtime.local_relation import local_frame

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_RECORD = "_cdc_record"
# Java's String.trim removes every character up to U+0020: a line of those alone is white space.
_WHITE = "".join(chr(c) for c in range(0x21))


def file_records(data: bytes, header: bool) -> list[str] | None:
    """The records of a DMS CSV file's bytes (``header``: its first record is the header, left
    out), or None when Spark's reader might cut or decode them otherwise (module docstring)."""
    if b"\r" in data or b"\x00" in data or data.startswith(b"\xef\xbb\xbf"):
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    records = []
    for line in text.split("\n"):
        if not line:
            continue  # Spark's readers skip empty lines
        if line.count('"') % 2 or not line.strip(_WHITE):
            return None
        records.append(line)
    return records[1:] if header else records


def read_locally(
    spark: SparkSession, store: BronzeStore, settings: BronzeSettings, table: TableConfig, files: Sequence[BronzeFile]
) -> DataFrame | None:
    """``files`` as ``dms.reader.read_files`` reads them, from rows the driver holds; None when a
    file is one the driver leaves to Spark. Raises what ``read_files`` raises for a file it refuses
    (``plan_scans``: no Op column, a header that contradicts the declared columns)."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

    if not files or any(f.file_format != "csv" or f.is_multi_table for f in files):
        return None
    held = _HeldFiles(store, {f.key: store.read_head(f.key, f.size) for f in files})
    scans = plan_scans(held, settings, table, files)  # the headers read from the bytes held
    if len(scans) != 1:
        return None
    [(layout, members)] = scans.items()
    if layout.columns is None:
        return None
    ordinals: list[int] = []
    places: list[int] = []
    records: list[str] = []
    for ordinal, file in members:
        data = held.files[file.key]
        try:
            text = gzip.decompress(data) if file.compressed else data
        except (OSError, EOFError, zlib.error):
            return None  # Spark's reader says what is wrong with it
        found = file_records(text, layout.has_header)
        if found is None:
            return None
        ordinals += [ordinal] * len(found)
        places += range(len(found))
        records += found
    rows = pa.table(
        {
            FILE_INDEX: pa.array(ordinals, pa.int32()),
            FILE_BLOCK: pa.array([0] * len(records), pa.int64()),
            ROW_POSITION: pa.array(places, pa.int64()),
            _RECORD: pa.array(records, pa.string()),
        }
    )
    schema = StructType(
        [
            StructField(FILE_INDEX, IntegerType()),
            StructField(FILE_BLOCK, LongType()),
            StructField(ROW_POSITION, LongType()),
            StructField(_RECORD, StringType()),
        ]
    )
    fields = [*layout.columns, CORRUPT_RECORD]
    ddl = ", ".join(f"{quote(c)} STRING" for c in fields)
    options = csv_options(settings, header=False, multi_line=False)
    local = local_frame(spark, rows, schema)
    if local is None:
        return None
    parsed = local.select(F.from_csv(F.col(_RECORD), ddl, options).alias(_RECORD), FILE_BLOCK, FILE_INDEX, ROW_POSITION)
    return parsed.select(*[F.col(_RECORD)[c].alias(c) for c in fields], FILE_BLOCK, FILE_INDEX, ROW_POSITION)


class _HeldFiles:
    """``store`` with the bytes of some of its files already read: their heads come from those
    bytes (one read a file, where ``plan_scans`` reading headers would make it two)."""

    def __init__(self, store: BronzeStore, files: Mapping[str, bytes]) -> None:
        self.store, self.files = store, files

    @property
    def root(self) -> str:
        return self.store.root

    def list_keys(self, under: str = "", start_after: str | None = None) -> Iterator[tuple[str, int]]:
        return self.store.list_keys(under, start_after=start_after)

    def list_folders(self, under: str = "") -> Iterator[str]:
        return self.store.list_folders(under)

    def read_head(self, key: str, max_bytes: int) -> bytes:
        held = self.files.get(key)
        return held[:max_bytes] if held is not None else self.store.read_head(key, max_bytes)

    def spark_paths(self, files: Iterable[BronzeFile]) -> dict[str, str]:
        return self.store.spark_paths(files)

    def size(self, key: str) -> int | None:
        return self.store.size(key)

    def version(self, key: str) -> str | None:
        return self.store.version(key)

    def modified(self, key: str) -> datetime | None:
        return self.store.modified(key)
