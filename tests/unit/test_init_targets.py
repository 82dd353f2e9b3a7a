"""``init``'s silver names for tables that share a name across schemas, and the globs it stores
(pure functions, no database)."""

from __future__ import annotations

from cdclake.config import parse_config
from cdclake.sources.catalog.model import CatalogColumn, CatalogTable
from cdclake.sources.catalog.plan import BronzeDefaults, add_tables, configuration_text, silver_targets


def table(schema: str, name: str) -> CatalogTable:
    return CatalogTable(schema, name, (CatalogColumn("id", "int4", "int"),), ("id",), "primary key")


def test_only_tables_sharing_a_name_get_schema_prefixed_targets() -> None:
    tables = [table("erp", "t01"), table("hr", "T01"), table("erp", "orders"), table("x", "hr_T01")]
    # GIVEN names equal but for case WHEN targets are chosen THEN those get <schema>_<table>, avoiding names in use
    assert silver_targets(tables) == {"erp.t01": "erp_t01", "hr.T01": "hr_T01_2"}
    # AND a new table named like a configured silver table is renamed, not the configured one
    assert silver_targets([table("hr", "orders")], taken=["orders", "t01"]) == {"hr.orders": "hr_orders"}
    assert silver_targets([table("hr", "orders")], taken=["customers"]) == {}


def test_written_file_loads_with_distinct_targets_and_the_globs() -> None:
    tables = [table("erp", "t01"), table("hr", "t01"), table("erp", "Order Lines")]
    text = configuration_text("postgres", tables, BronzeDefaults(), "shop", ("erp.*", "hr.*"), ("*.tmp_*",))
    config = parse_config(text)
    assert [t.target for t in config.tables] == ["erp_t01", "hr_t01", "Order Lines"]
    assert (config.source_include, config.source_exclude) == (("erp.*", "hr.*"), ("*.tmp_*",))
    # WHEN a same-named table is appended with the target chosen for it THEN the file still loads
    added = add_tables(
        text, [table("ops", "t01")], targets=silver_targets([table("ops", "t01")], ["erp_t01", "t01", "hr_t01", "t01"])
    )
    assert parse_config(added).table("ops.t01").target == "ops_t01"


def test_the_configuration_capture_writes_reads_back_every_name() -> None:
    # GIVEN tables with names DMS writes (spaces, hyphens, mixed case, "#")
    from cdclake.sources.postgres.catalog import SourceColumn, SourceTable, configuration_yaml, declare_columns

    columns = (SourceColumn("Order Id", "int4", -1, "int"), SourceColumn("line-no", "int4", -1, "int"))
    tables = [SourceTable("erp", "Order Lines", columns, ("Order Id", "line-no"), "d")]
    # WHEN capture writes its configuration, and later declares a new column THEN both read back as written
    text = configuration_yaml(tables, "bronze", "shop", "dms_commit_ts", "AR_H_CHANGE_SEQ")
    lines = parse_config(text).table("erp.Order Lines")
    assert (lines.primary_key, list(lines.columns)) == (("Order Id", "line-no"), ["Order Id", "line-no"])
    declared = declare_columns(text, "erp.Order Lines", {"Note #1": "string"})
    assert declared is not None and parse_config(declared).table("erp.Order Lines").columns["Note #1"] == "string"
