"""The engine end to end on local Spark and Iceberg, checked against a plain-Python replay."""

from __future__ import annotations

import random
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from cdclake.context import Engine
from cdclake.dms.writer import (
    SourceChange,
    cdc_file_name,
    cdc_records,
    change_sequence,
    load_file_name,
    write_csv,
)
from cdclake.engine.commit import commit_batch
from cdclake.engine.full_load import MAX_KEY_BUCKETS, has_repeated_integers, key_buckets
from cdclake.engine.prepare import prepare_batch
from cdclake.engine.run import apply_cdc_files, full_load, run
from cdclake.engine.select import files_from_keys
from cdclake.engine.turn import read_state
from cdclake.errors import BadInputError, FullLoadPendingError
from cdclake.lake.batch import DriverRowDelta, RowDelta
from cdclake.lake.journals import tombstones_of
from cdclake.lake.ledger import read_ledger, replace_table
from cdclake.lake.ledger_record import KIND_FULL_LOAD_STAGED, LoadedFile
from oracle import replay_change_log

EngineFactory = Callable[..., Engine]

ORDERS = """
bronze: {timestamp_column: commit_ts, change_sequence_column: AR_H_CHANGE_SEQ}
cdc: {max_files_per_batch: 3}
tables:
  sales.orders:
    primary_key: [region, order_id]
    columns: {region: string, order_id: int, status: string, amount: "decimal(10,2)"}
"""
COLUMNS = ("region", "order_id", "status", "amount")
TEXTS = ["new", "paid", "a, b", 'say "x"', "multi\nline", "", None, "ünïcødé ✓", "x" * 300]


def _silver(engine: Engine) -> dict[tuple, dict]:
    table = engine.silver_table(engine.config.tables[0])
    rows = engine.spark.table(table.identifier).drop("_cdc_order").collect()
    return {(r["region"], r["order_id"]): r.asDict() for r in rows}


def _expected(state: dict) -> dict[tuple, dict]:
    return {
        (row["region"], int(row["order_id"])): {
            "region": row["region"],
            "order_id": int(row["order_id"]),
            "status": row["status"],
            "amount": None if row["amount"] is None else Decimal(row["amount"]),
            "commit_ts": row["commit_ts"],
        }
        for row in state.values()
    }


def _random_stream(rng: random.Random, initial_keys: int, changes: int) -> tuple[list[dict], list[SourceChange]]:
    """A random change log with ties on commit timestamps, deletes, re-inserts and composite keys."""
    load_ts = "2024-01-01 00:00:00.000000"
    state: dict[tuple, dict] = {}
    for i in range(initial_keys):
        key = (rng.choice(["eu", "us"]), i)
        state[key] = {"region": key[0], "order_id": str(i), "status": rng.choice(TEXTS),
                      "amount": f"{rng.randint(0, 99999) / 100:.2f}", "commit_ts": load_ts}  # fmt: skip
    initial = list(state.values())
    log: list[SourceChange] = []
    second = 0
    for n in range(changes):
        if rng.random() < 0.6:
            second += 1  # otherwise this change shares the previous commit timestamp
        ts = f"2024-01-02 00:{second // 60:02d}:{second % 60:02d}.000000"
        if state and rng.random() < 0.7:
            key = rng.choice(sorted(state))
        else:
            key = (rng.choice(["eu", "us"]), rng.randint(0, initial_keys + 20))
        exists = key in state
        op = "D" if exists and rng.random() < 0.3 else ("U" if exists else "I")
        if op == "U" and rng.random() < 0.1:
            op = "I"  # an insert of an existing key must upsert
        row = {"region": key[0], "order_id": str(key[1]), "status": rng.choice(TEXTS),
               "amount": rng.choice([None, f"{rng.randint(0, 99999) / 100:.2f}"]), "commit_ts": ts}  # fmt: skip
        if op == "D":
            row = {**state.pop(key), "commit_ts": ts}
        else:
            state[key] = row
        log.append(SourceChange(op, row, ts, change_sequence(ts, n + 1)))
    return initial, log


