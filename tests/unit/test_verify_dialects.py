"""The source dialects of ``cdclake verify`` (``sources/{postgres,mysql,sqlserver}/checksums.py``): every
engine writes every kind of canonical text ``verify.checksum`` defines, its queries take their
parameters as its driver formats them, and SQL Server's T-SQL (no server here) is pinned as golden
strings written from Microsoft's documentation. PostgreSQL and MariaDB run for real in
tests/spark/postgres/test_pg_verify.py and tests/spark/mariadb/test_mariadb_verify.py."""

from __future__ import annotations

import bisect
import math
import re
import sqlite3
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from cdclake.sources.catalog.connect import SourceAddress, parse_source
from cdclake.sources.catalog.model import CatalogColumn, CatalogTable
from cdclake.sources.postgres.catalog import SourceColumn, SourceTable
from cdclake.verify import dialects
from cdclake.verify.checksum import KeyRange, bucket_of, bucket_search, kind_of
from cdclake.verify.mysql import checksums as mysql
from cdclake.verify.mysql.dialect import MysqlDialect
from cdclake.verify.postgres import checksums as postgres
from cdclake.verify.sqlserver import checksums as sqlserver
from cdclake.verify.sqlserver.dialect import SqlServerDialect, select_rows

# Every configured type init writes (sources.catalog.dms_types), as the kinds the dialects must write.
CONFIGURED = ["string", "tinyint", "smallint", "int", "bigint", "boolean", "decimal(20,0)", "decimal(12,2)", "date"]
CONFIGURED += ["timestamp", "timestamp_ntz", "binary"]
KINDS = sorted({kind for kind in map(kind_of, CONFIGURED) if kind is not None})

ORDERS = CatalogTable(
    "dbo",
    "orders",
    (
        CatalogColumn("id", "int", "int"),
        CatalogColumn("name", "nvarchar(40)", "string"),
        CatalogColumn("price", "money", "decimal(19,4)"),
        CatalogColumn("placed", "datetimeoffset(3)", "string"),
        CatalogColumn("raw", "varbinary(16)", "string"),
        CatalogColumn("due", "date", "date"),
        CatalogColumn("paid", "bit", "boolean"),
        CatalogColumn("at_time", "time(7)", "string"),
        CatalogColumn("seen", "datetime2(3)", "timestamp_ntz"),
        CatalogColumn("logged", "datetime2(7)", "timestamp_ntz"),
        CatalogColumn("legacy", "datetime", "timestamp_ntz"),
    ),
    ("id",),
)
ITEMS = CatalogTable(
    "shop",
    "items",
    (
        CatalogColumn("code", "varchar(12)", "string"),
        CatalogColumn("bits", "bit(12)", "string"),
        CatalogColumn("at", "timestamp(6)", "timestamp"),
    ),
    ("code",),
)
PG_ITEMS = SourceTable(
    "public", "items", (SourceColumn("code", "text", -1, "string"), SourceColumn("at", "timestamptz", -1, "timestamp")),
    ("code",), "d",
)  # fmt: skip


def _texts() -> dict[str, Callable[[str], str]]:
    """Each engine's SQL of one kind, for a column of a type that kind is written for."""
    return {
        "postgres": lambda kind: postgres.SQL.text(PG_ITEMS.column("code").source_type, "code", kind),
        "mysql": lambda kind: mysql.SQL.text("varchar(12)", "code", kind),
        "sqlserver": lambda kind: sqlserver.SQL.text("nvarchar(40)", "name", kind),
    }


@pytest.mark.parametrize("engine", ["postgres", "mysql", "sqlserver"])
def test_every_engine_writes_every_kind_of_canonical_text_and_refuses_floating_point(engine: str) -> None:
    # GIVEN the kinds of every type init configures (float and double have none)
    assert KINDS == ["binary", "boolean", "date", "decimal:0", "decimal:2", "integer", "text", "timestamp"]
    assert kind_of("double") is None and kind_of("float") is None
    text = _texts()[engine]
    # WHEN each engine writes them THEN each kind has its own SQL, and a kind it does not know is refused
    written = {kind: text(kind) for kind in KINDS}
    assert len(set(written.values())) == len(KINDS), written
    with pytest.raises(ValueError, match="no canonical text for kind double"):
        text("double")


