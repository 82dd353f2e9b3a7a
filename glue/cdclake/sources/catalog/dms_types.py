"""Source column type -> the Spark SQL type its DMS output value is read as. Pure functions.

Two steps, as DMS itself does it: the engine's type becomes one of DMS's own data types, and that
DMS type decides what lands in the S3 file. The tables below follow the AWS DMS User Guide:

* "Source data types for PostgreSQL" (CHAP_Source.PostgreSQL.html#CHAP_Source-PostgreSQL-DataTypes),
  "Source data types for MySQL" (CHAP_Source.MySQL.html#CHAP_Source.MySQL.DataTypes) and
  "Source data types for SQL Server" (CHAP_Source.SQLServer.html#CHAP_Source.SQLServer.DataTypes):
  engine type -> DMS type.
* "Data types for AWS Database Migration Service" (CHAP_Reference.DataTypes.html) and "Target data
  types for S3 Parquet" (CHAP_Target.S3.html#CHAP_Target.S3.DataTypes): DMS type -> the file's type.

DMS type -> Spark type:

==========================  ===================  ====================================================
DMS type                    Spark type           why
==========================  ===================  ====================================================
BOOLEAN                     boolean              CSV ``true``/``false`` or ``1``/``0``: Spark casts both
INT1, INT2, INT4, INT8      tinyint .. bigint    same width
UINT1, UINT2, UINT4         smallint, int,       Spark has no unsigned types: the next wider signed one
                            bigint
UINT8                       decimal(20,0)        2^64-1 has 20 digits (Parquet UINT64 reads as this too)
REAL4, REAL8                float, double
NUMERIC(p,s), p <= 38       decimal(p,s)
NUMERIC(p,s), p > 38        string               wider than Spark's decimal: kept exact as text
DATE                        date
TIME                        string               Spark has no time-of-day type
DATETIME                    timestamp_ntz        a wall-clock value (no zone) ...
DATETIME of a zoned type    timestamp            ... unless the source type is an instant that DMS writes
                                                 in UTC (PostgreSQL timestamptz, MySQL TIMESTAMP)
STRING, WSTRING, CLOB,      string
NCLOB
BYTES, BLOB                 string (CSV),        CSV holds the bytes as hexadecimal text; Parquet as BINARY
                            binary (Parquet)
==========================  ===================  ====================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cdclake.config import BronzeFormat
from cdclake.types import MAX_DECIMAL_PRECISION, SPARK_BY_DMS


@dataclass(frozen=True)
class DmsType:
    """One of DMS's data types (CHAP_Reference.DataTypes), with what decides its Spark type."""

    name: str  # BOOLEAN, INT4, UINT8, NUMERIC, DATETIME, WSTRING, BLOB, ...
    precision: int = 0  # NUMERIC only
    scale: int = 0  # NUMERIC only
    utc_instant: bool = False  # DATETIME of a type that stores an instant (written in UTC)


# The DMS types whose Spark type has no parameters are the type table's ``dms`` column (``types.py``).
_UINT8 = "decimal(20,0)"
_BINARY = {"BYTES", "BLOB"}


def spark_type(dms: DmsType, bronze_format: BronzeFormat = "csv") -> str:
    """The Spark SQL type for a DMS type (the table above)."""
    if dms.name in SPARK_BY_DMS:
        return SPARK_BY_DMS[dms.name]
    if dms.name == "UINT8":
        return _UINT8
    if dms.name == "NUMERIC":
        if 1 <= dms.precision <= MAX_DECIMAL_PRECISION and 0 <= dms.scale <= dms.precision:
            return f"decimal({dms.precision},{dms.scale})"
        return "string"
    if dms.name == "DATETIME":
        return "timestamp" if dms.utc_instant else "timestamp_ntz"
    if dms.name in _BINARY:
        return "binary" if bronze_format == "parquet" else "string"
    return "string"  # a DMS type the guide added after this table


# --------------------------------------------------------------------------- PostgreSQL

# "Source data types for PostgreSQL": pg_type.typname of the base type -> DMS type. Types not listed
# (uuid, json, jsonb, arrays, enums, intervals, inet, xml, geometric types, ...) are STRING/CLOB/NCLOB.
_POSTGRES = {
    "bool": "BOOLEAN",  # the guide: CHAR(5) "false or true", which Spark's boolean cast reads
    "int2": "INT2",
    "int4": "INT4",
    "int8": "INT8",
    "float4": "REAL4",
    "float8": "REAL8",
    "oid": "UINT4",  # an unsigned 4-byte integer
    "date": "DATE",
    "time": "TIME",
    "timetz": "TIME",
    "timestamp": "DATETIME",
    "bytea": "BLOB",
}
# MONEY is NUMERIC(38,4) in the guide's table: the amount, without currency symbol or separators.
POSTGRES_MONEY = (38, 4)


