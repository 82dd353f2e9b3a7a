"""Another engine reads the warehouse as Spark does.

After a CDC workload with deletes, a column widened from int to bigint and a column added, every
table cdclake keeps (silver, its change history, its bookkeeping tables and a gold mart) is read
by pyiceberg from its newest metadata file, with no Spark and no catalog, and must equal Spark's
read of it: the same column names and types, the same rows. The bronze files are Parquet written
by pyarrow (as DMS writes them, not by Spark), with dates from year 1 on.
"""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from cdclake.config import parse_config
from cdclake.context import BatchSizes, Engine
from cdclake.dms.store import LocalBronze
from cdclake.engine.run import run
from cdclake.gold.refresh import FAILED, gold_database
from cdclake.gold.run import refresh_marts
from readers import comparable_rows, comparable_types, pyiceberg_read, spark_read

CONFIG = """
bronze: {{format: parquet, timestamp_column: ts}}
silver: {{database: {db}}}
tables:
  s.orders: {{primary_key: [id], history: true}}
  s.customers: {{primary_key: [id]}}
marts:
  - name: orders_per_customer
    sql: >-
      SELECT c.name, count(*) AS orders, sum(o.qty) AS qty, min(o.day) AS first_day
      FROM {db}.orders o JOIN {db}.customers c ON o.customer = c.id
      GROUP BY c.name
    keys: [name]
"""


def _ts(second: int) -> str:
    return f"2024-01-02 00:{second // 60:02d}:{second % 60:02d}.000000"


def _write(bronze: Path, key: str, columns: dict[str, pa.Array]) -> None:
    """A Parquet bronze file written by pyarrow (DMS's Parquet is not Spark's either)."""
    path = bronze / key
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(columns), path)


def _orders(ops: list[str] | None, seconds: list[int], ids: list[int], qty: pa.Array, **more: pa.Array) -> dict:
    columns: dict[str, pa.Array] = {} if ops is None else {"Op": pa.array(ops)}
    return columns | {
        "ts": pa.array([_ts(s) for s in seconds]),
        "id": pa.array(ids, pa.int32()),
        "customer": pa.array([i % 3 for i in ids], pa.int32()),
        "qty": qty,
        # dates from year 1, and before the Gregorian reform, as a source may hold them
        "day": pa.array([date(1 + (i * 397) % 9999, 1 + i % 12, 1 + i % 28) for i in ids], pa.date32()),
        "placed": pa.array(
            [datetime(1500 + i * 37 % 600, 1 + i % 12, 2, i % 24, 30, 0, i * 1001 % 1_000_000, UTC) for i in ids],
            pa.timestamp("us", tz="UTC"),
        ),
        **more,
    }


def _load_and_first_batch(bronze: Path) -> None:
    ids = list(range(1, 13))
    load = _orders(None, [0] * len(ids), ids, pa.array([i * 10 for i in ids], pa.int32()))
    _write(bronze, "s/orders/LOAD00000001.parquet", load)
    customers = {"ts": pa.array([_ts(0)] * 3), "id": pa.array([0, 1, 2], pa.int32()), "name": pa.array(["a", "b", "c"])}
    _write(bronze, "s/customers/LOAD00000001.parquet", customers)
    # updates, deletes and inserts of orders; a customer renamed, one deleted, one added
    ops, changed = ["U", "U", "D", "D", "I", "I", "U"], [1, 2, 3, 4, 20, 21, 1]
    first = _orders(ops, list(range(1, 8)), changed, pa.array([i * 100 + n for n, i in enumerate(changed)], pa.int32()))
    _write(bronze, "s/orders/20240102-0000010000.parquet", first)
    customer_changes = {
        "Op": pa.array(["U", "D", "I"]),
        "ts": pa.array([_ts(1), _ts(2), _ts(3)]),
        "id": pa.array([0, 2, 3], pa.int32()),
        "name": pa.array(["a2", "c", "d"]),
    }
    _write(bronze, "s/customers/20240102-0000010000.parquet", customer_changes)


def _widening_batch(bronze: Path) -> None:
    # qty comes as bigint (a value int cannot hold) and a column is added
    ops, changed = ["U", "I", "D", "U"], [2, 30, 5, 20]
    second = _orders(
        ops,
        list(range(10, 14)),
        changed,
        pa.array([2**40 + n for n in range(4)], pa.int64()),
        note=pa.array(["widened", None, "gone", "new column"]),
    )
    _write(bronze, "s/orders/20240102-0000020000.parquet", second)


def _tables(spark: SparkSession, database: str) -> list[str]:
    return sorted(
        f"silver.{database}.{r['tableName']}" for r in spark.sql(f"SHOW TABLES IN silver.{database}").collect()
    )


@pytest.mark.parametrize(
    "driver_write_bytes", [0, BatchSizes.driver_write_bytes], ids=["spark-writes", "driver-writes"]
)
def test_pyiceberg_reads_every_table_as_spark_does(
    spark: SparkSession, tmp_path: Path, driver_write_bytes: int
) -> None:
    # GIVEN a database of two tables (one with history) and a gold mart over both
    db = f"i_{uuid.uuid4().hex[:10]}"
    bronze = tmp_path / "bronze"
    engine = Engine(spark, parse_config(CONFIG.format(db=db)), LocalBronze(bronze)).tuned(
        driver_write_bytes=driver_write_bytes
    )
    # WHEN the load and a batch of updates, deletes and inserts are applied and the mart refreshed,
    # then a batch that widens a column and adds one, and the mart refreshed again
    _load_and_first_batch(bronze)
    run(engine).checked()
    assert FAILED not in {m.outcome for m in refresh_marts(engine)}
    _widening_batch(bronze)
    widened = run(engine).checked()
    assert FAILED not in {m.outcome for m in refresh_marts(engine)}
    # THEN the batch did widen qty and add note
    changes = {c for t in widened.tables for c in t.schema_changes}
    assert {"widened column qty from int to bigint", "added column note string"} <= changes, changes
    gold = gold_database(engine.config)
    tables = _tables(spark, db) + _tables(spark, gold)
    assert {f"silver.{db}.orders", f"silver.{db}.orders__history", f"silver.{gold}.orders_per_customer"} <= set(
        tables
    ), tables
    # AND pyiceberg reads each table, from its newest metadata file, as Spark reads it (orders__history
    # included, widened with silver: tests/spark/test_history_schema.py)
    differ = {}
    for identifier in tables:
        ours, theirs = spark_read(spark, identifier), pyiceberg_read(spark, identifier)
        if comparable_types(ours) != comparable_types(theirs):
            differ[identifier] = ("types", comparable_types(ours), comparable_types(theirs))
        elif comparable_rows(ours) != comparable_rows(theirs):
            differ[identifier] = ("rows", comparable_rows(ours), comparable_rows(theirs))
    assert differ == {}
    # AND the widened and added columns hold what the source sent (a check of the reads' subject,
    # not only of their agreement)
    orders = {
        row[0]: row[1:]
        for row in comparable_rows(spark_read(spark, f"silver.{db}.orders").select(["id", "qty", "note"]))
    }
    assert orders[2] == (2**40, "widened") and orders[30] == (2**40 + 1, None) and 5 not in orders
    assert orders[6] == (60, None)
