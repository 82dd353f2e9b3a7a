"""The plain-MERGE baseline the benchmarks measure cdclake against: read a table's CDC
files, keep each key's last change by the change sequence, one Iceberg MERGE."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from bench import generate as gen

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def seed_merge(spark: SparkSession, path: Path | list[Path], target: str, view: str = "seed_changes") -> None:
    """the plain-MERGE baseline's apply: read one CDC file (or several), keep the last change per key, one MERGE
    (``view``: the changes' temporary view, one per thread when tables are merged at once)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    columns = ["Op", gen.TIMESTAMP_COLUMN, *gen.COLUMNS, gen.SEQ_COLUMN]
    schema = StructType([StructField(c, StringType()) for c in columns])
    paths = [str(p) for p in path] if isinstance(path, list) else [str(path)]
    frame = spark.read.schema(schema).option("escape", '"').option("multiLine", "true").csv(paths)
    frame = frame.select(
        "Op",
        F.col(gen.TIMESTAMP_COLUMN).cast("timestamp").alias(gen.TIMESTAMP_COLUMN),
        *[F.col(c).cast(t).alias(c) for c, t in gen.COLUMNS.items()],
        gen.SEQ_COLUMN,
    )
    latest = (
        frame.withColumn("_rn", F.row_number().over(Window.partitionBy("id").orderBy(F.desc(gen.SEQ_COLUMN))))
        .where("_rn = 1")
        .drop("_rn")
    )
    latest.createOrReplaceTempView(view)
    sets = ", ".join(f"t.{c} = s.{c}" for c in (gen.TIMESTAMP_COLUMN, *gen.COLUMNS) if c != "id")
    cols = ", ".join((gen.TIMESTAMP_COLUMN, *gen.COLUMNS))
    values = ", ".join(f"s.{c}" for c in (gen.TIMESTAMP_COLUMN, *gen.COLUMNS))
    spark.sql(
        f"MERGE INTO {target} t USING {view} s ON t.id = s.id "
        "WHEN MATCHED AND s.Op = 'D' THEN DELETE "
        f"WHEN MATCHED THEN UPDATE SET {sets}, t._cdc_order = s.{gen.SEQ_COLUMN} "
        f"WHEN NOT MATCHED AND s.Op <> 'D' THEN INSERT ({cols}, _cdc_order) VALUES ({values}, s.{gen.SEQ_COLUMN})"
    )
