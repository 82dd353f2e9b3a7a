"""Big CSV files read in parallel splits where quoting allows, and whole where a value spans lines."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdclake.columns import FILE_BLOCK, FILE_INDEX, ROW_POSITION
from cdclake.config import parse_config
from cdclake.context import Engine
from cdclake.dms.files import FileKind
from cdclake.dms.store import list_bronze
from cdclake.engine.read import bad_rows, read_and_count
from cdclake.engine.run import run

EngineFactory = Callable[..., Engine]

# Files of 10 KiB or more are split candidates; Spark cuts them every 16 KiB (set below).
CONFIG = """
bronze: {timestamp_column: ts, split_csv_files_above_mb: 0.01}
tables:
  s.t: {primary_key: [id], columns: {id: int, name: string}}
"""
ROWS = 3000  # about 110 KB: seven splits


@pytest.fixture
def small_splits(spark: SparkSession) -> Iterator[None]:
    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(16 * 1024))
    yield
    spark.conf.set("spark.sql.files.maxPartitionBytes", before)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """The bronze folder of s.t, made."""
    folder = tmp_path / "bronze" / "s" / "t"
    folder.mkdir(parents=True)
    return folder


def _load_lines(rows: int, name: str = "row") -> list[str]:
    return [f'2024-01-01 00:00:00.000000,{i},"{name} {i}"\n' for i in range(rows)]


def test_a_big_file_without_multiline_values_is_read_in_splits_in_file_order(
    make_engine: EngineFactory, folder: Path, small_splits: None
) -> None:
    # GIVEN a big LOAD file whose values hold no newline, with key 5 repeated near its end (a
    # restarted load: the later row is the one to keep), and a big file with a value on two lines
    engine = make_engine(CONFIG)
    lines = _load_lines(ROWS)
    lines[ROWS - 10] = '2024-01-01 00:00:00.000000,5,"row 5 again"\n'
    lines[100] = '2024-01-01 00:00:00.000000,100,"say ""hi"", twice"\n'  # doubled quotes: an even count
    (folder / "LOAD00000001.csv").write_text("".join(lines))
    spanning = _load_lines(ROWS, "other")
    spanning[1500] = '2024-01-01 00:00:00.000000,99999,"two\nlines"\n'
    (folder / "LOAD00000002.csv").write_text("".join(spanning))
    table = engine.config.tables[0]
    files = list_bronze(engine.store).for_table("s", "t", FileKind.FULL_LOAD)
    # WHEN it is read
    changes, counts = read_and_count(engine, table, files, full_load=True)
    rows = changes.orderBy(FILE_INDEX, FILE_BLOCK, ROW_POSITION).select(FILE_INDEX, FILE_BLOCK, "id", "name").collect()
    # THEN the first file was read in several splits, the second whole, and every row is there in file order
    blocks = {i: {r[FILE_BLOCK] for r in rows if r[FILE_INDEX] == i} for i in (0, 1)}
    assert len(blocks[0]) >= 5 and blocks[1] == {0}
    assert counts.total == 2 * ROWS and counts.bad == 0
    first = [(r["id"], r["name"]) for r in rows if r[FILE_INDEX] == 0]
    expected = [(int(line.split(",")[1]), line.split(",")[2].strip().strip('"')) for line in lines]
    expected[100] = (100, 'say "hi", twice')
    assert first == expected
    second = {r["id"]: r["name"] for r in rows if r[FILE_INDEX] == 1}
    assert second[99999] == "two\nlines"
    # AND the full load keeps key 5's later row, from a later split
    engine = make_engine(CONFIG)  # a fresh database
    (folder / "LOAD00000002.csv").unlink()
    run(engine).checked()
    silver = engine.spark.table(engine.silver_table(table).identifier)
    assert silver.count() == ROWS - 1
    assert [r["name"] for r in silver.where("id = 5").collect()] == ["row 5 again"]


def test_bad_rows_of_a_split_file_name_their_row_in_the_file(
    make_engine: EngineFactory, folder: Path, small_splits: None
) -> None:
    # GIVEN a big CDC file read in splits, with bad rows in its first and last splits
    engine = make_engine(CONFIG)
    lines = [f'I,2024-01-02 00:00:00.000000,{i},"row {i}"\n' for i in range(ROWS)]
    lines[6] = 'I,2024-01-02 00:00:00.000000,six,"not a number"\n'
    lines[2700] = 'I,2024-01-02 00:00:00.000000,2700,"too",many\n'
    (folder / "20240102-0000000001.csv").write_text("".join(lines))
    table = engine.config.tables[0]
    files = list_bronze(engine.store).for_table("s", "t", FileKind.CDC)
    # WHEN its bad rows are located
    changes, counts = read_and_count(engine, table, files, full_load=False)
    assert changes.select(FILE_BLOCK).distinct().count() >= 5
    bad = bad_rows(engine, table, changes, files, counts)
    # THEN each is named by its data row in the file (1-based), across the splits
    assert bad is not None
    assert sorted((r["file_key"], r["row_number"]) for r in bad.rows.collect()) == [
        ("s/t/20240102-0000000001.csv", 7),
        ("s/t/20240102-0000000001.csv", 2701),
    ]


def test_splitting_can_be_turned_off_and_small_files_stay_whole(spark: SparkSession) -> None:
    assert parse_config(CONFIG.replace("0.01", "0")).bronze.csv_split_bytes == 0
    assert parse_config(CONFIG).bronze.csv_split_bytes == 10486
    assert parse_config("tables:\n  s.t: {primary_key: [id], columns: {id: int}}\n").bronze.csv_split_bytes == 256 << 20


@pytest.mark.parametrize("blank", ["", "   "], ids=["empty-lines", "white-space-lines"])
def test_a_files_records_have_the_same_index_read_whole_or_in_splits(
    make_engine: EngineFactory, folder: Path, small_splits: None, blank: str
) -> None:
    # GIVEN a big CDC file with a bad record and lines holding nothing (skipped by both of Spark's
    # CSV readers) or white space alone (a bad record to the whole-file reader, nothing to the
    # line reader)
    lines = [f'I,2024-01-02 00:00:00.000000,{i},"row {i}"\n' for i in range(ROWS)]
    lines[5] = 'I,2024-01-02 00:00:00.000000,five,"not a number"\n'
    for n in (10, 1500, 2500):
        lines.insert(n, blank + "\n")
    (folder / "20240102-0000000001.csv").write_text("".join(lines))

    def indexes(config: str) -> tuple[dict[object, int], int]:
        engine = make_engine(config)
        table = engine.config.tables[0]
        files = list_bronze(engine.store).for_table("s", "t", FileKind.CDC)
        changes, _ = read_and_count(engine, table, files, full_load=False)
        rows = changes.select("id", ROW_POSITION, FILE_BLOCK).collect()
        return {r["id"]: r[ROW_POSITION] for r in rows}, len({r[FILE_BLOCK] for r in rows})

    # WHEN it is read whole, and with splitting on
    whole, whole_splits = indexes(CONFIG.replace("0.01", "0"))
    split, splits = indexes(CONFIG)
    # THEN every record has its index in the file (empty lines are no records), the same both ways;
    # white space alone keeps the file whole
    assert whole_splits == 1 and (splits >= 5 if blank == "" else splits == 1)
    assert split == whole
    records = [line for line in lines if line != "\n"]
    assert whole[100] == records.index('I,2024-01-02 00:00:00.000000,100,"row 100"\n')
    assert whole[2999] == len(records) - 1
