"""DMS's type mapping per engine (AWS DMS User Guide tables) -> the Spark type init declares."""

from __future__ import annotations

import pytest

from cdclake.sources.catalog.dms_types import (
    DmsType,
    mysql_dms_type,
    postgres_dms_type,
    spark_type,
    sqlserver_dms_type,
)
from cdclake.sources.catalog.readers import postgres_type_text


def _numeric_typmod(precision: int, scale: int) -> int:
    """PostgreSQL's atttypmod for numeric(p,s)."""
    return ((precision << 16) | scale) + 4


@pytest.mark.parametrize(
    ("pg_type", "typmod", "expected"),
    [
        ("bool", -1, "boolean"),
        ("int2", -1, "smallint"),
        ("int4", -1, "int"),
        ("int8", -1, "bigint"),
        ("float4", -1, "float"),
        ("float8", -1, "double"),
        ("numeric", _numeric_typmod(12, 2), "decimal(12,2)"),
        ("numeric", _numeric_typmod(38, 0), "decimal(38,0)"),
        ("numeric", _numeric_typmod(39, 2), "string"),  # wider than DMS's NUMERIC: STRING
        ("numeric", -1, "string"),  # exact as text (DMS: MapUnboundedNumericAsString), not NUMERIC(28,6)
        ("oid", -1, "bigint"),
        ("money", -1, "decimal(38,4)"),
        ("date", -1, "date"),
        ("time", -1, "string"),
        ("timestamp", -1, "timestamp_ntz"),
        ("timestamptz", -1, "timestamp"),  # an instant, written in UTC
        ("bytea", -1, "string"),  # hexadecimal text in CSV
        ("uuid", -1, "string"),
        ("jsonb", -1, "string"),
        ("array", -1, "string"),
        ("interval", -1, "string"),
    ],
)
def test_postgres_types(pg_type: str, typmod: int, expected: str) -> None:
    assert spark_type(postgres_dms_type(pg_type, typmod)) == expected


@pytest.mark.parametrize(
    ("data_type", "column_type", "precision", "scale", "expected"),
    [
        ("tinyint", "tinyint(4)", 3, 0, "tinyint"),
        ("tinyint", "tinyint(1)", 3, 0, "tinyint"),  # BOOL is TINYINT(1): DMS says INT1
        ("tinyint", "tinyint(3) unsigned", 3, 0, "smallint"),
        ("smallint", "smallint(5) unsigned", 5, 0, "int"),
        ("mediumint", "mediumint(9)", 7, 0, "int"),
        ("mediumint", "mediumint(8) unsigned", 7, 0, "bigint"),
        ("int", "int(11)", 10, 0, "int"),
        ("int", "int(10) unsigned", 10, 0, "bigint"),
        ("bigint", "bigint(20)", 19, 0, "bigint"),
        ("bigint", "bigint(20) unsigned", 20, 0, "decimal(20,0)"),
        ("decimal", "decimal(12,2)", 12, 2, "decimal(12,2)"),
        ("decimal", "decimal(65,4)", 65, 4, "string"),
        ("float", "float", 12, None, "double"),  # the guide: FLOAT -> REAL(DOUBLE)
        ("double", "double", 22, None, "double"),
        ("bit", "bit(1)", 1, None, "boolean"),
        ("bit", "bit(8)", 8, None, "string"),
        ("date", "date", None, None, "date"),
        ("datetime", "datetime(6)", None, None, "timestamp_ntz"),
        ("timestamp", "timestamp", None, None, "timestamp"),
        ("time", "time", None, None, "string"),
        ("year", "year(4)", None, None, "smallint"),
        ("varbinary", "varbinary(16)", None, None, "string"),
        ("longblob", "longblob", None, None, "string"),
        ("enum", "enum('a','b')", None, None, "string"),
        ("set", "set('x','y')", None, None, "string"),
        ("json", "json", None, None, "string"),
        ("longtext", "longtext", None, None, "string"),
        ("char", "char(3)", None, None, "string"),
    ],
)
def test_mysql_types(data_type: str, column_type: str, precision: int | None, scale: int | None, expected: str) -> None:
    assert spark_type(mysql_dms_type(data_type, column_type, precision, scale)) == expected


@pytest.mark.parametrize(
    ("type_name", "precision", "scale", "expected"),
    [
        ("bit", 1, 0, "boolean"),
        ("tinyint", 3, 0, "smallint"),  # the guide: TINYINT is UINT1 (0..255)
        ("smallint", 5, 0, "smallint"),
        ("int", 10, 0, "int"),
        ("bigint", 19, 0, "bigint"),
        ("decimal", 18, 4, "decimal(18,4)"),
        ("numeric", 38, 10, "decimal(38,10)"),
        ("money", 19, 4, "decimal(19,4)"),
        ("smallmoney", 10, 4, "decimal(10,4)"),
        ("real", 24, 0, "float"),
        ("float", 53, 0, "double"),
        ("datetime", 23, 3, "timestamp_ntz"),
        ("datetime2", 27, 7, "timestamp_ntz"),
        ("smalldatetime", 16, 0, "timestamp_ntz"),
        ("datetimeoffset", 34, 7, "string"),  # WSTRING: the offset stays in the text
        ("date", 10, 0, "date"),
        ("time", 16, 7, "string"),
        ("uniqueidentifier", 0, 0, "string"),
        ("nvarchar", 0, 0, "string"),
        ("varbinary", 0, 0, "string"),
        ("timestamp", 0, 0, "string"),  # rowversion: BYTES
        ("xml", 0, 0, "string"),
    ],
)
def test_sqlserver_types(type_name: str, precision: int, scale: int, expected: str) -> None:
    assert spark_type(sqlserver_dms_type(type_name, precision, scale)) == expected


def test_binary_is_binary_in_parquet_and_text_in_csv() -> None:
    # GIVEN DMS's BYTES and BLOB types
    # THEN Parquet files hold them as BINARY and CSV files as hexadecimal text
    for name in ("BYTES", "BLOB"):
        assert spark_type(DmsType(name), "parquet") == "binary"
        assert spark_type(DmsType(name), "csv") == "string"


def test_postgres_type_text_shows_the_declared_type() -> None:
    assert postgres_type_text("numeric", _numeric_typmod(12, 2)) == "numeric(12,2)"
    assert postgres_type_text("varchar", 44) == "varchar(40)"
    assert postgres_type_text("timestamptz", 3) == "timestamptz(3)"
    assert postgres_type_text("text", -1) == "text"
