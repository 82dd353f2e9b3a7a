"""The pure DataFrame -> DataFrame steps, on small inline DataFrames."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from cdclake.columns import OP
from cdclake.config import CleaningRules
from cdclake.engine.changes import apply_cleaning
from cdclake.engine.effects import latest_change_per_key
from cdclake.engine.statements import merge_statement
from cdclake.errors import ConfigError
from cdclake.lake.batch import WrittenColumns

CHANGE_SCHEMA = (
    "k1 string, k2 int, v string, _cdc_op string, _cdc_ts string, _cdc_seq string, _cdc_file int, "
    "_cdc_block bigint, _cdc_row bigint"
)


def test_latest_change_per_key_orders_by_timestamp_sequence_file_row(spark: SparkSession) -> None:
    # GIVEN changes where each ordering level decides one key
    rows = [
        ("a", 1, "old-ts", "U", "2024-01-01 00:00:01", "9", 9, 0, 9),
        ("a", 1, "new-ts", "U", "2024-01-01 00:00:02", "1", 0, 0, 0),  # later timestamp wins
        ("b", 1, "low-seq", "U", "2024-01-01 00:00:01", "1", 5, 0, 5),
        ("b", 1, "high-seq", "U", "2024-01-01 00:00:01", "2", 0, 0, 0),  # same ts: sequence wins
        ("c", 1, "file-0", "U", "2024-01-01 00:00:01", None, 0, 0, 7),
        ("c", 1, "file-1", "D", "2024-01-01 00:00:01", None, 1, 0, 0),  # same ts, no seq: later file
        ("c", 2, "row-3", "U", "2024-01-01 00:00:01", None, 0, 0, 3),
        ("c", 2, "row-4", "I", "2024-01-01 00:00:01", None, 0, 0, 4),  # same file: later row
        # a file read in splits: a later split wins whatever its row ids (they restart per split)
        ("d", 1, "split-0", "U", "2024-01-01 00:00:01", None, 0, 0, 8_589_934_600),
        ("d", 1, "split-1", "U", "2024-01-01 00:00:01", None, 0, 4096, 1),
    ]
    changes = spark.createDataFrame(rows, CHANGE_SCHEMA)
    # WHEN de-duplicated on the composite key
    latest = latest_change_per_key(changes, ["k1", "k2"])
    # THEN exactly the last change of each key remains, columns unchanged
    assert sorted(tuple(r) for r in latest.select(*changes.columns).collect()) == [
        rows[1],
        rows[3],
        rows[5],
        rows[7],
        rows[9],
    ]


def test_latest_change_per_key_skips_invalid_rows_and_keeps_the_named_columns(spark: SparkSession) -> None:
    # GIVEN changes where a later row of key "a" is invalid and every row of key "b" is
    rows = [
        ("a", 1, "good", "U", "2024-01-01 00:00:01", "1", 0, 0, 0, True),
        ("a", 1, "bad-but-later", "U", "2024-01-01 00:00:09", "9", 0, 0, 1, False),
        ("b", 1, "bad", "I", "2024-01-01 00:00:01", "1", 0, 0, 2, False),
        ("c", 1, "only", "D", "2024-01-01 00:00:01", "1", 0, 0, 3, True),
    ]
    changes = spark.createDataFrame(rows, CHANGE_SCHEMA + ", ok boolean")
    # WHEN de-duplicated with a validity condition, carrying two columns
    latest = latest_change_per_key(changes, ["k1", "k2"], ["v", "_cdc_op"], valid=changes["ok"])
    # THEN invalid rows never win, keys without a valid row are gone, and only the named columns remain
    assert latest.columns == ["k1", "k2", "v", "_cdc_op"]
    assert sorted(tuple(r) for r in latest.collect()) == [("a", 1, "good", "U"), ("c", 1, "only", "D")]


def test_cleaning_casts_derives_renames_and_drops(spark: SparkSession) -> None:
    # GIVEN the demo's hosts cleaning
    frame = spark.createDataFrame(
        [("2015-04-12", "Berlin, Germany", "2024-03-01 09:00:00.000001", "U")],
        "since string, location string, last_updated_ts string, _cdc_op string",
    )
    rules = CleaningRules(
        cast={"since": "date", "last_updated_ts": "timestamp"},
        derive={"location_city": "split(location, ', *')[0]", "location_country": "split(location, ', *')[1]"},
        rename={"since": "host_since"},
        drop=("location",),
    )
    # WHEN cleaned (the error column exists, as after to_changes)
    from pyspark.sql import functions as F

    no_errors = F.array().cast("array<string>")
    cleaned = apply_cleaning(frame.withColumn("_cdc_errors", no_errors), rules, "public.hosts_demo")
    # THEN the silver shape and values are the seed's
    row = cleaned.first()
    assert row is not None
    assert cleaned.columns == [
        "host_since",
        "last_updated_ts",
        "_cdc_op",
        "_cdc_errors",
        "location_city",
        "location_country",
    ]
    assert str(row["host_since"]) == "2015-04-12"
    assert str(row["last_updated_ts"]) == "2024-03-01 09:00:00.000001"
    assert (row["location_city"], row["location_country"], row[OP], row["_cdc_errors"]) == (
        "Berlin",
        "Germany",
        "U",
        [None, None],  # one entry per checked cast: neither failed
    )


def test_cleaning_rule_on_a_missing_column_is_a_config_error(spark: SparkSession) -> None:
    frame = spark.createDataFrame([("x",)], "a string")
    with pytest.raises(ConfigError, match="the drop rule names column 'b', which the data does not have"):
        apply_cleaning(frame, CleaningRules(drop=("b",)), "s.t")


def test_bad_derive_expression_is_a_config_error(spark: SparkSession) -> None:
    frame = spark.createDataFrame([("x",)], "a string")
    with pytest.raises(ConfigError, match="derived column 'b' has an invalid expression 'no_such_fn"):
        apply_cleaning(frame, CleaningRules(derive={"b": "no_such_fn(a)"}), "s.t")


def test_merge_statement_applies_newer_changes_and_ignores_older_ones(spark: SparkSession) -> None:
    # GIVEN a silver table whose rows carry the order of the change that wrote them
    spark.sql("CREATE NAMESPACE IF NOT EXISTS silver.merge_test")
    spark.sql("DROP TABLE IF EXISTS silver.merge_test.t")
    spark.sql("CREATE TABLE silver.merge_test.t (k1 string, k2 int, v string, _cdc_order string) USING iceberg")
    spark.sql(
        "INSERT INTO silver.merge_test.t VALUES ('a', 1, 'keep', '5'), ('b', 1, 'update me', '5'), "
        "('c', 1, 'delete me', '5'), ('f', 1, 'newer than the change', '9'), ('g', 1, 'newer than the delete', '9')"
    )
    spark.createDataFrame(
        [
            ("b", 1, "updated", "U", "6"),
            ("c", 1, None, "D", "6"),
            ("d", 1, "inserted", "U", "6"),
            ("e", 1, None, "D", "6"),
            ("f", 1, "stale", "U", "6"),
            ("g", 1, None, "D", "6"),
        ],
        "k1 string, k2 int, v string, _cdc_op string, _cdc_order string",
    ).createOrReplaceTempView("merge_changes")
    statement = merge_statement("silver.merge_test.t", "merge_changes", WrittenColumns(["k1", "k2"], ["k1", "k2", "v"]))
    # WHEN the statement runs
    spark.sql(statement)
    # THEN newer changes apply (update, delete, insert of a missing key), a delete of a missing key
    # does nothing, and changes older than the stored row change nothing
    result = {(r["k1"], r["k2"]): (r["v"], r["_cdc_order"]) for r in spark.table("silver.merge_test.t").collect()}
    assert result == {
        ("a", 1): ("keep", "5"),
        ("b", 1): ("updated", "6"),
        ("d", 1): ("inserted", "6"),
        ("f", 1): ("newer than the change", "9"),
        ("g", 1): ("newer than the delete", "9"),
    }
    assert statement.splitlines()[2] == "ON t.`k1` = s.`k1` AND t.`k2` = s.`k2`"