def postgres_dms_type(pg_type: str, type_modifier: int) -> DmsType:
    """A PostgreSQL base type (``pg_type.typname``; ``array`` for arrays) and its ``atttypmod``."""
    if pg_type == "timestamptz":
        return DmsType("DATETIME", utc_instant=True)
    if pg_type == "money":
        return DmsType("NUMERIC", *POSTGRES_MONEY)
    if pg_type == "numeric":
        if type_modifier < 4:
            # DMS's default is NUMERIC(28,6), which rounds to 6 decimals and overflows past 22
            # integer digits (its MapUnboundedNumericAsString is documented for PostgreSQL targets
            # only); a string holds both what DMS wrote and cdclake capture's exact text (20+ digits,
            # NaN and Infinity included).
            return DmsType("STRING")
        precision = ((type_modifier - 4) >> 16) & 0xFFFF
        scale = (type_modifier - 4) & 0xFFFF
        if scale > precision:  # PostgreSQL 15's negative scales: no DMS NUMERIC holds them
            return DmsType("STRING")
        return DmsType("NUMERIC", precision, scale)
    return DmsType(_POSTGRES.get(pg_type, "STRING"))


# --------------------------------------------------------------------------- MySQL / MariaDB

_MYSQL = {
    "tinyint": "INT1",
    "smallint": "INT2",
    "mediumint": "INT4",
    "int": "INT4",
    "integer": "INT4",
    "bigint": "INT8",
    "year": "INT2",
    "float": "REAL8",  # the guide: FLOAT -> REAL(DOUBLE)
    "double": "REAL8",
    "real": "REAL8",
    "date": "DATE",
    "time": "STRING",  # the guide: TIME -> STRING
    "datetime": "DATETIME",
    "binary": "BYTES",
    "varbinary": "BYTES",
    "tinyblob": "BYTES",
    "blob": "BYTES",
    "mediumblob": "BLOB",
    "longblob": "BLOB",
    "geometry": "BLOB",
    "point": "BLOB",
    "linestring": "BLOB",
    "polygon": "BLOB",
    "multipoint": "BLOB",
    "multilinestring": "BLOB",
    "multipolygon": "BLOB",
    "geometrycollection": "BLOB",
}
# MySQL's types DMS writes as bytes (upper-case hex in CSV)
MYSQL_BYTES = tuple(name for name, dms in _MYSQL.items() if dms in ("BYTES", "BLOB"))
_UNSIGNED = {"tinyint": "UINT1", "smallint": "UINT2", "mediumint": "UINT4", "int": "UINT4", "integer": "UINT4"}
_BIT_WIDTH = re.compile(r"^bit\((\d+)\)")


def mysql_dms_type(data_type: str, column_type: str, precision: int | None, scale: int | None) -> DmsType:
    """A column of ``information_schema.COLUMNS``: ``DATA_TYPE``, ``COLUMN_TYPE`` (which says
    ``unsigned`` and ``bit(n)``), ``NUMERIC_PRECISION`` and ``NUMERIC_SCALE``."""
    data_type = data_type.lower()
    column_type = column_type.lower()
    unsigned = " unsigned" in column_type
    if data_type == "bigint" and unsigned:
        return DmsType("UINT8")
    if unsigned and data_type in _UNSIGNED:
        return DmsType(_UNSIGNED[data_type])
    if data_type in ("decimal", "numeric"):
        return DmsType("NUMERIC", int(precision or 10), int(scale or 0))
    if data_type == "bit":
        width = _BIT_WIDTH.match(column_type)
        return DmsType("BOOLEAN") if width is None or width.group(1) == "1" else DmsType("BYTES")
    if data_type == "timestamp":  # the guide (and MySQL itself): TIMESTAMP is an instant, replicated in UTC
        return DmsType("DATETIME", utc_instant=True)
    # char, varchar, text types, enum, set, json (longtext in MariaDB) -> WSTRING / NCLOB / CLOB
    return DmsType(_MYSQL.get(data_type, "WSTRING"))


# --------------------------------------------------------------------------- SQL Server

_SQLSERVER = {
    "bigint": "INT8",
    "bit": "BOOLEAN",
    "int": "INT4",
    "smallint": "INT2",
    "tinyint": "UINT1",
    "real": "REAL4",
    "float": "REAL8",
    "datetime": "DATETIME",
    "datetime2": "DATETIME",
    "smalldatetime": "DATETIME",
    "date": "DATE",
    "time": "TIME",
    "datetimeoffset": "WSTRING",  # kept as text with its offset
    "binary": "BYTES",
    "varbinary": "BYTES",
    "image": "BLOB",
    "timestamp": "BYTES",  # rowversion
    "rowversion": "BYTES",
}
# SQL Server's types DMS writes as bytes (upper-case hex in CSV)
SQLSERVER_BYTES = tuple(name for name, dms in _SQLSERVER.items() if dms in ("BYTES", "BLOB"))
SQLSERVER_MONEY = {"money": (19, 4), "smallmoney": (10, 4)}


def sqlserver_dms_type(type_name: str, precision: int, scale: int) -> DmsType:
    """A column's system type (``TYPE_NAME(sys.columns.system_type_id)``: user-defined types are
    handled as their base type, as the guide says) with ``precision`` and ``scale``."""
    type_name = type_name.lower()
    if type_name in ("decimal", "numeric"):
        return DmsType("NUMERIC", precision, scale)
    if type_name in SQLSERVER_MONEY:
        return DmsType("NUMERIC", *SQLSERVER_MONEY[type_name])
    # char, varchar, nchar, nvarchar, text, ntext, xml, uniqueidentifier, hierarchyid, geometry,
    # geography -> STRING / WSTRING / CLOB / NCLOB
    return DmsType(_SQLSERVER.get(type_name, "WSTRING"))
