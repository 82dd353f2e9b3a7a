"""Late and duplicate files, deletes before inserts, and schema changes, on real Spark and Iceberg."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from cdclake.context import Engine
from cdclake.dms.writer import change_sequence, write_csv
from cdclake.engine.run import apply_cdc_files, run
from cdclake.engine.select import files_from_keys
from cdclake.errors import ConcurrentWriterError
from cdclake.lake.journals import QUARANTINE_TABLE, SCHEMA_CHANGES_TABLE, tombstones_of
from cdclake.report import RunReport
from cdclake.schema import type_change_advice
from faults import CrashingCommitter, RacingCommitter, TombstoneWitness

EngineFactory = Callable[..., Engine]

ITEMS = """
bronze: {timestamp_column: ts, change_sequence_column: seq}
tables:
  s.items: {primary_key: [id], columns: {id: int, name: string}}
"""


def _cdc(bronze: Path, table: str, name: str, rows: list[tuple[str, str, str, str | None]]) -> str:
    """Write a headerless CDC file of (op, commit second, id, name) rows; return its key."""
    records = []
    for n, (op, second, ident, value) in enumerate(rows):
        ts = f"2024-01-02 00:00:{int(second):02d}.000000"
        records.append([op, ts, ident, value, change_sequence(ts, n)])
    key = f"s/{table}/{name}"
    write_csv(bronze / key, records)
    return key


def _state(engine: Engine, table: str = "items") -> dict[int, str | None]:
    frame = engine.spark.table(f"silver.{engine.config.database}.{table}")
    return {r["id"]: r["name"] for r in frame.collect()}


def _apply(engine: Engine, *keys: str) -> RunReport:
    return apply_cdc_files(engine, files_from_keys(engine.store, list(keys))).checked()


def test_an_older_file_arriving_late_changes_nothing(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a newer file applied first, then an older one that arrives late
    engine = make_engine(ITEMS)
    bronze = tmp_path / "bronze"
    old = _cdc(bronze, "items", "20240102-0000010000.csv", [("I", "1", "1", "v1"), ("I", "1", "2", "only-old")])
    new = _cdc(bronze, "items", "20240102-0000020000.csv", [("U", "2", "1", "v2")])
    _apply(engine, new)
    # WHEN the late file is applied
    late = _apply(engine, old)
    # THEN the newer value stays, the late change is counted, the other key still arrives
    assert _state(engine) == {1: "v2", 2: "only-old"}
    assert (late.tables[0].ignored_late, late.tables[0].inserted) == (1, 1)


def test_a_late_insert_cannot_bring_a_deleted_row_back(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a key inserted then deleted, with the delete's file delivered first
    engine = make_engine(ITEMS)
    bronze = tmp_path / "bronze"
    insert = _cdc(bronze, "items", "20240102-0000010000.csv", [("I", "1", "7", "ghost")])
    delete = _cdc(bronze, "items", "20240102-0000020000.csv", [("D", "2", "7", "ghost")])
    first = _apply(engine, delete)
    # WHEN the insert arrives late, and then the same files are delivered again
    second = _apply(engine, insert)
    again = _apply(engine, insert, delete)
    # THEN the row stays deleted, a tombstone holds the key, duplicates are no-ops
    assert _state(engine) == {}
    assert (first.tables[0].deleted_missing, second.tables[0].ignored_late) == (1, 1)
    assert again.tables[0].files_skipped == 2
    tombstones = engine.spark.table(tombstones_of(engine.silver_table(engine.config.tables[0])).identifier)
    assert [(r["id"], r["deleted_at"]) for r in tombstones.collect()] == [(7, "2024-01-02 00:00:02.000000")]


def test_a_reinsert_newer_than_the_tombstone_applies(make_engine: EngineFactory, tmp_path: Path) -> None:
    engine = make_engine(ITEMS)
    bronze = tmp_path / "bronze"
    _apply(engine, _cdc(bronze, "items", "20240102-0000010000.csv", [("I", "1", "7", "a"), ("D", "2", "7", "a")]))
    _apply(engine, _cdc(bronze, "items", "20240102-0000030000.csv", [("I", "3", "7", "back")]))
    assert _state(engine) == {7: "back"}


def test_crash_between_tombstones_and_merge_converges_on_rerun(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a batch whose MERGE fails after its tombstones were written
    engine = make_engine(ITEMS)
    bronze = tmp_path / "bronze"
    _apply(engine, _cdc(bronze, "items", "20240102-0000010000.csv", [("I", "1", "1", "a"), ("I", "1", "2", "b")]))
    batch = _cdc(bronze, "items", "20240102-0000020000.csv", [("D", "2", "1", "a"), ("U", "2", "2", "b2")])

    with pytest.raises(RuntimeError, match="killed"):
        _apply(replace(engine, committer=CrashingCommitter()), batch)
    # WHEN the batch is retried THEN it applies once and silver is right
    retried = _apply(engine, batch)
    assert retried.tables[0].files_applied == 1
    assert _state(engine) == {2: "b2"}


@pytest.mark.parametrize("path", ["row-delta", "merge"])
def test_the_data_commit_waits_for_the_batch_tombstones(make_engine: EngineFactory, tmp_path: Path, path: str) -> None:
    # GIVEN a table and a batch that deletes a key (its tombstone is appended while the data is written)
    engine = make_engine(ITEMS)
    bronze = tmp_path / "bronze"
    _apply(engine, _cdc(bronze, "items", "20240102-0000010000.csv", [("I", "1", "1", "a"), ("I", "1", "2", "b")]))
    batch = _cdc(bronze, "items", "20240102-0000020000.csv", [("D", "2", "1", "a"), ("U", "2", "2", "b2")])
    tombstones = tombstones_of(engine.silver_table(engine.config.tables[0])).identifier
    witness = TombstoneWitness(tombstones)
    # WHEN the batch is applied through either commit path
    _apply(engine.tuned(committer=witness, way=path), batch)
    # THEN at the moment of the data commit the delete's tombstone was already committed
    assert [[(key, deleted_at) for key, _, deleted_at in seen] for seen in witness.seen] == [
        [(1, "2024-01-02 00:00:02.000000")]
    ]
    assert _state(engine) == {2: "b2"}


HEADERS = """
bronze: {csv_header: true, timestamp_column: ts, change_sequence_column: seq}
tables:
  s.items: {primary_key: [id]}
  s.other: {primary_key: [id]}
