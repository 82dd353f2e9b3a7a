"""Generate DMS-format bronze files for the benchmarks, vectorised with Spark itself.

The benchmark table ``public.orders`` has a bigint key and six typed columns. Every value is a pure
function of the key (and, for changes, of the change index), so any table size and change set can
be produced without holding anything in Python:

* full load: keys ``0 .. rows-1`` in ``LOAD00000001.csv`` (or ``.parquet``) ...;
* a change set of ``n`` changes: 10% deletes, 80% updates (of distinct existing keys spread over the
  whole key range by a multiplicative permutation) and 10% inserts (keys from ``rows + offset``),
  interleaved, in ``yyyyMMdd-HHmmssSSSS.csv`` files whose commit times and change sequences grow.

CSV is in DMS's dialect: headerless; ``Op`` first (CDC files), then the timestamp column, the
columns, then ``AR_H_CHANGE_SEQ``; NULL is an empty unquoted field; RFC-4180 quoting.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

SCHEMA, TABLE = "public", "orders"
TIMESTAMP_COLUMN, SEQ_COLUMN = "last_updated_ts", "AR_H_CHANGE_SEQ"
COLUMNS = {
    "id": "bigint",
    "customer_id": "int",
    "status": "string",
    "amount": "decimal(12,2)",
    "quantity": "int",
    "note": "string",
    "created": "date",
}
STATUSES = ("new", "paid", "shipped", "delivered", "returned")
# Out of every 10 changes: 1 delete, 8 updates, 1 insert (the target mix).
MIX = {"D": 1, "U": 8, "I": 1}
_PERMUTATION_PRIME = 1_000_000_007  # > any table size used, so k -> k*P mod rows is a bijection
LOAD_TS = datetime(2024, 1, 1)


def config_yaml(target: str, database: str = "bench", max_files_per_batch: int = 500) -> str:
    """The cdclake configuration of the benchmark table (bronze path is set by the caller)."""
    columns = ", ".join(f'{name}: "{type_name}"' for name, type_name in COLUMNS.items())
    return f"""
bronze:
  path: bronze
  format: csv
  csv_header: false
  timestamp_column: {TIMESTAMP_COLUMN}
  change_sequence_column: {SEQ_COLUMN}
silver:
  database: {database}
cdc:
  max_files_per_batch: {max_files_per_batch}
tables:
  {SCHEMA}.{TABLE}:
    target: {target}
    primary_key: [id]
    columns: {{{columns}}}
    clean:
      cast: {{{TIMESTAMP_COLUMN}: timestamp}}
