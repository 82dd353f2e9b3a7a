"""A small batch prepared in the driver (``engine.driver_batch``) gives what the Spark path gives.

Every test runs the same bronze through two engines, one as configured (small batches in the
driver) and one with ``BatchSizes.driver_read_bytes`` 0 (every batch through Spark), and compares
what each leaves: silver (its order keys included), history, the tombstones, the report and the
quarantine (``tests/run_outcome.py``; the bad-input corpus is compared the same way in
``test_bad_input_corpus.py``). Each also checks that the driver did take the batches it should, so that a driver path
that declines everything cannot pass.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import cdclake.engine.prepare as prepare
from cdclake.context import Engine
from cdclake.dms.local_reader import file_records, read_locally
from cdclake.dms.reader import read_files
from cdclake.dms.store import list_bronze
from cdclake.dms.writer import write_csv
from cdclake.engine.run import run
from cdclake.report import RunReport
from run_outcome import run_state, table_reports

EngineFactory = Callable[..., Engine]

CONFIG = """
bronze: {timestamp_column: ts}
tables:
  s.items: {primary_key: [id], columns: {id: int, v: string, amount: "decimal(12,2)", day: date}, history: true}
  s.pairs: {primary_key: [region, at], columns: {region: string, at: timestamp, n: bigint}}
  s.moves: {append_only: true, columns: {account: int, delta: "decimal(10,2)"}}
