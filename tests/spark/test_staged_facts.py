"""What the one-scan full load reads back from its staged commit instead of observing its scan."""

from __future__ import annotations

import uuid

import pytest
from pyspark.sql import SparkSession

from cdclake.config import DEFAULT_CATALOG
from cdclake.engine.full_load import StagedLoad, staged_facts
from cdclake.lake.tables import added_data, current_snapshot_id

KEYS = [-(2**63), -5, 0, 7, 2**40, 2**63 - 1]


@pytest.mark.parametrize("metrics", ["truncate(16)", "counts", "none"])
def test_rows_and_key_range_are_exact_with_or_without_column_bounds(spark: SparkSession, metrics: str) -> None:
    # GIVEN a table replaced (as a staged load replaces it) by rows in two data files whose key
    # bounds Iceberg keeps or not (metrics mode: without them, the range is an aggregate)
    database = f"db_{uuid.uuid4().hex[:10]}"
    identifier = f"{DEFAULT_CATALOG}.{database}.items"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {DEFAULT_CATALOG}.{database}")
    spark.sql(
        f"CREATE TABLE {identifier} (id bigint, status string) USING iceberg "
        f"TBLPROPERTIES ('write.metadata.metrics.default' = '{metrics}')"
    )
    spark.sql(f"INSERT INTO {identifier} VALUES (-(9223372036854775807) - 1, 'older'), (9223372036854775807, 'older')")
    rows = spark.createDataFrame([(k, "new") for k in KEYS[1:-1]], "id long, status string").repartition(2)
    rows.writeTo(identifier).using("iceberg").tableProperty("write.metadata.metrics.default", metrics).replace()
    snapshot = current_snapshot_id(spark, identifier)
    assert snapshot is not None
    bounds = added_data(spark, identifier, snapshot, "id")
    assert (bounds.smallest, bounds.largest) == ((-5, 2**40) if metrics == "truncate(16)" else (None, None))
    # WHEN its facts are read
    facts = staged_facts(spark, identifier, snapshot, "id")
    # THEN the rows it added and their key range, exactly; no key, no range
    assert facts == StagedLoad(rows=4, key_range=(-5, 2**40))
    assert staged_facts(spark, identifier, snapshot, None) == StagedLoad(rows=4, key_range=None)