"""


@dataclass(frozen=True)
class ChangeSet:
    """``changes`` changes against a table of ``rows`` keys, the ``batch``-th such set (distinct keys)."""

    rows: int
    changes: int
    files: int
    batch: int = 0

    def counts(self) -> dict[str, int]:
        """How many changes of each operation the set holds."""
        groups, rest = divmod(self.changes, sum(MIX.values()))
        counts = {op: groups * share for op, share in MIX.items()}
        counts["U"] += rest  # a remainder becomes updates
        return counts


def op_of(k: int) -> str:
    """The operation of change ``k`` (pure Python twin of the Spark expression, for tests)."""
    slot = k % sum(MIX.values())
    return "D" if slot < MIX["D"] else ("I" if slot >= MIX["D"] + MIX["U"] else "U")


def key_of(change: ChangeSet, k: int) -> int:
    """The key change ``k`` touches (pure Python twin of the Spark expression, for tests)."""
    groups, slot = divmod(k, sum(MIX.values()))
    base = change.batch * change.changes
    if op_of(k) == "I":
        return change.rows + (base + k) // sum(MIX.values())  # never collides with another set's inserts
    existing = base + groups * (MIX["D"] + MIX["U"]) + min(slot, MIX["D"] + MIX["U"] - 1)
    return (existing * _PERMUTATION_PRIME) % change.rows


def _values(spark_id: Column, version: Column) -> list[Column]:
    from pyspark.sql import functions as F

    status = F.element_at(
        F.array(*[F.lit(s) for s in STATUSES]), ((spark_id + version) % len(STATUSES) + 1).cast("int")
    )
    return [
        spark_id.cast("string").alias("id"),
        ((spark_id * 7919) % 100_000).cast("string").alias("customer_id"),
        status.alias("status"),
        F.format_string("%d.%02d", (spark_id * 13 + version) % 10_000, (spark_id + version) % 100).alias("amount"),
        F.when(spark_id % 50 == 0, F.lit(None))
        .otherwise(((spark_id + version) % 20 + 1).cast("string"))
        .alias("quantity"),
        # A comma makes DMS (and Spark) quote the field; NULL now and then.
        F.when(spark_id % 97 == 0, F.lit(None))
        .otherwise(F.format_string("order %d, revision %d", spark_id, version))
        .alias("note"),
        F.date_format(F.date_add(F.lit("2020-01-01").cast("date"), (spark_id % 1500).cast("int")), "yyyy-MM-dd").alias(
            "created"
        ),
    ]


def _timestamp_text(base: datetime, micros: Column) -> Column:
    from pyspark.sql import functions as F

    start = int(base.replace(tzinfo=UTC).timestamp()) * 1_000_000  # the session time zone is UTC
    return F.date_format(F.timestamp_micros(F.lit(start) + micros), "yyyy-MM-dd HH:mm:ss.SSSSSS")


def _write_csv(df: DataFrame, out: Path) -> None:
    (
        df.write.mode("overwrite")
        .option("header", "false")
        .option("quote", '"')
        .option("escape", '"')
        .option("nullValue", "")
        .option("emptyValue", '""')
        .option("timestampFormat", "yyyy-MM-dd HH:mm:ss.SSSSSS")
        .csv(str(out))
    )


def table_dir(root: Path) -> Path:
    return root / SCHEMA / TABLE


def full_load(spark: SparkSession, root: Path, rows: int, files: int, file_format: str = "csv") -> list[Path]:
    """Write the full load of ``rows`` keys as ``files`` DMS LOAD files under ``root``; return them."""
    from pyspark.sql import functions as F

    ids = spark.range(0, rows, numPartitions=files).select(F.col("id"))
    frame = ids.select(
        F.lit(LOAD_TS.strftime("%Y-%m-%d %H:%M:%S.000000")).alias(TIMESTAMP_COLUMN),
        *_values(F.col("id"), F.lit(0)),
        F.lit("0" * 35).alias(SEQ_COLUMN),
    )
    if file_format == "parquet":
        frame = _typed(frame)
    return _place(frame, root, file_format, lambda i: f"LOAD{i + 1:08X}.{file_format}")


def full_load_chunks(
    spark: SparkSession, root: Path, rows: int, chunk_rows: int, files_per_chunk: int = 2
) -> list[Path]:
    """Write the full load of ``rows`` keys as typed Parquet LOAD files, ``chunk_rows`` keys per Spark job.

    The same rows as ``full_load(..., "parquet")``; each chunk is its own job of ``files_per_chunk``
    files, so a 50M-row load never has more than one chunk's writers open (the scale profile)."""
    from pyspark.sql import functions as F

    placed: list[Path] = []
    for start in range(0, rows, chunk_rows):
        ids = spark.range(start, min(rows, start + chunk_rows), numPartitions=files_per_chunk).select(F.col("id"))
        frame = ids.select(
            F.lit(LOAD_TS.strftime("%Y-%m-%d %H:%M:%S.000000")).alias(TIMESTAMP_COLUMN),
            *_values(F.col("id"), F.lit(0)),
            F.lit("0" * 35).alias(SEQ_COLUMN),
        )
        offset = len(placed)
        chunk_root = root.parent / f".chunk-{root.name}"
        for part in _place(_typed(frame), chunk_root, "parquet", lambda i: f"part{i}.parquet"):
            dest = table_dir(root) / f"LOAD{offset + 1:08X}.parquet"
            dest.parent.mkdir(parents=True, exist_ok=True)
            part.rename(dest)
            placed.append(dest)
            offset += 1
        shutil.rmtree(chunk_root)
    return placed


def _typed(frame: DataFrame) -> DataFrame:
    """DMS Parquet carries typed columns (the timestamp and change sequence stay text here)."""
    from pyspark.sql import functions as F

    return frame.select(*[F.col(c).cast(COLUMNS[c]).alias(c) if c in COLUMNS else F.col(c) for c in frame.columns])


