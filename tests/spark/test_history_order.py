"""A change's place in history's ``_cdc_order`` is its row index in its file: the same whether the
file is read alone, after other files (in another Spark partition, or after another file in one),
in parallel splits, on the driver's small-batch path or Spark's, CSV or Parquet. A re-read in any
company (history's catch-up, another writer) then gives each change the text it was first
recorded with, and history adds it once."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from cdclake.columns import FILE_BLOCK, FILE_INDEX
from cdclake.context import Engine
from cdclake.dms.files import FileKind
from cdclake.dms.store import LocalBronze, list_bronze
from cdclake.dms.writer import cdc_file_name, change_sequence, write_csv
from cdclake.engine.read import read_changes
from cdclake.engine.run import run
from cdclake.lake.history import history_of

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {{timestamp_column: ts, change_sequence_column: seq{bronze}}}
cdc: {{max_files_per_batch: 10}}
quarantine: {{max_bad_row_ratio: 0.5}}
tables:
  s.items: {{primary_key: [id], columns: {{id: int, name: string}}, history: true}}
"""
T1, T2 = "2024-01-02 00:00:01.000000", "2024-01-03 00:00:02.000000"
BAD_ROW = 3  # the file's fourth record: an id that is not a number (quarantined, but a row of the file)
Record = list[str]


def _file_under_test() -> list[Record]:
    """The file whose places are compared: 300 inserts, an update of each, a delete of every
    third key, all at one instant (each with its change sequence), and one bad record."""
    changes = [("I", i, f"a{i}") for i in range(300)] + [("U", i, f"b{i}") for i in range(300)]
    changes += [("D", i, f"b{i}") for i in range(0, 300, 3)]
    records = [[op, T2, str(i), name, change_sequence(T2, n)] for n, (op, i, name) in enumerate(changes, 1)]
    records.insert(BAD_ROW, ["U", T2, "three", "not a number", change_sequence(T2, 9999)])
    return records


def _other_file(first: int) -> list[Record]:
    """A larger file applied before it (other keys, an earlier instant)."""
    return [["I", T1, str(i), f"other {i}", change_sequence(T1, i)] for i in range(first, first + 1200)]


def _write(folder: Path, name: str, records: list[Record], parquet: bool) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    if not parquet:
        write_csv(folder / name, records)
        return
    columns = list(zip(*records, strict=True))
    frame = pa.table(
        {c: pa.array(v, pa.string()) for c, v in zip(("Op", "ts", "id", "name", "seq"), columns, strict=True)}
    )
    pq.write_table(frame, folder / name.replace(".csv", ".parquet"), row_group_size=50)  # several row groups: splits


def _bronze(root: Path, parquet: bool, company: bool) -> LocalBronze:
    """A bronze folder holding the file under test, alone or after two larger files."""
    folder = root / "s" / "items"
    if company:
        _write(folder, cdc_file_name("2024-01-02 00:00:01.000000"), _other_file(10_000), parquet)
        _write(folder, cdc_file_name("2024-01-02 00:00:01.500000"), _other_file(20_000), parquet)
    _write(folder, cdc_file_name(T2), _file_under_test(), parquet)
    return LocalBronze(root)


@pytest.fixture
def small_partitions(spark: SparkSession) -> Iterator[None]:
    """Spark cuts files every 8 KiB: the file under test (about 30 KB) is read in several splits."""
    before = spark.conf.get("spark.sql.files.maxPartitionBytes")
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(8 * 1024))
    yield
    spark.conf.set("spark.sql.files.maxPartitionBytes", before)


def _places(engine: Engine) -> set[tuple[int, str, str, str]]:
    """(id, _cdc_order, operation, name) of the file under test's versions in history."""
    table = history_of(engine.silver_table(engine.config.tables[0]))
    rows = engine.spark.table(table.identifier).where(f"valid_from = TIMESTAMP '{T2}'").collect()
    return {(int(r["id"]), r["_cdc_order"], r["operation"], r["name"]) for r in rows}


def _applied(make_engine: EngineFactory, store: LocalBronze, bronze: str, spark_path: bool) -> Engine:
    engine = make_engine(CONFIG.format(bronze=bronze), store)
    if spark_path:  # no single task, no collection into the driver
        engine = engine.tuned(driver_write_bytes=0, single_task_batch_bytes=0, broadcast_batch_bytes=0)
    run(engine).checked()
    return engine


def _splits_of_the_file_under_test(engine: Engine) -> int:
    table = engine.config.tables[0]
    files = list_bronze(engine.store).for_table("s", "items", FileKind.CDC)
    last = len(files) - 1  # the file under test is applied last
    changes = read_changes(engine, table, files)
    return changes.where(f"{FILE_INDEX} = {last}").select(FILE_BLOCK).distinct().count()


def _expected() -> set[tuple[int, str, str]]:
    """Each valid record of the file under test with the place it has in the file: its 0-based
    index among the file's records (the bad record counted)."""
    records = _file_under_test()
    return {(int(r[2]), "#" + "0" * 20 + f"{n:020d}", r[0]) for n, r in enumerate(records) if n != BAD_ROW}


@pytest.mark.parametrize("parquet", [False, True], ids=["csv", "parquet"])
def test_a_change_has_the_same_place_in_history_however_its_file_was_read(
    make_engine: EngineFactory, tmp_path: Path, parquet: bool, small_partitions: None
) -> None:
    fmt = ", format: parquet" if parquet else ""
    split = ", split_csv_files_above_mb: 0.01" if not parquet else ""
    # GIVEN the file under test read alone, on the small-batch path (one task, rows collected into the driver)
    alone = _applied(make_engine, _bronze(tmp_path / "alone", parquet, company=False), fmt, spark_path=False)
    places = _places(alone)
    # THEN each change's place is its row index in the file
    assert {(i, order[-41:], op) for i, order, op, _ in places} == _expected()
    assert len(places) == len(_file_under_test()) - 1
    # WHEN it is read after two larger files (another partition), on Spark's path
    company = _applied(make_engine, _bronze(tmp_path / "company", parquet, company=True), fmt, spark_path=True)
    # AND read in splits, alone on Spark's path, and after the others on the small-batch path
    split_alone = _applied(make_engine, _bronze(tmp_path / "split-alone", parquet, False), fmt + split, True)
    split_company = _applied(make_engine, _bronze(tmp_path / "split-company", parquet, True), fmt + split, False)
    if not parquet:  # a CSV file's split starts are the reader's FILE_BLOCK (Parquet's row groups are not)
        assert _splits_of_the_file_under_test(split_alone) >= 3
        assert _splits_of_the_file_under_test(split_company) >= 3
    # THEN history holds every change with the same _cdc_order each time
    assert _places(company) == places
    assert _places(split_alone) == places
    assert _places(split_company) == places
