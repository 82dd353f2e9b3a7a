"""SQL Server's catalog, from recorded result sets of the two catalog queries.

No SQL Server runs on these machines: the rows below are what SQLSERVER_COLUMNS_SQL and
SQLSERVER_KEYS_SQL return per Microsoft's documentation of sys.columns (max_length in bytes, -1
for (max); precision/scale 0 for non-numeric types) and sys.indexes (has_filter, is_primary_key).
"""

from __future__ import annotations

from cdclake.sources.catalog.readers import sqlserver_tables

# (schema, table, column, TYPE_NAME(system_type_id), max_length, precision, scale, is_nullable)
COLUMNS = [
    ("dbo", "order_lines", "order_id", "int", 4, 10, 0, False),
    ("dbo", "order_lines", "line_no", "smallint", 2, 5, 0, False),
    ("dbo", "order_lines", "sku", "nvarchar", 80, 0, 0, False),  # nvarchar(40): 2 bytes a character
    ("dbo", "order_lines", "price", "money", 8, 19, 4, True),
    ("dbo", "order_lines", "qty", "decimal", 9, 12, 3, True),
    ("dbo", "order_lines", "shipped", "bit", 1, 1, 0, True),
    ("dbo", "order_lines", "placed", "datetime2", 8, 27, 7, True),
    ("dbo", "order_lines", "placed_at", "datetimeoffset", 10, 34, 7, True),
    ("dbo", "order_lines", "note", "nvarchar", -1, 0, 0, True),  # nvarchar(max)
    ("dbo", "order_lines", "phone", "nvarchar", 40, 0, 0, True),  # alias type Phone FROM nvarchar(20)
    ("dbo", "order_lines", "version", "timestamp", 8, 0, 0, False),  # rowversion
    ("dbo", "order_lines", "guid", "uniqueidentifier", 16, 0, 0, True),
    ("sales", "customers", "email", "varchar", 200, 0, 0, False),
    ("sales", "customers", "nick", "varchar", 50, 0, 0, True),
    ("sales", "customers", "small", "tinyint", 1, 3, 0, True),
    ("sales", "events", "at", "datetime", 8, 23, 3, True),
    ("sales", "events", "payload", "varbinary", -1, 0, 0, True),
]
# (schema, table, index, is_primary_key, column, has_filter) in index_id, key_ordinal order
KEYS = [
    ("dbo", "order_lines", "pk_order_lines", True, "order_id", False),
    ("dbo", "order_lines", "pk_order_lines", True, "line_no", False),
    ("dbo", "order_lines", "ux_guid", False, "guid", False),
    ("sales", "customers", "ux_nick", False, "nick", False),  # nullable: DMS cannot identify rows by it
    ("sales", "customers", "ux_email_active", False, "email", True),  # filtered: not every row is in it
    ("sales", "customers", "ux_email", False, "email", False),
]


def test_sqlserver_catalog_from_recorded_rows() -> None:
    # WHEN the recorded rows are turned into tables
    tables = {t.qualified: t for t in sqlserver_tables(COLUMNS, KEYS)}

    # THEN columns keep column_id order, typed as DMS maps SQL Server types
    lines = tables["dbo.order_lines"]
    assert [c.name for c in lines.columns] == [r[2] for r in COLUMNS if r[1] == "order_lines"]
    assert lines.types() == {
        "order_id": "int",
        "line_no": "smallint",
        "sku": "string",
        "price": "decimal(19,4)",
        "qty": "decimal(12,3)",
        "shipped": "boolean",
        "placed": "timestamp_ntz",
        "placed_at": "string",
        "note": "string",
        "phone": "string",
        "version": "string",
        "guid": "string",
    }
    assert lines.column("sku").source_type == "nvarchar(40)"
    assert lines.column("note").source_type == "nvarchar(max)"
    # AND the composite primary key wins over a unique index, in key order
    assert (lines.key, lines.key_source) == (("order_id", "line_no"), "primary key")
    # AND without a primary key, the unfiltered unique index over NOT NULL columns stands in
    customers = tables["sales.customers"]
    assert (customers.key, customers.key_source) == (("email",), "unique index")
    assert customers.types()["small"] == "smallint"  # TINYINT is unsigned (0..255)
    # AND a table with neither has no key
    assert (tables["sales.events"].key, tables["sales.events"].key_source) == ((), "none")