def _place(frame: DataFrame, root: Path, file_format: str, name: object) -> list[Path]:
    """Write one file per partition of ``frame``, then move them to DMS names under ``root``."""
    staging = root.parent / f".staging-{root.name}"
    if file_format == "parquet":
        frame.write.mode("overwrite").option("compression", "snappy").parquet(str(staging))
    else:
        _write_csv(frame, staging)
    parts = sorted(p for p in staging.iterdir() if p.name.startswith("part-"))
    target = table_dir(root)
    target.mkdir(parents=True, exist_ok=True)
    placed = []
    for index, part in enumerate(parts):
        dest = target / name(index)  # type: ignore[operator]
        part.rename(dest)
        placed.append(dest)
    shutil.rmtree(staging)
    return placed


def changes(spark: SparkSession, root: Path, change: ChangeSet, start: datetime) -> list[Path]:
    """Write ``change`` as ``change.files`` DMS CDC files under ``root`` (in commit order); return them."""
    from pyspark.sql import functions as F

    period = sum(MIX.values())
    k = F.col("id")
    slot = k % period
    groups = F.floor(k / period)
    base = change.batch * change.changes
    op = F.when(slot < MIX["D"], F.lit("D")).when(slot >= MIX["D"] + MIX["U"], F.lit("I")).otherwise(F.lit("U"))
    existing = F.lit(base) + groups * (MIX["D"] + MIX["U"]) + F.least(slot, F.lit(MIX["D"] + MIX["U"] - 1))
    # existing * P mod rows without overflow: both factors < 2^31 after the mod.
    permuted = ((existing % change.rows) * F.lit(_PERMUTATION_PRIME % change.rows)) % change.rows
    inserted = F.lit(change.rows) + F.floor((F.lit(base) + k) / period)
    key = F.when(op == "I", inserted).otherwise(permuted).cast("bigint")
    # 1 ms apart within a file; consecutive files are at least one second apart.
    per_file = -(-change.changes // change.files)
    file_no = F.floor(k / per_file).cast("int")
    micros = file_no * 1_000_000 + (k % per_file) * 1000
    frame = spark.range(0, change.changes, numPartitions=max(1, min(change.files, 16))).select(
        file_no.alias("_file"),
        k.alias("_k"),
        op.alias("Op"),
        _timestamp_text(start, micros).alias(TIMESTAMP_COLUMN),
        *_values(key, F.lit(change.batch + 1)),
        F.format_string("%020d%015d", F.lit(int(start.strftime("%Y%m%d%H%M%S"))), k).alias(SEQ_COLUMN),
    )
    # Deletes carry the key only (DMS writes the before-image key columns; the rest is irrelevant).
    frame = frame.select(
        *[
            F.when(F.col("Op") == "D", F.lit(None)).otherwise(F.col(c)).alias(c)
            if c in COLUMNS and c != "id"
            else F.col(c)
            for c in frame.columns
        ]
    )
    staging = root.parent / f".staging-{root.name}"
    (
        frame.repartition(F.col("_file"))
        .sortWithinPartitions("_k")
        .drop("_k")
        .write.mode("overwrite")
        .partitionBy("_file")
        .option("header", "false")
        .option("quote", '"')
        .option("escape", '"')
        .option("nullValue", "")
        .option("emptyValue", '""')
        .csv(str(staging))
    )
    target = table_dir(root)
    target.mkdir(parents=True, exist_ok=True)
    placed = []
    for number in range(change.files):
        parts = list((staging / f"_file={number}").glob("part-*"))
        if len(parts) != 1:
            raise RuntimeError(f"expected one part file for CDC file {number}, found {len(parts)}")
        name = (start + timedelta(seconds=number)).strftime("%Y%m%d-%H%M%S%f")[:19] + ".csv"
        dest = target / name
        parts[0].rename(dest)
        placed.append(dest)
    shutil.rmtree(staging)
    return placed


def snapshot_from_table(spark: SparkSession, table: str, root: Path, files: int) -> list[Path]:
    """Export a silver table as a new DMS full load (the full-snapshot alternative's input)."""
    from pyspark.sql import functions as F

    frame = spark.table(table).select(
        F.date_format(F.col(TIMESTAMP_COLUMN), "yyyy-MM-dd HH:mm:ss.SSSSSS").alias(TIMESTAMP_COLUMN),
        *[F.col(c).cast("string").alias(c) for c in COLUMNS],
        F.lit("0" * 35).alias(SEQ_COLUMN),
    )
    return _place(frame.repartition(files), root, "csv", lambda i: f"LOAD{i + 1:08X}.csv")