"""
T0 = "2024-01-01 00:00:00.000000"


def _t(second: int) -> str:
    return f"2024-01-02 00:00:{second:02d}.000000"


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bool]]:
    """Whether the driver took each batch prepared while the test runs."""
    noted: list[bool] = []
    prepare_in_driver = prepare.prepare_in_driver

    def noting(*args: Any, **kwargs: Any) -> Any:
        prepared = prepare_in_driver(*args, **kwargs)
        noted.append(prepared is not None)
        return prepared

    monkeypatch.setattr(prepare, "prepare_in_driver", noting)
    yield noted


def _run_both(driver: Engine, spark_only: Engine, taken: list[bool], batches: int) -> RunReport:
    """Run both engines: the driver takes ``batches`` batches of the first, none of the second;
    their reports agree (the first's is returned)."""
    taken.clear()
    first = run(driver).checked()
    assert taken == [True] * batches, taken
    taken.clear()
    second = run(spark_only).checked()
    assert taken == [False] * batches, taken
    assert table_reports(first) == table_reports(second)
    return first


def test_a_batch_prepared_in_the_driver_leaves_what_the_spark_path_leaves(
    make_engine: EngineFactory, tmp_path: Path, taken: list[bool]
) -> None:
    # GIVEN three loaded tables (a text key; a composite key of text and a timestamp; append-only),
    # one with history
    bronze = tmp_path / "bronze" / "s"
    items, pairs, moves = bronze / "items", bronze / "pairs", bronze / "moves"
    write_csv(moves / "LOAD00000001.csv", [[T0, "1", "10.00"]])
    write_csv(items / "LOAD00000001.csv", [[T0, str(i), f"v{i}", f"{i}.50", "2024-01-01"] for i in range(1, 6)])
    write_csv(pairs / "LOAD00000001.csv", [[T0, "eu", "2024-01-01 10:00:00.123456", "1"], [T0, "us", T0, "2"]])
    driver, spark_only = make_engine(CONFIG), make_engine(CONFIG).tuned(driver_read_bytes=0)
    for engine in (driver, spark_only):
        run(engine).checked()
    # AND a batch of two files per table: a key updated in both files, twice at one instant in one
    # file (file order decides), a delete, a delete of a key never stored, values with the
    # delimiter, quotes, an empty text and NULL, an insert after a delete
    write_csv(
        items / "20240102-0000010000.csv",
        [
            ["U", _t(1), "1", 'a "quoted", value', "1.00", "2024-02-01"],
            ["U", _t(2), "2", "", None, None],
            ["U", _t(2), "2", "second at one instant", "2.25", "2024-02-02"],
            ["D", _t(3), "3", "v3", "3.50", "2024-01-01"],
            ["D", _t(3), "9", "never", "0", "2024-01-01"],
            ["I", _t(4), "10", "new", "10.10", "2024-03-01"],
        ],
    )
    write_csv(
        items / "20240102-0000050000.csv",
        [["U", _t(5), "1", "last of 1", "1.01", "2024-02-03"], ["I", _t(6), "3", "back", "3.00", None]],
    )
    write_csv(
        pairs / "20240102-0000010000.csv",
        [
            ["U", _t(1), "eu", "2024-01-01 10:00:00.123456", "10"],
            ["I", _t(2), "ap", "2024-06-30 23:59:59.999999", "3"],
            ["D", _t(3), "us", T0, "2"],
        ],
    )
    write_csv(
        moves / "20240102-0000010000.csv",
        [["I", _t(1), "1", "-2.50"], ["U", _t(1), "1", "-2.50"], ["D", _t(2), "2", "0"]],
    )
    # WHEN each engine runs it (the driver takes every table's batch; the other engine, none)
    _run_both(driver, spark_only, taken, batches=3)
    # AND a second batch: changes older than the stored row and than a tombstone (late), one older
    # than the load's commit time (every loaded row orders first), a change to a key the first
    # batch inserted
    write_csv(
        items / "20240102-0000070000.csv",
        [
            ["U", _t(4), "1", "older than stored", "4.00", None],
            ["U", _t(0), "4", "newer than the load", "4.00", None],
            ["I", _t(7), "10", "newer", "10.20", "2024-03-02"],
        ],
    )
    write_csv(
        pairs / "20240102-0000070000.csv",
        [["I", _t(2), "us", T0, "99"], ["U", _t(8), "ap", "2024-06-30 23:59:59.999999", "4"]],
    )
    write_csv(moves / "20240102-0000070000.csv", [["I", _t(0), "3", "1.25"]])
    report = _run_both(driver, spark_only, taken, batches=3)
    # THEN both leave the same silver, history, tombstones and quarantine
    assert run_state(driver) == run_state(spark_only)
    stored = driver.spark.table(driver.silver_table(driver.config.tables[0]).identifier).collect()
    silver = {r["id"]: r["v"] for r in stored}
    assert silver == {
        1: "last of 1",
        2: "second at one instant",
        3: "back",
        4: "newer than the load",
        5: "v5",
        10: "newer",
    }
    assert sorted((t.table, t.ignored_late) for t in report.tables) == [("s.items", 1), ("s.moves", 0), ("s.pairs", 1)]
    moved = driver.spark.table(driver.silver_table(driver.config.table("s.moves")).identifier).collect()
    assert len(moved) == 5  # the load's row and every change, each kept


@pytest.mark.parametrize(
    ("data", "header", "records"),
    [
        (b"I,1,a\nU,2,b\n", False, ["I,1,a", "U,2,b"]),
        (b"Op,id,v\nI,1,a\n\n\nU,2,b", True, ["I,1,a", "U,2,b"]),  # empty lines skipped; no final newline
        (b'I,1,"a ""q"", b"\n', False, ['I,1,"a ""q"", b"']),
        (b"", False, []),
        (b'I,1,"a\nb"\n', False, None),  # a value holding a newline: Spark's reader decides
        (b'I,1,a"b\n', False, None),  # a stray quote
        (b"I,1,a\n   \n", False, None),  # white space alone: a bad record of Spark's own text
        (b"I,1,a\r\n", False, None),
        (b"I,1,\x00\n", False, None),
        (b"\xef\xbb\xbfI,1,a\n", False, None),
        (b"I,1,\xff\n", False, None),
    ],
)
def test_a_file_is_cut_into_records_only_where_the_rule_is_sparks(
    data: bytes, header: bool, records: list[str] | None
) -> None:
    assert file_records(data, header) == records


def test_the_driver_reads_files_as_spark_reads_them(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN files with quoted delimiters and quotes, empty texts, NULLs, a record with a field too
    # many, one with a field too few, a header, several files
    folder = tmp_path / "bronze" / "s" / "items"
    folder.mkdir(parents=True)
    (folder / "20240102-0000010000.csv").write_text(
        'U,2024-01-02 00:00:01,1,"a, b","1.5",2024-01-01\n'
        'I,2024-01-02 00:00:02,2,"",,\n'
        "\n"
        'U,2024-01-02 00:00:03,3,"say ""hi""",2,2024-01-02,extra\n'
        "D,2024-01-02 00:00:04,4\n"
    )
    write_csv(
        folder / "20240102-0000020000.csv", [["I", _t(5), "5", None, "5", None], ["U", _t(6), "5", "x", "6", None]]
    )
    engine = make_engine(CONFIG)
    table = engine.config.tables[0]
    files = [f for f in list_bronze(engine.store).files if f.table == "items"]
    # WHEN the driver reads them and Spark reads them
    local = read_locally(engine.spark, engine.store, engine.config.bronze, table, files)
    spark = read_files(engine.spark, engine.store, engine.config.bronze, table, files)
    # THEN the columns, their order and every row are the same, and the driver ran no job
    assert local is not None
    assert local.columns == spark.columns
    assert sorted(map(repr, local.collect())) == sorted(map(repr, spark.collect()))
    assert local._jdf.queryExecution().optimizedPlan().getClass().getSimpleName() == "LocalRelation"


def test_a_spark_without_the_local_converters_prepares_every_batch_itself(
    make_engine: EngineFactory, tmp_path: Path, taken: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a loaded table and a small batch, and a Spark whose Arrow converters refuse the call
    # (they are internal to Spark: another version may not have them)
    from py4j.protocol import Py4JError

    import cdclake.runtime.local_relation as local_relation

    def missing(spark: Any) -> Any:
        raise Py4JError("ArrowConverters$.MODULE$ does not exist in the JVM")

    items = tmp_path / "bronze" / "s" / "items"
    write_csv(items / "LOAD00000001.csv", [[T0, "1", "a", "1.00", "2024-01-01"]])
    engine = make_engine("bronze: {timestamp_column: ts}\ntables:\n  s.items: {primary_key: [id], columns: "
                         "{id: int, v: string, amount: 'decimal(12,2)', day: date}}\n")  # fmt: skip
    run(engine).checked()
    write_csv(
        items / "20240102-0000010000.csv", [["U", _t(1), "1", "b", "2.00", None], ["I", _t(1), "2", "c", "3", None]]
    )
    monkeypatch.setattr(local_relation, "_converters", missing)
    # WHEN the run applies it
    taken.clear()
    run(engine).checked()
    # THEN the driver declined it and the Spark path applied it
    assert taken == [False]
    rows = engine.spark.table(engine.silver_table(engine.config.tables[0]).identifier).collect()
    assert sorted((r["id"], r["v"]) for r in rows) == [(1, "b"), (2, "c")]


def test_a_table_that_takes_no_row_delta_is_declined_before_its_files_are_read(
    make_engine: EngineFactory, tmp_path: Path, taken: list[bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # GIVEN a loaded copy-on-write table (no batch of it can be a RowDelta) and a small batch
    import cdclake.engine.driver_batch as driver_batch

    items = tmp_path / "bronze" / "s" / "items"
    write_csv(items / "LOAD00000001.csv", [[T0, "1", "a", "1.00", "2024-01-01"]])
    engine = make_engine("bronze: {timestamp_column: ts}\ntables:\n  s.items: {primary_key: [id], columns: "
                         "{id: int, v: string, amount: 'decimal(12,2)', day: date}}\n")  # fmt: skip
    run(engine).checked()
    silver = engine.silver_table(engine.config.tables[0]).identifier
    engine.spark.sql(f"ALTER TABLE {silver} SET TBLPROPERTIES ('write.merge.mode' = 'copy-on-write')")
    write_csv(items / "20240102-0000010000.csv", [["U", _t(1), "1", "b", "2.00", None]])
    reads: list[int] = []
    read_locally = driver_batch.read_locally
    monkeypatch.setattr(driver_batch, "read_locally", lambda *a: reads.append(1) or read_locally(*a))
    # WHEN the run applies it
    taken.clear()
    run(engine).checked()
    # THEN the driver declined it without reading a file (every round would pay for that read), and
    # the Spark path applied it
    assert taken == [False] and reads == []
    assert [(r["id"], r["v"]) for r in engine.spark.table(silver).collect()] == [(1, "b")]