"""


def _header_csv(bronze: Path, table: str, name: str, header: list[str], rows: list[list[str | None]]) -> str:
    key = f"s/{table}/{name}"
    write_csv(bronze / key, rows, header=header)
    return key


def test_added_and_dropped_columns(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN header CSV files: the second adds column `color`, the third drops `size`
    engine = make_engine(HEADERS)
    bronze = tmp_path / "bronze"
    ts = "2024-01-02 00:00:0{}.000000"
    f1 = _header_csv(bronze, "items", "20240102-0000010000.csv", ["Op", "ts", "id", "size", "seq"],
                     [["I", ts.format(1), "1", "S", "1"], ["I", ts.format(1), "2", "M", "2"]])  # fmt: skip
    f2 = _header_csv(bronze, "items", "20240102-0000020000.csv", ["Op", "ts", "id", "size", "color", "seq"],
                     [["U", ts.format(2), "2", "L", "red", "3"]])  # fmt: skip
    f3 = _header_csv(bronze, "items", "20240102-0000030000.csv", ["Op", "ts", "id", "color", "seq"],
                     [["I", ts.format(3), "3", "blue", "4"], ["U", ts.format(3), "1", "green", "5"]])  # fmt: skip
    # WHEN applied one by one
    _apply(engine, f1)
    added = _apply(engine, f2)
    dropped = _apply(engine, f3)
    # THEN the column was added (earlier rows NULL) and the dropped one is NULL for rows written after
    rows = engine.spark.table(f"silver.{engine.config.database}.items").drop("_cdc_order").collect()
    assert sorted((r["id"], r["size"], r["color"]) for r in rows) == [
        ("1", None, "green"),
        ("2", "L", "red"),
        ("3", None, "blue"),
    ]
    assert added.tables[0].schema_changes == ["added column color string"]
    assert dropped.tables[0].columns_dropped_at_source == ["size"]
    journal = engine.spark.table(f"silver.{engine.config.database}.{SCHEMA_CHANGES_TABLE}").collect()
    assert [(r["silver_table"], r["change"]) for r in journal] == [("items", "added column color string")]


def _parquet(spark: SparkSession, bronze: Path, key: str, rows: list[tuple], schema: str) -> str:
    out = bronze.parent / f"spark-{key.replace('/', '-')}"
    spark.createDataFrame(rows, schema).coalesce(1).write.parquet(str(out))
    target = bronze / key
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(next(out.glob("part-*.parquet")), target)
    return key


PARQUET = """
bronze: {format: parquet, timestamp_column: ts}
tables:
  s.items: {primary_key: [id]}
  s.other: {primary_key: [id]}
