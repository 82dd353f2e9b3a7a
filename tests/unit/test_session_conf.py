"""The Spark configuration for both shells, as a pure dictionary (no Spark is started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdclake.runtime.session import (
    ICEBERG_EXTENSIONS,
    LOG_CONFIG,
    GlueCatalog,
    LocalCatalog,
    SessionSettings,
    pin_jvm_names,
    spark_conf,
)

COMMON = {
    "spark.sql.extensions": ICEBERG_EXTENSIONS,
    "spark.sql.catalog.silver": "org.apache.iceberg.spark.SparkCatalog",
    "spark.sql.defaultCatalog": "silver",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.iceberg.handle-timestamp-without-timezone": "true",
    "spark.sql.limit.initialNumPartitions": "100000",
    "spark.scheduler.mode": "FAIR",
    "spark.sql.constraintPropagation.enabled": "false",
    "spark.sql.codegen.hugeMethodLimit": "8000",
    "spark.sql.files.openCostInBytes": str(1 << 34),
    "spark.sql.parquet.datetimeRebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.datetimeRebaseModeInWrite": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInRead": "CORRECTED",
    "spark.sql.parquet.int96RebaseModeInWrite": "CORRECTED",
}


def test_local_catalog(tmp_path: Path) -> None:
    # GIVEN a local catalog
    catalog = LocalCatalog(warehouse=tmp_path / "wh", cache_dir=tmp_path / "cache", cores="2", shuffle_partitions=3)
    # WHEN / THEN Spark runs locally on a Hadoop catalog in the warehouse directory
    assert spark_conf(SessionSettings(catalog)) == COMMON | {
        "spark.sql.catalog.silver.type": "hadoop",
        "spark.sql.catalog.silver.warehouse": str((tmp_path / "wh").resolve()),
        "spark.master": "local[2]",
        "spark.driver.memory": "2g",
        "spark.sql.shuffle.partitions": "3",
        "spark.default.parallelism": "3",
        "spark.sql.adaptive.enabled": "true",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.driver.extraJavaOptions": f"-Dderby.system.home={tmp_path / 'cache'} "
        f"-Dlog4j2.configurationFile={LOG_CONFIG.as_uri()}",
    }
    assert "logger.spark.level = error" in LOG_CONFIG.read_text()


def test_local_catalog_resolves_relative_warehouse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN a warehouse given relative to the working directory
    monkeypatch.chdir(tmp_path)
    catalog = LocalCatalog(warehouse=Path("wh"), cache_dir=Path("cache"))
    # WHEN / THEN the catalog gets the absolute path
    assert spark_conf(SessionSettings(catalog))["spark.sql.catalog.silver.warehouse"] == str(tmp_path.resolve() / "wh")


def test_local_catalog_defaults(tmp_path: Path) -> None:
    # GIVEN a local catalog with default resources
    conf = spark_conf(SessionSettings(LocalCatalog(warehouse=tmp_path, cache_dir=tmp_path)))
    # WHEN / THEN all cores and four shuffle partitions are used
    assert (conf["spark.master"], conf["spark.sql.shuffle.partitions"]) == ("local[*]", "4")


def test_glue_catalog() -> None:
    # GIVEN the Glue Data Catalog on S3
    conf = spark_conf(SessionSettings(GlueCatalog(warehouse="s3://lake/warehouse")))
    # WHEN / THEN Iceberg uses GlueCatalog with S3FileIO, and no local master is set
    assert conf == COMMON | {
        "spark.sql.catalog.silver.catalog-impl": "org.apache.iceberg.aws.glue.GlueCatalog",
        "spark.sql.catalog.silver.io-impl": "org.apache.iceberg.aws.s3.S3FileIO",
        "spark.sql.catalog.silver.warehouse": "s3://lake/warehouse",
        "spark.sql.catalog.silver.glue.skip-name-validation": "true",
    }


def test_catalog_name_prefixes_catalog_keys() -> None:
    # GIVEN another catalog name
    conf = spark_conf(SessionSettings(GlueCatalog(warehouse="s3://lake/wh"), catalog_name="lake"))
    # WHEN / THEN the catalog keys and the default catalog use it
    assert (conf["spark.sql.defaultCatalog"], conf["spark.sql.catalog.lake.warehouse"]) == ("lake", "s3://lake/wh")


def test_extra_conf_wins() -> None:
    # GIVEN extra settings, one overriding a computed one
    settings = SessionSettings(
        GlueCatalog(warehouse="s3://lake/wh"),
        extra_conf={"spark.sql.session.timeZone": "Europe/Paris", "spark.custom": "1"},
    )
    # WHEN / THEN the extra settings are applied last
    conf = spark_conf(settings)
    assert (conf["spark.sql.session.timeZone"], conf["spark.custom"]) == ("Europe/Paris", "1")


class _View:
    """A stand-in for py4j's JVM view and packages: every name not set on it is a lookup (counted)."""

    def __init__(self, fqn: str, lookups: list[str]) -> None:
        self._fqn = fqn
        self._lookups = lookups

    def __getattr__(self, name: str) -> _View:
        fqn = f"{self._fqn}.{name}".lstrip(".")
        self._lookups.append(fqn)
        return _View(fqn, self._lookups)


def test_pinned_jvm_names_are_looked_up_once() -> None:
    # GIVEN a JVM view whose every name costs a lookup
    lookups: list[str] = []
    jvm = _View("", lookups)
    # WHEN names are pinned, then used again and again
    pin_jvm_names(jvm, ("functions", "org.apache.iceberg.SchemaParser", "org.apache.iceberg.DataFiles"))
    for _ in range(3):
        assert jvm.functions._fqn == "functions"
        assert jvm.org.apache.iceberg.SchemaParser._fqn == "org.apache.iceberg.SchemaParser"
        assert jvm.org.apache.iceberg.DataFiles._fqn == "org.apache.iceberg.DataFiles"
    # THEN each hop was looked up once, shared hops included
    assert lookups == ["functions", "org", "org.apache", "org.apache.iceberg", "org.apache.iceberg.SchemaParser",
                       "org.apache.iceberg.DataFiles"]  # fmt: skip
    # AND a name not pinned is still looked up
    assert jvm.org.apache.spark._fqn == "org.apache.spark"
    assert lookups[-1] == "org.apache.spark"
