"""DMS file reading on real Spark: quoting, NULL markers, gzip, Parquet, headers, layouts."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

from pyspark.sql import SparkSession

from cdclake.columns import FILE_INDEX, OP, ROW_POSITION
from cdclake.config import parse_config
from cdclake.dms.files import FileKind, parse_key
from cdclake.dms.reader import read_files
from cdclake.dms.store import LocalBronze, list_bronze
from cdclake.engine.changes import to_changes

HEADERLESS = """
bronze: {timestamp_column: ts}
tables:
  s.t:
    primary_key: [id]
    columns: {id: int, name: string, note: string}
"""


def _read(spark: SparkSession, bronze: Path, config_text: str, kind: FileKind = FileKind.CDC) -> list[dict]:
    config = parse_config(config_text)
    table = config.tables[0]
    store = LocalBronze(bronze)
    files = list_bronze(store).for_table(table.source_schema, table.source_table, kind)
    raw = read_files(spark, store, config.bronze, table, files)
    changes = to_changes(raw, config.bronze, table)
    return [r.asDict() for r in changes.orderBy(FILE_INDEX, ROW_POSITION).collect()]


def _cdc_file(bronze: Path, text: str) -> None:
    """One CDC file of table s.t in ``bronze``, holding ``text`` as it is."""
    path = bronze / "s" / "t" / "20240101-1000000000.csv"
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")


def test_rfc4180_quoting_and_null_versus_empty_string(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN a CDC file with an embedded delimiter, doubled quotes, a newline, NULL and ""
    _cdc_file(
        tmp_path,
        'I,2024-01-01 10:00:00.000000,1,"Smith, Jane","she said ""hi"""\n'
        'U,2024-01-01 10:00:01.000000,2,"two\nlines",\n'
        'U,2024-01-01 10:00:02.000000,3,"",x\n',
    )
    # WHEN it is read
    rows = _read(spark, tmp_path, HEADERLESS)
    # THEN every value is exact, NULL is an empty unquoted field and "" stays an empty string
    assert [(r["id"], r["name"], r["note"], r[OP]) for r in rows] == [
        (1, "Smith, Jane", 'she said "hi"', "I"),
        (2, "two\nlines", None, "U"),
        (3, "", "x", "U"),
    ]
    assert [r["ts"] for r in rows] == [f"2024-01-01 10:00:0{i}.000000" for i in range(3)]


def test_custom_null_marker(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN CsvNullValue=NULL and a quoted "NULL" that is real text
    _cdc_file(tmp_path, 'I,2024-01-01 10:00:00.000000,1,NULL,"NULL"\n')
    config = HEADERLESS.replace(
        "bronze: {timestamp_column: ts}", "bronze: {timestamp_column: ts, csv_null_value: 'NULL'}"
    )
    # WHEN it is read
    rows = _read(spark, tmp_path, config)
    # THEN the bare marker is NULL; Spark also reads the quoted marker as NULL (a documented limit:
    # with a non-empty marker, text equal to the marker cannot be told from NULL)
    assert rows[0]["name"] is None
    assert rows[0]["note"] is None


def test_gzip_files_and_hex_load_order_past_nine(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN 17 gzip full-load files LOAD00000001..LOAD00000011 (hex), one row each
    table_dir = tmp_path / "s" / "t"
    table_dir.mkdir(parents=True)
    for n in range(1, 18):
        (table_dir / f"LOAD{n:08X}.csv.gz").write_bytes(
            gzip.compress(f"2024-01-01 00:00:00.000000,{n},n{n},\n".encode())
        )
    # WHEN they are read as a full load
    rows = _read(spark, tmp_path, HEADERLESS, FileKind.FULL_LOAD)
    # THEN the rows come in hexadecimal counter order and are inserts
    assert [r["id"] for r in rows] == list(range(1, 18))
    assert {r[OP] for r in rows} == {"I"}
    assert [r[FILE_INDEX] for r in rows] == list(range(17))


def test_date_partition_folders(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN CDC files in YYYY/MM/DD folders
    for day, ident in (("02", 2), ("01", 1)):
        path = tmp_path / "s" / "t" / "2024" / "01" / day / f"202401{day}-1000000000.csv"
        path.parent.mkdir(parents=True)
        path.write_text(f"I,2024-01-{day} 10:00:00.000000,{ident},a,b\n", encoding="utf-8")
    # WHEN read
    rows = _read(spark, tmp_path, HEADERLESS)
    # THEN both are found, in timestamp order
    assert [r["id"] for r in rows] == [1, 2]


def test_files_with_different_headers_are_read_by_name(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN header CSV files where the second adds a column in the middle
    table_dir = tmp_path / "s" / "t"
    table_dir.mkdir(parents=True)
    (table_dir / "20240101-1000000000.csv").write_text("Op,id,name\nI,1,a\n", encoding="utf-8")
    (table_dir / "20240101-1100000000.csv").write_text("Op,id,city,name\nI,2,Oslo,b\n", encoding="utf-8")
    config = "bronze: {csv_header: true}\ntables:\n  s.t: {primary_key: [id]}\n"
    # WHEN read together
    rows = _read(spark, tmp_path, config)
    # THEN values stay under their own column names; the older file has no city
    assert [(r["id"], r["name"], r["city"]) for r in rows] == [("1", "a", None), ("2", "b", "Oslo")]


def test_parquet_files(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN a DMS-style Parquet CDC file (Op column, typed values)
    out = tmp_path / "spark-out"
    frame = spark.createDataFrame([("I", 1, "a"), ("U", 1, "b"), ("D", 2, None)], "Op string, id int, name string")
    frame.coalesce(1).write.parquet(str(out))
    target = tmp_path / "s" / "t" / "20240101-1000000000.parquet"
    target.parent.mkdir(parents=True)
    shutil.copy(next(out.glob("part-*.parquet")), target)
    config = "bronze: {format: parquet}\ntables:\n  s.t: {primary_key: [id]}\n"
    # WHEN read
    rows = _read(spark, tmp_path, config)
    # THEN rows keep their order in the file (row_index) and their types
    assert [(r[OP], r["id"], r["name"], r[ROW_POSITION]) for r in rows] == [
        ("I", 1, "a", 0),
        ("U", 1, "b", 1),
        ("D", 2, None, 2),
    ]


def test_bad_rows_are_flagged_with_a_reason(spark: SparkSession, tmp_path: Path) -> None:
    # GIVEN an unknown Op, a value that is not an int, and a row with too many fields
    _cdc_file(
        tmp_path,
        "X,2024-01-01 10:00:00.000000,1,a,b\n"
        "I,2024-01-01 10:00:00.000000,abc,a,b\n"
        "I,2024-01-01 10:00:00.000000,3,a,b,extra\n"
        "I,2024-01-01 10:00:00.000000,4,a,b\n",
    )
    # WHEN read
    rows = _read(spark, tmp_path, HEADERLESS)
    # THEN each bad row says why, and the good row has no error
    errors = ["; ".join(e for e in r["_cdc_errors"] if e) or None for r in rows]
    assert errors[0] == "unknown Op 'X'"
    assert errors[1] == "value 'abc' of column id is not a valid int"
    assert errors[2] == "wrong number of fields"
    assert errors[3] is None
    assert parse_key("s/t/20240101-1000000000.csv").kind is FileKind.CDC