"""


def test_widening_applies_and_a_type_change_quarantines_only_its_table(
    spark: SparkSession, make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN Parquet CDC files where qty goes int -> bigint, then string; another table in the same batch
    engine = make_engine(PARQUET)
    bronze = tmp_path / "bronze"
    schema = "Op string, ts string, id int, qty {}"
    f1 = _parquet(spark, bronze, "s/items/20240102-0000010000.parquet",
                  [("I", "2024-01-02 00:00:01.000000", 1, 5)], schema.format("int"))  # fmt: skip
    f2 = _parquet(spark, bronze, "s/items/20240102-0000020000.parquet",
                  [("I", "2024-01-02 00:00:02.000000", 2, 2**40)], schema.format("bigint"))  # fmt: skip
    f3 = _parquet(spark, bronze, "s/items/20240102-0000030000.parquet",
                  [("U", "2024-01-02 00:00:03.000000", 1, "five")], schema.format("string"))  # fmt: skip
    other = _parquet(spark, bronze, "s/other/20240102-0000030000.parquet",
                     [("I", "2024-01-02 00:00:03.000000", 9, 1)], schema.format("int"))  # fmt: skip
    _apply(engine, f1)
    # WHEN the widening batch, then a batch with the type change and the other table, are applied
    widened = _apply(engine, f2)
    mixed = _apply(engine, f3, other)
    # THEN qty became bigint and holds the big value; the string batch is quarantined; the other applied
    items = engine.spark.table(f"silver.{engine.config.database}.items")
    assert dict(items.dtypes)["qty"] == "bigint"
    assert sorted((r["id"], r["qty"]) for r in items.collect()) == [(1, 5), (2, 2**40)]
    assert widened.tables[0].schema_changes == ["widened column qty from int to bigint"]
    by_table = {t.table: t for t in mixed.tables}
    assert by_table["s.items"].quarantined_files == [f3]
    assert by_table["s.items"].note == "quarantined: column qty changed type from bigint to string"
    # (and `run` gives the advice `status` and `init --check` give: reload that one table)
    advice = type_change_advice("s.items")
    assert advice.startswith("a type change silver cannot take") and "full-load --table s.items --reload" in advice
    assert mixed.problems() == [
        f"s.items: 1 file(s) held in quarantine (column qty changed type from bigint to string); {advice} "
        "(`cdclake quarantine list` shows them)"
    ]
    assert by_table["s.other"].files_applied == 1
    quarantine = engine.spark.table(f"silver.{engine.config.database}.{QUARANTINE_TABLE}").collect()
    assert [(r["silver_table"], r["file_key"]) for r in quarantine] == [("items", f3)]
    # AND the quarantined file is held: a later run does not try it again (a replay does)
    assert [t for t in run(engine).checked().tables if t.table == "s.items"] == []
    # AND status shows the schema change and the quarantined file per table
    from cdclake.ops.status import table_statuses

    status = {s.source: s for s in table_statuses(engine)}
    assert (status["s.items"].schema_changes, status["s.items"].quarantined_files) == (1, 1)
    assert status["s.items"].last_schema_change == "widened column qty from int to bigint"
    assert (status["s.other"].schema_changes, status["s.other"].quarantined_files) == (0, 0)
    # AND says why s.items is behind bronze, and that s.other is not
    assert status["s.items"].pending_files == 0
    assert status["s.items"].behind == (
        f"1 file(s) held in quarantine (last: column qty changed type from bigint to string); {advice}"
    )
    assert status["s.other"].behind == "up to date"


DOCS = """
bronze: {timestamp_column: ts, csv_no_sup_value: "<nosup>"}
tables:
  s.docs: {primary_key: [id], columns: {id: int, name: string, body: string}}
