"""Every column type of the table (``types.COLUMN_TYPES``), end to end: its example value, as DMS writes it in a
CSV file, is full-loaded and changed by CDC into silver through both write paths, and read back by Spark and by
pyiceberg as the value pyarrow's own CSV parser makes of the same text. A new row of the table is tested here
without a line of this file changing."""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
import pytest
from pyspark.sql import SparkSession
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import DataType, DecimalType, _all_atomic_types

from cdclake.config import parse_config
from cdclake.context import BatchSizes, Engine
from cdclake.dms.store import LocalBronze
from cdclake.engine.run import run
from cdclake.types import COLUMN_TYPES, ColumnType
from readers import pyiceberg_read, spark_read

DECIMAL = "decimal(12,2)"


def _declared(column_type: ColumnType) -> str:
    return DECIMAL if column_type.family == "decimal" else column_type.spark


def _column(column_type: ColumnType) -> str:
    return f"c_{column_type.spark}"


def _spark_type(simple: str) -> DataType:
    """PySpark's own type for a Spark type name (the table is not asked)."""
    if simple.startswith("decimal("):
        precision, scale = simple[len("decimal(") : -1].split(",")
        return DecimalType(int(precision), int(scale))
    atomic = {}
    for kind in _all_atomic_types.values():
        try:
            atomic[kind().simpleString()] = kind
        except TypeError:  # a type with parameters (char, varchar)
            continue
    return atomic[simple]()


def _expected() -> dict[str, Any]:
    """Each example as pyarrow's CSV parser reads its text into the type's Arrow form (PySpark's mapping);
    a timestamp with a zone from DMS's UTC text."""
    values = {}
    for t in COLUMN_TYPES:
        arrow = to_arrow_type(_spark_type(_declared(t)))
        naive = pa.timestamp(arrow.unit) if pa.types.is_timestamp(arrow) and arrow.tz else arrow
        options = pcsv.ConvertOptions(column_types={"v": naive}, quoted_strings_can_be_null=False)
        column = pcsv.read_csv(
            io.BytesIO(t.example.encode()), pcsv.ReadOptions(column_names=["v"]), convert_options=options
        ).column("v")
        if naive != arrow:
            column = pc.assume_timezone(column, "UTC")
        values[_column(t)] = column.to_pylist()[0]
    return values


def _config(db: str) -> str:
    columns = ", ".join(f"{_column(t)}: {_declared(t)!r}" for t in COLUMN_TYPES)
    return (
        f"bronze: {{timestamp_column: ts}}\nsilver: {{database: {db}}}\n"
        f"tables:\n  s.kinds: {{primary_key: [id], columns: {{id: int, {columns}}}}}\n"
    )


def _write(bronze: Path, name: str, lines: list[str]) -> None:
    path = bronze / "s" / "kinds" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


@pytest.mark.parametrize(
    "driver_write_bytes", [0, BatchSizes.driver_write_bytes], ids=["spark-writes", "driver-writes"]
)
def test_every_type_of_the_table_reaches_silver_as_its_dms_text_says(
    spark: SparkSession, tmp_path: Path, driver_write_bytes: int
) -> None:
    # GIVEN a table with a column of every type of the table, and its example value in each
    db = f"t_{uuid.uuid4().hex[:10]}"
    bronze = tmp_path / "bronze"
    examples = ",".join(t.example for t in COLUMN_TYPES)
    _write(bronze, "LOAD00000001.csv", [f"2024-01-02 00:00:00.000000,1,{examples}"])
    _write(
        bronze,
        "20240102-000001000.csv",
        [f"I,2024-01-02 00:00:01.000000,2,{examples}", f"U,2024-01-02 00:00:02.000000,1,{examples}"],
    )
    engine = Engine(spark, parse_config(_config(db)), LocalBronze(bronze)).tuned(driver_write_bytes=driver_write_bytes)
    # WHEN the load and the CDC file are applied
    report = run(engine).checked()
    assert sum(t.files_applied for t in report.tables) == 2, report
    # THEN Spark and pyiceberg read both rows with every column as pyarrow parses its DMS text
    expected = _expected()
    identifier = f"silver.{db}.kinds"
    for reader in (spark_read, pyiceberg_read):
        rows = {row["id"]: row for row in reader(spark, identifier).to_pylist()}
        assert sorted(rows) == [1, 2], reader.__name__
        for key, row in rows.items():
            got = {name: row[name] for name in expected}
            assert got == expected, (reader.__name__, key, {n: (got[n], v) for n, v in expected.items() if got[n] != v})
