"""`query` with no JVM: ``shells.query_local`` prints the simplest statements on a local table byte for
byte as ``shells.query.run_query`` (Spark) does, and leaves every other statement to Spark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdclake.shells.query import run_query
from cdclake.shells.query_local import query_without_jvm
from readers import warehouse_of

pytestmark = pytest.mark.spark

DB = "nojvm_query"
COLUMNS = (
    "i int, b bigint, d decimal(10,2), f double, ok boolean, s string, day date, at timestamp, "
    "wall timestamp_ntz, raw binary"
)
ROWS = """
    (1, 9000000000, 1.50, 0.1, true, 'plain', DATE'2024-01-02', TIMESTAMP'2024-01-02 03:04:05.100000',
     TIMESTAMP_NTZ'2024-01-02 03:04:05', X'00FF'),
    (-2, -1, -0.05, 1e20, false, '', DATE'1999-12-31', TIMESTAMP'2024-01-02 00:00:00.123456',
     TIMESTAMP_NTZ'2024-01-02 00:00:00.000001', X''),
    (NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
    (3, 0, 0.00, -0.0, true, 'a, "quoted"\nline', DATE'2024-02-29', TIMESTAMP'2024-01-02 23:59:59',
     TIMESTAMP_NTZ'2024-01-02 23:59:59.5', X'41')
"""


@pytest.fixture(scope="module")
def warehouse(spark: SparkSession) -> Path:
    """A table with every type silver has, in one data file, and the same rows in two data files."""
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS silver.{DB}")
    for name in ("every_type", "two_files"):
        spark.sql(f"DROP TABLE IF EXISTS silver.{DB}.{name}")
        spark.sql(f"CREATE TABLE silver.{DB}.{name} ({COLUMNS}) USING iceberg")
    spark.sql(f"INSERT INTO silver.{DB}.every_type SELECT /*+ COALESCE(1) */ * FROM VALUES {ROWS}")
    for _ in range(2):
        spark.sql(f"INSERT INTO silver.{DB}.two_files SELECT * FROM silver.{DB}.every_type")
    # dates Python spells otherwise (year 999) or cannot hold (year 10000): Spark prints them
    for name, day in (("year_999", "0999-12-31"), ("year_10000", "+10000-01-01")):
        spark.sql(f"DROP TABLE IF EXISTS silver.{DB}.{name}")
        spark.sql(f"CREATE TABLE silver.{DB}.{name} USING iceberg AS SELECT CAST('{day}' AS DATE) AS day")
    return warehouse_of(spark, f"silver.{DB}.every_type")


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT * FROM {DB}.every_type",
        f"select s, raw, at, s FROM silver.{DB}.every_type limit 2;",
        f"SELECT wall, day, d, f, ok FROM {DB}.every_type LIMIT 0",
    ],
)
@pytest.mark.parametrize(("style", "limit"), [("table", None), ("csv", None), ("json", None), ("table", 1)])
def test_a_simple_statement_prints_byte_for_byte_as_spark_does(
    spark: SparkSession, warehouse: Path, sql: str, style: str, limit: int | None
) -> None:
    # GIVEN a one-file table with every type silver has: NULLs, the empty string, binary, fractions of a second
    # WHEN a simple statement is printed with no JVM and through Spark
    local = query_without_jvm(warehouse, sql, style, limit)
    by_spark = run_query(spark, sql, style, limit)
    # THEN the no-JVM path answered, and its text and stderr note are Spark's, byte for byte
    assert local is not None
    assert (local.text, local.note) == (by_spark.text, by_spark.note)


def test_values_render_as_spark_renders_them(spark: SparkSession, warehouse: Path) -> None:
    # GIVEN the one-file table / WHEN read with no JVM as CSV
    local = query_without_jvm(warehouse, f"SELECT * FROM {DB}.every_type", "csv", None)
    # THEN the values are the real ones in Spark's spelling, not two empty outputs alike
    assert local is not None
    lines = local.text.splitlines()
    assert lines[0] == "i,b,d,f,ok,s,day,at,wall,raw"
    assert lines[1] == "1,9000000000,1.50,0.1,true,plain,2024-01-02,2024-01-02 03:04:05.1,2024-01-02 03:04:05,\\x00ff"
    assert lines[2] == '-2,-1,-0.05,1e+20,false,"",1999-12-31,2024-01-02 00:00:00.123456,2024-01-02 00:00:00.000001,\\x'
    assert lines[3] == ",,,,,,,,,"


@pytest.mark.parametrize(
    "sql",
    [
        f"SELECT * FROM {DB}.every_type WHERE i = 1",
        f"SELECT * FROM {DB}.every_type ORDER BY i",
        f"SELECT i FROM {DB}.every_type a JOIN {DB}.every_type b USING (i)",
        f"SELECT count(*) FROM {DB}.every_type",
        f"SELECT I FROM {DB}.every_type",
        f"SELECT nope FROM {DB}.every_type",
        f"SELECT * FROM other.{DB}.every_type",
        f"SELECT * FROM {DB}.missing",
        f"SELECT * FROM {DB}.two_files",
        f"SELECT * FROM {DB}.year_999",
        f"SELECT * FROM {DB}.year_10000",
    ],
)
def test_any_other_statement_or_table_is_left_to_spark(spark: SparkSession, warehouse: Path, sql: str) -> None:
    # GIVEN a statement outside the simple form, a table in two data files (the readers' orders may differ),
    # or a date Python would print otherwise than Spark
    # WHEN it is tried with no JVM / THEN that path declines: Spark runs it
    assert query_without_jvm(warehouse, sql, "table", None) is None
    if "year_" in sql:  # AND the table does hold a date the simple form would otherwise have printed
        assert run_query(spark, sql, "csv", None).text.splitlines()[1] in ("0999-12-31", "+10000-01-01")


def test_the_query_command_starts_spark_only_outside_the_simple_form(warehouse: Path, tmp_path: Path) -> None:
    # GIVEN the command in a new process whose Spark session start fails
    config = tmp_path / "cdclake.yaml"
    config.write_text("tables:\n  s.t: {primary_key: [id], columns: {id: int}}\n", encoding="utf-8")
    probe = (
        "import sys, runpy\n"
        "config, warehouse, sql = sys.argv[1:4]\n"
        "sys.argv = ['cdclake', '--config', config, '--warehouse', warehouse, 'query', sql, '--format', 'csv']\n"
        "import cdclake.runtime.session as s\n"
        "def refuse(*a, **k): raise SystemExit('a Spark session was started')\n"
        "s.build_spark_session = refuse\n"
        "runpy.run_module('cdclake.shells.cli', run_name='__main__')\n"
    )

    def query(sql: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-c", probe, str(config), str(warehouse), sql]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    # WHEN a simple statement and one with a WHERE run
    simple = query(f"SELECT i, s FROM {DB}.every_type LIMIT 1")
    other = query(f"SELECT i FROM {DB}.every_type WHERE i = 1")
    # THEN the simple one printed with no Spark session; the other asked for one
    assert (simple.returncode, simple.stdout) == (0, "i,s\n1,plain\n"), simple.stderr
    assert "a Spark session was started" in other.stderr