def test_sqlserver_writes_each_kind_as_documented() -> None:
    def text(name: str, kind: str) -> str:
        return sqlserver.SQL.text(ORDERS.column(name).source_type, name, kind)

    assert text("id", "integer") == "CAST([id] AS nvarchar(20))"
    assert text("name", "text") == "CAST([name] AS nvarchar(max))"
    assert text("raw", "text") == "CAST(CONVERT(varchar(max), [raw], 2) AS nvarchar(max))"  # upper-case hex
    assert text("raw", "binary") == "CAST(LOWER(CONVERT(varchar(max), [raw], 2)) AS nvarchar(max))"
    assert text("at_time", "text") == "CAST(CAST([at_time] AS time(6)) AS nvarchar(15))"
    assert text("price", "decimal:4") == "CAST(CAST([price] AS decimal(38,4)) AS nvarchar(50))"
    assert text("due", "date") == "CONVERT(nvarchar(10), [due], 23)"
    assert text("paid", "boolean") == "CASE WHEN [paid] = 1 THEN N'true' ELSE N'false' END"
    epoch = "CAST('1970-01-01' AS datetime2(6))"
    assert text("seen", "timestamp") == (
        f"CAST(DATEDIFF_BIG(microsecond, {epoch}, CAST([seen] AS datetime2(6))) AS nvarchar(20))"
    )
    assert text("placed", "timestamp") == (
        f"CAST(DATEDIFF_BIG(microsecond, {epoch}, CAST(SWITCHOFFSET([placed], '+00:00') AS datetime2(6))) "
        "AS nvarchar(20))"
    )


def test_sqlserver_row_number_hashes_the_utf8_text_of_length_framed_strings_and_ended_values() -> None:
    number = sqlserver.SQL.row_number(ORDERS, [("id", "integer"), ("name", "text")])
    framed = (
        "CASE WHEN [{c}] IS NULL THEN N'-' ELSE CONCAT(CAST(LEN({v} COLLATE Latin1_General_100_CI_AS_SC_UTF8 + N'x') "
        "- 1 AS nvarchar(20)), N':', {v}) END"
    )
    row = " + ".join([
        "CAST(N'' AS nvarchar(max))",
        "CASE WHEN [id] IS NULL THEN N'-,' ELSE CONCAT(CAST([id] AS nvarchar(20)), N',') END",
        framed.format(c="name", v="CAST([name] AS nvarchar(max))"),
    ])  # fmt: skip
    digest = f"HASHBYTES('MD5', CONVERT(varchar(max), ({row}) COLLATE Latin1_General_100_CI_AS_SC_UTF8))"
    assert number == (
        f"CAST(CAST(CONVERT(varbinary(8), '0' + LEFT(CONVERT(varchar(32), {digest}, 2), 15), 2) AS bigint) "
        "AS decimal(38,0))"
    )


def test_sqlserver_sums_cut_string_keys_by_code_unit_and_group_in_a_derived_table() -> None:
    whole = KeyRange("a", "q")
    query, parameters = sqlserver.SQL.sums_query(ORDERS, ("name", "text"), [("id", "integer")], whole, ["f", "k"])
    key = "CAST([name] AS nvarchar(max)) COLLATE Latin1_General_100_BIN2"
    assert query.startswith(
        f"SELECT bucket, COUNT_BIG(*), COALESCE(SUM(number), 0) FROM (SELECT CASE WHEN {key} < %s THEN 0 "
        f"ELSE CASE WHEN {key} < %s THEN 1 ELSE 2 END END AS bucket, CAST(CAST(CONVERT(varbinary(8)"
    )
    assert query.endswith(f"FROM [dbo].[orders] WHERE ({key} >= %s AND {key} < %s)) AS numbered GROUP BY bucket")
    assert parameters == ["f", "k", "a", "q"]