def _write_stream(bronze: Path, initial: list[dict], log: list[SourceChange], rng: random.Random) -> list[Path]:
    table_dir = bronze / "sales" / "orders"
    load_rows = [[r["commit_ts"], *[r[c] for c in COLUMNS], change_sequence(r["commit_ts"], 0)] for r in initial]
    for number, start in enumerate(range(0, len(load_rows), 7), start=1):
        write_csv(table_dir / load_file_name(number), load_rows[start : start + 7])
    files, start, counter = [], 0, 0
    while start < len(log):
        size = rng.randint(1, 12)
        chunk = log[start : start + size]
        counter += 1
        compress = rng.random() < 0.3
        name = cdc_file_name(chunk[-1].commit_ts).replace(".csv", f"{counter:04d}.csv" + (".gz" if compress else ""))
        files.append(write_csv(table_dir / name, cdc_records(chunk, COLUMNS), compress=compress))
        start += size
    return files


# How a batch is prepared: in one task (no shuffle), with its keys broadcast, or with the stored keys shuffled.
PREPARATIONS = {
    "one task": {"single_task_batch_bytes": 1 << 40, "broadcast_batch_bytes": 1 << 40},
    "broadcast keys": {"single_task_batch_bytes": 0, "broadcast_batch_bytes": 1 << 40},
    "shuffled": {"single_task_batch_bytes": 0, "broadcast_batch_bytes": 0},
}


@pytest.mark.parametrize(("seed", "preparation"), [(1, "one task"), (2, "broadcast keys"), (3, "shuffled")])
def test_random_change_streams_match_the_replayed_source(
    make_engine: EngineFactory, tmp_path: Path, seed: int, preparation: str
) -> None:
    # GIVEN a random full load and change log written as DMS files (some gzip, random batches),
    # prepared in one task, with the batch keys broadcast, or with the stored keys shuffled
    rng = random.Random(seed)
    engine = make_engine(ORDERS).tuned(**PREPARATIONS[preparation])
    initial, log = _random_stream(rng, initial_keys=30, changes=120)
    files = _write_stream(tmp_path / "bronze", initial, log, rng)
    # WHEN the pipeline runs (full load, then CDC in batches of 3 files)
    report = run(engine).checked()
    # THEN silver equals the source state replayed in plain Python
    assert _silver(engine) == _expected(replay_change_log(initial, log, ["region", "order_id"]))
    assert sum(t.files_applied for t in report.tables if t.kind == "cdc") == len(files)
    # AND running again applies nothing and makes no new snapshot
    table = engine.silver_table(engine.config.tables[0])
    snapshots = engine.spark.sql(f"SELECT count(*) FROM {table.metadata('snapshots')}").first()[0]
    again = run(engine).checked()
    assert [t for t in again.tables if t.files_applied] == []
    assert engine.spark.sql(f"SELECT count(*) FROM {table.metadata('snapshots')}").first()[0] == snapshots