"""


def test_a_column_not_captured_never_overwrites_the_stored_value(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN CsvNoSupValue and a loaded row with a large document
    engine = make_engine(DOCS)
    bronze = tmp_path / "bronze" / "s" / "docs"
    write_csv(bronze / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "a", "big document"]])
    t = "2024-01-02 00:00:0{}.000000"
    # WHEN updates arrive that did not capture the body, one of them after an update that did
    write_csv(bronze / "20240102-0000010000.csv", [["U", t.format(1), "1", "b", "<nosup>"]])
    write_csv(
        bronze / "20240102-0000020000.csv",
        [
            ["U", t.format(2), "1", "c", "new body"],
            ["U", t.format(3), "1", "d", "<nosup>"],
            ["I", t.format(3), "2", "e", "<nosup>"],
        ],
    )
    run(engine).checked()
    # THEN the body keeps the newest captured value; a new row without one has NULL
    rows = engine.spark.table(f"silver.{engine.config.database}.docs").collect()
    assert sorted((r["id"], r["name"], r["body"]) for r in rows) == [(1, "d", "new body"), (2, "e", None)]
    assert "_cdc_unchanged_body" not in engine.spark.table(f"silver.{engine.config.database}.docs").columns


def test_a_column_not_captured_keeps_the_stored_value_across_batches(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    engine = make_engine(DOCS)
    bronze = tmp_path / "bronze" / "s" / "docs"
    write_csv(bronze / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "a", "big document"]])
    run(engine).checked()
    write_csv(bronze / "20240102-0000010000.csv", [["U", "2024-01-02 00:00:01.000000", "1", "b", "<nosup>"]])
    run(engine).checked()
    rows = engine.spark.table(f"silver.{engine.config.database}.docs").collect()
    assert [(r["id"], r["name"], r["body"]) for r in rows] == [(1, "b", "big document")]


def test_transaction_ordered_files_with_rows_of_several_tables(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN PreserveTransactions: CDC files in one folder, each row naming its schema and table
    config = """
bronze: {timestamp_column: ts, change_sequence_column: seq, transaction_path: changes}
tables:
  s.items: {primary_key: [id], columns: {id: int, name: string}}
  s.orders: {primary_key: [order_id, line], columns: {order_id: int, line: int, item: int, qty: int}}