def test_sqlserver_reads_the_columns_it_cannot_hash_exactly_row_by_row() -> None:
    dialect = SqlServerDialect(conn=None)
    columns = [(c.name, kind_of(c.spark_type) or "") for c in ORDERS.columns]
    # datetime2(7) keeps 100 ns and datetime counts 1/300 s: a cast to six digits is not silver's text
    assert dialect.inexact(ORDERS, columns) == ["logged", "legacy"]
    types = {"id": "int", "placed": "timestamp", "raw": "string"}
    within = (("id", "integer"), [KeyRange(10, 20), KeyRange(None, 3)])
    query, parameters = select_rows(ORDERS, ["id", "placed", "raw"], types, within)
    assert query == (
        "SELECT [id], CAST(SWITCHOFFSET([placed], '+00:00') AS datetime2(6)), "
        "CAST(CONVERT(varchar(max), [raw], 2) AS nvarchar(max)) FROM [dbo].[orders] "
        "WHERE ([id] >= %s AND [id] < %s) OR ([id] < %s)"
    )
    assert parameters == [10, 20, 3]


@pytest.mark.parametrize("engine", ["mysql", "sqlserver"])
def test_queries_take_their_parameters_as_the_driver_formats_them(engine: str) -> None:
    # GIVEN a table with a name and a column holding % (PyMySQL and python-tds format the query with %)
    more = (CatalogColumn("r%", "datetime(6)", "timestamp_ntz"), CatalogColumn("d%", "date", "date"))
    table = CatalogTable("s%", "t%", (*ITEMS.columns, *more), ("code",))
    columns = [(c.name, kind_of(c.spark_type) or "") for c in table.columns]
    module: Any = mysql.SQL if engine == "mysql" else sqlserver.SQL
    # WHEN a range cut in three is summed
    query, parameters = module.sums_query(table, ("code", "text"), columns, KeyRange("b", "y"), ["f", "k"])
    # THEN the driver's formatting finds one placeholder per value (the two cuts first) and nothing else
    formatted = query % tuple(f"@P{i}" for i in range(1, 5))
    assert parameters == ["f", "k", "b", "y"] and re.findall(r"@P\d", formatted) == ["@P1", "@P2", "@P3", "@P4"]
    assert "%" in formatted  # the names and DATE_FORMAT's %Y are there, once formatted
    if engine == "mysql":
        assert "DATE_FORMAT(`d%`, '%Y-%m-%d')" in formatted
        assert "CAST(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', `r%`) AS CHAR)" in formatted
        assert "HEX(CAST(`bits` AS BINARY))" in formatted  # a BIT's bytes, leading zero digits kept
        assert re.search(r"CAST\(CONVERT\(`code` USING utf8mb4\) AS BINARY\) < @P1", formatted)  # code points


def test_mysql_writes_each_kind_to_match_what_dms_wrote() -> None:
    assert mysql.SQL.text("time(6)", "t", "text") == "TIME_FORMAT(`t`, '%%H:%%i:%%s.%%f')"
    assert mysql.SQL.text("varbinary(16)", "raw", "text") == "HEX(`raw`)"  # DMS's CSV: upper-case hex
    assert mysql.SQL.text("blob", "raw", "binary") == "LOWER(HEX(`raw`))"  # Parquet: the bytes
    assert mysql.SQL.text("bit(1)", "flag", "boolean") == "CASE WHEN `flag` <> 0 THEN 'true' ELSE 'false' END"
    assert mysql.SQL.text("decimal(40,10)", "wide", "text") == "CAST(`wide` AS CHAR)"
    assert mysql.SQL.text("bigint(20) unsigned", "n", "decimal:0") == "CAST(CAST(`n` AS DECIMAL(65,0)) AS CHAR)"
    number = mysql.SQL.row_number(ITEMS, [("code", "text")])
    assert number == (
        "CAST(CONV(SUBSTRING(MD5(CONVERT(CONCAT(CASE WHEN `code` IS NULL THEN '-' ELSE CONCAT(CHAR_LENGTH("
        "CONVERT(`code` USING utf8mb4)), ':', CONVERT(`code` USING utf8mb4)) END) USING utf8mb4)), 1, 15), 16, 10) "
        "AS UNSIGNED)"
    )


