"""A small batch's rows shaped as the files the driver writes (``lake.driver_write``): no Spark is started."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
from pyspark.sql.types import DecimalType, IntegerType, LongType, StringType, TimestampType

from cdclake.lake.driver_write import arrow_shape, sorted_ascending

FIELD_ID = b"PARQUET:field_id"


def test_rows_are_shaped_as_the_table_stores_them() -> None:
    # GIVEN collected rows with bookkeeping columns, a narrower integer and a renamed column
    rows = pa.table(
        {
            "id": pa.array([2, 1], pa.int32()),
            "amount": pa.array([Decimal("1.50"), None], pa.decimal128(5, 2)),
            "_cdc_commit_ts": pa.array([datetime(2024, 1, 1, tzinfo=UTC), None], pa.timestamp("us", tz="UTC")),
            "_cdc_op": ["U", "I"],
        }
    )
    columns = [
        ("id", 1, LongType()),
        ("amount", 2, DecimalType(12, 2)),
        ("deleted_at", 3, TimestampType()),
        ("gone", 4, StringType()),
        ("n", 5, IntegerType()),
    ]
    # WHEN shaped, ``deleted_at`` taken from the commit time and ``n`` set NULL on purpose
    shaped = arrow_shape(rows, columns, renamed={"deleted_at": "_cdc_commit_ts"}, nulls={"n"})
    # THEN the file holds exactly the table's columns, in its types, with their field ids
    assert shaped.column_names == ["id", "amount", "deleted_at", "gone", "n"]
    assert [f.type for f in shaped.schema] == [
        pa.int64(), pa.decimal128(12, 2), pa.timestamp("us", tz="UTC"), pa.string(), pa.int32()
    ]  # fmt: skip
    assert [int(f.metadata[FIELD_ID]) for f in shaped.schema] == [1, 2, 3, 4, 5]
    assert shaped.to_pydict() == {
        "id": [2, 1],
        "amount": [Decimal("1.50"), None],
        "deleted_at": [datetime(2024, 1, 1, tzinfo=UTC), None],
        "gone": [None, None],
        "n": [None, None],
    }
    assert all(f.nullable for f in shaped.schema)


def test_a_position_delete_file_has_required_fields_sorted_by_path_and_position() -> None:
    rows = pa.table({"_cdc_stored_file": ["b", "a", "a"], "_cdc_stored_pos": [0, 7, 3]})
    deletes = arrow_shape(
        rows,
        [("file_path", 2147483546, StringType()), ("pos", 2147483545, LongType())],
        renamed={"file_path": "_cdc_stored_file", "pos": "_cdc_stored_pos"},
        required=True,
    )
    assert not any(f.nullable for f in deletes.schema)
    assert sorted_ascending(deletes, ["file_path", "pos"]).to_pydict() == {
        "file_path": ["a", "a", "b"],
        "pos": [3, 7, 0],
    }


def test_sorted_puts_nulls_first_as_an_ascending_iceberg_sort_order() -> None:
    rows = pa.table({"k": pa.array([3, None, 1], pa.int64())})
    assert sorted_ascending(rows, ["k"]).column("k").to_pylist() == [None, 1, 3]
    assert sorted_ascending(rows, []).column("k").to_pylist() == [3, None, 1]