"""
    engine = make_engine(config)
    folder = tmp_path / "bronze" / "changes"
    t = "2024-01-02 00:00:0{}.000000"
    write_csv(
        folder / "20240102-0000010000.csv",
        [
            ["I", t.format(1), "s", "items", "1", "pen", "01"],
            ["I", t.format(1), "s", "orders", "10", "1", "1", "5", "02"],
            ["I", t.format(1), "s", "orders", "10", "2", "1", "7", "03"],
            ["U", t.format(2), "s", "items", "1", "pen, blue", "04"],
        ],
    )
    write_csv(
        folder / "2024" / "01" / "02" / "20240102-0000020000.csv",
        [
            ["D", t.format(3), "s", "orders", "10", "1", "1", "5", "05"],
            ["I", t.format(3), "s", "items", "2", "ink", "06"],
        ],
    )
    # WHEN run, and the second file is delivered again
    report = run(engine).checked()
    again = apply_cdc_files(engine, files_from_keys(engine.store, ["changes/2024/01/02/20240102-0000020000.csv"],
                                                    transaction_path="changes")).checked()  # fmt: skip
    # THEN each table holds its own rows, and the redelivery is skipped by both tables
    assert _state(engine) == {1: "pen, blue", 2: "ink"}
    orders = engine.spark.table(f"silver.{engine.config.database}.orders").collect()
    assert [(r["order_id"], r["line"], r["qty"]) for r in orders] == [(10, 2, 7)]
    assert sorted((t.table, t.files_applied) for t in report.tables if t.kind == "cdc") == [
        ("s.items", 2),
        ("s.orders", 2),
    ]
    assert sorted((t.table, t.files_skipped) for t in again.tables) == [("s.items", 1), ("s.orders", 1)]


@pytest.mark.parametrize("merge_below_records", [0, 1_000_000], ids=["publish", "merge"])
def test_copy_on_write_tables_merge_too(make_engine: EngineFactory, tmp_path: Path, merge_below_records: int) -> None:
    # GIVEN a silver table switched to copy-on-write (a user's choice for read-heavy tables), on
    # either commit path
    engine = make_engine(ITEMS).tuned(merge_below_records=merge_below_records)
    bronze = tmp_path / "bronze"
    _apply(engine, _cdc(bronze, "items", "20240102-0000010000.csv", [("I", "1", "1", "a"), ("I", "1", "2", "b")]))
    table = engine.silver_table(engine.config.tables[0]).identifier
    engine.spark.sql(
        f"ALTER TABLE {table} SET TBLPROPERTIES ('write.merge.mode'='copy-on-write', "
        "'write.update.mode'='copy-on-write', 'write.delete.mode'='copy-on-write')"
    )
    # WHEN a batch with an update and a delete is applied THEN the MERGE works and silver is right
    _apply(engine, _cdc(bronze, "items", "20240102-0000020000.csv", [("U", "2", "1", "a2"), ("D", "2", "2", "b")]))
    assert _state(engine) == {1: "a2"}


ITEMS_WITH_HISTORY = ITEMS.replace("name: string}}", "name: string}, history: true}")


def test_history_keeps_every_version_and_a_late_file_lands_in_its_place(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN a table with history: true, and its changes delivered out of order, one file twice,
    # one batch crashing before its data commit
    engine = make_engine(ITEMS_WITH_HISTORY)
    bronze = tmp_path / "bronze"
    first = _cdc(bronze, "items", "20240102-0000010000.csv", [("I", "1", "1", "a"), ("I", "1", "2", "x")])
    late = _cdc(bronze, "items", "20240102-0000020000.csv", [("U", "2", "1", "b")])
    last = _cdc(bronze, "items", "20240102-0000030000.csv", [("U", "3", "1", "c"), ("D", "4", "2", "x")])
    _apply(engine, first)
    with pytest.raises(RuntimeError, match="killed"):
        _apply(replace(engine, committer=CrashingCommitter()), last)
    _apply(engine, last)
    # WHEN the older file arrives late, and is delivered once more
    _apply(engine, late)
    _apply(engine, late)
    # THEN silver ignored the late change, history placed it between the others, each change once
    assert _state(engine) == {1: "c"}
    history = engine.spark.table(f"silver.{engine.config.database}.items__history")
    versions = sorted(
        (r["id"], str(r["valid_from"])[-8:], str(r["valid_to"])[-8:] if r["valid_to"] else None, r["operation"],
         r["is_current"], r["name"])
        for r in history.collect()
    )  # fmt: skip
    assert versions == [
        (1, "00:00:01", "00:00:02", "I", False, "a"),
        (1, "00:00:02", "00:00:03", "U", False, "b"),
        (1, "00:00:03", None, "U", True, "c"),
        (2, "00:00:01", "00:00:04", "I", False, "x"),
        (2, "00:00:04", None, "D", False, "x"),
    ]
    # AND the current versions equal silver
    assert {r["id"]: r["name"] for r in history.where("is_current").collect()} == _state(engine)


def test_a_commit_that_loses_a_race_retries_from_the_ledger(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN two batches, and a writer whose commit of the second loses the race twice: each time
    # the other writer has just applied the same and another file
    engine = make_engine(ITEMS).tuned(backoff_seconds=0.01)
    bronze = tmp_path / "bronze"
    first = _cdc(bronze, "items", "20240102-0000010000.csv", [("I", "1", "1", "a"), ("I", "1", "2", "b")])
    second = _cdc(bronze, "items", "20240102-0000020000.csv", [("U", "2", "1", "a2")])
    third = _cdc(bronze, "items", "20240102-0000030000.csv", [("D", "3", "2", "b")])
    _apply(engine, first)
    racing = RacingCommitter(losses=2, rival=lambda: _apply(engine, third))
    # WHEN it applies the second batch
    report = _apply(replace(engine, committer=racing), second, third)
    # THEN it retried from a fresh ledger: the other writer's file is skipped, its own applied once
    assert racing.attempts == 3
    assert (report.tables[0].files_applied, report.tables[0].files_skipped) == (1, 1)
    assert _state(engine) == {1: "a2"}


def test_a_writer_that_keeps_losing_says_so_in_one_sentence(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a writer that loses every commit race
    engine = make_engine(ITEMS).tuned(backoff_seconds=0.01, committer=RacingCommitter(losses=99))
    batch = _cdc(tmp_path / "bronze", "items", "20240102-0000010000.csv", [("I", "1", "1", "a")])
    # WHEN it applies a batch THEN it gives up after its attempts, naming the table, asking to retry
    with pytest.raises(
        ConcurrentWriterError, match=r"Table s\.items: another writer committed .* 4 times .* again later"
    ):
        _apply(engine, batch)


def test_a_full_load_writes_the_first_version_of_every_row(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a table with history: true, a full load of three rows, then a change to one of them
    engine = make_engine(ITEMS_WITH_HISTORY)
    bronze = tmp_path / "bronze"
    load_ts = "2024-01-01 00:00:00.000000"
    write_csv(
        bronze / "s/items/LOAD00000001.csv",
        [[load_ts, str(i), f"v{i}", change_sequence(load_ts, 0)] for i in (1, 2, 3)],
    )
    _cdc(bronze, "items", "20240102-0000010000.csv", [("U", "1", "2", "w2")])
    # WHEN the run loads and applies
    run(engine).checked()
    # THEN history holds an insert for each loaded row and the update closes the one it replaces
    history = engine.spark.table(f"silver.{engine.config.database}.items__history")
    versions = sorted((r["id"], r["operation"], r["is_current"], r["name"]) for r in history.collect())
    assert versions == [(1, "I", True, "v1"), (2, "I", False, "v2"), (2, "U", True, "w2"), (3, "I", True, "v3")]
    assert {r["id"]: r["name"] for r in history.where("is_current").collect()} == _state(engine)