class _Cursor:
    def __init__(self, statements: list[str]) -> None:
        self.statements = statements

    def __enter__(self) -> _Cursor:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, statement: str, parameters: Any = None) -> None:
        self.statements.append(statement)


class _Connection:
    def __init__(self) -> None:
        self.statements: list[str] = []
        self.closed = False

    def cursor(self, *args: Any) -> _Cursor:
        return _Cursor(self.statements)

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(
    ("source", "dialect"),
    [("mysql://root@db:3306/shop", MysqlDialect), ("mariadb://db/shop", MysqlDialect),
     ("sqlserver://sa@db:1433/shop", SqlServerDialect)],
)  # fmt: skip
def test_the_source_url_picks_the_dialect(source: str, dialect: type, monkeypatch: pytest.MonkeyPatch) -> None:
    # GIVEN connections that record what they are asked
    opened: list[_Connection] = []

    def connect(address: Any) -> _Connection:
        opened.append(_Connection())
        return opened[-1]

    monkeypatch.setattr(dialects, "connect", connect)
    # WHEN verify opens the source
    with dialects.open_dialect(source) as chosen:
        # THEN the engine's dialect reads it (MySQL's session in UTC: TIMESTAMP as DMS writes it)
        assert isinstance(chosen, dialect)
        assert opened[0].statements == (["SET time_zone = '+00:00'"] if dialect is MysqlDialect else [])
    # AND the connection is closed afterwards
    assert opened[0].closed


def test_postgres_keeps_its_libpq_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    import cdclake.sources.postgres.settings as pg_settings

    given: list[str] = []

    monkeypatch.setattr(pg_settings, "connect", lambda dsn: given.append(dsn) or _Connection())
    for source in ("", "host=db dbname=shop", "postgresql://u@db/shop"):
        with dialects.open_dialect(source) as chosen:
            assert type(chosen).__name__ == "PostgresDialect"
    assert given == ["", "host=db dbname=shop", "postgresql://u@db/shop"]


def test_a_postgres_address_from_a_secret_reaches_libpq_whole() -> None:
    # GIVEN an address as a secret resolves it, with a password libpq must read quoted
    secret = "it's a \\ secret"
    address = SourceAddress("postgres", "db.internal", 5433, "shop", "reader", secret, (("sslmode", "require"),))
    # WHEN it is written for libpq THEN reading it back by libpq's quoting rules (parse_source) gives it whole,
    # with the time to connect
    timed = (("connect_timeout", "15"), ("sslmode", "require"))
    assert parse_source(dialects.conninfo(address, timeout=15)) == replace(address, options=timed)


@pytest.mark.parametrize("count", [0, 1, 2, 3, 7, 8, 63, 64])
def test_a_row_meets_log2_cuts_on_its_way_to_its_bucket_and_lands_where_bisect_puts_it(count: int) -> None:
    # GIVEN `count` increasing cuts and keys below, on, between and above them
    cuts = [10 * (i + 1) for i in range(count)]
    keys = sorted({k for c in [0, *cuts] for k in (c - 1, c, c + 1)})
    # WHEN the bucket of each key is found by the SQL every dialect runs (evaluated by SQLite here)
    sql, parameters = bucket_of("k", cuts)
    with sqlite3.connect(":memory:") as db:
        found = [db.execute(f"SELECT {sql.replace('%s', '?')} FROM (SELECT ? AS k)", [*parameters, k]).fetchone()[0]
                 for k in keys]  # fmt: skip
    # THEN it is the bucket bisect gives (0 below the first cut), and a key meets at most log2 cuts
    assert found == [bisect.bisect_right(cuts, k) for k in keys]
    assert sql.count("CASE WHEN") == count and len(parameters) == count
    depth = bucket_search(0, count, lambda _: 0, lambda _, below, rest: 1 + max(below, rest))
    assert depth == math.ceil(math.log2(count + 1))