def test_without_change_sequence_file_and_row_order_decide(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN no change-sequence column and three changes to one key on one timestamp, in one file
    config = ORDERS.replace(", change_sequence_column: AR_H_CHANGE_SEQ", "")
    engine = make_engine(config)
    ts = "2024-01-02 00:00:01.000000"
    rows = [["I", ts, "eu", "1", "first", "1.00"], ["U", ts, "eu", "1", "second", "2.00"],
            ["U", ts, "eu", "1", "third", "3.00"]]  # fmt: skip
    write_csv(tmp_path / "bronze" / "sales" / "orders" / "20240102-0000010000.csv", rows)
    # WHEN applied
    run(engine).checked()
    # THEN the last row in the file wins
    assert _silver(engine)[("eu", 1)]["status"] == "third"


def test_same_batch_applied_twice_after_a_crash_is_a_no_op(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a batch that was committed but whose queue messages were never acknowledged
    engine = make_engine(ORDERS)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    ts = "2024-01-02 00:00:01.000000"
    write_csv(table_dir / "20240102-0000010000.csv", [["I", ts, "eu", "1", "new", "1.00", change_sequence(ts, 1)]])
    ts2 = "2024-01-02 00:00:02.000000"
    write_csv(table_dir / "20240102-0000020000.csv", [["D", ts2, "eu", "1", "new", "1.00", change_sequence(ts2, 2)]])
    batch = files_from_keys(engine.store, ["sales/orders/20240102-0000010000.csv"])
    first = apply_cdc_files(engine, batch).checked()
    # WHEN the same manifest is delivered again, also after a later batch was applied
    again = apply_cdc_files(engine, batch).checked()
    later = apply_cdc_files(engine, files_from_keys(engine.store, ["sales/orders/20240102-0000020000.csv"])).checked()
    replayed = apply_cdc_files(engine, batch).checked()
    # THEN it is recognised from the snapshot ledger and changes nothing: the delete stays
    assert first.tables[0].files_applied == 1
    assert (again.tables[0].files_applied, again.tables[0].files_skipped) == (0, 1)
    assert later.tables[0].deleted == 1
    assert replayed.tables[0].files_applied == 0
    assert _silver(engine) == {}
    ledger = read_ledger(engine.spark, engine.silver_table(engine.config.tables[0]), whole=True)
    assert ledger.applied == {"sales/orders/20240102-0000010000.csv", "sales/orders/20240102-0000020000.csv"}


def test_upsert_semantics_and_missing_keys(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a loaded row, then an insert of an existing key, an update of a missing key
    # and a delete of a missing key
    engine = make_engine(ORDERS)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    write_csv(table_dir / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "eu", "1", "old", "1.00", ""]])
    ts = "2024-01-02 00:00:01.000000"
    write_csv(
        table_dir / "20240102-0000010000.csv",
        [
            ["I", ts, "eu", "1", "upserted", "2.00", change_sequence(ts, 1)],
            ["U", ts, "us", "7", "inserted", "3.00", change_sequence(ts, 2)],
            ["D", ts, "us", "8", "gone", "4.00", change_sequence(ts, 3)],
        ],
    )
    # WHEN run
    run(engine).checked()
    # THEN inserts upsert, updates insert, deletes of missing keys do nothing
    silver = _silver(engine)
    assert {k: v["status"] for k, v in silver.items()} == {("eu", 1): "upserted", ("us", 7): "inserted"}


def _shuffled_bytes(engine: Engine, action: Callable[[], object]) -> int:
    """The shuffle bytes written by the Spark stages ``action`` runs (from Spark's status store)."""
    spark_context = engine.spark.sparkContext
    context, jvm = spark_context._jsc.sc(), spark_context._jvm  # type: ignore[union-attr]

    def stages() -> dict[int, int]:
        context.listenerBus().waitUntilEmpty()
        every = jvm.java.util.ArrayList()  # no filter: stages in any status  # type: ignore[union-attr]
        no_quantiles = spark_context._gateway.new_array(jvm.double, 0)  # type: ignore[union-attr]
        found, listed = {}, context.statusStore().stageList(every, False, False, no_quantiles, every).iterator()
        while listed.hasNext():
            stage = listed.next()
            found[int(stage.stageId())] = int(stage.shuffleWriteBytes())
        return found

    before = stages()
    action()
    return sum(written for stage, written in stages().items() if stage not in before)


@pytest.mark.parametrize(("driver_write_bytes", "way"), [(8 * 1024 * 1024, DriverRowDelta), (0, RowDelta)])
def test_the_plan_says_by_its_type_whether_the_batch_left_spark(
    make_engine: EngineFactory, tmp_path: Path, driver_write_bytes: int, way: type
) -> None:
    # GIVEN a loaded table and a small batch that updates one key and deletes another, with the
    # driver allowed to write a small batch's files or not
    engine = make_engine(ORDERS).tuned(driver_write_bytes=driver_write_bytes)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    write_csv(
        table_dir / "LOAD00000001.csv",
        [["2024-01-01 00:00:00.000000", "eu", str(i), "old", "1.00", ""] for i in range(3)],
    )
    run(engine).checked()
    ts = "2024-01-02 00:00:01.000000"
    rows = [
        ["U", ts, "eu", "1", "new", "2.00", change_sequence(ts, 1)],
        ["D", ts, "eu", "2", "old", "1.00", change_sequence(ts, 2)],
    ]
    write_csv(table_dir / "20240102-0000010000.csv", rows)
    table = engine.config.tables[0]
    # WHEN it is prepared
    files = files_from_keys(engine.store, ["sales/orders/20240102-0000010000.csv"])
    plan = prepare_batch(engine, table, files, ledger_snapshot=read_state(engine, table).snapshot_id)
    # THEN its data commit's type is the way it takes, and holds the rows that way writes: Arrow
    # collected into the driver, or DataFrames left in Spark
    assert plan.changes is not None
    commit = plan.changes.commit
    assert type(commit) is way
    assert isinstance(commit, DriverRowDelta | RowDelta)
    if isinstance(commit, DriverRowDelta):
        assert isinstance(commit.batch.changes, pa.Table) and isinstance(commit.tombstones, pa.Table)
        counts = (commit.batch.changes.num_rows, commit.tombstones.num_rows)
    else:
        assert isinstance(commit.batch.changes, DataFrame) and isinstance(commit.tombstones, DataFrame)
        counts = (commit.batch.changes.count(), commit.tombstones.count())
    assert counts == (2, 1)
    # AND committed, silver holds the update, not the deleted key, and the delete left its tombstone
    try:
        commit_batch(engine, table, plan, force=False)
    finally:
        commit.release()
    assert {k: r["status"] for k, r in _silver(engine).items()} == {("eu", 0): "old", ("eu", 1): "new"}
    tombstones = engine.spark.table(tombstones_of(engine.silver_table(table)).identifier).collect()
    assert [(r["region"], r["order_id"]) for r in tombstones] == [("eu", 2)]


@pytest.mark.parametrize("one_task", [True, False])
def test_a_small_batch_is_prepared_without_a_shuffle(
    make_engine: EngineFactory, tmp_path: Path, one_task: bool
) -> None:
    # GIVEN a loaded table with tombstones, and a small batch of updates, inserts and deletes in one file,
    # prepared by Spark (the driver, which takes such a batch by default, shuffles nothing either:
    # tests/spark/test_driver_batch.py)
    engine = make_engine(ORDERS).tuned(driver_read_bytes=0)
    if not one_task:
        engine = engine.tuned(single_task_batch_bytes=0, broadcast_batch_bytes=0)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    loaded = [["2024-01-01 00:00:00.000000", "eu", str(i), "old", "1.00", ""] for i in range(20)]
    write_csv(table_dir / "LOAD00000001.csv", loaded)
    ts = "2024-01-02 00:00:01.000000"
    write_csv(table_dir / "20240102-0000010000.csv", [["D", ts, "eu", "0", "old", "1.00", change_sequence(ts, 1)]])
    run(engine).checked()
    ts = "2024-01-02 00:00:02.000000"
    rows = [["U", ts, "eu", str(i), "new", "2.00", change_sequence(ts, i)] for i in range(1, 10)]
    rows += [
        ["I", ts, "us", "1", "new", "3.00", change_sequence(ts, 10)],
        ["D", ts, "eu", "5", "old", "1.00", change_sequence(ts, 11)],
    ]
    write_csv(table_dir / "20240102-0000020000.csv", rows)
    batch = files_from_keys(engine.store, ["sales/orders/20240102-0000020000.csv"])
    # WHEN it is prepared (read, de-duplicated, classified against silver and the tombstones)
    plans = []
    table = engine.config.tables[0]
    at = read_state(engine, table).snapshot_id
    written = _shuffled_bytes(engine, lambda: plans.append(prepare_batch(engine, table, batch, ledger_snapshot=at)))
    # THEN it is classified right, and without a shuffle in one task (a bigger batch shuffles)
    changes = plans[0].changes
    assert changes is not None
    assert {e: n for e, n in changes.effects.items() if n} == {"update": 8, "insert": 1, "delete": 1}
    assert (written == 0) is one_task


def test_full_load_twice_leaves_the_same_table(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a loaded table
    engine = make_engine(ORDERS)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    write_csv(
        table_dir / "LOAD00000001.csv",
        [["2024-01-01 00:00:00.000000", "eu", str(i), "s", "1.00", ""] for i in range(5)],
    )
    table = engine.config.tables[0]
    full_load(engine, [table]).checked()
    # WHEN the full load runs again, and once more with reload
    second = full_load(engine, [table]).checked().tables[0]
    third = full_load(engine, [table], reload=True).checked().tables[0]
    # THEN the table holds the rows once
    assert second.note == "already loaded"
    assert third.files_applied == 1
    assert sorted(k[1] for k in _silver(engine)) == [0, 1, 2, 3, 4]


def _kinds(engine: Engine) -> list[str | None]:
    """The ledger kinds of the table's current lineage, oldest first."""
    table = engine.silver_table(engine.config.tables[0])
    rows = engine.spark.sql(
        f"SELECT s.summary['cdclake.kind'] AS kind FROM {table.metadata('snapshots')} s "
        f"JOIN {table.metadata('history')} h ON s.snapshot_id = h.snapshot_id "
        "WHERE h.is_current_ancestor ORDER BY h.made_current_at"
    ).collect()
    return [r["kind"] for r in rows]


def test_a_clean_full_load_is_staged_then_recorded(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN LOAD files with valid rows and unique keys, and a CDC file written before the load
    engine = make_engine(ORDERS)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    write_csv(table_dir / "LOAD00000001.csv", [["2024-01-01 00:00:05.000000", "eu", "1", "s", "1.00", ""]])
    write_csv(table_dir / "LOAD00000002.csv", [["2024-01-01 00:00:06.000000", "us", "2", "t", "2.00", ""]])
    ts = "2024-01-01 00:00:00.500000"
    write_csv(table_dir / "20240101-0000000000.csv", [["U", ts, "eu", "1", "old", "0.50", change_sequence(ts, 1)]])
    # WHEN loaded
    report = full_load(engine, [engine.config.tables[0]]).checked().tables[0]
    # THEN the data commit is staged and a second commit records the load, with the superseded file
    assert _kinds(engine) == ["full-load-staged", "full-load"]
    ledger = read_ledger(engine.spark, engine.silver_table(engine.config.tables[0]))
    assert ledger.full_load_done
    assert ledger.applied == {
        "sales/orders/LOAD00000001.csv", "sales/orders/LOAD00000002.csv", "sales/orders/20240101-0000000000.csv"
    }  # fmt: skip
    assert (report.changes_read, report.inserted, report.files_skipped) == (2, 2, 1)
    assert {k: v["status"] for k, v in _silver(engine).items()} == {("eu", 1): "s", ("us", 2): "t"}


@pytest.mark.parametrize("keys_per_task", [500_000, 0], ids=["one-task-check", "shuffled-check"])
def test_a_full_load_with_a_repeated_key_keeps_its_last_row(
    make_engine: EngineFactory, tmp_path: Path, keys_per_task: int
) -> None:
    # GIVEN a key loaded twice (a LOAD file written again after a restarted load); the check for
    # repeated keys reading every key in one task, or shuffling them (tables over its limit)
    engine = make_engine(ORDERS).tuned(one_task_keys=keys_per_task)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    ts = "2024-01-01 00:00:00.000000"
    first = [[ts, "eu", "1", "first", "1.00", ""], [ts, "eu", "2", "once", "1.00", ""]]
    write_csv(table_dir / "LOAD00000001.csv", first)
    write_csv(table_dir / "LOAD00000002.csv", [[ts, "eu", "1", "second", "2.00", ""]])
    # WHEN loaded
    full_load(engine, engine.config.tables[:1]).checked()
    # THEN each key is held once, the later file winning, in one recorded load
    assert engine.spark.table(engine.silver_table(engine.config.tables[0]).identifier).count() == 2
    assert {k: v["status"] for k, v in _silver(engine).items()} == {("eu", 1): "second", ("eu", 2): "once"}
    assert _kinds(engine)[-1] == "full-load"
    assert read_ledger(engine.spark, engine.silver_table(engine.config.tables[0])).full_load_done


KEYED_BY_ID = """
bronze: {timestamp_column: commit_ts}
tables:
  sales.items:
    primary_key: [id]
    columns: {id: bigint, status: string}
"""
# Keys around the edges of Spark's bitmaps (32,768 values each; 0 and negatives count down).
EDGE_KEYS = [-(2**63), -32769, -32768, -1, 0, 1, 32767, 32768, 32769, 65536, 70000, 2**63 - 1]


@pytest.mark.parametrize("repeated", [None, -32769, 32769, 0], ids=["unique", "negative", "positive", "zero"])
def test_repeated_integer_keys_are_found_exactly_by_bitmaps(spark: SparkSession, repeated: int | None) -> None:
    # GIVEN distinct integer keys at the edges of the bitmaps' ranges, with one of them again or not
    keys = spark.createDataFrame([(k,) for k in [*EDGE_KEYS, *([repeated] if repeated is not None else [])]], "id long")
    # WHEN checked with bitmaps
    found = has_repeated_integers(keys.repartition(3), "id")
    # THEN exactly a repeated key is found
    assert found == (repeated is not None)


def test_a_key_range_counts_the_bitmaps_it_can_fall_in() -> None:
    # keys 0 .. 9,999,999 fall in bitmaps 0 .. 306 (bitmap 0 holds 0 and the 32,767 values below it)
    assert key_buckets(None, None) == 0
    assert key_buckets(0, 9_999_999) == 307  # the bench's 10M keys: a few MiB of bitmaps
    assert key_buckets(-(2**63), 2**63 - 1) > MAX_KEY_BUCKETS  # sparse keys are sorted instead


@pytest.mark.parametrize("repeat", [False, True], ids=["unique", "repeated"])
def test_a_full_load_of_one_integer_key_checks_its_keys_with_bitmaps(
    make_engine: EngineFactory, tmp_path: Path, caplog: pytest.LogCaptureFixture, repeat: bool
) -> None:
    # GIVEN LOAD files keyed by one bigint column (keys across a few bitmaps: a dense range), the
    # second repeating key 32769 or not; more keys than one task checks (the bitmap check's case)
    engine = make_engine(KEYED_BY_ID).tuned(one_task_keys=0)
    table_dir = tmp_path / "bronze" / "sales" / "items"
    ts, keys = "2024-01-01 00:00:00.000000", EDGE_KEYS[1:-1]
    write_csv(table_dir / "LOAD00000001.csv", [[ts, str(k), "first"] for k in keys])
    write_csv(table_dir / "LOAD00000002.csv", [[ts, "32769", "second"]] if repeat else [[ts, "5", "second"]])
    # WHEN loaded
    report = full_load(engine, engine.config.tables[:1]).checked().tables[0]
    # THEN a repeated key sends the load down the careful path, which keeps its last row; every
    # key is held once and the load is recorded
    silver = engine.spark.table(engine.silver_table(engine.config.tables[0]).identifier)
    statuses = {r["id"]: r["status"] for r in silver.collect()}
    assert ("keeping each key's last row" in caplog.text) == repeat
    assert silver.count() == len(statuses) == len(keys) + (0 if repeat else 1)
    assert statuses[32769] == ("second" if repeat else "first")
    assert report.inserted == len(statuses)
    assert read_ledger(engine.spark, engine.silver_table(engine.config.tables[0])).full_load_done


def test_a_crash_after_the_staged_load_loads_again(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a loaded table whose reload crashed after its staged data commit
    engine = make_engine(ORDERS)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    write_csv(table_dir / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "eu", "1", "s", "1.00", ""]])
    table, silver = engine.config.tables[0], engine.silver_table(engine.config.tables[0])
    full_load(engine, [table]).checked()
    rows = engine.spark.table(silver.identifier)
    replace_table(engine.spark, silver, rows, [LoadedFile("sales/orders/LOAD00000001.csv")], kind=KIND_FULL_LOAD_STAGED)
    # WHEN the ledger is read and the pipeline runs without reload
    assert not read_ledger(engine.spark, silver).full_load_done
    run(engine).checked()
    # THEN the load was done again and recorded
    assert _kinds(engine)[-2:] == ["full-load-staged", "full-load"]
    assert read_ledger(engine.spark, silver).full_load_done
    assert list(_silver(engine)) == [("eu", 1)]


def test_a_file_of_bad_rows_is_held_naming_file_rows_and_reasons(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a CDC file whose second data row has an unknown Op and whose third has a NULL key
    engine = make_engine(ORDERS)
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    ts = "2024-01-02 00:00:01.000000"
    write_csv(
        table_dir / "20240102-0000010000.csv",
        [["I", ts, "eu", "1", "ok", "1.00", "1"], ["Z", ts, "eu", "2", "bad", "1.00", "2"],
         ["I", ts, "eu", None, "bad", "1.00", "3"]],
    )  # fmt: skip
    # WHEN applied
    report = run(engine)
    # THEN the file is held (the run does not fail), its reason names the rows and why, nothing was committed
    assert report.failures == [] and report.exit_code == 1
    [held] = [t for t in report.tables if t.quarantined_files]
    assert held.quarantined_files == ["sales/orders/20240102-0000010000.csv"]
    assert "2 of 3 rows cannot be applied (data row 2: unknown Op 'Z'" in held.note
    assert "data row 3: primary key column order_id is NULL" in held.note
    assert read_ledger(engine.spark, engine.silver_table(engine.config.tables[0])).applied == frozenset()


def test_append_only_and_keyless_tables(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN an append-only history table and a table without a key that is not append-only
    config = """
bronze: {timestamp_column: ts}
tables:
  bank.history: {append_only: true, columns: {account: int, delta: int}}
  bank.scratch: {columns: {a: int}}
"""
    engine = make_engine(config)
    bronze = tmp_path / "bronze"
    write_csv(bronze / "bank" / "history" / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "10"]])
    write_csv(
        bronze / "bank" / "history" / "20240102-0000010000.csv",
        [["I", "2024-01-02 00:00:01.000000", "1", "5"], ["I", "2024-01-02 00:00:01.000000", "1", "5"]],
    )
    write_csv(bronze / "bank" / "scratch" / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1"]])
    write_csv(bronze / "other" / "table" / "LOAD00000001.csv", [["x"]])
    # WHEN run
    report = run(engine).checked()
    # THEN every history row is kept with its operation; the keyless table is skipped with a
    # reason; the unconfigured source is reported
    table = engine.silver_table(engine.config.tables[0])
    rows = sorted(
        tuple(r) for r in engine.spark.table(table.identifier).select("account", "delta", "cdc_operation").collect()
    )
    assert rows == [(1, 5, "I"), (1, 5, "I"), (1, 10, "I")]
    assert report.skipped_tables == [
        "bank.scratch has no primary key: skipped (declare primary_key, or append_only: true to keep every change row)"
    ]
    assert report.unconfigured == ["other.table"]


def test_a_bad_row_in_an_append_only_full_load_is_quarantined_not_loaded(
    make_engine: EngineFactory, tmp_path: Path
) -> None:
    # GIVEN an append-only table whose LOAD file holds a good row and a value that is no int: the
    # one-scan load fails at a flagged row through the operation column it writes
    config = """
bronze: {timestamp_column: ts}
quarantine: {max_bad_row_ratio: 1.0}
tables:
  bank.history: {append_only: true, columns: {account: int, delta: int}}
"""
    engine = make_engine(config)
    load = tmp_path / "bronze" / "bank" / "history" / "LOAD00000001.csv"
    write_csv(load, [["2024-01-01 00:00:00.000000", "1", "10"], ["2024-01-01 00:00:00.000000", "2", "ten"]])
    # WHEN run
    report = run(engine)
    # THEN the bad row is held with its reason and only the good one is in silver
    assert [t.rows_quarantined for t in report.tables] == [1]
    table = engine.silver_table(engine.config.tables[0])
    rows = [tuple(r) for r in engine.spark.table(table.identifier).select("account", "delta").collect()]
    assert rows == [(1, 10)]


def test_cleaning_rules_shape_the_silver_schema(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN cast, derive, rename and drop rules, and a key that is renamed
    config = """
bronze: {timestamp_column: ts}
tables:
  crm.people:
    target: people_silver
    primary_key: [pid]
    columns: {pid: int, born: string, place: string}
    clean:
      cast: {born: date, ts: timestamp}
      derive: {city: "split(place, ', *')[0]"}
      rename: {pid: person_id}
      drop: [place]
"""
    engine = make_engine(config)
    bronze = tmp_path / "bronze" / "crm" / "people"
    write_csv(bronze / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "1990-05-01", "Oslo, Norway"]])
    write_csv(
        bronze / "20240102-0000010000.csv", [["U", "2024-01-02 00:00:01.000000", "1", "1990-05-02", "Bergen, Norway"]]
    )
    # WHEN run
    run(engine).checked()
    # THEN silver has the cleaned columns and the update matched on the renamed key
    table = engine.silver_table(engine.config.tables[0])
    frame = engine.spark.table(table.identifier)
    assert frame.columns == ["ts", "person_id", "born", "city", "_cdc_order"]
    assert [tuple(r)[1:4] for r in frame.collect()] == [(1, date(1990, 5, 2), "Bergen")]


def test_a_value_that_does_not_cast_is_an_error_not_a_null(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a cleaning cast to date and a value that is not a date
    config = """
bronze: {timestamp_column: ts}
tables:
  crm.people:
    primary_key: [pid]
    columns: {pid: int, born: string}
    clean: {cast: {born: date}}
"""
    engine = make_engine(config)
    write_csv(
        tmp_path / "bronze" / "crm" / "people" / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "1", "yesterday"]]
    )
    # WHEN loaded THEN the batch stops naming the value
    with pytest.raises(BadInputError, match="value 'yesterday' of column born is not a valid date"):
        run(engine).checked()


def _loaded_then_updated(tmp_path: Path, loaded: str, updated: str) -> Path:
    """Order (eu, 1) in a LOAD file with status ``loaded``, and a CDC file of 2 January updating it to
    ``updated``; sales.orders's bronze folder."""
    table_dir = tmp_path / "bronze" / "sales" / "orders"
    write_csv(table_dir / "LOAD00000001.csv", [["2024-01-01 00:00:00.000000", "eu", "1", loaded, "1.00", ""]])
    ts = "2024-01-02 00:00:01.000000"
    write_csv(table_dir / "20240102-0000010000.csv", [["U", ts, "eu", "1", updated, "2.00", change_sequence(ts, 1)]])
    return table_dir


def test_cdc_before_the_full_load_is_refused(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN LOAD files that were not applied and a CDC manifest for the same table
    engine = make_engine(ORDERS)
    _loaded_then_updated(tmp_path, "s", "t")
    batch = files_from_keys(engine.store, ["sales/orders/20240102-0000010000.csv"])
    # WHEN the CDC batch is applied first THEN it is refused, and nothing was created
    with pytest.raises(FullLoadPendingError, match="run the full load before its CDC files"):
        apply_cdc_files(engine, batch).checked()
    assert not read_ledger(engine.spark, engine.silver_table(engine.config.tables[0])).full_load_done
    # AND after the full load the same batch applies
    run(engine).checked()
    assert _silver(engine)[("eu", 1)]["status"] == "t"


def test_a_reload_does_not_replay_older_cdc_files_over_newer_rows(make_engine: EngineFactory, tmp_path: Path) -> None:
    # GIVEN a loaded table, a CDC file, and then a new full load taken later (after a CDC gap)
    engine = make_engine(ORDERS)
    table_dir = _loaded_then_updated(tmp_path, "v1", "v2")
    run(engine).checked()
    write_csv(table_dir / "LOAD00000001.csv", [["2024-01-03 00:00:00.000000", "eu", "1", "v3", "3.00", ""]])
    # WHEN the table is reloaded and the pipeline runs again
    reload = full_load(engine, [engine.config.tables[0]], reload=True).checked().tables[0]
    run(engine).checked()
    # THEN the CDC file written before the new load counts as contained in it: the load's value stays
    assert reload.files_skipped == 1
    assert _silver(engine)[("eu", 1)]["status"] == "v3"
